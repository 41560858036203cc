// lt_plan_test.cc - the cuBLASLt products derived from kernels on the host (lt_plan.h): what
// each op issues first (shapes, transposes, types, epilogues, alignments) and the distinct
// products of a kernel list (count, first-occurrence order, dedup by key). Whether these are
// exactly the keys matmul.cu looks up is checked in cudalibs_test (fake cuBLASLt: the calls
// after apx_cuda_prepare make no heuristic query).
#include "kernels/cuda/lt_plan.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/attrs.h"

#include "kernels/cuda/tensor_at_testing.h"

namespace {

constexpr uintptr_t kBase = 0x7f0000000000ull;

ApxTensor T(uintptr_t addr, ApxDType dt, std::vector<int64_t> dims) {
  return apx_testing::TensorAt(addr, dt, dims);
}

struct Call {
  ApxOp op;
  const void *attrs;
  std::vector<ApxTensor> ins, outs;
  ApxLtCallView View() const {
    return {op, attrs, ins.data(), (int32_t)ins.size(), outs.data(), (int32_t)outs.size()};
  }
};

std::vector<ApxLtProduct> Of(const Call &c) {
  ApxLtCallView v = c.View();
  int64_t n = apx_lt_products_of(&v, nullptr, 0);
  std::vector<ApxLtProduct> p((size_t)n);
  EXPECT_EQ(apx_lt_products_of(&v, p.data(), n), n);
  return p;
}

ApxAttrGemm Gemm(int ta, int tb, float beta) {
  ApxAttrGemm g;
  memset(&g, 0, sizeof g);
  g.alpha = 1.0f;
  g.beta = beta;
  g.trans_a = ta;
  g.trans_b = tb;
  return g;
}

ApxAttrFusedDense Dense(int act, int trans_w) {
  ApxAttrFusedDense a;
  memset(&a, 0, sizeof a);
  a.activation = act;
  a.trans_w = trans_w;
  a.alpha = a.beta = 1.0f;
  return a;
}

TEST(LtPlan, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(apx_lt_align(reinterpret_cast<void *>(kBase)), 256u);
  EXPECT_EQ(apx_lt_align(reinterpret_cast<void *>(kBase + 64)), 64u);
  EXPECT_EQ(apx_lt_align(reinterpret_cast<void *>(kBase + 2)), 2u);
  EXPECT_EQ(apx_lt_align(reinterpret_cast<void *>(kBase + 3)), 1u);
}

TEST(LtPlan, GemmShapesTransposesAndBiasEpilogue) {
  ApxAttrGemm g = Gemm(0, 1, 0.0f);  // Y (8, 32) = A (8, 16) @ B^T, B (32, 16)
  Call c{APX_OP_Gemm, &g, {T(kBase, APX_DT_F16, {8, 16}), T(kBase + 4096 + 64, APX_DT_F16, {32, 16})},
         {T(kBase + 8192, APX_DT_F16, {8, 32})}};
  auto p = Of(c);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.M, 8);
  EXPECT_EQ(p[0].key.N, 32);
  EXPECT_EQ(p[0].key.K, 16);
  EXPECT_EQ(p[0].key.ta, 0);
  EXPECT_EQ(p[0].key.tb, 1);
  EXPECT_EQ(p[0].key.ab, APX_DT_F16);
  EXPECT_EQ(p[0].key.cd, APX_DT_F16);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_DEFAULT);
  EXPECT_EQ(p[0].key.al[0], 64u) << "cuBLASLt's A is our B";
  EXPECT_EQ(p[0].key.al[1], 256u);
  // a bias row with beta 1: the BIAS epilogue with the bias pointer
  g.beta = 1.0f;
  c.ins.push_back(T(kBase + 12288, APX_DT_F16, {32}));
  p = Of(c);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_BIAS);
  EXPECT_EQ(p[0].key.has_bias, 1);
  EXPECT_EQ(p[0].bias, c.ins[2].data);
  // a full C, or beta 2: C is copied into Y first, then the plain product
  g.beta = 2.0f;
  p = Of(c);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_DEFAULT);
  EXPECT_EQ(p[0].key.has_bias, 0);
}

