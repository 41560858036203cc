/* training.c - the training-step ops (attrs.h documents their contracts):
 *   LossScaleSeed(loss, loss_scale) -> dLoss = loss_scale[0] * multiplier    (math)
 *   AssignState(src, dst)           copy / fill into the STATE buffer dst     (raw, in place)
 *   UnscaleCheck(loss_scale, g...) -> found_inf, first_bad, norm_sq, u...     (math)
 *   OptimizerStep(found_inf, norm_sq, lr, step, P..., G..., S..., H...?)      (raw, in place)
 * In-place ops are raw kernels: they convert what they need themselves and write back to
 * the caller's buffers. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/validate.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/training_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/training_real.inc"
#include "kernels/cpu/real_end.h"

APX_CPU_KERNEL(apx_cpu_loss_scale_seed) {
  const ApxAttrLossScaleSeed *a = attrs;
  int64_t n = apx_tensor_numel(&outs[0]);
  if (outs[0].dtype == APX_DT_F64) {
    double v = ((const double *)ins[1].data)[0] * (double)a->multiplier;
    for (int64_t i = 0; i < n; i++) ((double *)outs[0].data)[i] = v;
  } else {
    float v = ((const float *)ins[1].data)[0] * a->multiplier;
    for (int64_t i = 0; i < n; i++) ((float *)outs[0].data)[i] = v;
  }
  return APX_STATUS_OK;
}

/* src has dst's element count or one element (kernels/validate.h) */
APX_CPU_KERNEL(apx_cpu_assign_state) {
  ApxStatus s;
  const ApxTensor *src = &ins[0], *dst = &ins[1];
  int64_t ns = apx_tensor_numel(src), nd = apx_tensor_numel(dst);
  int nt = apx_cpu_threads(ctx);
  if (ns == nd) {
    if (src->data == dst->data && src->dtype == dst->dtype) return APX_STATUS_OK;
    s = apx_cpu_convert_nt(src->data, src->dtype, dst->data, dst->dtype, nd, nt);
  } else {
    size_t es = apx_dtype_size(dst->dtype);
    unsigned char v[16];
    s = apx_cpu_convert(src->data, src->dtype, v, dst->dtype, 1);
    for (int64_t i = 0; s == APX_STATUS_OK && i < nd; i++) memcpy((char *)dst->data + (size_t)i * es, v, es);
  }
  if (s) return apx_cpu_fail(ctx, s, APX_MSG_CONVERT, apx_dtype_name(src->dtype),
                             apx_dtype_name(dst->dtype));
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_unscale_check) {
  int n = n_in - 1;
  ApxDType dt = ins[0].dtype; /* math type of the call */
  int nt = apx_cpu_threads(ctx);
  double sq = 0;
  int64_t first = -1;
  for (int i = 0; i < n; i++) {
    int64_t ne = apx_tensor_numel(&ins[1 + i]);
    int bad;
    if (dt == APX_DT_F64)
      bad = unscale_f64(ins[1 + i].data, outs[3 + i].data, ne, ((const double *)ins[0].data)[0], &sq, nt);
    else
      bad = unscale_f32(ins[1 + i].data, outs[3 + i].data, ne, ((const float *)ins[0].data)[0], &sq, nt);
    if (bad < 0) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
    if (bad && first < 0) first = i;
  }
  double found = first >= 0 ? 1.0 : 0.0;
  apx_cpu_convert(&found, APX_DT_F64, outs[0].data, outs[0].dtype, 1);
  apx_cpu_convert(&first, APX_DT_I64, outs[1].data, outs[1].dtype, 1);
  apx_cpu_convert(&sq, APX_DT_F64, outs[2].data, outs[2].dtype, 1);
  return APX_STATUS_OK;
}

static double scalar_at(const ApxTensor *t) {
  double v = 0;
  apx_cpu_convert(t->data, t->dtype, &v, APX_DT_F64, 1);
  return v;
}

