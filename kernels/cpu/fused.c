/* fused.c - fused kernels (DESIGN.md 10), each equal to its unfused composition up to
 * rounding (the fused result is rounded once):
 *   FusedDense(X, W, B?) -> Y, Aux?     Y = act(alpha X @ op(W) + beta B), Aux = the
 *                                       pre-activation (needed by the GELU gradients)
 *   FusedDenseGrad(dY, X, W, T) -> dX?, dW?, dB?   T = Y (NONE, RELU) or Aux (GELUs)
 *   FusedSoftmax(X, Mask?) -> Y         softmax(X * scale + Mask) along the last axis
 *   FusedSoftmaxGrad(dY, Y) -> dX       scale * SoftmaxGrad(dY, Y)
 * (FusedXentropy is in loss.c, BatchNormRelu in norm.c, ConvBiasRelu in conv.c.) */
#include <cblas.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ew_math.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/gemm_real.inc"
#include "kernels/cpu/softmax_real.inc"
#include "kernels/cpu/fused_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/gemm_real.inc"
#include "kernels/cpu/softmax_real.inc"
#include "kernels/cpu/fused_real.inc"
#include "kernels/cpu/real_end.h"

/* X (..., K), W (K, N) or (N, K), Y (..., N) (checked by kernels/validate.h): rows M, N, K */
static void dense_shape(const ApxAttrFusedDense *a, const ApxTensor *x, const ApxTensor *w,
                        int64_t *M, int64_t *N, int64_t *K) {
  *K = x->dims[x->rank - 1];
  *N = a->trans_w ? w->dims[0] : w->dims[1];
  *M = apx_tensor_numel(x) / (*K ? *K : 1);
}

APX_CPU_KERNEL(apx_cpu_fused_dense) {
  const ApxAttrFusedDense *a = attrs;
  int64_t M = 0, N = 0, K = 0;
  dense_shape(a, &ins[0], &ins[1], &M, &N, &K);
  const ApxTensor *b = apx_cpu_has(ins, n_in, 2) ? &ins[2] : NULL;
  ApxTensor *aux = apx_cpu_has(outs, n_out, 1) ? &outs[1] : NULL;
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    fused_dense_f64(ins[0].data, ins[1].data, b ? b->data : NULL, outs[0].data,
                    aux ? aux->data : NULL, M, N, K, a->trans_w, a->activation, a->alpha, a->beta, nt);
  else
    fused_dense_f32(ins[0].data, ins[1].data, b ? b->data : NULL, outs[0].data,
                    aux ? aux->data : NULL, M, N, K, a->trans_w, a->activation, a->alpha, a->beta, nt);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_fused_dense_grad) {
  const ApxAttrFusedDense *a = attrs;
  int64_t M = 0, N = 0, K = 0;
  dense_shape(a, &ins[1], &ins[2], &M, &N, &K);
  void *dx = apx_cpu_has(outs, n_out, 0) ? outs[0].data : NULL;
  void *dw = apx_cpu_has(outs, n_out, 1) ? outs[1].data : NULL;
  void *db = apx_cpu_has(outs, n_out, 2) ? outs[2].data : NULL;
  size_t es = apx_dtype_size(ins[0].dtype);
  int64_t ng = M * N > 0 ? M * N : 1;
  void *g = a->activation != APX_ACT_NONE ? malloc((size_t)ng * es) : NULL;
  if (a->activation != APX_ACT_NONE && !g) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  int nt = apx_cpu_threads(ctx);
  const void *t = a->activation != APX_ACT_NONE ? ins[3].data : NULL;
  if (ins[0].dtype == APX_DT_F64)
    fused_dense_grad_f64(ins[0].data, ins[1].data, ins[2].data, t, dx, dw, db, g, M, N, K,
                         a->trans_w, a->activation, a->alpha, a->beta, nt);
  else
    fused_dense_grad_f32(ins[0].data, ins[1].data, ins[2].data, t, dx, dw, db, g, M, N, K,
                         a->trans_w, a->activation, a->alpha, a->beta, nt);
  free(g);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_fused_softmax) {
  const ApxAttrFusedSoftmax *a = attrs;
  const ApxTensor *x = &ins[0];
  const ApxTensor *mask = a->has_mask && apx_cpu_has(ins, n_in, 1) ? &ins[1] : NULL;
  const ApxTensor *pair[2] = {x, mask};
  ApxBcast bc;
  apx_bcast_init_t(&bc, &outs[0], pair, mask ? 2 : 1, NULL);
  int64_t L = x->dims[x->rank - 1], rows = apx_tensor_numel(x) / (L ? L : 1);
  int nt = apx_cpu_threads(ctx);
  if (x->dtype == APX_DT_F64) {
    scale_mask_f64(&bc, x->data, mask ? mask->data : NULL, a->scale, outs[0].data, nt);
    softmax_f64(0, outs[0].data, outs[0].data, rows, L, 1, nt);
  } else {
    scale_mask_f32(&bc, x->data, mask ? mask->data : NULL, a->scale, outs[0].data, nt);
    softmax_f32(0, outs[0].data, outs[0].data, rows, L, 1, nt);
  }
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_fused_softmax_grad) {
  const ApxAttrFusedSoftmax *a = attrs;
  int64_t L = ins[0].dims[ins[0].rank - 1], rows = apx_tensor_numel(&ins[0]) / (L ? L : 1);
  int64_t n = rows * L;
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64) {
    double *dx = outs[0].data, k = a->scale;
    softmax_grad_f64(0, ins[0].data, ins[1].data, dx, rows, L, 1, nt);
    for (int64_t i = 0; i < n; i++) dx[i] *= k;
  } else {
    float *dx = outs[0].data, k = a->scale;
    softmax_grad_f32(0, ins[0].data, ins[1].data, dx, rows, L, 1, nt);
    for (int64_t i = 0; i < n; i++) dx[i] *= k;
  }
  return APX_STATUS_OK;
}
