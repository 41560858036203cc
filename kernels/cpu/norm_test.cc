// norm_test.cc - LayerNormalization (Y, Mean, InvStdDev; stash type fp32 with half X) and
// BatchNormalization (inference; training with running-stat and saved-stat outputs; fp16 X
// with fp32 parameters as keep_batchnorm_fp32 gives) against double references.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

TEST(LayerNorm, AxesBiasStatsEveryFloatType) {
  const std::vector<int64_t> dims = {4, 6, 8};
  for (ApxDType dt : kFloatTypes)
    for (int64_t axis = 0; axis < 3; axis++)
      for (int bias = 0; bias < 2; bias++) {
        int64_t rows = 1, D = 1;
        for (int64_t d = 0; d < 3; d++) (d < axis ? rows : D) *= dims[d];
        std::vector<int64_t> pd(dims.begin() + axis, dims.end()), sd(dims);
        for (int64_t d = axis; d < 3; d++) sd[d] = 1;
        ApxDType st = dt == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;  // stash_type
        Tensor x = rand(dt, dims, -3, 5, 51), sc = rand(dt, pd, 0.5, 1.5, 52),
               b = rand(dt, pd, -1, 1, 53);
        Tensor y(dt, dims), mean(st, sd), istd(st, sd);
        ApxAttrLayerNorm a = {axis, 1e-5f, (int32_t)st};
        run_ok(APX_OP_LayerNormalization, &a, {&x, &sc, bias ? &b : nullptr}, {&y, &mean, &istd});
        std::vector<double> xv = x.values(), sv = sc.values(), bv = b.values();
        std::vector<double> ry(xv.size()), sy(xv.size()), rm(rows), ri(rows), sm(rows);
        for (int64_t r = 0; r < rows; r++) {
          double m = 0, v = 0, am = 0;
          for (int64_t j = 0; j < D; j++) {
            m += xv[r * D + j];
            am += std::fabs(xv[r * D + j]);
          }
          m /= D;
          for (int64_t j = 0; j < D; j++) v += (xv[r * D + j] - m) * (xv[r * D + j] - m);
          v /= D;
          double is = 1 / std::sqrt(v + (double)1e-5f);
          for (int64_t j = 0; j < D; j++) {
            double bb = bias ? bv[j] : 0;
            ry[r * D + j] = (xv[r * D + j] - m) * is * sv[j] + bb;
            sy[r * D + j] = (std::fabs(xv[r * D + j]) + am / D) * is * std::fabs(sv[j]) + std::fabs(bb);
          }
          rm[r] = m;
          sm[r] = am / D;
          ri[r] = is;
        }
        expect_close(y, ry, (double)D + 4, &sy, "LayerNorm Y");
        expect_close(mean, rm, (double)D + 1, &sm, "LayerNorm Mean");
        expect_close(istd, ri, (double)D + 4, nullptr, "LayerNorm InvStdDev");
      }
}

TEST(LayerNorm, RejectsWrongScaleShape) {
  Tensor x(APX_DT_F32, {2, 4}), s(APX_DT_F32, {3}), y(APX_DT_F32, {2, 4});
  ApxAttrLayerNorm a = {1, 1e-5f, 1};
  std::string err;
  EXPECT_EQ(run(APX_OP_LayerNormalization, &a, {&x, &s}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "LayerNormalization: Scale has 3 elements, expected 4");
}

namespace {

struct BnRef {
  std::vector<double> y, sy, rm, rv, sm, si;
};

// unbiased: running_var from the batch variance x n / (n - 1) (PyTorch's), not the variance
BnRef ref_bn(const Tensor &x, const Tensor &s, const Tensor &b, const Tensor &m, const Tensor &v,
             float eps, float mom, bool training, bool unbiased = false) {
  int64_t N = x.dims[0], C = x.dims[1], S = x.numel() / (N * C);
  std::vector<double> xv = x.values();
  BnRef r;
  r.y.resize(xv.size());
  r.sy.resize(xv.size());
  for (int64_t c = 0; c < C; c++) {
    double mean = m.get(c), var = v.get(c), am = 0;
    if (training) {
      mean = 0;
      var = 0;
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < S; k++) {
          mean += xv[(n * C + c) * S + k];
          am += std::fabs(xv[(n * C + c) * S + k]);
        }
      mean /= N * S;
      am /= N * S;
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < S; k++) var += std::pow(xv[(n * C + c) * S + k] - mean, 2);
      var /= N * S;
    }
    double is = 1 / std::sqrt(var + (double)eps);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) {
        size_t i = (n * C + c) * S + k;
        r.y[i] = (xv[i] - mean) * is * s.get(c) + b.get(c);
        r.sy[i] = (std::fabs(xv[i]) + std::fabs(mean) + am) * is * std::fabs(s.get(c)) +
                  std::fabs(b.get(c));
      }
    r.rm.push_back(m.get(c) * (double)mom + mean * (1 - (double)mom));
    double n = (double)(N * S), rvar = training && unbiased && n > 1 ? var * n / (n - 1) : var;
    r.rv.push_back(v.get(c) * (double)mom + rvar * (1 - (double)mom));
    r.sm.push_back(mean);
    r.si.push_back(is);
  }
  return r;
}

}  // namespace

