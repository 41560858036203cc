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

/* The lines along axis (in [0, rank): kernels/validate.h); a scalar is one line of length 1. */
static void split_axis(const ApxTensor *t, int64_t axis, int64_t *outer, int64_t *L,
                       int64_t *inner) {
  if (t->rank == 0) {
    *outer = *L = *inner = 1;
    return;
  }
  *outer = apx_dims_prod(t->dims, 0, (int)axis);
  *L = t->dims[axis];
  *inner = apx_dims_prod(t->dims, (int)axis + 1, t->rank);
}

APX_CPU_KERNEL(apx_cpu_softmax) {
  const ApxTensor *x = &ins[0];
  int64_t outer = 0, L = 0, inner = 0;
  split_axis(x, ((const ApxAttrAxis *)attrs)->axis, &outer, &L, &inner);
  int nt = apx_cpu_threads(ctx), is_log = op == APX_OP_LogSoftmax;
  if (x->dtype == APX_DT_F64)
    softmax_f64(is_log, x->data, outs[0].data, outer, L, inner, nt);
  else
    softmax_f32(is_log, x->data, outs[0].data, outer, L, inner, nt);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_softmax_grad) {
  int64_t outer = 0, L = 0, inner = 0;
  split_axis(&ins[0], ((const ApxAttrAxis *)attrs)->axis, &outer, &L, &inner);
  int nt = apx_cpu_threads(ctx), is_log = op == APX_OP_LogSoftmaxGrad;
  if (outs[0].dtype == APX_DT_F64)
    softmax_grad_f64(is_log, ins[0].data, ins[1].data, outs[0].data, outer, L, inner, nt);
  else
    softmax_grad_f32(is_log, ins[0].data, ins[1].data, outs[0].data, outer, L, inner, nt);
  return APX_STATUS_OK;
}
