// loss_test.cc - SoftmaxCrossEntropyLoss (log_prob output) and NegativeLogLikelihoodLoss:
// reductions mean/sum/none, class weights, ignore_index, labels (N) and (N, D1, D2) of int64
// and int32, every float dtype, against double references; bad labels are errors.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

struct LossRef {
  std::vector<double> out, scale, log_prob, lp_scale;
};

// x (N, C, inner...), labels (N, inner...)
LossRef ref_loss(bool sce, const Tensor &x, const Tensor &lab, const Tensor *w, int red,
                 bool has_ignore, int64_t ignore) {
  int64_t N = x.dims[0], C = x.dims[1], inner = x.numel() / (N * C);
  std::vector<double> xv = x.values();
  LossRef r;
  r.log_prob.resize(xv.size());
  r.lp_scale.resize(xv.size());
  std::vector<double> l(N * inner), ls(N * inner), wl(N * inner);
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < inner; d++) {
      auto X = [&](int64_t c) { return xv[(n * C + c) * inner + d]; };
      double m = -INFINITY, s = 0;
      for (int64_t c = 0; c < C; c++) m = std::max(m, X(c));
      for (int64_t c = 0; c < C; c++) s += std::exp(X(c) - m);
      for (int64_t c = 0; c < C; c++) {
        r.log_prob[(n * C + c) * inner + d] = X(c) - m - std::log(s);
        // log(s) of a sum s >= 1 computed to C eps relative: absolute error C eps
        r.lp_scale[(n * C + c) * inner + d] = std::fabs(X(c) - m) + std::fabs(std::log(s)) + 1;
      }
      int64_t t = (int64_t)lab.get(n * inner + d), li = n * inner + d;
      if (has_ignore && t == ignore) {
        l[li] = ls[li] = wl[li] = 0;
        continue;
      }
      double wt = w ? w->get(t) : 1;
      double lp = sce ? X(t) - m - std::log(s) : X(t);
      l[li] = -lp * wt;
      ls[li] = (sce ? std::fabs(X(t) - m) + std::fabs(std::log(s)) + 1 : std::fabs(X(t))) * std::fabs(wt);
      wl[li] = wt;
    }
  if (red == APX_RED_NONE) {
    r.out = l;
    r.scale = ls;
    return r;
  }
  double s = 0, ss = 0, ws = 0;
  for (size_t i = 0; i < l.size(); i++) {
    s += l[i];
    ss += ls[i];
    ws += wl[i];
  }
  if (red == APX_RED_MEAN) {
    s /= ws;
    ss /= std::fabs(ws);
  }
  r.out = {s};
  r.scale = {ss};
  return r;
}

}  // namespace

TEST(Loss, SceAndNllAllOptionsEveryFloatType) {
  const std::vector<std::vector<int64_t>> shapes = {{6, 5}, {3, 4, 2, 3}};
  for (const auto &sh : shapes)
    for (ApxDType dt : kFloatTypes)
      for (int sce = 0; sce < 2; sce++)
        for (int red = 0; red < 3; red++)
          for (int weighted = 0; weighted < 2; weighted++)
            for (int ign = 0; ign < 2; ign++)
              for (ApxDType lt : {APX_DT_I64, APX_DT_I32}) {
                int64_t N = sh[0], C = sh[1];
                std::vector<int64_t> ld = {N};
                ld.insert(ld.end(), sh.begin() + 2, sh.end());
                Tensor x = sce ? rand(dt, sh, -4, 4, 101) : rand(dt, sh, -5, 0, 101);
                Tensor lab = rand(lt, ld, 0, (double)C, 102), w = rand(dt, {C}, 0.5, 2, 103);
                if (ign) lab.set(1, 2);  // ignore_index = 2 appears at least once
                int64_t nl = lab.numel();
                Tensor loss(dt, red == APX_RED_NONE ? ld : std::vector<int64_t>{}), lp(dt, sh);
                ApxAttrLoss a = {red, ign, 2};
                ApxOp op = sce ? APX_OP_SoftmaxCrossEntropyLoss : APX_OP_NegativeLogLikelihoodLoss;
                std::vector<Tensor *> outs = {&loss};
                if (sce) outs.push_back(&lp);
                run_ok(op, &a, {&x, &lab, weighted ? &w : nullptr}, outs);
                LossRef r = ref_loss(sce, x, lab, weighted ? &w : nullptr, red, ign, 2);
                double c = (double)C + 6 + (red == APX_RED_NONE ? 0 : 2.0 * nl);
                expect_close(loss, r.out, c, &r.scale, apx_op_name(op));
                if (sce) expect_close(lp, r.log_prob, (double)C + 4, &r.lp_scale, "log_prob");
              }
}

TEST(Loss, BadLabelsAndAllIgnored) {
  Tensor x = rand(APX_DT_F32, {3, 4}, -1, 1, 1), lab = make(APX_DT_I64, {3}, {0, 4, 1});
  Tensor loss(APX_DT_F32, {});
  ApxAttrLoss a = {APX_RED_MEAN, 0, 0};
  std::string err;
  EXPECT_EQ(run(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &lab}, {&loss}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "SoftmaxCrossEntropyLoss: label 4 at position 1 outside [0, 4)");
  Tensor neg = make(APX_DT_I64, {3}, {-1, -1, -1});
  a.has_ignore_index = 1;
  a.ignore_index = -1;
  run_ok(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &neg}, {&loss});
  EXPECT_TRUE(std::isnan(loss.get(0)));  // 0 / 0, as PyTorch
  a.reduction = APX_RED_SUM;
  run_ok(APX_OP_NegativeLogLikelihoodLoss, &a, {&x, &neg}, {&loss});
  EXPECT_EQ(loss.get(0), 0.0);
  Tensor lab2 = make(APX_DT_I64, {2}, {0, 1});
  EXPECT_EQ(run(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &lab2}, {&loss}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "SoftmaxCrossEntropyLoss: labels [2] do not match scores [3,4]");
}

TEST(Loss, ThreadCountDoesNotChangeBits) {
  Tensor x = rand(APX_DT_F32, {512, 300}, -3, 3, 1), lab = rand(APX_DT_I64, {512}, 0, 300, 2);
  Tensor l1(APX_DT_F32, {}), l2(APX_DT_F32, {}), p1(APX_DT_F32, {512, 300}), p2(APX_DT_F32, {512, 300});
  ApxAttrLoss a = {APX_RED_MEAN, 0, 0};
  RunOpts two;
  two.threads = 2;
  run_ok(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &lab}, {&l1, &p1});
  run_ok(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &lab}, {&l2, &p2}, two);
  expect_same_bits(l1, l2, "loss");
  expect_same_bits(p1, p2, "log_prob");
}