// mode 0 inference, 1 training (ONNX's running variance), 2 training with PyTorch's
// unbiased running variance; {1, 2, 1}: one value per channel keeps the batch variance
TEST(BatchNorm, InferenceAndTrainingEveryFloatType) {
  const std::vector<std::vector<int64_t>> shapes = {{3, 4, 5, 6}, {8, 3}, {2, 5, 7}, {1, 2, 1}};
  for (const auto &sh : shapes)
    for (ApxDType dt : kFloatTypes)
      for (int mode = 0; mode < 3; mode++)
        for (int fp32_params = 0; fp32_params < 2; fp32_params++) {
          int training = mode > 0, unbiased = mode == 2;
          if (fp32_params && !apx_dtype_is_half(dt)) continue;
          ApxDType pt = fp32_params ? APX_DT_F32 : dt;
          int64_t C = sh[1], cnt = numel_of(sh) / C;
          Tensor x = rand(dt, sh, -2, 4, 61), s = rand(pt, {C}, 0.5, 1.5, 62),
                 b = rand(pt, {C}, -1, 1, 63), m = rand(pt, {C}, -0.5, 0.5, 64),
                 v = rand(pt, {C}, 0.5, 2, 65);
          Tensor y(dt, sh), rm(pt, {C}), rv(pt, {C}), sm(pt, {C}), si(pt, {C});
          ApxAttrBatchNorm a = {1e-5f, 0.9f, training, unbiased};
          if (training)
            run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y, &rm, &rv, &sm, &si});
          else
            run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y});
          BnRef r = ref_bn(x, s, b, m, v, 1e-5f, 0.9f, training, unbiased);
          double c = training ? (double)cnt + 4 : 4;
          expect_close(y, r.y, c, &r.sy, "BatchNorm Y");
          if (!training) continue;
          std::vector<double> scm(C), scv(C);
          for (int64_t k = 0; k < C; k++) {
            scm[k] = std::fabs(r.rm[k]) + 3;  // |x| <= 4: the mean's error scale
            scv[k] = std::fabs(r.rv[k]) + 16;
          }
          expect_close(rm, r.rm, (double)cnt + 2, &scm, "BatchNorm running_mean");
          expect_close(rv, r.rv, 2.0 * cnt + 4, &scv, "BatchNorm running_var");
          expect_close(sm, r.sm, (double)cnt + 2, &scm, "BatchNorm saved_mean");
          expect_close(si, r.si, 2.0 * cnt + 4, nullptr, "BatchNorm saved_inv_std");
        }
}

TEST(BatchNormRelu, IsBatchNormThenRelu) {
  Tensor x = rand(APX_DT_F32, {4, 3, 5}, -2, 2, 1), s = rand(APX_DT_F32, {3}, 0.5, 1.5, 2),
         b = rand(APX_DT_F32, {3}, -1, 1, 3), m = rand(APX_DT_F32, {3}, -0.5, 0.5, 4),
         v = rand(APX_DT_F32, {3}, 0.5, 2, 5);
  Tensor y1(APX_DT_F32, {4, 3, 5}), y2(APX_DT_F32, {4, 3, 5}), y3(APX_DT_F32, {4, 3, 5});
  ApxAttrBatchNorm a = {1e-5f, 0.9f, 1, 0};
  run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y1});
  run_ok(APX_OP_Relu, nullptr, {&y1}, {&y2});
  run_ok(APX_OP_BatchNormRelu, &a, {&x, &s, &b, &m, &v}, {&y3});
  expect_same_bits(y2, y3, "BatchNormRelu");
}

TEST(Norm, ThreadCountDoesNotChangeBits) {
  Tensor x = rand(APX_DT_F32, {16, 32, 24, 24}, -1, 1, 1), s = rand(APX_DT_F32, {32}, 0.5, 1, 2),
         b = rand(APX_DT_F32, {32}, -1, 1, 3), m(APX_DT_F32, {32}), v = rand(APX_DT_F32, {32}, 1, 2, 4);
  Tensor y1(APX_DT_F32, x.dims), y2(APX_DT_F32, x.dims);
  RunOpts two;
  two.threads = 2;
  ApxAttrBatchNorm a = {1e-5f, 0.9f, 1, 0};
  run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y1});
  run_ok(APX_OP_BatchNormalization, &a, {&x, &s, &b, &m, &v}, {&y2}, two);
  expect_same_bits(y1, y2, "BatchNorm");
  Tensor ls = rand(APX_DT_F32, {576}, 0.5, 1, 5), lb = rand(APX_DT_F32, {576}, -1, 1, 6);
  ApxAttrLayerNorm la = {2, 1e-5f, 1};
  run_ok(APX_OP_LayerNormalization, &la, {&x, &ls, &lb}, {&y1});
  run_ok(APX_OP_LayerNormalization, &la, {&x, &ls, &lb}, {&y2}, two);
  expect_same_bits(y1, y2, "LayerNorm");
}
