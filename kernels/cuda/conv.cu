/* conv.cu - Conv(X, W, B?) -> Y and ConvBiasRelu (then Relu), 3-D (N, C, D, H, W: 5-d
 * descriptors, cudnnSet*NdDescriptor), 2-D (N, C, H, W) or 1-D (N, C, L: 4-d descriptors of
 * height 1, kernels/shape.h) with groups,
 * strides, dilations and symmetric pads, through cuDNN 9's convolution API (cudnn_cnn.h:
 * cudnnConvolutionForward / BackwardData / BackwardFilter); ConvGrad(dY, X, W) -> dX?, dW?,
 * dB? and ConvBiasReluGrad(dY, Y, X, W) = ConvGrad of dY * (Y > 0).
 * Accumulation is fp32 (compute type CUDNN_DATA_FLOAT; tensor cores for fp16 / bf16, plain
 * FMA for fp32 so fp32 results are not TF32). Algorithms come from cuDNN's heuristics
 * (the _v7 queries), restricted to deterministic ones, run with the math type cuDNN ranked
 * them with (for fp32 an FMA-math one first). The bias and ReLU are one kernel
 * after the convolution (for half outputs the convolution's result is rounded before the
 * bias is added: one rounding more than the CPU reference). dB sums dY over (N, H, W) with
 * the deterministic reduction. Asymmetric pads (which this cuDNN API cannot express) are
 * "not supported yet on cuda" unless the floor of the output size absorbs them.
 * ConvTranspose(X, W, B?) -> Y is the backward-data of its adjoint convolution (input Y,
 * output X; kernels/shape.h apx_conv_transpose_geom) plus the bias, ConvTransposeGrad that
 * convolution's forward (dX) and backward-filter (dW) with dB the deterministic reduction;
 * an output_padding at or above the stride (no symmetric twin) is "not supported yet on cuda". */
#include <cudnn.h>

#include "kernels/cuda/reduce.cuh"

#define APX_CUDNN_TRY(ctx, call)                                                              \
  do {                                                                                        \
    cudnnStatus_t apx_d_ = (call);                                                            \
    if (apx_d_ != CUDNN_STATUS_SUCCESS)                                                       \
      return apx_cuda_fail((ctx), APX_STATUS_RUNTIME, "%s: %s (%s:%d)", #call,                \
                           cudnnGetErrorString(apx_d_), __FILE__, __LINE__);                  \
  } while (0)

#define MAX_CONV_WORKSPACE ((size_t)1 << 30)

/* The algorithm to run from cuDNN's ranking (perf[0 .. n), the result of the query named
 * `query`, which returned ds): the first that ran, is deterministic and fits
 * MAX_CONV_WORKSPACE; for fp32 tensors the first such with FMA math is preferred (no TF32,
 * as the CPU), any math type otherwise. Its math type is set on conv (cuDNN runs the
 * algorithm with the descriptor's math type, which must be the one it was ranked with).
 * NULL with *st set when the query failed or none qualifies (`which`: forward, backward-data,
 * backward-filter). The caller runs the query first and passes its count: reading n in the
 * same call that sets it is unspecified order (GCC read n = 0 and dropped every convolution). */
template <typename Perf>
static const Perf *pick_algo(ApxCudaCtx *ctx, cudnnConvolutionDescriptor_t conv, ApxDType dt,
                             cudnnStatus_t ds, const char *query, const Perf *perf, int n,
                             const char *which, ApxStatus *st) {
  if (ds != CUDNN_STATUS_SUCCESS) {
    *st = apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "%s: %s", query, cudnnGetErrorString(ds));
    return NULL;
  }
  const Perf *best = NULL;
  for (int pass = dt == APX_DT_F32 ? 0 : 1; pass < 2 && !best; pass++)
    for (int i = 0; i < n && !best; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
          perf[i].memory <= MAX_CONV_WORKSPACE && (pass == 1 || perf[i].mathType == CUDNN_FMA_MATH))
        best = &perf[i];
  if (!best) {
    *st = apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                        "not supported yet on cuda: no deterministic cuDNN %s algorithm (%d ranked)",
                        which, n);
    return NULL;
  }
  cudnnStatus_t ms = cudnnSetConvolutionMathType(conv, best->mathType);
  if (ms != CUDNN_STATUS_SUCCESS) {
    *st = apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "cudnnSetConvolutionMathType(conv, best->mathType): %s",
                        cudnnGetErrorString(ms));
    return NULL;
  }
  return best;
}

