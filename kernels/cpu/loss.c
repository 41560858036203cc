/* loss.c - SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob?;
 * NegativeLogLikelihoodLoss(input, target, weight?) -> loss;
 * SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?) -> dScores;
 * NegativeLogLikelihoodLossGrad(dLoss, target, weight?) -> dInput;
 * FusedXentropy(scores, labels) -> loss, saved? (SCE without weights; saved: the per-line
 *   logsumexp, labels' shape); FusedXentropyGrad(dLoss, scores, labels, saved) -> dScores.
 * Scores (N, C) or (N, C, D1, ..., Dk), labels (N) or (N, D1, ..., Dk) of any integer type;
 * reductions mean (sum of losses / sum of the weights of non-ignored labels), sum, none;
 * ignore_index lines contribute 0; a label outside [0, C) that is not ignored is an error. */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/loss_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/sum_real.inc"
#include "kernels/cpu/loss_real.inc"
#include "kernels/cpu/real_end.h"

typedef struct LossShape {
  int64_t N, C, inner;
} LossShape;

/* x: (N, C, D...), labels: (N, D...), weights: (C) */
static ApxStatus loss_shape(ApxCpuCtx *ctx, const ApxTensor *x, const ApxTensor *labels,
                            const ApxTensor *w, LossShape *sh) {
  ApxStatus s = apx_shape_status(
      apx_loss_shape(x, labels, &sh->N, &sh->C, &sh->inner, ctx->err, sizeof ctx->err));
  if (s) return s;
  if (labels->dtype != APX_DT_I64)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "labels must be integers, got %s",
                        apx_dtype_name(labels->dtype));
  if (w && w->data && (apx_tensor_numel(w) != sh->C || w->dtype != x->dtype))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "weights must be (C) = (%lld) of type %s",
                        (long long)sh->C, apx_dtype_name(x->dtype));
  return APX_STATUS_OK;
}

static ApxStatus bad_label(ApxCpuCtx *ctx, const ApxTensor *labels, int64_t bad, int64_t C) {
  return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "label %lld at position %lld outside [0, %lld)",
                      (long long)((const int64_t *)labels->data)[bad - 1], (long long)(bad - 1),
                      (long long)C);
}

static ApxStatus check_reduction(ApxCpuCtx *ctx, const ApxAttrLoss *a) {
  if (a->reduction < APX_RED_MEAN || a->reduction > APX_RED_NONE)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "bad reduction %d", a->reduction);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_loss) {
  ApxStatus s;
  if ((s = apx_cpu_need_in(ctx, ins, n_in, 0)) || (s = apx_cpu_need_in(ctx, ins, n_in, 1)) ||
      (s = apx_cpu_need_out(ctx, outs, n_out, 0)))
    return s;
  const ApxAttrLoss *a = attrs;
  if ((s = check_reduction(ctx, a))) return s;
  int fused = op == APX_OP_FusedXentropy, sce = fused || op == APX_OP_SoftmaxCrossEntropyLoss;
  const ApxTensor *x = &ins[0], *w = !fused && apx_cpu_has(ins, n_in, 2) ? &ins[2] : NULL;
  LossShape sh;
  if ((s = loss_shape(ctx, x, &ins[1], w, &sh))) return s;
  ApxTensor *lp = sce && !fused && apx_cpu_has(outs, n_out, 1) ? &outs[1] : NULL;
  ApxTensor *saved = fused && apx_cpu_has(outs, n_out, 1) ? &outs[1] : NULL;
  int64_t nl = sh.N * sh.inner;
  if (saved && (apx_tensor_numel(saved) != nl || saved->dtype != x->dtype))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "saved must have the labels' shape");
  if (apx_tensor_numel(&outs[0]) != (a->reduction == APX_RED_NONE ? nl : 1) ||
      outs[0].dtype != x->dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "loss output shape/type does not match");
  if (lp && (!apx_same_dims(lp, x) || lp->dtype != x->dtype))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "log_prob must have the scores' shape");
  size_t es = apx_dtype_size(x->dtype);
  char *buf = malloc((size_t)(2 * nl + 1) * es);
  if (!buf) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  int nt = apx_cpu_threads(ctx);
  int64_t bad;
  if (x->dtype == APX_DT_F64) {
    LossArgs_f64 la = {x->data, ins[1].data, w ? w->data : NULL, NULL, sh.N, sh.C, sh.inner, sce,
                       a->has_ignore_index, a->ignore_index};
    double *l = (double *)buf, *wl = l + nl;
    bad = loss_lines_f64(&la, l, wl, lp ? lp->data : NULL, saved ? saved->data : NULL, nt);
    if (!bad) loss_reduce_f64(l, wl, nl, a->reduction, outs[0].data);
  } else {
    LossArgs_f32 la = {x->data, ins[1].data, w ? w->data : NULL, NULL, sh.N, sh.C, sh.inner, sce,
                       a->has_ignore_index, a->ignore_index};
    float *l = (float *)buf, *wl = l + nl;
    bad = loss_lines_f32(&la, l, wl, lp ? lp->data : NULL, saved ? saved->data : NULL, nt);
    if (!bad) loss_reduce_f32(l, wl, nl, a->reduction, outs[0].data);
  }
  free(buf);
  return bad ? bad_label(ctx, &ins[1], bad, sh.C) : APX_STATUS_OK;
}

