// train_test.cc - `apexrun PLAN --data DIR --steps N` end to end on the example models:
//  - loss scaling shown, not assumed: fp16 gradients forced to overflow (inputs scaled up),
//    the step is skipped (every parameter and optimizer state unchanged), the scale halves,
//    the parameter is named (log and stderr), and the scale grows back after the window;
//  - resume is bit for bit: a run killed with SIGKILL between checkpoints and resumed ends
//    with the same bytes as a straight run (checkpoint files, exported ONNX, every loss);
//  - a checkpoint write torn by a crash never loads; corrupt, truncated and foreign
//    checkpoints are refused with one line;
//  - --data validation errors (also class labels / indices out of range, fewer samples than a
//    batch); --accumulate; the exported ONNX holds the trained masters;
//  - --export-onnx destination checked before training; --seed 0 is a seed; the lr schedule's
//    length kept on resume (and version 1 checkpoints still load); non-finite loss scales in
//    checkpoints refused; stale temporary files removed; a run whose every step overflowed
//    exits with 1 when the scale collapsed (warns while it settles); --checkpoint-dir and
//    --log checked before training; non-regular destinations (a FIFO) refused; a warmup
//    longer than --steps warns;
//  - run-time hyperparameters (--lr ... --clip-grad-norm) train as compiled ones, are
//    checkpointed and checked on resume; GradScaler's growth/backoff factors reach the scaler;
//    NaN/Inf inputs and non-finite losses are named as such; the progress line on a terminal
//    and without one.
#include <gtest/gtest.h>

#include <dirent.h>
#include <pty.h>
#include <signal.h>
#include <termios.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "compiler/pipeline.h"
#include "onnx.pb-c.h"
#include "plan/model_blob.h"
#include "runtime/export_onnx.h"
#include "ir/fileio.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/npy.h"
#include "runtime/train.h"
}
#include "tests/testing/compile_plan.h"

namespace {

std::string tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool exists(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

void put_file(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

struct Result {
  int code;
  std::string out;
};

Result sh(const std::string &cmd) {
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  Result r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

Result apexrun(const std::string &args) { return sh("./runtime/apexrun " + args); }

// Compiles examples/<model>/model.onnx into a plan file with the options set by f.
template <class F>
std::string compile(const std::string &model, const std::string &name, ApxOptLevel level, F f) {
  std::string path = tmp() + "/" + name + ".apx";
  std::string src = "examples/" + model + "/model.onnx";
  ApxOptions o;
  apx_options_init(&o);
  o.model_path = src.c_str();
  o.opt_level = level;
  o.quiet = 1;
  f(o);
  std::string err;
  EXPECT_TRUE(apx_testing::CompileToPlanFile(o, path, &err)) << err;
  return path;
}

std::string compile(const std::string &model, const std::string &name, ApxOptLevel level) {
  return compile(model, name, level, [](ApxOptions &) {});
}

// One JSON line's field as text ("null", "true", a number, a quoted string).
std::string field(const std::string &line, const std::string &key) {
  std::string k = "\"" + key + "\": ";
  size_t p = line.find(k);
  if (p == std::string::npos) return "<missing>";
  p += k.size();
  size_t e = line[p] == '"' ? line.find('"', p + 1) + 1 : line.find_first_of(",}", p);
  return line.substr(p, e - p);
}

std::vector<std::string> lines(const std::string &s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) v.push_back(l);
  return v;
}

// Writes examples/mlp/data into dir with x changed by f(x, n_samples, n_features) (x as
// doubles; the file is float32, or float64 when wide).
template <class F>
void edited_mlp_data(const std::string &dir, F f, bool wide = false) {
  mkdir(dir.c_str(), 0755);
  ApxDiag d;
  apx_diag_init(&d);
  ApxNpy x, y;
  ASSERT_EQ(apx_npy_read("examples/mlp/data/x.npy", &x, &d), 0) << d.msg;
  ASSERT_EQ(apx_npy_read("examples/mlp/data/labels.npy", &y, &d), 0) << d.msg;
  std::vector<double> wx((size_t)x.numel);
  for (int64_t i = 0; i < x.numel; i++) wx[(size_t)i] = ((float *)x.data)[i];
  f(wx.data(), x.dims[0], x.dims[1]);
  std::vector<float> nx(wx.begin(), wx.end());
  ApxTensor tx = {wide ? (void *)wx.data() : (void *)nx.data(), wide ? APX_DT_F64 : APX_DT_F32, x.rank, {0}};
  ApxTensor ty = {y.data, y.dtype, y.rank, {0}};
  memcpy(tx.dims, x.dims, sizeof tx.dims);
  memcpy(ty.dims, y.dims, sizeof ty.dims);
  ASSERT_EQ(apx_npy_write((dir + "/x.npy").c_str(), &tx, &d), 0) << d.msg;
  ASSERT_EQ(apx_npy_write((dir + "/labels.npy").c_str(), &ty, &d), 0) << d.msg;
  apx_npy_free(&x);
  apx_npy_free(&y);
}

// examples/mlp/data with x multiplied by `mul` (in fp32), written into dir.
void scaled_mlp_data(const std::string &dir, float mul) {
  edited_mlp_data(dir, [mul](double *x, int64_t n, int64_t f) {
    for (int64_t i = 0; i < n * f; i++) x[i] = (double)((float)x[i] * mul);
  });
}

struct Snapshot {
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> bytes;
};

// Every PARAM and STATE buffer except the two the runtime writes before each step.
Snapshot snapshot(ApxTrainer &t) {
  Snapshot s;
  const ApxPlan *p = t.plan;
  ApxDiag d;
  apx_diag_init(&d);
  for (int32_t i = 0; i < p->n_bufs; i++) {
    const ApxPlanBuffer *b = &p->bufs[i];
    if (!apx_checkpoint_saves(b) || i == t.lr_buf || i == t.scale_buf) continue;
    std::vector<uint8_t> v((size_t)b->bytes);
    EXPECT_EQ(apx_exec_read(&t.ex, i, v.data(), v.size(), &d), 0) << d.msg;
    s.names.push_back(b->name);
    s.bytes.push_back(v);
  }
  return s;
}

}  // namespace

TEST(Train, OverflowSkipsTheStepHalvesTheScaleNamesTheParameterAndRegrows) {
  std::string plan_path = compile("mlp", "ovf", APX_O2, [](ApxOptions &o) { o.scale_window = 5; });
  std::string data = tmp() + "/ovf_data";
  scaled_mlp_data(data, 64.0f);  // fp16 gradients x 2^16 overflow; the forward stays finite

  ApxDiag d;
  apx_diag_init(&d);
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_read(&plan, plan_path.c_str(), &d), 0) << d.msg;
  ApxTrainConfig cfg;
  apx_train_config_init(&cfg);
  cfg.data_dir = data.c_str();
  cfg.steps = 40;
  cfg.order = APX_ORDER_FILE;
  cfg.exec.n_threads = 1;
  ApxTrainer t;
  ASSERT_EQ(apx_trainer_init(&t, &plan, &cfg, &d), 0) << d.msg;
  std::set<std::string> params;
  for (int i = 0; i < t.n_params; i++) params.insert(t.param_names[i]);
  EXPECT_EQ(params, (std::set<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                            "fc3.weight", "fc3.bias"}));

  int skipped = 0, grew = 0, clean_run = 0;
  double prev_scale = 0;
  for (int s = 0; s < 40; s++) {
    Snapshot before = snapshot(t);
    ApxStepRecord r;
    ASSERT_EQ(apx_trainer_step(&t, &r, &d), 0) << d.msg;
    Snapshot after = snapshot(t);
    ASSERT_EQ(before.names, after.names);
    if (s > 0 && r.loss_scale > prev_scale) {
      // growth happens exactly after scale_window (5) clean steps in a row
      EXPECT_EQ(clean_run, 5) << "step " << r.step;
      EXPECT_EQ(r.loss_scale, 2 * prev_scale);
      grew++;
      clean_run = 0;
    }
    if (r.skipped) {
      skipped++;
      clean_run = 0;
      ASSERT_NE(r.overflow_at, nullptr) << "step " << r.step;
      EXPECT_TRUE(params.count(r.overflow_at)) << r.overflow_at;
      EXPECT_TRUE(std::isnan(r.grad_norm));
      EXPECT_EQ(t.scaler.scale, r.loss_scale / 2) << "halved after step " << r.step;
      for (size_t i = 0; i < before.names.size(); i++)
        EXPECT_EQ(before.bytes[i], after.bytes[i]) << before.names[i] << " changed on skipped step " << r.step;
    } else {
      clean_run++;
      EXPECT_EQ(r.overflow_at, nullptr);
      EXPECT_TRUE(std::isfinite(r.grad_norm));
      size_t changed = 0;
      for (size_t i = 0; i < before.names.size(); i++) changed += before.bytes[i] != after.bytes[i];
      EXPECT_GT(changed, 6u) << "a clean step updates masters, half copies and moments";
    }
    if (s == 0) {
      EXPECT_TRUE(r.skipped) << "x * 64 overflows fp16 gradients at the initial 2^16";
      EXPECT_EQ(r.loss_scale, 65536);
    }
    prev_scale = r.loss_scale;
  }
  printf("40 steps: %d skipped, %d growths, final scale %g\n", skipped, grew, t.scaler.scale);
  EXPECT_GE(skipped, 2);
  EXPECT_GE(grew, 2);
  apx_trainer_free(&t);
  apx_plan_free(&plan);

  // the CLI: JSON log fields and the stderr notice
  std::string log = tmp() + "/ovf.jsonl";
  Result r = apexrun(plan_path + " --data " + data + " --steps 12 --no-shuffle --log " + log);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: step 1: gradient overflow in 'fc1.weight' at loss scale 65536: step "
                       "skipped, scale now 32768"), std::string::npos) << r.out;
  std::vector<std::string> ls = lines(slurp(log));
  ASSERT_EQ(ls.size(), 12u);
  EXPECT_EQ(field(ls[0], "step"), "1");
  EXPECT_EQ(field(ls[0], "skipped"), "true");
  EXPECT_EQ(field(ls[0], "overflow_at"), "\"fc1.weight\"");
  EXPECT_EQ(field(ls[0], "grad_norm"), "null");
  EXPECT_EQ(field(ls[0], "loss_scale"), "65536");
  EXPECT_EQ(field(ls[1], "loss_scale"), "32768");
  EXPECT_EQ(field(ls[0], "lr"), "0.001");
  for (auto &l : ls)
    for (const char *k : {"step", "loss", "loss_scale", "skipped", "overflow_at", "grad_norm", "lr", "ms"})
      EXPECT_NE(field(l, k), "<missing>") << k << " in " << l;
  EXPECT_NE(r.out.find("skipped (overflow)"), std::string::npos) << r.out;
}

