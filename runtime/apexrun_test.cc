// apexrun_test.cc - the apexrun CLI end to end: ONNX node tests from libonnx-testdata run
// through a plan file (compiled here: load, infer_shapes, memplan, emit) and through
// on-the-fly compilation of the .onnx, compared with their output_K.pb; exit codes and
// one-line errors for bad usage and bad input.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
#include "compiler/emit_plan.h"
#include "compiler/onnx_load.h"
#include "passes/infer_shapes.h"
#include "passes/memplan.h"
}

namespace {

const char *kNodeTests = "/usr/share/libonnx-testdata/data/node";

std::string tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

struct Result {
  int code;
  std::string out;  // stdout and stderr
};

Result apexrun(const std::string &args) {
  std::string cmd = "./runtime/apexrun " + args + " 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  Result r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return r;
}

double eps_of(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return 9.765625e-4;
    case APX_DT_BF16: return 7.8125e-3;
    case APX_DT_F64: return 2.220446049250313e-16;
    default: return 1.1920928955078125e-7;
  }
}

double as_double(const ApxTensorConst &t, int64_t i) {
  switch (t.dtype) {
    case APX_DT_F32: return ((const float *)t.data)[i];
    case APX_DT_F64: return ((const double *)t.data)[i];
    case APX_DT_I64: return (double)((const int64_t *)t.data)[i];
    case APX_DT_I32: return ((const int32_t *)t.data)[i];
    case APX_DT_BOOL:
    case APX_DT_U8: return ((const uint8_t *)t.data)[i];
    default: return NAN;
  }
}

// Compares every output_K.pb of a test data set with what apexrun wrote in out_dir.
// Tolerance from the compute dtype's epsilon (the expected output's own dtype unless
// given): |got - want| <= 16 eps (1 + |want|).
void expect_outputs_match(const std::string &case_dir, const std::string &out_dir,
                          ApxDType compute = APX_DT_UNDEFINED) {
  for (int k = 0;; k++) {
    std::string want_path = case_dir + "/test_data_set_0/output_" + std::to_string(k) + ".pb";
    struct stat st;
    if (stat(want_path.c_str(), &st) != 0) {
      EXPECT_GT(k, 0) << "no expected outputs in " << case_dir;
      break;
    }
    std::string got_path = out_dir + "/output_" + std::to_string(k) + ".pb";
    ApxArena a;
    apx_arena_init(&a);
    ApxDiag d;
    apx_diag_init(&d);
    ApxTensorConst want, got;
    const char *wn = nullptr, *gn = nullptr;
    ASSERT_EQ(apx_onnx_read_tensor_file(want_path.c_str(), &a, &want, &wn, &d), 0) << d.msg;
    ASSERT_EQ(apx_onnx_read_tensor_file(got_path.c_str(), &a, &got, &gn, &d), 0) << d.msg;
    ASSERT_EQ(got.dtype, want.dtype) << got_path;
    ASSERT_EQ(got.rank, want.rank) << got_path;
    int64_t n = 1;
    for (int i = 0; i < want.rank; i++) {
      ASSERT_EQ(got.dims[i], want.dims[i]) << got_path << " dim " << i;
      n *= want.dims[i];
    }
    ASSERT_GT(n, 0);
    double tol = 16 * eps_of(compute != APX_DT_UNDEFINED ? compute : want.dtype);
    for (int64_t i = 0; i < n; i++) {
      double g = as_double(got, i), w = as_double(want, i);
      ASSERT_LE(std::fabs(g - w), tol * (1 + std::fabs(w))) << got_path << " element " << i;
    }
    if (wn && gn) {
      EXPECT_STREQ(gn, wn);
    }
    apx_arena_free(&a);
  }
}

