// float_scan_test.cc - apx_f32_scan against a one-element-at-a-time reference on random bit
// patterns (NaN, inf, subnormal, signed), every length up to three vector blocks and odd
// offsets, and the cases the range checks rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

extern "C" {
#include "kernels/float_scan.h"
}

namespace {

ApxF32Scan reference(const float *x, int64_t n, float limit) {
  ApxF32Scan r = {0, 0};
  for (int64_t i = 0; i < n; i++) {
    if (std::isnan(x[i])) continue;
    float a = std::fabs(x[i]);
    uint32_t b;
    std::memcpy(&b, &a, 4);
    if (b > r.max_abs_bits) r.max_abs_bits = b;
    if (a > std::fabs(limit)) r.over = 1;
  }
  return r;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(FloatScan, MatchesTheReferenceOnRandomPatterns) {
  std::mt19937 rng(7);
  const float limits[] = {65504.0f, 3.38953139e38f, 1.0f, -2.0f, 0.0f,
                          std::numeric_limits<float>::infinity()};
  for (int trial = 0; trial < 400; trial++) {
    int n = trial % 53;
    std::vector<float> v(n + 3);
    for (auto &f : v) {
      switch (rng() % 6) {
        case 0: f = from_bits(rng()); break;  // anything: NaN, inf, subnormal, either sign
        case 1: f = std::numeric_limits<float>::quiet_NaN(); break;
        case 2: f = (rng() % 2 ? 1 : -1) * std::numeric_limits<float>::infinity(); break;
        case 3: f = from_bits(rng() & 0x807fffffu); break;  // subnormal or zero
        default: f = std::ldexp((float)(rng() % 1000) - 500.0f, (int)(rng() % 40) - 20); break;
      }
    }
    for (int off = 0; off < 3; off++)
      for (float lim : limits) {
        ApxF32Scan got = apx_f32_scan(v.data() + off, n, lim), want = reference(v.data() + off, n, lim);
        ASSERT_EQ(got.max_abs_bits, want.max_abs_bits) << "trial " << trial << " off " << off;
        ASSERT_EQ(got.over, want.over) << "trial " << trial << " off " << off << " limit " << lim;
      }
  }
}

TEST(FloatScan, EdgeCases) {
  EXPECT_EQ(apx_f32_scan(nullptr, 0, 1.0f).max_abs_bits, 0u);
  std::vector<float> v(1000, 1.0f);
  EXPECT_EQ(apx_f32_scan(v.data(), 1000, 1.0f).over, 0);  // equal to the limit is not above
  v[999] = -65505.0f;  // in the scalar tail (1000 % 16 = 8); v[500] below is in a vector block
  ApxF32Scan s = apx_f32_scan(v.data(), 1000, 65504.0f);
  EXPECT_EQ(s.over, 1);
  EXPECT_EQ(s.max_abs_bits, 0x477fe100u);  // 65505
  v[999] = std::numeric_limits<float>::quiet_NaN();
  v[500] = std::numeric_limits<float>::infinity();
  s = apx_f32_scan(v.data(), 1000, 65504.0f);
  EXPECT_EQ(s.over, 1);
  EXPECT_EQ(s.max_abs_bits, 0x7f800000u);
  std::vector<float> nan(37, std::numeric_limits<float>::quiet_NaN());
  s = apx_f32_scan(nan.data(), 37, 0.0f);  // NaN only: skipped, nothing found
  EXPECT_EQ(s.over, 0);
  EXPECT_EQ(s.max_abs_bits, 0u);
}

}  // namespace
