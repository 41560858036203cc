// dp_train_test.cc - `mpirun -np K apexrun PLAN --data DIR --steps N` on CPU (DESIGN.md 11,
// 13): K ranks with per-rank batch B train exactly like one process with batch K*B
// (--no-shuffle, and with the shared shuffled order), an overflow on one rank makes every
// rank skip, checkpoints resume identically on every rank, and a dead (SIGKILL) or hung
// (SIGSTOP) rank ends the job with an error within the timeout instead of hanging.
//
// The plans come from tests/dp/{mlp,cnn}_n.onnx (the examples with a symbolic batch N,
// tests/dp/make_models.py), compiled with apexc --dim N=B; the weights are compared through
// apexrun --export-onnx (fp32 parameters and BatchNorm running statistics).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "compiler/onnx_load.h"
#include "ir/options.h"
#include "runtime/npy.h"
}
#include "runtime/mpi_testing.h"

namespace {

using apx_testing::CountOccurrences;
using apx_testing::Launch;
using apx_testing::MpiResult;
using apx_testing::Mpirun;
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

// apexc tests/dp/<model>_n.onnx --dim N=batch <flags> -o <tmp>/<name>.apx
std::string Compile(const std::string &model, int batch, const std::string &flags, const std::string &name) {
  std::string plan = Tmp() + "/" + name + ".apx";
  MpiResult r = RunCommand("./compiler/apexc tests/dp/" + model + "_n.onnx --dim N=" + std::to_string(batch) + " " +
                           flags + " -q -o " + plan);
  EXPECT_EQ(r.code, 0) << r.out;
  return plan;
}

// The float initializers of an exported model by name.
std::map<std::string, std::vector<float>> Weights(const std::string &onnx) {
  std::map<std::string, std::vector<float>> w;
  ApxGraph g;
  ApxOptions o;
  ApxDiag d;
  apx_options_init(&o);
  apx_diag_init(&d);
  d.quiet = 1;
  apx_graph_init(&g, onnx.c_str());
  EXPECT_EQ(apx_onnx_load_file(&g, onnx.c_str(), &o, &d), 0) << d.msg;
  for (int v = 0; v < g.n_vals; v++) {
    const ApxValue &val = g.vals[v];
    if (!val.data || val.dtype != APX_DT_F32 || (val.kind != APX_VAL_PARAM && val.kind != APX_VAL_CONST)) continue;
    const float *p = (const float *)val.data;
    w[val.name] = std::vector<float>(p, p + apx_value_numel(&val));
  }
  apx_graph_free(&g);
  return w;
}

struct Diff {
  double max_abs = 0, max_rel = 0;  // rel: |a - b| / max(1, |b|)
  std::string where;
};

// filter: "" every tensor, "running" only BatchNorm running statistics, "-running" the rest
Diff Compare(const std::map<std::string, std::vector<float>> &a, const std::map<std::string, std::vector<float>> &b,
             const std::string &filter = "") {
  Diff r;
  EXPECT_EQ(a.size(), b.size());
  EXPECT_GT(a.size(), 0u);
  for (const auto &kv : a) {
    bool running = kv.first.find("running") != std::string::npos;
    if ((filter == "running" && !running) || (filter == "-running" && running)) continue;
    auto it = b.find(kv.first);
    if (it == b.end() || it->second.size() != kv.second.size()) {
      ADD_FAILURE() << "tensor " << kv.first << " missing or resized";
      continue;
    }
    for (size_t i = 0; i < kv.second.size(); i++) {
      double e = std::fabs((double)kv.second[i] - (double)it->second[i]);
      double rel = e / std::max(1.0, std::fabs((double)it->second[i]));
      if (!(e <= r.max_abs)) r.max_abs = e, r.where = kv.first;
      if (!(rel <= r.max_rel)) r.max_rel = rel;
    }
  }
  return r;
}

// Trains `plan` on `np` ranks (np = 0: a plain process, no mpirun) and exports the weights.
std::map<std::string, std::vector<float>> Train(int np, const std::string &plan, const std::string &data, int steps,
                                                const std::string &flags, const std::string &name,
                                                std::string *out = nullptr) {
  std::string onnx = Tmp() + "/" + name + ".onnx";
  std::string args = "./runtime/apexrun " + plan + " --data " + data + " --steps " + std::to_string(steps) +
                     " --export-onnx " + onnx + " " + flags;
  MpiResult r = np ? Mpirun(np, args) : RunCommand(args);
  EXPECT_EQ(r.code, 0) << r.out;
  if (np > 1) {
    EXPECT_NE(r.out.find(std::to_string(np) + " replicas identical after step"), std::string::npos) << r.out;
  }
  if (out) *out = r.out;
  return Weights(onnx);
}

// ---- same weights as one process on the combined batch ----------------------------------

// MLP, fp32, AdamW: 2 ranks x 8 and 4 ranks x 8 against one process with 16 and 32.
TEST(DataParallel, MlpMatchesOneProcessOnTheCombinedBatch) {
  std::string p8 = Compile("mlp", 8, "-O0", "mlp8"), p16 = Compile("mlp", 16, "-O0", "mlp16"),
              p32 = Compile("mlp", 32, "-O0", "mlp32");
  const std::string data = "examples/mlp/data", flags = "--no-shuffle";
  auto one16 = Train(0, p16, data, 20, flags, "mlp_1x16"), one32 = Train(0, p32, data, 20, flags, "mlp_1x32");
  auto two = Train(2, p8, data, 20, flags, "mlp_2x8"), four = Train(4, p8, data, 20, flags, "mlp_4x8");
  Diff d2 = Compare(two, one16), d4 = Compare(four, one32);
  // fp32 with different summation orders (per-rank sums + allreduce vs one sum)
  EXPECT_LT(d2.max_abs, 1e-6) << d2.where;
  EXPECT_LT(d4.max_abs, 1e-6) << d4.where;
  // and the runs really trained: weights moved by far more than that
  EXPECT_GT(Compare(one16, Weights(Tmp() + "/mlp_1x32.onnx")).max_abs, 1e-3);
  std::printf("MLP fp32 AdamW, 20 steps: max |w(2 ranks x 8) - w(1 x 16)| = %.3g (%s), "
              "max |w(4 ranks x 8) - w(1 x 32)| = %.3g (%s)\n",
              d2.max_abs, d2.where.c_str(), d4.max_abs, d4.where.c_str());
}

// Gradient accumulation (buckets reduced once per optimizer step, at the start of the
// OPTIMIZER section) and --grad-predivide (sum of g / 4, then * 4 / K) change nothing.
TEST(DataParallel, AccumulationAndPredivideMatchOneProcess) {
  for (std::string f : {"--accumulate 2", "--grad-predivide 4"}) {
    std::string tag = f.substr(2, 5);
    std::string p8 = Compile("mlp", 8, "-O0 " + f, "mlpv8" + tag), p16 = Compile("mlp", 16, "-O0 " + f, "mlpv16" + tag);
    auto one = Train(0, p16, "examples/mlp/data", 20, "--no-shuffle", "mlpv_1x16" + tag);
    auto two = Train(2, p8, "examples/mlp/data", 20, "--no-shuffle", "mlpv_2x8" + tag);
    Diff d = Compare(two, one);
    EXPECT_LT(d.max_abs, 1e-6) << f << ": " << d.where;
    std::printf("MLP fp32 %s, 20 steps: max |w(2 x 8) - w(1 x 16)| = %.3g\n", f.c_str(), d.max_abs);
  }
}

// With shuffling every rank draws the same permutation from the same seed. SGD: its update
// is linear in the gradient, so the two runs differ only by the rounding of the gradient
// sums (8 + 8 rows allreduced vs 16 rows); AdamW's g / sqrt(v) turns that rounding on
// elements whose gradient is near zero into differences of up to lr per step, which the
// no-shuffle AdamW cases above happen to avoid but a test should not rely on.
TEST(DataParallel, ShuffledBatchesMatchOneProcess) {
  const char *sgd = "-O0 --optimizer sgd --lr 0.05 --momentum 0.9";
  std::string p8 = Compile("mlp", 8, sgd, "mlps8"), p16 = Compile("mlp", 16, sgd, "mlps16");
  auto one = Train(0, p16, "examples/mlp/data", 20, "--seed 7", "mlps_1x16");
  auto two = Train(2, p8, "examples/mlp/data", 20, "--seed 7", "mlps_2x8");
  Diff d = Compare(two, one);
  EXPECT_LT(d.max_abs, 1e-6) << d.where;
  std::printf("MLP shuffled (seed 7), 20 steps: max |w(2 x 8) - w(1 x 16)| = %.3g\n", d.max_abs);
}

// CNN with BatchNorm: --sync-bn gives every rank the statistics of the combined batch, so
// 2 x 8 and 4 x 4 match one process with 16 (plain BatchNormalization); without it each rank
// normalizes its own slice and the weights differ. SGD with momentum: AdamW would turn the
// convolution biases' gradients, which BatchNorm makes zero up to rounding, into +-lr steps.
TEST(DataParallel, CnnWithSyncBnMatchesOneProcessOnTheCombinedBatch) {
  const std::string opt = "-O0 --optimizer sgd --lr 0.1 --momentum 0.9";
  std::string s8 = Compile("cnn", 8, opt + " --sync-bn", "cnns8"), s4 = Compile("cnn", 4, opt + " --sync-bn", "cnns4"),
              p8 = Compile("cnn", 8, opt, "cnnp8"), p16 = Compile("cnn", 16, opt, "cnnp16");
  const std::string data = "examples/cnn/data", flags = "--no-shuffle";
  auto one = Train(0, p16, data, 20, flags, "cnn_1x16");
  auto two = Train(2, s8, data, 20, flags, "cnn_2x8_sync"), four = Train(4, s4, data, 20, flags, "cnn_4x4_sync");
  auto plain = Train(2, p8, data, 20, flags, "cnn_2x8_plain");
  Diff w2 = Compare(two, one, "-running"), w4 = Compare(four, one, "-running"), wp = Compare(plain, one, "-running");
  Diff r2 = Compare(two, one, "running"), r4 = Compare(four, one, "running"), rp = Compare(plain, one, "running");
  // parameters: fp32 rounding of different summation orders, through 20 steps
  EXPECT_LT(w2.max_rel, 1e-5) << w2.where;
  EXPECT_LT(w4.max_rel, 1e-5) << w4.where;
  // running statistics average batch means that the reference itself sums sequentially in
  // fp32 over N*H*W = 1024 values per channel: bound 1024 * FLT_EPSILON
  EXPECT_LT(r2.max_rel, 1024 * FLT_EPSILON) << r2.where;
  EXPECT_LT(r4.max_rel, 1024 * FLT_EPSILON) << r4.where;
  EXPECT_GT(wp.max_rel, 1e-3) << "without --sync-bn the ranks' BatchNorm statistics differ";
  EXPECT_GT(rp.max_rel, 1e-3);
  std::printf("CNN+BN fp32 SGD, 20 steps, max |w - w(1 x 16)| / max(1, |w|), parameters / running statistics: "
              "2 x 8 --sync-bn %.3g (%s) / %.3g; 4 x 4 --sync-bn %.3g (%s) / %.3g; 2 x 8 without --sync-bn %.3g / %.3g\n",
              w2.max_rel, w2.where.c_str(), r2.max_rel, w4.max_rel, w4.where.c_str(), r4.max_rel, wp.max_rel,
              rp.max_rel);
}

// ---- O1: fp32 gradients, buckets and accumulation (DESIGN.md 11, issue 14 item 2) ---------

// At O1 the weights are fp32 and each weight's gradient is fp32 (the backward of its
// per-step Cast widens the half product's gradient): every micro-batch's gradient is
// computed the same way on any rank, and the sums over micro-batches and ranks are fp32.
// So 2 ranks x --accumulate 4 train like one process x 8 micro-batches, and 2 ranks without
// accumulation like one process x 2 micro-batches, up to fp32 rounding of the sums (with
// fp16 buckets the second pair differed by 3.4e-3 after 20 steps). SGD with momentum: see
// ShuffledBatchesMatchOneProcess.
TEST(DataParallel, O1GradientsAreSummedInFp32OverRanksAndMicroBatches) {
  const std::string f = "-O1 --optimizer sgd --lr 0.05 --momentum 0.9", data = "examples/mlp/data";
  struct Case {
    int ranks_acc, one_acc;
  };
  for (Case c : {Case{4, 8}, Case{1, 2}}) {
    std::string ra = std::to_string(c.ranks_acc), oa = std::to_string(c.one_acc);
    std::string pr = Compile("mlp", 8, f + (c.ranks_acc > 1 ? " --accumulate " + ra : ""), "mlpo1_r" + ra);
    std::string po = Compile("mlp", 8, f + " --accumulate " + oa, "mlpo1_o" + oa);
    std::string out;
    auto one = Train(0, po, data, 20, "--no-shuffle", "mlpo1_1x" + oa);
    auto two = Train(2, pr, data, 20, "--no-shuffle", "mlpo1_2x" + ra, &out);
    EXPECT_NE(out.find(", 0 skipped (overflow)"), std::string::npos) << out;
    Diff d = Compare(two, one);
    EXPECT_LT(d.max_rel, 1e-6) << "2 ranks x " << ra << " vs 1 x " << oa << ": " << d.where;
    std::printf("MLP -O1 SGD, 20 steps: max |w(2 ranks x %s micro-batches) - w(1 x %s)| / max(1, |w|) = %.3g (%s)\n",
                ra.c_str(), oa.c_str(), d.max_rel, d.where.c_str());
  }
}

// ---- half-precision BatchNorm with --sync-bn (issue 14 item 4) -------------------------------

// At O3 BatchNorm runs in fp16 (x, y, dx half; statistics, scale and bias fp32): --sync-bn
// computes and allreduces the statistics in fp32, so 2 ranks x 8 match one process with a
// plain fp16 BatchNorm over 16 to within fp16 rounding of the half weights (O3 has no fp32
// masters: each step rounds the update to fp16, ~1e-3 relative), while without --sync-bn the
// ranks' per-slice statistics move them by several times that in 5 steps.
TEST(DataParallel, HalfBatchNormWithSyncBnAtO3MatchesOneProcess) {
  const std::string opt = "-O3 --optimizer sgd --lr 0.1 --momentum 0.9";
  std::string s8 = Compile("cnn", 8, opt + " --sync-bn", "cnnh_s8"), p8 = Compile("cnn", 8, opt, "cnnh_p8"),
              p16 = Compile("cnn", 16, opt, "cnnh_p16");
  const std::string data = "examples/cnn/data", flags = "--no-shuffle";
  auto one = Train(0, p16, data, 5, flags, "cnnh_1x16");
  auto two = Train(2, s8, data, 5, flags, "cnnh_2x8_sync"), plain = Train(2, p8, data, 5, flags, "cnnh_2x8_plain");
  Diff w = Compare(two, one, "-running"), r = Compare(two, one, "running");
  Diff wp = Compare(plain, one, "-running"), rp = Compare(plain, one, "running");
  EXPECT_LT(w.max_rel, 1e-3) << w.where;
  EXPECT_LT(r.max_rel, 1e-3) << r.where;
  EXPECT_GT(wp.max_rel, 2e-3) << "without --sync-bn the ranks' BatchNorm statistics differ";
  EXPECT_GT(rp.max_rel, 2e-3);
  std::printf("CNN+BN -O3 (fp16 BatchNorm) SGD, 5 steps, max |w - w(1 x 16)| / max(1, |w|), parameters / running "
              "statistics: 2 x 8 --sync-bn %.3g (%s) / %.3g; 2 x 8 without --sync-bn %.3g / %.3g\n",
              w.max_rel, w.where.c_str(), r.max_rel, wp.max_rel, rp.max_rel);
}

// ---- loss scaling agreed over the ranks --------------------------------------------------

// The MLP's data with rank 1's slice of global batch 3 multiplied by 3e4: at O2 its fp16
// forward overflows on rank 1 only. Every rank skips step 4 and halves its scale (one
// process on the combined batch does the same), and the replicas stay identical.
TEST(DataParallel, OverflowOnOneRankSkipsTheStepOnEveryRank) {
  ApxNpy x, labels;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_npy_read("examples/mlp/data/x.npy", &x, &d), 0) << d.msg;
  ASSERT_EQ(apx_npy_read("examples/mlp/data/labels.npy", &labels, &d), 0) << d.msg;
  const int64_t B = 8, K = 2, feat = x.dims[1];
  for (int64_t s = 3 * K * B + B; s < 3 * K * B + 2 * B; s++)  // rank 1's slice of batch 3
    for (int64_t j = 0; j < feat; j++) ((float *)x.data)[s * feat + j] *= 3e4f;
  std::string dir = Tmp() + "/overflow_data";
  mkdir(dir.c_str(), 0755);
  ApxTensor tx{}, tl{};
  tx.data = x.data, tx.dtype = x.dtype, tx.rank = x.rank;
  tl.data = labels.data, tl.dtype = labels.dtype, tl.rank = labels.rank;
  for (int i = 0; i < x.rank; i++) tx.dims[i] = x.dims[i];
  for (int i = 0; i < labels.rank; i++) tl.dims[i] = labels.dims[i];
  ASSERT_EQ(apx_npy_write((dir + "/x.npy").c_str(), &tx, &d), 0) << d.msg;
  ASSERT_EQ(apx_npy_write((dir + "/labels.npy").c_str(), &tl, &d), 0) << d.msg;
  apx_npy_free(&x);
  apx_npy_free(&labels);

