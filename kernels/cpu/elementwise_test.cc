// elementwise_test.cc - unary and binary elementwise ops against double references in every
// float dtype, numpy broadcasting, integer paths (ONNX semantics), fp16 overflow to inf,
// in-place use and thread-count independence.
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

struct UnaryCase {
  ApxOp op;
  const char *name;
  double lo, hi;
  std::function<double(double)> ref;
  double c;            // math-type error factor (see test_util.h)
  bool scale_by_x;     // intermediates of size |x| (Gelu: x/2 (1 + erf) cancels for x << 0)
  const void *attrs;
};

const ApxAttrLeakyRelu kLeaky = {0.1f};
const ApxAttrGelu kGeluErf = {APX_GELU_NONE}, kGeluTanh = {APX_GELU_TANH};

std::vector<UnaryCase> unary_cases() {
  return {
      {APX_OP_Neg, "Neg", -3, 3, [](double x) { return -x; }, 0, false, nullptr},
      {APX_OP_Relu, "Relu", -3, 3, [](double x) { return x > 0 ? x : 0; }, 0, false, nullptr},
      {APX_OP_LeakyRelu, "LeakyRelu", -3, 3,
       [](double x) { return x >= 0 ? x : x * (double)0.1f; }, 1, false, &kLeaky},
      {APX_OP_Sigmoid, "Sigmoid", -12, 12, [](double x) { return 1 / (1 + std::exp(-x)); }, 4,
       false, nullptr},
      {APX_OP_Tanh, "Tanh", -4, 4, [](double x) { return std::tanh(x); }, 4, false, nullptr},
      {APX_OP_Gelu, "Gelu", -6, 6,
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, 8, true, &kGeluErf},
      {APX_OP_Gelu, "GeluTanh", -6, 6,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
       },
       8, true, &kGeluTanh},
      {APX_OP_Erf, "Erf", -3, 3, [](double x) { return std::erf(x); }, 4, false, nullptr},
      {APX_OP_Sqrt, "Sqrt", 0.01, 100, [](double x) { return std::sqrt(x); }, 1, false, nullptr},
      {APX_OP_Exp, "Exp", -10, 10, [](double x) { return std::exp(x); }, 4, false, nullptr},
      {APX_OP_Log, "Log", 0.01, 100, [](double x) { return std::log(x); }, 4, false, nullptr},
  };
}

}  // namespace

TEST(Unary, EveryOpEveryFloatType) {
  for (const UnaryCase &uc : unary_cases())
    for (ApxDType dt : kFloatTypes) {
      Tensor x = rand(dt, {7, 33}, uc.lo, uc.hi, 11), y(dt, {7, 33});
      run_ok(uc.op, uc.attrs, {&x}, {&y});
      std::vector<double> xv = x.values(), ref(xv.size()), scale(xv.size());
      for (size_t i = 0; i < xv.size(); i++) {
        ref[i] = uc.ref(xv[i]);
        scale[i] = std::fabs(ref[i]) + (uc.scale_by_x ? std::fabs(xv[i]) : 0);
      }
      expect_close(y, ref, uc.c, &scale, uc.name);
    }
}

TEST(Unary, SpecialValuesPropagate) {
  Tensor x = make(APX_DT_F32, {4}, {NAN, INFINITY, -INFINITY, -0.0}), y(APX_DT_F32, {4});
  run_ok(APX_OP_Relu, nullptr, {&x}, {&y});
  EXPECT_TRUE(std::isnan(y.get(0)));  // NaN is not clamped away (overflow stays visible)
  EXPECT_EQ(y.get(1), INFINITY);
  EXPECT_EQ(y.get(2), 0.0);
  run_ok(APX_OP_Sigmoid, nullptr, {&x}, {&y});
  EXPECT_EQ(y.get(1), 1.0);
  EXPECT_EQ(y.get(2), 0.0);
  run_ok(APX_OP_Log, nullptr, {&x}, {&y});
  EXPECT_EQ(y.get(3), -INFINITY);
}

TEST(Unary, InPlace) {
  Tensor x = rand(APX_DT_F32, {100}, -2, 2, 3), ref(APX_DT_F32, {100});
  run_ok(APX_OP_Tanh, nullptr, {&x}, {&ref});
  ApxTensor v = x.view();
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  ASSERT_EQ(apx_cpu_run(&ctx, APX_OP_Tanh, nullptr, &v, 1, &v, 1), APX_STATUS_OK);
  expect_same_bits(x, ref, "in-place Tanh");
}

