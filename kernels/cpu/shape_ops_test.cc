// shape_ops_test.cc - data movement for every dtype (bit-exact): Reshape-family copies,
// Transpose, Concat, Split, Slice (negative steps), SliceGrad, Gather (negative and int32
// indices), Expand, Where; GatherGrad (scatter-add); the folding ops Shape,
// ConstantOfShape and Range (int64 shape arithmetic).
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

const ApxDType kAllTypes[] = {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16, APX_DT_I64,
                              APX_DT_I32, APX_DT_I16, APX_DT_I8,  APX_DT_U8,   APX_DT_BOOL};

Tensor data(ApxDType dt, std::vector<int64_t> dims, uint64_t seed) {
  return rand(dt, std::move(dims), dt == APX_DT_BOOL ? 0 : -50, dt == APX_DT_BOOL ? 2 : 50, seed);
}

std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t> &dims) {
  std::vector<int64_t> id(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    id[d] = i % dims[d];
    i /= dims[d];
  }
  return id;
}

int64_t ravel(const std::vector<int64_t> &id, const std::vector<int64_t> &dims) {
  int64_t o = 0;
  for (size_t d = 0; d < dims.size(); d++) o = o * dims[d] + id[d];
  return o;
}

}  // namespace

TEST(ShapeOps, CopiesEveryType) {
  for (ApxDType dt : kAllTypes) {
    Tensor x = data(dt, {2, 3, 4}, 1), y(dt, {6, 4});
    for (ApxOp op : {APX_OP_Reshape, APX_OP_Flatten, APX_OP_Squeeze, APX_OP_Unsqueeze,
                     APX_OP_Identity}) {
      ApxAttrAxes ax = {};
      ApxAttrReshape rs = {0};
      ApxAttrAxis fl = {2};
      const void *a = op == APX_OP_Reshape ? (const void *)&rs
                      : op == APX_OP_Flatten ? (const void *)&fl
                      : op == APX_OP_Identity ? nullptr : (const void *)&ax;
      y.bytes.assign(y.bytes.size(), 0);
      run_ok(op, a, {&x}, {&y});
      EXPECT_EQ(0, memcmp(x.bytes.data(), y.bytes.data(), 24 * apx_dtype_size(dt)));
    }
  }
}

TEST(Transpose, PermutationsEveryType) {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  const std::vector<std::vector<int64_t>> perms = {{0, 1, 2, 3}, {3, 2, 1, 0}, {0, 2, 1, 3},
                                                   {1, 0, 3, 2}, {2, 3, 0, 1}, {0, 1, 3, 2}};
  for (ApxDType dt : kAllTypes)
    for (const auto &p : perms) {
      ApxAttrTranspose a = {};
      a.rank = 4;
      std::vector<int64_t> od(4);
      for (int i = 0; i < 4; i++) {
        a.perm[i] = p[i];
        od[i] = dims[p[i]];
      }
      Tensor x = data(dt, dims, 2), y(dt, od);
      run_ok(APX_OP_Transpose, &a, {&x}, {&y});
      for (int64_t i = 0; i < y.numel(); i++) {
        std::vector<int64_t> oi = unravel(i, od), ii(4);
        for (int k = 0; k < 4; k++) ii[p[k]] = oi[k];
        ASSERT_EQ(y.get(i), x.get(ravel(ii, dims))) << apx_dtype_name(dt) << " " << i;
      }
    }
}

