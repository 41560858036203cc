// core_test.cc - op table consistency, dtype table, and half conversions (exhaustive where
// the domain is small: every fp16/bf16 bit pattern).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

extern "C" {
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/op.h"
}

TEST(OpTable, NamesRoundTrip) {
  for (int i = 1; i < APX_OP_COUNT; i++) {
    const char *n = apx_op_name((ApxOp)i);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(apx_op_from_name(n), (ApxOp)i) << n;
  }
  EXPECT_EQ(apx_op_from_name("NoSuchOp"), APX_OP_INVALID);
  EXPECT_STREQ(apx_op_name((ApxOp)9999), "?");
}

TEST(OpTable, ListsMatchDesign) {
  EXPECT_EQ(apx_op_info(APX_OP_MatMul)->prec, APX_PREC_HALF);
  EXPECT_EQ(apx_op_info(APX_OP_Conv)->prec, APX_PREC_HALF);
  EXPECT_EQ(apx_op_info(APX_OP_Softmax)->prec, APX_PREC_FP32);
  EXPECT_EQ(apx_op_info(APX_OP_LayerNormalization)->prec, APX_PREC_FP32);
  EXPECT_EQ(apx_op_info(APX_OP_Add)->prec, APX_PREC_PROMOTE);
  EXPECT_EQ(apx_op_info(APX_OP_Relu)->prec, APX_PREC_PASS);
  EXPECT_TRUE(apx_op_info(APX_OP_Reshape)->static_inputs & 2u);
  EXPECT_GE(apx_op_info(APX_OP_Gemm)->attrs_size, sizeof(ApxAttrGemm));
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(apx_dtype_size(APX_DT_F32), 4u);
  EXPECT_EQ(apx_dtype_size(APX_DT_BF16), 2u);
  EXPECT_EQ(apx_dtype_size(APX_DT_STRING), 0u);
  EXPECT_STREQ(apx_dtype_short(APX_DT_F16), "fp16");
  EXPECT_EQ(apx_dtype_parse("bf16"), APX_DT_BF16);
  EXPECT_EQ(apx_dtype_parse("nope"), APX_DT_UNDEFINED);
  EXPECT_FALSE(apx_dtype_is_supported(APX_DT_STRING));
  EXPECT_FALSE(apx_dtype_is_supported(99));
}

TEST(Half, EveryFp16PatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = apx_f16_to_f32((uint16_t)h);
    uint16_t back = apx_f32_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_EQ(back & 0x7c00u, 0x7c00u);
      EXPECT_NE(back & 0x3ffu, 0u);
    } else {
      ASSERT_EQ(back, h) << "pattern " << h;
    }
  }
}

// Reference rounding in double: nearest fp16, ties to even, overflow to inf.
static uint16_t ref_f16(double x) {
  if (std::isnan(x)) return 0x7e00;
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  uint16_t best = 0;
  double best_err = INFINITY;
  for (uint32_t h = 0; h < 0x7c00; h++) {  // finite non-negative patterns
    double v = apx_f16_to_f32((uint16_t)h);
    double e = std::fabs(v - a);
    if (e < best_err || (e == best_err && (h & 1) == 0)) {
      best_err = e;
      best = (uint16_t)h;
    }
  }
  if (a >= 65520.0) return sign | 0x7c00;
  return sign | best;
}

TEST(Half, Fp16RoundsToNearestEvenIncludingSubnormalsAndOverflow) {
  const double cases[] = {0.0, -0.0, 1.0, 1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 65504.0, 65519.99,
                          65520.0, 70000.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.9802322387695312e-08,
                          3.0e-8, 1e-12, -1e9, 0.1, 1.0 / 3.0, 1e-4, 3.14159};
  for (double c : cases) {
    float f = (float)c;
    EXPECT_EQ(apx_f32_to_f16(f), ref_f16(f)) << c;
    EXPECT_EQ(apx_f32_to_f16(-f), ref_f16(-(double)f)) << -c;
  }
  EXPECT_TRUE(std::isinf(apx_f16_to_f32(apx_f32_to_f16(1e9f))));
  EXPECT_EQ(apx_f32_to_f16(1e-12f), 0u);  // the classic LayerNorm eps underflows to zero
}

TEST(Half, EveryBf16PatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = apx_bf16_to_f32((uint16_t)h);
    uint16_t back = apx_f32_to_bf16(f);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(apx_bf16_to_f32(back)));
    else
      ASSERT_EQ(back, h);
  }
}

TEST(Half, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(apx_bf16_to_f32(apx_f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(apx_bf16_to_f32(apx_f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isinf(apx_bf16_to_f32(apx_f32_to_bf16(3.4e38f))));
  EXPECT_EQ(apx_bf16_to_f32(apx_f32_to_bf16(1e-12f)) > 0.0f, true);  // bf16 keeps 1e-12
}
