/* softmax.c - Softmax and LogSoftmax (opset 13: along one axis) and their gradients
 * SoftmaxGrad(dY, Y) -> dX, LogSoftmaxGrad(dY, Y) -> dX. */
#include "kernels/cpu/cpu_internal.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/softmax_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/softmax_real.inc"
#include "kernels/cpu/real_end.h"

static ApxStatus split_axis(ApxCpuCtx *ctx, const ApxTensor *t, int64_t axis, int64_t *outer,
                            int64_t *L, int64_t *inner) {
  if (t->rank == 0) { /* a scalar: one line of length 1 */
    *outer = *L = *inner = 1;
    return APX_STATUS_OK;
  }
  if (axis < 0 || axis >= t->rank)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "axis %lld out of range for rank %d",
                        (long long)axis, t->rank);
  *outer = apx_dims_prod(t->dims, 0, (int)axis);
  *L = t->dims[axis];
  *inner = apx_dims_prod(t->dims, (int)axis + 1, t->rank);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_softmax) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  const ApxTensor *x = &ins[0];
  if (!apx_same_dims(x, &outs[0]) || outs[0].dtype != x->dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "output shape/type differs from input");
  int64_t outer = 0, L = 0, inner = 0;
  if ((s = split_axis(ctx, x, ((const ApxAttrAxis *)attrs)->axis, &outer, &L, &inner))) return s;
  int nt = apx_cpu_threads(ctx), is_log = op == APX_OP_LogSoftmax;
  if (x->dtype == APX_DT_F64)
    softmax_f64(is_log, x->data, outs[0].data, outer, L, inner, nt);
  else
    softmax_f32(is_log, x->data, outs[0].data, outer, L, inner, nt);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_softmax_grad) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_in(ctx, ins, n_in, 1)) ||
      (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  if (!apx_same_dims(&ins[0], &ins[1]) || !apx_same_dims(&ins[0], &outs[0]))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "dY, Y and dX must have one shape");
  int64_t outer = 0, L = 0, inner = 0;
  if ((s = split_axis(ctx, &ins[0], ((const ApxAttrAxis *)attrs)->axis, &outer, &L, &inner)))
    return s;
  int nt = apx_cpu_threads(ctx), is_log = op == APX_OP_LogSoftmaxGrad;
  if (outs[0].dtype == APX_DT_F64)
    softmax_grad_f64(is_log, ins[0].data, ins[1].data, outs[0].data, outer, L, inner, nt);
  else
    softmax_grad_f32(is_log, ins[0].data, ins[1].data, outs[0].data, outer, L, inner, nt);
  return APX_STATUS_OK;
}
