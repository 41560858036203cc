// indexing_test.cc - the v1.1 data-movement and indexing kernels against naive definitions
// written here independently of kernels/index_plan.h: Pad (constant, reflect, edge; negative
// pads; reflection wider than the input), Tile, Trilu, GatherElements, GatherND, on every
// dtype the ONNX tests use (bool, integers, half, float; compile-time folding runs these
// kernels, so they must be exact); their gradients as adjoints of the forward (the dot-product
// test <dY, F(x)> = <F^T(dY), x> in float64, F linear in x) and bit-identical at every thread
// count; ReduceMax (NaN, empty groups, integers, bool) and ReduceMaxGrad (PyTorch's amax rule:
// ties share evenly); RandomUniformLike (range, determinism, rounding of half outputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/test_util.h"

extern "C" {
#include "kernels/philox.h"
}

using namespace apxtest;

namespace {

const ApxDType kAllTypes[] = {APX_DT_BOOL, APX_DT_U8, APX_DT_I32, APX_DT_I64,
                              APX_DT_F16,  APX_DT_BF16, APX_DT_F32, APX_DT_F64};

// Values representable in every type above (small integers; bool: 0/1).
Tensor pattern(ApxDType dt, std::vector<int64_t> dims) {
  Tensor t(dt, dims);
  for (int64_t i = 0; i < t.numel(); i++) t.set(i, dt == APX_DT_BOOL ? (i * 7 % 3 == 0) : (double)(i * 37 % 101) - 20 * (dt != APX_DT_U8));
  return t;
}

std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t> &dims) {
  std::vector<int64_t> c(dims.size());
  for (int d = (int)dims.size() - 1; d >= 0; d--) {
    c[d] = i % dims[d];
    i /= dims[d];
  }
  return c;
}

int64_t ravel(const std::vector<int64_t> &c, const std::vector<int64_t> &dims) {
  int64_t off = 0;
  for (size_t d = 0; d < dims.size(); d++) off = off * dims[d] + c[d];
  return off;
}

double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); i++) s += a.get(i) * b.get(i);
  return s;
}

// ---- Pad --------------------------------------------------------------------------------

ApxAttrPad PadAttrs(int mode, std::vector<int64_t> begins, std::vector<int64_t> ends, const Tensor *value = nullptr) {
  ApxAttrPad a;
  memset(&a, 0, sizeof a);
  a.mode = mode;
  a.rank = (int32_t)begins.size();
  for (size_t i = 0; i < begins.size(); i++) a.begins[i] = begins[i], a.ends[i] = ends[i];
  if (value) memcpy(&a.value, value->bytes.data(), apx_dtype_size(value->dt));
  return a;
}

// numpy.pad's source coordinate: -1 for the constant; reflect reflects repeatedly.
int64_t naive_pad_src(int mode, int64_t o, int64_t n, int64_t b) {
  int64_t j = o - b;
  if (j >= 0 && j < n) return j;
  if (mode == APX_PAD_CONSTANT) return -1;
  if (mode == APX_PAD_EDGE) return j < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  while (j < 0 || j >= n) j = j < 0 ? -j : 2 * (n - 1) - j;
  return j;
}

Tensor naive_pad(const Tensor &x, const ApxAttrPad &a, double value) {
  std::vector<int64_t> od;
  for (size_t d = 0; d < x.dims.size(); d++) od.push_back(x.dims[d] + a.begins[d] + a.ends[d]);
  Tensor y(x.dt, od);
  for (int64_t i = 0; i < y.numel(); i++) {
    std::vector<int64_t> c = unravel(i, od);
    bool fill = false;
    for (size_t d = 0; d < c.size(); d++) {
      c[d] = naive_pad_src(a.mode, c[d], x.dims[d], a.begins[d]);
      fill |= c[d] < 0;
    }
    y.set(i, fill ? value : x.get(ravel(c, x.dims)));
  }
  return y;
}

