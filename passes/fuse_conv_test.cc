// fuse_conv_test.cc - pass_fuse_conv as a spec: Conv (+ bias) + Relu becomes ConvBiasRelu +
// ConvBiasReluGrad with the same forward and gradients (fp32, fp16), and the reasons it does
// not fuse.
#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

// x [2, 3, 6, 6] -> Conv(3 -> 4, 3x3, stride 1, pad 1, bias?) -> Relu -> Conv -> loss
BuildFn ConvRelu(bool bias, bool extra_reader = false) {
  return [bias, extra_reader](GraphBuilder &b) {
    int x = AddInput(b, "x", {2, 3, 6, 6});
    std::vector<int> in = {x, F32Param(b, "w", {4, 3, 3, 3})};
    if (bias) in.push_back(F32Param(b, "cb", {4}));
    int c = b.Op("Conv", in, {Attr::Ints("kernel_shape", {3, 3}), Attr::Ints("pads", {1, 1, 1, 1})});
    int y = b.Op("Relu", {c});
    if (extra_reader) y = b.Op("Add", {y, c});
    y = b.Op("Conv", {y, F32Param(b, "w2", {2, 4, 3, 3})}, {Attr::Ints("kernel_shape", {3, 3})});
    b.WeightedSumLoss(y);
  };
}

class ConvNumerics : public ::testing::TestWithParam<Options> {};

TEST_P(ConvNumerics, FusesConvBiasRelu) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    Compiled f = Compile(ConvRelu(bias), o, {pass_fuse_conv}), p = Compile(ConvRelu(bias), off, {pass_fuse_conv});
    ASSERT_TRUE(f.ok && p.ok);
    EXPECT_EQ(f.Count(APX_OP_ConvBiasRelu), 1);
    EXPECT_EQ(f.Count(APX_OP_ConvBiasReluGrad), 1);
    EXPECT_EQ(f.Count(APX_OP_Relu) + f.Count(APX_OP_ReluGrad), 0);
    EXPECT_EQ(f.Count(APX_OP_Conv), 1);  // the second Conv has no Relu
    ExpectSameResults(f, p, ComputeType(o), 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, ConvNumerics,
                         ::testing::Values(Options{APX_O0, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_BF16, false, {}}),
                         [](const ::testing::TestParamInfo<Options> &i) {
                           return "O" + std::to_string((int)i.param.level) + "_" + apx_dtype_short(i.param.half);
                         });

TEST(FuseConv, KeepsPrecisionOfFusedNodes) {
  Compiled f = Compile(ConvRelu(true), Options{APX_O2, APX_DT_F16, false, {}}, {pass_fuse_conv});
  ASSERT_TRUE(f.ok);
  const ApxNode &n = f.g().nodes[f.Node(APX_OP_ConvBiasRelu)];
  EXPECT_EQ(n.compute, APX_DT_F16);
  EXPECT_EQ(f.g().nodes[f.Node(APX_OP_ConvBiasReluGrad)].compute, APX_DT_F16);
}

TEST(FuseConv, DoesNotFuseWhenConvOutputHasOtherConsumers) {
  Compiled f = Compile(ConvRelu(true, true), Options{}, {pass_fuse_conv});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_ConvBiasRelu), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_CONSUMERS).size(), 1u);
}

TEST(FuseConv, DoesNotFuseNodesWithDifferentComputeTypes) {
  // O1 with Relu forced to fp32: the Conv runs in fp16
  Compiled f = Compile(ConvRelu(true), Options{APX_O1, APX_DT_F16, false, {"Relu"}}, {pass_fuse_conv});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_ConvBiasRelu), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_DTYPE).size(), 1u);
}

}  // namespace