// Compiles model.onnx of a node test to a plan file with the library passes apexrun relies on.
std::string compile_to_plan(const std::string &case_dir, const std::string &name) {
  ApxGraph g;
  apx_graph_init(&g, (case_dir + "/model.onnx").c_str());
  ApxDiag d;
  apx_diag_init(&d);
  ApxOptions o;
  apx_options_init(&o);
  o.training = 0;
  std::string plan = tmp() + "/" + name + ".apx";
  EXPECT_EQ(apx_onnx_load_file(&g, (case_dir + "/model.onnx").c_str(), &o, &d), 0) << d.msg;
  EXPECT_GE(pass_infer_shapes(&g, &o, &d), 0) << d.msg;
  EXPECT_EQ(pass_memplan(&g, &o, &d), 0) << d.msg;
  EXPECT_EQ(apx_emit_plan_file(&g, &o, plan.c_str(), &d), 0) << d.msg;
  apx_graph_free(&g);
  return plan;
}

class NodeTest : public ::testing::TestWithParam<const char *> {};

}  // namespace

TEST_P(NodeTest, ThroughAPlanFile) {
  std::string dir = std::string(kNodeTests) + "/" + GetParam();
  std::string plan = compile_to_plan(dir, GetParam());
  std::string out = tmp() + "/out_plan_" + GetParam();
  Result r = apexrun("infer " + plan + " --input-dir " + dir + "/test_data_set_0 --output-dir " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  expect_outputs_match(dir, out);
}

TEST_P(NodeTest, CompilingTheOnnxModelAtO0) {
  std::string dir = std::string(kNodeTests) + "/" + GetParam();
  std::string out = tmp() + "/out_onnx_" + GetParam();
  Result r = apexrun("infer " + dir + "/model.onnx -O0 --threads 1 --input-dir " + dir +
                  "/test_data_set_0 --output-dir " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  expect_outputs_match(dir, out);
}

INSTANTIATE_TEST_SUITE_P(Onnx, NodeTest,
                         ::testing::Values("test_gemm_default_matrix_bias", "test_matmul_2d",
                                           "test_relu", "test_add_bcast", "test_softmax_axis_1",
                                           "test_transpose_default", "test_sigmoid"));

// The example models (forward + loss) against onnxruntime's fp32 outputs
// (tests/fixtures/ort, recorded by tests/ort/record_fixtures.py).
struct ExampleCase {
  const char *model, *level;
  ApxDType compute;
};

class Example : public ::testing::TestWithParam<ExampleCase> {};

TEST_P(Example, MatchesOnnxruntime) {
  const ExampleCase &c = GetParam();
  std::string dir = std::string("tests/fixtures/ort/") + c.model;
  std::string out = tmp() + "/example_" + c.model + c.level;
  for (size_t i = tmp().size() + 1; i < out.size(); i++)
    if (!isalnum((unsigned char)out[i])) out[i] = '_';
  Result r = apexrun("infer " + dir + "/model.onnx " + c.level + " --input-dir " + dir +
                     "/test_data_set_0 --output-dir " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  expect_outputs_match(dir, out, c.compute);
}

INSTANTIATE_TEST_SUITE_P(Ort, Example,
                         ::testing::Values(ExampleCase{"mlp", "-O0", APX_DT_F32},
                                           ExampleCase{"cnn", "-O0", APX_DT_F32},
                                           ExampleCase{"transformer", "-O0", APX_DT_F32},
                                           ExampleCase{"mlp", "-O2", APX_DT_F16},
                                           ExampleCase{"cnn", "-O1", APX_DT_F16},
                                           ExampleCase{"transformer", "-O2", APX_DT_F16},
                                           ExampleCase{"transformer", "-O2 --half=bf16", APX_DT_BF16}),
                         [](const ::testing::TestParamInfo<ExampleCase> &i) {
                           std::string n = std::string(i.param.model) + "_" + i.param.level;
                           for (char &ch : n)
                             if (!isalnum((unsigned char)ch)) ch = '_';
                           return n;
                         });

TEST(Apexrun, HelpAndVersion) {
  Result h = apexrun("--help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("apexrun infer MODEL.onnx|PLAN.apx"), std::string::npos) << h.out;
  Result v = apexrun("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("plan format 2"), std::string::npos) << v.out;
  // like --help, in any position and for both commands
  for (const char *args : {"model.apx --version", "infer model.onnx --version", "model.apx -h"}) {
    Result r = apexrun(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find(strstr(args, "version") ? "(plan format" : "usage: apexrun"), std::string::npos)
        << args << ": " << r.out;
  }
}

// --device and --threads work for training too (cmd_train parses them): the help lists them
// under both commands, not only under infer.
TEST(Apexrun, HelpListsTheSharedOptionsForBothCommands) {
  Result h = apexrun("--help");
  ASSERT_EQ(h.code, 0);
  size_t both = h.out.find("\nboth commands:\n"), train = h.out.find("\ntraining:"),
         infer = h.out.find("\ninfer:");
  ASSERT_NE(both, std::string::npos) << h.out;
  ASSERT_NE(train, std::string::npos) << h.out;
  ASSERT_NE(infer, std::string::npos) << h.out;
  for (const char *opt : {"  --device ", "  --threads N "}) {
    size_t at = h.out.find(opt);
    EXPECT_TRUE(at > both && at < train) << opt << " is not under 'both commands':\n" << h.out;
    EXPECT_EQ(h.out.find(opt, at + 1), std::string::npos) << opt << " listed twice";
  }
  EXPECT_NE(h.out.find("  -q, --quiet "), std::string::npos) << h.out;
}

// Training options may come before the plan: `apexrun -q PLAN ...` reaches the plan check
// instead of "unknown option '-q'".
TEST(Apexrun, TrainingOptionsBeforeThePlan) {
  std::string missing = tmp() + "/absent.apx";
  for (std::string args : {"-q " + missing + " --data d --steps 3", "--steps 3 --data d " + missing,
                           "--threads 1 --device cpu --seed 0 " + missing + " --data d --steps 3"}) {
    Result r = apexrun(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_EQ(r.out, missing + ": cannot open plan: No such file or directory\n") << args;
  }
}

// A model compiled on the fly has no plan file: errors about the plan name the model file.
TEST(Apexrun, InferErrorsNameTheModelFile) {
  std::string dir = "tests/fixtures/ort/mlp";
  Result r = apexrun("infer " + dir + "/model.onnx --device tpu --input-dir " + dir + "/test_data_set_0 --output-dir " +
                     tmp() + "/o_dev");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.find(dir + "/model.onnx: "), 0u) << r.out;
  EXPECT_EQ(r.out.find("<plan>"), std::string::npos) << r.out;
}

// --dim bindings on the on-the-fly compile path (their names live in the command's arena and
// are freed with it). A functional check: LeakSanitizer did not report the former strndup leak
// (the pointers stayed reachable from stale stack memory), so this does not catch that leak.
TEST(Apexrun, InferWithDimBindingsExitsCleanly) {
  std::string dir = "tests/fixtures/ort/mlp";
  Result r = apexrun("infer " + dir + "/model.onnx -O0 --dim N=32 --dim M=4 --input-dir " + dir +
                     "/test_data_set_0 --output-dir " + tmp() + "/o_dim");
  EXPECT_EQ(r.code, 0) << r.out;
  expect_outputs_match(dir, tmp() + "/o_dim", APX_DT_F32);
}

TEST(Apexrun, BadUsageExitsWith2AndOneLine) {
  struct {
    const char *args, *want;
  } cases[] = {
      {"", "apexrun: no plan given (usage: apexrun PLAN.apx --data DIR --steps N ...; see apexrun --help)\n"},
      {"-q infer model.onnx --input-dir d --output-dir o",
       "apexrun: 'infer' must come first: apexrun infer MODEL ... (see apexrun --help)\n"},
      {"model.apx --data d --steps 3 infer", "'infer' must come first"},
      {"--bogus", "unknown option '--bogus'"},
      {"infer", "infer needs a model"},
      {"infer m.onnx --output-dir /tmp/x", "infer needs --input-dir"},
      {"infer m.onnx --input-dir /tmp --output-dir /tmp/x --threads 0", "--threads"},
      {"infer m.onnx --input-dir /tmp --output-dir /tmp/x --half=fp8", "--half"},
      {"infer m.onnx --input-dir /tmp --output-dir /tmp/x --frobnicate", "unknown option"},
      {"model.apx --data d --steps 3", "model.apx: cannot open plan"},
      {"model.apx --steps 3", "training needs --data DIR"},
      {"model.apx --data d", "training needs --steps N"},
      {"model.apx --data d --steps 3 --resume", "--resume needs --checkpoint-dir D"},
      {"model.apx --data d --steps -1", "--steps"},
  };
  for (auto &c : cases) {
    Result r = apexrun(c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << c.args << ": " << r.out;
  }
}

// The spellings users bring from Apex and PyTorch: underscores for dashes (training and infer),
// infer's --opt-level O0 / --opt_level=O0; an unknown option gets "did you mean" the nearest
// real one, an apexc option given to apexrun says that the plan fixes it; one line, exit 2.
TEST(Apexrun, FamiliarSpellingsAndDidYouMean) {
  struct {
    const char *args, *want;
  } cases[] = {
      {"m.apx --data d --steps 3 --lrr 0.1", "apexrun: unknown option '--lrr'; did you mean --lr? (see apexrun --help)\n"},
      {"m.apx --data d --steps 3 --weight-decy=0.1",
       "apexrun: unknown option '--weight-decy=0.1'; did you mean --weight-decay? (see apexrun --help)\n"},
      {"m.apx --data d --steps 3 --checkpoint_dri d", "did you mean --checkpoint-dir?"},
      {"m.apx --data d --steps 3 --momentum 0.9",
       "apexrun: '--momentum' is an apexc option: the plan fixes it (recompile the model: apexc MODEL.onnx "
       "--momentum ...) (see apexrun --help)\n"},
      {"m.apx --data d --steps 3 --loss_scale=128", "apexrun: '--loss-scale' is an apexc option: the plan fixes it"},
      {"m.apx --data d --steps 3 --init-scale 1024", "apexrun: '--init-scale' is an apexc option"},
      {"m.apx --data d --steps 3 -O2", "apexrun: '-O2' is an apexc option"},
      {"m.apx --data d --steps 3 --bananas", "apexrun: unknown option '--bananas' (see apexrun --help)\n"},
      {"infer m.onnx --input-dir d --output-dir o --input-dri d",
       "apexrun: infer: unknown option '--input-dri'; did you mean --input-dir? (see apexrun --help)\n"},
      {"infer m.onnx --input-dir d --output-dir o --opt-level O5", "--opt-level: expected O0, O1, O2 or O3, got 'O5'"},
      {"m.apx --data d --steps 3 --lr-schedule step", "--lr-schedule: expected constant, cosine or linear, got 'step'"},
      {"m.apx --data d --steps 3 --lr -1", "--lr: '-1' is not a number in [0, 1e+06]"},
      {"m.apx --data d --steps 3 --clip-grad-norm nan", "--clip-grad-norm: 'nan' is not a number"},
      {"m.apx --data d --steps 3 --total-steps 0", "--total-steps: '0' is not an integer >= 1"},
      {"m.apx --data d --steps 3 --progress-every 0", "--progress-every: '0' is not an integer >= 1"},
  };
  for (auto &c : cases) {
    Result r = apexrun(c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << c.args << ": " << r.out;
  }
  // underscores and the run-time hyperparameters parse: the run gets as far as the plan
  std::string missing = tmp() + "/absent.apx";
  Result r = apexrun("--check_replicas 2 --weight_decay 0.1 --lr_schedule cosine --warmup_steps 2 --total_steps 10 "
                     "--clip_grad_norm=1 --progress_every 5 --lr=0.01 " + missing + " --data d --steps 3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, missing + ": cannot open plan: No such file or directory\n");
  // infer's opt level in Apex's spelling compiles the model as -O0 does
  std::string dir = "tests/fixtures/ort/mlp";
  for (const char *lvl : {"--opt-level O0", "--opt_level=O0"}) {
    r = apexrun("infer " + dir + "/model.onnx " + lvl + " --input_dir " + dir + "/test_data_set_0 --output-dir " +
                tmp() + "/o_lvl");
    EXPECT_EQ(r.code, 0) << lvl << ": " << r.out;
    expect_outputs_match(dir, tmp() + "/o_lvl", APX_DT_F32);
  }
  // the help lists the run-time hyperparameters and the progress options
  Result h = apexrun("--help");
  for (const char *opt : {"  --lr X ", "  --weight-decay W ", "  --lr-schedule S ", "  --warmup-steps N ",
                          "  --total-steps N ", "  --clip-grad-norm N ", "  --progress-every N "})
    EXPECT_NE(h.out.find(opt), std::string::npos) << opt << " is not in --help";
}

// --output-dir is checked before the model runs: a regular file there is bad usage (exit 2,
// one line); a missing folder is created.
TEST(Apexrun, InferOutputDirIsCheckedBeforeRunning) {
  std::string dir = "tests/fixtures/ort/mlp";
  std::string afile = tmp() + "/outdir_afile";
  FILE *f = fopen(afile.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  const std::string common = "infer " + dir + "/model.onnx -O0 --input-dir " + dir + "/test_data_set_0 --output-dir ";
  Result r = apexrun(common + afile + " --repeat 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, afile + ": not a folder (--output-dir)\n") << "(--repeat: nothing ran before the check)";
  r = apexrun(common + afile + "/sub");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, afile + "/sub: cannot create the output folder: Not a directory\n");
  std::string fresh = tmp() + "/outdir_fresh";
  r = apexrun(common + fresh);
  EXPECT_EQ(r.code, 0) << r.out;
  expect_outputs_match(dir, fresh, APX_DT_F32);
}

TEST(Apexrun, BadInputsExitWith2) {
  std::string dir = std::string(kNodeTests) + "/test_gemm_default_matrix_bias";
  std::string plan = compile_to_plan(dir, "gemm_for_bad_inputs");
  // missing input folder
  Result r = apexrun("infer " + plan + " --input-dir " + tmp() + "/nowhere --output-dir " + tmp() + "/o1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("nowhere: no such folder (--input-dir)"), std::string::npos) << r.out;
  // inputs of the wrong shape: another node test's data
  std::string other = std::string(kNodeTests) + "/test_relu/test_data_set_0";
  r = apexrun("infer " + plan + " --input-dir " + other + " --output-dir " + tmp() + "/o2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("input 0 ('a'): expected"), std::string::npos) << r.out;
  // a corrupt plan
  std::string bad = tmp() + "/corrupt.apx";
  FILE *f = fopen(bad.c_str(), "wb");
  fputs("APXPLAN", f);
  fputc(0, f);
  for (int i = 0; i < 100; i++) fputc(i, f);
  fclose(f);
  r = apexrun("infer " + bad + " --input-dir " + dir + "/test_data_set_0 --output-dir " + tmp() + "/o3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("corrupt.apx:"), std::string::npos) << r.out;
  // a missing model
  r = apexrun("infer " + tmp() + "/none.onnx --input-dir " + dir + " --output-dir " + tmp() + "/o4");
  EXPECT_EQ(r.code, 2) << r.out;
  // an unknown device
  r = apexrun("infer " + plan + " --device tpu --input-dir " + dir + "/test_data_set_0 --output-dir " +
              tmp() + "/o5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown device 'tpu'"), std::string::npos) << r.out;
}
