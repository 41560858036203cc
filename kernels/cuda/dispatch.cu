/* dispatch.cu - apx_cuda_run: the op -> entry table (the CUDA counterpart of
 * kernels/cpu/dispatch.c), the supported-type query, the argument checks every backend shares
 * (kernels/validate.h: counts, tensors, the op's contract) before an entry runs, and the
 * release of each op's temporaries. The entries then check only what this backend does not
 * implement ("not supported yet on cuda: ..."). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/validate.h"

typedef ApxStatus (*CudaEntry)(ApxCudaCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins,
                               int n_in, ApxTensor *outs, int n_out);

#define TF 1u /* fp16, bf16, fp32 (fp64 math runs on the CPU only) */
#define TANY 7u /* data movement: any dtype, by element size */

typedef struct CudaOpEntry {
  CudaEntry fn;
  uint8_t types;
} CudaOpEntry;

static CudaOpEntry cuda_table[APX_OP_COUNT];

/* Filled once (designated array initializers are C, not C++). */
static void fill_table(void) {
  CudaOpEntry *t = cuda_table;
#define E(OP, FN, TY) t[APX_OP_##OP] = CudaOpEntry{FN, TY}
  /* matrix products (cuBLASLt) */
  E(Gemm, apx_cuda_gemm, TF);
  E(MatMul, apx_cuda_matmul, TF);
  E(FusedMatMul, apx_cuda_matmul, TF);
  E(FusedDense, apx_cuda_fused_dense, TF);
  E(FusedDenseGrad, apx_cuda_fused_dense_grad, TF);
  /* elementwise */
  E(Add, apx_cuda_binary, TF);
  E(Sub, apx_cuda_binary, TF);
  E(Mul, apx_cuda_binary, TF);
  E(Div, apx_cuda_binary, TF);
  E(Pow, apx_cuda_binary, TF);
  E(Sum, apx_cuda_sum, TF);
  E(Neg, apx_cuda_unary, TF);
  E(Relu, apx_cuda_unary, TF);
  E(LeakyRelu, apx_cuda_unary, TF);
  E(Sigmoid, apx_cuda_unary, TF);
  E(Tanh, apx_cuda_unary, TF);
  E(Gelu, apx_cuda_unary, TF);
  E(Erf, apx_cuda_unary, TF);
  E(Sqrt, apx_cuda_unary, TF);
  E(Exp, apx_cuda_unary, TF);
  E(Log, apx_cuda_unary, TF);
  E(ReluGrad, apx_cuda_unary_grad, TF);
  E(LeakyReluGrad, apx_cuda_unary_grad, TF);
  E(SigmoidGrad, apx_cuda_unary_grad, TF);
  E(TanhGrad, apx_cuda_unary_grad, TF);
  E(GeluGrad, apx_cuda_unary_grad, TF);
  E(ErfGrad, apx_cuda_unary_grad, TF);
  E(SqrtGrad, apx_cuda_unary_grad, TF);
  E(PowGrad, apx_cuda_pow_grad, TF);
  /* normalization, softmax, losses */
  E(Softmax, apx_cuda_softmax, TF);
  E(LogSoftmax, apx_cuda_softmax, TF);
  E(SoftmaxGrad, apx_cuda_softmax_grad, TF);
  E(LogSoftmaxGrad, apx_cuda_softmax_grad, TF);
  E(FusedSoftmax, apx_cuda_fused_softmax, TF);
  E(FusedSoftmaxGrad, apx_cuda_fused_softmax_grad, TF);
  E(LayerNormalization, apx_cuda_layer_norm, TF);
  E(LayerNormGrad, apx_cuda_layer_norm_grad, TF);
  E(BatchNormalization, apx_cuda_batch_norm, TF);
  E(BatchNormRelu, apx_cuda_batch_norm, TF);
  E(BatchNormGrad, apx_cuda_batch_norm_grad, TF);
  E(BatchNormReluGrad, apx_cuda_batch_norm_grad, TF);
  E(SoftmaxCrossEntropyLoss, apx_cuda_loss, TF);
  E(NegativeLogLikelihoodLoss, apx_cuda_loss, TF);
  E(FusedXentropy, apx_cuda_loss, TF);
  E(SoftmaxCrossEntropyLossGrad, apx_cuda_loss_grad, TF);
  E(NegativeLogLikelihoodLossGrad, apx_cuda_loss_grad, TF);
  E(FusedXentropyGrad, apx_cuda_loss_grad, TF);
  E(Dropout, apx_cuda_dropout, TF);
  E(DropoutGrad, apx_cuda_dropout_grad, TF);
  /* convolution (cuDNN) and pooling */
  E(Conv, apx_cuda_conv, TF);
  E(ConvBiasRelu, apx_cuda_conv, TF);
  E(ConvGrad, apx_cuda_conv_grad, TF);
  E(ConvBiasReluGrad, apx_cuda_conv_grad, TF);
  E(MaxPool, apx_cuda_pool, TF);
  E(AveragePool, apx_cuda_pool, TF);
  E(MaxPoolGrad, apx_cuda_pool_grad, TF);
  E(AveragePoolGrad, apx_cuda_pool_grad, TF);
  E(GlobalAveragePool, apx_cuda_global_avg_pool, TF);
  E(GlobalAveragePoolGrad, apx_cuda_global_avg_pool_grad, TF);
  /* reductions */
  E(ReduceSum, apx_cuda_reduce, TF);
  E(ReduceMean, apx_cuda_reduce, TF);
  E(ReduceSumTo, apx_cuda_reduce_sum_to, TF);
  /* data movement */
  E(Flatten, apx_cuda_copy, TANY);
  E(Reshape, apx_cuda_copy, TANY);
  E(Squeeze, apx_cuda_copy, TANY);
  E(Unsqueeze, apx_cuda_copy, TANY);
  E(Identity, apx_cuda_copy, TANY);
  E(Transpose, apx_cuda_transpose, TANY);
  E(Concat, apx_cuda_concat, TANY);
  E(Split, apx_cuda_split, TANY);
  E(Slice, apx_cuda_slice, TANY);
  E(SliceGrad, apx_cuda_slice_grad, TANY);
  E(Gather, apx_cuda_gather, TANY);
  E(GatherGrad, apx_cuda_gather_grad, TF);
  E(Expand, apx_cuda_expand, TANY);
  E(Where, apx_cuda_where, TANY);
  E(Cast, apx_cuda_cast, TANY);
  /* training step */
  E(LossScaleSeed, apx_cuda_loss_scale_seed, TF);
  E(AssignState, apx_cuda_assign_state, TANY);
  E(UnscaleCheck, apx_cuda_unscale_check, TF);
  E(OptimizerStep, apx_cuda_optimizer_step, TF);
#undef E
}