TEST(Train, StaticScaleStillSkipsNonFiniteGradients) {
  std::string plan_path = compile("mlp", "static_huge", APX_O2, [](ApxOptions &o) {
    o.loss_scale_mode = APX_LOSS_SCALE_STATIC;
    o.loss_scale = 1e30f;  // every fp16 gradient overflows
    o.loss_scale_set = 1;
  });
  std::string log = tmp() + "/static.jsonl";
  Result r = apexrun(plan_path + " --data examples/mlp/data --steps 12 --log " + log);
  // every step skipped: the model did not train, which is a failure (exit code 1)
  ASSERT_EQ(r.code, 1) << r.out;
  std::vector<std::string> ls = lines(slurp(log));
  ASSERT_EQ(ls.size(), 12u);
  for (auto &l : ls) {
    EXPECT_EQ(field(l, "skipped"), "true") << l;
    EXPECT_EQ(field(l, "loss_scale"), "1.00000002e+30") << l;
  }
  EXPECT_NE(r.out.find("warning: 10 overflowing steps in a row"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("apexrun: all 12 steps overflowed; static loss scale 1e+30; the model did not train\n"),
            std::string::npos) << r.out;
  // a static scale never recovers: a failure however short the run (no warm-up to wait for)
  r = apexrun(plan_path + " --data examples/mlp/data --steps 2 --quiet");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("apexrun: all 2 steps overflowed; static loss scale 1e+30; the model did not train\n"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("while the loss scale settles"), std::string::npos) << r.out;
}

namespace {

// In a forked child: becomes `./runtime/apexrun args...`.
[[noreturn]] void exec_apexrun(const std::vector<std::string> &args) {
  std::vector<char *> av;
  av.push_back((char *)"./runtime/apexrun");
  for (auto &a : args) av.push_back((char *)a.c_str());
  av.push_back(nullptr);
  execv(av[0], av.data());
  _exit(127);
}

// Runs apexrun in a child with stdout/stderr to a file; returns the pid.
pid_t spawn(const std::vector<std::string> &args, const std::string &out, const char *env = nullptr) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = freopen(out.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), 2);
    if (env) putenv((char *)env);
    exec_apexrun(args);
  }
  return pid;
}

std::string ckpt(const std::string &dir, int step) {
  char b[64];
  snprintf(b, sizeof b, "/ckpt-%012d.apxckpt", step);
  return dir + b;
}

// Loss per step from a log (the ms field differs between runs).
std::vector<std::string> losses(const std::string &log) {
  std::vector<std::string> v;
  for (auto &l : lines(slurp(log))) v.push_back(field(l, "step") + ":" + field(l, "loss") + ":" +
                                              field(l, "loss_scale") + ":" + field(l, "grad_norm"));
  return v;
}


// Writes the Dropout test model (runtime/testdata/make_dropout_model.py) into dir and compiles
// it at O0 (with compile seed `seed`, 0 = none) to dir/model.apx; returns the plan path.
std::string CompileDropoutPlan(const std::string &dir, int seed = 0) {
  Result g = sh("scripts/py runtime/testdata/make_dropout_model.py " + dir);
  EXPECT_EQ(g.code, 0) << g.out;
  ApxOptions o;
  apx_options_init(&o);
  std::string src = dir + "/model.onnx", plan = dir + "/model.apx";
  o.model_path = src.c_str();
  o.opt_level = APX_O0;
  o.quiet = 1;
  if (seed) o.seed = seed;
  std::string err;
  EXPECT_TRUE(apx_testing::CompileToPlanFile(o, plan, &err)) << err;
  return plan;
}

}  // namespace

TEST(Train, ResumeAfterKill9IsBitForBit) {
  // CNN with BatchNorm (running statistics are state), fp16 with masters, shuffled data
  std::string plan = compile("cnn", "resume_cnn", APX_O2, [](ApxOptions &o) { o.lr = 0.01f; o.lr_set = 1; });
  // 100 steps, killed right after the checkpoint of step 20 appears: 80 steps of slack
  const std::string common =
      " --data examples/cnn/data --steps 100 --seed 7 --checkpoint-every 10 --quiet --threads 1";
  std::string a = tmp() + "/resume_a", b = tmp() + "/resume_b";
  Result r = apexrun(plan + common + " --checkpoint-dir " + a + " --log " + a + ".jsonl --export-onnx " + a + ".onnx");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(exists(ckpt(a, 100)));

  pid_t pid = spawn({plan, "--data", "examples/cnn/data", "--steps", "100", "--seed", "7", "--checkpoint-every",
                     "10", "--quiet", "--threads", "1", "--checkpoint-dir", b, "--log", b + ".jsonl"},
                    tmp() + "/resume_b_first.out");
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 200000 && !exists(ckpt(b, 20)); i++) usleep(500);
  ASSERT_TRUE(exists(ckpt(b, 20)));
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the child finished before the kill";
  ASSERT_FALSE(exists(ckpt(b, 100)));
  size_t logged_before = lines(slurp(b + ".jsonl")).size();
  printf("killed after %zu logged steps (checkpoint 20%s present)\n", logged_before,
         exists(ckpt(b, 30)) ? " and 30" : "");

  r = apexrun(plan + common + " --checkpoint-dir " + b + " --log " + b + ".jsonl --export-onnx " + b +
              ".onnx --resume");
  ASSERT_EQ(r.code, 0) << r.out;
  std::string ca = slurp(ckpt(a, 100)), cb = slurp(ckpt(b, 100));
  ASSERT_GT(ca.size(), 1000u);
  EXPECT_TRUE(ca == cb) << "final checkpoints differ";
  EXPECT_TRUE(slurp(a + ".onnx") == slurp(b + ".onnx")) << "exported models differ";
  std::vector<std::string> la = losses(a + ".jsonl"), lb = losses(b + ".jsonl");
  ASSERT_EQ(la.size(), 100u);
  EXPECT_EQ(la, lb) << "per-step loss, scale and grad norm of the resumed run";
  // the checkpoint at 20 matches too
  EXPECT_TRUE(slurp(ckpt(a, 20)) == slurp(ckpt(b, 20)));
}

