// dp_agree_test.cc - data-parallel ranks agree before the first step and stop together
// (issue 16): MPMD launches (`mpirun -np 1 apexrun A : -np 1 apexrun B`) where one setting
// differs between the ranks - --steps, --seed, --no-shuffle, --check-replicas,
// --checkpoint-dir given to one rank, --checkpoint-every, --resume, --export-onnx and --log
// given to one rank, the run-time hyperparameters (--lr ... --total-steps, and one given to
// one rank only), the plan, one changed byte of a data file - each named on every rank
// (the line appears twice), exit 2, within seconds instead of the collective timeout. And a
// SIGTERM to rank 1 alone stops both ranks after the same step, with rank 0's checkpoint of
// that step written and identical replicas; the job resumes from it. Only rank 0 prints the
// progress line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/mpi_testing.h"

namespace {

using apx_testing::CountOccurrences;
using apx_testing::Launch;
using apx_testing::MpiResult;
using apx_testing::MpirunPrefix;
using apx_testing::Ranks;
using apx_testing::RunCommand;

std::string Tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void Put(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// The MLP with batch 8 (tests/dp/mlp_n.onnx), compiled once.
const std::string &Plan() {
  static std::string p;
  if (p.empty()) {
    p = Tmp() + "/agree8.apx";
    MpiResult r = RunCommand("./compiler/apexc tests/dp/mlp_n.onnx --dim N=8 -O0 -q -o " + p);
    EXPECT_EQ(r.code, 0) << r.out;
  }
  return p;
}

const std::string kData = "examples/mlp/data";

// Rank 0 runs `apexrun PLAN --data D --steps 4 --quiet a`, rank 1 the same with b.
MpiResult Mpmd(const std::string &a, const std::string &b, const std::string &plan_b = "") {
  std::string base = "./runtime/apexrun " + Plan() + " --data " + kData + " --steps 4 --quiet ";
  std::string base_b = plan_b.empty() ? base : "./runtime/apexrun " + plan_b + " --data " + kData + " --steps 4 --quiet ";
  return RunCommand(MpirunPrefix(1) + base + a + " : -np 1 " + base_b + b);
}

}  // namespace

TEST(DataParallelAgreement, EverySettingThatMustMatchIsNamedOnEveryRank) {
  std::string ck = Tmp() + "/agree_ck";
  struct Case {
    std::string a, b, want;
  } cases[] = {
      {"--steps 10", "--steps 20", "--steps: rank 1 has 20, rank 0 has 10: every rank needs the same settings"},
      {"--seed 1", "--seed 2", "--seed (the data order and Dropout seed): rank 1 has 2, rank 0 has 1"},
      {"", "--no-shuffle", "--no-shuffle: rank 1 reads batches in file order (--no-shuffle), rank 0 shuffled"},
      {"--check-replicas 2", "", "--check-replicas: rank 1 has 0, rank 0 has 2"},
      {"", "--checkpoint-dir " + ck + "1", "--checkpoint-dir is given to rank 1 but not to rank 0: only rank 0 "
                                          "writes checkpoints"},
      {"--checkpoint-dir " + ck + "2 --checkpoint-every 2", "--checkpoint-dir " + ck + "2 --checkpoint-every 3",
       "--checkpoint-every: rank 1 has 3, rank 0 has 2"},
      {"--checkpoint-dir " + ck + "3 --resume=auto", "--checkpoint-dir " + ck + "3",
       "--resume: rank 1 has no --resume, rank 0 has --resume=auto"},
      {"", "--export-onnx " + Tmp() + "/agree.onnx", "--export-onnx is given to rank 1 but not to rank 0: only rank 0 "
                                                    "writes the exported model"},
      {"--log " + Tmp() + "/agree.jsonl", "", "--log is given to rank 0 but not to rank 1"},
      {"--lr 0.01", "--lr 0.02", "--lr: rank 1 has 0.02, rank 0 has 0.01: every rank needs the same settings"},
      {"--weight-decay 0.1", "", "--weight-decay: rank 1 has 0.01, rank 0 has 0.1"},
      {"--clip-grad-norm 1", "--clip-grad-norm 2", "--clip-grad-norm: rank 1 has 2, rank 0 has 1"},
      {"", "--lr-schedule cosine", "--lr-schedule: rank 1 has cosine, rank 0 has constant"},
      {"--warmup-steps 2", "", "--warmup-steps: rank 1 has 0, rank 0 has 2"},
      {"--total-steps 8", "--total-steps 9", "the lr schedule's length (--total-steps): rank 1 has 9, rank 0 has 8"},
      // the plan's value given to one rank only: equal now, but a resume would differ
      {"--lr 0.001", "", "--lr is given to rank 0 but not to rank 1 (with the same value: a resume continues with "
                         "the checkpoint's value where it is not given)"},
  };
  for (auto &c : cases) {
    MpiResult r = Mpmd(c.a, c.b);
    EXPECT_EQ(r.code, 2) << c.want << "\n" << r.out;
    EXPECT_EQ(CountOccurrences(r.out, c.want), 2) << "named on both ranks: " << r.out;
    EXPECT_LT(r.seconds, 60) << "ended by the agreement, not a timeout";
  }
  // the same settings: trains
  MpiResult ok = Mpmd("--seed 3", "--seed 3");
  EXPECT_EQ(ok.code, 0) << ok.out;
  ok = Mpmd("--lr 0.01 --lr-schedule linear", "--lr=0.01 --lr_schedule linear");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// Only rank 0 prints the progress line, and under mpirun (whose ranks write to a
// pseudo-terminal of mpirun's, forwarded into a file here) never the "\r" form.
TEST(DataParallelAgreement, OnlyRankZeroPrintsProgress) {
  MpiResult d = RunCommand(MpirunPrefix(2) + "./runtime/apexrun " + Plan() + " --data " + kData + " --steps 4");
  ASSERT_EQ(d.code, 0) << d.out;
  EXPECT_EQ(d.out.find('\r'), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("step 1/4"), std::string::npos) << "a short run prints no plain progress line: " << d.out;
  MpiResult r = RunCommand(MpirunPrefix(2) + "./runtime/apexrun " + Plan() + " --data " + kData +
                           " --steps 4 --progress-every 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "step 2/4  loss "), 1) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "step 4/4  loss "), 1) << r.out;
  // 2 ranks x batch 8 x 4 steps: the samples/s count the global batch
  EXPECT_EQ(CountOccurrences(r.out, "apexrun: trained steps 1..4 of 4"), 1) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
}

// Data of the same shape with one changed byte on rank 1: the per-file digests name it.
TEST(DataParallelAgreement, DifferentDataOfTheSameShapeIsNamed) {
  std::string d = Tmp() + "/agree_data";
  mkdir(d.c_str(), 0755);
  Put(d + "/x.npy", Slurp(kData + "/x.npy"));
  std::string labels = Slurp(kData + "/labels.npy");
  labels[labels.size() - 8] ^= 1;
  Put(d + "/labels.npy", labels);
  std::string base = " --steps 4 --quiet";
  MpiResult r = RunCommand(MpirunPrefix(1) + "./runtime/apexrun " + Plan() + " --data " + kData + base +
                           " : -np 1 ./runtime/apexrun " + Plan() + " --data " + d + base);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "labels.npy: rank 1's file differs from rank 0's (digest of size and contents "), 2)
      << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "x.npy: rank 1"), 0) << "x.npy is the same: " << r.out;
}

