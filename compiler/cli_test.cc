// cli_test.cc - apexc argument parsing: opt-level presets, explicit overrides, Apex's invalid
// combinations, contradictory flags, outputs that would overwrite the model, and usage errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "compiler/cli.h"
}

namespace {

struct Parsed {
  ApxOptions o;
  ApxCliArgs a;
  char err[1024];
  int rc;
  Parsed() { memset(&a, 0, sizeof a); }
  Parsed(Parsed &&other) : o(other.o), a(other.a), rc(other.rc) {
    memcpy(err, other.err, sizeof err);
    memset(&other.a, 0, sizeof other.a);  // the strings arena moves with it
  }
  Parsed(const Parsed &) = delete;
  ~Parsed() { apx_cli_args_free(&a); }
};

Parsed parse(std::vector<const char *> args) {
  args.insert(args.begin(), "apexc");
  Parsed p;
  p.rc = apx_cli_parse((int)args.size(), const_cast<char **>(args.data()), &p.o, &p.a, p.err,
                       sizeof p.err);
  return p;
}

}  // namespace

TEST(Cli, O0IsFp32WithUnitLossScale) {
  Parsed p = parse({"m.onnx", "-O0"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.cast_model_type, APX_DT_F32);
  EXPECT_EQ(p.o.patch_lists, APX_TRI_OFF);
  EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(p.o.loss_scale, 1.0f);
}

// The fusion log counts kernels and bytes per step (a walk over the graph) only for the two
// reports that print them.
TEST(Cli, FusionTrafficIsCountedOnlyForTheReports) {
  EXPECT_EQ(parse({"m.onnx", "-O2"}).o.fusion_traffic, 0);
  EXPECT_EQ(parse({"m.onnx", "-O2", "--fusion-report"}).o.fusion_traffic, 1);
  EXPECT_EQ(parse({"m.onnx", "-O2", "--explain"}).o.fusion_traffic, 1);
  EXPECT_EQ(parse({"m.onnx", "-O2", "--explain=json"}).o.fusion_traffic, 0);
}

TEST(Cli, O1PatchesListsWithDynamicScale) {
  Parsed p = parse({"m.onnx"});  // O1 is the default
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.opt_level, APX_O1);
  EXPECT_EQ(p.o.patch_lists, APX_TRI_ON);
  EXPECT_EQ(p.o.cast_model_type, APX_DT_F32);
  EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
  EXPECT_EQ(p.o.loss_scale, 65536.0f);
  EXPECT_EQ(p.a.write_plan, 1);
  EXPECT_EQ(p.a.summary, 1);
}

