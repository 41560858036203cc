/* pool.c - MaxPool(X) -> Y, Indices? and AveragePool(X) -> Y, 2-D (N, C, H, W), with pads,
 * strides, dilations, ceil_mode (output dims come from Y), count_include_pad, storage_order;
 * MaxPoolGrad(dY, X) -> dX; AveragePoolGrad(dY) -> dX; GlobalAveragePool(X) -> Y (any
 * spatial rank) and GlobalAveragePoolGrad(dY) -> dX.
 * MaxPool Indices (ONNX): flat indices into X including n and c, ignoring padding; row-major
 * (storage_order 0) or with h and w swapped (storage_order 1). MaxPool also takes integer
 * tensors (as int64 here; compared through double, exact below 2^53). */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

typedef struct PoolGeom {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int storage_order, count_include_pad;
} PoolGeom;

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/pool_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/pool_real.inc"
#include "kernels/cpu/real_end.h"

static int64_t one_if_zero(int64_t v) { return v ? v : 1; }

/* Output size along one dim for floor / ceil mode (ceil: the last window must start inside
 * the input or its begin padding, as in PyTorch and ONNX's reference). */
static int out_size_ok(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                       int ceil_mode, int64_t out) {
  int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
  if (span < 0) return 0;
  int64_t fl = span / s + 1;
  if (!ceil_mode) return out == fl;
  int64_t ce = (span + s - 1) / s + 1;
  if ((ce - 1) * s >= in + p0) ce--;
  return out == ce || out == (span + s - 1) / s + 1;
}

static ApxStatus pool_geom(ApxCpuCtx *ctx, const ApxAttrPool *a, const ApxTensor *x,
                           const ApxTensor *y, PoolGeom *g) {
  char sx[96], sy[96];
  if (x->rank != 4 || y->rank != 4)
    return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED,
                        "not supported yet: pooling of rank %d (only 2-D, rank 4)", x->rank);
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->H = x->dims[2];
  g->W = x->dims[3];
  g->OH = y->dims[2];
  g->OW = y->dims[3];
  g->kh = a->kernel[0];
  g->kw = a->kernel[1];
  g->sh = one_if_zero(a->strides[0]);
  g->sw = one_if_zero(a->strides[1]);
  g->dh = one_if_zero(a->dilations[0]);
  g->dw = one_if_zero(a->dilations[1]);
  g->pt = a->pads[0];
  g->pl = a->pads[1];
  g->pb = a->pads[2];
  g->pr = a->pads[3];
  g->storage_order = a->storage_order;
  g->count_include_pad = a->count_include_pad;
  if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pt < 0 ||
      g->pl < 0 || g->pb < 0 || g->pr < 0)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "bad kernel/strides/dilations/pads");
  if (y->dims[0] != g->N || y->dims[1] != g->C ||
      !out_size_ok(g->H, g->kh, g->sh, g->dh, g->pt, g->pb, a->ceil_mode, g->OH) ||
      !out_size_ok(g->W, g->kw, g->sw, g->dw, g->pl, g->pr, a->ceil_mode, g->OW))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "output %s does not match input %s",
                        apx_cpu_dims_str(y, sy, sizeof sy), apx_cpu_dims_str(x, sx, sizeof sx));
  return APX_STATUS_OK;
}

static ApxStatus same_type(ApxCpuCtx *ctx, const ApxTensor *a, const ApxTensor *b) {
  if (a->dtype == b->dtype) return APX_STATUS_OK;
  return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "types differ: %s and %s",
                      apx_dtype_name(a->dtype), apx_dtype_name(b->dtype));
}