TEST(Train, DropoutStreamContinuesAcrossResume) {
  std::string dir = tmp() + "/dropout";
  std::string plan = CompileDropoutPlan(dir);
  ASSERT_FALSE(HasFailure());
  const std::string common = plan + " --data " + dir + "/data --quiet --no-shuffle --steps 20";
  Result r = apexrun(common + " --seed 1 --checkpoint-dir " + dir + "/a --log " + dir + "/a.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  r = apexrun(common + " --seed 2 --log " + dir + "/s2.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  // same data order, another Dropout key: other masks, other losses
  EXPECT_NE(losses(dir + "/a.jsonl"), losses(dir + "/s2.jsonl"));
  r = apexrun(plan + " --data " + dir + "/data --quiet --no-shuffle --steps 10 --seed 1 --checkpoint-dir " +
              dir + "/b --log " + dir + "/b.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  r = apexrun(common + " --seed 1 --resume --checkpoint-dir " + dir + "/b --log " + dir + "/b.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(losses(dir + "/a.jsonl"), losses(dir + "/b.jsonl"));
  EXPECT_TRUE(slurp(ckpt(dir + "/a", 20)) == slurp(ckpt(dir + "/b", 20)));
  // resuming with another seed is refused
  r = apexrun(common + " --seed 3 --resume --checkpoint-dir " + dir + "/b");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the checkpoint was trained with data seed 1, this run 3"), std::string::npos) << r.out;
}

TEST(Train, TornCheckpointWriteNeverLoads) {
  std::string plan = compile("mlp", "torn_mlp", APX_O2);
  const std::string common = " --data examples/mlp/data --steps 40 --checkpoint-every 10 --quiet";
  std::string a = tmp() + "/torn_a", b = tmp() + "/torn_b";
  Result r = apexrun(plan + common + " --checkpoint-dir " + a);
  ASSERT_EQ(r.code, 0) << r.out;
  // crash 5000 bytes into the checkpoint of step 20
  pid_t pid = spawn({plan, "--data", "examples/mlp/data", "--steps", "40", "--checkpoint-every", "10",
                     "--quiet", "--checkpoint-dir", b},
                    tmp() + "/torn_first.out", "APX_TEST_CHECKPOINT_KILL_AT=20:5000");
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << slurp(tmp() + "/torn_first.out");
  EXPECT_TRUE(exists(ckpt(b, 10)));
  EXPECT_FALSE(exists(ckpt(b, 20)));
  std::string torn = b + "/.ckpt-000000000020.apxckpt.tmp." + std::to_string(pid);
  ASSERT_TRUE(exists(torn));
  std::string torn_bytes = slurp(torn);
  EXPECT_EQ(torn_bytes.size(), 5000u);
  // not leftovers of a dead writer: a live process's temporary file (this test's pid) and a
  // symlink named like one; both must stay
  std::string live = b + "/.ckpt-000000000030.apxckpt.tmp." + std::to_string(getpid());
  std::string link = b + "/.ckpt-000000000030.apxckpt.tmp." + std::to_string(pid);
  { std::ofstream f(live); f << "in progress"; }
  ASSERT_EQ(symlink("ckpt-000000000010.apxckpt", link.c_str()), 0);

  r = apexrun(plan + " --data examples/mlp/data --steps 40 --checkpoint-every 10 --checkpoint-dir " + b +
              " --resume");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from " + ckpt(b, 10) + " (step 10"), std::string::npos) << r.out;
  EXPECT_TRUE(slurp(ckpt(a, 40)) == slurp(ckpt(b, 40))) << "resumed from 10: same final bytes";
  // the next save removed the dead writer's temporary file, and only that
  EXPECT_FALSE(exists(torn)) << "stale temporary file left behind";
  EXPECT_TRUE(exists(live));
  struct stat lst;
  EXPECT_EQ(lstat(link.c_str(), &lst), 0);
  EXPECT_TRUE(exists(ckpt(b, 10)));

  // the torn bytes renamed into place (a file system that lost the rename's ordering) are
  // refused by size/checksum, not loaded
  std::string c = tmp() + "/torn_c";
  mkdir(c.c_str(), 0755);
  {
    std::ofstream f(ckpt(c, 20), std::ios::binary);
    f << torn_bytes;
  }
  r = apexrun(plan + common + " --checkpoint-dir " + c + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(ckpt(c, 20) + ": corrupt checkpoint"), std::string::npos) << r.out;
}

TEST(Train, CorruptAndForeignCheckpointsAreRefused) {
  std::string plan = compile("mlp", "corrupt_mlp", APX_O2);
  std::string other = compile("mlp", "corrupt_mlp_o0", APX_O0);
  std::string dir = tmp() + "/corrupt";
  Result r = apexrun(plan + " --data examples/mlp/data --steps 3 --quiet --checkpoint-dir " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  std::string good = slurp(ckpt(dir, 3));
  struct Case {
    const char *name;
    std::string bytes;
    const char *want;
  } cases[] = {
      {"flip", good, "checksum mismatch"},
      {"truncated", good.substr(0, good.size() / 2), "truncated or torn write"},
      {"padded", good + std::string(64, '\0'), "truncated or torn write"},
      {"magic", "XXXXXXXX" + good.substr(8), "not an apexrun checkpoint"},
      {"empty", "", "not an apexrun checkpoint"},
  };
  cases[0].bytes[good.size() - 100] ^= 1;
  for (auto &c : cases) {
    std::string d = tmp() + "/corrupt_" + c.name;
    mkdir(d.c_str(), 0755);
    {
      std::ofstream f(ckpt(d, 3), std::ios::binary);
      f << c.bytes;
    }
    r = apexrun(plan + " --data examples/mlp/data --steps 6 --quiet --resume --checkpoint-dir " + d);
    EXPECT_EQ(r.code, 2) << c.name << ": " << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.name << ": " << r.out;
    EXPECT_EQ(lines(r.out).size(), 1u) << c.name << ": " << r.out;
  }
  // another plan's checkpoint: both hashes named
  r = apexrun(other + " --data examples/mlp/data --steps 6 --quiet --resume --checkpoint-dir " + dir);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("checkpoint of another plan (its plan hash "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(other + " has "), std::string::npos) << r.out;
  // other run settings
  r = apexrun(plan + " --data examples/mlp/data --steps 6 --quiet --resume --no-shuffle --checkpoint-dir " + dir);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the checkpoint was trained with shuffled batches, this run reads them in file order "
                       "(--no-shuffle); resume without --no-shuffle"),
            std::string::npos)
      << r.out;
  // nothing to resume from: --resume is an error naming what it looked for (a mistyped folder
  // must not train from scratch); --resume=auto starts from step 0 with a note
  std::string none = tmp() + "/corrupt_none";
  r = apexrun(plan + " --data examples/mlp/data --steps 2 --resume --checkpoint-dir " + none);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, none + ": --resume: no checkpoint to resume from (looked for " + none +
                       "/ckpt-*.apxckpt: the folder does not exist); check --checkpoint-dir, or use --resume=auto "
                       "to start from step 0 when there is none\n");
  mkdir(none.c_str(), 0755);
  r = apexrun(plan + " --data examples/mlp/data --steps 2 --resume --checkpoint-dir " + none);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("(looked for " + none + "/ckpt-*.apxckpt); check --checkpoint-dir"), std::string::npos)
      << r.out;
  r = apexrun(plan + " --data examples/mlp/data --steps 2 --resume=auto --checkpoint-dir " + none);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("no checkpoint in " + none + " (--resume=auto): starting from step 0"), std::string::npos)
      << r.out;
  EXPECT_TRUE(exists(ckpt(none, 2)));
  r = apexrun(plan + " --data examples/mlp/data --steps 4 --resume=auto --checkpoint-dir " + none);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from " + ckpt(none, 2)), std::string::npos) << r.out;
  // already at --steps: nothing to do
  r = apexrun(plan + " --data examples/mlp/data --steps 3 --resume --checkpoint-dir " + dir);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nothing to train: at step 3 of 3"), std::string::npos) << r.out;
}

TEST(Train, DataFolderIsValidated) {
  std::string plan = compile("mlp", "data_mlp", APX_O0);
  std::string base = tmp() + "/data_cases";
  mkdir(base.c_str(), 0755);
  auto folder = [&](const std::string &name, const std::string &py) {
    std::string d = base + "/" + name;
    mkdir(d.c_str(), 0755);
    Result g = sh("scripts/py -c \"import numpy as np; d='" + d + "'; " + py + "\"");
    EXPECT_EQ(g.code, 0) << g.out;
    return d;
  };
  struct Case {
    std::string dir;
    int code;
    std::string want;
  } cases[] = {
      {folder("missing", "np.save(d+'/x.npy', np.zeros((64,64),'f4'))"), 2, "/labels.npy: missing"},
      {folder("shape", "np.save(d+'/x.npy', np.zeros((64,32),'f4')); np.save(d+'/labels.npy', np.zeros(64,'i8'))"),
       2, "shape [64,32] does not match the plan input 'x' [32,64] (expected [N,64]"},
      {folder("count", "np.save(d+'/x.npy', np.zeros((64,64),'f4')); np.save(d+'/labels.npy', np.zeros(60,'i8'))"),
       2, "labels.npy: 60 samples, but " + base + "/count/x.npy has 64"},
      {folder("dtype", "np.save(d+'/x.npy', np.zeros((64,64),'f4')); np.save(d+'/labels.npy', np.zeros(64,'f4'))"),
       2, "labels.npy: dtype float32, but the plan input 'labels' is int64"},
      {folder("range", "np.save(d+'/x.npy', np.zeros((64,64),'f4')); np.save(d+'/labels.npy', np.full(64, 2**63, 'u8'))"),
       2, "labels.npy: element 0 (> 9223372036854775807) does not fit the plan input 'labels' (int64)"},
      {folder("corrupt", "np.save(d+'/x.npy', np.zeros((64,64),'f4')); open(d+'/labels.npy','wb').write(b'junk')"),
       2, "labels.npy: not a valid .npy file"},
      // a class label outside [0, classes): found when the data is loaded, not by the kernel
      {folder("label_high", "np.save(d+'/x.npy', np.zeros((64,64),'f4')); y=np.arange(64)%10; y[37]=10; np.save(d+'/labels.npy', y)"),
       2, base + "/label_high/labels.npy: sample 37: class label 10 is out of range: the plan's "},
      {folder("label_neg", "np.save(d+'/x.npy', np.zeros((64,64),'f4')); y=np.arange(64)%10; y[5]=-1; np.save(d+'/labels.npy', y)"),
       2, "label_neg/labels.npy: sample 5: class label -1 is out of range"},
      // fewer samples than one batch (32) would repeat samples within a batch
      {folder("few", "np.save(d+'/x.npy', np.zeros((20,64),'f4')); np.save(d+'/labels.npy', np.zeros(20,'i8'))"),
       2, base + "/few/x.npy: 20 samples, fewer than batch size 32"},
      // accepted: float64 features and int32 labels are converted
      {folder("convert", "np.save(d+'/x.npy', np.random.RandomState(0).randn(64,64)); np.save(d+'/labels.npy', np.arange(64,dtype='i4')%10)"),
       0, "trained steps 1..3 of 3"},
  };
  for (auto &c : cases) {
    Result r = apexrun(plan + " --data " + c.dir + " --steps 3");
    EXPECT_EQ(r.code, c.code) << c.dir << ": " << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.dir << ": " << r.out;
    if (c.code) {
      EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
    }
  }
  Result r = apexrun(plan + " --data " + base + "/nowhere --steps 3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("nowhere/x.npy: missing"), std::string::npos) << r.out;
}

TEST(Train, AccumulationRunsKMicroBatchesPerStep) {
  std::string plan = compile("mlp", "acc_mlp", APX_O2, [](ApxOptions &o) { o.accumulate = 4; });
  ApxDiag d;
  apx_diag_init(&d);
  ApxPlan p;
  apx_plan_init(&p);
  ASSERT_EQ(apx_plan_read(&p, plan.c_str(), &d), 0) << d.msg;
  ApxTrainConfig cfg;
  apx_train_config_init(&cfg);
  cfg.data_dir = "examples/mlp/data";
  cfg.steps = 20;
  ApxTrainer t;
  ASSERT_EQ(apx_trainer_init(&t, &p, &cfg, &d), 0) << d.msg;
  EXPECT_EQ(t.accumulate, 4);
  double first = 0, last = 0;
  for (int s = 0; s < 20; s++) {
    ApxStepRecord r;
    ASSERT_EQ(apx_trainer_step(&t, &r, &d), 0) << d.msg;
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  ApxTrainState st;
  apx_trainer_state(&t, &st);
  EXPECT_EQ(st.batches, 80);                     // 4 micro-batches per optimizer step
  EXPECT_EQ(st.epoch * 2048 + st.epoch_pos, 80 * 32);
  int64_t opt_step = 0;
  int32_t sb = apx_plan_find_buffer(&p, "apx_optimizer_step");
  ASSERT_GE(sb, 0);
  ASSERT_EQ(apx_exec_read(&t.ex, sb, &opt_step, 8, &d), 0);
  EXPECT_EQ(opt_step, 20);                       // one update per 4 micro-batches
  EXPECT_LT(last, first * 0.5) << first << " -> " << last;
  apx_trainer_free(&t);
  apx_plan_free(&p);
}

TEST(Train, ExportedOnnxHoldsTheTrainedFp32Masters) {
  std::string plan = compile("mlp", "export_mlp", APX_O2);
  ApxDiag d;
  apx_diag_init(&d);
  ApxPlan p;
  apx_plan_init(&p);
  ASSERT_EQ(apx_plan_read(&p, plan.c_str(), &d), 0) << d.msg;
  ASSERT_NE(apx_plan_find_blob(&p, APX_PLAN_BLOB_MODEL), nullptr);
  ApxTrainConfig cfg;
  apx_train_config_init(&cfg);
  cfg.data_dir = "examples/mlp/data";
  cfg.steps = 15;
  ApxTrainer t;
  ASSERT_EQ(apx_trainer_init(&t, &p, &cfg, &d), 0) << d.msg;
  for (int s = 0; s < 15; s++) {
    ApxStepRecord r;
    ASSERT_EQ(apx_trainer_step(&t, &r, &d), 0) << d.msg;
  }
  std::string out = tmp() + "/export_mlp.onnx";
  ASSERT_EQ(apx_export_onnx(&p, &t.ex, out.c_str(), &d), 0) << d.msg;
  std::string bytes = slurp(out);
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, bytes.size(), (const uint8_t *)bytes.data());
  ASSERT_NE(m, nullptr);
  const Onnx__GraphProto *g = m->graph;
  ASSERT_EQ(g->n_input, 1u);
  EXPECT_STREQ(g->input[0]->name, "x");  // labels only fed the loss
  ASSERT_EQ(g->n_output, 1u);
  EXPECT_STREQ(g->output[0]->name, "logits");
  for (size_t i = 0; i < g->n_node; i++) EXPECT_STRNE(g->node[i]->op_type, "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(g->n_initializer, 6u);
  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    int32_t master = apx_plan_find_buffer(&p, (std::string(tp->name) + "_fp32_master").c_str());
    ASSERT_GE(master, 0) << tp->name;
    std::vector<uint8_t> want((size_t)p.bufs[master].bytes);
    ASSERT_EQ(apx_exec_read(&t.ex, master, want.data(), want.size(), &d), 0);
    EXPECT_EQ(tp->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    ASSERT_EQ(tp->raw_data.len, want.size()) << tp->name;
    EXPECT_EQ(0, memcmp(tp->raw_data.data, want.data(), want.size())) << tp->name << " is the trained master";
    int32_t init = apx_plan_find_buffer(&p, tp->name);
    EXPECT_NE(0, memcmp(p.bufs[master].data, want.data(), want.size())) << tp->name << " was trained";
    (void)init;
  }
  onnx__model_proto__free_unpacked(m, nullptr);
  apx_trainer_free(&t);
  apx_plan_free(&p);
}

// apexc strips the embedded model with lookups answered from its graph (no plan index is
// built to write a plan); the blob is byte for byte the one the plan's own index gives, and
// the weights are out of it.
TEST(Train, EmbeddedModelIsStrippedAsThePlanIndexWould) {
  struct Case {
    const char *model;
    ApxOptLevel level;
  } cases[] = {{"mlp", APX_O0}, {"mlp", APX_O2}, {"cnn", APX_O1}, {"transformer", APX_O2},
               {"transformer", APX_O3}};
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.model) + " O" + std::to_string((int)c.level));
    std::string plan_path = compile(c.model, std::string("strip_") + c.model, c.level);
    ApxDiag d;
    apx_diag_init(&d);
    ApxPlan written;
    apx_plan_init(&written);
    ASSERT_EQ(apx_plan_read(&written, plan_path.c_str(), &d), 0) << d.msg;
    const ApxPlanBlob *blob = apx_plan_find_blob(&written, APX_PLAN_BLOB_MODEL);
    ASSERT_NE(blob, nullptr);

    std::string src = std::string("examples/") + c.model + "/model.onnx";
    ApxOptions o;
    apx_options_init(&o);
    o.model_path = src.c_str();
    o.opt_level = c.level;
    o.quiet = 1;
    ApxGraph g;
    ApxPlan indexed;
    std::string err;
    ASSERT_TRUE(apx_testing::CompileToPlan(o, &g, &indexed, &d, &err)) << err;
    std::string model = slurp(src);
    const void *out = nullptr;
    size_t out_len = 0;
    ASSERT_EQ(apx_model_blob_strip(&indexed, model.data(), model.size(), &indexed.arena, &out, &out_len), 0);
    EXPECT_LT(out_len, model.size() / 2) << "the weights were stripped";
    ASSERT_EQ(blob->data_len, out_len);
    EXPECT_EQ(0, memcmp(blob->data, out, out_len));
    apx_plan_free(&indexed);
    apx_graph_free(&g);
    apx_plan_free(&written);
  }
}