static cudnnDataType_t dnn_type(ApxDType dt) {
  switch (dt) {
    case APX_DT_F16: return CUDNN_DATA_HALF;
    case APX_DT_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

static ApxStatus dnn_handle(ApxCudaCtx *ctx, cudnnHandle_t *h) {
  if (!ctx->dnn) {
    cudnnHandle_t nh = NULL;
    APX_CUDNN_TRY(ctx, cudnnCreate(&nh));
    ctx->dnn = nh;
  }
  *h = (cudnnHandle_t)ctx->dnn;
  APX_CUDNN_TRY(ctx, cudnnSetStream(*h, apx_cu_stream(ctx)));
  return APX_STATUS_OK;
}

typedef struct ConvDescs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
} ConvDescs;

static void conv_destroy(ConvDescs *d) {
  if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
  if (d->w) cudnnDestroyFilterDescriptor(d->w);
  if (d->y) cudnnDestroyTensorDescriptor(d->y);
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
}

/* cuDNN's pads are symmetric. The end pads only decide the output size (every window starts
 * at o * stride - begin pad), so a geometry whose symmetric twin (end pads = begin pads) has
 * the same output size is that convolution exactly: ConvTranspose's adjoint convolutions with
 * output_padding below the stride, and Conv's asymmetric pads that the floor absorbs. */
static int symmetric_equivalent(const ApxConvGeom *g) {
  return apx_window_out(g->D, g->kd, g->sd, g->dd, g->pf, g->pf, APX_WINDOW_FLOOR) == g->OD &&
         apx_window_out(g->H, g->kh, g->sh, g->dh, g->pt, g->pt, APX_WINDOW_FLOOR) == g->OH &&
         apx_window_out(g->W, g->kw, g->sw, g->dw, g->pl, g->pl, APX_WINDOW_FLOOR) == g->OW;
}

static ApxStatus conv_descs(ApxCudaCtx *ctx, const ApxConvGeom *g, ApxDType dt, ConvDescs *d) {
  if ((g->pt != g->pb || g->pl != g->pr || g->pf != g->pk) && !symmetric_equivalent(g)) {
    if (g->depth)
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                           "not supported yet on cuda: asymmetric pads [%lld, %lld, %lld, %lld, %lld, %lld]",
                           (long long)g->pf, (long long)g->pt, (long long)g->pl, (long long)g->pk,
                           (long long)g->pb, (long long)g->pr);
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                         "not supported yet on cuda: asymmetric pads [%lld, %lld, %lld, %lld]",
                         (long long)g->pt, (long long)g->pl, (long long)g->pb, (long long)g->pr);
  }
  if (g->N > 0x7fffffff || g->C > 0x7fffffff || g->H > 0x7fffffff || g->W > 0x7fffffff || g->M > 0x7fffffff ||
      (g->depth && (g->D > 0x7fffffff || g->N * g->C * g->D * g->H * g->W > 0x7fffffff ||
                    g->N * g->M * g->OD * g->OH * g->OW > 0x7fffffff)))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: dims beyond 2^31");
  cudnnDataType_t t = dnn_type(dt);
  APX_CUDNN_TRY(ctx, cudnnCreateTensorDescriptor(&d->x));
  APX_CUDNN_TRY(ctx, cudnnCreateTensorDescriptor(&d->y));
  APX_CUDNN_TRY(ctx, cudnnCreateFilterDescriptor(&d->w));
  APX_CUDNN_TRY(ctx, cudnnCreateConvolutionDescriptor(&d->conv));
  if (g->depth) { /* 5-d NCDHW descriptors, packed strides */
    int xd[5] = {(int)g->N, (int)g->C, (int)g->D, (int)g->H, (int)g->W};
    int yd[5] = {(int)g->N, (int)g->M, (int)g->OD, (int)g->OH, (int)g->OW};
    int wd[5] = {(int)g->M, (int)(g->C / g->G), (int)g->kd, (int)g->kh, (int)g->kw};
    int xs[5], ys[5];
    xs[4] = ys[4] = 1;
    for (int i = 3; i >= 0; i--) {
      xs[i] = xs[i + 1] * xd[i + 1];
      ys[i] = ys[i + 1] * yd[i + 1];
    }
    int pad[3] = {(int)g->pf, (int)g->pt, (int)g->pl}, st[3] = {(int)g->sd, (int)g->sh, (int)g->sw};
    int dil[3] = {(int)g->dd, (int)g->dh, (int)g->dw};
    APX_CUDNN_TRY(ctx, cudnnSetTensorNdDescriptor(d->x, t, 5, xd, xs));
    APX_CUDNN_TRY(ctx, cudnnSetTensorNdDescriptor(d->y, t, 5, yd, ys));
    APX_CUDNN_TRY(ctx, cudnnSetFilterNdDescriptor(d->w, t, CUDNN_TENSOR_NCHW, 5, wd));
    APX_CUDNN_TRY(ctx, cudnnSetConvolutionNdDescriptor(d->conv, 3, pad, st, dil, CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT));
    APX_CUDNN_TRY(ctx, cudnnSetConvolutionGroupCount(d->conv, (int)g->G));
    APX_CUDNN_TRY(ctx, cudnnSetConvolutionMathType(d->conv, dt == APX_DT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    return APX_STATUS_OK;
  }
  APX_CUDNN_TRY(ctx, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, t, (int)g->N, (int)g->C, (int)g->H, (int)g->W));
  APX_CUDNN_TRY(ctx, cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, t, (int)g->N, (int)g->M, (int)g->OH, (int)g->OW));
  APX_CUDNN_TRY(ctx, cudnnSetFilter4dDescriptor(d->w, t, CUDNN_TENSOR_NCHW, (int)g->M, (int)(g->C / g->G),
                                                (int)g->kh, (int)g->kw));
  APX_CUDNN_TRY(ctx, cudnnSetConvolution2dDescriptor(d->conv, (int)g->pt, (int)g->pl, (int)g->sh, (int)g->sw,
                                                     (int)g->dh, (int)g->dw, CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT));
  APX_CUDNN_TRY(ctx, cudnnSetConvolutionGroupCount(d->conv, (int)g->G));
  APX_CUDNN_TRY(ctx, cudnnSetConvolutionMathType(d->conv, dt == APX_DT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  return APX_STATUS_OK;
}

/* ---- the three cuDNN calls (descriptors from conv_descs) ----------------------------------- */

/* One cuDNN convolution call: query(perf, &n) ranks the algorithms (the _v7 query named
 * qname), pick_algo chooses, run(best, workspace) runs it (the call named rname). */
template <typename Perf, typename Query, typename Run>
static ApxStatus run_algo(ApxCudaCtx *ctx, const ConvDescs *d, ApxDType dt, const char *qname,
                          const char *rname, const char *which, Query query, Run run) {
  ApxStatus st = APX_STATUS_OK;
  Perf perf[16];
  int n = 0;
  cudnnStatus_t qs = query(perf, &n);
  const Perf *best = pick_algo(ctx, d->conv, dt, qs, qname, perf, n, which, &st);
  void *ws = NULL;
  if (best && best->memory) st = apx_cuda_tmp(ctx, best->memory, &ws);
  if (best && st == APX_STATUS_OK) {
    cudnnStatus_t ds = run(best, ws);
    if (ds != CUDNN_STATUS_SUCCESS)
      st = apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "%s: %s", rname, cudnnGetErrorString(ds));
  }
  return st;
}