TEST(Cli, O2KeepsBatchNormFp32WithMasterWeights) {
  Parsed p = parse({"m.onnx", "-O2"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.cast_model_type, APX_DT_F16);
  EXPECT_EQ(p.o.keep_batchnorm_fp32, APX_TRI_ON);
  EXPECT_EQ(p.o.master_weights, APX_TRI_ON);
  EXPECT_EQ(p.o.patch_lists, APX_TRI_OFF);
}

TEST(Cli, O3IsAllHalfWithUnitScaleAndFlagsOverridePreset) {
  Parsed p = parse({"m.onnx", "-O3"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.keep_batchnorm_fp32, APX_TRI_OFF);
  EXPECT_EQ(p.o.master_weights, APX_TRI_OFF);
  EXPECT_EQ(p.o.loss_scale, 1.0f);
  Parsed q = parse({"m.onnx", "-O3", "--keep-batchnorm-fp32", "--loss-scale=dynamic"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.o.keep_batchnorm_fp32, APX_TRI_ON);
  EXPECT_EQ(q.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
  Parsed r = parse({"m.onnx", "-O2", "--master-weights=false", "--loss-scale", "128"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.o.master_weights, APX_TRI_OFF);
  EXPECT_EQ(r.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(r.o.loss_scale, 128.0f);
}

TEST(Cli, Bf16DefaultsToUnitLossScale) {
  Parsed p = parse({"m.onnx", "-O2", "--half=bf16"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.cast_model_type, APX_DT_BF16);
  EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(p.o.loss_scale, 1.0f);
  Parsed q = parse({"m.onnx", "-O2", "--half", "bf16", "--loss-scale=dynamic"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
}

TEST(Cli, RejectsApexInvalidCombinationsWithO1) {
  Parsed p = parse({"m.onnx", "-O1", "--keep-batchnorm-fp32"});
  EXPECT_EQ(p.rc, -1);
  EXPECT_NE(std::string(p.err).find("keep-batchnorm-fp32"), std::string::npos) << p.err;
  Parsed q = parse({"m.onnx", "-O1", "--master-weights"});
  EXPECT_EQ(q.rc, -1);
  EXPECT_NE(std::string(q.err).find("master weights"), std::string::npos) << q.err;
}

TEST(Cli, UsageErrorsNameTheFlag) {
  struct Case {
    std::vector<const char *> args;
    const char *want;
  } cases[] = {
      {{"m.onnx", "--bogus"}, "unknown option '--bogus'"},
      {{"m.onnx", "--lr"}, "--lr needs a value"},
      {{"m.onnx", "--lr=abc"}, "--lr: 'abc' is not a number"},
      {{"m.onnx", "--half=fp8"}, "--half: expected fp16 or bf16"},
      {{"m.onnx", "-O4"}, "unknown opt level '-O4'"},
      {{"m.onnx", "--dim", "N"}, "--dim: expected NAME=VALUE"},
      {{"m.onnx", "--dim", "N=0"}, "--dim"},
      {{"m.onnx", "--optimizer", "adam"}, "--optimizer: expected sgd, adamw or lamb"},
      {{"m.onnx", "--betas", "0.9"}, "--betas: expected B1,B2"},
      {{"m.onnx", "--accumulate", "0"}, "--accumulate"},
      {{"m.onnx", "--min-loss-scale", "10", "--max-loss-scale", "1"}, "must not exceed"},
      {{"a.onnx", "b.onnx"}, "more than one model"},
      {{"-O2"}, "no model given"},
      {{"m.onnx", "--explain=xml"}, "--explain: expected text, json or dot"},
      {{"m.onnx", "--bn-running-var=biased"}, "--bn-running-var: expected auto, population or unbiased"},
      {{"m.onnx", "--inference", "--bn-running-var=unbiased"}, "--bn-running-var"},
  };
  for (auto &c : cases) {
    Parsed p = parse(c.args);
    EXPECT_EQ(p.rc, -1) << c.want;
    EXPECT_NE(std::string(p.err).find(c.want), std::string::npos) << p.err;
    EXPECT_EQ(std::string(p.err).find('\n'), std::string::npos);
  }
}

TEST(Cli, BatchNormRunningVariance) {
  EXPECT_EQ(parse({"m.onnx"}).o.bn_running_var, APX_BN_VAR_AUTO);
  EXPECT_EQ(parse({"m.onnx", "--bn-running-var=population"}).o.bn_running_var, APX_BN_VAR_POPULATION);
  EXPECT_EQ(parse({"m.onnx", "--bn-running-var", "unbiased"}).o.bn_running_var, APX_BN_VAR_UNBIASED);
  EXPECT_EQ(parse({"m.onnx", "--bn-running-var=auto"}).o.bn_running_var, APX_BN_VAR_AUTO);
}

TEST(Cli, ListsAndBindings) {
  Parsed p = parse({"m.onnx", "--fp32-ops", "Gelu,Tanh", "--fp32-ops=Erf", "--fp32-nodes", "attn*",
                    "--dim", "batch=32", "--frozen=w1,w2", "--explain=json", "--inference"});
  ASSERT_EQ(p.rc, 0) << p.err;
  ASSERT_EQ(p.o.fp32_ops.n, 3);
  EXPECT_STREQ(p.o.fp32_ops.items[2], "Erf");
  EXPECT_STREQ(p.o.fp32_nodes.items[0], "attn*");
  ASSERT_EQ(p.o.n_dims, 1);
  EXPECT_STREQ(p.o.dim_names[0], "batch");
  EXPECT_EQ(p.o.dim_values[0], 32);
  EXPECT_EQ(p.o.frozen.n, 2);
  EXPECT_EQ(p.o.explain, 2);
  EXPECT_EQ(p.o.training, 0);
  EXPECT_EQ(p.a.summary, 0);   // an inspection flag replaces the summary
  EXPECT_EQ(p.a.write_plan, 0);
  Parsed q = parse({"m.onnx", "--betas=0.8,0.99"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_FLOAT_EQ(q.o.beta1, 0.8f);
  EXPECT_FLOAT_EQ(q.o.beta2, 0.99f);
}

TEST(Cli, HelpVersionListOps) {
  EXPECT_EQ(parse({"--help"}).a.action, APX_CLI_HELP);
  EXPECT_EQ(parse({"--version"}).a.action, APX_CLI_VERSION);
  EXPECT_EQ(parse({"--list-ops"}).a.action, APX_CLI_LIST_OPS);
  Parsed p = parse({"--dump-plan", "x.apx"});
  EXPECT_EQ(p.a.action, APX_CLI_DUMP_PLAN);
  EXPECT_STREQ(p.a.dump_plan_path, "x.apx");
  EXPECT_NE(std::string(apx_cli_usage()).find("-O2"), std::string::npos);
}

namespace {

std::string temp_dir() {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cli_test_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return "";
  return std::string(buf.data());
}

void expect_usage_error(std::vector<const char *> args, const char *want) {
  Parsed p = parse(args);
  EXPECT_EQ(p.rc, -1) << want;
  EXPECT_NE(std::string(p.err).find(want), std::string::npos) << "got: " << p.err << "\nwant: " << want;
  EXPECT_EQ(std::string(p.err).find('\n'), std::string::npos) << p.err;
}

}  // namespace

TEST(Cli, SgdWeightDecayDefaultsToZero) {
  Parsed p = parse({"m.onnx", "--optimizer", "sgd"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.weight_decay, 0.0f);  // torch.optim.SGD's default (DESIGN.md 13)
  Parsed q = parse({"m.onnx", "--optimizer", "sgd", "--weight-decay", "0.05"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_FLOAT_EQ(q.o.weight_decay, 0.05f);
  Parsed r = parse({"m.onnx"});  // AdamW: 0.01
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FLOAT_EQ(r.o.weight_decay, 0.01f);
  std::string help = apx_cli_usage();
  EXPECT_NE(help.find("sgd: default 0"), std::string::npos) << help;
}

TEST(Cli, FoldMaxMbCapsConstantFolding) {
  Parsed d = parse({"m.onnx"});
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_EQ(d.o.fold_max_mb, APX_FOLD_MAX_MB_DEFAULT);
  Parsed p = parse({"m.onnx", "--fold-max-mb", "8.5"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.fold_max_mb, 8.5);
  Parsed z = parse({"m.onnx", "--inference", "--fold-max-mb=0"});  // not a training flag
  ASSERT_EQ(z.rc, 0) << z.err;
  EXPECT_EQ(z.o.fold_max_mb, 0.0);
  expect_usage_error({"m.onnx", "--fold-max-mb", "-1"}, "--fold-max-mb: '-1' is not a number in [0, 1e+09]");
  expect_usage_error({"m.onnx", "--fold-max-mb"}, "--fold-max-mb needs a value");
  std::string help = apx_cli_usage();
  EXPECT_NE(help.find("--fold-max-mb N             MiB of tensors that constant folding may create (default\n"
                      "                              256)"), std::string::npos) << help;
}

TEST(Cli, RefusesToOverwriteTheModel) {
  std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty());
  std::string model = dir + "/m.onnx";
  FILE *f = fopen(model.c_str(), "wb");
  ASSERT_TRUE(f);
  fputs("x", f);
  fclose(f);
  std::string other_spelling = dir + "/./sub/../m.onnx";
  ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0755), 0);
  std::string hard = dir + "/hard.onnx";
  ASSERT_EQ(link(model.c_str(), hard.c_str()), 0);
  std::string apx_model = dir + "/m.apx";  // its default plan path is itself
  std::string missing = dir + "/nothere.onnx";
  std::string missing_other = dir + "/sub/../nothere.onnx";
  struct Case {
    std::vector<const char *> args;
    const char *flag;
  } cases[] = {
      {{model.c_str(), "-o", other_spelling.c_str()}, "-o "},
      {{model.c_str(), "-o", hard.c_str()}, "-o "},
      {{model.c_str(), "--emit-onnx", model.c_str()}, "--emit-onnx "},
      {{model.c_str(), "--explain", "--explain-out", other_spelling.c_str()}, "--explain-out "},
      {{apx_model.c_str()}, "with the default plan path (give -o PLAN.apx"},
      {{missing.c_str(), "-o", missing_other.c_str()}, "-o "},
  };
  for (auto &c : cases) {
    Parsed p = parse(c.args);
    EXPECT_EQ(p.rc, -1) << c.args[0];
    EXPECT_NE(std::string(p.err).find("refusing to overwrite the input model"), std::string::npos)
        << p.err;
    EXPECT_NE(std::string(p.err).find(c.flag), std::string::npos) << p.err;
  }
  Parsed ok = parse({model.c_str(), "-o", (dir + "/m2.apx").c_str(), "--emit-onnx",
                     (dir + "/mixed.onnx").c_str()});
  EXPECT_EQ(ok.rc, 0) << ok.err;
  Parsed def = parse({model.c_str()});
  ASSERT_EQ(def.rc, 0) << def.err;
  EXPECT_EQ(std::string(def.o.output_path), dir + "/m.apx");
}

// Two outputs on one path (-o, --emit-onnx, --explain-out; by inode when the file exists, by
// canonical path otherwise) would lose one of them silently; an output over the --policy
// input would destroy it. Both are usage errors naming both flags.
TEST(Cli, TwoOutputsOnOnePathAreRefused) {
  std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty());
  std::string model = dir + "/m.onnx", x = dir + "/x", x_other = dir + "/./sub/../x", pol = dir + "/pol.json";
  mkdir((dir + "/sub").c_str(), 0755);
  std::ofstream(pol) << "{}";
  struct Case {
    std::vector<const char *> args;
    const char *want;
  } cases[] = {
      {{model.c_str(), "-o", x.c_str(), "--emit-onnx", x_other.c_str()}, "-o %X and --emit-onnx %Y are the same file"},
      {{model.c_str(), "--emit-onnx", x.c_str(), "--explain", "--explain-out", x.c_str()},
       "--emit-onnx %X and --explain-out %X are the same file"},
      {{model.c_str(), "-o", x.c_str(), "--explain=json", "--explain-out", x_other.c_str()},
       "-o %X and --explain-out %Y are the same file"},
      {{model.c_str(), "-o", pol.c_str(), "--policy", pol.c_str()}, "-o %P: refusing to overwrite the --policy file"},
  };
  for (auto &c : cases) {
    Parsed p = parse(c.args);
    EXPECT_EQ(p.rc, -1) << c.want;
    std::string want = c.want;
    for (auto r : {std::make_pair("%X", x), std::make_pair("%Y", x_other), std::make_pair("%P", pol)}) {
      for (size_t k; (k = want.find(r.first)) != std::string::npos;) want.replace(k, 2, r.second);
    }
    EXPECT_NE(std::string(p.err).find(want), std::string::npos) << p.err << "\nwant: " << want;
  }
  Parsed ok = parse({model.c_str(), "-o", x.c_str(), "--emit-onnx", (dir + "/y.onnx").c_str()});
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// Outputs are probed before compiling (apexc exits 2 with one line, instead of 1 after the
// whole compile): a missing folder, a directory, a FIFO where the plan is renamed into place;
// a writable path passes and leaves no temporary file behind.
TEST(Cli, OutputPathsAreProbedBeforeCompiling) {
  std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty());
  std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string missing = dir + "/nonexist/d/p.apx";
  std::string good = dir + "/p.apx", good_onnx = dir + "/mixed.onnx", good_txt = dir + "/e.txt";
  struct Case {
    std::vector<const char *> args;
    std::string want;
  } cases[] = {
      {{"m.onnx", "-o", missing.c_str()}, missing + ": cannot write: No such file or directory"},
      {{"m.onnx", "-o", dir.c_str()}, dir + ": cannot write: Is a directory"},
      {{"m.onnx", "-o", fifo.c_str()}, fifo + ": cannot write: not a regular file (a FIFO)"},
      {{"m.onnx", "--emit-onnx", missing.c_str()}, missing + ": cannot write: No such file"},
      {{"m.onnx", "--emit-onnx", dir.c_str()}, dir + ": cannot write: Is a directory"},
      {{"m.onnx", "--explain", "--explain-out", missing.c_str()}, missing + ": cannot write: No such"},
      {{"m.onnx", "--explain=json", "--explain-out", dir.c_str()}, dir + ": cannot write: Is a directory"},
      // every output is probed, not only the first
      {{"m.onnx", "-o", good.c_str(), "--emit-onnx", good_onnx.c_str(), "--explain",
        "--explain-out", dir.c_str()}, dir + ": cannot write: Is a directory"},
  };
  for (auto &c : cases) {
    Parsed p = parse(c.args);
    ASSERT_EQ(p.rc, 0) << p.err;  // parsing does not touch the file system
    char err[1024];
    EXPECT_EQ(apx_cli_check_outputs(&p.o, &p.a, err, sizeof err), -1) << c.want;
    EXPECT_EQ(std::string(err).rfind(c.want, 0), 0u) << "got: " << err << "\nwant: " << c.want;
    EXPECT_EQ(std::string(err).find('\n'), std::string::npos) << err;
  }
  Parsed ok = parse({"m.onnx", "-o", good.c_str(), "--emit-onnx", good_onnx.c_str(), "--explain",
                     "--explain-out", good_txt.c_str()});
  ASSERT_EQ(ok.rc, 0) << ok.err;
  char err[1024];
  EXPECT_EQ(apx_cli_check_outputs(&ok.o, &ok.a, err, sizeof err), 0) << err;
  struct stat st;
  EXPECT_NE(stat(good.c_str(), &st), 0);  // nothing created: the probe file was removed
  std::string tmp = good + ".tmp." + std::to_string((long)getpid());
  EXPECT_NE(stat(tmp.c_str(), &st), 0);
  // an existing regular file is fine (it is replaced); inspection actions write nothing
  FILE *f = fopen(good.c_str(), "wb");
  ASSERT_TRUE(f);
  fclose(f);
  Parsed again = parse({"m.onnx", "-o", good.c_str()});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(apx_cli_check_outputs(&again.o, &again.a, err, sizeof err), 0) << err;
  // --emit-onnx and --explain-out open the path themselves: a pipe or /dev/stdout is fine
  Parsed piped = parse({"m.onnx", "-o", good.c_str(), "--emit-onnx", fifo.c_str(), "--explain",
                        "--explain-out", "/dev/stdout"});
  ASSERT_EQ(piped.rc, 0) << piped.err;
  EXPECT_EQ(apx_cli_check_outputs(&piped.o, &piped.a, err, sizeof err), 0) << err;
  Parsed dump = parse({"--dump-plan", dir.c_str()});
  EXPECT_EQ(apx_cli_check_outputs(&dump.o, &dump.a, err, sizeof err), 0) << err;
}

TEST(Cli, RejectsContradictoryFlags) {
  expect_usage_error({"m.onnx", "--optimizer", "sgd", "--nesterov"}, "--nesterov needs --momentum");
  expect_usage_error({"m.onnx", "--nesterov", "--momentum", "0.9"}, "--nesterov with --optimizer adamw");
  expect_usage_error({"m.onnx", "--momentum", "0.9"}, "--momentum with --optimizer adamw");
  expect_usage_error({"m.onnx", "--optimizer=lamb", "--momentum", "0.9"}, "--momentum with --optimizer lamb");
  expect_usage_error({"m.onnx", "--optimizer", "sgd", "--betas", "0.9,0.99"}, "--betas with --optimizer sgd");
  expect_usage_error({"m.onnx", "--optimizer", "sgd", "--eps", "1e-6"}, "--eps with --optimizer sgd");
  expect_usage_error({"m.onnx", "--inference", "--lr", "0.1"}, "--lr with --inference");
  expect_usage_error({"m.onnx", "--optimizer=sgd", "--inference"}, "--optimizer with --inference");
  expect_usage_error({"m.onnx", "--inference", "--loss-scale=dynamic"}, "--loss-scale with --inference");
  expect_usage_error({"m.onnx", "--warmup-steps", "100", "--total-steps", "50"},
                     "--warmup-steps 100 is more than --total-steps 50");
  expect_usage_error({"m.onnx", "--dim", "batch=2", "--dim", "batch=4"},
                     "--dim batch=4: 'batch' is already bound to 2");
  expect_usage_error({"m.onnx", "--explain-out", "x.txt"}, "--explain-out x.txt without --explain");
  expect_usage_error({"m.onnx", "--loss", "a", "--loss", "b"},
                     "--loss b: --loss is already given (--loss a); name several losses in one list: --loss a,b");
  // consistent combinations still parse
  for (std::vector<const char *> ok : {
           std::vector<const char *>{"m.onnx", "--optimizer", "sgd", "--momentum", "0.9", "--nesterov"},
           std::vector<const char *>{"m.onnx", "--optimizer", "lamb", "--betas", "0.9,0.99", "--eps", "1e-6"},
           std::vector<const char *>{"m.onnx", "-O2", "--scale-window", "5", "--hysteresis", "2"},
           std::vector<const char *>{"m.onnx", "-O0", "--loss-scale=dynamic", "--scale-window", "5"},
           std::vector<const char *>{"m.onnx", "--warmup-steps", "50", "--total-steps", "50"},
           std::vector<const char *>{"m.onnx", "--warmup-steps", "50"},  // total from apexrun --steps
           std::vector<const char *>{"m.onnx", "--inference", "--dim", "a=1", "--dim", "b=1"},
           std::vector<const char *>{"m.onnx", "--explain=json", "--explain-out", "x.json"},
       }) {
    Parsed p = parse(ok);
    EXPECT_EQ(p.rc, 0) << p.err;
  }
}

// Apex accepts the dynamic scaler's settings with a static loss scale (they are unused):
// they parse, with one warning line naming them, instead of a usage error.
TEST(Cli, DynamicScalerFlagsWithStaticScaleWarn) {
  struct Case {
    std::vector<const char *> args;
    const char *want;
  } cases[] = {
      {{"m.onnx", "-O2", "--loss-scale=128", "--max-loss-scale", "65536"},
       "warning: --max-loss-scale has no effect with a static loss scale (128)"},
      {{"m.onnx", "-O0", "--min-loss-scale", "1"},
       "warning: --min-loss-scale has no effect with a static loss scale (1)"},
      {{"m.onnx", "-O2", "--half=bf16", "--max-loss-scale", "1024"},
       "warning: --max-loss-scale has no effect with a static loss scale (1)"},
      {{"m.onnx", "--loss-scale", "128", "--scale-window", "10", "--hysteresis=2"},
       "warning: --scale-window, --hysteresis have no effect with a static loss scale (128)"},
      {{"m.onnx", "-O3", "-q", "--hysteresis", "2"},  // -q: apexc does not print it
       "warning: --hysteresis has no effect with a static loss scale (1)"},
  };
  for (auto &c : cases) {
    Parsed p = parse(c.args);
    EXPECT_EQ(p.rc, 0) << p.err;
    EXPECT_STREQ(p.a.warning, c.want);
    EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  }
  // with dynamic scaling they mean something: no warning
  Parsed d = parse({"m.onnx", "-O2", "--max-loss-scale", "65536", "--scale-window", "5"});
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_STREQ(d.a.warning, "");
  EXPECT_EQ(d.o.max_loss_scale, 65536.0f);
}

// Apex starts the dynamic scaler at min(init, max_loss_scale): an initial scale outside
// [--min-loss-scale, --max-loss-scale] is clamped into the range, with a warning; a floor
// above the ceiling is a usage error.
TEST(Cli, InitialLossScaleIsClampedIntoMinMax) {
  Parsed hi = parse({"m.onnx", "-O2", "--max-loss-scale", "1"});
  ASSERT_EQ(hi.rc, 0) << hi.err;
  EXPECT_EQ(hi.o.loss_scale, 1.0f);
  EXPECT_STREQ(hi.a.warning, "warning: the initial loss scale 65536 is above --max-loss-scale 1: training starts "
                             "at 1 (the initial scale is clamped into [min, max], as in Apex)");
  Parsed lo = parse({"m.onnx", "-O2", "--min-loss-scale", "1e6"});
  ASSERT_EQ(lo.rc, 0) << lo.err;
  EXPECT_EQ(lo.o.loss_scale, 1e6f);
  EXPECT_NE(std::string(lo.a.warning).find("is below --min-loss-scale 1e+06: training starts at 1e+06"),
            std::string::npos)
      << lo.a.warning;
  Parsed in = parse({"m.onnx", "-O2", "--min-loss-scale", "2", "--max-loss-scale", "65536"});
  ASSERT_EQ(in.rc, 0) << in.err;
  EXPECT_EQ(in.o.loss_scale, 65536.0f);
  EXPECT_STREQ(in.a.warning, "");
  expect_usage_error({"m.onnx", "-O2", "--min-loss-scale", "1024", "--max-loss-scale", "512"},
                     "--min-loss-scale 1024 must not exceed --max-loss-scale 512");
}

TEST(Cli, IntegerFlagsOutOfInt32RangeNameTheFlag) {
  expect_usage_error({"m.onnx", "--warmup-steps", "3000000000"},
                     "--warmup-steps: '3000000000' is not an integer in [0, 2147483647]");
  expect_usage_error({"m.onnx", "--warmup-steps", "99999999999999999999999"}, "--warmup-steps: '9");
  expect_usage_error({"m.onnx", "--warmup-steps", "-1"}, "--warmup-steps: '-1'");
  expect_usage_error({"m.onnx", "--warmup-steps", "12x"}, "--warmup-steps: '12x'");
  expect_usage_error({"m.onnx", "--scale-window", "4294967296"}, "--scale-window: '4294967296'");
  expect_usage_error({"m.onnx", "--hysteresis", "2147483648"}, "--hysteresis: '2147483648'");
  expect_usage_error({"m.onnx", "--accumulate", "2147483648"}, "--accumulate: '2147483648'");
  expect_usage_error({"m.onnx", "--total-steps", "9223372036854775808"}, "--total-steps: '9");
  Parsed p = parse({"m.onnx", "--warmup-steps", "2147483647", "--total-steps", "4000000000"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.warmup_steps, 2147483647);
  EXPECT_EQ(p.o.total_steps, 4000000000LL);
}

TEST(Cli, QuietPrintsNoSummary) {
  Parsed p = parse({"m.onnx", "-q"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.a.summary, 0);
  EXPECT_EQ(p.a.write_plan, 1);
  Parsed q = parse({"m.onnx", "--quiet", "--explain"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.o.explain, 1);  // asked-for output is still printed
}

// Apex's amp.initialize spellings (underscores, opt_level="O2", keep_batchnorm_fp32=False,
// master_weights=True, loss_scale=128) and PyTorch GradScaler's (init_scale, growth_interval,
// growth_factor, backoff_factor) mean what they mean there. Values keep their underscores.
TEST(Cli, ApexAndGradScalerSpellings) {
  Parsed a = parse({"m.onnx", "--opt_level=O2", "--keep_batchnorm_fp32=False", "--fp32-nodes=my_block*"});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.o.opt_level, APX_O2);
  EXPECT_EQ(a.o.keep_batchnorm_fp32, APX_TRI_OFF);
  EXPECT_STREQ(a.o.fp32_nodes.items[0], "my_block*");
  Parsed b = parse({"m.onnx", "--opt-level", "O3", "--master_weights=True", "--loss_scale", "128"});
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(b.o.opt_level, APX_O3);
  EXPECT_EQ(b.o.master_weights, APX_TRI_ON);
  EXPECT_EQ(b.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(b.o.loss_scale, 128.0f);
  Parsed c = parse({"m.onnx", "-O2", "--init-scale", "1024", "--growth-interval", "100", "--growth_factor=4",
                    "--backoff-factor", "0.25"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(c.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
  EXPECT_EQ(c.o.loss_scale, 1024.0f);
  EXPECT_EQ(c.o.scale_window, 100);
  EXPECT_EQ(c.o.growth_factor, 4.0f);
  EXPECT_EQ(c.o.backoff_factor, 0.25f);
  EXPECT_STREQ(c.a.warning, "");
  // --init-scale makes even -O3's static default dynamic (a GradScaler is dynamic)
  Parsed d = parse({"m.onnx", "-O3", "--init_scale=256"});
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_EQ(d.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
  EXPECT_EQ(d.o.loss_scale, 256.0f);
  Parsed e = parse({"m.onnx", "--loss-scale", "dynamic", "--init-scale", "512"});
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_EQ(e.o.loss_scale, 512.0f);
  Parsed f = parse({"m.onnx", "--init-scale", "512", "--loss-scale=dynamic"});
  ASSERT_EQ(f.rc, 0) << f.err;
  EXPECT_EQ(f.o.loss_scale, 512.0f) << "--loss-scale dynamic keeps where --init-scale starts it";
  // defaults: GradScaler's
  Parsed g = parse({"m.onnx"});
  EXPECT_EQ(g.o.growth_factor, 2.0f);
  EXPECT_EQ(g.o.backoff_factor, 0.5f);
  // with a static scale they have no effect: the warning names them as given
  Parsed h = parse({"m.onnx", "-O2", "--loss-scale", "8", "--growth-factor", "3", "--growth-interval", "5"});
  ASSERT_EQ(h.rc, 0) << h.err;
  EXPECT_STREQ(h.a.warning, "warning: --growth-interval, --growth-factor have no effect with a static loss scale (8)");
  expect_usage_error({"m.onnx", "--init-scale", "10", "--loss-scale", "5"},
                     "--loss-scale 5 with --init-scale 10: --init-scale is where a dynamic scale starts "
                     "(GradScaler's init_scale); give one of them");
  expect_usage_error({"m.onnx", "--loss-scale", "5", "--init-scale", "10"}, "--init-scale 10 with --loss-scale 5");
  expect_usage_error({"m.onnx", "--growth-factor", "1"}, "--growth-factor: '1' must be > 1 (default 2)");
  expect_usage_error({"m.onnx", "--backoff-factor", "1"}, "--backoff-factor: '1' must be in (0, 1) (default 0.5)");
  expect_usage_error({"m.onnx", "--backoff-factor", "0"}, "--backoff-factor: '0' must be in (0, 1)");
  expect_usage_error({"m.onnx", "--opt-level", "O4"}, "--opt-level: expected O0, O1, O2 or O3, got 'O4'");
  expect_usage_error({"m.onnx", "--keep_batchnorm_fp32=Maybe"}, "--keep-batchnorm-fp32: expected true or false");
  expect_usage_error({"m.onnx", "--inference", "--growth-factor", "3"}, "--growth-factor with --inference");
}

// An unknown option names the nearest real one when it is near enough to be a typo.
TEST(Cli, UnknownOptionSuggestsTheNearest) {
  expect_usage_error({"m.onnx", "--scale-windw", "10"},
                     "apexc: unknown option '--scale-windw'; did you mean --scale-window? (see apexc --help)");
  expect_usage_error({"m.onnx", "--weight_decy=0.1"}, "unknown option '--weight-decy=0.1'; did you mean --weight-decay?");
  expect_usage_error({"m.onnx", "--optimiser", "sgd"}, "did you mean --optimizer?");
  expect_usage_error({"m.onnx", "--bananas"}, "apexc: unknown option '--bananas' (see apexc --help)");
}

// Every name in the suggestion table is an option the parser takes (never "unknown option").
TEST(Cli, EveryListedFlagIsAccepted) {
  for (const char *const *f = apx_cli_flag_names(); *f; f++) {
    Parsed p = parse({"m.onnx", *f, "1"});
    EXPECT_EQ(std::string(p.err).find("unknown option"), std::string::npos) << *f << ": " << p.err;
  }
  std::string help = apx_cli_usage();
  for (const char *f : {"--init-scale", "--growth-interval", "--growth-factor", "--backoff-factor", "--opt-level O2",
                        "--keep_batchnorm_fp32=False"})
    EXPECT_NE(help.find(f), std::string::npos) << f << " is not in --help";
}
