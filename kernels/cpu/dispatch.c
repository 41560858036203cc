/* dispatch.c - apx_cpu_run: the op -> kernel table, the supported-dtype query, and the dtype
 * normalization that gives the CPU its half-precision semantics (DESIGN.md 12).
 *
 * "math" kernels never see fp16/bf16: before the call every float tensor is converted to
 * the call's math type (F64 when any float tensor of the call is F64, else F32) and every
 * non-bool integer tensor to I64; outputs are computed in those types and converted back
 * once afterwards (RNE for half, so fp16 overflow gives inf as on the GPU; wrap for
 * narrower integers). "raw" kernels (data movement, Cast) see the tensors as given.
 *
 * Every call is checked first, on the tensors as given, by kernels/validate.h (the contract
 * shared with the CUDA backend and the plan validator), after this backend's own dtype
 * support; the kernels then only check what depends on the data. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/validate.h"

typedef enum CpuKind { CPU_RAW = 0, CPU_MATH = 1 } CpuKind;

/* dtype classes of the op's type T that the kernel implements */
#define TF 1u /* fp16, bf16, fp32, fp64 */
#define TI 2u /* integers (not bool) */
#define TB 4u /* bool */
#define TALL (TF | TI | TB)

typedef struct CpuEntry {
  ApxCpuKernel fn;
  uint8_t kind;  /* CpuKind */
  uint8_t types; /* TF | TI | TB */
} CpuEntry;

#define MATH(fn, t) {fn, CPU_MATH, t}
#define RAW(fn, t) {fn, CPU_RAW, t}

