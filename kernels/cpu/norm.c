/* norm.c - LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?;
 * LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> dX?, dScale?, dB?;
 * BatchNormalization(X, scale, B, mean, var) -> Y, running_mean?, running_var?,
 *   saved_mean?, saved_inv_std? (inference, or training_mode = 1 with batch statistics);
 * BatchNormGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX?, dscale?, dB?
 *   (training_mode = 0: inputs 3, 4 are the running mean and variance instead);
 * BatchNormRelu: BatchNormalization then Relu on Y;
 * BatchNormReluGrad(dY, Y, X, scale, saved_mean, saved_inv_std) -> BatchNormGrad of
 *   dY * (Y > 0). */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ew_math.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/norm_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/norm_real.inc"
#include "kernels/cpu/real_end.h"

static ApxStatus need_numel(ApxCpuCtx *ctx, const ApxTensor *t, int64_t n, const char *what,
                            ApxDType dt) {
  if (!t->data) return APX_STATUS_OK;
  if (apx_tensor_numel(t) != n)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "%s has %lld elements, expected %lld", what,
                        (long long)apx_tensor_numel(t), (long long)n);
  if (t->dtype != dt)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "%s has type %s, expected %s", what,
                        apx_dtype_name(t->dtype), apx_dtype_name(dt));
  return APX_STATUS_OK;
}

static const ApxTensor none = {0};
static const ApxTensor *opt_in(const ApxTensor *t, int n, int i) {
  return i < n ? &t[i] : &none;
}
static ApxTensor *opt_out(ApxTensor *t, int n, int i) {
  return i < n && t[i].data ? &t[i] : (ApxTensor *)&none;
}

static ApxStatus layer_norm_shape(ApxCpuCtx *ctx, const ApxTensor *x, int64_t axis,
                                  int64_t *rows, int64_t *D) {
  if (axis < 0 || axis >= x->rank)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "axis %lld out of range for rank %d",
                        (long long)axis, x->rank);
  *rows = apx_dims_prod(x->dims, 0, (int)axis);
  *D = apx_dims_prod(x->dims, (int)axis, x->rank);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_layer_norm) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_in(ctx, ins, n_in, 1)) ||
      (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  const ApxAttrLayerNorm *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxDType dt = x->dtype;
  int64_t rows = 0, D = 0;
  if ((s = layer_norm_shape(ctx, x, a->axis, &rows, &D))) return s;
  ApxTensor *mean = opt_out(outs, n_out, 1), *istd = opt_out(outs, n_out, 2);
  if ((s = need_numel(ctx, &ins[1], D, "Scale", dt)) ||
      (s = need_numel(ctx, opt_in(ins, n_in, 2), D, "B", dt)) ||
      (s = need_numel(ctx, &outs[0], rows * D, "Y", dt)) ||
      (s = need_numel(ctx, mean, rows, "Mean", dt)) ||
      (s = need_numel(ctx, istd, rows, "InvStdDev", dt)))
    return s;
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    layer_norm_f64(x->data, ins[1].data, opt_in(ins, n_in, 2)->data, outs[0].data, mean->data,
                   istd->data, rows, D, a->epsilon, nt);
  else
    layer_norm_f32(x->data, ins[1].data, opt_in(ins, n_in, 2)->data, outs[0].data, mean->data,
                   istd->data, rows, D, a->epsilon, nt);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_layer_norm_grad) {
  ApxStatus s;
  for (int i = 0; i < 5; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  const ApxAttrLayerNorm *a = attrs;
  const ApxTensor *x = &ins[1];
  ApxDType dt = x->dtype;
  int64_t rows = 0, D = 0;
  if ((s = layer_norm_shape(ctx, x, a->axis, &rows, &D))) return s;
  ApxTensor *dx = opt_out(outs, n_out, 0), *dsc = opt_out(outs, n_out, 1),
            *db = opt_out(outs, n_out, 2);
  if ((s = need_numel(ctx, &ins[0], rows * D, "dY", dt)) ||
      (s = need_numel(ctx, &ins[2], D, "Scale", dt)) ||
      (s = need_numel(ctx, &ins[3], rows, "Mean", dt)) ||
      (s = need_numel(ctx, &ins[4], rows, "InvStdDev", dt)) ||
      (s = need_numel(ctx, dx, rows * D, "dX", dt)) ||
      (s = need_numel(ctx, dsc, D, "dScale", dt)) || (s = need_numel(ctx, db, D, "dB", dt)))
    return s;
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    layer_norm_grad_f64(ins[0].data, x->data, ins[2].data, ins[3].data, ins[4].data, dx->data,
                        dsc->data, db->data, rows, D, nt);
  else
    layer_norm_grad_f32(ins[0].data, x->data, ins[2].data, ins[3].data, ins[4].data, dx->data,
                        dsc->data, db->data, rows, D, nt);
  return APX_STATUS_OK;
}

static ApxStatus bn_shape(ApxCpuCtx *ctx, const ApxTensor *x, int64_t *N, int64_t *C,
                          int64_t *S) {
  if (x->rank < 2)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "X must have rank >= 2, got %d", x->rank);
  *N = x->dims[0];
  *C = x->dims[1];
  *S = apx_dims_prod(x->dims, 2, x->rank);
  return APX_STATUS_OK;
}

