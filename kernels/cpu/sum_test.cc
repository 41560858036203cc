// sum_test.cc - sums inside kernels (sum_real.inc: double lanes) stay within a few fp32 ulps
// of the exact sum over long runs where one serial fp32 chain would not: large offsets
// (1000 + noise: a serial fp32 sum of 2^18 such values is off in the 3rd digit) and
// cancellation (a bias gradient). References are exact sums in double of the stored fp32
// inputs; each op also gives the same bits with 1 and 2 threads.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

constexpr double kUlps = 2;  // c in test_util.h's model: a couple of fp32 roundings

RunOpts threads(int n) {
  RunOpts o;
  o.threads = n;
  return o;
}

}  // namespace

TEST(Sums, BatchNormStatisticsOfALargeChannel) {
  const int64_t N = 4, C = 2, S = 65536;
  Tensor x = rand(APX_DT_F32, {N, C, S}, 999, 1001, 7), s = rand(APX_DT_F32, {C}, 1, 1, 8),
         b(APX_DT_F32, {C}), m(APX_DT_F32, {C}), v = rand(APX_DT_F32, {C}, 1, 1, 9);
  Tensor y(APX_DT_F32, x.dims), sm(APX_DT_F32, {C}), si(APX_DT_F32, {C});
  Tensor y2(APX_DT_F32, x.dims), sm2(APX_DT_F32, {C}), si2(APX_DT_F32, {C});
  ApxAttrBatchNorm a = {1e-5f, 0.9f, 1, 0};
  run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y, nullptr, nullptr, &sm, &si});
  run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y2, nullptr, nullptr, &sm2, &si2},
         threads(2));
  std::vector<double> xv = x.values(), rm(C), ri(C);
  for (int64_t c = 0; c < C; c++) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) mean += xv[(n * C + c) * S + k];
    mean /= N * S;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) var += std::pow(xv[(n * C + c) * S + k] - mean, 2);
    rm[c] = mean;
    ri[c] = 1 / std::sqrt(var / (N * S) + (double)1e-5f);
  }
  expect_close(sm, rm, kUlps, nullptr, "saved_mean");
  expect_close(si, ri, kUlps, nullptr, "saved_inv_std");
  expect_same_bits(y, y2, "Y, 1 vs 2 threads");
  expect_same_bits(si, si2, "saved_inv_std, 1 vs 2 threads");
}

TEST(Sums, BatchNormGradSumsWithCancellation) {
  const int64_t N = 8, C = 2, S = 32768;
  Tensor dy = rand(APX_DT_F32, {N, C, S}, -1, 1, 11), x = rand(APX_DT_F32, {N, C, S}, -2, 2, 12),
         s = rand(APX_DT_F32, {C}, 0.5, 1.5, 13), m = rand(APX_DT_F32, {C}, -0.1, 0.1, 14),
         is = rand(APX_DT_F32, {C}, 0.5, 0.7, 15);
  Tensor dx(APX_DT_F32, x.dims), ds(APX_DT_F32, {C}), db(APX_DT_F32, {C});
  Tensor dx2(APX_DT_F32, x.dims), ds2(APX_DT_F32, {C}), db2(APX_DT_F32, {C});
  ApxAttrBatchNorm a = {1e-5f, 0.9f, 1, 0};
  run_ok(APX_OP_BatchNormGrad, &a, {&dy, &x, &s, &m, &is}, {&dx, &ds, &db});
  run_ok(APX_OP_BatchNormGrad, &a, {&dy, &x, &s, &m, &is}, {&dx2, &ds2, &db2}, threads(2));
  std::vector<double> g = dy.values(), xv = x.values(), rs(C), rb(C), ss(C), sb(C);
  for (int64_t c = 0; c < C; c++) {
    double sdy = 0, sdyx = 0, adx = 0, adxx = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) {
        int64_t i = (n * C + c) * S + k;
        double xh = (xv[i] - m.get(c)) * is.get(c);
        sdy += g[i];
        sdyx += g[i] * xh;
        adx += std::fabs(g[i]);
        adxx += std::fabs(g[i] * xh);
      }
    rb[c] = sdy;
    rs[c] = sdyx;
    // what is left after cancellation is ~sqrt(n) of sum |dy|: allow 1e-9 of the magnitudes
    // (a serial fp32 chain is off by ~1e-5 of them)
    sb[c] = std::fabs(sdy) + 1e-9 / 1.2e-7 * adx;
    ss[c] = std::fabs(sdyx) + 1e-9 / 1.2e-7 * adxx;
  }
  expect_close(db, rb, kUlps, &sb, "dB");
  expect_close(ds, rs, kUlps, &ss, "dscale");
  expect_same_bits(dx, dx2, "dX, 1 vs 2 threads");
}

TEST(Sums, LayerNormOfALongRow) {
  const int64_t D = 1 << 18;
  Tensor x = rand(APX_DT_F32, {2, D}, 999, 1001, 21), s = rand(APX_DT_F32, {D}, 1, 1, 22);
  Tensor y(APX_DT_F32, {2, D}), mean(APX_DT_F32, {2, 1}), istd(APX_DT_F32, {2, 1});
  ApxAttrLayerNorm a = {1, 1e-5f, 1};
  run_ok(APX_OP_LayerNormalization, &a, {&x, &s}, {&y, &mean, &istd});
  std::vector<double> xv = x.values(), rm(2), ri(2);
  for (int r = 0; r < 2; r++) {
    double mm = 0, vv = 0;
    for (int64_t j = 0; j < D; j++) mm += xv[r * D + j];
    mm /= D;
    for (int64_t j = 0; j < D; j++) vv += std::pow(xv[r * D + j] - mm, 2);
    rm[r] = mm;
    ri[r] = 1 / std::sqrt(vv / D + (double)1e-5f);
  }
  expect_close(mean, rm, kUlps, nullptr, "Mean");
  expect_close(istd, ri, kUlps, nullptr, "InvStdDev");
}

