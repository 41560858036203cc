// fused_test.cc - fused kernels against double references of their unfused compositions:
// FusedDense (activations, transposed weight, bias, batched X, Aux), FusedSoftmax (scale,
// broadcast additive mask), FusedXentropy (loss and saved logsumexp), BatchNormRelu and
// ConvBiasRelu are in norm_test / conv_test; gradients are in grad_test.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

double act_ref(int act, double v) {
  switch (act) {
    case APX_ACT_RELU: return v > 0 ? v : 0;
    case APX_ACT_GELU: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case APX_ACT_GELU_TANH:
      return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    default: return v;
  }
}

}  // namespace

TEST(FusedDense, ActivationsTransposesBiasEveryFloatType) {
  const int64_t K = 6, N = 5;
  for (ApxDType dt : kFloatTypes)
    for (int act = APX_ACT_NONE; act <= APX_ACT_GELU_TANH; act++)
      for (int tw = 0; tw < 2; tw++)
        for (int bias = 0; bias < 2; bias++) {
          ApxAttrFusedDense a = {tw, act, 0.75f, 1.5f};
          Tensor x = rand(dt, {2, 3, K}, -2, 2, 121);
          Tensor w = rand(dt, tw ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, -1, 1, 122);
          Tensor b = rand(dt, {N}, -1, 1, 123), y(dt, {2, 3, N}), aux(dt, {2, 3, N});
          run_ok(APX_OP_FusedDense, &a, {&x, &w, bias ? &b : nullptr}, {&y, &aux});
          std::vector<double> ry(6 * N), ra(6 * N), sy(6 * N), sa(6 * N);
          for (int64_t r = 0; r < 6; r++)
            for (int64_t j = 0; j < N; j++) {
              double s = 0, m = 0;
              for (int64_t k = 0; k < K; k++) {
                double p = x.get(r * K + k) * w.get(tw ? j * K + k : k * N + j);
                s += p;
                m += std::fabs(p);
              }
              double pre = 0.75 * s + (bias ? 1.5 * b.get(j) : 0);
              double ms = 0.75 * m + (bias ? 1.5 * std::fabs(b.get(j)) : 0);
              ra[r * N + j] = pre;
              sa[r * N + j] = ms;
              ry[r * N + j] = act_ref(act, pre);
              sy[r * N + j] = ms + std::fabs(ry[r * N + j]) * 8;  // plus the activation's error
            }
          expect_close(y, ry, (double)K + 8, &sy, "FusedDense Y");
          expect_close(aux, ra, (double)K + 2, &sa, "FusedDense Aux");
        }
}

TEST(FusedSoftmax, ScaleAndBroadcastMaskEveryFloatType) {
  const std::vector<int64_t> dims = {2, 3, 4, 4};
  for (ApxDType dt : kFloatTypes)
    for (int masked = 0; masked < 2; masked++) {
      ApxAttrFusedSoftmax a = {0.125f, masked};
      Tensor x = rand(dt, dims, -8, 8, 131), y(dt, dims);
      Tensor m(APX_DT_F32, {4, 4});  // causal mask, fp32 even for half X
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) m.set(i * 4 + j, j > i ? -1e9 : 0);
      run_ok(APX_OP_FusedSoftmax, &a, {&x, masked ? &m : nullptr}, {&y});
      std::vector<double> ref(y.numel()), sc(y.numel());
      for (int64_t r = 0; r < y.numel() / 4; r++) {
        double z[4], mx = -INFINITY, s = 0;
        for (int j = 0; j < 4; j++) {
          z[j] = x.get(r * 4 + j) * 0.125 + (masked ? m.get((r % 4) * 4 + j) : 0);
          mx = std::max(mx, z[j]);
        }
        for (int j = 0; j < 4; j++) s += std::exp(z[j] - mx);
        for (int j = 0; j < 4; j++) {
          ref[r * 4 + j] = std::exp(z[j] - mx) / s;
          sc[r * 4 + j] = ref[r * 4 + j] * (1 + std::fabs(z[j] - mx));  // exp of a rounded sum
        }
      }
      expect_close(y, ref, 8, &sc, "FusedSoftmax");
    }
}

TEST(FusedXentropy, MatchesSoftmaxCrossEntropy) {
  for (ApxDType dt : kFloatTypes)
    for (int red = 0; red < 3; red++) {
      Tensor x = rand(dt, {7, 9}, -4, 4, 141), lab = rand(APX_DT_I64, {7}, 0, 9, 142);
      lab.set(3, 5);
      std::vector<int64_t> ld = red == APX_RED_NONE ? std::vector<int64_t>{7} : std::vector<int64_t>{};
      Tensor l1(dt, ld), l2(dt, ld), saved(APX_DT_F32, {7});
      if (dt == APX_DT_F64) saved = Tensor(APX_DT_F64, {7});
      ApxAttrLoss a = {red, 1, 5};
      run_ok(APX_OP_FusedXentropy, &a, {&x, &lab}, {&l1, &saved});
      run_ok(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x, &lab}, {&l2});
      expect_same_bits(l1, l2, "FusedXentropy loss == SoftmaxCrossEntropyLoss");
      std::vector<double> lse(7), sc(7);
      for (int r = 0; r < 7; r++) {
        double m = -INFINITY, s = 0;
        for (int c = 0; c < 9; c++) m = std::max(m, x.get(r * 9 + c));
        for (int c = 0; c < 9; c++) s += std::exp(x.get(r * 9 + c) - m);
        lse[r] = m + std::log(s);
        sc[r] = std::fabs(m) + std::fabs(std::log(s)) + 1;
      }
      expect_close(saved, lse, 12, &sc, "FusedXentropy saved");
    }
}

// The fusion pass gives half scores an fp32 loss (and fp32 saved): computed in fp32, the
// loss rounded once to fp32.
TEST(FusedXentropy, HalfScoresFp32Loss) {
  Tensor x = rand(APX_DT_F16, {5, 300}, -8, 8, 151), lab = rand(APX_DT_I32, {5}, 0, 300, 152);
  Tensor l(APX_DT_F32, {}), saved(APX_DT_F32, {5}), ref(APX_DT_F32, {});
  ApxAttrLoss a = {APX_RED_MEAN, 0, 0};
  run_ok(APX_OP_FusedXentropy, &a, {&x, &lab}, {&l, &saved});
  Tensor x32 = cast(x, APX_DT_F32);
  run_ok(APX_OP_SoftmaxCrossEntropyLoss, &a, {&x32, &lab}, {&ref});
  expect_same_bits(l, ref, "fp32 loss of fp16 scores");
  Tensor dl = make(APX_DT_F32, {}, {1}), dx(APX_DT_F16, {5, 300}), dx32(APX_DT_F32, {5, 300});
  run_ok(APX_OP_FusedXentropyGrad, &a, {&dl, &x, &lab, &saved}, {&dx});
  run_ok(APX_OP_FusedXentropyGrad, &a, {&dl, &x32, &lab, &saved}, {&dx32});
  expect_same_bits(dx, cast(dx32, APX_DT_F16), "fp16 dScores = fp32 math rounded once");
}
