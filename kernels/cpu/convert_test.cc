// convert_test.cc - bulk fp16/bf16 conversions (F16C and portable paths give identical bits:
// every fp16 pattern, and a large sample of fp32 patterns with all rounding boundaries),
// correct rounding checked against an independent rounding in double, and Cast semantics.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/test_util.h"

extern "C" {
#include "kernels/cpu/cpu_internal.h"
}

using namespace apxtest;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Independent reference: round x to a format with `mant` explicit mantissa bits, minimum
// normal exponent emin and maximum finite value vmax, RNE, in double arithmetic.
double round_ref(double x, int mant, int emin, double vmax) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  int k = e - 1;
  if (k < emin) k = emin;
  double ulp = std::ldexp(1.0, k - mant);
  double r = std::nearbyint(x / ulp) * ulp;
  if (std::fabs(r) > vmax) return std::copysign(INFINITY, x);
  return r;
}

// fp32 patterns to test: every stride-th pattern plus, around every fp16 value, the exact
// midpoint to the next value and its neighbours, plus special values.
std::vector<uint32_t> f32_sample() {
  std::vector<uint32_t> v;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) v.push_back((uint32_t)u);
  for (uint32_t h = 0; h < 0x7c00; h++) {
    float a = apx_f16_to_f32((uint16_t)h), b = apx_f16_to_f32((uint16_t)(h + 1));
    float m = (float)(((double)a + (double)b) / 2);  // exact in fp32
    for (int s = 0; s < 2; s++) {
      float sign = s ? -1.0f : 1.0f;
      for (float f : {a, m, b}) {
        uint32_t u = bits(sign * f);
        v.push_back(u);
        v.push_back(u + 1);
        if (u & 0x7fffffffu) v.push_back(u - 1);
      }
    }
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, -1e30f,
                  APX_F16_MIN_NORMAL, APX_F16_MIN_SUBNORMAL, APX_F16_MIN_SUBNORMAL / 2,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()})
    v.push_back(bits(f));
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fa00000u, 0xff800123u})
    v.push_back(nan);
  return v;
}

}  // namespace

TEST(Convert, F16ToF32EveryPatternBothPaths) {
  std::vector<uint16_t> h(65536);
  for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  std::vector<float> a(65536), b(65536), c(65536);
  apx_cpu_f16_to_f32_portable(h.data(), a.data(), 65536);
  apx_cpu_f16_to_f32(h.data(), c.data(), 65536);
  for (int i = 0; i < 65536; i++) ASSERT_EQ(bits(a[i]), bits(apx_f16_to_f32(h[i]))) << i;
  EXPECT_EQ(0, memcmp(a.data(), c.data(), 65536 * 4));
  if (!apx_cpu_has_f16c()) GTEST_SKIP() << "CPU without F16C: only the portable path runs";
  apx_cpu_f16_to_f32_f16c(h.data(), b.data(), 65536);
  for (int i = 0; i < 65536; i++) ASSERT_EQ(bits(a[i]), bits(b[i])) << "pattern " << i;
}

TEST(Convert, F32ToF16SampleBothPathsAndCorrectRounding) {
  std::vector<uint32_t> u = f32_sample();
  std::vector<float> f(u.size());
  for (size_t i = 0; i < u.size(); i++) f[i] = from_bits(u[i]);
  std::vector<uint16_t> a(f.size()), b(f.size());
  apx_cpu_f32_to_f16_portable(f.data(), a.data(), (int64_t)f.size());
  for (size_t i = 0; i < f.size(); i++) {
    if (std::isnan(f[i])) {
      ASSERT_TRUE((a[i] & 0x7fff) > 0x7c00) << i;
      continue;
    }
    double want = round_ref(f[i], 10, -14, 65504.0);
    ASSERT_EQ((double)apx_f16_to_f32(a[i]), want) << "fp32 pattern " << std::hex << u[i];
    ASSERT_EQ(std::signbit(apx_f16_to_f32(a[i])), std::signbit(f[i])) << std::hex << u[i];
  }
  if (!apx_cpu_has_f16c()) GTEST_SKIP() << "CPU without F16C: only the portable path runs";
  apx_cpu_f32_to_f16_f16c(f.data(), b.data(), (int64_t)f.size());
  size_t diff = 0;
  for (size_t i = 0; i < f.size(); i++)
    if (a[i] != b[i] && diff++ < 5)
      ADD_FAILURE() << "fp32 " << std::hex << u[i] << ": portable " << a[i] << ", f16c " << b[i];
  EXPECT_EQ(diff, 0u) << "of " << f.size() << " sampled values";
  EXPECT_GT(f.size(), 1000000u);
}