// Format 2 plans hold each fp16 parameter once (its fp32 master; the half copy is made at
// load) and no optimizer-state zeros. A format 1 plan of the same model (every initial byte
// stored, as the previous apexc wrote it) still loads, and both train to the same bits.
TEST(Train, Format1PlansStillLoadAndTrainTheSame) {
  ApxOptions o;
  apx_options_init(&o);
  std::string src = "examples/mlp/model.onnx";
  o.model_path = src.c_str();
  o.opt_level = APX_O2;
  o.quiet = 1;
  ApxGraph g;
  ApxPlan p;
  ApxDiag d;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileToPlan(o, &g, &p, &d, &err)) << err;
  int derived = 0;
  int64_t half_bytes = 0;
  for (int32_t i = 0; i < p.n_bufs; i++) {
    const ApxPlanBuffer *b = &p.bufs[i];
    if (b->kind == APX_VAL_STATE && !(b->flags & APX_VALF_MASTER)) {
      EXPECT_TRUE(b->data == nullptr || b->bytes <= 8) << b->name << ": state stored in the plan";
    }
    if (b->init_from < 0) continue;
    derived++;
    half_bytes += (b->bytes + 63) / 64 * 64;
    EXPECT_EQ(b->data, nullptr);
    EXPECT_EQ(b->dtype, APX_DT_F16);
    EXPECT_TRUE(p.bufs[b->init_from].flags & APX_VALF_MASTER) << b->name;
  }
  EXPECT_EQ(derived, 6);  // 3 weights, 3 biases
  std::string v2 = tmp() + "/format2.apx", v1 = tmp() + "/format1.apx";
  ASSERT_EQ(apx_plan_write(&p, v2.c_str(), &d), 0) << d.msg;
  // the format 1 writing of the same plan: half copies stored, no derived buffers
  p.format_version = 1;
  std::vector<std::vector<uint16_t>> halves;
  halves.reserve((size_t)p.n_bufs);
  for (int32_t i = 0; i < p.n_bufs; i++) {
    ApxPlanBuffer *b = &p.bufs[i];
    if (b->init_from < 0) continue;
    int v = apx_graph_find_value(&g, b->name);
    ASSERT_GE(v, 0) << b->name;
    EXPECT_EQ(g.vals[v].data, nullptr) << b->name;  // the graph holds no half bytes (cast_insert)
    // the half bytes: the master's converted, as the runtime makes them
    const ApxPlanBuffer *m = &p.bufs[b->init_from];
    int64_t n = b->bytes / 2;
    halves.emplace_back((size_t)n);
    ASSERT_EQ(apx_cpu_convert(m->data, m->dtype, halves.back().data(), b->dtype, n), APX_STATUS_OK);
    b->data = halves.back().data();
    b->init_from = -1;
  }
  apx_plan_layout_data(&p);
  ASSERT_EQ(apx_plan_write(&p, v1.c_str(), &d), 0) << d.msg;
  apx_plan_free(&p);
  apx_graph_free(&g);
  EXPECT_EQ((int64_t)slurp(v1).size() - (int64_t)slurp(v2).size(), half_bytes);
  ApxPlan r;
  apx_plan_init(&r);
  ASSERT_EQ(apx_plan_read(&r, v1.c_str(), &d), 0) << d.msg;
  EXPECT_EQ(r.format_version, 1u);
  apx_plan_free(&r);
  std::string logs[2], onnx[2];
  for (int k = 0; k < 2; k++) {
    std::string plan = k ? v1 : v2, base = tmp() + "/format" + std::to_string(2 - k);
    Result run = apexrun(plan + " --data examples/mlp/data --steps 20 --quiet --threads 1 --log " + base +
                         ".jsonl --export-onnx " + base + ".onnx");
    ASSERT_EQ(run.code, 0) << run.out;
    logs[k] = base + ".jsonl";
    onnx[k] = slurp(base + ".onnx");
  }
  EXPECT_EQ(losses(logs[0]), losses(logs[1]));
  EXPECT_TRUE(onnx[0] == onnx[1]) << "the trained models differ";
}