static const CpuEntry cpu_table[APX_OP_COUNT] = {
    /* matrix products */
    [APX_OP_Gemm] = MATH(apx_cpu_gemm, TF),
    [APX_OP_MatMul] = MATH(apx_cpu_matmul, TF),
    [APX_OP_FusedMatMul] = MATH(apx_cpu_matmul, TF),
    /* elementwise */
    [APX_OP_Add] = MATH(apx_cpu_binary, TF | TI),
    [APX_OP_Sub] = MATH(apx_cpu_binary, TF | TI),
    [APX_OP_Mul] = MATH(apx_cpu_binary, TF | TI),
    [APX_OP_Div] = MATH(apx_cpu_binary, TF | TI),
    [APX_OP_Pow] = MATH(apx_cpu_binary, TF | TI),
    [APX_OP_Equal] = MATH(apx_cpu_binary, TALL),
    [APX_OP_Sum] = MATH(apx_cpu_sum, TF | TI),
    [APX_OP_Neg] = MATH(apx_cpu_unary, TF | TI),
    [APX_OP_Relu] = MATH(apx_cpu_unary, TF),
    /* every op of kind EW_UNARY / EW_UNARY_GRAD (ops.def) */
#define IO(a, b, c, d)
#define APX_KIND_OWN(ID)
#define APX_KIND_EW_UNARY(ID) [APX_OP_##ID] = MATH(apx_cpu_unary, TF),
#define APX_KIND_EW_UNARY_GRAD(ID) [APX_OP_##ID] = MATH(apx_cpu_unary_grad, TF),
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) APX_KIND_##KIND(ID)
#include "kernels/ops.def"
#undef APX_OP
#undef APX_KIND_EW_UNARY
#undef APX_KIND_EW_UNARY_GRAD
#undef APX_KIND_OWN
#undef IO
    [APX_OP_PowGrad] = MATH(apx_cpu_pow_grad, TF),
    /* v1.1 comparison, logic and selection ops (compare.c): raw kernels in the tensors' own
     * types (exact in every dtype); bool-output ops check their input types themselves */
    [APX_OP_Less] = RAW(apx_cpu_compare, TALL),
    [APX_OP_LessOrEqual] = RAW(apx_cpu_compare, TALL),
    [APX_OP_Greater] = RAW(apx_cpu_compare, TALL),
    [APX_OP_GreaterOrEqual] = RAW(apx_cpu_compare, TALL),
    [APX_OP_Not] = RAW(apx_cpu_logic, TALL),
    [APX_OP_And] = RAW(apx_cpu_logic, TALL),
    [APX_OP_Or] = RAW(apx_cpu_logic, TALL),
    [APX_OP_IsNaN] = RAW(apx_cpu_isclass, TALL),
    [APX_OP_IsInf] = RAW(apx_cpu_isclass, TALL),
    [APX_OP_Min] = RAW(apx_cpu_minmax, TF | TI),
    [APX_OP_Max] = RAW(apx_cpu_minmax, TF | TI),
    [APX_OP_Clip] = RAW(apx_cpu_clip, TF | TI),
    [APX_OP_Mod] = RAW(apx_cpu_mod, TF | TI),
    [APX_OP_ClipGrad] = MATH(apx_cpu_clip_grad, TF),
    [APX_OP_MinMaxGrad] = MATH(apx_cpu_minmax_grad, TF),
    [APX_OP_CastLike] = RAW(apx_cpu_cast, TALL), /* a Cast once canonicalized: never in a plan */
    /* normalization, softmax, losses */
    [APX_OP_Softmax] = MATH(apx_cpu_softmax, TF),
    [APX_OP_LogSoftmax] = MATH(apx_cpu_softmax, TF),
    [APX_OP_SoftmaxGrad] = MATH(apx_cpu_softmax_grad, TF),
    [APX_OP_LogSoftmaxGrad] = MATH(apx_cpu_softmax_grad, TF),
    [APX_OP_LayerNormalization] = MATH(apx_cpu_layer_norm, TF),
    [APX_OP_LayerNormGrad] = MATH(apx_cpu_layer_norm_grad, TF),
    [APX_OP_BatchNormalization] = MATH(apx_cpu_batch_norm, TF),
    [APX_OP_BatchNormGrad] = MATH(apx_cpu_batch_norm_grad, TF),
    [APX_OP_BatchNormRelu] = MATH(apx_cpu_batch_norm, TF),
    [APX_OP_BatchNormReluGrad] = MATH(apx_cpu_batch_norm_relu_grad, TF),
    [APX_OP_SoftmaxCrossEntropyLoss] = MATH(apx_cpu_loss, TF),
    [APX_OP_NegativeLogLikelihoodLoss] = MATH(apx_cpu_loss, TF),
    [APX_OP_SoftmaxCrossEntropyLossGrad] = MATH(apx_cpu_loss_grad, TF),
    [APX_OP_NegativeLogLikelihoodLossGrad] = MATH(apx_cpu_loss_grad, TF),
    [APX_OP_Dropout] = MATH(apx_cpu_dropout, TF),
    [APX_OP_DropoutGrad] = MATH(apx_cpu_dropout_grad, TF),
    /* convolution and pooling */
    [APX_OP_Conv] = MATH(apx_cpu_conv, TF),
    [APX_OP_ConvGrad] = MATH(apx_cpu_conv_grad, TF),
    [APX_OP_ConvBiasRelu] = MATH(apx_cpu_conv, TF),
    [APX_OP_ConvBiasReluGrad] = MATH(apx_cpu_conv_bias_relu_grad, TF),
    [APX_OP_ConvTranspose] = MATH(apx_cpu_conv_transpose, TF),
    [APX_OP_ConvTransposeGrad] = MATH(apx_cpu_conv_transpose_grad, TF),
    [APX_OP_MaxPool] = MATH(apx_cpu_pool, TF | TI),
    [APX_OP_AveragePool] = MATH(apx_cpu_pool, TF),
    [APX_OP_MaxPoolGrad] = MATH(apx_cpu_pool_grad, TF),
    [APX_OP_AveragePoolGrad] = MATH(apx_cpu_pool_grad, TF),
    [APX_OP_GlobalAveragePool] = MATH(apx_cpu_global_avg_pool, TF),
    [APX_OP_GlobalAveragePoolGrad] = MATH(apx_cpu_global_avg_pool_grad, TF),
    /* reductions */
    [APX_OP_ReduceSum] = MATH(apx_cpu_reduce, TF | TI),
    [APX_OP_ReduceMean] = MATH(apx_cpu_reduce, TF | TI),
    [APX_OP_ReduceSumTo] = MATH(apx_cpu_reduce_sum_to, TF),
    /* data movement (any dtype, by element size) */
    [APX_OP_Flatten] = RAW(apx_cpu_copy, TALL),
    [APX_OP_Reshape] = RAW(apx_cpu_copy, TALL),
    [APX_OP_Squeeze] = RAW(apx_cpu_copy, TALL),
    [APX_OP_Unsqueeze] = RAW(apx_cpu_copy, TALL),
    [APX_OP_Identity] = RAW(apx_cpu_copy, TALL),
    [APX_OP_Transpose] = RAW(apx_cpu_transpose, TALL),
    [APX_OP_Concat] = RAW(apx_cpu_concat, TALL),
    [APX_OP_Split] = RAW(apx_cpu_split, TALL),
    [APX_OP_Slice] = RAW(apx_cpu_slice, TALL),
    [APX_OP_SliceGrad] = RAW(apx_cpu_slice_grad, TALL),
    [APX_OP_Gather] = RAW(apx_cpu_gather, TALL),
    [APX_OP_GatherGrad] = MATH(apx_cpu_gather_grad, TF),
    [APX_OP_Expand] = RAW(apx_cpu_expand, TALL),
    [APX_OP_Where] = RAW(apx_cpu_where, TALL),
    [APX_OP_Cast] = RAW(apx_cpu_cast, TALL),
    /* v1.1 data movement, indexing and reductions (indexing.c, reduce.c, dropout.c) */
    [APX_OP_Pad] = RAW(apx_cpu_pad, TALL),
    [APX_OP_PadGrad] = MATH(apx_cpu_pad_grad, TF),
    [APX_OP_Tile] = RAW(apx_cpu_tile, TALL),
    [APX_OP_Trilu] = RAW(apx_cpu_trilu, TALL),
    [APX_OP_GatherElements] = RAW(apx_cpu_gather_elements, TALL),
    [APX_OP_GatherElementsGrad] = MATH(apx_cpu_gather_elements_grad, TF),
    [APX_OP_GatherND] = RAW(apx_cpu_gather_nd, TALL),
    [APX_OP_GatherNDGrad] = MATH(apx_cpu_gather_nd_grad, TF),
    [APX_OP_ReduceMax] = MATH(apx_cpu_reduce_max, TALL),
    [APX_OP_ReduceMaxGrad] = MATH(apx_cpu_reduce_max_grad, TF),
    [APX_OP_RandomUniformLike] = RAW(apx_cpu_random_uniform_like, TF),
    /* v1.1 resampling and contraction (resample.c) */
    [APX_OP_Resize] = MATH(apx_cpu_resize, TF),
    [APX_OP_ResizeGrad] = MATH(apx_cpu_resize_grad, TF),
    [APX_OP_Einsum] = MATH(apx_cpu_einsum, TF),
    /* compile-time folding */
    [APX_OP_Shape] = RAW(apx_cpu_shape, TALL),
    [APX_OP_ConstantOfShape] = RAW(apx_cpu_constant_of_shape, TALL),
    [APX_OP_Range] = MATH(apx_cpu_range, TF | TI),
    /* training step */
    [APX_OP_LossScaleSeed] = MATH(apx_cpu_loss_scale_seed, TF),
    [APX_OP_AssignState] = RAW(apx_cpu_assign_state, TALL),
    [APX_OP_UnscaleCheck] = MATH(apx_cpu_unscale_check, TF),
    [APX_OP_OptimizerStep] = RAW(apx_cpu_optimizer_step, TF),
    /* fused kernels (DESIGN.md 10) */
    [APX_OP_FusedDense] = MATH(apx_cpu_fused_dense, TF),
    [APX_OP_FusedDenseGrad] = MATH(apx_cpu_fused_dense_grad, TF),
    [APX_OP_FusedSoftmax] = MATH(apx_cpu_fused_softmax, TF),
    [APX_OP_FusedSoftmaxGrad] = MATH(apx_cpu_fused_softmax_grad, TF),
    [APX_OP_FusedXentropy] = MATH(apx_cpu_loss, TF),
    [APX_OP_FusedXentropyGrad] = MATH(apx_cpu_loss_grad, TF),
};