TEST(LtPlan, OpsWithoutProductsOrRefusedOperandsGiveNone) {
  Call relu{APX_OP_Relu, nullptr, {T(kBase, APX_DT_F32, {4}), T(kBase + 256, APX_DT_F32, {4})},
            {T(kBase + 512, APX_DT_F32, {4})}};
  EXPECT_TRUE(Of(relu).empty());
  ApxAttrGemm g = Gemm(0, 0, 0.0f);
  Call f64{APX_OP_Gemm, &g, {T(kBase, APX_DT_F64, {2, 3}), T(kBase + 256, APX_DT_F64, {3, 4})},
           {T(kBase + 512, APX_DT_F64, {2, 4})}};
  EXPECT_TRUE(Of(f64).empty()) << "fp64 runs on cpu only";
  Call empty{APX_OP_Gemm, &g, {T(kBase, APX_DT_F32, {0, 3}), T(kBase + 256, APX_DT_F32, {3, 4})},
             {T(kBase + 512, APX_DT_F32, {0, 4})}};
  EXPECT_TRUE(Of(empty).empty()) << "M = 0: nothing is issued";
}

TEST(LtPlan, FusedDenseEpiloguesAndTheirFallback) {
  std::vector<ApxTensor> ins = {T(kBase, APX_DT_BF16, {4, 8, 16}), T(kBase + 4096, APX_DT_BF16, {16, 24}),
                                T(kBase + 8192, APX_DT_BF16, {24})};
  ApxAttrFusedDense relu = Dense(APX_ACT_RELU, 0);
  auto p = Of({APX_OP_FusedDense, &relu, ins, {T(kBase + 16384, APX_DT_BF16, {4, 8, 24})}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.M, 32) << "batch dims fold into rows";
  EXPECT_EQ(p[0].key.N, 24);
  EXPECT_EQ(p[0].key.K, 16);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_RELU_BIAS);
  EXPECT_EQ(p[0].bias, ins[2].data);
  // the tanh GELU with Aux (N % 8 == 0): GELU_AUX_BIAS, aux_ld N
  ApxAttrFusedDense gt = Dense(APX_ACT_GELU_TANH, 0);
  std::vector<ApxTensor> outs = {T(kBase + 16384, APX_DT_BF16, {4, 8, 24}), T(kBase + 32768, APX_DT_BF16, {4, 8, 24})};
  p = Of({APX_OP_FusedDense, &gt, ins, outs});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_GELU_AUX_BIAS);
  EXPECT_EQ(p[0].key.has_aux, 1);
  EXPECT_EQ(p[0].key.aux_ld, 24);
  EXPECT_EQ(p[0].aux, outs[1].data);
  // the erf GELU has no epilogue: the fp32 product into a (256-aligned) temporary
  ApxAttrFusedDense erf = Dense(APX_ACT_GELU, 0);
  p = Of({APX_OP_FusedDense, &erf, ins, {outs[0]}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_DEFAULT);
  EXPECT_EQ(p[0].key.cd, APX_DT_F32);
  EXPECT_EQ(p[0].key.al[3], 256u);
  // a bias of another type cannot go through the epilogue either
  std::vector<ApxTensor> ins32 = ins;
  ins32[2].dtype = APX_DT_F32;
  p = Of({APX_OP_FusedDense, &relu, ins32, {outs[0]}});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.cd, APX_DT_F32);
}

TEST(LtPlan, FusedDenseGradIssuesDxAndDw) {
  // dY (32, 24), X (32, 16), W (16, 24) -> dX (32, 16) = g W^T, dW (16, 24) = X^T g
  ApxAttrFusedDense a = Dense(APX_ACT_NONE, 0);
  std::vector<ApxTensor> ins = {T(kBase, APX_DT_F16, {32, 24}), T(kBase + 4096, APX_DT_F16, {32, 16}),
                                T(kBase + 8192, APX_DT_F16, {16, 24})};
  std::vector<ApxTensor> outs = {T(kBase + 16384, APX_DT_F16, {32, 16}), T(kBase + 20480, APX_DT_F16, {16, 24})};
  auto p = Of({APX_OP_FusedDenseGrad, &a, ins, outs});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].key.M, 32);
  EXPECT_EQ(p[0].key.N, 16);
  EXPECT_EQ(p[0].key.K, 24);
  EXPECT_EQ(p[0].key.tb, 1);
  EXPECT_EQ(p[1].key.M, 16);
  EXPECT_EQ(p[1].key.N, 24);
  EXPECT_EQ(p[1].key.K, 32);
  EXPECT_EQ(p[1].key.ta, 1);
  // only dW wanted (the first layer's dX is not): one product
  outs[0].data = nullptr;
  EXPECT_EQ(Of({APX_OP_FusedDenseGrad, &a, ins, outs}).size(), 1u);
}

