/* master_weights.h - OptimizerStep updates fp32 master weights and refreshes the half model
 * parameters in the same multi-tensor pass (Apex O2, DESIGN.md 4, 5).
 *
 * pass_master_weights runs after the precision passes. At O2 passes/cast_insert.c stores
 * a parameter p in half and keeps its fp32 data as a STATE value with APX_VALF_MASTER and
 * origin = p. For each OptimizerStep with master_weights = 0 that has such parameters, this
 * pass rewrites the node (attrs.h) to
 *   OptimizerStep(found_inf, norm_sq, lr, step, M[n], G[n], S[k][n], H[n])
 * with master_weights = 1: M_i is p's fp32 master and H_i = p (the half model parameter,
 * refreshed from M_i after the update); a parameter stored in fp32 (BatchNorm parameters,
 * values that do not fit the half type) is its own M_i with H_i = -1. Gradients
 * (UnscaleCheck outputs) and optimizer state are fp32 already. With o->master_weights on,
 * a half parameter without a master is an internal error (exit code 1); without it (O3) a
 * half parameter is updated in place (fp32 math, rounded on store).
 * Returns unchanged when there is nothing to rewrite, APX_PASS_CHANGED_KEEPS_ORDER when the
 * inputs it takes out and puts in are produced by no node (no edge of the graph changes, so
 * the order is what a re-sort would give), else APX_PASS_CHANGED. */
#ifndef APX_MASTER_WEIGHTS_H
#define APX_MASTER_WEIGHTS_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_master_weights(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
