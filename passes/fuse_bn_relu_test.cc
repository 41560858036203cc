// fuse_bn_relu_test.cc - pass_fuse_bn_relu as a spec: training-mode BatchNormalization +
// Relu becomes BatchNormRelu + BatchNormReluGrad with the same forward, gradients and
// running statistics; at O2 the BN's fp32 decision carries over with half X/Y; the reasons
// it does not fuse.
#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

// x [4, 3, 5, 5] -> Conv(3 -> 6, 3x3) -> BatchNormalization(training) -> Relu -> loss
BuildFn ConvBnRelu(int training, bool extra_reader = false) {
  return [training, extra_reader](GraphBuilder &b) {
    int x = AddInput(b, "x", {4, 3, 5, 5});
    int c = b.Op("Conv", {x, F32Param(b, "w", {6, 3, 3, 3}), F32Param(b, "cb", {6})},
                 {Attr::Ints("kernel_shape", {3, 3}), Attr::Ints("pads", {1, 1, 1, 1})});
    int rm = F32Const(b, "rm", {6}, {0, 0, 0, 0, 0, 0}), rv = F32Const(b, "rv", {6}, {1, 1, 1, 1, 1, 1});
    int n_out = training ? 3 : 1;
    std::vector<int> bn = b.Node("BatchNormalization", {c, F32Param(b, "scale", {6}, 0.5, 1.5), F32Param(b, "bias", {6}), rm, rv},
                                 n_out, {Attr::Int("training_mode", training), Attr::Float("momentum", 0.9f)});
    int y = b.Op("Relu", {bn[0]});
    if (extra_reader) y = b.Op("Add", {y, bn[0]});
    b.WeightedSumLoss(y);
  };
}

class BnReluNumerics : public ::testing::TestWithParam<Options> {};

TEST_P(BnReluNumerics, FusesBatchNormRelu) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  Compiled f = Compile(ConvBnRelu(1), o, {pass_fuse_bn_relu}), p = Compile(ConvBnRelu(1), off, {pass_fuse_bn_relu});
  ASSERT_TRUE(f.ok && p.ok);
  EXPECT_EQ(f.Count(APX_OP_BatchNormRelu), 1);
  EXPECT_EQ(f.Count(APX_OP_BatchNormReluGrad), 1);
  EXPECT_EQ(f.Count(APX_OP_BatchNormalization) + f.Count(APX_OP_Relu) + f.Count(APX_OP_BatchNormGrad) +
                f.Count(APX_OP_ReluGrad),
            0);
  // the running statistics are still bound back to the state
  EXPECT_EQ(f.Count(APX_OP_AssignState), 2);
  // the running statistics BatchNormRelu writes are BatchNormalization's
  ExpectSameResults(f, p, ComputeType(o), 16, 4, {"BatchNormalization_1_out1", "BatchNormalization_1_out2"});
}

INSTANTIATE_TEST_SUITE_P(Levels, BnReluNumerics,
                         ::testing::Values(Options{APX_O0, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_F16, false, {}},
                                           Options{APX_O3, APX_DT_F16, false, {}}),
                         [](const ::testing::TestParamInfo<Options> &i) {
                           return "O" + std::to_string((int)i.param.level) + "_" + apx_dtype_short(i.param.half);
                         });

TEST(FuseBnRelu, KeepsBatchNormFp32AtO2WithHalfActivations) {
  // dX first keeps the fp32 type BatchNormGrad had; fuse_casts then folds its Cast to fp16
  Compiled f = Compile(ConvBnRelu(1), Options{APX_O2, APX_DT_F16, false, {}}, {pass_fuse_bn_relu, pass_fuse_casts});
  ASSERT_TRUE(f.ok);
  const ApxNode &n = f.g().nodes[f.Node(APX_OP_BatchNormRelu)];
  EXPECT_EQ(n.compute, APX_DT_F32);
  EXPECT_EQ(n.reason, APX_REASON_BN_FP32);
  EXPECT_EQ(f.g().vals[n.in[0]].dtype, APX_DT_F16);   // reads the half conv output
  EXPECT_EQ(f.g().vals[n.in[1]].dtype, APX_DT_F32);   // fp32 scale
  EXPECT_EQ(f.g().vals[n.out[0]].dtype, APX_DT_F16);  // writes half
  // no Cast around the BN: its input comes from the Conv, its gradient reads half
  EXPECT_EQ(f.g().nodes[f.g().vals[n.in[0]].producer].op, APX_OP_Conv);
  const ApxNode &gr = f.g().nodes[f.Node(APX_OP_BatchNormReluGrad)];
  EXPECT_EQ(f.g().vals[gr.out[0]].dtype, APX_DT_F16);
  EXPECT_EQ(f.g().vals[gr.out[1]].dtype, APX_DT_F32);  // dscale stays fp32
  for (int k = 0; k < f.g().n_order; k++) {
    const ApxNode &c = f.g().nodes[f.g().order[k]];
    EXPECT_FALSE(c.op == APX_OP_Cast && (c.in[0] == n.out[0] || c.in[0] == gr.out[0] || c.out[0] == n.in[0]))
        << c.name;
  }
}

TEST(FuseBnRelu, DoesNotFuseInferenceModeBatchNormWithGradient) {
  Compiled f = Compile(ConvBnRelu(0), Options{}, {pass_fuse_bn_relu});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_BatchNormRelu), 0);
  auto r = f.Records(APX_FUSE_NOT_LEGALITY);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("inference-mode"), std::string::npos);
}

TEST(FuseBnRelu, DoesNotFuseWhenBatchNormOutputHasOtherConsumers) {
  Compiled f = Compile(ConvBnRelu(1, true), Options{}, {pass_fuse_bn_relu});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_BatchNormRelu), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_CONSUMERS).size(), 1u);
}

}  // namespace