TEST(Unary, NegInt64Wraps) {
  Tensor x(APX_DT_I64, {3}), y(APX_DT_I64, {3});
  x.as<int64_t>()[0] = 5;
  x.as<int64_t>()[1] = -7;
  x.as<int64_t>()[2] = INT64_MIN;
  run_ok(APX_OP_Neg, nullptr, {&x}, {&y});
  EXPECT_EQ(y.as<int64_t>()[0], -5);
  EXPECT_EQ(y.as<int64_t>()[1], 7);
  EXPECT_EQ(y.as<int64_t>()[2], INT64_MIN);
  Tensor a = make(APX_DT_I32, {2}, {3, -4}), b(APX_DT_I32, {2});
  run_ok(APX_OP_Neg, nullptr, {&a}, {&b});
  EXPECT_EQ(b.as<int32_t>()[0], -3);
  EXPECT_EQ(b.as<int32_t>()[1], 4);
  Tensor xi(APX_DT_I64, {1}), yi(APX_DT_I64, {1});
  std::string err;
  EXPECT_EQ(run(APX_OP_Relu, nullptr, {&xi}, {&yi}, &err), APX_STATUS_UNSUPPORTED) << err;
}

namespace {

struct Shapes {
  std::vector<int64_t> a, b, out;
};

const std::vector<Shapes> kBroadcast = {
    {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}, {2, 3, 4}},
    {{2, 3, 4}, {3, 1}, {2, 3, 4}},    {{2, 1, 4}, {3, 1}, {2, 3, 4}},
    {{}, {5, 2}, {5, 2}},              {{5, 1, 1}, {1, 6, 1}, {5, 6, 1}},
    {{1}, {1}, {1}},                   {{3, 1, 5}, {1, 4, 1}, {3, 4, 5}},
};

double binref(ApxOp op, double a, double b) {
  switch (op) {
    case APX_OP_Add: return a + b;
    case APX_OP_Sub: return a - b;
    case APX_OP_Mul: return a * b;
    case APX_OP_Div: return a / b;
    case APX_OP_Pow: return std::pow(a, b);
    default: return NAN;
  }
}

}  // namespace

TEST(Binary, BroadcastEveryOpEveryFloatType) {
  const ApxOp ops[] = {APX_OP_Add, APX_OP_Sub, APX_OP_Mul, APX_OP_Div, APX_OP_Pow};
  for (const Shapes &sh : kBroadcast)
    for (ApxOp op : ops)
      for (ApxDType dt : kFloatTypes) {
        bool pw = op == APX_OP_Pow;
        Tensor a = rand(dt, sh.a, pw ? 0.5 : -4, pw ? 2 : 4, 5);
        Tensor b = rand(dt, sh.b, pw ? -2 : 0.5, 2, 6);
        Tensor y(dt, sh.out);
        run_ok(op, nullptr, {&a, &b}, {&y});
        std::vector<double> ref((size_t)y.numel()), sc(ref.size());
        for (int64_t i = 0; i < y.numel(); i++) {
          double x1 = a.get(broadcast_index(sh.out, sh.a, i));
          double x2 = b.get(broadcast_index(sh.out, sh.b, i));
          ref[i] = binref(op, x1, x2);
          // Add/Sub of opposite-sign operands cancel: the fp32 error is relative to |a|+|b|
          sc[i] = std::fabs(ref[i]) + (op == APX_OP_Add || op == APX_OP_Sub
                                           ? std::fabs(x1) + std::fabs(x2) : 0);
        }
        expect_close(y, ref, pw ? 4 : 1, &sc, apx_op_name(op));
      }
}