TEST(LtPlan, MatMulBatchesFoldOrStride) {
  // a shared right operand folds the batches into rows: one product M = 2 * 3 * 4
  Call fold{APX_OP_MatMul, nullptr, {T(kBase, APX_DT_F32, {2, 3, 4, 5}), T(kBase + 4096, APX_DT_F32, {5, 6})},
            {T(kBase + 8192, APX_DT_F32, {2, 3, 4, 6})}};
  auto p = Of(fold);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.M, 24);
  EXPECT_EQ(p[0].key.batch, 1);
  // both batched: one strided-batched product
  Call both{APX_OP_MatMul, nullptr, {T(kBase, APX_DT_F32, {2, 4, 5}), T(kBase + 4096, APX_DT_F32, {2, 5, 6})},
            {T(kBase + 8192, APX_DT_F32, {2, 4, 6})}};
  p = Of(both);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key.batch, 2);
  EXPECT_EQ(p[0].key.sa, 20);
  EXPECT_EQ(p[0].key.sb, 30);
  EXPECT_EQ(p[0].key.sd, 24);
}

TEST(LtPlan, PlanProductsAreDistinctInFirstOccurrenceOrder) {
  ApxAttrFusedDense relu = Dense(APX_ACT_RELU, 0);
  std::vector<ApxTensor> l1 = {T(kBase, APX_DT_F16, {32, 16}), T(kBase + 4096, APX_DT_F16, {16, 16}),
                               T(kBase + 8192, APX_DT_F16, {16})};
  std::vector<ApxTensor> l2 = {T(kBase + 12288, APX_DT_F16, {32, 16}), T(kBase + 16384, APX_DT_F16, {16, 16}),
                               T(kBase + 20480, APX_DT_F16, {16})};
  std::vector<ApxTensor> y1 = {T(kBase + 24576, APX_DT_F16, {32, 16})}, y2 = {T(kBase + 28672, APX_DT_F16, {32, 16})};
  std::vector<ApxTensor> odd = l2;
  odd[0].data = reinterpret_cast<void *>(kBase + 12288 + 2);  // X 2 bytes past 256: another product
  ApxAttrGemm g = Gemm(0, 0, 0.0f);
  std::vector<Call> calls = {
      {APX_OP_FusedDense, &relu, l1, y1},  // product 0
      {APX_OP_FusedDense, &relu, l2, y2},  // same shape, types, epilogue, alignments: product 0
      {APX_OP_FusedDense, &relu, l1, y1},  // the same kernel again (another step): product 0
      {APX_OP_Relu, nullptr, y1, y2},      // none
      {APX_OP_FusedDense, &relu, odd, y2}, // product 1: alignment 2
      {APX_OP_Gemm, &g, {l1[0], l1[1]}, y1},  // product 2: no epilogue
  };
  std::vector<ApxLtCallView> v;
  for (const Call &c : calls) v.push_back(c.View());
  ApxLtProduct *p = nullptr;
  int64_t n = apx_lt_plan_products(v.data(), (int32_t)v.size(), &p);
  ASSERT_EQ(n, 3);
  EXPECT_EQ(p[0].key.epi, APX_LT_EPI_RELU_BIAS);
  EXPECT_EQ(p[0].key.al[1], 256u);
  EXPECT_EQ(p[1].key.al[1], 2u);
  EXPECT_EQ(p[2].key.epi, APX_LT_EPI_DEFAULT);
  free(p);
  EXPECT_EQ(apx_lt_plan_products(v.data(), 0, &p), 0);
  EXPECT_EQ(p, nullptr);
}

}  // namespace