TEST(Pad, EveryModeAndDtypeMatchesNumpyPad) {
  for (ApxDType dt : kAllTypes)
    for (int mode : {APX_PAD_CONSTANT, APX_PAD_REFLECT, APX_PAD_EDGE}) {
      SCOPED_TRACE(std::string(apx_dtype_name(dt)) + " mode " + std::to_string(mode));
      Tensor x = pattern(dt, {2, 3, 4});
      Tensor v = make(dt, {1}, {dt == APX_DT_BOOL ? 1.0 : 7.0});
      // crop at the front of dim 1, reflection wider than dim 2 (7 > 4 - 1)
      ApxAttrPad a = PadAttrs(mode, {1, -1, 7}, {0, 2, 3}, &v);
      Tensor want = naive_pad(x, a, v.get(0));
      Tensor got(dt, want.dims);
      run_ok(APX_OP_Pad, &a, {&x}, {&got});
      expect_same_bits(got, want);
    }
}

TEST(Pad, SizeOneDimsScalarsAndErrors) {
  Tensor x = make(APX_DT_F32, {1, 3}, {1, 2, 3});
  ApxAttrPad a = PadAttrs(APX_PAD_REFLECT, {2, 1}, {1, 4}, nullptr);
  Tensor want = naive_pad(x, a, 0), got(APX_DT_F32, want.dims);
  run_ok(APX_OP_Pad, &a, {&x}, {&got});
  expect_same_bits(got, want);
  Tensor s = make(APX_DT_I64, {}, {5}), s2(APX_DT_I64, {});
  ApxAttrPad none = PadAttrs(APX_PAD_CONSTANT, {}, {});
  run_ok(APX_OP_Pad, &none, {&s}, {&s2});
  EXPECT_EQ(s2.get(0), 5);
  Tensor e(APX_DT_F32, {0, 2}), eo(APX_DT_F32, {2, 2});
  ApxAttrPad edge = PadAttrs(APX_PAD_EDGE, {1, 0}, {1, 0});
  std::string err;
  EXPECT_EQ(run(APX_OP_Pad, &edge, {&e}, {&eo}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("edge padding of an empty dim"), std::string::npos) << err;
  Tensor wrong(APX_DT_F32, {3, 3});
  EXPECT_EQ(run(APX_OP_Pad, &a, {&x}, {&wrong}, &err), APX_STATUS_BAD_INPUT);
}

TEST(PadGrad, IsTheAdjointOfPadInEveryMode) {
  for (int mode : {APX_PAD_CONSTANT, APX_PAD_REFLECT, APX_PAD_EDGE}) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    Tensor x = rand(APX_DT_F64, {3, 4, 5}, -1, 1, 11 + mode);
    ApxAttrPad a = PadAttrs(mode, {2, -1, 9}, {1, 3, 4});  // value 0: Pad is linear in x
    Tensor y = naive_pad(x, a, 0);
    Tensor dy = rand(APX_DT_F64, y.dims, -1, 1, 23 + mode), dx(APX_DT_F64, x.dims);
    run_ok(APX_OP_PadGrad, &a, {&dy}, {&dx});
    double lhs = dot(dy, y), rhs = dot(dx, x);
    EXPECT_NEAR(lhs, rhs, 1e-12 * (std::fabs(lhs) + 1));
    // fp32 and the thread count: the same order of sums
    Tensor dy32 = cast(dy, APX_DT_F32), a1(APX_DT_F32, x.dims), a4(APX_DT_F32, x.dims);
    RunOpts one, four;
    four.threads = 4;
    run_ok(APX_OP_PadGrad, &a, {&dy32}, {&a1}, one);
    run_ok(APX_OP_PadGrad, &a, {&dy32}, {&a4}, four);
    expect_same_bits(a1, a4);
    Tensor ady = dy, scale(APX_DT_F64, x.dims);  // sum of |terms| per element: the error scale
    for (int64_t i = 0; i < ady.numel(); i++) ady.set(i, std::fabs(dy.get(i)));
    run_ok(APX_OP_PadGrad, &a, {&ady}, {&scale});
    std::vector<double> sc = scale.values();
    expect_close(a1, dx.values(), 64, &sc);
  }
}