TEST(Binary, IncompatibleShapesAreRejected) {
  Tensor a(APX_DT_F32, {2, 3}), b(APX_DT_F32, {2}), y(APX_DT_F32, {2, 3});
  std::string err;
  EXPECT_EQ(run(APX_OP_Add, nullptr, {&a, &b}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Add: input 1 shape [2] does not broadcast to [2,3]");
}

// Mixed float types are computed in the math type (as a promotion would) and rounded once.
TEST(Binary, MixedFloatTypesPromote) {
  Tensor a = make(APX_DT_F32, {2}, {1.0 + std::ldexp(1.0, -20), 3}),
         b = make(APX_DT_F16, {2}, {0.5, 65504});
  Tensor y(APX_DT_F32, {2});
  run_ok(APX_OP_Add, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{1.5 + std::ldexp(1.0, -20), 65507}));
  Tensor y16(APX_DT_F16, {2});
  run_ok(APX_OP_Add, nullptr, {&a, &b}, {&y16});
  EXPECT_EQ(y16.values(), (std::vector<double>{1.5, 65504}));
}

// fp16 overflow gives inf exactly where __float2half_rn does; bf16 keeps the range.
TEST(Binary, HalfOverflowGivesInf) {
  Tensor a16 = make(APX_DT_F16, {4}, {300, -300, 65504, 65504});
  Tensor b16 = make(APX_DT_F16, {4}, {300, 300, 16, 15});
  Tensor y16(APX_DT_F16, {4});
  run_ok(APX_OP_Mul, nullptr, {&a16, &b16}, {&y16});
  EXPECT_EQ(y16.get(0), INFINITY);
  EXPECT_EQ(y16.get(1), -INFINITY);
  run_ok(APX_OP_Add, nullptr, {&a16, &b16}, {&y16});
  EXPECT_EQ(y16.get(2), INFINITY);  // 65520 ties to even: 65536 -> inf
  EXPECT_EQ(y16.get(3), 65504.0);   // 65519 rounds down
  Tensor abf = cast(a16, APX_DT_BF16), bbf = cast(b16, APX_DT_BF16), ybf(APX_DT_BF16, {4});
  run_ok(APX_OP_Mul, nullptr, {&abf, &bbf}, {&ybf});
  EXPECT_EQ(ybf.get(0), 90112.0);  // 90000 rounded to bf16
  EXPECT_TRUE(std::isfinite(ybf.get(1)));
  // one rounding per op: (1 + 2^-11) is computed in fp32 and rounded once (ties to even)
  Tensor one = make(APX_DT_F16, {1}, {1.0}), tiny = make(APX_DT_F16, {1}, {std::ldexp(1.0, -11)});
  Tensor s(APX_DT_F16, {1});
  run_ok(APX_OP_Add, nullptr, {&one, &tiny}, {&s});
  EXPECT_EQ(s.get(0), 1.0);
}

TEST(Binary, Int64Semantics) {
  Tensor a = make(APX_DT_I64, {5}, {-7, 7, -7, 9, 0});
  Tensor b = make(APX_DT_I64, {5}, {2, 2, -2, -3, 5});
  Tensor y(APX_DT_I64, {5});
  run_ok(APX_OP_Div, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{-3, 3, 3, -3, 0}));  // truncation
  run_ok(APX_OP_Mul, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{-14, 14, 14, -27, 0}));
  run_ok(APX_OP_Sub, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{-9, 5, -5, 12, -5}));
  Tensor e = make(APX_DT_I64, {5}, {3, 0, 2, 1, -1});
  run_ok(APX_OP_Pow, nullptr, {&a, &e}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{-343, 1, 49, 9, 0}));
  // broadcasting a scalar, as shape arithmetic does
  Tensor s = make(APX_DT_I64, {}, {10}), z(APX_DT_I64, {5});
  run_ok(APX_OP_Add, nullptr, {&a, &s}, {&z});
  EXPECT_EQ(z.values(), (std::vector<double>{3, 17, 3, 19, 10}));
  // division by zero is an error, overflow wraps
  Tensor zero = make(APX_DT_I64, {1}, {0});
  std::string err;
  EXPECT_EQ(run(APX_OP_Div, nullptr, {&a, &zero}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Div: integer division by zero");
  Tensor m(APX_DT_I64, {1}), m1 = make(APX_DT_I64, {1}, {-1}), r(APX_DT_I64, {1});
  m.as<int64_t>()[0] = INT64_MIN;
  run_ok(APX_OP_Div, nullptr, {&m, &m1}, {&r});
  EXPECT_EQ(r.as<int64_t>()[0], INT64_MIN);
  // int32 goes through int64 and wraps back
  Tensor i = make(APX_DT_I32, {2}, {2147483647, -5}), j = make(APX_DT_I32, {2}, {1, 2});
  Tensor k(APX_DT_I32, {2});
  run_ok(APX_OP_Add, nullptr, {&i, &j}, {&k});
  EXPECT_EQ(k.as<int32_t>()[0], INT32_MIN);
  EXPECT_EQ(k.as<int32_t>()[1], -3);
}

TEST(Binary, PowMixedTypes) {
  Tensor base = make(APX_DT_F32, {3}, {2, -1.5, 9}), ex = make(APX_DT_I64, {3}, {3, 2, -1});
  Tensor y(APX_DT_F32, {3});
  run_ok(APX_OP_Pow, nullptr, {&base, &ex}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{8, 2.25, (double)(1.0f / 9.0f)}));
  Tensor ib = make(APX_DT_I64, {2}, {4, 10}), fe = make(APX_DT_F32, {2}, {0.5, 2});
  Tensor iy(APX_DT_I64, {2});
  run_ok(APX_OP_Pow, nullptr, {&ib, &fe}, {&iy});
  EXPECT_EQ(iy.values(), (std::vector<double>{2, 100}));
}

