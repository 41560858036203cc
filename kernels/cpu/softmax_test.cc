// softmax_test.cc - Softmax / LogSoftmax along one axis (opset 13) against double references
// in every float dtype, extreme inputs, thread-count independence.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

TEST(Softmax, EveryAxisEveryFloatType) {
  const std::vector<int64_t> dims = {3, 5, 7};
  for (ApxDType dt : kFloatTypes)
    for (int64_t axis = 0; axis < 3; axis++)
      for (int is_log = 0; is_log < 2; is_log++) {
        Tensor x = rand(dt, dims, -6, 6, 71), y(dt, dims);
        ApxAttrAxis a = {axis};
        run_ok(is_log ? APX_OP_LogSoftmax : APX_OP_Softmax, &a, {&x}, {&y});
        std::vector<int64_t> st = strides_of(dims);
        int64_t L = dims[axis], inner = st[axis];
        std::vector<double> xv = x.values(), ref(xv.size()), sc(xv.size());
        for (int64_t i = 0; i < x.numel(); i++) {
          int64_t base = i - ((i / inner) % L) * inner;  // element 0 of i's line
          double m = -INFINITY, s = 0;
          for (int64_t j = 0; j < L; j++) m = std::max(m, xv[base + j * inner]);
          for (int64_t j = 0; j < L; j++) s += std::exp(xv[base + j * inner] - m);
          ref[i] = is_log ? xv[i] - m - std::log(s) : std::exp(xv[i] - m) / s;
          // log-softmax (x - m) - log(s): log of a sum s >= 1 known to L eps relative has an
          // absolute error of L eps, hence the + 1
          sc[i] = is_log ? std::fabs(xv[i] - m) + std::fabs(std::log(s)) + 1 : std::fabs(ref[i]);
        }
        expect_close(y, ref, (double)L + 4, &sc, is_log ? "LogSoftmax" : "Softmax");
      }
}

TEST(Softmax, LargeInputsDoNotOverflow) {
  Tensor x = make(APX_DT_F16, {1, 3}, {60000, 60000, -60000}), y(APX_DT_F16, {1, 3});
  ApxAttrAxis a = {1};
  run_ok(APX_OP_Softmax, &a, {&x}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{0.5, 0.5, 0}));
  run_ok(APX_OP_LogSoftmax, &a, {&x}, {&y});
  EXPECT_NEAR(y.get(0), -std::log(2.0), 1e-3);
  EXPECT_EQ(y.get(2), -INFINITY);  // -120000 - log 2 overflows fp16
  Tensor n = make(APX_DT_F32, {1, 2}, {NAN, 1}), yn(APX_DT_F32, {1, 2});
  run_ok(APX_OP_Softmax, &a, {&n}, {&yn});
  EXPECT_TRUE(std::isnan(yn.get(0)) && std::isnan(yn.get(1)));
}

TEST(Softmax, ThreadCountDoesNotChangeBits) {
  Tensor x = rand(APX_DT_F32, {128, 1500}, -5, 5, 1), y1(APX_DT_F32, {128, 1500}),
         y2(APX_DT_F32, {128, 1500});
  ApxAttrAxis a = {1};
  RunOpts two;
  two.threads = 2;
  run_ok(APX_OP_Softmax, &a, {&x}, {&y1});
  run_ok(APX_OP_Softmax, &a, {&x}, {&y2}, two);
  expect_same_bits(y1, y2, "Softmax");
}