void apx_cpu_ctx_init(ApxCpuCtx *ctx) {
  memset(ctx, 0, sizeof *ctx);
}

static unsigned dtype_class(ApxDType dt) {
  if (apx_dtype_is_float(dt)) return TF;
  if (dt == APX_DT_BOOL) return TB;
  if (apx_dtype_is_int(dt)) return TI;
  return 0;
}

int apx_cpu_supports(ApxOp op, ApxDType dt) {
  if ((int)op <= 0 || op >= APX_OP_COUNT || !cpu_table[op].fn) return 0;
  return (cpu_table[op].types & dtype_class(dt)) != 0;
}

/* The type a math kernel sees for a tensor of type dt. */
static ApxDType math_type(ApxDType dt, ApxDType cf) {
  if (apx_dtype_is_float(dt)) return cf;
  if (dt == APX_DT_BOOL) return dt;
  if (apx_dtype_is_int(dt)) return APX_DT_I64;
  return dt;
}

/* Elementwise ops whose tensors all have one element count (no broadcasting, no element
 * index in the math): converted and computed in chunks of ELEM_CHUNK elements that stay in
 * cache, instead of whole-tensor scratch copies. Each chunk is one serial kernel call on
 * 1-D views; chunks are independent, so results equal the whole-tensor path bit for bit. */
