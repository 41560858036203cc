// fuse_softmax_test.cc - pass_fuse_softmax as a spec: scale + mask + Softmax (attention
// scores) becomes FusedSoftmax + FusedSoftmaxGrad with the same forward and gradients, the
// mask kept fp32 by the overflow rule does not block it, and the reasons it does not fuse.
#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

struct SmSpec {
  bool mask = true, div = false, mask_param = false;
  int64_t axis = -1;
};

// q [2, 4, 8], k^T [2, 8, 4] (from parameters) -> scores [2, 4, 4] * 0.35 (or / 2.8)
// + causal mask (-1e9 above the diagonal) -> Softmax -> @ v -> loss
BuildFn Attention(SmSpec s) {
  return [s](GraphBuilder &b) {
    int x = AddInput(b, "x", {2, 4, 8});
    int q = b.Op("MatMul", {x, F32Param(b, "wq", {8, 8})});
    int kt = b.Op("Transpose", {b.Op("MatMul", {x, F32Param(b, "wk", {8, 8})})}, {Attr::Ints("perm", {0, 2, 1})});
    int sc = b.Op("MatMul", {q, kt});
    sc = s.div ? b.Op("Div", {sc, Scalar(b, "c", 2.8)}) : b.Op("Mul", {sc, Scalar(b, "c", 0.35)});
    if (s.mask) {
      std::vector<double> m(16);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) m[i * 4 + j] = j > i ? -1e9 : 0.0;
      int mv = s.mask_param ? F32Param(b, "mask", {4, 4}, -0.5, 0.5) : F32Const(b, "mask", {4, 4}, m);
      sc = b.Op("Add", {sc, mv});
    }
    int p = b.Op("Softmax", {sc}, {Attr::Int("axis", s.axis)});
    b.WeightedSumLoss(b.Op("MatMul", {p, b.Op("MatMul", {x, F32Param(b, "wv", {8, 8})})}));
  };
}

class SoftmaxNumerics : public ::testing::TestWithParam<Options> {};

TEST_P(SoftmaxNumerics, FusesScaleMaskSoftmax) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  for (SmSpec s : {SmSpec{}, SmSpec{false, true}, SmSpec{true, true}}) {
    SCOPED_TRACE(std::string("mask ") + (s.mask ? "1" : "0") + " div " + (s.div ? "1" : "0"));
    Compiled f = Compile(Attention(s), o, {pass_fuse_softmax}), p = Compile(Attention(s), off, {pass_fuse_softmax});
    ASSERT_TRUE(f.ok && p.ok);
    ASSERT_EQ(f.Count(APX_OP_FusedSoftmax), 1);
    EXPECT_EQ(f.Count(APX_OP_FusedSoftmaxGrad), 1);
    EXPECT_EQ(f.Count(APX_OP_Softmax) + f.Count(APX_OP_SoftmaxGrad), 0);
    const ApxAttrFusedSoftmax *a = APX_NODE_ATTRS(&f.g(), f.Node(APX_OP_FusedSoftmax), ApxAttrFusedSoftmax);
    double want = s.div ? 1.0 / 2.8 : 0.35;  // the constant as the graph holds it (half at O2)
    EXPECT_NEAR(a->scale, want, 2 * want * Eps(ComputeType(o)));
    EXPECT_EQ(a->has_mask, s.mask ? 1 : 0);
    ExpectSameResults(f, p, ComputeType(o), 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, SoftmaxNumerics,
                         ::testing::Values(Options{APX_O0, APX_DT_F16, false, {}},
                                           Options{APX_O1, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_BF16, false, {}}),
                         [](const ::testing::TestParamInfo<Options> &i) {
                           return "O" + std::to_string((int)i.param.level) + "_" + apx_dtype_short(i.param.half);
                         });

TEST(FuseSoftmax, KeepsPrecisionOfFusedNodes) {
  // O2: the -1e9 mask keeps its Add fp32 (overflow rule); the fused node takes that decision
  // and reads the half scores and the fp32 mask directly
  Compiled f = Compile(Attention(SmSpec{}), Options{APX_O2, APX_DT_F16, false, {}}, {pass_fuse_softmax});
  ASSERT_TRUE(f.ok);
  const ApxNode &n = f.g().nodes[f.Node(APX_OP_FusedSoftmax)];
  EXPECT_EQ(n.compute, APX_DT_F32);
  EXPECT_EQ(n.reason, APX_REASON_OVERFLOW_CONST);
  EXPECT_EQ(f.g().vals[n.in[0]].dtype, APX_DT_F16);
  EXPECT_EQ(f.g().vals[n.in[1]].dtype, APX_DT_F32);
  EXPECT_EQ(f.g().vals[n.out[0]].dtype, APX_DT_F16);
}

TEST(FuseSoftmax, DoesNotFuseSoftmaxOverAnotherAxis) {
  SmSpec s;
  s.axis = 1;
  Compiled f = Compile(Attention(s), Options{}, {pass_fuse_softmax});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedSoftmax), 0);
  auto r = f.Records(APX_FUSE_NOT_LEGALITY);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("not the last axis"), std::string::npos);
}

TEST(FuseSoftmax, DoesNotFuseMaskThatNeedsAGradient) {
  SmSpec s;
  s.mask_param = true;
  Compiled f = Compile(Attention(s), Options{}, {pass_fuse_softmax});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedSoftmax), 0);
  auto r = f.Records(APX_FUSE_NOT_LEGALITY);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("no gradient for input"), std::string::npos) << r[0]->detail;
}

TEST(FuseSoftmax, DoesNotFuseWhenIntermediateHasOtherConsumers) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 6});
        int s = b.Op("Mul", {b.Op("MatMul", {x, F32Param(b, "w", {6, 6})}), Scalar(b, "c", 0.5)});
        b.WeightedSumLoss(b.Op("Add", {b.Op("Softmax", {s}, {Attr::Int("axis", -1)}), s}));
      },
      Options{}, {pass_fuse_softmax});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedSoftmax), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_CONSUMERS).size(), 1u);
}

TEST(FuseSoftmax, PlainSoftmaxIsNotACandidate) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 6});
        b.WeightedSumLoss(b.Op("Softmax", {b.Op("MatMul", {x, F32Param(b, "w", {6, 6})})}, {Attr::Int("axis", -1)}));
      },
      Options{}, {pass_fuse_softmax});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Records(), 0);
  EXPECT_EQ(f.Count(APX_OP_Softmax), 1);
}

}  // namespace
