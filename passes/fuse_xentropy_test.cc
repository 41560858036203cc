// fuse_xentropy_test.cc - pass_fuse_xentropy as a spec: SoftmaxCrossEntropyLoss becomes
// FusedXentropy + FusedXentropyGrad (no log_prob materialized for the backward) with the
// same loss and gradients for every reduction and ignore_index, half logits read directly,
// and the reasons it does not fuse.
#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

struct XeSpec {
  const char *reduction = "mean";
  bool ignore = false, weights = false, use_log_prob = false;
};

// x [8, 6] -> Gemm(W [5, 6]^T, b) = logits [8, 5] -> SoftmaxCrossEntropyLoss(labels [8])
BuildFn Classifier(XeSpec s) {
  return [s](GraphBuilder &b) {
    int x = AddInput(b, "x", {8, 6});
    int labels = AddInput(b, "labels", {8}, APX_DT_I64);
    int logits = b.Op("Gemm", {x, F32Param(b, "w", {5, 6}), F32Param(b, "b", {5})}, {Attr::Int("transB", 1)});
    logits = b.Op("Mul", {logits, Scalar(b, "t", 3.0)});
    std::vector<Attr> at = {Attr::Str("reduction", s.reduction)};
    if (s.ignore) at.push_back(Attr::Int("ignore_index", 2));
    std::vector<int> in = {logits, labels};
    if (s.weights) in.push_back(F32Const(b, "cw", {5}, {1, 2, 0.5, 1, 3}));
    std::vector<int> out = b.Node("SoftmaxCrossEntropyLoss", in, s.use_log_prob ? 2 : 1, at);
    int loss = out[0];
    if (std::string(s.reduction) == "none") loss = b.Op("ReduceSum", {loss}, {Attr::Int("keepdims", 0)});
    if (s.use_log_prob) loss = b.Op("Add", {loss, b.Op("ReduceSum", {out[1]}, {Attr::Int("keepdims", 0)})});
    b.SetLoss(loss);
  };
}

class XentropyNumerics : public ::testing::TestWithParam<Options> {};

TEST_P(XentropyNumerics, FusesSoftmaxCrossEntropy) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  for (XeSpec s : {XeSpec{}, XeSpec{"mean", true}, XeSpec{"sum"}, XeSpec{"none", true}}) {
    SCOPED_TRACE(std::string(s.reduction) + (s.ignore ? " ignore_index" : ""));
    Compiled f = Compile(Classifier(s), o, {pass_fuse_xentropy}), p = Compile(Classifier(s), off, {pass_fuse_xentropy});
    ASSERT_TRUE(f.ok && p.ok);
    ASSERT_EQ(f.Count(APX_OP_FusedXentropy), 1);
    EXPECT_EQ(f.Count(APX_OP_FusedXentropyGrad), 1);
    EXPECT_EQ(f.Count(APX_OP_SoftmaxCrossEntropyLoss) + f.Count(APX_OP_SoftmaxCrossEntropyLossGrad), 0);
    // the saved tensor is one float per row, not the [8, 5] log-probabilities
    const ApxNode &n = f.g().nodes[f.Node(APX_OP_FusedXentropy)];
    EXPECT_EQ(apx_value_numel(&f.g().vals[n.out[1]]), 8);
    EXPECT_EQ(f.g().vals[n.out[0]].dtype, APX_DT_F32);  // the loss stays fp32
    ExpectSameResults(f, p, ComputeType(o), 16, 5);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, XentropyNumerics,
                         ::testing::Values(Options{APX_O0, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_BF16, false, {}}),
                         [](const ::testing::TestParamInfo<Options> &i) {
                           return "O" + std::to_string((int)i.param.level) + "_" + apx_dtype_short(i.param.half);
                         });

TEST(FuseXentropy, ReadsHalfLogitsDirectly) {
  // the gradient first keeps the fp32 type SoftmaxCrossEntropyLossGrad had; fuse_casts
  // then folds the Cast to fp16 into FusedXentropyGrad
  Compiled f = Compile(Classifier(XeSpec{}), Options{APX_O2, APX_DT_F16, false, {}},
                       {pass_fuse_xentropy, pass_fuse_casts});
  ASSERT_TRUE(f.ok);
  const ApxNode &n = f.g().nodes[f.Node(APX_OP_FusedXentropy)];
  EXPECT_EQ(f.g().vals[n.in[0]].dtype, APX_DT_F16);
  EXPECT_EQ(n.compute, APX_DT_F32);
  EXPECT_EQ(n.reason, APX_REASON_LOSS);
  const ApxNode &gr = f.g().nodes[f.Node(APX_OP_FusedXentropyGrad)];
  EXPECT_EQ(f.g().vals[gr.out[0]].dtype, APX_DT_F16);  // dScores written in half
  // both Casts of the unfused graph (logits to fp32, dScores to fp16) are gone: the only
  // one left converts the data input x
  ASSERT_EQ(f.Count(APX_OP_Cast), 1);
  EXPECT_STREQ(f.g().vals[f.g().nodes[f.Node(APX_OP_Cast)].in[0]].name, "x");
}

TEST(FuseXentropy, DoesNotFuseWithClassWeights) {
  XeSpec s;
  s.weights = true;
  Compiled f = Compile(Classifier(s), Options{}, {pass_fuse_xentropy});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedXentropy), 0);
  auto r = f.Records(APX_FUSE_NOT_LEGALITY);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("weights"), std::string::npos);
}

TEST(FuseXentropy, DoesNotFuseWhenLogProbIsRead) {
  XeSpec s;
  s.use_log_prob = true;
  Compiled f = Compile(Classifier(s), Options{}, {pass_fuse_xentropy});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedXentropy), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_CONSUMERS).size(), 1u);
}

TEST(FuseXentropy, NoFuseFlagDisablesFusion) {
  Compiled f = Compile(Classifier(XeSpec{}), Options{APX_O0, APX_DT_F16, true, {}}, {pass_fuse_xentropy});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedXentropy), 0);
  EXPECT_EQ(f.Count(APX_OP_SoftmaxCrossEntropyLoss), 1);
}

}  // namespace