  std::string p8 = Compile("mlp", 8, "-O2", "o2_8"), p16 = Compile("mlp", 16, "-O2", "o2_16");
  std::string log2 = Tmp() + "/o2_2x8.jsonl", log1 = Tmp() + "/o2_1x16.jsonl", out;
  Train(2, p8, dir, 8, "--no-shuffle --log " + log2, "o2_2x8", &out);
  Train(0, p16, dir, 8, "--no-shuffle --log " + log1, "o2_1x16");
  std::istringstream a(Slurp(log2)), b(Slurp(log1));
  std::string la, lb;
  int n = 0;
  auto field = [](const std::string &l, const std::string &k) {
    size_t p = l.find("\"" + k + "\": ");
    return p == std::string::npos ? std::string() : l.substr(p + k.size() + 4, l.find_first_of(",}", p) - p - k.size() - 4);
  };
  while (std::getline(a, la) && std::getline(b, lb)) {
    n++;
    // rank 0 logs; its own batch is fine, yet it skips step 4 with everyone
    EXPECT_EQ(field(la, "skipped"), n == 4 ? "true" : "false") << la;
    EXPECT_EQ(field(la, "loss_scale"), field(lb, "loss_scale")) << "step " << n;
    EXPECT_EQ(field(la, "skipped"), field(lb, "skipped")) << "step " << n;
    if (n == 4) {
      EXPECT_NE(field(la, "loss"), "null") << "rank 0's own loss is finite: " << la;
      EXPECT_EQ(field(la, "overflow_at"), "\"fc1.weight\"") << la;
    }
    if (n == 8) {
      EXPECT_EQ(field(la, "loss_scale"), "32768") << la;
    }
  }
  EXPECT_EQ(n, 8);
  EXPECT_NE(out.find("step 4: gradient overflow"), std::string::npos) << out;
}