static const CudaOpEntry *entry(ApxOp op) {
  static int filled = 0;
  if (!filled) { /* idempotent: concurrent first calls write the same values */
    fill_table();
    filled = 1;
  }
  return (int)op > 0 && op < APX_OP_COUNT ? &cuda_table[op] : NULL;
}

static int type_ok(uint8_t types, ApxDType dt) {
  if (types == TANY) return apx_dtype_size(dt) != 0;
  return dt == APX_DT_F32 || dt == APX_DT_F16 || dt == APX_DT_BF16;
}

int apx_cuda_supports(ApxOp op, ApxDType dt) {
  const CudaOpEntry *e = entry(op);
  return e && e->fn && type_ok(e->types, dt);
}

/* The op's type T: the first present output's dtype, else input 0's. */
static ApxDType op_type(const ApxTensor *ins, int n_in, const ApxTensor *outs, int n_out) {
  for (int i = 0; i < n_out; i++)
    if (outs[i].data) return outs[i].dtype;
  return n_in > 0 && ins[0].data ? ins[0].dtype : APX_DT_UNDEFINED;
}

ApxStatus apx_cuda_run(ApxCudaCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins,
                       int n_in, ApxTensor *outs, int n_out) {
  char *err = ctx->err;
  size_t cap = sizeof ctx->err;
  err[0] = '\0';
  if (apx_kernel_check_op(op, err, cap) != APX_STATUS_OK) return APX_STATUS_BAD_INPUT;
  const CudaOpEntry *e = entry(op);
  ApxStatus st;
  if (!e->fn) {
    st = apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: %s", apx_op_name(op));
  } else if ((st = apx_kernel_check_args(op, attrs, ins, n_in, outs, n_out, err, cap)) ==
             APX_STATUS_OK) {
    ApxDType t = op_type(ins, n_in, outs, n_out);
    if (t != APX_DT_UNDEFINED && !type_ok(e->types, t))
      st = apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s%s",
                         apx_dtype_name(t), t == APX_DT_F64 ? " (fp64 runs on the cpu backend)" : "");
    if (!st) st = apx_kernel_check_contract(op, attrs, ins, n_in, outs, n_out, err, cap);
    if (!st) st = e->fn(ctx, op, attrs, ins, n_in, outs, n_out);
  }
  apx_cuda_tmp_release(ctx);
  if (st != APX_STATUS_OK) apx_kernel_error_prefix(op, err, cap);
  return st;
}
