// cudalibs_test.cc - the cuDNN and cuBLASLt calls of the CUDA kernels, checked without a GPU:
// every library entry point the entries reach is replaced by a fake (cudalibs.h override), so
// the host side of Conv, ConvGrad and MatMul runs to completion and the test sees what the
// kernels asked the libraries for:
//   - a convolution reaches cudnnConvolutionForward / BackwardData / BackwardFilter with an
//     algorithm from the ranking the query returned (the argument-order defect read the count
//     before the query set it and never convolved);
//   - the chosen algorithm's math type is set on the descriptor before the call (fp32 prefers
//     an FMA-math algorithm: no TF32);
//   - a 3-D convolution sets 5-d descriptors (cudnnSet*NdDescriptor) with its (d, h, w)
//     pads, strides and dilations;
//   - cuBLASLt is told each operand's real alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*);
//   - a product's descriptors and heuristic result are made once and reused by later calls;
//   - the products apx_cuda_prepare derives from a list of kernels (lt_plan.h, what the cuda
//     backend does when it loads a plan) are exactly the ones those kernels then look up: one
//     heuristic query per distinct product at prepare, none at the calls.
// Also: a library that cannot be found fails its first call with a line naming what was
// looked for.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include <cublasLt.h>
#include <cudnn.h>

extern "C" {
#include "kernels/attrs.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/lt_plan.h"
#include "kernels/cuda/cudalibs.h"
}

#include "kernels/cuda/tensor_at_testing.h"

