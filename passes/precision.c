/* precision.c - per-node precision decisions with their reasons (see precision.h). */
#include "passes/precision.h"

#include <stdlib.h>
#include <string.h>

#include "passes/policy.h"
#include "passes/precision_rules.h"

typedef struct Dec {
  ApxDType dt;
  int reason;
  const char *detail;
} Dec;

typedef struct Ctx {
  ApxGraph *g;
  const ApxOptions *o;
  ApxDiag *d;
  ApxPrecSettings s;
  const char *hn;          /* half type's short name */
  int32_t n_vals0;         /* values before the pass (clamping adds some) */
  unsigned char *bn_param; /* [n_vals0] consumed in a KEEP slot of some node: stays fp32 */
  int *clamped;            /* [n_vals0] clamped copy of a constant, -1 */
  const ApxPolicy *pol;    /* o->policy, NULL without --policy */
  int *pol_entry;          /* [n_nodes] policy node entry or -1 */
  int glob_hits[APX_MAX_LIST];
  int changed;
} Ctx;

static const char *level_name(ApxOptLevel l) {
  static const char *n[] = {"O0", "O1", "O2", "O3"};
  return (l >= APX_O0 && l <= APX_O3) ? n[l] : "O?";
}

/* The dtype value v will have once casts are in place (for "widest input" rules). */
static ApxDType eff_dtype(const Ctx *c, int v) {
  const ApxGraph *g = c->g;
  const ApxValue *val = &g->vals[v];
  if (!apx_dtype_is_float(val->dtype)) return val->dtype;
  if (val->producer >= 0) {
    const ApxNode *p = &g->nodes[val->producer];
    if ((p->flags & APX_NODEF_DEAD) || !apx_dtype_is_float(p->compute)) return val->dtype;
    for (int o = 0; o < p->n_out; o++)
      if (p->out[o] == v) return apx_prec_output_follows(g, val->producer, o) ? p->compute : val->dtype;
    return val->dtype;
  }
  int bn = v < c->n_vals0 && c->bn_param[v];
  if (val->kind == APX_VAL_PARAM && !(val->flags & APX_VALF_FROZEN) && c->s.model_half && !bn)
    return c->s.half;
  if (val->kind == APX_VAL_INPUT && c->s.model_half) return c->s.half;
  return val->dtype;
}

static int is_plain_const(const ApxValue *v) { return v->kind == APX_VAL_CONST && v->producer < 0; }

/* Widest float type among the node's data inputs; constants count only when every float
 * input is a constant. UNDEFINED when it has none. */
static ApxDType widest_input(const Ctx *c, int id) {
  const ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  ApxDType w = APX_DT_UNDEFINED, wc = APX_DT_UNDEFINED;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || apx_prec_input_role(g, id, k) != APX_IN_DATA) continue;
    ApxDType t = eff_dtype(c, v);
    if (!apx_dtype_is_float(t)) continue;
    if (is_plain_const(&g->vals[v])) wc = apx_dtype_widest(wc, t);
    else w = apx_dtype_widest(w, t);
  }
  return w != APX_DT_UNDEFINED ? w : wc;
}

static Dec dec(ApxDType dt, int reason, const char *detail) {
  Dec r = {dt, reason, detail};
  return r;
}

static ApxDType or_fp32(ApxDType t) { return t == APX_DT_UNDEFINED ? APX_DT_F32 : t; }

/* Rules 4-6: BN retention, list, default. */
static Dec decide_lower(Ctx *c, int id) {
  ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  const ApxOpInfo *info = apx_op_info(n->op);
  const char *op = apx_op_name(n->op);
  if ((n->op == APX_OP_BatchNormalization || n->op == APX_OP_BatchNormRelu) && c->s.keep_bn_fp32)
    return dec(APX_DT_F32, APX_REASON_BN_FP32,
               apx_arena_printf(&g->arena, "keep_batchnorm_fp32 (%s): %s runs in fp32",
                                level_name(c->s.level), op));
  if (c->s.lists) {
    switch (info->prec) {
      case APX_PREC_HALF:
        return dec(c->s.half, APX_REASON_LIST_HALF,
                   apx_arena_printf(&g->arena, "list: %s (allow) -- %s", c->hn, op));
      case APX_PREC_FP32:
        return dec(APX_DT_F32, APX_REASON_LIST_FP32,
                   apx_arena_printf(&g->arena, "list: fp32 (deny) -- %s", op));
      case APX_PREC_PROMOTE: {
        ApxDType w = or_fp32(widest_input(c, id));
        return dec(w, APX_REASON_LIST_PROMOTE,
                   apx_arena_printf(&g->arena, "list: promote -- %s: widest input %s", op,
                                    apx_dtype_short(w)));
      }
      default: break;
    }
  }
  if (c->s.model_half)
    return dec(c->s.half, APX_REASON_DEFAULT_HALF,
               apx_arena_printf(&g->arena, "default: %s runs float ops in %s",
                                level_name(c->s.level), c->hn));
  if (c->s.level == APX_O0 && !c->s.lists)
    return dec(APX_DT_F32, APX_REASON_DEFAULT_FP32, "default: O0 runs everything in fp32");
  ApxDType w = or_fp32(widest_input(c, id));
  return dec(w, APX_REASON_DEFAULT_INPUTS,
             apx_arena_printf(&g->arena, "default: %s runs %s in its inputs' type (%s)",
                              level_name(c->s.level), op, apx_dtype_short(w)));
}