TEST(ConcatSplit, EveryAxisEveryType) {
  for (ApxDType dt : kAllTypes)
    for (int64_t axis = 0; axis < 3; axis++) {
      std::vector<int64_t> d0 = {2, 3, 4}, d1 = d0, d2 = d0, dout = d0;
      d1[axis] = 1;
      d2[axis] = 0;  // empty piece
      dout[axis] = d0[axis] + 1;
      Tensor a = data(dt, d0, 3), b = data(dt, d1, 4), e(dt, d2), y(dt, dout);
      ApxAttrAxis ax = {axis};
      run_ok(APX_OP_Concat, &ax, {&a, &e, &b}, {&y});
      for (int64_t i = 0; i < y.numel(); i++) {
        std::vector<int64_t> id = unravel(i, dout);
        bool first = id[axis] < d0[axis];
        if (!first) id[axis] -= d0[axis];
        double want = first ? a.get(ravel(id, d0)) : b.get(ravel(id, d1));
        ASSERT_EQ(y.get(i), want) << i;
      }
      Tensor s0(dt, d0), s1(dt, d1), s2(dt, d2);
      ApxAttrSplit sp = {axis};
      run_ok(APX_OP_Split, &sp, {&y}, {&s0, &s2, &s1});
      expect_same_bits(s0, a, "Split 0");
      expect_same_bits(s1, b, "Split 1");
      // an absent output (data NULL, dims still set) is skipped
      Tensor t0(dt, d0), t1(dt, d1);
      ApxTensor in = y.view(), outs[3] = {t0.view(), s2.view(), t1.view()};
      outs[2].data = nullptr;
      ApxCpuCtx ctx;
      apx_cpu_ctx_init(&ctx);
      ASSERT_EQ(apx_cpu_run(&ctx, APX_OP_Split, &sp, &in, 1, outs, 3), APX_STATUS_OK) << ctx.err;
      expect_same_bits(t0, a, "Split with a skipped output");
    }
  Tensor a(APX_DT_F32, {2, 3}), b(APX_DT_F32, {3, 3}), y(APX_DT_F32, {4, 3});
  ApxAttrAxis ax = {0};
  std::string err;
  EXPECT_EQ(run(APX_OP_Concat, &ax, {&a, &b}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Concat: sizes along axis add to 5, expected 4");
}

TEST(Slice, StepsAndSliceGradEveryType) {
  const std::vector<int64_t> dims = {5, 6, 7};
  struct C {
    std::vector<int64_t> starts, steps, out;
  };
  const std::vector<C> cases = {{{1, 0, 2}, {1, 1, 2}, {3, 6, 3}},
                                {{4, 5, 6}, {-1, -2, -3}, {5, 3, 3}},
                                {{0, 2, 0}, {2, 3, 1}, {3, 2, 0}},
                                {{2, 1, 3}, {1, 1, 1}, {1, 1, 1}}};
  for (ApxDType dt : kAllTypes)
    for (const C &c : cases) {
      ApxAttrSlice a = {};
      a.rank = 3;
      for (int d = 0; d < 3; d++) {
        a.starts[d] = c.starts[d];
        a.steps[d] = c.steps[d];
      }
      Tensor x = data(dt, dims, 5), y(dt, c.out);
      run_ok(APX_OP_Slice, &a, {&x}, {&y});
      std::vector<double> back(x.numel(), 0.0);
      for (int64_t i = 0; i < y.numel(); i++) {
        std::vector<int64_t> id = unravel(i, c.out);
        for (int d = 0; d < 3; d++) id[d] = c.starts[d] + id[d] * c.steps[d];
        ASSERT_EQ(y.get(i), x.get(ravel(id, dims))) << i;
        back[ravel(id, dims)] = y.get(i);
      }
      Tensor dx(dt, dims);
      dx.bytes.assign(dx.bytes.size(), 0xff);  // SliceGrad must clear it
      run_ok(APX_OP_SliceGrad, &a, {&y}, {&dx});
      EXPECT_EQ(dx.values(), back);
    }
  ApxAttrSlice bad = {};
  bad.rank = 1;
  bad.starts[0] = 3;
  bad.steps[0] = 1;
  Tensor x(APX_DT_F32, {4}), y(APX_DT_F32, {2});
  std::string err;
  EXPECT_EQ(run(APX_OP_Slice, &bad, {&x}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Slice: dim 0: start 3 step 1 count 2 outside [0, 4)");
}

TEST(Gather, AxesIndexTypesEveryType) {
  for (ApxDType dt : kAllTypes)
    for (int64_t axis = 0; axis < 3; axis++)
      for (ApxDType it : {APX_DT_I64, APX_DT_I32}) {
        std::vector<int64_t> dims = {3, 4, 5};
        int64_t A = dims[axis];
        Tensor x = data(dt, dims, 6);
        Tensor idx = make(it, {2, 2}, {0, (double)(A - 1), -1, 1});
        std::vector<int64_t> od;
        for (int d = 0; d < axis; d++) od.push_back(dims[d]);
        od.push_back(2);
        od.push_back(2);
        for (int d = axis + 1; d < 3; d++) od.push_back(dims[d]);
        Tensor y(dt, od);
        ApxAttrAxis a = {axis};
        run_ok(APX_OP_Gather, &a, {&x, &idx}, {&y});
        for (int64_t i = 0; i < y.numel(); i++) {
          std::vector<int64_t> oi = unravel(i, od), xi;
          for (int d = 0; d < axis; d++) xi.push_back(oi[d]);
          int64_t v = (int64_t)idx.get(oi[axis] * 2 + oi[axis + 1]);
          xi.push_back(v < 0 ? v + A : v);
          for (size_t d = axis + 2; d < oi.size(); d++) xi.push_back(oi[d]);
          ASSERT_EQ(y.get(i), x.get(ravel(xi, dims))) << i;
        }
      }
  Tensor x(APX_DT_F32, {3, 2}), idx = make(APX_DT_I64, {1}, {3}), y(APX_DT_F32, {1, 2});
  ApxAttrAxis a = {0};
  std::string err;
  EXPECT_EQ(run(APX_OP_Gather, &a, {&x, &idx}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Gather: index 3 at position 0 outside [-3, 3)");
}

TEST(GatherGrad, ScatterAddsRepeatedIndicesEveryFloatType) {
  for (ApxDType dt : kFloatTypes)
    for (int64_t axis = 0; axis < 2; axis++) {
      std::vector<int64_t> dd = {4, 3};
      Tensor idx = make(APX_DT_I32, {5}, {1, 3, 1, -1, 0});
      std::vector<int64_t> od = axis == 0 ? std::vector<int64_t>{5, 3} : std::vector<int64_t>{4, 5};
      if (axis == 1) idx = make(APX_DT_I32, {5}, {1, 2, 1, -1, 0});
      Tensor dy = rand(dt, od, -1, 1, 7), dx(dt, dd);
      ApxAttrAxis a = {axis};
      run_ok(APX_OP_GatherGrad, &a, {&dy, &idx}, {&dx});
      std::vector<double> ref(12, 0.0), sc(12, 0.0);
      for (int64_t i = 0; i < dy.numel(); i++) {
        std::vector<int64_t> oi = unravel(i, od);
        int64_t v = (int64_t)idx.get(oi[axis]);
        if (v < 0) v += dd[axis];
        oi[axis] = v;
        ref[ravel(oi, dd)] += dy.get(i);
        sc[ravel(oi, dd)] += std::fabs(dy.get(i));
      }
      expect_close(dx, ref, 3, &sc, "GatherGrad");
    }
}

TEST(ExpandWhere, BroadcastEveryType) {
  for (ApxDType dt : kAllTypes) {
    Tensor x = data(dt, {3, 1}, 8), y(dt, {2, 3, 4});
    run_ok(APX_OP_Expand, nullptr, {&x}, {&y});
    for (int64_t i = 0; i < y.numel(); i++) ASSERT_EQ(y.get(i), x.get((i / 4) % 3));
    Tensor c = rand(APX_DT_BOOL, {2, 1, 4}, 0, 2, 9), a = data(dt, {3, 4}, 10),
           b = data(dt, {1}, 11), w(dt, {2, 3, 4});
    run_ok(APX_OP_Where, nullptr, {&c, &a, &b}, {&w});
    for (int64_t i = 0; i < w.numel(); i++) {
      bool ci = c.get(broadcast_index(w.dims, c.dims, i)) != 0;
      ASSERT_EQ(w.get(i), ci ? a.get(i % 12) : b.get(0)) << i;
    }
  }
  Tensor x(APX_DT_F32, {3}), y(APX_DT_F32, {2, 4});
  std::string err;
  EXPECT_EQ(run(APX_OP_Expand, nullptr, {&x}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Expand: input [3] does not broadcast to [2,4]");
}

TEST(Fold, ShapeConstantOfShapeRange) {
  Tensor x(APX_DT_F16, {2, 5, 7}), s(APX_DT_I64, {2});
  ApxAttrShape sa = {-2, INT64_MAX};
  run_ok(APX_OP_Shape, &sa, {&x}, {&s});
  EXPECT_EQ(s.values(), (std::vector<double>{5, 7}));
  Tensor shape = make(APX_DT_I64, {2}, {2, 3}), val = make(APX_DT_F32, {1}, {1.5});
  Tensor c(APX_DT_F16, {2, 3}), z(APX_DT_I64, {2, 3});
  run_ok(APX_OP_ConstantOfShape, nullptr, {&shape, &val}, {&c});
  EXPECT_EQ(c.values(), std::vector<double>(6, 1.5));
  z.bytes.assign(z.bytes.size(), 0xff);
  run_ok(APX_OP_ConstantOfShape, nullptr, {&shape}, {&z});
  EXPECT_EQ(z.values(), std::vector<double>(6, 0.0));
  // Range: int64 and float, positive and negative deltas
  Tensor s0 = make(APX_DT_I64, {}, {10}), l0 = make(APX_DT_I64, {}, {1}),
         d0 = make(APX_DT_I64, {}, {-3}), r0(APX_DT_I64, {3});
  run_ok(APX_OP_Range, nullptr, {&s0, &l0, &d0}, {&r0});
  EXPECT_EQ(r0.values(), (std::vector<double>{10, 7, 4}));
  Tensor s1 = make(APX_DT_F32, {}, {0.5}), l1 = make(APX_DT_F32, {}, {2}),
         d1 = make(APX_DT_F32, {}, {0.5}), r1(APX_DT_F32, {3});
  run_ok(APX_OP_Range, nullptr, {&s1, &l1, &d1}, {&r1});
  EXPECT_EQ(r1.values(), (std::vector<double>{0.5, 1, 1.5}));
  Tensor s2 = make(APX_DT_I32, {}, {0}), l2 = make(APX_DT_I32, {}, {5}),
         d2 = make(APX_DT_I32, {}, {2}), r2(APX_DT_I32, {3}), bad(APX_DT_I32, {4});
  run_ok(APX_OP_Range, nullptr, {&s2, &l2, &d2}, {&r2});
  EXPECT_EQ(r2.values(), (std::vector<double>{0, 2, 4}));
  std::string err;
  EXPECT_EQ(run(APX_OP_Range, nullptr, {&s2, &l2, &d2}, {&bad}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Range: output has 4 elements, range gives 3");
}

TEST(ShapeOps, ThreadCountDoesNotChangeBits) {
  Tensor x = rand(APX_DT_F32, {64, 70, 80}, -1, 1, 1), y1(APX_DT_F32, {80, 64, 70}),
         y2(APX_DT_F32, {80, 64, 70});
  ApxAttrTranspose a = {};
  a.rank = 3;
  a.perm[0] = 2;
  a.perm[1] = 0;
  a.perm[2] = 1;
  RunOpts two;
  two.threads = 2;
  run_ok(APX_OP_Transpose, &a, {&x}, {&y1});
  run_ok(APX_OP_Transpose, &a, {&x}, {&y2}, two);
  expect_same_bits(y1, y2, "Transpose");
  Tensor dy = rand(APX_DT_F32, {4000, 64}, -1, 1, 2), idx = rand(APX_DT_I64, {4000}, 0, 100, 3);
  Tensor g1(APX_DT_F32, {100, 64}), g2(APX_DT_F32, {100, 64});
  ApxAttrAxis ax = {0};
  run_ok(APX_OP_GatherGrad, &ax, {&dy, &idx}, {&g1});
  run_ok(APX_OP_GatherGrad, &ax, {&dy, &idx}, {&g2}, two);
  expect_same_bits(g1, g2, "GatherGrad");
}
