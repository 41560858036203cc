// compare_test.cc - the v1.1 comparison, logic and selection kernels (compare.c) against
// naive references in every dtype: they are exact, so every check is equality (bits for
// the selections). Covers numpy broadcasting, NaN rules, ties, signed / unsigned remainders,
// uint64 values above INT64_MAX, the error paths, and thread-count independence.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

const ApxDType kNumeric[] = {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16, APX_DT_I8, APX_DT_I16,
                             APX_DT_I32, APX_DT_I64, APX_DT_U8,  APX_DT_U16,  APX_DT_U32, APX_DT_U64};

// Small integers (exact in every dtype, with many ties), negative only for signed types.
Tensor ints(ApxDType dt, std::vector<int64_t> dims, uint64_t seed) {
  bool uns = dt == APX_DT_U8 || dt == APX_DT_U16 || dt == APX_DT_U32 || dt == APX_DT_U64;
  return rand(dt, std::move(dims), uns ? 0 : -4, 5, seed);
}

bool bits_equal(const Tensor &t, int64_t i, const Tensor &u, int64_t j) {
  size_t es = apx_dtype_size(t.dt);
  return memcmp(t.bytes.data() + i * es, u.bytes.data() + j * es, es) == 0;
}

TEST(Compare, FourComparisonsInEveryTypeWithBroadcasting) {
  const ApxOp ops[] = {APX_OP_Less, APX_OP_LessOrEqual, APX_OP_Greater, APX_OP_GreaterOrEqual};
  for (ApxDType dt : kNumeric) {
    Tensor a = ints(dt, {3, 1, 4}, 1), b = ints(dt, {2, 4}, 2);
    for (ApxOp op : ops) {
      Tensor y(APX_DT_BOOL, {3, 2, 4});
      run_ok(op, nullptr, {&a, &b}, {&y});
      for (int64_t i = 0; i < y.numel(); i++) {
        double x = a.get(broadcast_index(y.dims, a.dims, i)), z = b.get(broadcast_index(y.dims, b.dims, i));
        bool want = op == APX_OP_Less ? x < z : op == APX_OP_LessOrEqual ? x <= z : op == APX_OP_Greater ? x > z : x >= z;
        ASSERT_EQ(y.as<uint8_t>()[i], want ? 1 : 0) << apx_op_name(op) << " " << apx_dtype_name(dt) << " at " << i;
      }
    }
  }
}

TEST(Compare, NaNComparesFalseAndHalvesCompareExactly) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16}) {
    // 1 + ulp vs 1 in the half types: loading to fp32 keeps the difference
    double ulp = dt == APX_DT_F16 ? std::ldexp(1.0, -10) : dt == APX_DT_BF16 ? std::ldexp(1.0, -7) : 1e-6;
    Tensor a = make(dt, {3}, {NAN, 1.0 + ulp, 2}), b = make(dt, {3}, {1, 1, NAN});
    for (ApxOp op : {APX_OP_Less, APX_OP_LessOrEqual, APX_OP_Greater, APX_OP_GreaterOrEqual}) {
      Tensor y(APX_DT_BOOL, {3});
      run_ok(op, nullptr, {&a, &b}, {&y});
      EXPECT_EQ(y.as<uint8_t>()[0], 0) << apx_op_name(op);
      EXPECT_EQ(y.as<uint8_t>()[2], 0) << apx_op_name(op);
      EXPECT_EQ(y.as<uint8_t>()[1], op == APX_OP_Greater || op == APX_OP_GreaterOrEqual) << apx_op_name(op);
    }
  }
}

TEST(Compare, Uint64AboveInt64MaxKeepsItsOrder) {
  Tensor a(APX_DT_U64, {2}), b(APX_DT_U64, {2}), lt(APX_DT_BOOL, {2}), mx(APX_DT_U64, {2}), md(APX_DT_U64, {2});
  a.as<uint64_t>()[0] = UINT64_MAX, a.as<uint64_t>()[1] = 3;
  b.as<uint64_t>()[0] = 1, b.as<uint64_t>()[1] = (uint64_t)1 << 63;
  run_ok(APX_OP_Less, nullptr, {&a, &b}, {&lt});
  EXPECT_EQ(lt.as<uint8_t>()[0], 0);
  EXPECT_EQ(lt.as<uint8_t>()[1], 1);
  run_ok(APX_OP_Max, nullptr, {&a, &b}, {&mx});
  EXPECT_EQ(mx.as<uint64_t>()[0], UINT64_MAX);
  EXPECT_EQ(mx.as<uint64_t>()[1], (uint64_t)1 << 63);
  ApxAttrMod m = {0};
  run_ok(APX_OP_Mod, &m, {&a, &b}, {&md});
  EXPECT_EQ(md.as<uint64_t>()[0], 0u);
  EXPECT_EQ(md.as<uint64_t>()[1], 3u);
}