/* A policy decision fp64 in a training graph: its parameters' gradients would reach the fp32
 * optimizer as fp64. Refused up front ("not supported yet", naming what to choose instead)
 * rather than failing later inside the optimizer step. Returns -1 (error in c->d) or 0. */
static int refuse_fp64_policy(Ctx *c, int id, ApxDType dt, int line) {
  if (dt != APX_DT_F64 || !c->o->training) return 0;
  const ApxNode *n = &c->g->nodes[id];
  return apx_diag_error(c->d, APX_EXIT_BAD_INPUT,
                        "%s: line %d: not supported yet: decision fp64 for node '%s' (%s) in a "
                        "training graph (gradients reach the optimizer in fp32); choose fp32, fp16, "
                        "bf16 or half, or compile with --inference", c->pol->path, line,
                        n->name ? n->name : "?", apx_op_name(n->op));
}

/* Rules 1-2: node and op overrides. Returns 1 with *r set when one applies, -1 on error. */
static int decide_override(Ctx *c, int id, Dec *r) {
  ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  const ApxOptions *o = c->o;
  const char *op = apx_op_name(n->op);
  for (int i = 0; i < o->fp32_nodes.n; i++)
    if (apx_glob_match(o->fp32_nodes.items[i], n->name)) {
      c->glob_hits[i]++;
      *r = dec(APX_DT_F32, APX_REASON_NODE_OVERRIDE,
               apx_arena_printf(&g->arena, "node override --fp32-nodes '%s'", o->fp32_nodes.items[i]));
      return 1;
    }
  if (c->pol && c->pol_entry[id] >= 0) {
    const ApxPolicyNode *e = &c->pol->nodes[c->pol_entry[id]];
    ApxDType dt = apx_policy_dtype(e->kind, e->dtype, c->s.half);
    if (e->kind == APX_POLICY_DTYPE && !apx_dtype_is_float(dt))
      apx_node_warn(c->d, g, id, "--policy %s asks %s for a float node, ignored", c->pol->path,
                    apx_dtype_short(dt));
    if (refuse_fp64_policy(c, id, dt, e->line)) return -1;
    if (apx_dtype_is_float(dt)) {
      *r = dec(dt, APX_REASON_POLICY_NODE,
               apx_arena_printf(&g->arena, "node override --policy %s: %s", c->pol->path,
                                apx_dtype_short(dt)));
      return 1;
    }
  }
  if (apx_name_list_has(&o->fp32_ops, op)) {
    *r = dec(APX_DT_F32, APX_REASON_OP_OVERRIDE, apx_arena_printf(&g->arena, "op override --fp32-ops %s", op));
    return 1;
  }
  if (apx_name_list_has(&o->half_ops, op)) {
    *r = dec(c->s.half, APX_REASON_OP_OVERRIDE, apx_arena_printf(&g->arena, "op override --half-ops %s", op));
    return 1;
  }
  if (apx_name_list_has(&o->promote_ops, op)) {
    ApxDType w = or_fp32(widest_input(c, id));
    *r = dec(w, APX_REASON_OP_OVERRIDE,
             apx_arena_printf(&g->arena, "op override --promote-ops %s: widest input %s", op,
                              apx_dtype_short(w)));
    return 1;
  }
  for (int i = 0; c->pol && i < c->pol->n_ops; i++) {
    const ApxPolicyOp *e = &c->pol->ops[i];
    if (e->op != n->op) continue;
    ApxDType dt = e->kind == APX_POLICY_PROMOTE ? or_fp32(widest_input(c, id))
                                                : apx_policy_dtype(e->kind, e->dtype, c->s.half);
    if (e->kind != APX_POLICY_PROMOTE && refuse_fp64_policy(c, id, dt, e->line)) return -1;
    *r = dec(dt, APX_REASON_POLICY_OP,
             apx_arena_printf(&g->arena, "op override --policy %s: %s %s%s", c->pol->path, op,
                              e->kind == APX_POLICY_PROMOTE ? "promote, widest input " : "",
                              apx_dtype_short(dt)));
    return 1;
  }
  return 0;
}

