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
#include "kernels/validate.h"

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

/* x: (N, C, D...), labels: (N, D...) (checked by kernels/validate.h) */
static void loss_shape(const ApxTensor *x, LossShape *sh) {
  sh->N = x->dims[0];
  sh->C = x->dims[1];
  sh->inner = apx_dims_prod(x->dims, 2, x->rank);
}

static ApxStatus bad_label(ApxCpuCtx *ctx, const ApxTensor *labels, int64_t bad, int64_t C) {
  return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, APX_MSG_LABEL_RANGE,
                      (long long)((const int64_t *)labels->data)[bad - 1], (long long)(bad - 1),
                      (long long)C);
}

APX_CPU_KERNEL(apx_cpu_loss) {
  const ApxAttrLoss *a = attrs;
  int fused = op == APX_OP_FusedXentropy, sce = fused || op == APX_OP_SoftmaxCrossEntropyLoss;
  const ApxTensor *x = &ins[0], *w = !fused && apx_cpu_has(ins, n_in, 2) ? &ins[2] : NULL;
  LossShape sh;
  loss_shape(x, &sh);
  ApxTensor *lp = sce && !fused && apx_cpu_has(outs, n_out, 1) ? &outs[1] : NULL;
  ApxTensor *saved = fused && apx_cpu_has(outs, n_out, 1) ? &outs[1] : NULL;
  int64_t nl = sh.N * sh.inner;
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
  int fused = op == APX_OP_FusedXentropyGrad;
  int sce = fused || op == APX_OP_SoftmaxCrossEntropyLossGrad;
  int li = sce ? 2 : 1; /* labels input */
  const ApxAttrLoss *a = attrs;
  ApxTensor *dx = &outs[0];
  const ApxTensor *w = !fused && apx_cpu_has(ins, n_in, li + 1) ? &ins[li + 1] : NULL;
  LossShape sh;
  loss_shape(dx, &sh);
  const void *lse = fused ? ins[3].data : NULL;
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