// ---- checkpoints ---------------------------------------------------------------------------

// Rank 0 writes the checkpoints; both ranks resume from the same file and continue exactly
// as the uninterrupted run (bit for bit).
TEST(DataParallel, CheckpointsResumeIdenticallyOnEveryRank) {
  std::string plan = Compile("mlp", 8, "-O2", "ck8");
  std::string dir = Tmp() + "/ckpt_dp";
  const std::string data = "examples/mlp/data";
  auto straight = Train(2, plan, data, 12, "", "ck_straight");
  std::string out;
  Train(2, plan, data, 6, "--checkpoint-dir " + dir, "ck_first", &out);
  auto resumed = Train(2, plan, data, 12, "--checkpoint-dir " + dir + " --resume", "ck_resumed", &out);
  Diff dd = Compare(resumed, straight);
  EXPECT_EQ(dd.max_abs, 0.0) << dd.where;
  MpiResult ls = RunCommand("ls " + dir);
  EXPECT_EQ(CountOccurrences(ls.out, ".apxckpt"), 2) << ls.out;  // steps 6 and 12, one file each
  EXPECT_EQ(CountOccurrences(ls.out, ".tmp"), 0) << ls.out;
}

// ---- overlapped gradient buckets ---------------------------------------------------------------

// The "key" field of every JSON line of a log, as numbers.
std::vector<long> LogField(const std::string &log, const std::string &key) {
  std::vector<long> v;
  std::istringstream in(Slurp(log));
  std::string l;
  while (std::getline(in, l)) {
    size_t p = l.find("\"" + key + "\": ");
    v.push_back(p == std::string::npos ? -999 : std::strtol(l.c_str() + p + key.size() + 4, nullptr, 10));
  }
  return v;
}