static void add_note(ApxGraph *g, int id, const char *text) {
  ApxNode *n = &g->nodes[id];
  n->note = n->note ? apx_arena_printf(&g->arena, "%s; %s", n->note, text) : text;
}

/* With --clamp-constants: replaces every out-of-range constant data input of node id by
 * its clamped copy. Returns 1 when it did, 0 when not clampable (a parameter or graph
 * input is out of range, or nothing to clamp), -1 on error. */
static int clamp_inputs(Ctx *c, int id) {
  ApxGraph *g = c->g;
  ApxNode *n = &g->nodes[id];
  int todo = 0;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || apx_prec_input_role(g, id, k) != APX_IN_DATA) continue;
    const ApxValue *val = &g->vals[v];
    if (val->producer >= 0 || !val->data) continue;
    ApxConstRange r;
    apx_const_range_check_memo(g, v, c->s.half, &r);
    if (r.issue == APX_RANGE_OK) continue;
    if (val->kind != APX_VAL_CONST || (val->dtype != APX_DT_F32 && val->dtype != APX_DT_F64)) return 0;
    todo++;
  }
  if (!todo) return 0;
  for (int k = 0; k < g->nodes[id].n_in; k++) {
    int v = g->nodes[id].in[k];
    if (v < 0 || apx_prec_input_role(g, id, k) != APX_IN_DATA) continue;
    const ApxValue *val = &g->vals[v];
    if (val->producer >= 0 || !val->data) continue;
    ApxConstRange r;
    apx_const_range_check_memo(g, v, c->s.half, &r);
    if (r.issue == APX_RANGE_OK) continue;
    const char *what = apx_const_range_text(&g->arena, &r, c->s.half);
    int nv = v < c->n_vals0 ? c->clamped[v] : -1;
    if (nv < 0) {
      nv = apx_const_clamped_copy(g, v, c->s.half, c->d);
      if (nv < 0) return -1;
      if (v < c->n_vals0) c->clamped[v] = nv;
    }
    g->nodes[id].in[k] = nv;
    double mx = apx_half_max(c->s.half), mn = apx_half_min_normal(c->s.half);
    const char *to = r.issue == APX_RANGE_UNDERFLOW
                         ? apx_arena_printf(&g->arena, "%s%g", r.value < 0 ? "-" : "", mn)
                         : apx_arena_printf(&g->arena, "%s%g", r.value < 0 ? "-" : "", mx);
    const char *msg = apx_arena_printf(&g->arena, "clamped constant '%s' (%s) to %s for %s",
                                       g->vals[v].name, what, to, c->hn);
    apx_node_warn(c->d, g, id, "%s; --clamp-constants: node runs in %s", msg, c->hn);
    add_note(g, id, msg);
  }
  c->changed = 1;
  return 1;
}

/* Forward float node: overrides, overflow rule, lower rules. finding: the node's overflow
 * reason from pass_overflow_check (or UNDECIDED) with its detail. */
