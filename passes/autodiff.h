/* autodiff.h - the backward graph: reverse-mode differentiation from the loss (DESIGN.md 2,
 * 4, 9).
 *
 * pass_autodiff runs when o->training is set, after fold_constants and infer_shapes, and
 * before the precision passes (pass order: autodiff, optimizer, precision..., then
 * master_weights). On the graph it:
 *
 *  - checks the loss (g->loss): a float value with one element, else an error naming it;
 *  - classifies state: BatchNormalization inputs 3 and 4 (running mean/var) become
 *    APX_VAL_STATE (never parameters); loss class weights (SoftmaxCrossEntropyLoss /
 *    NegativeLogLikelihoodLoss input 2) are constants, not parameters; each Dropout node
 *    gets its own ApxAttrDropout.rng_stream (= its node id);
 *  - trainable parameters: APX_VAL_PARAM float values that are not frozen (flag
 *    APX_VALF_FROZEN or o->frozen);
 *  - seeds d(loss) with LossScaleSeed(loss, apx_loss_scale) (attrs.h), creating the STATE
 *    value "apx_loss_scale" (fp32 [1], initial o->loss_scale) the runtime's scaler updates;
 *  - walks the forward nodes in reverse g->order and, for every node on a path from a
 *    parameter to the loss, emits the backward nodes of its gradient rule
 *    (grad_rules.h: section APX_SEC_BACKWARD, origin = the forward node), adding saved
 *    outputs to the forward node where the rule needs them (LayerNorm Mean/InvStdDev,
 *    BatchNorm saved mean/inv-std, Dropout mask, SoftmaxCrossEntropyLoss log_prob).
 *    Gradients of a value with several consumers are accumulated with Add (two) or Sum
 *    (more), origin = the value's producer. Integer values never get gradients. An op on
 *    the path without a rule is an error (exit code 2):
 *      model.onnx: node 'Max_3' (Max): no gradient rule, needed for the gradient of
 *      parameter 'w1'
 *  - sets g->vals[p].grad for every parameter that reaches the loss (value named
 *    "grad/<param>", flag APX_VALF_GRAD, origin = p); a parameter that does not reach the
 *    loss gets a warning and no gradient (the optimizer leaves it alone, like PyTorch's
 *    None grad);
 *  - BatchNormalization(training_mode = 1): outputs 1 and 2 (created when absent) are
 *    bound back to inputs 3 and 4 by AssignState nodes in the OPTIMIZER section;
 *  - gradient accumulation (o->accumulate = K > 1): the seed is scale / K
 *    (LossScaleSeed.multiplier) and every parameter gets a persistent accumulator, the
 *    STATE value "gradacc/<param>" (fp32, or fp64 for an fp64 parameter; zeros; flag GRAD,
 *    origin = p). At the end of BACKWARD: grad/<param>/sum = Add(gradacc, grad/<param>)
 *    (origin -1, so it stays fp32 under the precision passes) and
 *    AssignState(grad/<param>/sum, gradacc). vals[p].grad is the sum. The runtime runs
 *    FORWARD + BACKWARD K times (one micro-batch each) and then OPTIMIZER once; the
 *    optimizer pass resets the accumulators to zero in OPTIMIZER (AssignState of a zero
 *    scalar), so each optimizer step sees the sum over its K micro-batches. BatchNorm
 *    running statistics are then committed once per optimizer step (from the last
 *    micro-batch).
 *
 *  - several losses (o->loss_name "A,B", ir/loss_list.h; Apex num_losses / loss_id, DESIGN.md
 *    9): one reverse sweep per loss, each seeded by LossScaleSeed(loss, apx_loss_scale/<loss>)
 *    (node "apx_loss_scale_seed/<loss>", STATE "apx_loss_scale/<loss>", initial o->loss_scale),
 *    so each loss's parameter gradients carry its own scale; per loss, in the OPTIMIZER
 *    section, UnscaleCheck(apx_loss_scale/<loss>, its gradients in value-id order) ->
 *    apx_found_inf/<loss>, apx_first_bad_grad/<loss>, apx_grad_norm_sq/<loss>,
 *    grad/<p>/<loss>/unscaled (origin p), which the runtime gives that loss's scaler; then
 *    grad/<p> = Add/Sum of p's unscaled gradients (vals[p].grad; a parameter reached by one
 *    loss keeps its unscaled value). apx_loss_scale is then the CONST 1: the optimizer pass's
 *    UnscaleCheck checks the summed gradients (a non-finite one makes the sum non-finite, so
 *    OptimizerStep skips) and computes the clipping norm of the sum. Refused (exit code 2):
 *    --accumulate K > 1 with several losses ("not supported yet").
 *
 * Node ids grow in section order (forward < backward < optimizer), so apx_graph_toposort
 * keeps the three sections contiguous. Nodes without outputs (AssignState, OptimizerStep)
 * are effects and must survive dead-code removal. Running the pass on a graph that
 * already has a LossScaleSeed changes nothing. */
#ifndef APX_AUTODIFF_H
#define APX_AUTODIFF_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Name of the loss-scale STATE value ([1] fp32) shared by the seed and UnscaleCheck. */
#define APX_LOSS_SCALE_NAME "apx_loss_scale"

int pass_autodiff(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* 1 when v is a trainable parameter for options o (PARAM, float, not frozen). */
int apx_value_is_trainable(const ApxGraph *g, const ApxOptions *o, int v);

#ifdef __cplusplus
}
#endif
#endif
