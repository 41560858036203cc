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
#define TNUM 8u /* compare.cu's forward types: fp32, fp16, bf16, int8, uint8, int32, int64 */
#define TCMP 16u /* bool-output compare.cu ops: T is the bool output (or a TNUM type) */

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
  /* every op of kind EW_UNARY / EW_UNARY_GRAD (ops.def) */
#define IO(a, b, c, d)
#define APX_KIND_OWN(ID)
#define APX_KIND_EW_UNARY(ID) E(ID, apx_cuda_unary, TF);
#define APX_KIND_EW_UNARY_GRAD(ID) E(ID, apx_cuda_unary_grad, TF);
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) APX_KIND_##KIND(ID)
#include "kernels/ops.def"
#undef APX_OP
#undef APX_KIND_EW_UNARY
#undef APX_KIND_EW_UNARY_GRAD
#undef APX_KIND_OWN
#undef IO
  E(PowGrad, apx_cuda_pow_grad, TF);
  /* v1.1 comparison, logic and selection ops (compare.cu) */
  E(Less, apx_cuda_compare, TCMP);
  E(LessOrEqual, apx_cuda_compare, TCMP);
  E(Greater, apx_cuda_compare, TCMP);
  E(GreaterOrEqual, apx_cuda_compare, TCMP);
  E(Not, apx_cuda_logic, TCMP);
  E(And, apx_cuda_logic, TCMP);
  E(Or, apx_cuda_logic, TCMP);
  E(IsNaN, apx_cuda_isclass, TCMP);
  E(IsInf, apx_cuda_isclass, TCMP);
  E(Min, apx_cuda_minmax, TNUM);
  E(Max, apx_cuda_minmax, TNUM);
  E(Clip, apx_cuda_clip, TNUM);
  E(Mod, apx_cuda_mod, TNUM);
  E(ClipGrad, apx_cuda_clip_grad, TF);
  E(MinMaxGrad, apx_cuda_minmax_grad, TF);
  E(CastLike, apx_cuda_cast, TANY); /* a Cast once canonicalized; never in a plan */
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
  E(ConvTranspose, apx_cuda_conv_transpose, TF);
  E(ConvTransposeGrad, apx_cuda_conv_grad, TF);
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
  /* v1.1 data movement, indexing and reductions (indexing.cu, reduce.cu, dropout.cu) */
  E(Pad, apx_cuda_pad, TANY);
  E(PadGrad, apx_cuda_pad_grad, TF);
  E(Tile, apx_cuda_tile, TANY);
  E(Trilu, apx_cuda_trilu, TANY);
  E(GatherElements, apx_cuda_gather_elements, TANY);
  E(GatherElementsGrad, apx_cuda_gather_elements_grad, TF);
  E(GatherND, apx_cuda_gather_nd, TANY);
  E(GatherNDGrad, apx_cuda_gather_nd_grad, TF);
  E(ReduceMax, apx_cuda_reduce_max, TF);
  E(ReduceMaxGrad, apx_cuda_reduce_max_grad, TF);
  E(RandomUniformLike, apx_cuda_random_uniform_like, TF);
  /* v1.1 resampling and contraction (resample.cu) */
  E(Resize, apx_cuda_resize, TF);
  E(ResizeGrad, apx_cuda_resize_grad, TF);
  E(Einsum, apx_cuda_einsum, TF);
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
  int fl = dt == APX_DT_F32 || dt == APX_DT_F16 || dt == APX_DT_BF16;
  int num = fl || dt == APX_DT_I8 || dt == APX_DT_U8 || dt == APX_DT_I32 || dt == APX_DT_I64;
  if (types == TNUM) return num;
  if (types == TCMP) return num || dt == APX_DT_BOOL;
  return fl;
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
