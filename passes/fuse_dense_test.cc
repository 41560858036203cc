// fuse_dense_test.cc - pass_fuse_dense as a spec: which dense patterns become FusedDense +
// FusedDenseGrad, that fused and unfused graphs compute the same forward and gradients
// (fp32 at O0, fp16 at O2), and why each non-fused candidate was not fused.
#include <chrono>

#include "tests/testing/fusion_testing.h"

namespace {

using namespace apx_fusion_testing;

// x [6, 8] -> Gemm(W [5, 8], transB, C [5]) -> Relu -> weighted-sum loss
void GemmBiasRelu(GraphBuilder &b) {
  int x = AddInput(b, "x", {6, 8});
  int w = F32Param(b, "w", {5, 8}), c = F32Param(b, "c", {5});
  int y = b.Op("Gemm", {x, w, c}, {Attr::Int("transB", 1), Attr::Float("alpha", 0.75f), Attr::Float("beta", 1.5f)});
  y = b.Op("Relu", {y});
  b.WeightedSumLoss(y);
}

// x [2, 3, 8] -> MatMul(W [8, 12]) -> Add(b [12]) -> Erf-form GELU -> MatMul(W2 [12, 4]) + b2 -> loss
void MatMulBiasGeluErf(GraphBuilder &b) {
  int x = AddInput(b, "x", {2, 3, 8});
  int w = F32Param(b, "w", {8, 12}), bias = F32Param(b, "b", {12});
  int z = b.Op("Add", {b.Op("MatMul", {x, w}), bias});
  int t = b.Op("Add", {b.Op("Erf", {b.Op("Div", {z, Scalar(b, "sqrt2", std::sqrt(2.0))})}), Scalar(b, "one", 1.0)});
  int y = b.Op("Mul", {b.Op("Mul", {z, t}), Scalar(b, "half", 0.5)});
  int w2 = F32Param(b, "w2", {12, 4}), b2 = F32Param(b, "b2", {4});
  b.WeightedSumLoss(b.Op("Add", {b.Op("MatMul", {y, w2}), b2}));
}

class DenseNumerics : public ::testing::TestWithParam<Options> {};

TEST_P(DenseNumerics, FusesGemmBiasRelu) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  Compiled f = Compile(GemmBiasRelu, o), p = Compile(GemmBiasRelu, off);
  ASSERT_TRUE(f.ok && p.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 1);
  EXPECT_EQ(f.Count(APX_OP_FusedDenseGrad), 1);
  EXPECT_EQ(f.Count(APX_OP_Gemm) + f.Count(APX_OP_Relu) + f.Count(APX_OP_ReluGrad) + f.Count(APX_OP_FusedMatMul), 0);
  const ApxAttrFusedDense *a = APX_NODE_ATTRS(&f.g(), f.Node(APX_OP_FusedDense), ApxAttrFusedDense);
  EXPECT_EQ(a->activation, APX_ACT_RELU);
  EXPECT_EQ(a->trans_w, 1);
  EXPECT_FLOAT_EQ(a->alpha, 0.75f);
  EXPECT_FLOAT_EQ(a->beta, 1.5f);
  ASSERT_EQ(f.Records(APX_FUSE_APPLIED).size(), 1u);
  EXPECT_STREQ(f.Records(APX_FUSE_APPLIED)[0]->pattern, "Gemm+Relu");
  ExpectSameResults(f, p, ComputeType(o), 16);
}

TEST_P(DenseNumerics, FusesMatMulBiasAndErfGelu) {
  Options o = GetParam(), off = o;
  off.no_fuse = true;
  Compiled f = Compile(MatMulBiasGeluErf, o), p = Compile(MatMulBiasGeluErf, off);
  ASSERT_TRUE(f.ok && p.ok);
  ASSERT_EQ(f.Count(APX_OP_FusedDense), 2);
  EXPECT_EQ(f.Count(APX_OP_FusedDenseGrad), 2);
  EXPECT_EQ(f.Count(APX_OP_Erf) + f.Count(APX_OP_ErfGrad) + f.Count(APX_OP_MatMul), 0);
  int gelu = f.Node(APX_OP_FusedDense, 0);
  EXPECT_EQ(APX_NODE_ATTRS(&f.g(), gelu, ApxAttrFusedDense)->activation, APX_ACT_GELU);
  EXPECT_EQ(f.g().nodes[gelu].n_out, 2);  // Y and the pre-activation the gradient reads
  int grad = f.Node(APX_OP_FusedDenseGrad, 0);
  if (f.g().nodes[grad].origin != gelu) grad = f.Node(APX_OP_FusedDenseGrad, 1);
  ASSERT_EQ(f.g().nodes[grad].origin, gelu);
  ASSERT_EQ(f.g().nodes[grad].n_in, 4);
  EXPECT_EQ(f.g().nodes[grad].in[3], f.g().nodes[gelu].out[1]);
  ExpectSameResults(f, p, ComputeType(o), 16);
}

