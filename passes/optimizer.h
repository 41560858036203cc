/* optimizer.h - the optimizer section of the training graph (DESIGN.md 4, 9).
 *
 * pass_optimizer runs right after pass_autodiff (o->training set) and appends, in section
 * APX_SEC_OPTIMIZER (origin -1, fp32 by role), for the n parameters that have a gradient
 * (g->vals[p].grad >= 0), in value-id order:
 *
 *   UnscaleCheck(apx_loss_scale, grad_0 .. grad_{n-1})
 *       -> found_inf, first_bad, norm_sq, unscaled_0 .. unscaled_{n-1}
 *   OptimizerStep(found_inf, norm_sq, apx_lr, apx_optimizer_step,
 *                 P_0..P_{n-1}, unscaled_0.., state groups)            (no outputs)
 *
 * exactly as attrs.h documents them (input order, state groups per kind, semantics).
 * Names: "apx_unscale_check", "apx_optimizer_step" (nodes); "apx_found_inf",
 * "apx_first_bad_grad", "apx_grad_norm_sq", "grad/<p>/unscaled" (values); STATE values
 * "apx_lr" (fp32 [1] = o->lr), "apx_optimizer_step" (int64 [1] = 0), "opt/<p>/momentum",
 * "opt/<p>/exp_avg", "opt/<p>/exp_avg_sq" (fp32 zeros of p's shape, origin p).
 * Gradient clipping (o->clip_grad_norm > 0) is ApxAttrOptimizer.max_grad_norm: the kernel
 * scales the update by min(1, max / (sqrt(norm_sq) + 1e-6)).
 * Defaults where the user set no flag: SGD weight decay 0 (torch.optim.SGD), LAMB eps 1e-6
 * (apex FusedLAMB); otherwise the options' values (AdamW: 1e-8, 0.01).
 * With --accumulate K > 1 it also resets each gradient accumulator ("gradacc/<p>", see
 * autodiff.h) with AssignState(0, gradacc) in this section.
 * With several losses (autodiff.h) the gradients are already unscaled sums and
 * apx_loss_scale is the constant 1; autodiff's per-loss UnscaleChecks read other scales and
 * do not count as this pass's.
 * A graph whose parameters all lack gradients gets no optimizer section (warning). Running
 * it again on a graph that has an OptimizerStep changes nothing. */
#ifndef APX_OPTIMIZER_H
#define APX_OPTIMIZER_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_optimizer(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* OptimizerStep's state groups and input count: apx_optimizer_state_groups and
 * apx_optimizer_n_inputs (kernels/attrs.h). */

#ifdef __cplusplus
}
#endif
#endif