// ---- Tile, Trilu --------------------------------------------------------------------------

TEST(Tile, EveryDtypeMatchesTheDefinition) {
  for (ApxDType dt : kAllTypes) {
    Tensor x = pattern(dt, {2, 3, 2});
    ApxAttrTile a;
    memset(&a, 0, sizeof a);
    a.rank = 3;
    a.repeats[0] = 2, a.repeats[1] = 1, a.repeats[2] = 3;
    Tensor got(dt, {4, 3, 6}), want(dt, {4, 3, 6});
    for (int64_t i = 0; i < want.numel(); i++) {
      std::vector<int64_t> c = unravel(i, want.dims);
      for (size_t d = 0; d < c.size(); d++) c[d] %= x.dims[d];
      want.set(i, x.get(ravel(c, x.dims)));
    }
    run_ok(APX_OP_Tile, &a, {&x}, {&got});
    expect_same_bits(got, want, apx_dtype_name(dt));
  }
  Tensor x = make(APX_DT_F32, {2}, {1, 2}), y(APX_DT_F32, {0});
  ApxAttrTile zero;
  memset(&zero, 0, sizeof zero);
  zero.rank = 1;
  run_ok(APX_OP_Tile, &zero, {&x}, {&y});
}

TEST(Trilu, EveryDtypeAndKMatchesTheDefinition) {
  for (ApxDType dt : kAllTypes)
    for (int upper : {0, 1})
      for (int64_t k : {-7, -2, 0, 1, 3, 9}) {
        Tensor x = pattern(dt, {2, 4, 5}), got(dt, x.dims), want(dt, x.dims);
        for (int64_t i = 0; i < x.numel(); i++) {
          std::vector<int64_t> c = unravel(i, x.dims);
          bool keep = upper ? c[2] - c[1] >= k : c[2] - c[1] <= k;
          want.set(i, keep ? x.get(i) : 0);
        }
        ApxAttrTrilu a = {upper, k};
        run_ok(APX_OP_Trilu, &a, {&x}, {&got});
        expect_same_bits(got, want, apx_dtype_name(dt));
        run_ok(APX_OP_Trilu, &a, {&x}, {&x});  // in place
        expect_same_bits(x, want, "in place");
      }
  Tensor v(APX_DT_F32, {4}), vo(APX_DT_F32, {4});
  ApxAttrTrilu a = {1, 0};
  EXPECT_EQ(run(APX_OP_Trilu, &a, {&v}, {&vo}), APX_STATUS_BAD_INPUT);  // rank 1
}

// ---- GatherElements ---------------------------------------------------------------------

