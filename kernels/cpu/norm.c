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

static const ApxTensor none = {0};
static const ApxTensor *opt_in(const ApxTensor *t, int n, int i) {
  return i < n ? &t[i] : &none;
}
static ApxTensor *opt_out(ApxTensor *t, int n, int i) {
  return i < n && t[i].data ? &t[i] : (ApxTensor *)&none;
}

/* rows x D around axis (in [0, rank): kernels/validate.h) */
static void layer_norm_shape(const ApxTensor *x, int64_t axis, int64_t *rows, int64_t *D) {
  *rows = apx_dims_prod(x->dims, 0, (int)axis);
  *D = apx_dims_prod(x->dims, (int)axis, x->rank);
}

APX_CPU_KERNEL(apx_cpu_layer_norm) {
  const ApxAttrLayerNorm *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxDType dt = x->dtype;
  int64_t rows = 0, D = 0;
  layer_norm_shape(x, a->axis, &rows, &D);
  ApxTensor *mean = opt_out(outs, n_out, 1), *istd = opt_out(outs, n_out, 2);
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
  const ApxAttrLayerNorm *a = attrs;
  const ApxTensor *x = &ins[1];
  ApxDType dt = x->dtype;
  int64_t rows = 0, D = 0;
  layer_norm_shape(x, a->axis, &rows, &D);
  ApxTensor *dx = opt_out(outs, n_out, 0), *dsc = opt_out(outs, n_out, 1),
            *db = opt_out(outs, n_out, 2);
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    layer_norm_grad_f64(ins[0].data, x->data, ins[2].data, ins[3].data, ins[4].data, dx->data,
                        dsc->data, db->data, rows, D, nt);
  else
    layer_norm_grad_f32(ins[0].data, x->data, ins[2].data, ins[3].data, ins[4].data, dx->data,
                        dsc->data, db->data, rows, D, nt);
  return APX_STATUS_OK;
}

/* X (N, C, spatial...) (rank >= 2: kernels/validate.h) */
static void bn_shape(const ApxTensor *x, int64_t *N, int64_t *C, int64_t *S) {
  *N = x->dims[0];
  *C = x->dims[1];
  *S = apx_dims_prod(x->dims, 2, x->rank);
}

/* BatchNormalization and BatchNormRelu */
APX_CPU_KERNEL(apx_cpu_batch_norm) {
  const ApxAttrBatchNorm *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxDType dt = x->dtype;
  int64_t N = 0, C = 0, S = 0;
  bn_shape(x, &N, &C, &S);
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
  const ApxAttrBatchNorm *a = attrs;
  const ApxTensor *x = &ins[1];
  ApxDType dt = x->dtype;
  int64_t N = 0, C = 0, S = 0;
  bn_shape(x, &N, &C, &S);
  ApxTensor *dx = opt_out(outs, n_out, 0), *dsc = opt_out(outs, n_out, 1),
            *db = opt_out(outs, n_out, 2);
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
  void *g = apx_cpu_relu_mask_grad(&ins[0], &ins[1], apx_cpu_threads(ctx));
  if (!g) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  ApxTensor rest[5] = {ins[0], ins[2], ins[3], ins[4], ins[5]};
  rest[0].data = g;
  s = apx_cpu_batch_norm_grad(ctx, APX_OP_BatchNormGrad, attrs, rest, 5, outs, n_out);
  free(g);
  return s;
}