TEST(Binary, EqualEveryType) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16, APX_DT_I64, APX_DT_I32}) {
    Tensor a = make(dt, {2, 3}, {1, 2, 3, 4, 5, 6}), b = make(dt, {3}, {1, 5, 6});
    Tensor y(APX_DT_BOOL, {2, 3});
    run_ok(APX_OP_Equal, nullptr, {&a, &b}, {&y});
    EXPECT_EQ(y.values(), (std::vector<double>{1, 0, 0, 0, 1, 1})) << apx_dtype_name(dt);
  }
  Tensor a(APX_DT_BOOL, {3}), b(APX_DT_BOOL, {1}), y(APX_DT_BOOL, {3});
  a.as<uint8_t>()[0] = 1;
  a.as<uint8_t>()[2] = 1;
  b.as<uint8_t>()[0] = 1;
  run_ok(APX_OP_Equal, nullptr, {&a, &b}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{1, 0, 1}));
  Tensor n = make(APX_DT_F32, {1}, {NAN}), yn(APX_DT_BOOL, {1});
  run_ok(APX_OP_Equal, nullptr, {&n, &n}, {&yn});
  EXPECT_EQ(yn.get(0), 0.0);
}

TEST(Sum, VariadicBroadcastInOrder) {
  for (ApxDType dt : kFloatTypes) {
    Tensor a = rand(dt, {2, 3, 4}, -1, 1, 1), b = rand(dt, {3, 1}, -1, 1, 2),
           c = rand(dt, {4}, -1, 1, 3), y(dt, {2, 3, 4});
    run_ok(APX_OP_Sum, nullptr, {&a, &b, &c}, {&y});
    std::vector<double> ref((size_t)y.numel()), sc(ref.size());
    for (int64_t i = 0; i < y.numel(); i++) {
      double x1 = a.get(i), x2 = b.get(broadcast_index(y.dims, b.dims, i)),
             x3 = c.get(broadcast_index(y.dims, c.dims, i));
      ref[i] = x1 + x2 + x3;
      sc[i] = std::fabs(x1) + std::fabs(x2) + std::fabs(x3);
    }
    expect_close(y, ref, 2, &sc, "Sum");
  }
  Tensor one = make(APX_DT_I64, {2}, {4, 5}), y1(APX_DT_I64, {3, 2});
  run_ok(APX_OP_Sum, nullptr, {&one}, {&y1});
  EXPECT_EQ(y1.values(), (std::vector<double>{4, 5, 4, 5, 4, 5}));
}

TEST(Binary, ThreadCountDoesNotChangeBits) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    Tensor a = rand(dt, {64, 50, 65}, -2, 2, 8), b = rand(dt, {50, 1}, 0.5, 2, 9);
    Tensor y1(dt, a.dims), y2(dt, a.dims);
    RunOpts one, two;
    two.threads = 2;
    run_ok(APX_OP_Div, nullptr, {&a, &b}, {&y1}, one);
    run_ok(APX_OP_Div, nullptr, {&a, &b}, {&y2}, two);
    expect_same_bits(y1, y2, "Div 1 vs 2 threads");
  }
}

// Half semantics, exactly: a half op equals the fp32 op on the widened inputs, rounded once
// (this also covers the chunked conversion path for same-shape elementwise ops).
TEST(Elementwise, HalfIsFp32RoundedOnce) {
  const ApxAttrGelu ge = {APX_GELU_NONE};
  struct Op {
    ApxOp op;
    int n_in;
    const void *attrs;
  } ops[] = {{APX_OP_Add, 2, nullptr}, {APX_OP_Mul, 2, nullptr}, {APX_OP_Div, 2, nullptr},
             {APX_OP_Pow, 2, nullptr}, {APX_OP_Gelu, 1, &ge}, {APX_OP_Exp, 1, nullptr},
             {APX_OP_Sum, 3, nullptr}, {APX_OP_GeluGrad, 2, &ge}, {APX_OP_TanhGrad, 2, nullptr}};
  for (ApxDType dt : {APX_DT_F16, APX_DT_BF16})
    for (const Op &o : ops)
      for (int threads = 1; threads <= 2; threads++) {
        std::vector<Tensor> in, in32;
        for (int k = 0; k < o.n_in; k++) {
          in.push_back(rand(dt, {9, 1111}, o.op == APX_OP_Pow && k == 0 ? 0.1 : -6, 6, 70 + k));
          in32.push_back(cast(in.back(), APX_DT_F32));
        }
        std::vector<const Tensor *> pi, p32;
        for (int k = 0; k < o.n_in; k++) {
          pi.push_back(&in[k]);
          p32.push_back(&in32[k]);
        }
        Tensor y(dt, {9, 1111}), y32(APX_DT_F32, {9, 1111});
        RunOpts ro;
        ro.threads = threads;
        run_ok(o.op, o.attrs, pi, {&y}, ro);
        run_ok(o.op, o.attrs, p32, {&y32}, ro);
        expect_same_bits(y, cast(y32, dt), apx_op_name(o.op));
      }
}