#define ELEM_CHUNK 2048
#define ELEM_MAX_IO 4

static int elementwise_chunkable(ApxOp op, const ApxTensor *ins, int n_in, const ApxTensor *outs,
                                 int n_out, int64_t *numel) {
  if (!(apx_op_info(op)->flags & APX_OPF_ELEMWISE) || n_in + n_out > ELEM_MAX_IO || n_out < 1 ||
      !outs[0].data)
    return 0;
  int64_t n = apx_tensor_numel(&outs[0]);
  for (int i = 0; i < n_in; i++)
    if (!ins[i].data || apx_tensor_numel(&ins[i]) != n) return 0;
  for (int i = 0; i < n_out; i++)
    if (!outs[i].data || apx_tensor_numel(&outs[i]) != n) return 0;
  *numel = n;
  return n > 0;
}

static ApxStatus run_chunked(ApxCpuCtx *ctx, const CpuEntry *e, ApxOp op, const void *attrs,
                             const ApxTensor *ins, int n_in, ApxTensor *outs, int n_out,
                             ApxDType cf, int64_t n) {
  int nt = apx_cpu_threads(ctx);
  int64_t nch = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
  ApxStatus first = APX_STATUS_OK;
  char err[sizeof ctx->err] = "";
  APX_OMP_FOR(n > APX_CPU_PAR_WORK && nch > 1)
  for (int64_t c = 0; c < nch; c++) {
    int64_t off = c * ELEM_CHUNK, len = n - off < ELEM_CHUNK ? n - off : ELEM_CHUNK;
    uint64_t buf[ELEM_MAX_IO][ELEM_CHUNK]; /* 8-byte aligned, room for any math type */
    ApxTensor t[ELEM_MAX_IO];
    for (int i = 0; i < n_in + n_out; i++) {
      const ApxTensor *src = i < n_in ? &ins[i] : &outs[i - n_in];
      ApxDType mt = math_type(src->dtype, cf);
      t[i] = *src;
      t[i].rank = 1;
      t[i].dims[0] = len;
      t[i].dtype = mt;
      size_t es = apx_dtype_size(src->dtype);
      char *p = (char *)src->data + (size_t)off * es;
      if (mt == src->dtype) {
        t[i].data = p;
      } else {
        t[i].data = buf[i];
        if (i < n_in) apx_cpu_convert_nt(p, src->dtype, buf[i], mt, len, 1);
      }
    }
    ApxCpuCtx c1 = *ctx;
    c1.n_threads = 1;
    ApxStatus st = e->fn(&c1, op, attrs, t, n_in, t + n_in, n_out);
    if (st == APX_STATUS_OK) {
      for (int o = 0; o < n_out; o++)
        if (t[n_in + o].data == buf[n_in + o])
          apx_cpu_convert_nt(buf[n_in + o], t[n_in + o].dtype,
                             (char *)outs[o].data + (size_t)off * apx_dtype_size(outs[o].dtype),
                             outs[o].dtype, len, 1);
    } else {
#pragma omp critical(apx_chunk_err)
      if (first == APX_STATUS_OK) {
        first = st;
        memcpy(err, c1.err, sizeof err);
      }
    }
  }
  if (first != APX_STATUS_OK) memcpy(ctx->err, err, sizeof err);
  return first;
}