static const float k_one = 1.0f, k_zero = 0.0f;

/* y = conv(x, w) */
static ApxStatus run_forward(ApxCudaCtx *ctx, cudnnHandle_t h, const ConvDescs *d, ApxDType dt,
                             const void *x, const void *w, void *y) {
  typedef cudnnConvolutionFwdAlgoPerf_t P;
  return run_algo<P>(
      ctx, d, dt, "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnConvolutionForward", "forward",
      [&](P *perf, int *n) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, 16, n, perf);
      },
      [&](const P *b, void *ws) {
        return cudnnConvolutionForward(h, &k_one, d->x, x, d->w, w, d->conv, b->algo, ws, b->memory,
                                       &k_zero, d->y, y);
      });
}

/* dx = conv's input gradient for output gradient dy */
static ApxStatus run_backward_data(ApxCudaCtx *ctx, cudnnHandle_t h, const ConvDescs *d, ApxDType dt,
                                   const void *w, const void *dy, void *dx) {
  typedef cudnnConvolutionBwdDataAlgoPerf_t P;
  return run_algo<P>(
      ctx, d, dt, "cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnConvolutionBackwardData",
      "backward-data",
      [&](P *perf, int *n) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->conv, d->x, 16, n, perf);
      },
      [&](const P *b, void *ws) {
        return cudnnConvolutionBackwardData(h, &k_one, d->w, w, d->y, dy, d->conv, b->algo, ws,
                                            b->memory, &k_zero, d->x, dx);
      });
}

