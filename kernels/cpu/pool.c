/* pool.c - MaxPool(X) -> Y, Indices? and AveragePool(X) -> Y, 2-D (N, C, H, W), with pads,
 * strides, dilations, ceil_mode (output dims come from Y), count_include_pad, storage_order;
 * MaxPoolGrad(dY, X) -> dX; AveragePoolGrad(dY) -> dX; GlobalAveragePool(X) -> Y (any
 * spatial rank) and GlobalAveragePoolGrad(dY) -> dX.
 * MaxPool Indices (ONNX): flat indices into X including n and c, ignoring padding; row-major
 * (storage_order 0) or with h and w swapped (storage_order 1). MaxPool also takes integer
 * tensors (as int64 here; compared through double, exact below 2^53). */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

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

/* x (N, C, H, W), y (N, C, OH, OW): kernels/shape.h's geometry. */
static ApxStatus pool_geom(ApxCpuCtx *ctx, const ApxAttrPool *a, const ApxTensor *x,
                           const ApxTensor *y, ApxPoolGeom *g) {
  return apx_shape_status(apx_pool_geom(a, x, y, g, ctx->err, sizeof ctx->err));
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
  ApxPoolGeom g;
  if ((s = pool_geom(ctx, attrs, &ins[0], &outs[0], &g)) || (s = same_type(ctx, &ins[0], &outs[0])))
    return s;
  int64_t *idx = NULL;
  if (op == APX_OP_MaxPool && apx_cpu_has(outs, n_out, 1)) {
    if (outs[1].dtype != APX_DT_I64 || !apx_same_dims(&outs[0], &outs[1]))
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
  ApxPoolGeom g;
  if ((s = pool_geom(ctx, attrs, &outs[0], &ins[0], &g)) || (s = same_type(ctx, &ins[0], &outs[0])))
    return s;
  if (is_max && (!apx_same_dims(&ins[1], &outs[0]) || ins[1].dtype != outs[0].dtype))
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
  *S = apx_dims_prod(x->dims, 2, x->rank);
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
