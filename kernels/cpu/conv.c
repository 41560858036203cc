/* conv.c - Conv(X, W, B?) -> Y and ConvBiasRelu (same, then Relu), 2-D (N, C, H, W) with
 * groups, pads, strides, dilations; ConvGrad(dY, X, W) -> dX?, dW?, dB?;
 * ConvBiasReluGrad(dY, Y, X, W) -> ConvGrad of dY * (Y > 0). im2col + OpenBLAS
 * GEMM (fp32 accumulation for half tensors, rounded once by dispatch.c). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ew_math.h"

typedef struct ConvGeom {
  int64_t N, C, H, W, M, OH, OW, G, Cg, Mg;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl;
  int pointwise; /* 1x1, stride 1, no padding: col is X itself */
} ConvGeom;

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

static int64_t one_if_zero(int64_t v) { return v ? v : 1; }

/* x (N, C, H, W), w (M, C / group, kh, kw), y (N, M, OH, OW) */
static ApxStatus conv_geom(ApxCpuCtx *ctx, const ApxAttrConv *a, const ApxTensor *x,
                           const ApxTensor *w, const ApxTensor *y, ConvGeom *g) {
  char sx[96], sw[96], sy[96];
  if (x->rank != 4 || w->rank != 4 || y->rank != 4)
    return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED,
                        "not supported yet: convolution of rank %d (only 2-D, rank 4)", x->rank);
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->H = x->dims[2];
  g->W = x->dims[3];
  g->M = w->dims[0];
  g->kh = w->dims[2];
  g->kw = w->dims[3];
  g->OH = y->dims[2];
  g->OW = y->dims[3];
  g->G = one_if_zero(a->group);
  g->sh = one_if_zero(a->strides[0]);
  g->sw = one_if_zero(a->strides[1]);
  g->dh = one_if_zero(a->dilations[0]);
  g->dw = one_if_zero(a->dilations[1]);
  g->pt = a->pads[0];
  g->pl = a->pads[1];
  int64_t pb = a->pads[2], pr = a->pads[3];
  int bad = g->G < 1 || g->C % g->G || g->M % g->G || g->sh < 1 || g->sw < 1 || g->dh < 1 ||
            g->dw < 1 || g->pt < 0 || g->pl < 0 || pb < 0 || pr < 0;
  if (!bad) {
    g->Cg = g->C / g->G;
    g->Mg = g->M / g->G;
    bad = w->dims[1] != g->Cg || (a->kernel[0] && a->kernel[0] != g->kh) ||
          (a->kernel[1] && a->kernel[1] != g->kw) || y->dims[0] != g->N || y->dims[1] != g->M;
  }
  if (!bad) {
    int64_t sph = g->H + g->pt + pb - (g->kh - 1) * g->dh - 1;
    int64_t spw = g->W + g->pl + pr - (g->kw - 1) * g->dw - 1;
    bad = sph < 0 || spw < 0 || g->OH != sph / g->sh + 1 || g->OW != spw / g->sw + 1;
  }
  if (bad)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT,
                        "shapes/attributes do not match: X %s, W %s, Y %s, group %lld",
                        apx_cpu_dims_str(x, sx, sizeof sx), apx_cpu_dims_str(w, sw, sizeof sw),
                        apx_cpu_dims_str(y, sy, sizeof sy), (long long)a->group);
  g->pointwise = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 &&
                 g->pl == 0 && pb == 0 && pr == 0;
  int64_t Kc = g->Cg * g->kh * g->kw;
  if (Kc > 0x7fffffff || g->OH * g->OW > 0x7fffffff || g->Mg > 0x7fffffff)
    return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: dims beyond 2^31");
  return APX_STATUS_OK;
}

static ApxStatus same_type(ApxCpuCtx *ctx, const ApxTensor *t, ApxDType dt, const char *what) {
  if (!t->data || t->dtype == dt) return APX_STATUS_OK;
  return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "%s has type %s, expected %s", what,
                      apx_dtype_name(t->dtype), apx_dtype_name(dt));
}

/* im2col scratch: nbuf buffers of Kc * OHW elements (one per thread for the parallel paths) */
static void *alloc_col(const ConvGeom *g, size_t es, int nbuf) {
  size_t n = g->pointwise ? 1 : (size_t)(g->Cg * g->kh * g->kw * g->OH * g->OW);
  return malloc((n ? n : 1) * es * (size_t)(nbuf > 0 ? nbuf : 1));
}

/* Conv, ConvBiasRelu */
APX_CPU_KERNEL(apx_cpu_conv) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_in(ctx, ins, n_in, 1)) ||
      (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  ConvGeom g;
  ApxDType dt = outs[0].dtype;
  const ApxTensor *b = apx_cpu_has(ins, n_in, 2) ? &ins[2] : NULL;
  if ((s = conv_geom(ctx, attrs, &ins[0], &ins[1], &outs[0], &g)) ||
      (s = same_type(ctx, &ins[0], dt, "X")) || (s = same_type(ctx, &ins[1], dt, "W")) ||
      (b && (s = same_type(ctx, b, dt, "B"))))
    return s;
  if (b && apx_tensor_numel(b) != g.M)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "B must have M = %lld elements", (long long)g.M);
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
  for (int i = 0; i < 3; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  ConvGeom g;
  ApxDType dt = ins[0].dtype;
  if ((s = conv_geom(ctx, attrs, &ins[1], &ins[2], &ins[0], &g)) ||
      (s = same_type(ctx, &ins[1], dt, "X")) || (s = same_type(ctx, &ins[2], dt, "W")))
    return s;
  void *dx = apx_cpu_has(outs, n_out, 0) ? outs[0].data : NULL;
  void *dw = apx_cpu_has(outs, n_out, 1) ? outs[1].data : NULL;
  void *db = apx_cpu_has(outs, n_out, 2) ? outs[2].data : NULL;
  if ((dx && (!apx_cpu_same_dims(&outs[0], &ins[1]) || outs[0].dtype != dt)) ||
      (dw && (!apx_cpu_same_dims(&outs[1], &ins[2]) || outs[1].dtype != dt)) ||
      (db && (apx_tensor_numel(&outs[2]) != g.M || outs[2].dtype != dt)))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "dX / dW / dB must match X / W / (M)");
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
  for (int i = 0; i < 4; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  if (!apx_cpu_same_dims(&ins[0], &ins[1]) || ins[0].dtype != ins[1].dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "dY and Y must have one shape and type");
  void *g = apx_cpu_relu_mask_grad(&ins[0], &ins[1], apx_cpu_threads(ctx));
  if (!g) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  ApxTensor rest[3] = {ins[0], ins[2], ins[3]};
  rest[0].data = g;
  s = apx_cpu_conv_grad(ctx, APX_OP_ConvGrad, attrs, rest, 3, outs, n_out);
  free(g);
  return s;
}
