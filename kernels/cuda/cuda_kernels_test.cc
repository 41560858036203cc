// cuda_kernels_test.cc - what of the CUDA kernels can be checked without a GPU: the support
// table against the CPU reference's, the "not supported yet on cuda" refusals, and the
// argument checks that run on the host before anything is queued (they need no device:
// tensors carry fake addresses that are never dereferenced). With a GPU, context creation
// is checked as well; the numerics are kernels/cuda/lab's (requires-gpu).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/op.h"
}

namespace {

ApxTensor T(std::vector<int64_t> dims, ApxDType dt = APX_DT_F32) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void *>(0x10000);  // never dereferenced by the host checks
  t.dtype = dt;
  t.rank = (int32_t)dims.size();
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

// Ops the CPU runs that the CUDA backend deliberately leaves to others: compile-time folding
// (never in a plan) and Allreduce (the collective layer's).
bool FoldedOrCollective(ApxOp op) {
  return op == APX_OP_Equal || op == APX_OP_Shape || op == APX_OP_ConstantOfShape ||
         op == APX_OP_Range || op == APX_OP_Allreduce || op == APX_OP_Constant;
}

TEST(CudaSupports, EveryCpuFloatOpRunsOnCudaInHalfAndFloat) {
  int covered = 0;
  for (int i = 1; i < APX_OP_COUNT; i++) {
    ApxOp op = (ApxOp)i;
    if (!apx_cpu_supports(op, APX_DT_F32) || FoldedOrCollective(op)) continue;
    for (ApxDType dt : {APX_DT_F32, APX_DT_F16, APX_DT_BF16})
      EXPECT_TRUE(apx_cuda_supports(op, dt)) << apx_op_name(op) << " " << apx_dtype_name(dt);
    covered++;
  }
  EXPECT_GT(covered, 80);
}

TEST(CudaSupports, Fp64MathStaysOnTheCpuDataMovementDoesNot) {
  EXPECT_FALSE(apx_cuda_supports(APX_OP_Add, APX_DT_F64));
  EXPECT_FALSE(apx_cuda_supports(APX_OP_MatMul, APX_DT_F64));
  EXPECT_TRUE(apx_cuda_supports(APX_OP_Transpose, APX_DT_F64));
  EXPECT_TRUE(apx_cuda_supports(APX_OP_Cast, APX_DT_I64));
  EXPECT_TRUE(apx_cuda_supports(APX_OP_Gather, APX_DT_I64));
  EXPECT_FALSE(apx_cuda_supports(APX_OP_Add, APX_DT_I64));
}

TEST(CudaSupports, TierTwoAndFoldedOpsAreRefused) {
  for (ApxOp op : {APX_OP_Upsample, APX_OP_Equal, APX_OP_Allreduce})
    EXPECT_FALSE(apx_cuda_supports(op, APX_DT_F32)) << apx_op_name(op);
  EXPECT_TRUE(apx_cuda_supports(APX_OP_ConvTranspose, APX_DT_F16));
  EXPECT_TRUE(apx_cuda_supports(APX_OP_ConvTransposeGrad, APX_DT_F32));
}

class CudaHostChecks : public ::testing::Test {
 protected:
  void SetUp() override { memset(&ctx_, 0, sizeof ctx_); }
  ApxStatus Run(ApxOp op, const void *attrs, std::vector<ApxTensor> ins, std::vector<ApxTensor> outs) {
    return apx_cuda_run(&ctx_, op, attrs, ins.data(), (int)ins.size(), outs.data(), (int)outs.size());
  }
  std::string Err() const { return ctx_.err; }
  ApxCudaCtx ctx_;
};

TEST_F(CudaHostChecks, UnsupportedOpNamesItself) {
  EXPECT_EQ(Run(APX_OP_Upsample, nullptr, {T({1})}, {T({1})}), APX_STATUS_UNSUPPORTED);
  EXPECT_EQ(Err(), "Upsample: not supported yet on cuda: Upsample");
}

TEST_F(CudaHostChecks, Fp64IsRefusedWithAReason) {
  EXPECT_EQ(Run(APX_OP_Relu, nullptr, {T({4}, APX_DT_F64)}, {T({4}, APX_DT_F64)}),
            APX_STATUS_UNSUPPORTED);
  EXPECT_NE(Err().find("fp64 runs on the cpu backend"), std::string::npos) << Err();
}

TEST_F(CudaHostChecks, BroadcastMismatchIsBadInput) {
  EXPECT_EQ(Run(APX_OP_Add, nullptr, {T({2, 3}), T({2})}, {T({2, 3})}), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(Err(), "Add: input 1 shape [2] does not broadcast to [2,3]");
}

TEST_F(CudaHostChecks, MatMulInnerDims) {
  EXPECT_EQ(Run(APX_OP_MatMul, nullptr, {T({4, 5}), T({6, 7})}, {T({4, 7})}), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(Err(), "MatMul: inner dims differ: A [4,5], B [6,7]");
}

TEST_F(CudaHostChecks, SoftmaxAxisOutOfRange) {
  ApxAttrAxis a = {3};
  EXPECT_EQ(Run(APX_OP_Softmax, &a, {T({2, 3})}, {T({2, 3})}), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(Err(), "Softmax: axis 3 out of range for rank 2");
}

TEST_F(CudaHostChecks, LayerNormScaleSize) {
  ApxAttrLayerNorm a = {1, 1e-5f, 1};
  EXPECT_EQ(Run(APX_OP_LayerNormalization, &a, {T({4, 8}), T({7})}, {T({4, 8})}), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(Err(), "LayerNormalization: Scale has 7 elements, expected 8");
}

TEST_F(CudaHostChecks, GatherWithFloatIndices) {
  ApxAttrAxis a = {0};
  EXPECT_EQ(Run(APX_OP_Gather, &a, {T({10, 4}), T({3}, APX_DT_F32)}, {T({3, 4})}), APX_STATUS_BAD_INPUT);
  EXPECT_NE(Err().find("indices of type float32"), std::string::npos) << Err();
}

TEST_F(CudaHostChecks, OptimizerInputCount) {
  ApxAttrOptimizer a;
  memset(&a, 0, sizeof a);
  a.kind = APX_OPTIM_ADAMW;
  a.n_params = 2;
  EXPECT_EQ(Run(APX_OP_OptimizerStep, &a, {T({1}), T({1}), T({1}), T({1}, APX_DT_I64)}, {}),
            APX_STATUS_BAD_INPUT);
  EXPECT_EQ(Err(), "OptimizerStep: 2 parameters need 12 inputs, got 4");
}

TEST_F(CudaHostChecks, MissingAttributes) {
  EXPECT_EQ(Run(APX_OP_Softmax, nullptr, {T({2})}, {T({2})}), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(Err(), "Softmax: missing attributes (ApxAttrAxis)");
}

TEST(CudaDevice, CountOrReason) {
  char why[256] = "";
  int n = apx_cuda_device_count(why, sizeof why);
  if (n <= 0) {
    EXPECT_NE(std::string(why).find("cudaGetDeviceCount"), std::string::npos) << why;
    GTEST_SKIP() << "no CUDA device: " << why;
  }
  ApxCudaCtx ctx;
  ASSERT_EQ(apx_cuda_ctx_init(&ctx, 0, nullptr), APX_STATUS_OK) << ctx.err;
  EXPECT_GT(ctx.sm_count, 0);
  int64_t seq = 0;
  EXPECT_EQ(apx_cuda_dev_error(&ctx, &seq), APX_STATUS_OK) << ctx.err;
  EXPECT_EQ(seq, -1);
  apx_cuda_ctx_free(&ctx);
}

}  // namespace