/* BatchNormalization and BatchNormRelu */
APX_CPU_KERNEL(apx_cpu_batch_norm) {
  ApxStatus s;
  for (int i = 0; i < 5; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  if ((s = apx_cpu_need_out(ctx, outs, n_out, 0))) return s;
  const ApxAttrBatchNorm *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxDType dt = x->dtype;
  int64_t N = 0, C = 0, S = 0;
  if ((s = bn_shape(ctx, x, &N, &C, &S))) return s;
  static const char *names[5] = {"scale", "B", "input_mean", "input_var", ""};
  for (int i = 1; i < 5; i++)
    if ((s = need_numel(ctx, &ins[i], C, names[i - 1], dt))) return s;
  static const char *onames[5] = {"Y", "running_mean", "running_var", "saved_mean",
                                  "saved_inv_std"};
  for (int i = 0; i < 5; i++)
    if ((s = need_numel(ctx, opt_out(outs, n_out, i), i ? C : N * C * S, onames[i], dt))) return s;
  int nt = apx_cpu_threads(ctx);
  int relu = op == APX_OP_BatchNormRelu;
  if (dt == APX_DT_F64) {
    BnArgs_f64 b = {x->data, ins[1].data, ins[2].data, ins[3].data, ins[4].data, outs[0].data,
                    opt_out(outs, n_out, 1)->data, opt_out(outs, n_out, 2)->data,
                    opt_out(outs, n_out, 3)->data, opt_out(outs, n_out, 4)->data, N, C, S,
                    a->epsilon, a->momentum, a->training_mode != 0, relu,
                    a->unbiased_running_var != 0};
    batch_norm_f64(&b, nt);
  } else {
    BnArgs_f32 b = {x->data, ins[1].data, ins[2].data, ins[3].data, ins[4].data, outs[0].data,
                    opt_out(outs, n_out, 1)->data, opt_out(outs, n_out, 2)->data,
                    opt_out(outs, n_out, 3)->data, opt_out(outs, n_out, 4)->data, N, C, S,
                    a->epsilon, a->momentum, a->training_mode != 0, relu,
                    a->unbiased_running_var != 0};
    batch_norm_f32(&b, nt);
  }
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_batch_norm_grad) {
  ApxStatus s;
  for (int i = 0; i < 5; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  const ApxAttrBatchNorm *a = attrs;
  const ApxTensor *x = &ins[1];
  ApxDType dt = x->dtype;
  int64_t N = 0, C = 0, S = 0;
  if ((s = bn_shape(ctx, x, &N, &C, &S))) return s;
  ApxTensor *dx = opt_out(outs, n_out, 0), *dsc = opt_out(outs, n_out, 1),
            *db = opt_out(outs, n_out, 2);
  if ((s = need_numel(ctx, &ins[0], N * C * S, "dY", dt)) ||
      (s = need_numel(ctx, &ins[2], C, "scale", dt)) ||
      (s = need_numel(ctx, &ins[3], C, "mean", dt)) ||
      (s = need_numel(ctx, &ins[4], C, a->training_mode ? "saved_inv_std" : "var", dt)) ||
      (s = need_numel(ctx, dx, N * C * S, "dX", dt)) ||
      (s = need_numel(ctx, dsc, C, "dscale", dt)) || (s = need_numel(ctx, db, C, "dB", dt)))
    return s;
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    batch_norm_grad_f64(ins[0].data, x->data, ins[2].data, ins[3].data, ins[4].data, dx->data,
                        dsc->data, db->data, N, C, S, a->epsilon, a->training_mode != 0, nt);
  else
    batch_norm_grad_f32(ins[0].data, x->data, ins[2].data, ins[3].data, ins[4].data, dx->data,
                        dsc->data, db->data, N, C, S, a->epsilon, a->training_mode != 0, nt);
  return APX_STATUS_OK;
}

/* dY * (Y > 0) into a new buffer (the Relu part of the fused gradients); NULL when out of
 * memory. */
void *apx_cpu_relu_mask_grad(const ApxTensor *dy, const ApxTensor *y, int nt) {
  int64_t n = apx_tensor_numel(dy);
  size_t es = apx_dtype_size(dy->dtype);
  void *g = malloc((size_t)(n ? n : 1) * es);
  if (!g) return NULL;
  if (dy->dtype == APX_DT_F64) {
    const double *d = dy->data, *v = y->data;
    double *o = g;
    APX_OMP_FOR(n > APX_CPU_PAR_WORK)
    for (int64_t i = 0; i < n; i++) o[i] = apx_relu_grad_f64(d[i], v[i]);
  } else {
    const float *d = dy->data, *v = y->data;
    float *o = g;
    APX_OMP_FOR(n > APX_CPU_PAR_WORK)
    for (int64_t i = 0; i < n; i++) o[i] = apx_relu_grad_f32(d[i], v[i]);
  }
  return g;
}

APX_CPU_KERNEL(apx_cpu_batch_norm_relu_grad) {
  ApxStatus s;
  for (int i = 0; i < 6; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  if (!apx_same_dims(&ins[0], &ins[1]) || ins[0].dtype != ins[1].dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "dY and Y must have one shape and type");
  void *g = apx_cpu_relu_mask_grad(&ins[0], &ins[1], apx_cpu_threads(ctx));
  if (!g) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  ApxTensor rest[5] = {ins[0], ins[2], ins[3], ins[4], ins[5]};
  rest[0].data = g;
  s = apx_cpu_batch_norm_grad(ctx, APX_OP_BatchNormGrad, attrs, rest, 5, outs, n_out);
  free(g);
  return s;
}
