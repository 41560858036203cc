/* precision.h - the precision decision pass (DESIGN.md 5, 6): Apex AMP's run-time choices
 * made ahead of time, each with the rule that made it.
 *
 * pass_precision sets ApxNode.compute, .reason (ApxPrecReason, passes/precision_rules.h)
 * and .reason_detail (the --explain text) for every live node, forward section first, then
 * backward, then optimizer:
 *
 *   fixed roles (any section, in this order):
 *     Cast from the model      its target type                         "cast"
 *     optimizer section, FIXED-class ops (loss scaling, state, allreduce)  fp32  "optimizer"
 *     integer/bool output      its output type (comparisons: widest float input, so their
 *                              inputs are unified)                     "integer"
 *     loss ops and the loss's producer (forward)  fp32                  "loss"
 *     backward nodes           their forward node's (origin) decision  "inherited"; without
 *                              origin the widest float input type      "backward-widest"
 *   forward float nodes, highest precedence first:
 *     1. node override  --fp32-nodes GLOB (fp32), then --policy node entries
 *     2. op override    --fp32-ops, --half-ops, --promote-ops, then --policy op entries
 *     3. overflow rule  findings of pass_overflow_check (must run just before): fp32 with a
 *                       warning when the rules below would give half; with
 *                       --clamp-constants constant findings are clamped instead
 *                       (precision_rules.h has the clamping rule) and the node runs in half
 *     4. BN retention   keep_batchnorm_fp32: BatchNormalization fp32
 *     5. list (O1)      op table class: HALF -> o->half, FP32 -> fp32, PROMOTE -> widest
 *     6. default        O0 fp32; O1 the type of its inputs; O2/O3 the half type
 *
 * "Widest input" considers the data inputs (precision_rules.h roles) at the type each will
 * have: a producer's decision, parameters and graph inputs in the half type at O2/O3
 * (cast_model_type; BN parameters stay fp32), constants as they are. Constants do not
 * widen a node unless all its float inputs are constants: like Python scalars in Apex
 * (x_half * 0.5 stays half); the constant is converted (and range-checked) instead.
 * When an override forces half on a node with an overflow finding, the finding is warned
 * about (and clamped with --clamp-constants). When the rules below the overflow rule give
 * fp32 anyway, the finding is kept in ApxNode.note, without a warning.
 *
 * Errors (exit 2): unknown op names in --half-ops/--fp32-ops/--promote-ops, an op in two
 * of them, and --policy binding errors (passes/policy.h; the file is read by the driver:
 * compiler/policy_file.h). Warnings: --fp32-nodes patterns that
 * match no forward node; policy entries that contradict a fixed role (ignored).
 * Returns APX_PASS_CHANGED when a decision changed or a constant was clamped. */
#ifndef APX_PASS_PRECISION_H
#define APX_PASS_PRECISION_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_precision(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
