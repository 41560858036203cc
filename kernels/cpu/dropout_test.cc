// dropout_test.cc - Philox 4x32-10 known-answer vectors (Random123), the documented
// element -> counter mapping, keep rate, scaling, inference identity, dtype- and
// thread-independent masks, and DropoutGrad.
#include <cmath>

#include "kernels/cpu/test_util.h"

extern "C" {
#include "kernels/philox.h"
}

using namespace apxtest;

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors: philox4x32 10 rounds
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  } kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) {
    ApxPhilox4 c = {{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}};
    ApxPhilox4 r = apx_philox4x32_10(c, k.key[0], k.key[1]);
    for (int i = 0; i < 4; i++) EXPECT_EQ(r.v[i], k.out[i]) << i;
  }
}

TEST(Philox, BlockMappingAsDocumented) {
  uint64_t seed = 0x1234567890abcdefull, b = 0x500000003ull;
  ApxPhilox4 c = {{0x00000003u, 0x5u, 77u, 9u}};
  ApxPhilox4 want = apx_philox4x32_10(c, 0x90abcdefu, 0x12345678u);
  ApxPhilox4 got = apx_philox_block(seed, 9, 77, b);
  for (int i = 0; i < 4; i++) EXPECT_EQ(got.v[i], want.v[i]);
  EXPECT_EQ(apx_philox_uniform(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_EQ(apx_philox_uniform(0xffu), 0.0f);
}

TEST(Dropout, TrainingMaskFollowsTheStream) {
  const int64_t n = 100003;
  ApxAttrDropout a = {0.3f, 1, 0, 0, 5};
  RunOpts o;
  o.seed = 42;
  o.step = 7;
  Tensor ref_mask(APX_DT_BOOL, {n});
  for (ApxDType dt : kFloatTypes) {
    Tensor x = rand(dt, {n}, -2, 2, 111), y(dt, {n}), mask(APX_DT_BOOL, {n});
    run_ok(APX_OP_Dropout, &a, {&x}, {&y, &mask}, o);
    int64_t kept = 0;
    double scale = 1.0 / (1.0 - (double)0.3f);
    std::vector<double> ref(n), sc(n);
    for (int64_t i = 0; i < n; i++) {
      int keep = apx_dropout_keep(42, 5, 7, (uint64_t)i, 0.3f);
      ASSERT_EQ(mask.as<uint8_t>()[i], keep) << i;
      kept += keep;
      ref[i] = keep ? x.get(i) * scale : 0;
      sc[i] = std::fabs(ref[i]);
    }
    expect_close(y, ref, 2, &sc, "Dropout");
    // keep rate 0.7 within 5 standard deviations
    double p = (double)kept / n, sd = std::sqrt(0.7 * 0.3 / n);
    EXPECT_NEAR(p, 0.7, 5 * sd);
    if (dt == APX_DT_F32) ref_mask = mask;
    else expect_same_bits(mask, ref_mask, "mask is independent of the dtype");
  }
  // other step, other stream, explicit seed: other masks
  Tensor x = rand(APX_DT_F32, {n}, -2, 2, 111), y(APX_DT_F32, {n}), m2(APX_DT_BOOL, {n});
  RunOpts o2 = o;
  o2.step = 8;
  run_ok(APX_OP_Dropout, &a, {&x}, {&y, &m2}, o2);
  EXPECT_NE(0, memcmp(m2.bytes.data(), ref_mask.bytes.data(), n));
  ApxAttrDropout b = a;
  b.rng_stream = 6;
  run_ok(APX_OP_Dropout, &b, {&x}, {&y, &m2}, o);
  EXPECT_NE(0, memcmp(m2.bytes.data(), ref_mask.bytes.data(), n));
  ApxAttrDropout s = a;
  s.has_seed = 1;
  s.seed = 42;
  RunOpts o3 = o;
  o3.seed = 1;  // ignored: the node's own seed wins
  run_ok(APX_OP_Dropout, &s, {&x}, {&y, &m2}, o3);
  expect_same_bits(m2, ref_mask, "attribute seed");
}

TEST(Dropout, InferenceIsIdentityAndRatioZeroKeepsAll) {
  for (ApxDType dt : kFloatTypes) {
    Tensor x = rand(dt, {1000}, -2, 2, 1), y(dt, {1000}), m(APX_DT_BOOL, {1000});
    ApxAttrDropout a = {0.5f, 0, 0, 0, 1};
    run_ok(APX_OP_Dropout, &a, {&x}, {&y, &m});
    expect_same_bits(x, y, "inference Dropout");
    EXPECT_EQ(m.values(), std::vector<double>(1000, 1.0));
    ApxAttrDropout z = {0.0f, 1, 0, 0, 1};
    run_ok(APX_OP_Dropout, &z, {&x}, {&y, &m});
    expect_same_bits(x, y, "ratio 0");
    EXPECT_EQ(m.values(), std::vector<double>(1000, 1.0));
  }
}

TEST(Dropout, GradScalesKeptElements) {
  for (ApxDType dt : kFloatTypes) {
    Tensor dy = rand(dt, {500}, -2, 2, 2), m = rand(APX_DT_BOOL, {500}, 0, 2, 3), dx(dt, {500});
    ApxAttrDropout a = {0.25f, 1, 0, 0, 1};
    run_ok(APX_OP_DropoutGrad, &a, {&dy, &m}, {&dx});
    std::vector<double> ref(500), sc(500);
    for (int i = 0; i < 500; i++) {
      ref[i] = m.get(i) != 0 ? dy.get(i) / (1 - (double)0.25f) : 0;
      sc[i] = std::fabs(ref[i]);
    }
    expect_close(dx, ref, 2, &sc, "DropoutGrad");
  }
}

TEST(Dropout, ThreadCountDoesNotChangeBits) {
  Tensor x = rand(APX_DT_F16, {300001}, -2, 2, 4);
  Tensor y1(APX_DT_F16, {300001}), y2(APX_DT_F16, {300001}), m1(APX_DT_BOOL, {300001}),
      m2(APX_DT_BOOL, {300001});
  ApxAttrDropout a = {0.1f, 1, 0, 0, 3};
  RunOpts one, two;
  one.seed = two.seed = 9;
  two.threads = 2;
  run_ok(APX_OP_Dropout, &a, {&x}, {&y1, &m1}, one);
  run_ok(APX_OP_Dropout, &a, {&x}, {&y2, &m2}, two);
  expect_same_bits(y1, y2, "Dropout output");
  expect_same_bits(m1, m2, "Dropout mask");
}
