/* reduce.c - ReduceSum, ReduceMean (float and int64) and ReduceSumTo (the sum of a
 * broadcast result down to an operand's shape, for gradients). */
#include "kernels/cpu/cpu_internal.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/reduce_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/reduce_real.inc"
#include "kernels/cpu/real_end.h"
/* int64 instance (sums wrap on overflow in practice; shape arithmetic stays far below) */
#define real_t int64_t
#define acc_t int64_t
#define RF(name) name##_i64
void apx_cpu_reduce_sum_i64(const int64_t *x, const int64_t *dims, int rank, uint32_t mask,
                            int64_t *y, int nt);
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/reduce_real.inc"
#undef real_t
#undef acc_t
#undef RF

/* y = x summed over the axes in mask (y's element count and type: kernels/validate.h) */
static ApxStatus run_sum(ApxCpuCtx *ctx, const ApxTensor *x, uint32_t mask, ApxTensor *y,
                         int mean) {
  int64_t ny = 1, nred = 1;
  for (int d = 0; d < x->rank; d++) {
    if (mask >> d & 1u)
      nred *= x->dims[d];
    else
      ny *= x->dims[d];
  }
  int nt = apx_cpu_threads(ctx);
  switch (x->dtype) {
    case APX_DT_F32: {
      float *p = y->data;
      apx_cpu_reduce_sum_f32(x->data, x->dims, x->rank, mask, p, nt);
      if (mean)
        for (int64_t i = 0; i < ny; i++) p[i] = p[i] / (float)nred;
      break;
    }
    case APX_DT_F64: {
      double *p = y->data;
      apx_cpu_reduce_sum_f64(x->data, x->dims, x->rank, mask, p, nt);
      if (mean)
        for (int64_t i = 0; i < ny; i++) p[i] = p[i] / (double)nred;
      break;
    }
    case APX_DT_I64: {
      int64_t *p = y->data;
      apx_cpu_reduce_sum_i64(x->data, x->dims, x->rank, mask, p, nt);
      if (mean && nred > 0)
        for (int64_t i = 0; i < ny; i++) p[i] = p[i] / nred;
      break;
    }
    default:
      return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s",
                          apx_dtype_name(x->dtype));
  }
  return APX_STATUS_OK;
}

/* ReduceSum / ReduceMean (data, axes?) -> reduced; axes come from attrs (ApxAttrReduce). */
APX_CPU_KERNEL(apx_cpu_reduce) {
  ApxStatus s;
  const ApxAttrReduce *a = attrs;
  const ApxTensor *x = &ins[0];
  uint32_t mask = 0;
  if ((s = apx_shape_status(apx_reduce_mask(a, x->rank, &mask, ctx->err, sizeof ctx->err))))
    return s;
  return run_sum(ctx, x, mask, &outs[0], op == APX_OP_ReduceMean);
}

/* ReduceSumTo(dY, Like?) -> dX: dY summed over the axes broadcasting added or expanded,
 * down to dX's shape (right-aligned numpy rules). Like, when given, only names the target
 * shape (its data is never read) and must agree with dX's. */
APX_CPU_KERNEL(apx_cpu_reduce_sum_to) {
  int64_t mask = apx_sum_to_mask(&ins[0], &outs[0]);
  return run_sum(ctx, &ins[0], (uint32_t)mask, &outs[0], 0);
}