TEST(Convert, Bf16RoundingAgainstReference) {
  std::vector<uint32_t> u = f32_sample();
  std::vector<float> f(u.size());
  for (size_t i = 0; i < u.size(); i++) f[i] = from_bits(u[i]);
  std::vector<uint16_t> h(f.size());
  std::vector<float> back(f.size());
  apx_cpu_f32_to_bf16(f.data(), h.data(), (int64_t)f.size());
  apx_cpu_bf16_to_f32(h.data(), back.data(), (int64_t)f.size());
  for (size_t i = 0; i < f.size(); i++) {
    if (std::isnan(f[i])) {
      ASSERT_TRUE(std::isnan(back[i]));
      continue;
    }
    double want = round_ref(f[i], 7, -126, APX_BF16_MAX);
    ASSERT_EQ((double)back[i], want) << "fp32 pattern " << std::hex << u[i];
  }
}

TEST(Convert, WideSourcesRoundOnceToHalf) {
  // 1 + 2^-11 + 2^-40 is just above the fp16 midpoint between 1 and 1 + 2^-10: it must
  // round up; going through a plain fp32 rounding first would land on the midpoint and tie
  // to even (1.0).
  double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  uint16_t h = 0;
  ASSERT_EQ(apx_cpu_convert(&d, APX_DT_F64, &h, APX_DT_F16, 1), APX_STATUS_OK);
  EXPECT_EQ((double)apx_f16_to_f32(h), 1.0 + std::ldexp(1.0, -10));
  ASSERT_EQ(apx_cpu_convert(&d, APX_DT_F64, &h, APX_DT_BF16, 1), APX_STATUS_OK);
  EXPECT_EQ((double)apx_bf16_to_f32(h), 1.0);
  // same for int64 -> bf16: 2^31 + 2^23 + 1 is above the bf16 midpoint 2^31 + 2^23
  int64_t v = (1ll << 31) + (1ll << 23) + 1;
  ASSERT_EQ(apx_cpu_convert(&v, APX_DT_I64, &h, APX_DT_BF16, 1), APX_STATUS_OK);
  EXPECT_EQ((double)apx_bf16_to_f32(h), std::ldexp(1.0, 31) + std::ldexp(1.0, 24));
  int64_t w = -((1ll << 31) + (1ll << 23) + 1);
  ASSERT_EQ(apx_cpu_convert(&w, APX_DT_I64, &h, APX_DT_BF16, 1), APX_STATUS_OK);
  EXPECT_EQ((double)apx_bf16_to_f32(h), -(std::ldexp(1.0, 31) + std::ldexp(1.0, 24)));
  // overflow of fp16 from double and from int
  double big = 65520.0;
  ASSERT_EQ(apx_cpu_convert(&big, APX_DT_F64, &h, APX_DT_F16, 1), APX_STATUS_OK);
  EXPECT_EQ(h, 0x7c00);
  double below = 65519.99;
  ASSERT_EQ(apx_cpu_convert(&below, APX_DT_F64, &h, APX_DT_F16, 1), APX_STATUS_OK);
  EXPECT_EQ(apx_f16_to_f32(h), 65504.0f);
  int32_t i32 = -70000;
  ASSERT_EQ(apx_cpu_convert(&i32, APX_DT_I32, &h, APX_DT_F16, 1), APX_STATUS_OK);
  EXPECT_EQ(h, 0xfc00);
  // a double over the sampled midpoints: exhaustive over fp16 values, d = midpoint +- tiny
  for (uint32_t k = 0; k < 0x7bff; k += 7) {
    double a = apx_f16_to_f32((uint16_t)k), b = apx_f16_to_f32((uint16_t)(k + 1));
    double m = (a + b) / 2, up = m + (b - a) * 1e-6, dn = m - (b - a) * 1e-6;
    ASSERT_EQ(apx_cpu_f64_to_f16(up), k + 1) << k;
    ASSERT_EQ(apx_cpu_f64_to_f16(dn), k) << k;
    ASSERT_EQ(apx_cpu_f64_to_f16(m), (k & 1) ? k + 1 : k) << k;
  }
}

