/* conv.c - Conv(X, W, B?) -> Y and ConvBiasRelu (same, then Relu), 3-D (N, C, D, H, W), 2-D
 * (N, C, H, W) or 1-D (N, C, L: depth and height 1, kernels/shape.h) with
 * groups, pads, strides, dilations; ConvGrad(dY, X, W) -> dX?, dW?, dB?;
 * ConvBiasReluGrad(dY, Y, X, W) -> ConvGrad of dY * (Y > 0); ConvTranspose(X, W, B?) -> Y and
 * ConvTransposeGrad(dY, X, W) -> dX?, dW?, dB? through the adjoint convolution's geometry. im2col + OpenBLAS
 * GEMM, or direct loops for depthwise convolutions (fp32 accumulation for half tensors, rounded
 * once by dispatch.c). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ew_math.h"

/* Depthwise convolutions (one input channel per group, at most 4 filters each: MobileNet's,
 * EfficientNet's) run directly (conv_real.inc's dw_conv*), with no im2col scratch; the other
 * groupings through im2col + GEMM. */
static int conv_is_depthwise(const ApxConvGeom *g) { /* 1-D and 2-D windows (3-D: im2col3) */
  return g->Cg == 1 && g->G > 1 && g->Mg <= 4 && !g->depth;
}

/* for (p_ = 0; p_ < n; p_++) call; over nt threads when par, else without entering an
 * OpenMP region (libgomp builds a team even for one thread: a malloc and a futex wake) */
#define CONV_FOR(par, n, call)                                          \
  do {                                                                  \
    if (nt > 1 && (par)) {                                              \
      APX_OMP_FOR(1)                                                    \
      for (int64_t p_ = 0; p_ < (n); p_++) call;                        \
    } else {                                                            \
      for (int64_t p_ = 0; p_ < (n); p_++) call;                        \
    }                                                                   \
  } while (0)

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/gemm_real.inc"
#include "kernels/cpu/conv_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/gemm_real.inc"
#include "kernels/cpu/conv_real.inc"
#include "kernels/cpu/real_end.h"

/* The GEMM sizes of geometry g in int range (OpenBLAS). */
static ApxStatus gemm_sizes(ApxCpuCtx *ctx, const ApxConvGeom *g) {
  int64_t Kc = g->Cg * g->kd * g->kh * g->kw;
  if (Kc > 0x7fffffff || g->OD * g->OH * g->OW > 0x7fffffff || g->Mg > 0x7fffffff)
    return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: dims beyond 2^31");
  return APX_STATUS_OK;
}

/* x (N, C, H, W), w (M, C / group, kh, kw), y (N, M, OH, OW): kernels/shape.h's geometry
 * (checked by kernels/validate.h), with the GEMM sizes in int range. */
static ApxStatus conv_geom(ApxCpuCtx *ctx, const ApxAttrConv *a, const ApxTensor *x,
                           const ApxTensor *w, const ApxTensor *y, ApxConvGeom *g) {
  ApxStatus s = apx_shape_status(apx_conv_geom(a, x, w, y, g, ctx->err, sizeof ctx->err));
  return s ? s : gemm_sizes(ctx, g);
}

/* ConvTranspose's: x (N, C_in, IH, IW), w (C_in, C_out / group, kh, kw), y (N, C_out, OH, OW)
 * as the adjoint convolution (input y, output x). */
static ApxStatus conv_transpose_geom(ApxCpuCtx *ctx, const ApxAttrConvTranspose *a,
                                     const ApxTensor *x, const ApxTensor *w, const ApxTensor *y,
                                     ApxConvGeom *g) {
  ApxStatus s =
      apx_shape_status(apx_conv_transpose_geom(a, x, w, y, g, ctx->err, sizeof ctx->err));
  return s ? s : gemm_sizes(ctx, g);
}

/* im2col scratch: nbuf buffers of Kc * OHW elements (one per thread for the parallel paths) */
static void *alloc_col(const ApxConvGeom *g, size_t es, int nbuf) {
  size_t n = g->pointwise || conv_is_depthwise(g) ? 1
                                                 : (size_t)(g->Cg * g->kd * g->kh * g->kw * g->OD * g->OH * g->OW);
  return malloc((n ? n : 1) * es * (size_t)(nbuf > 0 ? nbuf : 1));
}