// Another plan on rank 1 (here: another --accumulate, which is part of the plan): the plan
// hash, compared first, names it.
TEST(DataParallelAgreement, AnotherPlanIsNamed) {
  std::string other = Tmp() + "/agree8_acc2.apx";
  MpiResult c = RunCommand("./compiler/apexc tests/dp/mlp_n.onnx --dim N=8 -O0 --accumulate 2 -q -o " + other);
  ASSERT_EQ(c.code, 0) << c.out;
  MpiResult r = Mpmd("", "", other);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, ": rank 1 runs a plan with hash "), 2) << r.out;
}

// SIGTERM to rank 1 only: the stop request travels with the step's found_inf reduction, so
// both ranks finish the same step and stop; rank 0 writes that step's checkpoint, the
// replicas are identical, the job exits with 143, and a resume continues from there.
TEST(DataParallelAgreement, ASignalToOneRankStopsEveryRankAfterTheSameStep) {
  std::string ck = Tmp() + "/agree_stop", log = Tmp() + "/agree_stop.jsonl", out = Tmp() + "/agree_stop.out";
  pid_t job = Launch(2, "./runtime/apexrun " + Plan() + " --data " + kData + " --steps 100000000 --quiet --log " + log +
                            " --checkpoint-dir " + ck, out);
  for (int i = 0; i < 600 && CountOccurrences(Slurp(log), "\n") < 20; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<pid_t> ranks = Ranks(job);
  ASSERT_EQ(ranks.size(), 2u) << Slurp(out);
  kill(ranks.back(), SIGTERM);
  int status = 0, code = -1;
  for (int i = 0; i < 600; i++) {
    if (waitpid(job, &status, WNOHANG) == job) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (code < 0) {
    kill(-job, SIGKILL);
    for (pid_t p : ranks) kill(p, SIGKILL);
    waitpid(job, nullptr, 0);
  }
  std::string o = Slurp(out);
  EXPECT_EQ(code, 143) << o;
  const std::string key = "apexrun: stopped by SIGTERM after step ";
  size_t at = o.find(key);
  ASSERT_NE(at, std::string::npos) << o;
  long s = strtol(o.c_str() + at + key.size(), nullptr, 10);
  EXPECT_NE(o.find("apexrun: 2 replicas identical after step " + std::to_string(s) + " "), std::string::npos)
      << "both ranks stopped after step " << s << ": " << o;
  char name[64];
  snprintf(name, sizeof name, "/ckpt-%012ld.apxckpt", s);
  EXPECT_NE(o.find("checkpoint " + ck + name + " written; to continue, run the same command with --resume"),
            std::string::npos)
      << o;
  EXPECT_EQ(CountOccurrences(Slurp(log), "\n"), s) << "rank 0 logged every finished step";
  MpiResult r = apx_testing::Mpirun(2, "./runtime/apexrun " + Plan() + " --data " + kData + " --steps " +
                                           std::to_string(s + 5) + " --checkpoint-dir " + ck + " --resume");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from " + ck + name), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 replicas identical after step " + std::to_string(s + 5)), std::string::npos) << r.out;
}