// Each bucket's allreduce overlaps the rest of backward (MPI_Iallreduce started by the
// Allreduce kernel, polled between kernels, waited for before the first reader) and gives the
// same bytes as --no-overlap (the same reduction, waited for at once): weights, checkpoint
// and every logged loss bit for bit. Small buckets at -O2 (fp16 gradients): several buckets
// in flight while backward still runs, as the log's overlap_kernels shows.
TEST(DataParallel, OverlappedBucketsMatchNoOverlapBitForBit) {
  std::string plan = Compile("mlp", 8, "-O2 --bucket-mb 0.01 --first-bucket-mb 0.01", "ov8");
  const std::string data = "examples/mlp/data";
  std::string dir_o = Tmp() + "/ckpt_ov", dir_b = Tmp() + "/ckpt_nov", log_o = Tmp() + "/ov.jsonl",
              log_b = Tmp() + "/nov.jsonl";
  auto ov = Train(2, plan, data, 20, "--log " + log_o + " --checkpoint-dir " + dir_o, "ov_2x8");
  auto bl = Train(2, plan, data, 20, "--no-overlap --log " + log_b + " --checkpoint-dir " + dir_b, "nov_2x8");
  Diff dd = Compare(ov, bl);
  EXPECT_EQ(dd.max_abs, 0.0) << dd.where;
  auto ckpt = [](const std::string &dir) {  // the one checkpoint file written at the end
    std::string name;
    if (DIR *dd = opendir(dir.c_str())) {
      while (struct dirent *e = readdir(dd))
        if (std::string(e->d_name).find(".apxckpt") != std::string::npos && e->d_name[0] != '.') name = e->d_name;
      closedir(dd);
    }
    EXPECT_FALSE(name.empty()) << "no checkpoint in " << dir;
    return name.empty() ? std::string() : Slurp(dir + "/" + name);
  };
  std::string ck_o = ckpt(dir_o), ck_b = ckpt(dir_b);
  EXPECT_GT(ck_o.size(), 1000u);
  EXPECT_TRUE(ck_o == ck_b) << "the step-20 checkpoints differ";
  std::vector<long> ko = LogField(log_o, "overlap_kernels"), kb = LogField(log_b, "overlap_kernels");
  ASSERT_EQ(ko.size(), 20u);
  ASSERT_EQ(kb.size(), 20u);
  for (size_t i = 0; i < ko.size(); i++) {
    EXPECT_GT(ko[i], 0) << "step " << i + 1 << ": no kernel ran while a bucket was in flight";
    EXPECT_EQ(kb[i], 0) << "step " << i + 1 << " with --no-overlap";
  }
  std::istringstream a(Slurp(log_o)), b(Slurp(log_b));
  std::string la, lb;
  auto loss = [](const std::string &l) { return l.substr(0, l.find(", \"ms\"")); };
  while (std::getline(a, la) && std::getline(b, lb)) EXPECT_EQ(loss(la), loss(lb));
  std::printf("MLP O2, 5 buckets, 2 ranks, 20 steps: overlapped = --no-overlap bit for bit; %ld kernels per step "
              "launched while a bucket was in flight\n",
              ko.empty() ? -1L : ko[0]);
}