/* Conv, ConvBiasRelu */
APX_CPU_KERNEL(apx_cpu_conv) {
  ApxStatus s;
  ApxConvGeom g;
  ApxDType dt = outs[0].dtype;
  const ApxTensor *b = apx_cpu_has(ins, n_in, 2) ? &ins[2] : NULL;
  if ((s = conv_geom(ctx, attrs, &ins[0], &ins[1], &outs[0], &g))) return s;
  int nt = apx_cpu_threads(ctx), relu = op == APX_OP_ConvBiasRelu;
  int par = dt == APX_DT_F64 ? conv_pairs_parallel_f64(&g, nt) : conv_pairs_parallel_f32(&g, nt);
  void *col = alloc_col(&g, apx_dtype_size(dt), par ? nt : 1);
  if (!col) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory (im2col buffer)");
  if (dt == APX_DT_F64)
    conv_f64(&g, ins[0].data, ins[1].data, b ? b->data : NULL, outs[0].data, col, relu, nt);
  else
    conv_f32(&g, ins[0].data, ins[1].data, b ? b->data : NULL, outs[0].data, col, relu, nt);
  free(col);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_conv_grad) {
  ApxStatus s;
  ApxConvGeom g;
  ApxDType dt = ins[0].dtype;
  if ((s = conv_geom(ctx, attrs, &ins[1], &ins[2], &ins[0], &g))) return s;
  void *dx = apx_cpu_has(outs, n_out, 0) ? outs[0].data : NULL;
  void *dw = apx_cpu_has(outs, n_out, 1) ? outs[1].data : NULL;
  void *db = apx_cpu_has(outs, n_out, 2) ? outs[2].data : NULL;
  void *col = alloc_col(&g, apx_dtype_size(dt), 1);
  if (!col) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory (im2col buffer)");
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    conv_grad_f64(&g, ins[0].data, ins[1].data, ins[2].data, dx, dw, db, col, nt);
  else
    conv_grad_f32(&g, ins[0].data, ins[1].data, ins[2].data, dx, dw, db, col, nt);
  free(col);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_conv_bias_relu_grad) {
  ApxStatus s;
  void *g = apx_cpu_relu_mask_grad(&ins[0], &ins[1], apx_cpu_threads(ctx));
  if (!g) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  ApxTensor rest[3] = {ins[0], ins[2], ins[3]};
  rest[0].data = g;
  s = apx_cpu_conv_grad(ctx, APX_OP_ConvGrad, attrs, rest, 3, outs, n_out);
  free(g);
  return s;
}

APX_CPU_KERNEL(apx_cpu_conv_transpose) {
  ApxStatus s;
  ApxConvGeom g;
  ApxDType dt = outs[0].dtype;
  const ApxTensor *b = apx_cpu_has(ins, n_in, 2) ? &ins[2] : NULL;
  (void)op;
  if ((s = conv_transpose_geom(ctx, attrs, &ins[0], &ins[1], &outs[0], &g))) return s;
  void *col = alloc_col(&g, apx_dtype_size(dt), 1);
  if (!col) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory (im2col buffer)");
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    conv_transpose_f64(&g, ins[0].data, ins[1].data, b ? b->data : NULL, outs[0].data, col, nt);
  else
    conv_transpose_f32(&g, ins[0].data, ins[1].data, b ? b->data : NULL, outs[0].data, col, nt);
  free(col);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_conv_transpose_grad) {
  ApxStatus s;
  ApxConvGeom g;
  ApxDType dt = ins[0].dtype;
  (void)op;
  if ((s = conv_transpose_geom(ctx, attrs, &ins[1], &ins[2], &ins[0], &g))) return s;
  void *dx = apx_cpu_has(outs, n_out, 0) ? outs[0].data : NULL;
  void *dw = apx_cpu_has(outs, n_out, 1) ? outs[1].data : NULL;
  void *db = apx_cpu_has(outs, n_out, 2) ? outs[2].data : NULL;
  int nt = apx_cpu_threads(ctx);
  int par = dt == APX_DT_F64 ? conv_pairs_parallel_f64(&g, nt) : conv_pairs_parallel_f32(&g, nt);
  void *col = alloc_col(&g, apx_dtype_size(dt), par ? nt : 1);
  if (!col) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory (im2col buffer)");
  if (dt == APX_DT_F64)
    conv_transpose_grad_f64(&g, ins[0].data, ins[1].data, ins[2].data, dx, dw, db, col, nt);
  else
    conv_transpose_grad_f32(&g, ins[0].data, ins[1].data, ins[2].data, dx, dw, db, col, nt);
  free(col);
  return APX_STATUS_OK;
}