/* SCE grad: ins = dLoss, log_prob, labels, weights?; NLL grad: ins = dLoss, target, weight?
 * (the forward input's shape is the output's); FusedXentropyGrad: dLoss, scores, labels,
 * saved. */
APX_CPU_KERNEL(apx_cpu_loss_grad) {
  ApxStatus s;
  int fused = op == APX_OP_FusedXentropyGrad;
  int sce = fused || op == APX_OP_SoftmaxCrossEntropyLossGrad;
  int li = sce ? 2 : 1; /* labels input */
  for (int i = 0; i <= li + fused; i++)
    if ((s = apx_cpu_need_in(ctx, ins, n_in, i))) return s;
  if ((s = apx_cpu_need_out(ctx, outs, n_out, 0))) return s;
  const ApxAttrLoss *a = attrs;
  if ((s = check_reduction(ctx, a))) return s;
  ApxTensor *dx = &outs[0];
  const ApxTensor *w = !fused && apx_cpu_has(ins, n_in, li + 1) ? &ins[li + 1] : NULL;
  LossShape sh;
  if ((s = loss_shape(ctx, dx, &ins[li], w, &sh))) return s;
  if (sce && (!apx_same_dims(&ins[1], dx) || ins[1].dtype != dx->dtype))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "%s must have dScores' shape",
                        fused ? "scores" : "log_prob");
  int64_t nl = sh.N * sh.inner;
  const void *lse = fused ? ins[3].data : NULL;
  if (fused && (apx_tensor_numel(&ins[3]) != nl || ins[3].dtype != dx->dtype))
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "saved must have the labels' shape");
  if (apx_tensor_numel(&ins[0]) != (a->reduction == APX_RED_NONE ? nl : 1) ||
      ins[0].dtype != dx->dtype)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "dLoss shape/type does not match");
  int nt = apx_cpu_threads(ctx);
  int64_t bad;
  const void *x = sce ? ins[1].data : NULL;
  if (dx->dtype == APX_DT_F64) {
    LossArgs_f64 la = {x, ins[li].data, w ? w->data : NULL, lse, sh.N, sh.C, sh.inner, sce,
                       a->has_ignore_index, a->ignore_index};
    bad = loss_grad_f64(&la, ins[0].data, a->reduction, dx->data, nt);
  } else {
    LossArgs_f32 la = {x, ins[li].data, w ? w->data : NULL, lse, sh.N, sh.C, sh.inner, sce,
                       a->has_ignore_index, a->ignore_index};
    bad = loss_grad_f32(&la, ins[0].data, a->reduction, dx->data, nt);
  }
  return bad ? bad_label(ctx, &ins[li], bad, sh.C) : APX_STATUS_OK;
}