// Four ranks, the CNN with --sync-bn (BatchNorm statistics reduced and read within forward
// and backward): overlapped and blocking agree bit for bit.
TEST(DataParallel, OverlappedSyncBnMatchesNoOverlapOnFourRanks) {
  std::string plan = Compile("cnn", 4, "-O0 --optimizer sgd --lr 0.1 --momentum 0.9 --sync-bn", "ovcnn4");
  auto ov = Train(4, plan, "examples/cnn/data", 10, "--no-shuffle", "ovcnn_4x4");
  auto bl = Train(4, plan, "examples/cnn/data", 10, "--no-shuffle --no-overlap", "novcnn_4x4");
  Diff dd = Compare(ov, bl);
  EXPECT_EQ(dd.max_abs, 0.0) << dd.where;
}

// ---- refusals --------------------------------------------------------------------------------

TEST(DataParallel, RanksWithDifferentPlansAreRefused) {
  std::string a = Compile("mlp", 8, "-O0", "plan_a"), b = Compile("mlp", 8, "-O0 --lr 0.5", "plan_b");
  std::string common = " --data examples/mlp/data --steps 2 --quiet";
  MpiResult r = RunCommand(MpirunPrefix(1) + "./runtime/apexrun " + a + common + " : -np 1 ./runtime/apexrun " + b + common);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1 runs a plan with hash"), std::string::npos) << r.out;
}

