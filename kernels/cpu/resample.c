/* resample.c - Resize (nearest, linear) and its gradient ResizeGrad, and Einsum (one or two
 * operands, any explicit equation without ellipsis) on the CPU: math kernels over fp32 /
 * fp64 (resample_real.inc; half tensors are converted by dispatch.c). The geometry and the
 * label plans are kernels/resample_plan.h's, shared with the CUDA kernels and the host-side
 * contract (kernels/validate.c), so these kernels check nothing of their own. Einsum is a
 * direct loop (correctness first): per output element, the sum over the contracted labels. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/resample_plan.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/resample_real.inc"
#include "kernels/cpu/real_end.h"
#undef APX_REAL_F64
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/resample_real.inc"
#include "kernels/cpu/real_end.h"
#undef APX_REAL_F64

/* Resize(X, [static inputs absent]) -> Y, or ResizeGrad(dY) -> dX (dX: X's shape) */
static ApxStatus run_resize(ApxCpuCtx *ctx, const void *attrs, const ApxTensor *in, const ApxTensor *out,
                            int grad) {
  ApxStatus s;
  ApxResizePlan p;
  const ApxTensor *x = grad ? out : in, *y = grad ? in : out;
  if ((s = apx_shape_status(apx_resize_plan(attrs, x, y, &p, ctx->err, sizeof ctx->err)))) return s;
  int nt = apx_cpu_threads(ctx);
  if (out->dtype == APX_DT_F64)
    (grad ? resize_grad_f64 : resize_f64)(in->data, out->data, &p, nt);
  else
    (grad ? resize_grad_f32 : resize_f32)(in->data, out->data, &p, nt);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_resize) { return run_resize(ctx, attrs, &ins[0], &outs[0], 0); }
APX_CPU_KERNEL(apx_cpu_resize_grad) { return run_resize(ctx, attrs, &ins[0], &outs[0], 1); }

/* Einsum(A, B?) -> Y */
APX_CPU_KERNEL(apx_cpu_einsum) {
  ApxStatus s;
  ApxEinsumPlan p;
  const ApxTensor *b = n_in > 1 && ins[1].data ? &ins[1] : NULL;
  if ((s = apx_shape_status(apx_einsum_plan(attrs, &ins[0], b, &outs[0], &p, ctx->err, sizeof ctx->err)))) return s;
  int nt = apx_cpu_threads(ctx);
  int64_t ny = apx_tensor_numel(&outs[0]);
  if (outs[0].dtype == APX_DT_F64)
    einsum_f64(ins[0].data, b ? b->data : NULL, outs[0].data, ny, &p, nt);
  else
    einsum_f32(ins[0].data, b ? b->data : NULL, outs[0].data, ny, &p, nt);
  return APX_STATUS_OK;
}