static ApxStatus run_math(ApxCpuCtx *ctx, const CpuEntry *e, ApxOp op, const void *attrs,
                          const ApxTensor *ins, int n_in, ApxTensor *outs, int n_out) {
  ApxDType cf = APX_DT_F32;
  for (int i = 0; i < n_in; i++)
    if (ins[i].data && ins[i].dtype == APX_DT_F64) cf = APX_DT_F64;
  for (int i = 0; i < n_out; i++)
    if (outs[i].data && outs[i].dtype == APX_DT_F64) cf = APX_DT_F64;
  int64_t numel = 0;
  int convert = 0;
  for (int i = 0; i < n_in; i++)
    convert |= ins[i].data && math_type(ins[i].dtype, cf) != ins[i].dtype;
  for (int i = 0; i < n_out; i++)
    convert |= outs[i].data && math_type(outs[i].dtype, cf) != outs[i].dtype;
  if (convert && elementwise_chunkable(op, ins, n_in, outs, n_out, &numel))
    return run_chunked(ctx, e, op, attrs, ins, n_in, outs, n_out, cf, numel);

  int n = n_in + n_out;
  ApxTensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
  void **scratch = calloc((size_t)(n ? n : 1), sizeof *scratch);
  if (!t || !scratch) {
    free(t);
    free(scratch);
    return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  }
  ApxTensor *nin = t, *nout = t + n_in;
  ApxStatus st = APX_STATUS_OK;
  int nt = apx_cpu_threads(ctx);
  for (int i = 0; i < n && st == APX_STATUS_OK; i++) {
    const ApxTensor *src = i < n_in ? &ins[i] : &outs[i - n_in];
    t[i] = *src;
    if (!src->data) continue;
    ApxDType mt = math_type(src->dtype, cf);
    if (mt == src->dtype) continue;
    int64_t numel = apx_tensor_numel(src);
    size_t bytes = (size_t)numel * apx_dtype_size(mt);
    scratch[i] = malloc(bytes ? bytes : 1);
    if (!scratch[i]) {
      st = apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory (%zu bytes of scratch)", bytes);
      break;
    }
    if (i < n_in) apx_cpu_convert_nt(src->data, src->dtype, scratch[i], mt, numel, nt);
    t[i].data = scratch[i];
    t[i].dtype = mt;
  }
  if (st == APX_STATUS_OK) st = e->fn(ctx, op, attrs, nin, n_in, nout, n_out);
  if (st == APX_STATUS_OK)
    for (int o = 0; o < n_out; o++)
      if (scratch[n_in + o])
        apx_cpu_convert_nt(scratch[n_in + o], nout[o].dtype, outs[o].data, outs[o].dtype,
                           apx_tensor_numel(&outs[o]), nt);
  for (int i = 0; i < n; i++) free(scratch[i]);
  free(scratch);
  free(t);
  return st;
}

/* The op's type T (apx_cpu_supports): Equal's inputs, else the first present output, else
 * input 0; UNDEFINED for ops that take any type (Cast, Shape, ConstantOfShape, AssignState). */
static ApxDType op_type(ApxOp op, const ApxTensor *ins, int n_in, const ApxTensor *outs,
                        int n_out) {
  if (cpu_table[op].types == TALL) return APX_DT_UNDEFINED;
  if (op == APX_OP_Equal) return n_in > 0 && ins[0].data ? ins[0].dtype : APX_DT_UNDEFINED;
  for (int i = 0; i < n_out; i++)
    if (outs[i].data) return outs[i].dtype;
  return n_in > 0 && ins[0].data ? ins[0].dtype : APX_DT_UNDEFINED;
}

int apx_cpu_supports_call(ApxOp op, const ApxTensor *ins, int n_in, const ApxTensor *outs,
                          int n_out) {
  if ((int)op <= 0 || op >= APX_OP_COUNT || !cpu_table[op].fn) return 0;
  ApxDType t = op_type(op, ins, n_in, outs, n_out);
  return t == APX_DT_UNDEFINED || (cpu_table[op].types & dtype_class(t)) != 0;
}

ApxStatus apx_cpu_run(ApxCpuCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins,
                      int n_in, ApxTensor *outs, int n_out) {
  char *err = ctx->err;
  size_t cap = sizeof ctx->err;
  err[0] = '\0';
  if (apx_kernel_check_op(op, err, cap) != APX_STATUS_OK) return APX_STATUS_BAD_INPUT;
  const CpuEntry *e = &cpu_table[op];
  ApxStatus st;
  if (!e->fn) {
    st = apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on the CPU backend");
  } else if ((st = apx_kernel_check_args(op, attrs, ins, n_in, outs, n_out, err, cap)) ==
             APX_STATUS_OK) {
    ApxDType t = op_type(op, ins, n_in, outs, n_out);
    if (t != APX_DT_UNDEFINED && !(e->types & dtype_class(t)))
      st = apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s",
                        apx_dtype_name(t));
    if (!st) st = apx_kernel_check_contract(op, attrs, ins, n_in, outs, n_out, err, cap);
    if (!st)
      st = e->kind == CPU_MATH ? run_math(ctx, e, op, attrs, ins, n_in, outs, n_out)
                               : e->fn(ctx, op, attrs, ins, n_in, outs, n_out);
  }
  if (st != APX_STATUS_OK) apx_kernel_error_prefix(op, err, cap);
  return st;
}
