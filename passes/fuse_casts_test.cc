// fuse_casts_test.cc - pass_fuse_casts as a spec: a narrowing Cast after a fused fp32-math
// kernel is folded into it (same numbers), a Cast whose input is read elsewhere stays.
#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

// O1: a hand-written LayerNorm (fp32 by the lists) feeding a half MatMul, so its output is
// cast to fp16; optionally the LayerNorm output is also read in fp32.
BuildFn LnIntoMatMul(bool fp32_reader) {
  return [fp32_reader](GraphBuilder &b) {
    int x = AddInput(b, "x", {4, 16});
    int mean = b.Op("ReduceMean", {x}, {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)});
    int d = b.Op("Sub", {x, mean});
    int var = b.Op("ReduceMean", {b.Op("Pow", {d, Scalar(b, "two", 2.0)})}, {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)});
    int y = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, Scalar(b, "eps", 1e-5)})})});
    y = b.Op("Add", {b.Op("Mul", {y, F32Param(b, "gamma", {16}, 0.5, 1.5)}), F32Param(b, "beta", {16})});
    int z = b.Op("MatMul", {y, F32Param(b, "w", {16, 8})});
    if (fp32_reader) z = b.Op("Add", {z, b.Op("ReduceSum", {y}, {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)})});
    b.WeightedSumLoss(z);
  };
}

TEST(FuseCasts, FoldsNarrowingCastIntoFusedProducer) {
  Options o{APX_O1, APX_DT_F16, false, {}}, off = o;
  off.no_fuse = true;
  Compiled f = Compile(LnIntoMatMul(false), o), p = Compile(LnIntoMatMul(false), off);
  ASSERT_TRUE(f.ok && p.ok);
  int ln = f.Node(APX_OP_LayerNormalization);
  ASSERT_GE(ln, 0);
  EXPECT_EQ(f.g().vals[f.g().nodes[ln].out[0]].dtype, APX_DT_F16);  // writes the half copy itself
  EXPECT_EQ(f.g().nodes[ln].compute, APX_DT_F32);
  bool folded = false;
  for (auto *r : f.Records(APX_FUSE_APPLIED)) folded |= std::string(r->pattern) == "Cast into producer";
  EXPECT_TRUE(folded);
  ExpectSameResults(f, p, APX_DT_F16, 16);
}

TEST(FuseCasts, KeepsCastWhoseInputIsReadElsewhere) {
  Compiled f = Compile(LnIntoMatMul(true), Options{APX_O1, APX_DT_F16, false, {}});
  ASSERT_TRUE(f.ok);
  int ln = f.Node(APX_OP_LayerNormalization);
  ASSERT_GE(ln, 0);
  EXPECT_EQ(f.g().vals[f.g().nodes[ln].out[0]].dtype, APX_DT_F32);
  bool kept = false;
  for (auto *r : f.Records(APX_FUSE_NOT_CONSUMERS)) kept |= std::string(r->pattern) == "Cast into producer";
  EXPECT_TRUE(kept);
}

TEST(FuseCasts, NoFuseFlagDisablesFusion) {
  Compiled f = Compile(LnIntoMatMul(false), Options{APX_O1, APX_DT_F16, true, {}});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Records(), 0);
  EXPECT_GT(f.Count(APX_OP_Cast), 0);
}

}  // namespace