TEST(DataParallel, PlanWithoutBucketsIsRefused) {
  std::string p = Compile("mlp", 8, "-O0 --disable-pass=bucketing", "nobuckets");
  MpiResult r = Mpirun(2, "./runtime/apexrun " + p + " --data examples/mlp/data --steps 2 --quiet");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the plan has no gradient buckets"), std::string::npos) << r.out;
}

// ---- dead and hung ranks -------------------------------------------------------------------

int LogLines(const std::string &path) { return CountOccurrences(Slurp(path), "\n"); }

// Returns the exit code of the job (or -1 when it did not end within limit_s) and the
// seconds from `signal` to its end.
int FaultAndWait(int sig, double timeout_s, double limit_s, std::string *out, double *secs) {
  static int serial = 0;
  std::string plan = Compile("mlp", 8, "-O0", "fault" + std::to_string(serial));
  std::string log = Tmp() + "/fault" + std::to_string(serial) + ".jsonl";
  std::string of = Tmp() + "/fault" + std::to_string(serial++) + ".out";
  char to[32];
  std::snprintf(to, sizeof to, "%g", timeout_s);
  pid_t job = Launch(2, "./runtime/apexrun " + plan + " --data examples/mlp/data --steps 100000000 --quiet --log " +
                            log + " --collective-timeout " + to,
                     of);
  // wait until training runs (collectives in flight every step)
  for (int i = 0; i < 600 && LogLines(log) < 20; i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<pid_t> ranks = Ranks(job);
  EXPECT_EQ(ranks.size(), 2u);
  if (ranks.size() != 2 || LogLines(log) < 20) {
    kill(-job, SIGKILL);
    waitpid(job, nullptr, 0);
    *out = Slurp(of);
    return -2;
  }
  auto t0 = std::chrono::steady_clock::now();
  kill(ranks.back(), sig);
  int status = 0, code = -1;
  for (;;) {
    pid_t w = waitpid(job, &status, WNOHANG);
    *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == job) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (*secs > limit_s) {
      kill(-job, SIGKILL);
      for (pid_t p : ranks) kill(p, SIGKILL);
      waitpid(job, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t p : ranks)  // a rank left stopped or running (it should be gone) is ended here
    if (kill(p, 0) == 0) kill(p, SIGKILL);
  *out = Slurp(of);
  return code;
}

TEST(DataParallel, KilledRankEndsTheJob) {
  std::string out;
  double secs = 0;
  int code = FaultAndWait(SIGKILL, 10, 60, &out, &secs);
  EXPECT_GT(code, 0) << out;
  EXPECT_NE(out.find("signal 9"), std::string::npos) << out;
  EXPECT_LT(secs, 30) << out;
  std::printf("kill -9 of rank 1: job ended after %.2f s with exit code %d\n", secs, code);
}

TEST(DataParallel, HungRankEndsTheJobWithinTheCollectiveTimeout) {
  std::string out;
  double secs = 0;
  int code = FaultAndWait(SIGSTOP, 4, 60, &out, &secs);
  EXPECT_GT(code, 0) << out;
  EXPECT_NE(out.find("did not complete within 4.0 s"), std::string::npos) << out;
  EXPECT_NE(out.find("a peer rank is dead or hung; aborting the job"), std::string::npos) << out;
  EXPECT_GE(secs, 3.5) << out;
  EXPECT_LT(secs, 4 + 30) << out;
  std::printf("SIGSTOP of rank 1 (--collective-timeout 4): job ended after %.2f s with exit code %d\n", secs, code);
}

}  // namespace
