// reduce_test.cc - ReduceSum / ReduceMean over every axis subset (float and integer types,
// keepdims, noop_with_empty_axes) and ReduceSumTo (broadcast gradients) against double
// references; fixed summation order independent of the thread count.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

// y[kept index] = sum over reduced axes (mean when asked)
std::vector<double> ref_reduce(const Tensor &x, uint32_t mask, bool mean, std::vector<double> *sc) {
  std::vector<int64_t> kd;
  int64_t cnt = 1;
  for (size_t d = 0; d < x.dims.size(); d++) {
    if (mask >> d & 1u)
      cnt *= x.dims[d];
    else
      kd.push_back(x.dims[d]);
  }
  std::vector<double> y((size_t)numel_of(kd), 0.0), xv = x.values();
  sc->assign(y.size(), 0.0);
  std::vector<int64_t> ks = strides_of(kd);
  for (int64_t i = 0; i < x.numel(); i++) {
    int64_t rem = i, o = 0;
    size_t k = kd.size();
    for (size_t d = x.dims.size(); d-- > 0;) {
      int64_t id = rem % x.dims[d];
      rem /= x.dims[d];
      if (!(mask >> d & 1u)) o += id * ks[--k];
    }
    y[o] += xv[i];
    (*sc)[o] += std::fabs(xv[i]);
  }
  if (mean)
    for (size_t o = 0; o < y.size(); o++) {
      y[o] /= cnt;
      (*sc)[o] /= cnt;
    }
  return y;
}

}  // namespace

TEST(Reduce, EveryAxisSubsetEveryFloatType) {
  const std::vector<int64_t> dims = {3, 4, 5, 6};
  for (ApxDType dt : kFloatTypes)
    for (uint32_t mask = 0; mask < 16; mask++)
      for (int mean = 0; mean < 2; mean++) {
        ApxAttrReduce a = {};
        std::vector<int64_t> od;
        int64_t cnt = 1;
        for (int d = 0; d < 4; d++) {
          if (mask >> d & 1u) {
            a.axes[a.n_axes++] = d;
            cnt *= dims[d];
            od.push_back(1);
          } else {
            od.push_back(dims[d]);
          }
        }
        a.keepdims = 1;
        a.noop_with_empty_axes = 1;  // mask 0: identity
        Tensor x = rand(dt, dims, -2, 2, 81 + mask), y(dt, od);
        run_ok(mean ? APX_OP_ReduceMean : APX_OP_ReduceSum, &a, {&x}, {&y});
        std::vector<double> sc, ref = ref_reduce(x, mask, mean, &sc);
        expect_close(y, ref, (double)cnt + 1, &sc, mean ? "ReduceMean" : "ReduceSum");
      }
}

TEST(Reduce, EmptyAxesMeansAllUnlessNoop) {
  Tensor x = make(APX_DT_F32, {2, 3}, {1, 2, 3, 4, 5, 6}), y(APX_DT_F32, {}), z(APX_DT_F32, {2, 3});
  ApxAttrReduce a = {};
  run_ok(APX_OP_ReduceSum, &a, {&x}, {&y});
  EXPECT_EQ(y.get(0), 21.0);
  a.noop_with_empty_axes = 1;
  run_ok(APX_OP_ReduceMean, &a, {&x}, {&z});
  EXPECT_EQ(z.values(), x.values());
  Tensor bad(APX_DT_F32, {4});
  a.noop_with_empty_axes = 0;
  std::string err;
  EXPECT_EQ(run(APX_OP_ReduceSum, &a, {&x}, {&bad}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "ReduceSum: output has 4 elements, expected 1");
}

TEST(Reduce, Integers) {
  Tensor x = make(APX_DT_I64, {2, 3}, {1, 2, 3, 4, 5, 7}), y(APX_DT_I64, {2});
  ApxAttrReduce a = {};
  a.n_axes = 1;
  a.axes[0] = 1;
  run_ok(APX_OP_ReduceSum, &a, {&x}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{6, 16}));
  run_ok(APX_OP_ReduceMean, &a, {&x}, {&y});
  EXPECT_EQ(y.values(), (std::vector<double>{2, 5}));  // 16 / 3 truncates
  Tensor xi = cast(x, APX_DT_I32), yi(APX_DT_I32, {2});
  run_ok(APX_OP_ReduceSum, &a, {&xi}, {&yi});
  EXPECT_EQ(yi.values(), (std::vector<double>{6, 16}));
}

TEST(ReduceSumTo, BroadcastShapesEveryFloatType) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{2, 3, 4}, {4}},    {{2, 3, 4}, {3, 1}},  {{2, 3, 4}, {1, 3, 1}}, {{2, 3, 4}, {}},
      {{2, 3, 4}, {2, 3, 4}}, {{5, 1, 4}, {1, 4}}, {{64, 300}, {300}}, {{6, 2, 5, 3}, {2, 1, 3}},
  };
  for (const auto &c : cases)
    for (ApxDType dt : kFloatTypes) {
      Tensor dy = rand(dt, c.first, -1, 1, 91), dx(dt, c.second);
      run_ok(APX_OP_ReduceSumTo, nullptr, {&dy}, {&dx});
      std::vector<double> ref((size_t)dx.numel(), 0.0), sc(ref.size(), 0.0), v = dy.values();
      for (int64_t i = 0; i < dy.numel(); i++) {
        int64_t o = broadcast_index(c.first, c.second, i);
        ref[o] += v[i];
        sc[o] += std::fabs(v[i]);
      }
      expect_close(dx, ref, (double)(dy.numel() / dx.numel()) + 1, &sc, "ReduceSumTo");
    }
  Tensor dy(APX_DT_F32, {2, 3}), dx(APX_DT_F32, {2});
  std::string err;
  EXPECT_EQ(run(APX_OP_ReduceSumTo, nullptr, {&dy}, {&dx}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "ReduceSumTo: output shape [2] does not broadcast to [2,3]");
}

// Both reduction strategies (inner reduce, outer reduce) sum each output in a fixed order.
TEST(Reduce, ThreadCountDoesNotChangeBits) {
  Tensor x = rand(APX_DT_F32, {300, 77, 40}, -1, 1, 7);
  RunOpts two;
  two.threads = 2;
  for (uint32_t mask : {1u, 2u, 4u, 5u, 3u, 6u}) {
    ApxAttrReduce a = {};
    std::vector<int64_t> od;
    for (int d = 0; d < 3; d++) {
      if (mask >> d & 1u) a.axes[a.n_axes++] = d;
      else od.push_back(x.dims[d]);
    }
    Tensor y1(APX_DT_F32, od), y2(APX_DT_F32, od);
    run_ok(APX_OP_ReduceSum, &a, {&x}, {&y1});
    run_ok(APX_OP_ReduceSum, &a, {&x}, {&y2}, two);
    expect_same_bits(y1, y2, "ReduceSum");
  }
}
