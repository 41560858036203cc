// fuse_layernorm_test.cc - pass_fuse_layernorm as a spec: the hand-written LayerNorm of the
// exporters becomes LayerNormalization + LayerNormGrad with the same forward and gradients
// (fp32 at O0, fp16/bf16 at O2), the overflow rule's fp32 decision carries over, and
// intermediates read elsewhere keep the pattern unfused.
#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

struct LnSpec {
  bool gamma = true, beta = true, residual = false, extra_reader = false;
  double eps = 1e-12;
};

// x [2, 3, 16] -> hand-written LayerNorm over the last axis (as
// examples/transformer/make_example.py writes it) -> MatMul -> loss; optionally x also feeds
// a residual Add, or the centered value d also feeds another node.
BuildFn HandWrittenLn(LnSpec s) {
  return [s](GraphBuilder &b) {
    int x = AddInput(b, "x", {2, 3, 16});
    x = b.Op("Mul", {x, F32Param(b, "spread", {16}, 2.0, 4.0)});  // a parameter upstream: x needs a gradient
    int mean = b.Op("ReduceMean", {x}, {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)});
    int d = b.Op("Sub", {x, mean});
    int var = b.Op("ReduceMean", {b.Op("Pow", {d, Scalar(b, "two", 2.0)})}, {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)});
    int y = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, Scalar(b, "eps", s.eps)})})});
    if (s.gamma) y = b.Op("Mul", {y, F32Param(b, "gamma", {16}, 0.5, 1.5)});
    if (s.beta) y = b.Op("Add", {y, F32Param(b, "beta", {16})});
    y = b.Op("MatMul", {y, F32Param(b, "w", {16, 8})});
    if (s.residual) y = b.Op("Add", {y, b.Op("MatMul", {x, F32Param(b, "w2", {16, 8})})});
    if (s.extra_reader) y = b.Op("Add", {y, b.Op("MatMul", {d, F32Param(b, "w3", {16, 8})})});
    b.WeightedSumLoss(y);
  };
}

class LnNumerics : public ::testing::TestWithParam<Options> {};

TEST_P(LnNumerics, FusesHandWrittenLayerNorm) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  for (LnSpec s : {LnSpec{}, LnSpec{true, true, true}, LnSpec{false, false}, LnSpec{true, false, false, false, 1e-5}}) {
    SCOPED_TRACE(std::string("gamma ") + (s.gamma ? "1" : "0") + " beta " + (s.beta ? "1" : "0") +
                 " residual " + (s.residual ? "1" : "0"));
    Compiled f = Compile(HandWrittenLn(s), o), p = Compile(HandWrittenLn(s), off);
    ASSERT_TRUE(f.ok && p.ok);
    EXPECT_EQ(f.Count(APX_OP_LayerNormalization), 1);
    EXPECT_EQ(f.Count(APX_OP_LayerNormGrad), 1);
    EXPECT_EQ(f.Count(APX_OP_ReduceMean) + f.Count(APX_OP_Pow) + f.Count(APX_OP_Sqrt) + f.Count(APX_OP_PowGrad) +
                  f.Count(APX_OP_SqrtGrad),
              0);
    const ApxAttrLayerNorm *a = APX_NODE_ATTRS(&f.g(), f.Node(APX_OP_LayerNormalization), ApxAttrLayerNorm);
    EXPECT_EQ(a->axis, 2);
    EXPECT_NEAR(a->epsilon, s.eps, s.eps * Eps(ComputeType(o)));  // the constant as the graph holds it
    ExpectSameResults(f, p, ComputeType(o), 64);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, LnNumerics,
                         ::testing::Values(Options{APX_O0, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_BF16, false, {}}),
                         [](const ::testing::TestParamInfo<Options> &i) {
                           return "O" + std::to_string((int)i.param.level) + "_" + apx_dtype_short(i.param.half);
                         });

TEST(FuseLayerNorm, KeepsOverflowRuleFp32DecisionAtO2) {
  Compiled f = Compile(HandWrittenLn(LnSpec{}), Options{APX_O2, APX_DT_F16, false, {}});
  ASSERT_TRUE(f.ok);
  int ln = f.Node(APX_OP_LayerNormalization);
  ASSERT_GE(ln, 0);
  const ApxNode &n = f.g().nodes[ln];
  EXPECT_EQ(n.compute, APX_DT_F32);
  EXPECT_TRUE(n.reason == APX_REASON_OVERFLOW_CONST || n.reason == APX_REASON_OVERFLOW_PATTERN) << n.reason;
  // storage stays half at the boundary: no Cast left around the fused node
  EXPECT_EQ(f.g().vals[n.in[0]].dtype, APX_DT_F16);
  EXPECT_EQ(f.g().vals[n.out[0]].dtype, APX_DT_F16);
  EXPECT_EQ(f.g().vals[n.out[1]].dtype, APX_DT_F32);  // Mean / InvStdDev stashed in fp32
  const ApxNode &gr = f.g().nodes[f.Node(APX_OP_LayerNormGrad)];
  EXPECT_EQ(gr.compute, APX_DT_F32);
  EXPECT_EQ(gr.reason, APX_REASON_INHERITED);
  auto from_cast = [&](int v) { return f.g().nodes[f.g().vals[v].producer].op == APX_OP_Cast; };
  EXPECT_FALSE(from_cast(n.in[0]));
  EXPECT_FALSE(from_cast(gr.in[0]));
  for (int k = 0; k < f.g().n_order; k++) {
    const ApxNode &c = f.g().nodes[f.g().order[k]];
    EXPECT_FALSE(c.op == APX_OP_Cast && (c.in[0] == n.out[0] || c.in[0] == gr.out[0])) << c.name;
  }
}

TEST(FuseLayerNorm, KeepsHalfDecisionWhenThePatternRanInHalf) {
  // --clamp-constants: eps is clamped, nothing keeps the pattern in fp32
  Compiled f = Compile(
      [](GraphBuilder &b) {
        b.o.clamp_constants = 1;
        HandWrittenLn(LnSpec{true, true, false, false, 1e-3})(b);
      },
      Options{APX_O2, APX_DT_F16, false, {}});
  ASSERT_TRUE(f.ok);
  int ln = f.Node(APX_OP_LayerNormalization);
  ASSERT_GE(ln, 0);
  // squares of ReduceMean(Pow) are still flagged by the overflow rule: widest decision fp32
  EXPECT_EQ(f.g().nodes[ln].compute, APX_DT_F32);
}

TEST(FuseLayerNorm, DoesNotFuseWhenIntermediateHasOtherConsumers) {
  LnSpec s;
  s.extra_reader = true;
  Compiled f = Compile(HandWrittenLn(s), Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_LayerNormalization), 0);
  auto r = f.Records(APX_FUSE_NOT_CONSUMERS);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_STREQ(r[0]->fused_op, "LayerNormalization");
}

TEST(FuseLayerNorm, NoFuseFlagDisablesFusion) {
  Compiled f = Compile(HandWrittenLn(LnSpec{}), Options{APX_O0, APX_DT_F16, true, {}});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_LayerNormalization), 0);
  EXPECT_EQ(f.Count(APX_OP_ReduceMean), 2);
}

TEST(FuseLayerNorm, ReduceMeanAloneIsNotACandidate) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 8});
        int m = b.Op("ReduceMean", {b.Op("MatMul", {x, F32Param(b, "w", {8, 8})})},
                     {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)});
        b.WeightedSumLoss(m);
      },
      Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Records(), 0);
}

}  // namespace