TEST(Sums, ReduceSumBothLayouts) {
  const int64_t R = 1 << 18;
  Tensor x = rand(APX_DT_F32, {R, 4}, 999, 1001, 31);
  std::vector<double> xv = x.values();
  // reduced axis innermost (contiguous runs) and outermost (column chains)
  Tensor xt(APX_DT_F32, {4, R});
  for (int64_t i = 0; i < R; i++)
    for (int k = 0; k < 4; k++) xt.set(k * R + i, xv[i * 4 + k]);
  std::vector<double> ref(4, 0.0);
  for (int64_t i = 0; i < R; i++)
    for (int k = 0; k < 4; k++) ref[k] += xv[i * 4 + k];
  ApxAttrReduce a0 = {}, a1 = {};
  a0.n_axes = a1.n_axes = 1;
  a0.axes[0] = 0;
  a1.axes[0] = 1;
  Tensor y0(APX_DT_F32, {4}), y1(APX_DT_F32, {4}), y2(APX_DT_F32, {4});
  run_ok(APX_OP_ReduceSum, &a0, {&x}, {&y0});
  run_ok(APX_OP_ReduceSum, &a1, {&xt}, {&y1});
  run_ok(APX_OP_ReduceSum, &a1, {&xt}, {&y2}, threads(2));
  expect_close(y0, ref, kUlps, nullptr, "ReduceSum axis 0");
  expect_close(y1, ref, kUlps, nullptr, "ReduceSum axis 1");
  expect_same_bits(y1, y2, "ReduceSum, 1 vs 2 threads");
}

TEST(Sums, LogSoftmaxOfALongLine) {
  const int64_t L = 1 << 18;
  Tensor x = rand(APX_DT_F32, {1, L}, 0, 1e-3, 41), y(APX_DT_F32, {1, L});
  ApxAttrAxis a = {1};
  run_ok(APX_OP_LogSoftmax, &a, {&x}, {&y});
  std::vector<double> xv = x.values(), ref(L);
  double mx = -INFINITY, se = 0;
  for (double v : xv) mx = std::max(mx, v);
  for (double v : xv) se += std::exp((double)(float)(v - mx));  // the kernel's fp32 x - max
  for (int64_t j = 0; j < L; j++) ref[j] = (xv[j] - mx) - std::log(se);
  expect_close(y, ref, 4, nullptr, "LogSoftmax");  // + expf's and logf's ulps
}

TEST(Sums, CrossEntropyMeanOverManyLines) {
  const int64_t N = 1 << 17, C = 3;
  Tensor x = rand(APX_DT_F32, {N, C}, 10, 11, 51), labels(APX_DT_I64, {N}), loss(APX_DT_F32, {});
  for (int64_t i = 0; i < N; i++) labels.set(i, (double)(i % C));
  ApxAttrLoss a = {APX_RED_SUM, 0, 0};
  run_ok(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &labels}, {&loss});
  // reference from the per-line losses the kernel computes (reduction none), summed exactly
  Tensor lines(APX_DT_F32, {N});
  ApxAttrLoss none = {APX_RED_NONE, 0, 0};
  run_ok(APX_OP_SoftmaxCrossEntropyLoss, &none, {&x, &labels}, {&lines});
  double ref = 0;
  for (double v : lines.values()) ref += v;
  expect_close(loss, {ref}, kUlps, nullptr, "SoftmaxCrossEntropyLoss sum");
}

TEST(Sums, GlobalAveragePoolAndConvBiasGradient) {
  const int64_t S = 512;
  Tensor x = rand(APX_DT_F32, {1, 2, S, S}, 999, 1001, 61), y(APX_DT_F32, {1, 2, 1, 1});
  run_ok(APX_OP_GlobalAveragePool, nullptr, {&x}, {&y});
  std::vector<double> xv = x.values(), ref(2, 0.0);
  for (int c = 0; c < 2; c++) {
    for (int64_t i = 0; i < S * S; i++) ref[c] += xv[c * S * S + i];
    ref[c] /= S * S;
  }
  expect_close(y, ref, kUlps, nullptr, "GlobalAveragePool");
  // ConvGrad dB of a 1x1 convolution: the sum of dY over N and the image
  Tensor dy = rand(APX_DT_F32, {4, 1, 256, 256}, 999, 1001, 62),
         xx = rand(APX_DT_F32, {4, 1, 256, 256}, -1, 1, 63), w = rand(APX_DT_F32, {1, 1, 1, 1}, 1, 2, 64);
  Tensor db(APX_DT_F32, {1});
  ApxAttrConv ca = {};
  run_ok(APX_OP_ConvGrad, &ca, {&dy, &xx, &w}, {nullptr, nullptr, &db});
  double rb = 0;
  for (double v : dy.values()) rb += v;
  expect_close(db, {rb}, kUlps, nullptr, "ConvGrad dB");
}