TEST(Train, RefusesPlansItCannotTrain) {
  std::string inference = compile("mlp", "infer_only", APX_O1, [](ApxOptions &o) { o.training = 0; });
  Result r = apexrun(inference + " --data examples/mlp/data --steps 3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no training graph"), std::string::npos) << r.out;
  r = apexrun("examples/mlp/model.onnx --data examples/mlp/data --steps 3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("not an apexc plan (compile the model first"), std::string::npos) << r.out;
}

// Every step overflowing with a dynamic scale that collapsed (below 1, at --min-loss-scale,
// or 10 overflows in a row): exit code 1 with one line saying so, after the log and the
// checkpoint are written; the untrained model is not exported. A short run in which every
// step overflowed while the scale settles from 2^16 (its normal warm-up) warns, exports and
// exits with 0.
TEST(Train, AllStepsOverflowedExitsWith1) {
  std::string plan_path = compile("mlp", "all_ovf", APX_O2);
  std::string data = tmp() + "/all_ovf_data";
  scaled_mlp_data(data, 1e6f);  // the fp16 forward itself overflows: no scale helps (and the steps
                                // are named for their non-finite loss, not as gradient overflows)
  std::string dir = tmp() + "/all_ovf_ckpt", onnx = tmp() + "/all_ovf.onnx", log = tmp() + "/all_ovf.jsonl";
  Result r = apexrun(plan_path + " --data " + data + " --steps 20 --quiet --checkpoint-dir " + dir +
                     " --export-onnx " + onnx + " --log " + log);
  EXPECT_EQ(r.code, 1) << r.out;
  std::vector<std::string> ls = lines(slurp(log));
  ASSERT_EQ(ls.size(), 20u);
  EXPECT_EQ(field(ls[19], "skipped"), "true");
  // 20 halvings of 2^16
  EXPECT_NE(r.out.find("apexrun: all 20 steps were skipped (20 non-finite loss); loss scale fell to 0.0625; the "
                       "model did not train (not exported)\n"), std::string::npos) << r.out;
  EXPECT_TRUE(exists(ckpt(dir, 20)));
  EXPECT_FALSE(exists(onnx));

  // collapsed onto the --min-loss-scale floor after two halvings (2^16 -> 2^15 -> 2^14)
  std::string floor_plan = compile("mlp", "all_ovf_floor", APX_O2, [](ApxOptions &o) { o.min_loss_scale = 16384; });
  r = apexrun(floor_plan + " --data " + data + " --steps 2 --quiet --export-onnx " + onnx);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("apexrun: all 2 steps were skipped (2 non-finite loss); loss scale fell to 16384; the "
                       "model did not train (not exported)\n"), std::string::npos) << r.out;
  EXPECT_FALSE(exists(onnx));

  // 10 overflows in a row (the scaler's collapse run) although the scale is still 2^6
  r = apexrun(plan_path + " --data " + data + " --steps 10 --quiet");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("apexrun: all 10 steps were skipped (10 non-finite loss); loss scale fell to 64; the model "
                       "did not train\n"), std::string::npos) << r.out;

  // warming up: x * 64 overflows fp16 gradients at 2^16 and 2^15, the scale (now 2^14) is
  // healthy and the next steps train (OverflowSkipsTheStep... above)
  std::string warm_plan = compile("mlp", "all_ovf_warm", APX_O2, [](ApxOptions &o) { o.scale_window = 5; });
  std::string warm = tmp() + "/all_ovf_warm_data";
  scaled_mlp_data(warm, 64.0f);
  r = apexrun(warm_plan + " --data " + warm + " --steps 2 --quiet --no-shuffle --export-onnx " + onnx);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: warning: all 2 steps of this run overflowed while the loss scale settles "
                       "(now 16384); nothing was updated\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 skipped (overflow), exported " + onnx + "\n"), std::string::npos) << r.out;
  EXPECT_TRUE(exists(onnx));
}

// --checkpoint-dir that cannot hold checkpoints fails before any training (exit 2, one line),
// not after the whole run; a missing folder is created with its parents and the probe leaves
// nothing behind. A --log that cannot be written is bad usage too (exit 2).
TEST(Train, CheckpointDirIsCheckedBeforeTraining) {
  std::string plan = compile("mlp", "ckpt_dir", APX_O2);
  std::string log = tmp() + "/ckpt_dir.jsonl";
  std::string afile = tmp() + "/ckpt_dir_afile";
  put_file(afile, "x");
  const std::string common = plan + " --data examples/mlp/data --steps 3 --log " + log + " --checkpoint-dir ";
  for (std::string bad : {afile, afile + "/sub"}) {
    Result r = apexrun(common + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_EQ(r.out, bad + ": cannot write checkpoints: Not a directory\n");
    EXPECT_FALSE(exists(log)) << "trained before checking the checkpoint folder";
  }
  Result r = apexrun(common + "/proc/nope");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.find("/proc/nope: cannot write checkpoints: "), 0u) << r.out;
  EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
  EXPECT_FALSE(exists(log));
  // missing folders are created (mkdir -p) and the probe is removed
  std::string top = tmp() + "/ckpt_dir_new", dir = top + "/a/b";
  r = apexrun(plan + " --data examples/mlp/data --steps 3 --quiet --checkpoint-dir " + dir);
  EXPECT_EQ(r.code, 0) << r.out;
  std::set<std::string> names;
  DIR *dp = opendir(dir.c_str());
  ASSERT_NE(dp, nullptr);
  for (struct dirent *e; (e = readdir(dp));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.insert(e->d_name);
  closedir(dp);
  EXPECT_EQ(names, (std::set<std::string>{"ckpt-000000000003.apxckpt"}));
  // --log in a missing folder: exit 2
  std::string badlog = tmp() + "/no_such_log_dir/x.jsonl";
  r = apexrun(plan + " --data examples/mlp/data --steps 3 --log " + badlog);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, badlog + ": cannot write the log: No such file or directory\n");
}

// Destinations that exist and are not regular files (a FIFO here; /dev/null as root) are
// refused, not replaced by the rename: the plan (apexc -o) and --export-onnx, before training
// and in the export itself.
TEST(Train, NonRegularDestinationsAreRefused) {
  std::string dir = tmp() + "/fifo_dest";
  mkdir(dir.c_str(), 0755);
  std::string fifo = dir + "/dest";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0) << strerror(errno);
  auto is_fifo = [&] {
    struct stat st;
    return lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  };
  const std::string want = fifo + ": not a regular file (refusing to replace it)";
  // the plan writer
  ApxOptions o;
  apx_options_init(&o);
  o.model_path = "examples/mlp/model.onnx";
  o.opt_level = APX_O2;
  o.quiet = 1;
  ApxDiag d;
  ApxGraph g;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileGraph(o, &g, &d, &err)) << err;
  EXPECT_EQ(apx_emit_plan_file(&g, &o, fifo.c_str(), &d), -1);
  EXPECT_EQ(d.code, 2);
  EXPECT_EQ(std::string(d.msg), want);
  apx_graph_free(&g);
  EXPECT_TRUE(is_fifo());
  // --export-onnx: checked before training
  std::string plan = compile("mlp", "fifo_dest", APX_O2);
  std::string log = dir + "/log.jsonl";
  Result r = apexrun(plan + " --data examples/mlp/data --steps 3 --log " + log + " --export-onnx " + fifo);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, want + "\n");
  EXPECT_FALSE(exists(log));
  EXPECT_TRUE(is_fifo());
  // and by the export itself
  apx_diag_init(&d);
  ApxPlan p;
  apx_plan_init(&p);
  ASSERT_EQ(apx_plan_read(&p, plan.c_str(), &d), 0) << d.msg;
  ApxTrainConfig cfg;
  apx_train_config_init(&cfg);
  cfg.data_dir = "examples/mlp/data";
  cfg.steps = 1;
  ApxTrainer t;
  ASSERT_EQ(apx_trainer_init(&t, &p, &cfg, &d), 0) << d.msg;
  EXPECT_EQ(apx_export_onnx(&p, &t.ex, fifo.c_str(), &d), -1);
  EXPECT_EQ(d.code, 2);
  EXPECT_EQ(std::string(d.msg), want);
  EXPECT_TRUE(is_fifo());
  apx_trainer_free(&t);
  apx_plan_free(&p);
  unlink(fifo.c_str());
}

// A warmup longer than the lr schedule, whose length is --steps when the plan has no
// --total-steps, trains (a short trial run is legitimate) with a one-line warning.
TEST(Train, WarmupLongerThanTheStepsWarns) {
  std::string plan = compile("mlp", "long_warmup", APX_O2, [](ApxOptions &o) {
    o.schedule = 1;  // cosine
    o.warmup_steps = 10;
  });
  Result r = apexrun(plan + " --data examples/mlp/data --steps 5 --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: warning: the lr warmup (10 steps) is longer than the lr schedule (--steps 5; "
                       "no --total-steps): the lr never reaches its base 0.001\n"),
            std::string::npos) << r.out;
  r = apexrun(plan + " --data examples/mlp/data --steps 10 --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
}

// Class labels and token ids are checked when the data is loaded, also where they reach the
// kernel through a Reshape (the transformer's labels) or feed a Gather (its tokens).
TEST(Train, IndexValuesOutOfRangeAreBadInput) {
  std::string plan = compile("transformer", "index_tf", APX_O2);
  std::string base = tmp() + "/index_cases";
  mkdir(base.c_str(), 0755);
  auto folder = [&](const std::string &name, const std::string &edit) {
    std::string d = base + "/" + name;
    mkdir(d.c_str(), 0755);
    Result g = sh("scripts/py -c \"import numpy as np; d='" + d + "'; "
                  "t=np.load('examples/transformer/data/tokens.npy'); l=np.load('examples/transformer/data/labels.npy'); " +
                  edit + "; np.save(d+'/tokens.npy', t); np.save(d+'/labels.npy', l)\"");
    EXPECT_EQ(g.code, 0) << g.out;
    return d;
  };
  std::string tok = folder("tokens", "t[500, 3] = 64");
  Result r = apexrun(plan + " --data " + tok + " --steps 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, tok + "/tokens.npy: sample 500 (element 3): index 64 is out of range: the plan's Gather "
                   "'embed/gather' takes [-64, 64)\n");
  std::string lab = folder("labels", "l[9, 2] = -3");
  r = apexrun(plan + " --data " + lab + " --steps 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(lab + "/labels.npy: sample 9 (element 2): class label -3 is out of range: the plan's "),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("takes [0, 64)"), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
  // in range (the edge values): trains
  std::string edge = folder("edge", "t[0, 0] = 63; l[0, 0] = 63; l[1, 1] = 0");
  r = apexrun(plan + " --data " + edge + " --steps 2 --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
}

// --export-onnx to a place that cannot be written fails before any training (exit 2, the
// path named), not after the training.
TEST(Train, ExportDestinationIsCheckedBeforeTraining) {
  std::string plan = compile("mlp", "export_dest", APX_O2);
  std::string log = tmp() + "/export_dest.jsonl";
  std::string bad = tmp() + "/no_such_folder/model.onnx";
  Result r = apexrun(plan + " --data examples/mlp/data --steps 3 --log " + log + " --export-onnx " + bad);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, bad + ": cannot write: No such file or directory\n");
  EXPECT_FALSE(exists(log)) << "trained before checking the export destination";
  r = apexrun(plan + " --data examples/mlp/data --steps 3 --export-onnx " + tmp());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, tmp() + ": cannot write: Is a directory\n");
  // writable: exported, and the check left nothing behind
  std::string dir = tmp() + "/export_dest_ok";
  mkdir(dir.c_str(), 0755);
  r = apexrun(plan + " --data examples/mlp/data --steps 3 --quiet --export-onnx " + dir + "/m.onnx");
  EXPECT_EQ(r.code, 0) << r.out;
  std::set<std::string> names;
  DIR *dp = opendir(dir.c_str());
  ASSERT_NE(dp, nullptr);
  for (struct dirent *e; (e = readdir(dp));)
    if (e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))) names.insert(e->d_name);
  closedir(dp);
  EXPECT_EQ(names, (std::set<std::string>{"m.onnx"}));
}