APX_CPU_KERNEL(apx_cpu_pool) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  PoolGeom g;
  if ((s = pool_geom(ctx, attrs, &ins[0], &outs[0], &g)) || (s = same_type(ctx, &ins[0], &outs[0])))
    return s;
  int64_t *idx = NULL;
  if (op == APX_OP_MaxPool && apx_cpu_has(outs, n_out, 1)) {
    if (outs[1].dtype != APX_DT_I64 || !apx_cpu_same_dims(&outs[0], &outs[1]))
      return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "Indices must be int64 of Y's shape");
    idx = outs[1].data;
  }
  int nt = apx_cpu_threads(ctx);
  int f64 = ins[0].dtype == APX_DT_F64;
  if (ins[0].dtype == APX_DT_I64) {
    if (op != APX_OP_MaxPool)
      return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: integer input");
    int64_t nx = apx_tensor_numel(&ins[0]), ny = apx_tensor_numel(&outs[0]);
    double *x = malloc((size_t)(nx + ny + 1) * sizeof(double));
    if (!x) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
    apx_cpu_convert_nt(ins[0].data, APX_DT_I64, x, APX_DT_F64, nx, nt);
    max_pool_f64(&g, x, x + nx, idx, nt);
    apx_cpu_convert_nt(x + nx, APX_DT_F64, outs[0].data, APX_DT_I64, ny, nt);
    free(x);
    return APX_STATUS_OK;
  }
  if (op == APX_OP_MaxPool) {
    if (f64)
      max_pool_f64(&g, ins[0].data, outs[0].data, idx, nt);
    else
      max_pool_f32(&g, ins[0].data, outs[0].data, idx, nt);
  } else {
    if (f64)
      avg_pool_f64(&g, ins[0].data, outs[0].data, nt);
    else
      avg_pool_f32(&g, ins[0].data, outs[0].data, nt);
  }
  return APX_STATUS_OK;
}

/* MaxPoolGrad(dY, X) -> dX; AveragePoolGrad(dY) -> dX */
APX_CPU_KERNEL(apx_cpu_pool_grad) {
  ApxStatus s;
  int is_max = op == APX_OP_MaxPoolGrad;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) ||
      (is_max && (s = apx_cpu_need_in(ctx, ins, n_in, 1))) ||
      (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  PoolGeom g;
  if ((s = pool_geom(ctx, attrs, &outs[0], &ins[0], &g)) || (s = same_type(ctx, &ins[0], &outs[0])))
    return s;
  if (is_max && (!apx_cpu_same_dims(&ins[1], &outs[0]) || ins[1].dtype != outs[0].dtype))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "X and dX must have one shape and type");
  int nt = apx_cpu_threads(ctx);
  const void *x = is_max ? ins[1].data : NULL;
  if (outs[0].dtype == APX_DT_F64)
    pool_grad_f64(&g, ins[0].data, x, outs[0].data, nt);
  else
    pool_grad_f32(&g, ins[0].data, x, outs[0].data, nt);
  return APX_STATUS_OK;
}

/* x (N, C, spatial...) and y (N, C, 1, ...): planes and spatial size, checked. */
static ApxStatus gap_shape(ApxCpuCtx *ctx, const ApxTensor *x, const ApxTensor *y,
                           int64_t *planes, int64_t *S) {
  if (x->rank < 3 || x->dtype != y->dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "X must be (N, C, spatial...) of Y's type");
  *planes = x->dims[0] * x->dims[1];
  *S = apx_cpu_prod(x->dims, 2, x->rank);
  if (apx_tensor_numel(y) != *planes)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "Y must have N * C elements");
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_global_avg_pool) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  int64_t planes = 0, S = 0;
  if ((s = gap_shape(ctx, &ins[0], &outs[0], &planes, &S))) return s;
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    global_avg_pool_f64(ins[0].data, outs[0].data, planes, S, nt);
  else
    global_avg_pool_f32(ins[0].data, outs[0].data, planes, S, nt);
  return APX_STATUS_OK;
}

/* GlobalAveragePoolGrad(dY) -> dX (dX's shape is the forward input's) */
APX_CPU_KERNEL(apx_cpu_global_avg_pool_grad) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  int64_t planes = 0, S = 0;
  if ((s = gap_shape(ctx, &outs[0], &ins[0], &planes, &S))) return s;
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    global_avg_pool_grad_f64(ins[0].data, outs[0].data, planes, S, nt);
  else
    global_avg_pool_grad_f32(ins[0].data, outs[0].data, planes, S, nt);
  return APX_STATUS_OK;
}