static int decide_forward(Ctx *c, int id, int finding, const char *fdetail, Dec *out) {
  ApxGraph *g = c->g;
  Dec r;
  int over = decide_override(c, id, &r);
  if (over < 0) return -1;
  if (!over) {
    Dec low = decide_lower(c, id);
    if (finding == APX_REASON_UNDECIDED) {
      *out = low;
      return 0;
    }
    if (!apx_dtype_is_half(low.dt)) {
      add_note(g, id, apx_arena_printf(&g->arena, "%s (fp32 anyway)", fdetail));
      *out = low;
      return 0;
    }
    if (finding == APX_REASON_OVERFLOW_CONST && c->o->clamp_constants) {
      int rc = clamp_inputs(c, id);
      if (rc < 0) return -1;
      if (rc > 0) {
        *out = low;
        return 0;
      }
    }
    apx_node_warn(c->d, g, id, "%s; kept in fp32 instead of %s%s", fdetail, apx_dtype_short(low.dt),
                  finding == APX_REASON_OVERFLOW_CONST && !c->o->clamp_constants
                      ? " (--clamp-constants clamps constants instead)" : "");
    *out = dec(APX_DT_F32, finding, fdetail);
    return 0;
  }
  if (finding != APX_REASON_UNDECIDED && apx_dtype_is_half(r.dt)) {
    int rc = 0;
    if (finding == APX_REASON_OVERFLOW_CONST && c->o->clamp_constants) rc = clamp_inputs(c, id);
    if (rc < 0) return -1;
    if (rc == 0) {
      apx_node_warn(c->d, g, id, "runs in %s by %s although %s", apx_dtype_short(r.dt), r.detail, fdetail);
      add_note(g, id, fdetail);
    }
  }
  *out = r;
  return 0;
}

/* Fixed roles; returns 1 with *r set when one applies. */
static int decide_fixed(Ctx *c, int id, Dec *r) {
  ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  const char *op = apx_op_name(n->op);
  if (n->op == APX_OP_Cast) {
    ApxDType to = (ApxDType)APX_NODE_ATTRS(g, id, ApxAttrCast)->to;
    *r = dec(to, APX_REASON_CAST, apx_arena_printf(&g->arena, "cast: the model's Cast to %s", apx_dtype_short(to)));
    return 1;
  }
  if (apx_prec_is_fixed_node(g, id)) {
    *r = dec(APX_DT_F32, APX_REASON_OPTIMIZER,
             n->section == APX_SEC_OPTIMIZER
                 ? apx_arena_printf(&g->arena, "optimizer: %s stays fp32", op)
                 : apx_arena_printf(&g->arena, "fixed: %s (loss scaling / state) stays fp32", op));
    return 1;
  }
  if (!apx_prec_is_float_node(g, id)) {
    ApxDType out = APX_DT_UNDEFINED;
    for (int o = 0; o < n->n_out && out == APX_DT_UNDEFINED; o++)
      if (n->out[o] >= 0) out = g->vals[n->out[o]].dtype;
    ApxDType dt = out;
    if (apx_op_info(n->op)->prec == APX_PREC_PROMOTE) {
      ApxDType w = widest_input(c, id);
      if (apx_dtype_is_float(w)) dt = w;
    }
    *r = dec(dt, APX_REASON_INTEGER,
             apx_arena_printf(&g->arena, "integer: output is %s%s%s", apx_dtype_short(out),
                              dt != out ? ", inputs compared in " : "", dt != out ? apx_dtype_short(dt) : ""));
    return 1;
  }
  /* Without a training graph (--inference, apexrun infer) the first output is not a loss:
   * only the loss ops themselves keep fp32 there. */
  int loss_op = n->op == APX_OP_SoftmaxCrossEntropyLoss ||
                n->op == APX_OP_NegativeLogLikelihoodLoss || n->op == APX_OP_FusedXentropy;
  if (n->section == APX_SEC_FORWARD && (c->o->training || loss_op) &&
      apx_prec_is_loss_node(g, id)) {
    *r = dec(APX_DT_F32, APX_REASON_LOSS, apx_arena_printf(&g->arena, "loss: %s stays fp32", op));
    return 1;
  }
  if (n->section == APX_SEC_BACKWARD) {
    if (n->origin >= 0 && n->origin < g->n_nodes && apx_dtype_is_float(g->nodes[n->origin].compute)) {
      const ApxNode *f = &g->nodes[n->origin];
      *r = dec(f->compute, APX_REASON_INHERITED, apx_arena_printf(&g->arena, "inherited from %s", f->name));
      return 1;
    }
    ApxDType w = or_fp32(widest_input(c, id));
    *r = dec(w, APX_REASON_BACKWARD_WIDEST,
             apx_arena_printf(&g->arena, "backward: no forward origin, widest input %s", apx_dtype_short(w)));
    return 1;
  }
  return 0;
}