// numpy's maximum / minimum: the first operand on ties, NaN from either side, the selected
// element's bits (so -0 / +0 and half values come through unchanged).
TEST(MinMax, VariadicBroadcastInEveryTypeKeepsTheFirstOfEqualOperands) {
  for (ApxDType dt : kNumeric) {
    Tensor a = ints(dt, {2, 1, 3}, 3), b = ints(dt, {3}, 4), c = ints(dt, {4, 1}, 5);
    for (ApxOp op : {APX_OP_Max, APX_OP_Min}) {
      Tensor y(dt, {2, 4, 3});
      run_ok(op, nullptr, {&a, &b, &c}, {&y});
      for (int64_t i = 0; i < y.numel(); i++) {
        double x = a.get(broadcast_index(y.dims, a.dims, i));
        x = op == APX_OP_Max ? std::max(x, b.get(broadcast_index(y.dims, b.dims, i)))
                             : std::min(x, b.get(broadcast_index(y.dims, b.dims, i)));
        x = op == APX_OP_Max ? std::max(x, c.get(broadcast_index(y.dims, c.dims, i)))
                             : std::min(x, c.get(broadcast_index(y.dims, c.dims, i)));
        ASSERT_EQ(y.get(i), x) << apx_op_name(op) << " " << apx_dtype_name(dt) << " at " << i;
      }
    }
  }
  Tensor p = make(APX_DT_F32, {4}, {0.0, -0.0, NAN, 1}), q = make(APX_DT_F32, {4}, {-0.0, 0.0, 1, NAN});
  for (ApxOp op : {APX_OP_Max, APX_OP_Min}) {
    Tensor y(APX_DT_F32, {4});
    run_ok(op, nullptr, {&p, &q}, {&y});
    EXPECT_TRUE(bits_equal(y, 0, p, 0) && bits_equal(y, 1, p, 1)) << apx_op_name(op) << ": ties keep operand 0";
    EXPECT_TRUE(std::isnan(y.get(2)) && std::isnan(y.get(3))) << apx_op_name(op) << ": NaN propagates";
  }
  for (ApxDType dt : {APX_DT_F16, APX_DT_BF16}) {  // halves: the chosen bits, no rounding
    Tensor h = rand(dt, {64}, -3, 3, 6), k = rand(dt, {64}, -3, 3, 7), y(dt, {64});
    run_ok(APX_OP_Max, nullptr, {&h, &k}, {&y});
    for (int64_t i = 0; i < 64; i++) EXPECT_TRUE(bits_equal(y, i, h.get(i) >= k.get(i) ? h : k, i)) << i;
  }
}