/* dw = conv's weight gradient for input x and output gradient dy */
static ApxStatus run_backward_filter(ApxCudaCtx *ctx, cudnnHandle_t h, const ConvDescs *d, ApxDType dt,
                                     const void *x, const void *dy, void *dw) {
  typedef cudnnConvolutionBwdFilterAlgoPerf_t P;
  return run_algo<P>(
      ctx, d, dt, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnConvolutionBackwardFilter",
      "backward-filter",
      [&](P *perf, int *n) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->conv, d->w, 16, n, perf);
      },
      [&](const P *b, void *ws) {
        return cudnnConvolutionBackwardFilter(h, &k_one, d->x, x, d->y, dy, d->conv, b->algo, ws,
                                              b->memory, &k_zero, d->w, dw);
      });
}

/* ---- bias + activation, bias gradient ----------------------------------------------------- */

template <typename T>
APX_CU_KERNEL(conv_bias_act_kernel)(T *y, const void *b, int bdt, int64_t M, int64_t S, int64_t n, int relu) {
  APX_CU_GRID_STRIDE(i, n) {
    float v = ld(y[i]) + (b ? ld_dt(b, bdt, (i / S) % M) : 0.0f);
    y[i] = st<T>(relu ? apx_relu_f32(v) : v);
  }
}

/* y (n elements: planes of S per channel, M channels) += b (any float type), then Relu */
static ApxStatus bias_act(ApxCudaCtx *ctx, ApxDType dt, void *y, const ApxTensor *b, int64_t M, int64_t S,
                          int64_t n, int relu) {
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    conv_bias_act_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (T *)y, b ? b->data : NULL, b ? b->dtype : 0, M, S, n, relu);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- entries ----------------------------------------------------------------------------------- */