// Options before the plan, like other tools: `apexrun -q --steps 3 PLAN --data D`.
TEST(Train, OptionsBeforeThePlan) {
  std::string plan = compile("mlp", "opt_order", APX_O2);
  Result r = apexrun("-q --steps 3 " + plan + " --data examples/mlp/data");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("trained steps 1..3 of 3"), std::string::npos) << r.out;
  r = apexrun("--seed 0 --data examples/mlp/data " + plan + " --steps 2 --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  r = apexrun("--bogus " + plan + " --data examples/mlp/data --steps 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option '--bogus'"), std::string::npos) << r.out;
}

// --seed 0 is a seed (Dropout key and data order), not "unset": a plan compiled with seed 5
// gives other Dropout masks with --seed 0 than without --seed; --seed 0 twice is identical.
TEST(Train, SeedZeroIsASeed) {
  std::string dir = tmp() + "/seed0";
  std::string plan = CompileDropoutPlan(dir, 5);
  ASSERT_FALSE(HasFailure());
  // file order: only the Dropout key differs between these runs
  const std::string common = plan + " --data " + dir + "/data --quiet --no-shuffle --steps 10";
  for (const char *run : {"none", "zero_a", "zero_b", "one"}) {
    std::string seed = !strcmp(run, "none") ? "" : !strcmp(run, "one") ? " --seed 1" : " --seed 0";
    Result r = apexrun(common + seed + " --log " + dir + "/" + run + ".jsonl");
    ASSERT_EQ(r.code, 0) << run << ": " << r.out;
  }
  auto L = [&](const char *run) { return losses(dir + "/" + run + ".jsonl"); };
  ASSERT_EQ(L("zero_a").size(), 10u);
  EXPECT_EQ(L("zero_a"), L("zero_b")) << "--seed 0 twice";
  EXPECT_NE(L("zero_a"), L("none")) << "--seed 0 fell back to the plan's seed 5";
  EXPECT_NE(L("zero_a"), L("one"));
  // shuffled: the data order of --seed 0 is its own too, and resume with --seed 0 continues it
  const std::string shuf = plan + " --data " + dir + "/data --quiet --steps 20";
  Result r = apexrun(shuf + " --seed 0 --checkpoint-dir " + dir + "/ca --log " + dir + "/sa.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  r = apexrun(plan + " --data " + dir + "/data --quiet --steps 10 --seed 0 --checkpoint-dir " + dir + "/cb --log " +
              dir + "/sb.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  r = apexrun(shuf + " --seed 0 --resume --checkpoint-dir " + dir + "/cb --log " + dir + "/sb.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(losses(dir + "/sa.jsonl"), losses(dir + "/sb.jsonl"));
  EXPECT_TRUE(slurp(ckpt(dir + "/ca", 20)) == slurp(ckpt(dir + "/cb", 20)));
  // a checkpoint of --seed 0 is not resumed without it (the plan's seed is 5)
  r = apexrun(shuf + " --resume --checkpoint-dir " + dir + "/cb");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("data seed 0, this run 5"), std::string::npos) << r.out;
}

namespace {

uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// A version 4 checkpoint rewritten in an older layout, as an older apexrun wrote it: version 3
// (19 state fields: no run-time hyperparameters), version 2 (18: no data digest either) or
// version 1 (16: no lr schedule fields either).
std::string checkpoint_old(const std::string &v3, uint32_t version) {
  const uint8_t *b = (const uint8_t *)v3.data();
  EXPECT_EQ(apx_le_get_u32(b + 8), 4u);
  EXPECT_EQ(apx_le_get_u32(b + 40), 24u * 8);
  const uint32_t fields = version == 1 ? 16 : version == 2 ? 18 : 19;
  std::string out = v3.substr(0, 64) + v3.substr(64, fields * 8);
  uint64_t pos = 64 + 24 * 8;
  uint32_t n = apx_le_get_u32(b + 32);
  for (uint32_t t = 0; t < n; t++) {
    uint32_t nl = apx_le_get_u32(b + pos), rank = apx_le_get_u32(b + pos + 4 + nl + 4);
    uint64_t hdr = 4 + nl + 8 + 8 * (uint64_t)rank + 8;
    uint64_t nbytes = apx_le_get_u64(b + pos + hdr - 8);
    out += v3.substr(pos, hdr);
    pos = pad(pos + hdr, 64);
    out.resize(pad(out.size(), 64), '\0');
    out += v3.substr(pos, nbytes);
    pos = pad(pos + nbytes, 8);
    out.resize(pad(out.size(), 8), '\0');
  }
  EXPECT_EQ(pos, v3.size());
  uint8_t *o = (uint8_t *)&out[0];
  apx_le_put_u32(o + 8, version);
  apx_le_put_u64(o + 24, out.size());
  apx_le_put_u32(o + 40, fields * 8);
  apx_le_put_u32(o + 36, 0);
  apx_le_put_u32(o + 36, apx_crc32c(0, o, out.size()));
  return out;
}

}  // namespace

// The lr schedule's length (T = --steps when the plan has no --total-steps) is part of the
// checkpoint: a resume continues the same cosine schedule, and one with another T is refused
// naming both lengths. Version 1 checkpoints (without these fields) still resume.
TEST(Train, LrScheduleLengthIsKeptOnResume) {
  std::string plan = compile("mlp", "cosine", APX_O2, [](ApxOptions &o) {
    o.schedule = 1;  // cosine
    o.warmup_steps = 2;
  });
  const std::string common = plan + " --data examples/mlp/data --quiet --checkpoint-every 10";
  std::string a = tmp() + "/cos_a";
  Result r = apexrun(common + " --steps 20 --checkpoint-dir " + a + " --log " + a + ".jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  // extending the run would restart the schedule's decay from another length: refused
  r = apexrun(common + " --steps 30 --resume --checkpoint-dir " + a);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, ckpt(a, 20) + ": the checkpoint's cosine lr schedule runs over 20 steps, this run asks for 30 "
                   "(--steps sets the length when there is no --total-steps); to train longer with a cosine "
                   "schedule, start over with --total-steps (apexc or apexrun), or resume with --steps 20\n");
  // resumed from step 10 with the same length: the same lr (and bytes) as the straight run
  std::string c = tmp() + "/cos_c";
  mkdir(c.c_str(), 0755);
  put_file(ckpt(c, 10), slurp(ckpt(a, 10)));
  r = apexrun(common + " --steps 20 --resume --checkpoint-dir " + c + " --log " + c + ".jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> la = lines(slurp(a + ".jsonl")), lc = lines(slurp(c + ".jsonl"));
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lc.size(), 10u);
  for (int i = 0; i < 10; i++) EXPECT_EQ(field(lc[i], "lr"), field(la[10 + i], "lr")) << "step " << 11 + i;
  EXPECT_NE(field(la[10], "lr"), field(la[19], "lr")) << "the cosine decays";
  EXPECT_TRUE(slurp(ckpt(a, 20)) == slurp(ckpt(c, 20)));
  // version 1 (no schedule fields), version 2 (no data digest) and version 3 (no run-time
  // hyperparameters) checkpoints resume to the same bytes
  for (uint32_t version : {1u, 2u, 3u}) {
    std::string v = tmp() + "/cos_v" + std::to_string(version);
    mkdir(v.c_str(), 0755);
    put_file(ckpt(v, 10), checkpoint_old(slurp(ckpt(a, 10)), version));
    r = apexrun(common + " --steps 20 --resume --checkpoint-dir " + v);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(slurp(ckpt(a, 20)) == slurp(ckpt(v, 20))) << "resumed from a version " << version << " checkpoint";
  }
  // another version is refused by number
  std::string bad = slurp(ckpt(a, 10));
  apx_le_put_u32((uint8_t *)&bad[8], 7);
  std::string w = tmp() + "/cos_v7";
  mkdir(w.c_str(), 0755);
  put_file(ckpt(w, 10), bad);
  r = apexrun(common + " --steps 20 --resume --checkpoint-dir " + w);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("checkpoint version 7, this apexrun reads 1 to 5"), std::string::npos) << r.out;
}

