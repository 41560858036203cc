// precision_rules_test.cc - the fast paths of the constant helpers give the same answers as
// the element-by-element definitions: apx_convert_floats fp32 <-> fp16/bf16 equals half.h on
// every kind of value (NaN payloads, infinities, subnormals, ties, out of range), and the fp32
// range check equals the exact loop (run on the same values stored as fp64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "kernels/half.h"
#include "passes/precision_rules.h"
}

namespace {

std::vector<float> Values(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v;
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                        0xffc00001u, 0x7f800001u, 0x00000001u, 0x387fc000u, 0x38800000u,
                        0x477fe000u, 0x477ff000u, 0x47800000u, 0x3f808000u, 0x3f818000u}) {
    float f;
    memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  for (int i = 0; i < 20000; i++) {  // random bit patterns: every exponent, NaNs included
    uint32_t bits = rng();
    float f;
    memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (int i = 0; i < 20000; i++) v.push_back(nd(rng));
  return v;
}

TEST(ConvertFloats, Fp32ToHalfMatchesHalfH) {
  std::vector<float> v = Values(1);
  std::vector<uint16_t> h(v.size()), b(v.size());
  ASSERT_EQ(apx_convert_floats(v.data(), APX_DT_F32, h.data(), APX_DT_F16, (int64_t)v.size()), 0);
  ASSERT_EQ(apx_convert_floats(v.data(), APX_DT_F32, b.data(), APX_DT_BF16, (int64_t)v.size()), 0);
  for (size_t i = 0; i < v.size(); i++) {
    ASSERT_EQ(h[i], apx_f32_to_f16(v[i])) << i;
    ASSERT_EQ(b[i], apx_f32_to_bf16(v[i])) << i;
  }
  std::vector<float> back(v.size());
  ASSERT_EQ(apx_convert_floats(h.data(), APX_DT_F16, back.data(), APX_DT_F32, (int64_t)v.size()), 0);
  for (size_t i = 0; i < v.size(); i++) {
    float want = apx_f16_to_f32(h[i]);
    ASSERT_EQ(memcmp(&back[i], &want, 4), 0) << i;
  }
  ASSERT_EQ(apx_convert_floats(b.data(), APX_DT_BF16, back.data(), APX_DT_F32, (int64_t)v.size()), 0);
  for (size_t i = 0; i < v.size(); i++) {
    float want = apx_bf16_to_f32(b[i]);
    ASSERT_EQ(memcmp(&back[i], &want, 4), 0) << i;
  }
}

// The check on fp32 data equals the check on the same values as fp64 (the exact loop).
void ExpectSameRange(const std::vector<float> &x, const char *what) {
  ApxValue a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  std::vector<float> xf = x;
  std::vector<double> xd(x.begin(), x.end());
  int64_t dims[1] = {(int64_t)x.size()};
  apx_value_set_shape(&a, 1, dims);
  apx_value_set_shape(&b, 1, dims);
  a.dtype = APX_DT_F32;
  b.dtype = APX_DT_F64;
  a.data = xf.data();
  b.data = xd.data();
  for (ApxDType t : {APX_DT_F16, APX_DT_BF16}) {
    ApxConstRange ra, rb;
    apx_const_range_check(&a, t, &ra);
    apx_const_range_check(&b, t, &rb);
    EXPECT_EQ(ra.issue, rb.issue) << what << " " << apx_dtype_short(t);
    EXPECT_EQ(ra.n_bad, rb.n_bad) << what;
    EXPECT_EQ(ra.value, rb.value) << what;
  }
}

TEST(ConstRange, Fp32FastPathMatchesTheExactCheck) {
  std::vector<float> w = Values(2);
  ExpectSameRange(std::vector<float>(w.end() - 20000, w.end()), "N(0, 0.02) weights");
  ExpectSameRange(w, "every kind of value");
  ExpectSameRange({0.0f, 1e-6f, -3e-6f, 0.0f}, "only tiny values (fp16 underflow)");
  ExpectSameRange({1.0f, 1e-6f, NAN}, "tiny next to normal values, NaN");
  ExpectSameRange({1.0f, 70000.0f, -1e6f, INFINITY}, "out of fp16 range");
  ExpectSameRange({NAN, -NAN}, "only NaN");
  ExpectSameRange({0.0f, -0.0f}, "zeros");
  ExpectSameRange({65504.0f, -65504.0f, 6.103515625e-05f}, "fp16 extremes");
}

}  // namespace

// The memo remembers values found in range by their data pointer: the same pointer is not
// scanned again (shown by changing the bytes behind it, which no pass does), new data is,
// values out of range are never remembered, and another half type starts over.
TEST(ConstRange, MemoRemembersInRangeDataByPointer) {
  ApxGraph g;
  ApxDiag d;
  apx_graph_init(&g, "t.onnx");
  apx_diag_init(&d);
  int64_t dims[1] = {2};
  int w = apx_graph_add_value(&g, &d, "w", APX_VAL_PARAM, APX_DT_F32, 1, dims);
  int c = apx_graph_add_value(&g, &d, "c", APX_VAL_CONST, APX_DT_F32, 1, dims);
  ASSERT_GE(w, 0);
  ASSERT_GE(c, 0);
  float wd[2] = {0.5f, -2.0f}, wd2[2] = {1e9f, 0.0f}, cd[2] = {-1e9f, 1.0f};
  g.vals[w].data = wd;
  g.vals[c].data = cd;
  ApxConstRange r;
  apx_const_range_check_memo(&g, w, APX_DT_F16, &r);
  EXPECT_EQ(r.issue, APX_RANGE_OK);
  wd[0] = 1e9f;  // same pointer: remembered as in range
  apx_const_range_check_memo(&g, w, APX_DT_F16, &r);
  EXPECT_EQ(r.issue, APX_RANGE_OK);
  apx_const_range_check_memo(&g, w, APX_DT_BF16, &r);  // another type: scanned (in bf16 range)
  EXPECT_EQ(r.issue, APX_RANGE_OK);
  g.vals[w].data = wd2;  // new data: scanned
  apx_const_range_check_memo(&g, w, APX_DT_F16, &r);
  EXPECT_EQ(r.issue, APX_RANGE_OVERFLOW);
  for (int i = 0; i < 2; i++) {  // out of range: scanned every time
    apx_const_range_check_memo(&g, c, APX_DT_F16, &r);
    EXPECT_EQ(r.issue, APX_RANGE_OVERFLOW);
    EXPECT_EQ(r.value, -1e9);
  }
  g.vals[w].data = nullptr;
  g.vals[c].data = nullptr;
  apx_graph_free(&g);
}