static int validate_op_lists(Ctx *c) {
  const ApxOptions *o = c->o;
  const ApxNameList *lists[3] = {&o->half_ops, &o->fp32_ops, &o->promote_ops};
  const char *flags[3] = {"--half-ops", "--fp32-ops", "--promote-ops"};
  for (int l = 0; l < 3; l++)
    for (int i = 0; i < lists[l]->n; i++) {
      const char *op = lists[l]->items[i];
      if (apx_op_from_name(op) == APX_OP_INVALID)
        return apx_diag_error(c->d, APX_EXIT_BAD_INPUT, "%s: unknown op '%s' (see apexc --list-ops)",
                              flags[l], op);
      for (int m = l + 1; m < 3; m++)
        if (apx_name_list_has(lists[m], op))
          return apx_diag_error(c->d, APX_EXIT_BAD_INPUT, "%s and %s both name '%s'", flags[l],
                                flags[m], op);
    }
  return 0;
}

static void ctx_free(Ctx *c) {
  free(c->bn_param);
  free(c->clamped);
  free(c->pol_entry);
}

static int decide_node(Ctx *c, int id) {
  ApxGraph *g = c->g;
  ApxNode *n = &g->nodes[id];
  if (apx_prec_is_inserted_cast(g, id)) return 0; /* cast_insert's own, from an earlier run */
  int finding = APX_REASON_UNDECIDED;
  const char *fdetail = NULL;
  if (n->section == APX_SEC_FORWARD &&
      (n->reason == APX_REASON_OVERFLOW_CONST || n->reason == APX_REASON_OVERFLOW_PATTERN)) {
    finding = n->reason;
    fdetail = n->reason_detail;
  }
  ApxDType old_dt = n->compute;
  int old_reason = n->reason;
  Dec r;
  if (decide_fixed(c, id, &r)) {
    /* a policy entry cannot move a node out of its role */
    if (c->pol && c->pol_entry[id] >= 0) {
      const ApxPolicyNode *e = &c->pol->nodes[c->pol_entry[id]];
      ApxDType want = apx_policy_dtype(e->kind, e->dtype, c->s.half);
      if (e->kind != APX_POLICY_NONE && want != r.dt)
        apx_node_warn(c->d, g, id, "--policy %s asks %s, ignored: %s", c->pol->path,
                      apx_dtype_short(want), r.detail);
    }
  } else if (decide_forward(c, id, finding, fdetail, &r)) {
    return -1;
  }
  n = &g->nodes[id];
  n->compute = r.dt;
  n->reason = r.reason;
  n->reason_detail = r.detail;
  if (old_dt != r.dt || old_reason != r.reason) c->changed = 1;
  return 0;
}

int pass_precision(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  Ctx c;
  memset(&c, 0, sizeof c);
  c.g = g;
  c.o = o;
  c.d = d;
  c.s = apx_prec_settings(o);
  c.hn = apx_dtype_short(c.s.half);
  c.n_vals0 = g->n_vals;
  if (validate_op_lists(&c)) return -1;
  c.bn_param = calloc((size_t)g->n_vals + 1, 1);
  c.clamped = malloc(((size_t)g->n_vals + 1) * sizeof(int));
  c.pol_entry = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
  if (!c.bn_param || !c.clamped || !c.pol_entry) {
    ctx_free(&c);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory in precision", g->file);
  }
  for (int v = 0; v < g->n_vals; v++) c.clamped[v] = -1;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    for (int s = 0; s < n->n_in; s++)
      if (n->in[s] >= 0 && apx_prec_input_role(g, id, s) == APX_IN_KEEP &&
          (n->op == APX_OP_BatchNormalization || n->op == APX_OP_BatchNormRelu))
        c.bn_param[n->in[s]] = 1;
  }
  if (o->policy_path && !o->policy) {
    ctx_free(&c);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "internal error: --policy %s was not read", o->policy_path);
  }
  if (o->policy) {
    c.pol = o->policy;
    if (apx_policy_bind(c.pol, g, c.pol_entry, d)) {
      ctx_free(&c);
      return -1;
    }
  }
  for (int sec = APX_SEC_FORWARD; sec <= APX_SEC_OPTIMIZER; sec++)
    for (int k = 0; k < g->n_order; k++) {
      int id = g->order[k];
      if ((int)g->nodes[id].section != sec) continue;
      if (decide_node(&c, id)) {
        ctx_free(&c);
        return -1;
      }
    }
  for (int i = 0; i < o->fp32_nodes.n; i++)
    if (!c.glob_hits[i]) apx_diag_warn(d, "%s: --fp32-nodes '%s' matches no forward node", g->file, o->fp32_nodes.items[i]);
  int changed = c.changed;
  ctx_free(&c);
  return changed ? APX_PASS_CHANGED_KEEPS_ORDER : APX_PASS_UNCHANGED; /* decisions only */
}