// A checkpoint whose loss scale is not finite and positive (a valid checksum around a broken
// state) is refused naming the file, never trained with.
TEST(Train, CheckpointLossScaleMustBeFiniteAndPositive) {
  std::string plan = compile("mlp", "scale_ckpt", APX_O2);
  std::string dir = tmp() + "/scale_ckpt";
  Result r = apexrun(plan + " --data examples/mlp/data --steps 3 --quiet --checkpoint-dir " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  std::string good = slurp(ckpt(dir, 3));
  const double values[] = {INFINITY, -INFINITY, NAN, 0.0, -4.0};
  int k = 0;
  for (double v : values) {
    std::string bytes = good;
    uint8_t *b = (uint8_t *)&bytes[0];
    uint64_t bits;
    memcpy(&bits, &v, 8);
    apx_le_put_u64(b + 64 + 8 * 10, bits);  // ApxTrainState.scale
    apx_le_put_u32(b + 36, 0);
    apx_le_put_u32(b + 36, apx_crc32c(0, b, bytes.size()));
    std::string d = tmp() + "/scale_ckpt_" + std::to_string(k++);
    mkdir(d.c_str(), 0755);
    put_file(ckpt(d, 3), bytes);
    r = apexrun(plan + " --data examples/mlp/data --steps 6 --quiet --resume --checkpoint-dir " + d);
    EXPECT_EQ(r.code, 2) << v << ": " << r.out;
    EXPECT_NE(r.out.find(ckpt(d, 3) + ": corrupt checkpoint: invalid training state (loss scale "), std::string::npos)
        << v << ": " << r.out;
    EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
  }
}

// ---- issue 13: run-time hyperparameters, non-finite inputs named, progress ------------------

namespace {

// Every log row as "step:loss:loss_scale:grad_norm:lr" (the ms field differs between runs).
std::vector<std::string> rows(const std::string &log) {
  std::vector<std::string> v;
  for (auto &l : lines(slurp(log)))
    v.push_back(field(l, "step") + ":" + field(l, "loss") + ":" + field(l, "loss_scale") + ":" +
                field(l, "grad_norm") + ":" + field(l, "lr"));
  return v;
}

}  // namespace

// `apexrun --lr --weight-decay --clip-grad-norm --lr-schedule --warmup-steps --total-steps`
// override the plan's values without recompiling: a default plan run with them trains to the
// same losses, learning rates, gradient norms and exported weights as a plan compiled with
// them (AdamW, and SGD whose plan had no weight decay at all), and differently from the
// plain plan.
TEST(Train, RunTimeHyperparametersTrainAsTheCompiledOnes) {
  struct Opt {
    const char *name;
    ApxOptimizerKind kind;
  } opts[] = {{"adamw", APX_OPTIM_ADAMW}, {"sgd", APX_OPTIM_SGD}};
  for (const Opt &op : opts) {
    std::string plain = compile("mlp", std::string("hp_plain_") + op.name, APX_O2,
                                [&](ApxOptions &o) { o.optimizer = op.kind; });
    std::string compiled = compile("mlp", std::string("hp_compiled_") + op.name, APX_O2, [&](ApxOptions &o) {
      o.optimizer = op.kind;
      o.lr = 0.02f;
      o.lr_set = 1;
      o.weight_decay = 0.1f;
      o.weight_decay_set = 1;
      o.clip_grad_norm = 0.05f;
      o.schedule = 1;  // cosine
      o.warmup_steps = 3;
      o.total_steps = 15;
    });
    const std::string common = " --data examples/mlp/data --steps 12 --quiet --no-shuffle";
    std::string a = tmp() + "/hp_a_" + op.name, b = tmp() + "/hp_b_" + op.name, c = tmp() + "/hp_c_" + op.name;
    Result r = apexrun(compiled + common + " --log " + a + ".jsonl --export-onnx " + a + ".onnx");
    ASSERT_EQ(r.code, 0) << r.out;
    r = apexrun(plain + common + " --lr 0.02 --weight_decay 0.1 --clip-grad-norm=0.05 --lr-schedule cosine "
                "--warmup-steps 3 --total-steps 15 --log " + b + ".jsonl --export-onnx " + b + ".onnx");
    ASSERT_EQ(r.code, 0) << r.out;
    r = apexrun(plain + common + " --log " + c + ".jsonl --export-onnx " + c + ".onnx");
    ASSERT_EQ(r.code, 0) << r.out;
    std::vector<std::string> ra = rows(a + ".jsonl"), rb = rows(b + ".jsonl");
    ASSERT_EQ(ra.size(), 12u);
    EXPECT_EQ(ra, rb) << op.name << ": loss, scale, grad norm and lr of every step";
    EXPECT_TRUE(slurp(a + ".onnx") == slurp(b + ".onnx")) << op.name << ": the trained weights";
    EXPECT_FALSE(slurp(a + ".onnx") == slurp(c + ".onnx")) << op.name << ": the overrides changed nothing";
    // the clipping norm was reached (so --clip-grad-norm was exercised) and the warmup ramps
    std::vector<std::string> la = lines(slurp(a + ".jsonl"));
    EXPECT_GT(std::stod(field(la[5], "grad_norm")), 0.05) << la[5];
    EXPECT_EQ(field(la[0], "lr"), "0.0066666664") << la[0];  // 0.02 / 3 in fp32
  }
}

// The overrides are part of the checkpoint (version 4): a resume without the flags continues
// with them (and says so) to the bytes of a straight run; a resume whose flag contradicts the
// checkpoint is refused naming both values and what to do; a checkpoint of a run without
// overrides (also a version 3 one, from before they existed) refuses a contradicting flag.
TEST(Train, RunTimeHyperparametersAreCheckpointedAndCheckedOnResume) {
  std::string plan = compile("mlp", "hp_resume", APX_O2);
  const std::string hp = " --lr 0.005 --weight-decay 0.1 --lr-schedule linear --total-steps 30";
  const std::string common = plan + " --data examples/mlp/data --checkpoint-every 10";
  std::string a = tmp() + "/hpr_a", b = tmp() + "/hpr_b";
  Result r = apexrun(common + hp + " --quiet --steps 20 --checkpoint-dir " + a + " --log " + a + ".jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  r = apexrun(common + hp + " --quiet --steps 10 --checkpoint-dir " + b + " --log " + b + ".jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  r = apexrun(common + " --steps 20 --resume --checkpoint-dir " + b + " --log " + b + ".jsonl --progress-every 100");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: resumed from " + ckpt(b, 10) + " (step 10, loss scale 65536; with its run's --lr "
                       "0.005 --weight-decay 0.1 --lr-schedule linear --total-steps 30)\n"), std::string::npos)
      << r.out;
  EXPECT_EQ(rows(a + ".jsonl"), rows(b + ".jsonl"));
  EXPECT_TRUE(slurp(ckpt(a, 20)) == slurp(ckpt(b, 20))) << "the resumed run's final checkpoint";
  // repeating the flags is the same resume
  std::string c = tmp() + "/hpr_c";
  mkdir(c.c_str(), 0755);
  put_file(ckpt(c, 10), slurp(ckpt(b, 10)));
  r = apexrun(common + hp + " --quiet --steps 20 --resume --checkpoint-dir " + c);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(slurp(ckpt(a, 20)) == slurp(ckpt(c, 20)));
  // contradicting flags: refused, naming what the checkpoint has and what to do
  struct Case {
    std::string flags, want;
  } cases[] = {
      {" --lr 0.01", "the checkpoint was trained with --lr 0.005, this run gives --lr 0.01 (a resume continues the "
                     "run it saved); resume with --lr 0.005, or without --lr\n"},
      {" --weight-decay 0", "the checkpoint was trained with --weight-decay 0.1, this run gives --weight-decay 0 (a "
                            "resume continues the run it saved); resume with --weight-decay 0.1, or without "
                            "--weight-decay\n"},
      {" --lr-schedule cosine", "the checkpoint was trained with --lr-schedule linear, this run gives --lr-schedule "
                                "cosine (a resume continues the run it saved); resume with --lr-schedule linear, or "
                                "without --lr-schedule\n"},
      {" --total-steps 40", "the checkpoint was trained with --total-steps 30, this run gives --total-steps 40 (a "
                            "resume continues the run it saved); resume with --total-steps 30, or without "
                            "--total-steps\n"},
      {" --warmup-steps 2", "the checkpoint was trained with --warmup-steps 0, this run gives --warmup-steps 2 (a "
                            "resume continues the run it saved); resume with --warmup-steps 0, or without "
                            "--warmup-steps\n"},
      {" --clip-grad-norm 1", "the checkpoint was trained with --clip-grad-norm 0, this run gives --clip-grad-norm 1 "
                              "(a resume continues the run it saved); resume with --clip-grad-norm 0, or without "
                              "--clip-grad-norm\n"},
  };
  for (auto &k : cases) {
    r = apexrun(common + k.flags + " --quiet --steps 30 --resume --checkpoint-dir " + b);
    EXPECT_EQ(r.code, 2) << k.flags << ": " << r.out;
    EXPECT_EQ(r.out, ckpt(b, 20) + ": " + k.want) << k.flags;
  }
  // a run without overrides, and its checkpoint in the version 3 layout (written before
  // run-time hyperparameters existed): trained with the plan's values
  std::string p = tmp() + "/hpr_plain", v3 = tmp() + "/hpr_v3";
  r = apexrun(common + " --quiet --steps 10 --checkpoint-dir " + p);
  ASSERT_EQ(r.code, 0) << r.out;
  mkdir(v3.c_str(), 0755);
  put_file(ckpt(v3, 10), checkpoint_old(slurp(ckpt(p, 10)), 3));
  for (const std::string &dir : {p, v3}) {
    r = apexrun(common + " --quiet --steps 20 --lr 0.01 --resume --checkpoint-dir " + dir);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, ckpt(dir, 10) + ": the checkpoint was trained with --lr 0.001, this run gives --lr 0.01 (a "
                     "resume continues the run it saved); resume with --lr 0.001, or without --lr\n");
    r = apexrun(common + " --quiet --steps 20 --lr 0.001 --resume --checkpoint-dir " + dir);  // the plan's value
    EXPECT_EQ(r.code, 0) << r.out;
  }
  EXPECT_TRUE(slurp(ckpt(p, 20)) == slurp(ckpt(v3, 20)));
  // a warmup longer than a given schedule length is bad usage, as in apexc
  r = apexrun(plan + " --data examples/mlp/data --steps 5 --warmup-steps 50 --total-steps 20");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "apexrun: --warmup-steps 50 is more than --total-steps 20 (the warmup is part of the lr "
                   "schedule)\n");
}

// GradScaler's growth and backoff factors (apexc --growth-factor / --backoff-factor) reach the
// run-time scaler: x 0.25 on the overflow, x 4 after the window of clean steps.
TEST(Train, GrowthAndBackoffFactorsReachTheScaler) {
  std::string plan = compile("mlp", "factors", APX_O2, [](ApxOptions &o) {
    o.scale_window = 5;
    o.growth_factor = 4;
    o.backoff_factor = 0.25f;
  });
  std::string data = tmp() + "/factors_data", log = tmp() + "/factors.jsonl";
  scaled_mlp_data(data, 64.0f);  // overflows at 2^16 and 2^15, trains at 2^14
  Result r = apexrun(plan + " --data " + data + " --steps 40 --quiet --no-shuffle --log " + log);
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> ls = lines(slurp(log));
  ASSERT_EQ(ls.size(), 40u);
  EXPECT_EQ(field(ls[0], "skipped"), "true");
  EXPECT_EQ(field(ls[0], "reason"), "\"gradient overflow in 'fc1.weight' at loss scale 65536\"");
  EXPECT_EQ(field(ls[1], "loss_scale"), "16384");  // 65536 x 0.25
  int backoffs = 0, growths = 0, clean = 0;
  for (size_t i = 1; i < ls.size(); i++) {
    double prev = std::stod(field(ls[i - 1], "loss_scale")), now = std::stod(field(ls[i], "loss_scale"));
    bool skipped = field(ls[i - 1], "skipped") == "true";
    clean = skipped ? 0 : clean + 1;
    if (skipped) {
      EXPECT_EQ(now, prev * 0.25) << ls[i];
      backoffs++;
    } else if (clean == 5) {
      EXPECT_EQ(now, prev * 4) << ls[i];
      growths++;
      clean = 0;
    } else {
      EXPECT_EQ(now, prev) << ls[i];
      EXPECT_EQ(field(ls[i - 1], "reason"), "<missing>") << "a clean step has no reason: " << ls[i - 1];
    }
  }
  EXPECT_GE(backoffs, 2);
  EXPECT_GE(growths, 1);
}

