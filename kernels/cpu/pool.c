/* pool.c - MaxPool(X) -> Y, Indices? and AveragePool(X) -> Y, 3-D (N, C, D, H, W), 2-D
 * (N, C, H, W) or 1-D (N, C, L: depth and height 1, kernels/shape.h), with pads,
 * strides, dilations, ceil_mode (output dims come from Y), count_include_pad, storage_order;
 * MaxPoolGrad(dY, X) -> dX; AveragePoolGrad(dY) -> dX; GlobalAveragePool(X) -> Y (any
 * spatial rank) and GlobalAveragePoolGrad(dY) -> dX.
 * MaxPool Indices (ONNX): flat indices into X including n and c, ignoring padding; row-major
 * (storage_order 0) or column-major (storage_order 1: h and w swapped; 3-D: (w, h, d)). MaxPool also takes integer
 * tensors (as int64 here; compared through double, exact below 2^53). */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/pool3_real.inc"
#include "kernels/cpu/pool_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/pool3_real.inc"
#include "kernels/cpu/pool_real.inc"
#include "kernels/cpu/real_end.h"

/* x (N, C, H, W), y (N, C, OH, OW): kernels/shape.h's geometry (checked by
 * kernels/validate.h). */
static ApxStatus pool_geom(ApxCpuCtx *ctx, const ApxAttrPool *a, const ApxTensor *x,
                           const ApxTensor *y, ApxPoolGeom *g) {
  return apx_shape_status(apx_pool_geom(a, x, y, g, ctx->err, sizeof ctx->err));
}

APX_CPU_KERNEL(apx_cpu_pool) {
  ApxStatus s;
  ApxPoolGeom g;
  if ((s = pool_geom(ctx, attrs, &ins[0], &outs[0], &g))) return s;
  int64_t *idx = op == APX_OP_MaxPool && apx_cpu_has(outs, n_out, 1) ? outs[1].data : NULL;
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
  ApxPoolGeom g;
  if ((s = pool_geom(ctx, attrs, &outs[0], &ins[0], &g))) return s;
  int nt = apx_cpu_threads(ctx);
  const void *x = is_max ? ins[1].data : NULL;
  if (outs[0].dtype == APX_DT_F64)
    pool_grad_f64(&g, ins[0].data, x, outs[0].data, nt);
  else
    pool_grad_f32(&g, ins[0].data, x, outs[0].data, nt);
  return APX_STATUS_OK;
}

/* x (N, C, spatial...), y N * C elements (checked by kernels/validate.h): planes and the
 * spatial size. */
static void gap_shape(const ApxTensor *x, int64_t *planes, int64_t *S) {
  *planes = x->dims[0] * x->dims[1];
  *S = apx_dims_prod(x->dims, 2, x->rank);
}

APX_CPU_KERNEL(apx_cpu_global_avg_pool) {
  int64_t planes = 0, S = 0;
  gap_shape(&ins[0], &planes, &S);
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    global_avg_pool_f64(ins[0].data, outs[0].data, planes, S, nt);
  else
    global_avg_pool_f32(ins[0].data, outs[0].data, planes, S, nt);
  return APX_STATUS_OK;
}

/* GlobalAveragePoolGrad(dY) -> dX (dX's shape is the forward input's) */
APX_CPU_KERNEL(apx_cpu_global_avg_pool_grad) {
  int64_t planes = 0, S = 0;
  gap_shape(&outs[0], &planes, &S);
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    global_avg_pool_grad_f64(ins[0].data, outs[0].data, planes, S, nt);
  else
    global_avg_pool_grad_f32(ins[0].data, outs[0].data, planes, S, nt);
  return APX_STATUS_OK;
}