TEST(MinMax, OneInputBroadcastsAndAliasesAreRefused) {
  Tensor x = make(APX_DT_I64, {3}, {1, 2, 3}), y(APX_DT_I64, {2, 3});
  run_ok(APX_OP_Min, nullptr, {&x}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  Tensor a = make(APX_DT_F32, {2}, {1, 2}), b = make(APX_DT_F32, {2}, {3, 0});
  ApxTensor in[2] = {a.view(), b.view()}, out[1] = {b.view()};  // output over input 1
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  EXPECT_EQ(apx_cpu_run(&ctx, APX_OP_Max, nullptr, in, 2, out, 1), APX_STATUS_BAD_INPUT);
  EXPECT_STREQ(ctx.err, "Max: input 1 aliases the output");
  Tensor i = make(APX_DT_I32, {2}, {1, 2}), z(APX_DT_F32, {2});
  std::string err;
  EXPECT_EQ(run(APX_OP_Max, nullptr, {&a, &i}, {&z}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Max: input 1 has type int32, input 0 float32");
}

// numpy.clip = minimum(maximum(x, lo), hi): NaN x stays, lo > hi gives hi, absent bounds.
TEST(Clip, NumpySemanticsInEveryType) {
  for (ApxDType dt : kNumeric) {
    bool uns = dt == APX_DT_U8 || dt == APX_DT_U16 || dt == APX_DT_U32 || dt == APX_DT_U64;
    Tensor x = ints(dt, {5, 7}, 8), lo = make(dt, {}, {uns ? 1.0 : -2.0}), hi = make(dt, {1}, {3});
    Tensor y(dt, {5, 7}), ymax(dt, {5, 7}), yswap(dt, {5, 7});
    run_ok(APX_OP_Clip, nullptr, {&x, &lo, &hi}, {&y});
    run_ok(APX_OP_Clip, nullptr, {&x, nullptr, &hi}, {&ymax});
    run_ok(APX_OP_Clip, nullptr, {&x, &hi, &lo}, {&yswap});  // min > max: max everywhere
    for (int64_t i = 0; i < x.numel(); i++) {
      double v = x.get(i);
      ASSERT_EQ(y.get(i), std::min(std::max(v, lo.get(0)), hi.get(0))) << apx_dtype_name(dt) << " " << i;
      ASSERT_EQ(ymax.get(i), std::min(v, hi.get(0))) << apx_dtype_name(dt) << " " << i;
      ASSERT_EQ(yswap.get(i), lo.get(0)) << apx_dtype_name(dt) << " " << i;
    }
  }
  Tensor x = make(APX_DT_BF16, {3}, {NAN, -5, 0.3}), lo = make(APX_DT_BF16, {}, {-1}), y(APX_DT_BF16, {3});
  run_ok(APX_OP_Clip, nullptr, {&x, &lo}, {&y});
  EXPECT_TRUE(std::isnan(y.get(0)));
  EXPECT_EQ(y.get(1), -1.0);
  EXPECT_TRUE(bits_equal(y, 2, x, 2));
  Tensor x3 = make(APX_DT_F32, {3}, {1, 2, 3}), big = make(APX_DT_F32, {2}, {0, 1}), z(APX_DT_F32, {3});
  std::string err;
  EXPECT_EQ(run(APX_OP_Clip, nullptr, {&x3, &big}, {&z}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Clip: input 1 must be one float32 element");
}

// ONNX Mod: fmod = 0 floors (the divisor's sign, Python's %), fmod = 1 truncates (C's %,
// fmod for floats); exact in every type.
TEST(Mod, IntegerRemaindersTakeTheDivisorsSignOrTheDividends) {
  for (ApxDType dt : {APX_DT_I8, APX_DT_I16, APX_DT_I32, APX_DT_I64}) {
    Tensor a = make(dt, {8}, {-4, 7, 5, 4, -7, 8, -9, 0}), b = make(dt, {8}, {2, -3, 8, -2, 3, 5, -4, -3});
    for (int fm : {0, 1}) {
      ApxAttrMod at = {fm};
      Tensor y(dt, {8});
      run_ok(APX_OP_Mod, &at, {&a, &b}, {&y});
      for (int64_t i = 0; i < 8; i++) {
        int64_t x = (int64_t)a.get(i), d = (int64_t)b.get(i), r = x % d;
        if (!fm && r != 0 && ((r < 0) != (d < 0))) r += d;
        EXPECT_EQ(y.get(i), (double)r) << apx_dtype_name(dt) << " fmod " << fm << " " << x << " % " << d;
      }
    }
  }
  Tensor mn(APX_DT_I64, {1}), m1 = make(APX_DT_I64, {1}, {-1}), y(APX_DT_I64, {1});
  mn.as<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  ApxAttrMod at = {0};
  run_ok(APX_OP_Mod, &at, {&mn, &m1}, {&y});  // would overflow as C's %
  EXPECT_EQ(y.as<int64_t>()[0], 0);
  Tensor u = make(APX_DT_U8, {3}, {250, 7, 5}), v = make(APX_DT_U8, {}, {7}), w(APX_DT_U8, {3});
  run_ok(APX_OP_Mod, &at, {&u, &v}, {&w});
  EXPECT_EQ(w.values(), (std::vector<double>{5, 0, 5}));
  Tensor zero = make(APX_DT_I32, {2}, {1, 0}), one = make(APX_DT_I32, {2}, {3, 3}), o(APX_DT_I32, {2});
  std::string err;
  EXPECT_EQ(run(APX_OP_Mod, &at, {&one, &zero}, {&o}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Mod: integer modulo by zero");
}

TEST(Mod, FloatFmodIsExactInEveryFloatType) {
  ApxAttrMod fm = {1};
  for (ApxDType dt : {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16}) {
    Tensor a = rand(dt, {7, 9}, -50, 50, 9), b = rand(dt, {9}, 0.3, 4, 10), y(dt, {7, 9});
    run_ok(APX_OP_Mod, &fm, {&a, &b}, {&y});
    for (int64_t i = 0; i < y.numel(); i++) {
      double want = std::fmod(a.get(i), b.get(i % 9));  // exact, and representable in dt
      ASSERT_EQ(y.get(i), want) << apx_dtype_name(dt) << " " << i;
    }
    Tensor z = make(dt, {2}, {1, -1}), zero = make(dt, {}, {0}), nz(dt, {2});
    run_ok(APX_OP_Mod, &fm, {&z, &zero}, {&nz});
    EXPECT_TRUE(std::isnan(nz.get(0)) && std::isnan(nz.get(1))) << apx_dtype_name(dt);
  }
  ApxAttrMod floor = {0};
  Tensor a = make(APX_DT_F32, {1}, {1}), y(APX_DT_F32, {1});
  std::string err;
  EXPECT_EQ(run(APX_OP_Mod, &floor, {&a, &a}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Mod: fmod = 0 needs integer inputs, got float32");
}

TEST(IsClass, IsNaNAndIsInfWithTheirFlags) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16}) {
    Tensor x = make(dt, {5}, {NAN, INFINITY, -INFINITY, 1, -0.0}), y(APX_DT_BOOL, {5});
    run_ok(APX_OP_IsNaN, nullptr, {&x}, {&y});
    EXPECT_EQ(y.values(), (std::vector<double>{1, 0, 0, 0, 0})) << apx_dtype_name(dt);
    const ApxAttrIsInf both = {1, 1}, neg = {1, 0}, pos = {0, 1}, none = {0, 0};
    std::pair<const ApxAttrIsInf *, std::vector<double>> cases[] = {
        {&both, {0, 1, 1, 0, 0}}, {&neg, {0, 0, 1, 0, 0}}, {&pos, {0, 1, 0, 0, 0}}, {&none, {0, 0, 0, 0, 0}}};
    for (auto &c : cases) {
      run_ok(APX_OP_IsInf, c.first, {&x}, {&y});
      EXPECT_EQ(y.values(), c.second) << apx_dtype_name(dt);
    }
  }
  Tensor i = make(APX_DT_I32, {1}, {1}), y(APX_DT_BOOL, {1});
  std::string err;
  EXPECT_EQ(run(APX_OP_IsNaN, nullptr, {&i}, {&y}, &err), APX_STATUS_UNSUPPORTED);
}

TEST(Logic, NotAndOrWithBroadcastingTreatAnyNonzeroByteAsTrue) {
  Tensor a(APX_DT_BOOL, {2, 1}), b(APX_DT_BOOL, {3}), y(APX_DT_BOOL, {2, 3}), n(APX_DT_BOOL, {3});
  a.as<uint8_t>()[0] = 0, a.as<uint8_t>()[1] = 7;  // 7: a nonzero byte
  b.as<uint8_t>()[0] = 1, b.as<uint8_t>()[1] = 0, b.as<uint8_t>()[2] = 2;
  run_ok(APX_OP_And, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{0, 0, 0, 1, 0, 1}));
  run_ok(APX_OP_Or, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{1, 0, 1, 1, 1, 1}));
  run_ok(APX_OP_Not, nullptr, {&b}, {&n});
  EXPECT_EQ(n.values(), (std::vector<double>{0, 1, 0}));
  Tensor f = make(APX_DT_F32, {3}, {1, 0, 1});
  std::string err;
  EXPECT_EQ(run(APX_OP_Not, nullptr, {&f}, {&n}, &err), APX_STATUS_UNSUPPORTED);
}

TEST(Compare, ResultsDoNotDependOnTheThreadCount) {
  Tensor a = rand(APX_DT_F16, {300, 1000}, -2, 2, 11), b = rand(APX_DT_F16, {1000}, -2, 2, 12);
  RunOpts one, four;
  four.threads = 4;
  Tensor y1(APX_DT_BOOL, {300, 1000}), y4(APX_DT_BOOL, {300, 1000}), m1(APX_DT_F16, {300, 1000}),
      m4(APX_DT_F16, {300, 1000});
  run_ok(APX_OP_GreaterOrEqual, nullptr, {&a, &b}, {&y1}, one);
  run_ok(APX_OP_GreaterOrEqual, nullptr, {&a, &b}, {&y4}, four);
  run_ok(APX_OP_Min, nullptr, {&a, &b}, {&m1}, one);
  run_ok(APX_OP_Min, nullptr, {&a, &b}, {&m4}, four);
  expect_same_bits(y1, y4, "GreaterOrEqual");
  expect_same_bits(m1, m4, "Min");
}

}  // namespace