INSTANTIATE_TEST_SUITE_P(Levels, DenseNumerics,
                         ::testing::Values(Options{APX_O0, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_F16, false, {}},
                                           Options{APX_O2, APX_DT_BF16, false, {}}),
                         [](const ::testing::TestParamInfo<Options> &i) {
                           return "O" + std::to_string((int)i.param.level) + "_" + apx_dtype_short(i.param.half);
                         });

TEST(FuseDense, KeepsPrecisionOfFusedNodes) {
  Compiled f = Compile(GemmBiasRelu, Options{APX_O2, APX_DT_F16, false, {}});
  ASSERT_TRUE(f.ok);
  const ApxNode &fw = f.g().nodes[f.Node(APX_OP_FusedDense)];
  EXPECT_EQ(fw.compute, APX_DT_F16);
  EXPECT_EQ(fw.reason, APX_REASON_DEFAULT_HALF);
  EXPECT_NE(std::string(fw.reason_detail).find("fused:"), std::string::npos);
  const ApxNode &bw = f.g().nodes[f.Node(APX_OP_FusedDenseGrad)];
  EXPECT_EQ(bw.compute, APX_DT_F16);
  EXPECT_EQ(bw.reason, APX_REASON_INHERITED);
  EXPECT_EQ(bw.section, APX_SEC_BACKWARD);
  EXPECT_EQ(bw.origin, f.Node(APX_OP_FusedDense));
  // the gradients keep their names: the optimizer reads them
  EXPECT_GE(apx_graph_find_value(&f.g(), "grad/w"), 0);
  EXPECT_EQ(f.g().vals[apx_graph_find_value(&f.g(), "grad/w")].producer, f.Node(APX_OP_FusedDenseGrad));
}

TEST(FuseDense, NoFuseFlagDisablesFusion) {
  Compiled f = Compile(GemmBiasRelu, Options{APX_O0, APX_DT_F16, true, {}});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  EXPECT_EQ(f.Count(APX_OP_Gemm), 1);
  ASSERT_NE(f.Log(), nullptr);
  EXPECT_EQ(f.Log()->disabled, 1);
  EXPECT_EQ(f.Records(), 0);
  EXPECT_EQ(pass_fuse_dense(&f.g(), &f.b->o, &f.b->d), APX_PASS_UNCHANGED);
}

TEST(FuseDense, DoesNotFuseWhenIntermediateHasOtherConsumers) {
  // the MatMul's output also feeds a second branch: it must stay a value
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 6});
        int mm = b.Op("MatMul", {x, F32Param(b, "w", {6, 3})});
        int y = b.Op("Add", {mm, F32Param(b, "b", {3})});
        b.WeightedSumLoss(b.Op("Add", {y, b.Op("Tanh", {mm})}));
      },
      Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  auto r = f.Records(APX_FUSE_NOT_CONSUMERS);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("also read by"), std::string::npos) << r[0]->detail;
}

TEST(FuseDense, FusesWithoutActivationWhenActivationInputHasOtherConsumers) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 6});
        int z = b.Op("Add", {b.Op("MatMul", {x, F32Param(b, "w", {6, 3})}), F32Param(b, "b", {3})});
        b.WeightedSumLoss(b.Op("Add", {b.Op("Relu", {z}), b.Op("Sigmoid", {z})}));
      },
      Options{});
  ASSERT_TRUE(f.ok);
  ASSERT_EQ(f.Count(APX_OP_FusedDense), 1);
  EXPECT_EQ(APX_NODE_ATTRS(&f.g(), f.Node(APX_OP_FusedDense), ApxAttrFusedDense)->activation, APX_ACT_NONE);
  EXPECT_EQ(f.Count(APX_OP_Relu), 1);
  EXPECT_EQ(f.Records(APX_FUSE_APPLIED).size(), 1u);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_CONSUMERS).size(), 1u);
}

TEST(FuseDense, DoesNotFuseBiasThatIsNotPerColumn) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 6});
        b.WeightedSumLoss(b.Op("Gemm", {x, F32Param(b, "w", {6, 3}), F32Param(b, "c", {4, 3})}));
      },
      Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  auto r = f.Records(APX_FUSE_NOT_LEGALITY);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("not broadcastable"), std::string::npos) << r[0]->detail;
}

TEST(FuseDense, DoesNotFuseTransposedX) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {6, 4});
        b.WeightedSumLoss(
            b.Op("Gemm", {x, F32Param(b, "w", {6, 3}), F32Param(b, "c", {3})}, {Attr::Int("transA", 1)}));
      },
      Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_LEGALITY).size(), 1u);
}

