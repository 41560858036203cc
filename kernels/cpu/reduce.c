/* reduce.c - ReduceSum, ReduceMean (float and int64), ReduceSumTo (the sum of a broadcast
 * result down to an operand's shape, for gradients), ReduceMax (float, int64, bool; NaN
 * propagates) and ReduceMaxGrad (PyTorch's amax rule: ties share the gradient evenly). */
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

/* ---- ReduceMax and its gradient ---------------------------------------------------------- */

/* y[o] = max over the reduced group of o (NaN wins; an empty group gives `lowest`), one
 * output per thread; the reduced run is contiguous along r when plan->inner_reduced. */
#define REDUCE_MAX(T, lowest, NANP, x_, y_)                                                     \
  do {                                                                                      \
    const T *px_ = (const T *)(x_);                                                         \
    T *py_ = (T *)(y_);                                                                     \
    int64_t L = pl.inner_reduced ? pl.rd[pl.nr - 1] : 1, nouter = pl.nred / (L ? L : 1);    \
    int nr_ = pl.inner_reduced ? pl.nr - 1 : pl.nr;                                         \
    APX_OMP_FOR(pl.ny * pl.nred > APX_CPU_PAR_WORK && pl.ny > 1)                            \
    for (int64_t o = 0; o < pl.ny; o++) {                                                   \
      T m = (lowest);                                                                       \
      if (!pl.empty) {                                                                      \
        int64_t base = apx_group_offset(o, pl.kd, pl.ks, pl.nk);                            \
        int first = 1;                                                                      \
        for (int64_t r = 0; r < nouter; r++) {                                              \
          const T *p = px_ + base + apx_group_offset(r, pl.rd, pl.rs, nr_);                 \
          for (int64_t j = 0; j < L; j++) {                                                 \
            T v = p[j];                                                                     \
            if (first || v > m || NANP(v)) m = v;                                           \
            first = 0;                                                                      \
            if (NANP(m)) break;                                                             \
          }                                                                                 \
        }                                                                                   \
      }                                                                                     \
      py_[o] = m;                                                                           \
    }                                                                                       \
  } while (0)

#define NOT_NAN(v) 0

/* ReduceMax(data, axes?) -> reduced (math kernel: float, int64 or bool) */
APX_CPU_KERNEL(apx_cpu_reduce_max) {
  ApxStatus s;
  const ApxTensor *x = &ins[0];
  ApxTensor *y = &outs[0];
  uint32_t mask = 0;
  if ((s = apx_shape_status(apx_reduce_mask(attrs, x->rank, &mask, ctx->err, sizeof ctx->err))))
    return s;
  ApxReducePlan pl;
  apx_reduce_plan(&pl, x->dims, x->rank, mask);
  if (apx_tensor_numel(y) != pl.ny || y->dtype != x->dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "output (%s, %lld elements) does not match the "
                        "reduction of the input (%s, %lld)", apx_dtype_name(y->dtype),
                        (long long)apx_tensor_numel(y), apx_dtype_name(x->dtype), (long long)pl.ny);
  int nt = apx_cpu_threads(ctx);
  switch (x->dtype) {
    case APX_DT_F32: REDUCE_MAX(float, -INFINITY, isnan, x->data, y->data); break;
    case APX_DT_F64: REDUCE_MAX(double, -(double)INFINITY, isnan, x->data, y->data); break;
    case APX_DT_I64: REDUCE_MAX(int64_t, INT64_MIN, NOT_NAN, x->data, y->data); break;
    case APX_DT_BOOL: REDUCE_MAX(uint8_t, 0, NOT_NAN, x->data, y->data); break;
    default:
      return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s",
                          apx_dtype_name(x->dtype));
  }
  return APX_STATUS_OK;
}
#undef REDUCE_MAX
#undef NOT_NAN

/* dX = q * (X == Y), q = dY / count per group: PyTorch's amax backward,
 * (grad / mask.sum()) * mask, in the math type. */
#define REDUCE_MAX_GRAD(T)                                                                  \
  do {                                                                                      \
    const T *dy = ins[0].data, *x = ins[1].data, *yv = ins[2].data;                         \
    T *dx = outs[0].data;                                                                   \
    APX_OMP_FOR(pl.ny * pl.nred > APX_CPU_PAR_WORK && pl.ny > 1)                            \
    for (int64_t o = 0; o < pl.ny; o++) {                                                   \
      int64_t base = apx_group_offset(o, pl.kd, pl.ks, pl.nk), count = 0;                   \
      for (int64_t r = 0; r < pl.nred; r++)                                                 \
        count += x[base + apx_group_offset(r, pl.rd, pl.rs, pl.nr)] == yv[o];               \
      T q = dy[o] / (T)count;                                                               \
      for (int64_t r = 0; r < pl.nred; r++) {                                               \
        int64_t i = base + apx_group_offset(r, pl.rd, pl.rs, pl.nr);                        \
        dx[i] = q * (T)(x[i] == yv[o]);                                                     \
      }                                                                                     \
    }                                                                                       \
  } while (0)

/* ReduceMaxGrad(dY, X, Y) -> dX (math kernel, float) */
APX_CPU_KERNEL(apx_cpu_reduce_max_grad) {
  ApxStatus s;
  const ApxTensor *x = &ins[1];
  uint32_t mask = 0;
  if ((s = apx_shape_status(apx_reduce_mask(attrs, x->rank, &mask, ctx->err, sizeof ctx->err))))
    return s;
  ApxReducePlan pl;
  apx_reduce_plan(&pl, x->dims, x->rank, mask);
  if (!apx_same_dims(&outs[0], x) || apx_tensor_numel(&ins[0]) != pl.ny ||
      apx_tensor_numel(&ins[2]) != pl.ny)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "dY and Y must have the reduced shape of X, dX X's shape");
  if (pl.empty) {
    memset(outs[0].data, 0, apx_tensor_bytes(&outs[0]));
    return APX_STATUS_OK;
  }
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    REDUCE_MAX_GRAD(double);
  else
    REDUCE_MAX_GRAD(float);
  return APX_STATUS_OK;
}
#undef REDUCE_MAX_GRAD
