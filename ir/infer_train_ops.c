/* infer_train_ops.c - training-step internal ops (loss scaling, optimizer, state binding,
 * allreduce), following the contracts next to each op in kernels/attrs.h. OptimizerStep
 * and AssignState have no outputs (effects on STATE/PARAM buffers); Allreduce's outputs
 * mirror its inputs (in place). */
#include <inttypes.h>
#include <string.h>

#include "ir/infer_util.h"

/* Output slot mirrors input in_slot. */
static int mirror(ApxGraph *g, int node, int slot, int in_slot, ApxDiag *d) {
  return infer_set_out_like(g, node, slot, in_slot, d);
}

static ApxDType f32_or_f64(ApxDType t) { return t == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32; }

static int check_scalar(const ApxGraph *g, int node, int slot, const char *what, ApxDType dt,
                        ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  if (!v) return infer_in_error(d, g, node, "input %d (%s) is required", slot, what);
  if (v->dtype != dt || apx_value_numel(v) != 1)
    return infer_in_error(d, g, node, "input %d '%s' (%s) must be %s with one element", slot,
                          v->name, what, apx_dtype_name(dt));
  return 0;
}

/* LossScaleSeed(loss, loss_scale) -> dLoss: the loss's shape, fp32 (fp64 for an fp64 loss). */
static int infer_loss_scale_seed(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (check_scalar(g, node, 1, "loss_scale", APX_DT_F32, d)) return -1;
  const ApxValue *loss = infer_in(g, node, 0);
  return infer_set_out(g, node, 0, f32_or_f64(loss->dtype), loss->rank, loss->dims, d);
}

/* UnscaleCheck(loss_scale, g_0..g_{n-1}) -> found_inf, first_bad, norm_sq, u_0..u_{n-1} */
static int infer_unscale_check(ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  if (n->n_out != n->n_in + 2)
    return apx_node_error(d, g, node, "expects 3 + n outputs for 1 + n inputs (found_inf, "
                          "first_bad, norm_sq, one per gradient), got %d for %d", n->n_out, n->n_in);
  if (check_scalar(g, node, 0, "loss_scale", APX_DT_F32, d)) return -1;
  static const int64_t one = 1;
  if (infer_set_out(g, node, 0, APX_DT_F32, 1, &one, d) || infer_set_out(g, node, 1, APX_DT_I32, 1, &one, d) ||
      infer_set_out(g, node, 2, APX_DT_F32, 1, &one, d))
    return -1;
  for (int k = 1; k < n->n_in; k++) {
    const ApxValue *gk = infer_in(g, node, k);
    if (!gk) return infer_in_error(d, g, node, "input %d (gradient %d) is missing", k, k - 1);
    if (infer_check_dtype(g, node, k, INFER_DT_FLOAT, d)) return -1;
    if (infer_set_out(g, node, k + 2, f32_or_f64(gk->dtype), gk->rank, gk->dims, d)) return -1;
  }
  return 0;
}

/* OptimizerStep(found_inf, norm_sq, lr, step, P[n], G[n], S_1[n] .. S_k[n], H[n]?) -> () */
static int infer_optimizer_step(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrOptimizer *a = APX_NODE_ATTRS(g, node, ApxAttrOptimizer);
  const ApxNode *nd = &g->nodes[node];
  int np = a->n_params;
  if (a->kind < APX_OPTIM_SGD || a->kind > APX_OPTIM_LAMB)
    return apx_node_error(d, g, node, "unknown optimizer kind %d", a->kind);
  int k = apx_optimizer_state_groups(a), mw = a->master_weights != 0;
  int64_t want = apx_optimizer_n_inputs(a);
  if (np < 1 || nd->n_in != want)
    return apx_node_error(d, g, node, "expects 4 + n_params * %d = %" PRId64 " inputs (n_params = %d), got %d",
                          2 + k + mw, want, np, nd->n_in);
  if (check_scalar(g, node, 0, "found_inf", APX_DT_F32, d) || check_scalar(g, node, 1, "norm_sq", APX_DT_F32, d) ||
      check_scalar(g, node, 2, "lr", APX_DT_F32, d) || check_scalar(g, node, 3, "step", APX_DT_I64, d))
    return -1;
  for (int i = 0; i < np; i++) {
    int p = 4 + i;
    const ApxValue *pv = infer_in(g, node, p);
    if (!pv) return infer_in_error(d, g, node, "input %d (parameter %d) is missing", p, i);
    if (infer_check_dtype(g, node, p, INFER_DT_FLOAT, d)) return -1;
    for (int j = 1; j < 2 + k + mw; j++) {
      int slot = 4 + j * np + i;
      if (!infer_in(g, node, slot)) {
        if (j == 2 + k) continue; /* H_i absent: no half copy */
        return infer_in_error(d, g, node, "input %d is missing", slot);
      }
      if (infer_check_dtype(g, node, slot, INFER_DT_FLOAT, d) ||
          infer_check_shape(g, node, slot, pv->rank, pv->dims, d))
        return -1;
    }
  }
  return 0;
}

/* AssignState(src, dst) -> (): src has dst's shape (any float dtype, converted) or one
 * element (fill). */
static int infer_assign_state(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *src = infer_in(g, node, 0), *dst = infer_in(g, node, 1);
  if (infer_check_dtype(g, node, 0, INFER_DT_NUMERIC, d) || infer_check_dtype(g, node, 1, INFER_DT_NUMERIC, d))
    return -1;
  if (apx_value_numel(src) == 1) return 0;
  return infer_check_shape(g, node, 0, dst->rank, dst->dims, d);
}

/* Allreduce(t_1..t_n) -> t'_1..t'_n, each mirroring its input. */
static int infer_allreduce(ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  if (n->n_out != n->n_in)
    return apx_node_error(d, g, node, "expects one output per input, got %d for %d", n->n_out, n->n_in);
  for (int k = 0; k < n->n_in; k++) {
    if (!infer_in(g, node, k)) return infer_in_error(d, g, node, "input %d is missing", k);
    if (infer_check_dtype(g, node, k, INFER_DT_FLOAT, d) || mirror(g, node, k, k, d)) return -1;
  }
  return 0;
}

#define R(OP, CANON, INFER) {APX_OP_##OP, CANON, INFER}

const InferRule apx_infer_rules_train[] = {
    R(LossScaleSeed, NULL, infer_loss_scale_seed),
    R(UnscaleCheck, NULL, infer_unscale_check),
    R(OptimizerStep, NULL, infer_optimizer_step),
    R(AssignState, NULL, infer_assign_state),
    R(Allreduce, NULL, infer_allreduce),
    {APX_OP_INVALID, NULL, NULL},
};