namespace {

// ---- fake cuDNN: descriptors are small structs, the calls are recorded ----------------------
struct FakeConv {
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct Calls {
  int fwd = 0, bwd_data = 0, bwd_filter = 0;
  int algo = -1;
  cudnnMathType_t math_at_call = CUDNN_DEFAULT_MATH;
  bool fp32 = false;  // which ranking the fake queries return
  // the 5-d (3-D) descriptors: the last tensor, filter and convolution set
  std::vector<int> nd_dims, nd_strides, nd_filter, nd_pads, nd_conv_strides, nd_dilations;
  int nd_tensors = 0;
} g;

FakeConv *conv_of(cudnnConvolutionDescriptor_t d) { return reinterpret_cast<FakeConv *>(d); }

cudnnStatus_t FakeCreate(cudnnHandle_t *h) {
  *h = reinterpret_cast<cudnnHandle_t>(0x1234);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t FakeCreateTensor(cudnnTensorDescriptor_t *d) {
  *d = reinterpret_cast<cudnnTensorDescriptor_t>(new int(0));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeDestroyTensor(cudnnTensorDescriptor_t d) {
  delete reinterpret_cast<int *>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetTensor4d(cudnnTensorDescriptor_t, cudnnTensorFormat_t, cudnnDataType_t, int, int, int, int) {
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetTensorNd(cudnnTensorDescriptor_t, cudnnDataType_t, int n, const int *dims, const int *strides) {
  g.nd_tensors++;
  g.nd_dims.assign(dims, dims + n);
  g.nd_strides.assign(strides, strides + n);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetFilterNd(cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int n, const int *dims) {
  g.nd_filter.assign(dims, dims + n);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetConvNd(cudnnConvolutionDescriptor_t, int n, const int *pads, const int *strides, const int *dil,
                            cudnnConvolutionMode_t, cudnnDataType_t) {
  g.nd_pads.assign(pads, pads + n);
  g.nd_conv_strides.assign(strides, strides + n);
  g.nd_dilations.assign(dil, dil + n);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeCreateFilter(cudnnFilterDescriptor_t *d) {
  *d = reinterpret_cast<cudnnFilterDescriptor_t>(new int(0));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeDestroyFilter(cudnnFilterDescriptor_t d) {
  delete reinterpret_cast<int *>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetFilter4d(cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int, int, int, int) {
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeCreateConv(cudnnConvolutionDescriptor_t *d) {
  *d = reinterpret_cast<cudnnConvolutionDescriptor_t>(new FakeConv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeDestroyConv(cudnnConvolutionDescriptor_t d) {
  delete conv_of(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetConv2d(cudnnConvolutionDescriptor_t, int, int, int, int, int, int, cudnnConvolutionMode_t,
                            cudnnDataType_t) {
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeSetGroups(cudnnConvolutionDescriptor_t, int) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t FakeSetMath(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  conv_of(d)->math = m;
  return CUDNN_STATUS_SUCCESS;
}

// The ranking every query returns: a nondeterministic algorithm first, then (fp32) a
// deterministic DEFAULT-math one (TF32 allowed) before a deterministic FMA one; (half) a
// deterministic one ranked with TENSOR_OP_MATH_ALLOW_CONVERSION - a math type the
// descriptor was not created with, so only applying perf.mathType puts it there.
template <typename Perf, typename Algo>
void Rank(int *n, Perf *perf) {
  memset(perf, 0, 3 * sizeof *perf);
  for (int i = 0; i < 3; i++) {
    perf[i].algo = static_cast<Algo>(i + 1);
    perf[i].status = CUDNN_STATUS_SUCCESS;
    perf[i].memory = 0;
    perf[i].determinism = i == 0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
  }
  perf[0].mathType = CUDNN_DEFAULT_MATH;
  perf[1].mathType = g.fp32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  perf[2].mathType = g.fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  *n = 3;
}
cudnnStatus_t FakeFwdAlgo(cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
                          const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int req, int *n,
                          cudnnConvolutionFwdAlgoPerf_t *perf) {
  EXPECT_GE(req, 3);
  Rank<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(n, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeBwdDataAlgo(cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
                              const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int, int *n,
                              cudnnConvolutionBwdDataAlgoPerf_t *perf) {
  Rank<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(n, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeBwdFilterAlgo(cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
                                const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t, const int, int *n,
                                cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
  Rank<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(n, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeFwd(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *,
                      const cudnnFilterDescriptor_t, const void *, const cudnnConvolutionDescriptor_t c,
                      cudnnConvolutionFwdAlgo_t algo, void *, size_t, const void *, const cudnnTensorDescriptor_t,
                      void *) {
  g.fwd++;
  g.algo = static_cast<int>(algo);
  g.math_at_call = conv_of(c)->math;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeBwdData(cudnnHandle_t, const void *, const cudnnFilterDescriptor_t, const void *,
                          const cudnnTensorDescriptor_t, const void *, const cudnnConvolutionDescriptor_t c,
                          cudnnConvolutionBwdDataAlgo_t algo, void *, size_t, const void *,
                          const cudnnTensorDescriptor_t, void *) {
  g.bwd_data++;
  g.algo = static_cast<int>(algo);
  g.math_at_call = conv_of(c)->math;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t FakeBwdFilter(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *,
                            const cudnnTensorDescriptor_t, const void *, const cudnnConvolutionDescriptor_t c,
                            cudnnConvolutionBwdFilterAlgo_t algo, void *, size_t, const void *,
                            const cudnnFilterDescriptor_t, void *) {
  g.bwd_filter++;
  g.algo = static_cast<int>(algo);
  g.math_at_call = conv_of(c)->math;
  return CUDNN_STATUS_SUCCESS;
}

// ---- fake cuBLASLt -----------------------------------------------------------------------------
struct FakePref {
  std::map<int, uint64_t> attr;
};
struct LtCalls {
  int heuristic = 0, matmul = 0;
  std::map<int, uint64_t> pref_at_heuristic;
} lt;

cublasStatus_t FakeDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t) {
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<int *>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeDescSet(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType, uint64_t, uint64_t, int64_t) {
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<int *>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeLayoutSet(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakePrefCreate(cublasLtMatmulPreference_t *p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new FakePref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakePrefDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<FakePref *>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakePrefSet(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                           size_t n) {
  uint64_t v = 0;
  memcpy(&v, buf, n < 8 ? n : 8);
  reinterpret_cast<FakePref *>(p)->attr[static_cast<int>(a)] = v;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                             cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t p, int,
                             cublasLtMatmulHeuristicResult_t res[], int *n) {
  lt.heuristic++;
  lt.pref_at_heuristic = reinterpret_cast<FakePref *>(p)->attr;
  memset(&res[0], 0, sizeof res[0]);
  *n = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t FakeMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,
                          const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t,
                          void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t,
                          cudaStream_t) {
  lt.matmul++;
  return CUBLAS_STATUS_SUCCESS;
}

#define OVERRIDE(name, fn) ASSERT_EQ(apx_cudalib_override(name, reinterpret_cast<void *>(fn)), 0) << name

class CudaLibs : public ::testing::Test {
 protected:
  void SetUp() override {
    g = Calls();
    lt = LtCalls();
    OVERRIDE("cudnnCreate", FakeCreate);
    OVERRIDE("cudnnSetStream", FakeSetStream);
    OVERRIDE("cudnnCreateTensorDescriptor", FakeCreateTensor);
    OVERRIDE("cudnnDestroyTensorDescriptor", FakeDestroyTensor);
    OVERRIDE("cudnnSetTensor4dDescriptor", FakeSetTensor4d);
    OVERRIDE("cudnnCreateFilterDescriptor", FakeCreateFilter);
    OVERRIDE("cudnnDestroyFilterDescriptor", FakeDestroyFilter);
    OVERRIDE("cudnnSetFilter4dDescriptor", FakeSetFilter4d);
    OVERRIDE("cudnnCreateConvolutionDescriptor", FakeCreateConv);
    OVERRIDE("cudnnDestroyConvolutionDescriptor", FakeDestroyConv);
    OVERRIDE("cudnnSetConvolution2dDescriptor", FakeSetConv2d);
    OVERRIDE("cudnnSetTensorNdDescriptor", FakeSetTensorNd);
    OVERRIDE("cudnnSetFilterNdDescriptor", FakeSetFilterNd);
    OVERRIDE("cudnnSetConvolutionNdDescriptor", FakeSetConvNd);
    OVERRIDE("cudnnSetConvolutionGroupCount", FakeSetGroups);
    OVERRIDE("cudnnSetConvolutionMathType", FakeSetMath);
    OVERRIDE("cudnnGetConvolutionForwardAlgorithm_v7", FakeFwdAlgo);
    OVERRIDE("cudnnGetConvolutionBackwardDataAlgorithm_v7", FakeBwdDataAlgo);
    OVERRIDE("cudnnGetConvolutionBackwardFilterAlgorithm_v7", FakeBwdFilterAlgo);
    OVERRIDE("cudnnConvolutionForward", FakeFwd);
    OVERRIDE("cudnnConvolutionBackwardData", FakeBwdData);
    OVERRIDE("cudnnConvolutionBackwardFilter", FakeBwdFilter);
    OVERRIDE("cublasLtMatmulDescCreate", FakeDescCreate);
    OVERRIDE("cublasLtMatmulDescDestroy", FakeDescDestroy);
    OVERRIDE("cublasLtMatmulDescSetAttribute", FakeDescSet);
    OVERRIDE("cublasLtMatrixLayoutCreate", FakeLayoutCreate);
    OVERRIDE("cublasLtMatrixLayoutDestroy", FakeLayoutDestroy);
    OVERRIDE("cublasLtMatrixLayoutSetAttribute", FakeLayoutSet);
    OVERRIDE("cublasLtMatmulPreferenceCreate", FakePrefCreate);
    OVERRIDE("cublasLtMatmulPreferenceDestroy", FakePrefDestroy);
    OVERRIDE("cublasLtMatmulPreferenceSetAttribute", FakePrefSet);
    OVERRIDE("cublasLtMatmulAlgoGetHeuristic", FakeHeuristic);
    OVERRIDE("cublasLtMatmul", FakeMatmul);
    memset(&ctx_, 0, sizeof ctx_);
    ctx_.lt_ws_bytes = 1 << 20;
  }
  void TearDown() override {
    // drop the cached descriptors while the fakes that made them are still installed
    ctx_.dnn = nullptr;
    ctx_.lt = nullptr;
    apx_cuda_ctx_free(&ctx_);
  }
  ApxCudaCtx ctx_;
};

ApxTensor T(uintptr_t addr, ApxDType dt, std::vector<int64_t> dims) {
  return apx_testing::TensorAt(addr, dt, dims);
}

ApxAttrConv Conv3x3() {
  ApxAttrConv a;
  memset(&a, 0, sizeof a);
  a.kernel[0] = 1;
  a.kernel[1] = a.kernel[2] = 3;
  a.strides[1] = a.strides[2] = 1;
  for (int i : {1, 2, 4, 5}) a.pads[i] = 1;
  a.dilations[1] = a.dilations[2] = 1;
  a.group = 1;
  return a;
}

constexpr uintptr_t kBase = 0x7f0000000000ull;

TEST_F(CudaLibs, ConvolutionReachesCudnnWithTheRankedAlgorithmAndItsMathType) {
  ApxAttrConv a = Conv3x3();
  ApxTensor ins[2] = {T(kBase, APX_DT_F16, {2, 4, 8, 8}), T(kBase + (1 << 20), APX_DT_F16, {6, 4, 3, 3})};
  ApxTensor outs[1] = {T(kBase + (2 << 20), APX_DT_F16, {2, 6, 8, 8})};
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_Conv, &a, ins, 2, outs, 1), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(g.fwd, 1) << "cudnnConvolutionForward was not called";
  EXPECT_EQ(g.algo, 2) << "not the first deterministic algorithm of the ranking";
  EXPECT_EQ(g.math_at_call, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) << "perf.mathType not applied";
}

TEST_F(CudaLibs, Fp32ConvolutionPrefersFmaMath) {
  g.fp32 = true;
  ApxAttrConv a = Conv3x3();
  ApxTensor ins[2] = {T(kBase, APX_DT_F32, {2, 4, 8, 8}), T(kBase + (1 << 20), APX_DT_F32, {6, 4, 3, 3})};
  ApxTensor outs[1] = {T(kBase + (2 << 20), APX_DT_F32, {2, 6, 8, 8})};
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_Conv, &a, ins, 2, outs, 1), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(g.fwd, 1);
  EXPECT_EQ(g.algo, 3) << "fp32 must take the FMA-math algorithm (no TF32)";
  EXPECT_EQ(g.math_at_call, CUDNN_FMA_MATH);
}

TEST_F(CudaLibs, ConvGradReachesBackwardDataAndFilter) {
  ApxAttrConv a = Conv3x3();
  ApxTensor ins[3] = {T(kBase, APX_DT_BF16, {2, 6, 8, 8}), T(kBase + (1 << 20), APX_DT_BF16, {2, 4, 8, 8}),
                      T(kBase + (2 << 20), APX_DT_BF16, {6, 4, 3, 3})};
  ApxTensor outs[2] = {T(kBase + (3 << 20), APX_DT_BF16, {2, 4, 8, 8}),
                       T(kBase + (4 << 20), APX_DT_BF16, {6, 4, 3, 3})};
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_ConvGrad, &a, ins, 3, outs, 2), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(g.bwd_data, 1) << "cudnnConvolutionBackwardData was not called";
  EXPECT_EQ(g.bwd_filter, 1) << "cudnnConvolutionBackwardFilter was not called";
  EXPECT_EQ(g.math_at_call, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

// 3-D: 5-d descriptors (NCDHW, packed strides), the window's three pads, strides and
// dilations in (d, h, w) order; 2-D convolutions never set one.
TEST_F(CudaLibs, ThreeDimensionalConvolutionUsesNdDescriptors) {
  ApxAttrConv a;
  memset(&a, 0, sizeof a);
  const int64_t k[3] = {3, 3, 1}, s[3] = {2, 1, 1}, d[3] = {1, 2, 1}, p[3] = {1, 2, 0};
  for (int i = 0; i < 3; i++) {
    a.kernel[i] = k[i];
    a.strides[i] = s[i];
    a.dilations[i] = d[i];
    a.pads[i] = a.pads[i + 3] = p[i];
  }
  a.group = 2;
  // D: (5 + 2 - 3) / 2 + 1 = 3, H: (6 + 4 - 5) + 1 = 6, W: 7
  ApxTensor ins[2] = {T(kBase, APX_DT_F16, {2, 4, 5, 6, 7}), T(kBase + (1 << 20), APX_DT_F16, {6, 2, 3, 3, 1})};
  ApxTensor outs[1] = {T(kBase + (2 << 20), APX_DT_F16, {2, 6, 3, 6, 7})};
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_Conv, &a, ins, 2, outs, 1), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(g.fwd, 1);
  EXPECT_EQ(g.nd_tensors, 2);
  EXPECT_EQ(g.nd_dims, (std::vector<int>{2, 6, 3, 6, 7}));  // y, the last set
  EXPECT_EQ(g.nd_strides, (std::vector<int>{6 * 3 * 6 * 7, 3 * 6 * 7, 6 * 7, 7, 1}));
  EXPECT_EQ(g.nd_filter, (std::vector<int>{6, 2, 3, 3, 1}));
  EXPECT_EQ(g.nd_pads, (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(g.nd_conv_strides, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(g.nd_dilations, (std::vector<int>{1, 2, 1}));
  // asymmetric depth pads the floor does not absorb are refused, naming all six
  a.pads[3] = 3;  // D: (5 + 4 - 3) / 2 + 1 = 4, its symmetric twin's 3
  ApxTensor y2[1] = {T(kBase + (2 << 20), APX_DT_F16, {2, 6, 4, 6, 7})};
  EXPECT_EQ(apx_cuda_run(&ctx_, APX_OP_Conv, &a, ins, 2, y2, 1), APX_STATUS_UNSUPPORTED);
  EXPECT_STREQ(ctx_.err, "Conv: not supported yet on cuda: asymmetric pads [1, 2, 0, 3, 2, 0]");
}

TEST_F(CudaLibs, MatMulStatesOperandAlignmentAndReusesItsPlan) {
  // Y (32, 48) = A (32, 16) @ B (16, 48) in fp16; A sits 2 bytes past a 256-byte boundary, B at
  // 64, Y at 256. cuBLASLt's A is our B (row-major products run as their transposes).
  ApxTensor ins[2] = {T(kBase + 2, APX_DT_F16, {32, 16}), T(kBase + (1 << 20) + 64, APX_DT_F16, {16, 48})};
  ApxTensor outs[1] = {T(kBase + (2 << 20), APX_DT_F16, {32, 48})};
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_MatMul, nullptr, ins, 2, outs, 1), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(lt.heuristic, 1);
  EXPECT_EQ(lt.matmul, 1);
  auto &p = lt.pref_at_heuristic;
  EXPECT_EQ(p[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], 64u) << "our B";
  EXPECT_EQ(p[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES], 2u) << "our A, 2 bytes past 256";
  EXPECT_EQ(p[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES], 256u);
  EXPECT_EQ(p[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES], 256u);
  // the same product again (another step): no new heuristic query, no new descriptors
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_MatMul, nullptr, ins, 2, outs, 1), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(lt.heuristic, 1) << "the heuristic result was not reused";
  EXPECT_EQ(lt.matmul, 2);
  EXPECT_EQ(ctx_.lt_heuristic_calls, 1);
  // other alignment: another plan
  ins[0] = T(kBase + 16, APX_DT_F16, {32, 16});
  ASSERT_EQ(apx_cuda_run(&ctx_, APX_OP_MatMul, nullptr, ins, 2, outs, 1), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(lt.heuristic, 2);
  EXPECT_EQ(lt.pref_at_heuristic[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES], 16u);
}

TEST_F(CudaLibs, PreparedProductsMakeNoHeuristicQueryAtTheirCalls) {
  // kernels whose host side runs to completion on the fakes: cuBLASLt products only
  ApxAttrGemm gemm;
  memset(&gemm, 0, sizeof gemm);
  gemm.alpha = gemm.beta = 1.0f;
  gemm.trans_b = 1;
  ApxAttrFusedMatMul fm;
  memset(&fm, 0, sizeof fm);
  fm.trans_a = 1;
  fm.alpha = 0.5f;
  ApxAttrFusedDense relu, gelu, none;
  memset(&relu, 0, sizeof relu);
  relu.activation = APX_ACT_RELU;
  relu.alpha = relu.beta = 1.0f;
  gelu = relu;
  gelu.activation = APX_ACT_GELU_TANH;
  none = relu;
  none.activation = APX_ACT_NONE;
  const uintptr_t M = 1 << 20;
  struct K {
    ApxOp op;
    const void *attrs;
    std::vector<ApxTensor> ins, outs;
  };
  std::vector<K> ks = {
      {APX_OP_Gemm, &gemm, {T(kBase, APX_DT_F16, {8, 16}), T(kBase + M, APX_DT_F16, {32, 16}), T(kBase + 2 * M, APX_DT_F16, {32})},
       {T(kBase + 3 * M, APX_DT_F16, {8, 32})}},
      {APX_OP_Gemm, &gemm, {T(kBase, APX_DT_F16, {8, 16}), T(kBase + M + 2, APX_DT_F16, {32, 16})},
       {T(kBase + 3 * M, APX_DT_F16, {8, 32})}},
      {APX_OP_MatMul, nullptr, {T(kBase, APX_DT_BF16, {2, 3, 4, 5}), T(kBase + M, APX_DT_BF16, {5, 6})},
       {T(kBase + 2 * M, APX_DT_BF16, {2, 3, 4, 6})}},
      {APX_OP_MatMul, nullptr, {T(kBase, APX_DT_F32, {2, 4, 5}), T(kBase + M + 64, APX_DT_F32, {2, 5, 6})},
       {T(kBase + 2 * M, APX_DT_F32, {2, 4, 6})}},
      {APX_OP_FusedMatMul, &fm, {T(kBase, APX_DT_F16, {16, 8}), T(kBase + M, APX_DT_F16, {16, 12})},
       {T(kBase + 2 * M, APX_DT_F16, {8, 12})}},
      {APX_OP_FusedDense, &relu,
       {T(kBase, APX_DT_F16, {4, 8, 16}), T(kBase + M, APX_DT_F16, {16, 24}), T(kBase + 2 * M, APX_DT_F16, {24})},
       {T(kBase + 3 * M, APX_DT_F16, {4, 8, 24})}},
      {APX_OP_FusedDense, &gelu,
       {T(kBase, APX_DT_F16, {32, 16}), T(kBase + M, APX_DT_F16, {16, 24}), T(kBase + 2 * M, APX_DT_F16, {24})},
       {T(kBase + 3 * M, APX_DT_F16, {32, 24}), T(kBase + 4 * M, APX_DT_F16, {32, 24})}},
      {APX_OP_FusedDenseGrad, &none,
       {T(kBase, APX_DT_F16, {32, 24}), T(kBase + M, APX_DT_F16, {32, 16}), T(kBase + 2 * M, APX_DT_F16, {16, 24})},
       {T(kBase + 3 * M, APX_DT_F16, {32, 16}), T(kBase + 4 * M, APX_DT_F16, {16, 24})}},
  };
  ks.push_back(ks[5]);  // the same kernel twice (a repeated layer): one product
  std::vector<ApxLtCallView> v;
  for (const K &k : ks) v.push_back({k.op, k.attrs, k.ins.data(), (int32_t)k.ins.size(), k.outs.data(), (int32_t)k.outs.size()});
  ASSERT_EQ(apx_cuda_prepare(&ctx_, v.data(), (int32_t)v.size()), APX_STATUS_OK) << ctx_.err;
  EXPECT_EQ(lt.heuristic, 9) << "one query per distinct product (FusedDenseGrad has two)";
  EXPECT_EQ(ctx_.lt_prefilled, 9);
  EXPECT_EQ(lt.matmul, 0) << "prepare queues nothing";
  for (K &k : ks)
    ASSERT_EQ(apx_cuda_run(&ctx_, k.op, k.attrs, k.ins.data(), (int)k.ins.size(), k.outs.data(), (int)k.outs.size()),
              APX_STATUS_OK)
        << apx_op_name(k.op) << ": " << ctx_.err;
  EXPECT_EQ(lt.heuristic, 9) << "a kernel looked up a product prepare did not derive";
  EXPECT_EQ(ctx_.lt_heuristic_calls, 9);
  EXPECT_EQ(lt.matmul, 10);
}

}  // namespace