/* A tensor in math type mt: the caller's buffer when it already has that type, else a
 * converted copy (written back by put_back when `write`). */
typedef struct Work {
  void *p;
  int owned;
} Work;

static int get_work(const ApxTensor *t, ApxDType mt, Work *w, int load, int nt) {
  w->owned = 0;
  w->p = NULL;
  if (!t || !t->data) return 0;
  if (t->dtype == mt) {
    w->p = t->data;
    return 0;
  }
  int64_t n = apx_tensor_numel(t);
  w->p = malloc((size_t)(n ? n : 1) * apx_dtype_size(mt));
  if (!w->p) return -1;
  w->owned = 1;
  if (load) apx_cpu_convert_nt(t->data, t->dtype, w->p, mt, n, nt);
  return 0;
}

static void put_back(const ApxTensor *t, ApxDType mt, Work *w, int write, int nt) {
  if (w->owned && write) apx_cpu_convert_nt(w->p, mt, t->data, t->dtype, apx_tensor_numel(t), nt);
  if (w->owned) free(w->p);
  w->p = NULL;
  w->owned = 0;
}

/* The input layout (kernels/attrs.h) is checked by kernels/validate.h. */
APX_CPU_KERNEL(apx_cpu_optimizer_step) {
  const ApxAttrOptimizer *a = attrs;
  int n = a->n_params, k = apx_optimizer_state_groups(a), mw = a->master_weights != 0;
  if (scalar_at(&ins[0]) != 0) return APX_STATUS_OK; /* overflow: skipped step */
  int64_t t = 0;
  apx_cpu_convert(ins[3].data, ins[3].dtype, &t, APX_DT_I64, 1);
  t += 1;
  double lr = scalar_at(&ins[2]), clip = 1.0;
  if (a->max_grad_norm > 0) {
    double norm = sqrt(scalar_at(&ins[1]));
    clip = (double)a->max_grad_norm / (norm + 1e-6);
    if (clip > 1.0) clip = 1.0;
  }
  int nt = apx_cpu_threads(ctx);
  for (int i = 0; i < n; i++) {
    const ApxTensor *P = &ins[4 + i], *G = &ins[4 + n + i];
    const ApxTensor *S0 = k > 0 ? &ins[4 + 2 * n + i] : NULL, *S1 = k > 1 ? &ins[4 + 3 * n + i] : NULL;
    const ApxTensor *H = mw ? &ins[4 + (2 + k) * n + i] : NULL;
    int64_t ne = apx_tensor_numel(P);
    ApxDType mt = P->dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
    Work wp, wg, w0, w1, wu = {NULL, 0};
    int err = get_work(P, mt, &wp, 1, nt) | get_work(G, mt, &wg, 1, nt) |
              get_work(S0, mt, &w0, 1, nt) | get_work(S1, mt, &w1, 1, nt);
    if (!err && a->kind == APX_OPTIM_LAMB) {
      wu.p = malloc((size_t)(ne ? ne : 1) * apx_dtype_size(mt));
      wu.owned = 1;
      err = !wu.p;
    }
    if (!err) {
      if (mt == APX_DT_F64)
        optimizer_update_f64(a, wp.p, wg.p, w0.p, w1.p, wu.p, ne, lr, clip, t, nt);
      else
        optimizer_update_f32(a, wp.p, wg.p, w0.p, w1.p, wu.p, ne, lr, clip, t, nt);
    }
    put_back(P, mt, &wp, !err, nt);
    put_back(G, mt, &wg, 0, nt);
    put_back(S0, mt, &w0, !err, nt);
    put_back(S1, mt, &w1, !err, nt);
    free(wu.p);
    if (err) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory (parameter %d)", i);
    if (H && H->data) apx_cpu_convert_nt(P->data, P->dtype, H->data, H->dtype, ne, nt);
  }
  apx_cpu_convert(&t, APX_DT_I64, ins[3].data, ins[3].dtype, 1);
  return APX_STATUS_OK;
}
