/* optimizer.c - pass_optimizer: the optimizer section (fused unscale + inf check + norm,
 * one multi-tensor update, accumulator reset). See optimizer.h and attrs.h. */
#include "passes/optimizer.h"

#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/autodiff.h"

static int oom(ApxGraph *g, ApxDiag *d) {
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
}

/* name when free, else a unique variant */
static const char *free_name(ApxGraph *g, const char *name) {
  return apx_graph_free_name(g, name);
}

/* A STATE value starting at zero (no data: the runtime zeroes the persistent region) or
 * at `init` bytes, named name (made unique if taken). */
static int state_value(ApxGraph *g, ApxDiag *d, const char *name, ApxDType dt, int32_t rank,
                       const int64_t *dims, const void *init, int origin) {
  if (!name) return oom(g, d);
  int v = apx_graph_add_value(g, d, free_name(g, name), APX_VAL_STATE, dt, rank, dims);
  if (v < 0) return -1;
  int64_t bytes = apx_value_bytes(&g->vals[v]);
  if (bytes < 0) return oom(g, d);
  if (init && !(g->vals[v].data = apx_arena_alloc_raw(&g->arena, (size_t)bytes + 1))) return oom(g, d);
  if (init) memcpy(g->vals[v].data, init, (size_t)bytes);
  g->vals[v].origin = origin;
  return v;
}

static int add_node(ApxGraph *g, ApxDiag *d, ApxOp op, const char *name, const void *attrs,
                    int n_in, const int *in, int n_out, const int *out) {
  int id = apx_graph_add_node(g, d, op, name, n_in, in, n_out, out);
  if (id < 0) return -1;
  g->nodes[id].section = APX_SEC_OPTIMIZER;
  if (attrs) memcpy(g->nodes[id].typed, attrs, apx_op_info(op)->attrs_size);
  return apx_node_infer(g, id, d) ? -1 : id;
}

static ApxAttrOptimizer optimizer_attrs(const ApxOptions *o, int n) {
  ApxAttrOptimizer a = {
      .kind = (int32_t)o->optimizer,
      .n_params = n,
      .lr = o->lr,
      .momentum = o->momentum,
      .beta1 = o->beta1,
      .beta2 = o->beta2,
      .eps = o->eps,
      .weight_decay = o->weight_decay,
      .dampening = 0.0f,
      .nesterov = o->nesterov,
      .master_weights = 0,
      .max_grad_norm = o->clip_grad_norm > 0 ? o->clip_grad_norm : 0.0f,
  };
  if (o->optimizer == APX_OPTIM_SGD && !o->weight_decay_set) a.weight_decay = 0.0f;
  if (o->optimizer == APX_OPTIM_LAMB && !o->eps_set) a.eps = 1e-6f;
  return a;
}

/* --accumulate K: AssignState(0, gradacc/<p>) for every accumulator. */
static int reset_accumulators(ApxGraph *g, ApxDiag *d) {
  int nv = g->n_vals, zero32 = -1, zero64 = -1;
  for (int v = 0; v < nv; v++) {
    const ApxValue *acc = &g->vals[v];
    if (acc->kind != APX_VAL_STATE || !(acc->flags & APX_VALF_GRAD) || acc->origin < 0) continue;
    int *zero = acc->dtype == APX_DT_F64 ? &zero64 : &zero32;
    if (*zero < 0) {
      const char *name = acc->dtype == APX_DT_F64 ? "apx_zero_f64" : "apx_zero_f32";
      ApxDType dt = acc->dtype;
      *zero = apx_graph_add_value(g, d, apx_graph_unique_name(g, name), APX_VAL_CONST, dt, 0, NULL);
      if (*zero < 0) return -1;
      if (!(g->vals[*zero].data = apx_arena_alloc(&g->arena, apx_dtype_size(dt)))) return oom(g, d);
    }
    int in[2] = {*zero, v};
    const char *nn = apx_arena_printf(&g->arena, "%s/reset", g->vals[v].name);
    if (add_node(g, d, APX_OP_AssignState, nn, NULL, 2, in, 0, NULL) < 0) return -1;
  }
  return 0;
}

