/* cast_insert.h - makes dtypes agree with the precision decisions (DESIGN.md 5, 6).
 *
 * pass_cast_insert runs after pass_precision. Walking g->order:
 *  - float outputs that follow the node's precision (precision_rules.h) take its compute
 *    type; BN running/saved statistics, LayerNorm Mean/InvStdDev, masks and indices keep
 *    theirs;
 *  - float data inputs of another type than the node's compute type are cast (index
 *    inputs, labels, Where's condition, static operands are untouched; inputs of Cast,
 *    optimizer and loss-scaling nodes are untouched; integer nodes cast their float inputs
 *    only when they compare them (PROMOTE class));
 *  - BN scale/bias/mean/var stay fp32 whether BN runs in fp32 or, following cuDNN, whose
 *    batch-norm kernels take fp32 scale/bias/statistics for half x and y, in half;
 *  - each value is cast at most once per target type (the Cast is shared by its users);
 *  - a constant (APX_VAL_CONST, or a frozen initializer) is converted into a new constant
 *    (origin = the original, name "<name>_<type>_apxN") instead of a Cast node;
 *  - weights: with cast_model_type fp32 (O0/O1) parameters stay fp32 and users in half
 *    share one Cast per parameter (section FORWARD, "once per step": its input is a
 *    persistent parameter, so the schedule may place it anywhere before its first use).
 *    At O2/O3 a parameter whose users include a half node, that is not a BN
 *    scale/bias/mean/var, and whose data fits the half type (precision_rules.h range check)
 *    is stored in the half type: its data is converted in place and its dtype changed;
 *    with master weights (O2) the original fp32 data becomes an APX_VAL_STATE value named
 *    "<param>_fp32_master" (unique), flags APX_VALF_MASTER, origin = the parameter, so the
 *    optimizer pass finds it (OptimizerStep's P_i; the parameter is its half copy H_i).
 *    Parameters that do not qualify keep fp32 storage and are cast per step like at O1;
 *  - graph outputs keep the model's dtype: when a graph output's producer now runs in half,
 *    the producer writes a new value "<name>_<type>_apxN" and a Cast back to the original
 *    type produces the output under its own name (other users take the half value);
 *  - a parameter's gradient (APX_VALF_GRAD, origin a parameter) keeps the parameter's storage
 *    type the same way (Apex / torch AMP: the backward of the weight's Cast widens): at O1
 *    the gradients of fp32 weights are fp32, so buckets, allreduce and accumulation are fp32
 *    (DESIGN.md 11); at O2/O3 a weight stored in half has a half gradient;
 *  - Cast nodes made here: op Cast, typed ApxAttrCast{to, saturate = 1} and a generic "to"
 *    attribute, reason APX_REASON_CAST_INSERTED, compute = target type, section of the
 *    first user (FORWARD for parameters), origin = the first user, name "Cast_<value>".
 * Optimizer-section nodes are not touched. Counts go to g->casts.inserted / .folded.
 * Returns APX_PASS_CHANGED when anything changed (the pipeline then re-sorts). */
#ifndef APX_PASS_CAST_INSERT_H
#define APX_PASS_CAST_INSERT_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_cast_insert(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