TEST(Convert, IntegerAndBoolSemantics) {
  std::vector<double> src = {-2.7, 2.7, NAN, 1e30, -1e30, 300.5, -0.0, 0.5};
  std::vector<int64_t> i64(src.size());
  ASSERT_EQ(apx_cpu_convert(src.data(), APX_DT_F64, i64.data(), APX_DT_I64, (int64_t)src.size()),
            APX_STATUS_OK);
  EXPECT_EQ(i64, (std::vector<int64_t>{-2, 2, 0, INT64_MAX, INT64_MIN, 300, 0, 0}));
  std::vector<uint8_t> u8(src.size()), b(src.size());
  apx_cpu_convert(src.data(), APX_DT_F64, u8.data(), APX_DT_U8, (int64_t)src.size());
  EXPECT_EQ(u8[0], 254);  // -2 wraps, as numpy's astype
  EXPECT_EQ(u8[5], 44);   // 300 wraps
  apx_cpu_convert(src.data(), APX_DT_F64, b.data(), APX_DT_BOOL, (int64_t)src.size());
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0, 1}));
  // int64 -> fp64 rounds once; uint64 max -> fp32 is 2^64
  int64_t odd = (1ll << 53) + 1;
  double d = 0;
  apx_cpu_convert(&odd, APX_DT_I64, &d, APX_DT_F64, 1);
  EXPECT_EQ(d, std::ldexp(1.0, 53));
  uint64_t umax = UINT64_MAX;
  float f = 0;
  apx_cpu_convert(&umax, APX_DT_U64, &f, APX_DT_F32, 1);
  EXPECT_EQ(f, std::ldexp(1.0f, 64));
  // bool -> float, int32 -> int8 wraps, int8 -> int64 sign extends
  uint8_t bools[3] = {0, 1, 7};
  float fb[3];
  apx_cpu_convert(bools, APX_DT_BOOL, fb, APX_DT_F32, 3);
  EXPECT_EQ(fb[0], 0.0f);
  EXPECT_EQ(fb[1], 1.0f);
  EXPECT_EQ(fb[2], 1.0f);
  int32_t i32[2] = {200, -129};
  int8_t i8[2];
  apx_cpu_convert(i32, APX_DT_I32, i8, APX_DT_I8, 2);
  EXPECT_EQ(i8[0], -56);
  EXPECT_EQ(i8[1], 127);
  int64_t back[2];
  apx_cpu_convert(i8, APX_DT_I8, back, APX_DT_I64, 2);
  EXPECT_EQ(back[0], -56);
  // unsupported type
  EXPECT_EQ(apx_cpu_convert(src.data(), APX_DT_STRING, i64.data(), APX_DT_I64, 1),
            APX_STATUS_UNSUPPORTED);
}

TEST(Cast, KernelMatchesConvertForEveryPair) {
  const ApxDType types[] = {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16, APX_DT_I64,
                            APX_DT_I32, APX_DT_I8,  APX_DT_U8,  APX_DT_BOOL};
  Tensor x = rand(APX_DT_F64, {5, 7}, -100, 100, 1);
  for (ApxDType from : types)
    for (ApxDType to : types) {
      Tensor in = cast(x, from), out(to, {5, 7});
      ApxAttrCast a = {(int32_t)to, 1};
      run_ok(APX_OP_Cast, &a, {&in}, {&out});
      Tensor want = cast(in, to);
      expect_same_bits(out, want, "Cast");
    }
}

TEST(Cast, RejectsMismatchedTarget) {
  Tensor in = rand(APX_DT_F32, {3}, 0, 1, 2), out(APX_DT_F16, {3});
  ApxAttrCast a = {APX_DT_F32, 1};
  std::string err;
  EXPECT_EQ(run(APX_OP_Cast, &a, {&in}, {&out}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("Cast:"), std::string::npos) << err;
}