int pass_optimizer(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  if (!o->training) return APX_PASS_UNCHANGED;
  int scale = apx_graph_find_value(g, APX_LOSS_SCALE_NAME);
  /* done already: an OptimizerStep, or the UnscaleCheck of apx_loss_scale (several losses:
   * autodiff's per-loss UnscaleChecks read their own scales, and apx_loss_scale is 1) */
  for (int i = 0; i < g->n_nodes; i++)
    if ((g->nodes[i].op == APX_OP_OptimizerStep ||
         (g->nodes[i].op == APX_OP_UnscaleCheck && g->nodes[i].in[0] == scale)) &&
        !(g->nodes[i].flags & APX_NODEF_DEAD))
      return APX_PASS_UNCHANGED;
  if (scale < 0)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: internal error: pass optimizer needs the "
                          "loss-scale state '%s' (run pass autodiff first)", g->file,
                          APX_LOSS_SCALE_NAME);
  int nv0 = g->n_vals, n0 = g->n_nodes, n = 0;
  int *params = malloc(((size_t)nv0 + 1) * sizeof(int));
  if (!params) return oom(g, d);
  for (int v = 0; v < nv0; v++)
    if (g->vals[v].kind == APX_VAL_PARAM && g->vals[v].grad >= 0) params[n++] = v;
  int changed = 0;
  if (o->accumulate > 1) {
    if (reset_accumulators(g, d)) goto fail;
    changed = 1;
  }
  if (n == 0) {
    free(params);
    apx_diag_warn(d, "%s: no parameter has a gradient: the plan has no optimizer step", g->file);
    return changed ? apx_graph_order_append(g, n0, d) : APX_PASS_UNCHANGED;
  }
  ApxAttrOptimizer at = optimizer_attrs(o, n);
  int groups = apx_optimizer_state_groups(&at);
  int n_uc_out = APX_UNSCALE_OUT_FIRST_GRAD + n;
  int n_os_in = (int)apx_optimizer_n_inputs(&at);
  int *uc_in = malloc(((size_t)n + 1) * sizeof(int));
  int *uc_out = malloc((size_t)n_uc_out * sizeof(int));
  int *os_in = malloc((size_t)n_os_in * sizeof(int));
  if (!uc_in || !uc_out || !os_in) {
    free(uc_in), free(uc_out), free(os_in);
    oom(g, d);
    goto fail;
  }
  int64_t one = 1;
  int rc = -1;
  /* UnscaleCheck */
  uc_in[0] = scale;
  uc_out[APX_UNSCALE_OUT_FOUND_INF] = apx_graph_add_value(g, d, free_name(g, "apx_found_inf"), APX_VAL_ACTIVATION, APX_DT_F32, 1, &one);
  uc_out[APX_UNSCALE_OUT_FIRST_BAD] = apx_graph_add_value(g, d, free_name(g, "apx_first_bad_grad"), APX_VAL_ACTIVATION, APX_DT_I32, 1, &one);
  uc_out[APX_UNSCALE_OUT_NORM_SQ] = apx_graph_add_value(g, d, free_name(g, "apx_grad_norm_sq"), APX_VAL_ACTIVATION, APX_DT_F32, 1, &one);
  if (uc_out[0] < 0 || uc_out[1] < 0 || uc_out[2] < 0) goto out;
  for (int i = 0; i < n; i++) {
    int gv = g->vals[params[i]].grad;
    ApxValue gval = g->vals[gv];
    uc_in[1 + i] = gv;
    const char *un = apx_arena_printf(&g->arena, "%s/unscaled", gval.name);
    if (!un) {
      oom(g, d);
      goto out;
    }
    un = free_name(g, un);
    ApxDType dt = gval.dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
    int u = apx_graph_add_value(g, d, un, APX_VAL_ACTIVATION, dt, gval.rank, gval.dims);
    if (u < 0) goto out;
    g->vals[u].flags |= APX_VALF_GRAD;
    g->vals[u].origin = params[i];
    uc_out[APX_UNSCALE_OUT_FIRST_GRAD + i] = u;
  }
  if (add_node(g, d, APX_OP_UnscaleCheck, "apx_unscale_check", NULL, 1 + n, uc_in, n_uc_out,
               uc_out) < 0)
    goto out;

  /* OptimizerStep */
  int64_t step0 = 0;
  float lr0 = o->lr;
  os_in[APX_OPTIM_IN_FOUND_INF] = uc_out[APX_UNSCALE_OUT_FOUND_INF];
  os_in[APX_OPTIM_IN_NORM_SQ] = uc_out[APX_UNSCALE_OUT_NORM_SQ];
  os_in[APX_OPTIM_IN_LR] = state_value(g, d, "apx_lr", APX_DT_F32, 1, &one, &lr0, -1);
  os_in[APX_OPTIM_IN_STEP] = state_value(g, d, "apx_optimizer_step", APX_DT_I64, 1, &one, &step0, -1);
  if (os_in[APX_OPTIM_IN_LR] < 0 || os_in[APX_OPTIM_IN_STEP] < 0) goto out;
  static const char *const state_names[2][2] = {{"momentum", NULL}, {"exp_avg", "exp_avg_sq"}};
  for (int i = 0; i < n; i++) {
    int p = params[i];
    os_in[APX_OPTIM_IN_FIRST_GROUP + i] = p;
    os_in[APX_OPTIM_IN_FIRST_GROUP + n + i] = uc_out[APX_UNSCALE_OUT_FIRST_GRAD + i];
    for (int s = 0; s < groups; s++) {
      ApxValue pv = g->vals[p];
      const char *nm = state_names[at.kind == APX_OPTIM_SGD ? 0 : 1][s];
      ApxDType dt = pv.dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
      int sv = state_value(g, d, apx_arena_printf(&g->arena, "opt/%s/%s", pv.name, nm), dt,
                           pv.rank, pv.dims, NULL, p);
      if (sv < 0) goto out;
      os_in[APX_OPTIM_IN_FIRST_GROUP + (2 + s) * n + i] = sv;
    }
  }
  if (add_node(g, d, APX_OP_OptimizerStep, "apx_optimizer_step", &at, n_os_in, os_in, 0, NULL) < 0)
    goto out;
  rc = 0;
out:
  free(uc_in);
  free(uc_out);
  free(os_in);
  if (rc) goto fail;
  free(params);
  /* nodes appended only (the optimizer section): the order extends when they allow */
  return apx_graph_order_append(g, n0, d);
fail:
  free(params);
  return APX_PASS_ERROR;
}