TEST(GatherElements, EveryDtypeMatchesTheDefinition) {
  for (ApxDType dt : kAllTypes)
    for (ApxDType it : {APX_DT_I64, APX_DT_I32}) {
      Tensor x = pattern(dt, {4, 3, 2});
      // indices smaller than data in the non-axis dims, negative ones
      Tensor idx = make(it, {2, 2, 2}, {0, -1, 2, 1, -3, 0, 1, 2});
      ApxAttrAxis a = {1};
      Tensor got(dt, idx.dims), want(dt, idx.dims);
      for (int64_t i = 0; i < idx.numel(); i++) {
        std::vector<int64_t> c = unravel(i, idx.dims);
        int64_t v = (int64_t)idx.get(i);
        c[1] = v < 0 ? v + 3 : v;
        want.set(i, x.get(ravel(c, x.dims)));
      }
      run_ok(APX_OP_GatherElements, &a, {&x, &idx}, {&got});
      expect_same_bits(got, want, apx_dtype_name(dt));
    }
  Tensor x(APX_DT_F32, {2, 3}), bad = make(APX_DT_I64, {1, 1}, {3}), y(APX_DT_F32, {1, 1});
  ApxAttrAxis a = {1};
  std::string err;
  EXPECT_EQ(run(APX_OP_GatherElements, &a, {&x, &bad}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("index 3 at position 0 outside [-3, 3)"), std::string::npos) << err;
}

TEST(GatherElementsGrad, IsTheAdjointAndThreadIndependent) {
  Tensor x = rand(APX_DT_F64, {5, 4, 3}, -1, 1, 5);
  Tensor idx(APX_DT_I64, {5, 6, 2});
  for (int64_t i = 0; i < idx.numel(); i++) idx.set(i, (double)((i * 7) % 8) - 4);  // repeats, negatives
  ApxAttrAxis a = {1};
  Tensor y(APX_DT_F64, idx.dims), dy = rand(APX_DT_F64, idx.dims, -1, 1, 6), dx(APX_DT_F64, x.dims);
  run_ok(APX_OP_GatherElements, &a, {&x, &idx}, {&y});
  run_ok(APX_OP_GatherElementsGrad, &a, {&dy, &idx}, {&dx});
  EXPECT_NEAR(dot(dy, y), dot(dx, x), 1e-12 * (std::fabs(dot(dy, y)) + 1));
  Tensor dy16 = cast(dy, APX_DT_F16), a1(APX_DT_F16, x.dims), a4(APX_DT_F16, x.dims);
  RunOpts four;
  four.threads = 4;
  run_ok(APX_OP_GatherElementsGrad, &a, {&dy16, &idx}, {&a1});
  run_ok(APX_OP_GatherElementsGrad, &a, {&dy16, &idx}, {&a4}, four);
  expect_same_bits(a1, a4);
}

// ---- GatherND ---------------------------------------------------------------------------

TEST(GatherND, BatchDimsAndEveryDtypeMatchTheDefinition) {
  for (ApxDType dt : kAllTypes) {
    Tensor x = pattern(dt, {2, 3, 4, 2});
    // batch_dims 1: tuples of 2 into dims (3, 4), slices of 2
    Tensor idx = make(APX_DT_I64, {2, 3, 2}, {0, 1, 2, -1, 0, 1, -3, 0, 1, 3, 2, 2});
    ApxAttrGatherND a = {1};
    Tensor got(dt, {2, 3, 2}), want(dt, {2, 3, 2});
    for (int64_t b = 0; b < 2; b++)
      for (int64_t j = 0; j < 3; j++) {
        int64_t t0 = (int64_t)idx.get((b * 3 + j) * 2), t1 = (int64_t)idx.get((b * 3 + j) * 2 + 1);
        t0 = t0 < 0 ? t0 + 3 : t0;
        t1 = t1 < 0 ? t1 + 4 : t1;
        for (int64_t k = 0; k < 2; k++) want.set((b * 3 + j) * 2 + k, x.get(ravel({b, t0, t1, k}, x.dims)));
      }
    run_ok(APX_OP_GatherND, &a, {&x, &idx}, {&got});
    expect_same_bits(got, want, apx_dtype_name(dt));
  }
  Tensor x(APX_DT_F32, {3, 2}), bad = make(APX_DT_I64, {1, 1}, {-4}), y(APX_DT_F32, {1, 2});
  ApxAttrGatherND a = {0};
  EXPECT_EQ(run(APX_OP_GatherND, &a, {&x, &bad}, {&y}), APX_STATUS_BAD_INPUT);
}

TEST(GatherNDGrad, IsTheAdjointAndThreadIndependent) {
  Tensor x = rand(APX_DT_F64, {4, 3, 5}, -1, 1, 8);
  Tensor idx = make(APX_DT_I64, {6, 2}, {0, 1, 3, 2, 0, 1, -1, -1, 2, 0, 0, 1});  // a repeated tuple
  ApxAttrGatherND a = {0};
  Tensor y(APX_DT_F64, {6, 5}), dy = rand(APX_DT_F64, {6, 5}, -1, 1, 9), dx(APX_DT_F64, x.dims);
  run_ok(APX_OP_GatherND, &a, {&x, &idx}, {&y});
  run_ok(APX_OP_GatherNDGrad, &a, {&dy, &idx}, {&dx});
  EXPECT_NEAR(dot(dy, y), dot(dx, x), 1e-12 * (std::fabs(dot(dy, y)) + 1));
  Tensor dyb = cast(dy, APX_DT_BF16), a1(APX_DT_BF16, x.dims), a4(APX_DT_BF16, x.dims);
  RunOpts four;
  four.threads = 4;
  run_ok(APX_OP_GatherNDGrad, &a, {&dyb, &idx}, {&a1});
  run_ok(APX_OP_GatherNDGrad, &a, {&dyb, &idx}, {&a4}, four);
  expect_same_bits(a1, a4);
}

// ---- ReduceMax ---------------------------------------------------------------------------

ApxAttrReduce Axes(std::vector<int64_t> axes, int keepdims = 1) {
  ApxAttrReduce a;
  memset(&a, 0, sizeof a);
  a.n_axes = (int32_t)axes.size();
  for (size_t i = 0; i < axes.size(); i++) a.axes[i] = axes[i];
  a.keepdims = keepdims;
  return a;
}

TEST(ReduceMax, FloatsIntegersBoolNaNAndEmptyGroups) {
  Tensor x = make(APX_DT_F32, {2, 3}, {1, NAN, 3, -4, -2, -3}), y(APX_DT_F32, {2, 1});
  ApxAttrReduce rows = Axes({1});
  run_ok(APX_OP_ReduceMax, &rows, {&x}, {&y});
  EXPECT_TRUE(std::isnan(y.get(0)));
  EXPECT_EQ(y.get(1), -2);
  Tensor cols(APX_DT_F32, {3});
  ApxAttrReduce c0 = Axes({0}, 0);
  run_ok(APX_OP_ReduceMax, &c0, {&x}, {&cols});
  EXPECT_EQ(cols.get(0), 1);
  EXPECT_TRUE(std::isnan(cols.get(1)));
  EXPECT_EQ(cols.get(2), 3);
  Tensor e(APX_DT_F32, {2, 0}), ey(APX_DT_F32, {2});
  ApxAttrReduce r1 = Axes({1}, 0);
  run_ok(APX_OP_ReduceMax, &r1, {&e}, {&ey});
  EXPECT_EQ(ey.get(0), -INFINITY);
  Tensor xi = make(APX_DT_I64, {3}, {-5, 9000000000000000000.0, 7}), yi(APX_DT_I64, {1});
  ApxAttrReduce all = Axes({});
  run_ok(APX_OP_ReduceMax, &all, {&xi}, {&yi});
  EXPECT_EQ(yi.as<int64_t>()[0], 9000000000000000000LL);
  Tensor xb = make(APX_DT_BOOL, {2, 2}, {0, 1, 0, 0}), yb(APX_DT_BOOL, {2, 1});
  run_ok(APX_OP_ReduceMax, &rows, {&xb}, {&yb});
  EXPECT_EQ(yb.get(0), 1);
  EXPECT_EQ(yb.get(1), 0);
  for (ApxDType dt : {APX_DT_F16, APX_DT_BF16}) {  // a max is one of the inputs: exact
    Tensor h = rand(dt, {7, 33}, -3, 3, 4), hy(dt, {7, 1});
    run_ok(APX_OP_ReduceMax, &rows, {&h}, {&hy});
    for (int64_t r = 0; r < 7; r++) {
      double m = -INFINITY;
      for (int64_t k = 0; k < 33; k++) m = std::max(m, h.get(r * 33 + k));
      EXPECT_EQ(hy.get(r), m);
    }
  }
}

TEST(ReduceMaxGrad, TiesShareTheGradientEvenlyAsPyTorchAmax) {
  // torch.amax(x, 1).backward(dy): [[0, .5, .5], [1, 1, 1]] for dy = [1, 3]
  Tensor x = make(APX_DT_F32, {2, 3}, {1, 3, 3, 2, 2, 2}), y = make(APX_DT_F32, {2}, {3, 2});
  Tensor dy = make(APX_DT_F32, {2}, {1, 3}), dx(APX_DT_F32, {2, 3});
  ApxAttrReduce a = Axes({1}, 0);
  run_ok(APX_OP_ReduceMaxGrad, &a, {&dy, &x, &y}, {&dx});
  std::vector<double> want = {0, 0.5, 0.5, 1, 1, 1};
  for (int i = 0; i < 6; i++) EXPECT_EQ(dx.get(i), want[i]) << i;
  // a NaN max: no element equals it, (dy / 0) * mask is NaN for the whole group (PyTorch)
  Tensor xn = make(APX_DT_F32, {1, 2}, {NAN, 1}), yn = make(APX_DT_F32, {1}, {NAN}), dn = make(APX_DT_F32, {1}, {1});
  Tensor dxn(APX_DT_F32, {1, 2});
  run_ok(APX_OP_ReduceMaxGrad, &a, {&dn, &xn, &yn}, {&dxn});
  EXPECT_TRUE(std::isnan(dxn.get(0)) && std::isnan(dxn.get(1)));
}

// ---- RandomUniformLike -------------------------------------------------------------------

TEST(RandomUniformLike, PhiloxDrawsInRangeDeterministicPerSeedStreamStep) {
  ApxAttrRandomUniform a;
  memset(&a, 0, sizeof a);
  a.dtype = APX_DT_F32, a.low = -2.0f, a.high = 3.0f, a.rng_stream = 5;
  Tensor in(APX_DT_I64, {4001}), u(APX_DT_F32, {4001}), u2(APX_DT_F32, {4001}), u3(APX_DT_F32, {4001});
  RunOpts o;
  o.seed = 99, o.step = 2;
  run_ok(APX_OP_RandomUniformLike, &a, {&in}, {&u}, o);
  double mean = 0;
  for (int64_t i = 0; i < u.numel(); i++) {
    ASSERT_GE(u.get(i), -2.0);
    ASSERT_LT(u.get(i), 3.0);
    EXPECT_EQ(u.as<float>()[i], apx_random_uniform_f32(99, 5, 2, (uint64_t)i, -2.0f, 3.0f));
    mean += u.get(i) / (double)u.numel();
  }
  EXPECT_NEAR(mean, 0.5, 5 * 5.0 / std::sqrt(12.0 * 4001));  // 5 standard deviations
  RunOpts o4 = o;
  o4.threads = 4;
  run_ok(APX_OP_RandomUniformLike, &a, {&in}, {&u2}, o4);
  expect_same_bits(u, u2);
  o.step = 3;  // the next step draws anew
  run_ok(APX_OP_RandomUniformLike, &a, {&in}, {&u3}, o);
  int same = 0;
  for (int64_t i = 0; i < u.numel(); i++) same += u.get(i) == u3.get(i);
  EXPECT_LT(same, 10);
  a.has_seed = 1, a.seed = 7.0f;  // the node's seed replaces the run's
  run_ok(APX_OP_RandomUniformLike, &a, {&in}, {&u3}, o);
  EXPECT_EQ(u3.as<float>()[17], apx_random_uniform_f32(7, 5, 3, 17, -2.0f, 3.0f));
  for (ApxDType dt : {APX_DT_F16, APX_DT_BF16}) {  // fp32 draw, rounded once
    a.dtype = dt;
    Tensor hin(APX_DT_F32, {64}), h(dt, {64});
    run_ok(APX_OP_RandomUniformLike, &a, {&hin}, {&h}, o);
    for (int64_t i = 0; i < 64; i++) {
      float v = apx_random_uniform_f32(7, 5, 3, (uint64_t)i, -2.0f, 3.0f);
      EXPECT_EQ(h.as<uint16_t>()[i], dt == APX_DT_F16 ? apx_f32_to_f16(v) : apx_f32_to_bf16(v));
    }
  }
  Tensor bad(APX_DT_I32, {3});
  EXPECT_EQ(run(APX_OP_RandomUniformLike, &a, {&in}, {&bad}), APX_STATUS_UNSUPPORTED);
}

}  // namespace