TEST(FuseDense, DoesNotFuseActivationItHasNoEpilogueFor) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 6});
        int z = b.Op("Add", {b.Op("MatMul", {x, F32Param(b, "w", {6, 3})}), F32Param(b, "b", {3})});
        b.WeightedSumLoss(b.Op("Tanh", {z}));
      },
      Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 1);  // the product and bias still fuse
  EXPECT_EQ(f.Count(APX_OP_Tanh), 1);
  auto r = f.Records(APX_FUSE_NOT_LEGALITY);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("Tanh"), std::string::npos);
}

TEST(FuseDense, DoesNotFuseBatchedWeights) {
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {2, 4, 6});
        b.WeightedSumLoss(b.Op("Relu", {b.Op("MatMul", {x, F32Param(b, "w", {2, 6, 3})})}));
      },
      Options{});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  EXPECT_EQ(f.Records(APX_FUSE_NOT_SHAPE).size(), 1u);
}

TEST(FuseDense, DoesNotFuseNodesWithDifferentComputeTypes) {
  // O1: MatMul is on the half list; the bias Add promotes to its fp32 parameter
  Compiled f = Compile(
      [](GraphBuilder &b) {
        int x = AddInput(b, "x", {4, 8});
        b.WeightedSumLoss(b.Op("Add", {b.Op("MatMul", {x, F32Param(b, "w", {8, 8})}), F32Param(b, "b", {8})}));
      },
      Options{APX_O1, APX_DT_F16, false, {}});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  auto r = f.Records(APX_FUSE_NOT_DTYPE);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("runs in fp16"), std::string::npos) << r[0]->detail;
}

TEST(FuseDense, DoesNotFuseBackwardItDoesNotRecognize) {
  // Hand-edited backward: the bias gradient (ReduceSumTo) reads a second gradient made
  // outside the Gemm/Relu backward, next to the ReluGrad's dY -- not the form autodiff makes.
  Compiled f = Compile(GemmBiasRelu, Options{}, {});
  ASSERT_TRUE(f.ok);
  ApxGraph &g = f.g();
  int rg = f.Node(APX_OP_ReluGrad), rs = f.Node(APX_OP_ReduceSumTo);
  ASSERT_GE(rg, 0);
  ASSERT_GE(rs, 0);
  int dy = g.nodes[rg].in[0];
  int sq = apx_graph_add_value(&g, &f.b->d, "dy_squared", APX_VAL_ACTIVATION, g.vals[dy].dtype, g.vals[dy].rank,
                               g.vals[dy].dims);
  int in[2] = {dy, dy};
  int mul = apx_graph_add_node(&g, &f.b->d, APX_OP_Mul, "dy_squared", 2, in, 1, &sq);
  ASSERT_GE(mul, 0);
  g.nodes[mul].section = APX_SEC_BACKWARD;
  g.nodes[mul].compute = g.nodes[rg].compute;
  g.nodes[rs].in[0] = sq;
  ASSERT_EQ(apx_graph_toposort(&g, &f.b->d), 0) << f.b->d.msg;
  ASSERT_TRUE(RunChecked(*f.b, pass_fuse_dense, "fuse_dense"));
  EXPECT_EQ(f.Count(APX_OP_FusedDense), 0);
  auto r = f.Records(APX_FUSE_NOT_BACKWARD);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(std::string(r[0]->detail).find("incoming gradients"), std::string::npos) << r[0]->detail;
}

}  // namespace

namespace {

using namespace apx_fusion_testing;

// A deep MLP (2000 x [MatMul + bias + Relu], about 20k nodes with the backward): every
// block fuses (the use index is built once per pass and kept up to date, no rescans per
// fusion; the time is printed, not asserted: speed is scripts/bench_compile.sh's business).
TEST(FuseDense, LargeGraphFusesEveryBlock) {
  const int blocks = 2000;
  auto deep = [](GraphBuilder &b) {
    int x = AddInput(b, "x", {4, 8});
    for (int i = 0; i < blocks; i++) {
      int z = b.Op("Add", {b.Op("MatMul", {x, F32Param(b, "w" + std::to_string(i), {8, 8}, -0.3, 0.3)}),
                           F32Param(b, "b" + std::to_string(i), {8})});
      x = b.Op("Relu", {z});
    }
    b.WeightedSumLoss(x);
  };
  Compiled plain = Compile(deep, Options{}, {});
  ASSERT_TRUE(plain.ok);
  int nodes = plain.g().n_order;
  auto t0 = std::chrono::steady_clock::now();
  for (PassFn f : AllFusions()) ASSERT_TRUE(RunChecked(*plain.b, f, "fusion"));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(plain.Count(APX_OP_FusedDense), blocks);
  EXPECT_EQ(plain.Count(APX_OP_FusedDenseGrad), blocks);
  printf("  %d nodes before fusion, %d after; fusion passes (with verify) %.3f s\n", nodes, plain.g().n_order, s);
}

}  // namespace