// A NaN or Inf in the data is reported at start (file, how many samples, the first), and a
// step whose batch holds one is named as non-finite input (file, sample, element), never as
// "gradient overflow in 'fc1.weight' at loss scale 1"; its log row says so in "reason" (every
// row has a numeric loss or a reason). A finite file value that its conversion to the plan
// input's type makes infinite is named as such; a non-finite loss from finite inputs is named
// as the forward pass's; a run whose every step was skipped for non-finite data did not train
// (exit 1), however the loss scale stands.
TEST(Train, NonFiniteInputsAreNamedNotCalledOverflows) {
  std::string o0 = compile("mlp", "nan_o0", APX_O0);
  std::string data = tmp() + "/nan_data", log = tmp() + "/nan.jsonl";
  edited_mlp_data(data, [](double *x, int64_t, int64_t f) {
    x[37 * f + 5] = NAN;
    x[1000 * f] = INFINITY;
  });
  Result r = apexrun(o0 + " --data " + data + " --steps 40 --no-shuffle --log " + log);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: warning: " + data + "/x.npy: 2 of 2048 samples hold NaN or Inf (first: sample 37 "
                       "element 5 is nan); steps on them are reported as non-finite input\n"), std::string::npos)
      << r.out;
  // batch 32 in file order: sample 37 is in step 2, sample 1000 in step 32
  EXPECT_NE(r.out.find("apexrun: step 2: non-finite input: " + data + "/x.npy sample 37 element 5 is nan: step "
                       "skipped\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("apexrun: step 32: non-finite input: " + data + "/x.npy sample 1000 element 0 is inf: step "
                       "skipped\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("overflow in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 skipped (2 non-finite input)"), std::string::npos) << r.out;
  std::vector<std::string> ls = lines(slurp(log));
  ASSERT_EQ(ls.size(), 40u);
  for (auto &l : ls) {
    bool numeric = field(l, "loss") != "null";
    EXPECT_TRUE(numeric || field(l, "reason") != "<missing>") << l;
  }
  EXPECT_EQ(field(ls[1], "loss"), "null");
  EXPECT_EQ(field(ls[1], "reason"), "\"non-finite input: " + data + "/x.npy sample 37 element 5 is nan\"");
  EXPECT_EQ(field(ls[1], "overflow_at"), "null");

  // shuffled, and across the micro-batches of --accumulate 4: every NaN step is found
  std::string acc = compile("mlp", "nan_acc", APX_O0, [](ApxOptions &o) { o.accumulate = 4; });
  r = apexrun(acc + " --data " + data + " --steps 20 --quiet --log " + log);
  ASSERT_EQ(r.code, 0) << r.out;
  int n_null = 0;
  for (auto &l : lines(slurp(log)))
    if (field(l, "loss") == "null") {
      n_null++;
      EXPECT_EQ(field(l, "reason").find("\"non-finite input: " + data + "/x.npy sample "), 0u) << l;
    }
  EXPECT_GE(n_null, 1);  // 20 x 4 x 32 samples: each epoch (64 batches) holds both

  // a float64 file whose 1e300 becomes inf in the plan's float32 input
  std::string wide = tmp() + "/nan_wide";
  edited_mlp_data(wide, [](double *x, int64_t, int64_t f) { x[3 * f + 2] = 1e300; }, true);
  r = apexrun(o0 + " --data " + wide + " --steps 2 --no-shuffle");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: warning: " + wide + "/x.npy: 1 of 2048 samples hold values beyond the range of "
                       "float32, the plan input 'x''s type (first: sample 3 element 2, 1e+300 becomes inf)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("apexrun: step 1: non-finite input: " + wide + "/x.npy sample 3 element 2 is inf as float32, "
                       "the plan input's type (the file's value is beyond its range): step skipped\n"),
            std::string::npos) << r.out;

  // finite inputs whose fp16 forward overflows: the loss is named, not the gradients
  std::string o2 = compile("mlp", "nan_o2", APX_O2);
  std::string big = tmp() + "/nan_big";
  scaled_mlp_data(big, 1e6f);
  r = apexrun(o2 + " --data " + big + " --steps 1 --no-shuffle");
  EXPECT_NE(r.out.find("apexrun: step 1: non-finite loss ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(") from finite inputs: the forward pass produced it (at -O2 in float16: an activation "
                       "beyond its range? apexc --explain shows which nodes run in half precision): step skipped, "
                       "scale now 32768\n"), std::string::npos) << r.out;

  // every sample holds a NaN: 2 steps skipped while the dynamic scale would still be settling
  // is not a warm-up but a failure
  std::string all = tmp() + "/nan_all";
  edited_mlp_data(all, [](double *x, int64_t n, int64_t f) {
    for (int64_t s = 0; s < n; s++) x[s * f] = NAN;
  });
  r = apexrun(o2 + " --data " + all + " --steps 2 --quiet");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("apexrun: all 2 steps were skipped (2 non-finite input); loss scale fell to 16384; the model "
                       "did not train\n"), std::string::npos) << r.out;
}

namespace {

// Runs apexrun with stdout and stderr on a pseudo-terminal; returns what the terminal showed.
std::string on_terminal(const std::vector<std::string> &args, int *code) {
  int master = -1, slave = -1;
  if (openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return "openpty failed";
  struct termios tio;
  if (tcgetattr(slave, &tio) == 0) {
    tio.c_oflag &= ~(tcflag_t)OPOST;  // "\n" stays "\n"
    tcsetattr(slave, TCSANOW, &tio);
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(master);
    dup2(slave, 1);
    dup2(slave, 2);
    exec_apexrun(args);
  }
  close(slave);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child closed the terminal
    out.append(buf, (size_t)n);
  }
  close(master);
  int st = 0;
  waitpid(pid, &st, 0);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace

// The progress line: on a terminal one line updated with "\r" (step/total, loss, loss scale,
// lr, samples/s, skipped, ETA) ending in a newline; without one (a file, a pipe, mpirun) plain
// lines, every N steps with --progress-every N and none for a short run by default; the
// summary agrees with the last step (its loss and loss scale, and the scale the next step
// would use when the last one changed it).
TEST(Train, ProgressLinesOnATerminalAndWithoutOne) {
  std::string plan = compile("mlp", "progress", APX_O2);
  int code = -1;
  std::string tty = on_terminal({plan, "--data", "examples/mlp/data", "--steps", "30"}, &code);
  ASSERT_EQ(code, 0) << tty;
  // the first loss to within a few ulps: its last printed digit depends on the GEMM kernels
  // the machine's CPU gets (kernels/cpu/common.c picks OpenBLAS's by instruction set;
  // 2.28827214 and 2.28827262 were both seen), the line's layout does not
  const std::string head = "\rstep 1/30  loss ";
  ASSERT_EQ(tty.find(head), 0u) << tty;
  char *num_end = nullptr;
  double first_loss = strtod(tty.c_str() + head.size(), &num_end);
  EXPECT_NEAR(first_loss, 2.288272, 2e-6) << tty;
  EXPECT_EQ(std::string(num_end).find("  scale 65536  lr 0.001  "), 0u) << tty;
  size_t last = tty.rfind("\rstep 30/30  loss ");
  ASSERT_NE(last, std::string::npos) << tty;
  EXPECT_NE(tty.find(" samples/s  0 skipped  ETA 0s", last), std::string::npos) << tty;
  size_t nl = tty.find('\n');
  EXPECT_GT(nl, last) << "one line, updated in place: " << tty;
  EXPECT_EQ(tty.find("apexrun: trained steps 1..30 of 30"), nl + 1) << tty;

  // not a terminal: a short run prints no progress, --progress-every N a line every N steps
  Result r = apexrun(plan + " --data examples/mlp/data --steps 30");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
  r = apexrun(plan + " --data examples/mlp/data --steps 30 --progress-every 10");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  std::vector<std::string> ls = lines(r.out);
  ASSERT_EQ(ls.size(), 4u) << r.out;
  EXPECT_EQ(ls[0].find("step 10/30  loss "), 0u) << ls[0];
  EXPECT_EQ(ls[2].find("step 30/30  loss "), 0u) << ls[2];
  // the last line's loss and scale are the summary's
  std::string loss = ls[2].substr(ls[2].find("loss ") + 5, ls[2].find("  scale") - ls[2].find("loss ") - 5);
  EXPECT_NE(ls[3].find("-> " + loss + ", loss scale 65536, 0 skipped"), std::string::npos) << ls[2] << "\n" << ls[3];
  r = apexrun(plan + " --data examples/mlp/data --steps 30 --progress-every 10 --quiet");
  EXPECT_EQ(lines(r.out).size(), 1u) << r.out;

  // the last step overflowed: both show the scale it used, the summary also the next one
  std::string ovf = compile("mlp", "progress_ovf", APX_O2);
  std::string data = tmp() + "/progress_ovf_data";
  scaled_mlp_data(data, 64.0f);
  r = apexrun(ovf + " --data " + data + " --steps 1 --no-shuffle --progress-every 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step 1/1  loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  scale 65536  lr 0.001  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 skipped  ETA 0s\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", loss scale 65536 (now 32768), 1 skipped (overflow)"), std::string::npos) << r.out;
}