static ApxStatus check_types(ApxCudaCtx *ctx, const ApxTensor *a, const ApxTensor *b, ApxDType dt) {
  if (!apx_cu_is_float16(dt))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(dt));
  if (a->dtype != dt || b->dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "X and W must have type %s", apx_dtype_name(dt));
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_conv) {
  ApxConvGeom g;
  ApxDType dt = outs[0].dtype;
  if (apx_conv_geom((const ApxAttrConv *)attrs, &ins[0], &ins[1], &outs[0], &g, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  APX_TRY(check_types(ctx, &ins[0], &ins[1], dt));
  const ApxTensor *b = apx_cu_has(ins, n_in, 2) ? &ins[2] : NULL; /* M floats of any type (ld_dt) */
  int64_t ny = apx_tensor_numel(&outs[0]);
  if (ny == 0) return APX_STATUS_OK;
  cudnnHandle_t h;
  APX_TRY(dnn_handle(ctx, &h));
  ConvDescs d;
  memset(&d, 0, sizeof d);
  ApxStatus st = conv_descs(ctx, &g, dt, &d);
  if (st == APX_STATUS_OK) st = run_forward(ctx, h, &d, dt, ins[0].data, ins[1].data, outs[0].data);
  conv_destroy(&d);
  if (st != APX_STATUS_OK) return st;
  int relu = op == APX_OP_ConvBiasRelu;
  if (b || relu) APX_TRY(bias_act(ctx, dt, outs[0].data, b, g.M, g.OD * g.OH * g.OW, ny, relu));
  return APX_STATUS_OK;
}

/* ConvGrad on gradient g (dY or dY * (Y > 0)); X, W from ins. transpose: ConvTransposeGrad,
 * whose dX is the forward of its adjoint convolution on dY, and dW that convolution's
 * backward-filter with input dY and output gradient X. dB is dY over every axis but 1 either way. */
static ApxStatus conv_grad(ApxCudaCtx *ctx, int transpose, const void *a, const ApxTensor *dy,
                           const void *gdata, const ApxTensor *x, const ApxTensor *w, ApxTensor *outs,
                           int n_out) {
  ApxConvGeom g;
  ApxDType dt = dy->dtype;
  if (transpose ? apx_conv_transpose_geom((const ApxAttrConvTranspose *)a, x, w, dy, &g, ctx->err, sizeof ctx->err)
                : apx_conv_geom((const ApxAttrConv *)a, x, w, dy, &g, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  APX_TRY(check_types(ctx, x, w, dt));
  ApxTensor *dx = apx_cu_has(outs, n_out, 0) ? &outs[0] : NULL;
  ApxTensor *dw = apx_cu_has(outs, n_out, 1) ? &outs[1] : NULL;
  ApxTensor *db = apx_cu_has(outs, n_out, 2) ? &outs[2] : NULL;
  /* shapes: kernels/validate.h; dB may be any float type */
  if ((dx && dx->dtype != dt) || (dw && dw->dtype != dt))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: dX / dW of another type than %s",
                         apx_dtype_name(dt));
  if (db) {
    ApxReducePlan p;
    apx_reduce_plan(&p, dy->dims, dy->rank, ((1u << dy->rank) - 1u) & ~2u); /* all axes but 1 */
    APX_TRY(apx_cuda_reduce_sum(ctx, gdata, dt, &p, 1.0f, APX_CU_SUM, db->data, db->dtype));
  }
  if (!dx && !dw) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  if (apx_tensor_numel(dy) == 0 || apx_tensor_numel(x) == 0) {
    if (dx) APX_CUDA_TRY(ctx, cudaMemsetAsync(dx->data, 0, apx_tensor_bytes(dx), s));
    if (dw) APX_CUDA_TRY(ctx, cudaMemsetAsync(dw->data, 0, apx_tensor_bytes(dw), s));
    return APX_STATUS_OK;
  }
  cudnnHandle_t h;
  APX_TRY(dnn_handle(ctx, &h));
  ConvDescs d;
  memset(&d, 0, sizeof d);
  ApxStatus st = conv_descs(ctx, &g, dt, &d);
  if (st == APX_STATUS_OK && dx)
    st = transpose ? run_forward(ctx, h, &d, dt, gdata, w->data, dx->data)
                   : run_backward_data(ctx, h, &d, dt, w->data, gdata, dx->data);
  if (st == APX_STATUS_OK && dw)
    st = transpose ? run_backward_filter(ctx, h, &d, dt, gdata, x->data, dw->data)
                   : run_backward_filter(ctx, h, &d, dt, x->data, gdata, dw->data);
  conv_destroy(&d);
  return st;
}

APX_CUDA_ENTRY(apx_cuda_conv_grad) {
  if (op == APX_OP_ConvBiasReluGrad) {
    void *g = NULL;
    APX_TRY(apx_cuda_relu_mask(ctx, &ins[0], &ins[1], &g));
    return conv_grad(ctx, 0, attrs, &ins[0], g, &ins[2], &ins[3], outs, n_out);
  }
  return conv_grad(ctx, op == APX_OP_ConvTransposeGrad, attrs, &ins[0], ins[0].data, &ins[1], &ins[2], outs,
                   n_out);
}

/* ---- ConvTranspose: the adjoint convolution (apx_conv_transpose_geom) ---------------------- */

/* Y = backward-data of the convolution whose input has Y's shape and output X's, + B. */
APX_CUDA_ENTRY(apx_cuda_conv_transpose) {
  ApxConvGeom g;
  ApxDType dt = outs[0].dtype;
  (void)op;
  if (apx_conv_transpose_geom((const ApxAttrConvTranspose *)attrs, &ins[0], &ins[1], &outs[0], &g,
                              ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  APX_TRY(check_types(ctx, &ins[0], &ins[1], dt));
  const ApxTensor *b = apx_cu_has(ins, n_in, 2) ? &ins[2] : NULL;
  int64_t ny = apx_tensor_numel(&outs[0]);
  if (ny == 0) return APX_STATUS_OK;
  if (apx_tensor_numel(&ins[0]) == 0) {
    APX_CUDA_TRY(ctx, cudaMemsetAsync(outs[0].data, 0, apx_tensor_bytes(&outs[0]), apx_cu_stream(ctx)));
  } else {
    cudnnHandle_t h;
    APX_TRY(dnn_handle(ctx, &h));
    ConvDescs d;
    memset(&d, 0, sizeof d);
    ApxStatus st = conv_descs(ctx, &g, dt, &d);
    if (st == APX_STATUS_OK) st = run_backward_data(ctx, h, &d, dt, ins[1].data, ins[0].data, outs[0].data);
    conv_destroy(&d);
    if (st != APX_STATUS_OK) return st;
  }
  if (b) APX_TRY(bias_act(ctx, dt, outs[0].data, b, g.C, g.D * g.H * g.W, ny, 0));
  return APX_STATUS_OK;
}
