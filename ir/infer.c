/* infer.c - entry points of canonicalization and inference: finds the op's rule (the
 * generated kinds' shared rules, or the family tables infer_elementwise.c, infer_nn.c,
 * infer_shape_ops.c, infer_train_ops.c, infer_resample.c for ops of kind OWN), checks arity (the op table)
 * and that every input has a known dtype and static shape, then runs it. */
#include "ir/infer.h"

#include <stdio.h>
#include <string.h>

#include "ir/infer_util.h"

static const InferRule *const families[] = {
    apx_infer_rules_elementwise,
    apx_infer_rules_nn,
    apx_infer_rules_shape,
    apx_infer_rules_resample,
    apx_infer_rules_train,
};

/* The generated kinds' rules (ops.def KIND): generic canonicalization, shared inference. */
static const InferRule ew_unary_rule = {APX_OP_INVALID, NULL, infer_ew_unary};
static const InferRule ew_unary_grad_rule = {APX_OP_INVALID, NULL, infer_ew_unary_grad};

static const InferRule *rule_for(ApxOp op) {
  switch ((ApxOpKind)apx_op_info(op)->kind) {
    case APX_KIND_EW_UNARY: return &ew_unary_rule;
    case APX_KIND_EW_UNARY_GRAD: return &ew_unary_grad_rule;
    case APX_KIND_OWN: break;
  }
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (const InferRule *r = families[f]; r->op != APX_OP_INVALID; r++)
      if (r->op == op) return r;
  return NULL;
}

int apx_infer_has_rule(ApxOp op) { return rule_for(op) != NULL; }

static const char *op_label(const ApxNode *n) {
  return n->op_type ? n->op_type : apx_op_name(n->op);
}

/* Arity (ops.def IO): the first min_in inputs present, at most max_in inputs; outputs
 * alike. */
static int check_arity(const ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  const ApxOpInfo *r = apx_op_info(n->op);
  if (n->n_in < r->min_in || (r->max_in >= 0 && n->n_in > r->max_in)) {
    if (r->max_in == r->min_in)
      return apx_node_error(d, g, node, "expects %d inputs, got %d", r->min_in, n->n_in);
    if (r->max_in < 0)
      return apx_node_error(d, g, node, "expects at least %d inputs, got %d", r->min_in, n->n_in);
    return apx_node_error(d, g, node, "expects %d to %d inputs, got %d", r->min_in, r->max_in,
                          n->n_in);
  }
  for (int k = 0; k < r->min_in; k++)
    if (n->in[k] < 0) return infer_in_error(d, g, node, "input %d is required", k);
  if (n->n_out < r->min_out || (r->max_out >= 0 && n->n_out > r->max_out)) {
    if (r->max_out == r->min_out)
      return apx_node_error(d, g, node, "expects %d outputs, got %d", r->min_out, n->n_out);
    if (r->max_out < 0)
      return apx_node_error(d, g, node, "expects at least %d outputs, got %d", r->min_out,
                            n->n_out);
    return apx_node_error(d, g, node, "expects %d to %d outputs, got %d", r->min_out,
                          r->max_out, n->n_out);
  }
  return 0;
}

/* Every present input needs a dtype and a full static shape. */
static int check_inputs_known(const ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  for (int k = 0; k < n->n_in; k++) {
    int id = n->in[k];
    if (id < 0) continue;
    if (id >= g->n_vals) return infer_in_error(d, g, node, "input %d has bad value id %d", k, id);
    const ApxValue *v = &g->vals[id];
    if (v->dtype == APX_DT_STRING)
      return infer_in_error(d, g, node, "input %d '%s': not supported yet: string tensors", k,
                            v->name);
    if (apx_dtype_size(v->dtype) == 0) {
      if (v->producer >= 0 || v->kind == APX_VAL_ACTIVATION)
        return infer_in_error(d, g, node, "input %d '%s' has no known dtype (its producer "
                              "was not inferred)", k, v->name);
      return infer_in_error(d, g, node, "input %d '%s' has no known dtype in the model", k,
                            v->name);
    }
    if (v->rank < 0) {
      if (v->kind == APX_VAL_INPUT)
        return infer_in_error(d, g, node, "input %d '%s' has no shape in the model (graph "
                              "inputs need a static shape)", k, v->name);
      return infer_in_error(d, g, node, "input %d '%s' has no known shape (its producer was "
                            "not inferred)", k, v->name);
    }
    for (int i = 0; i < v->rank; i++) {
      if (v->dims[i] >= 0) continue;
      const char *sym = v->dim_params ? v->dim_params[i] : NULL;
      if (sym && sym[0])
        return infer_in_error(d, g, node, "input %d '%s': dimension %d ('%s') is not bound: "
                              "pass --dim %s=V", k, v->name, i, sym, sym);
      return infer_in_error(d, g, node, "input %d '%s': dimension %d is unknown (neither a "
                            "size nor a name in the model)", k, v->name, i);
    }
  }
  return 0;
}

static int unsupported(const ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  return apx_node_error(d, g, node, "not supported yet: %s", op_label(n));
}

int apx_node_canonicalize(ApxGraph *g, int node, ApxDiag *d) {
  if (node < 0 || node >= g->n_nodes)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: canonicalize: bad node id %d", g->file, node);
  const ApxNode *n = &g->nodes[node];
  const ApxOpInfo *info = apx_op_info(n->op);
  if (!(info->flags & (APX_OPF_V1 | APX_OPF_FOLD | APX_OPF_INTERNAL))) return unsupported(g, node, d);
  const InferRule *r = rule_for(n->op);
  if (!r) return unsupported(g, node, d);
  if (!n->typed) return apx_node_error(d, g, node, "has no typed attribute storage");
  if (check_arity(g, node, d)) return -1;
  /* Internal ops: the creating pass owns the typed struct. */
  if (info->flags & APX_OPF_INTERNAL) return 0;
  if (check_inputs_known(g, node, d)) return -1;
  return r->canon ? r->canon(g, node, d) : infer_attrs_from_fields(g, node, d);
}

int apx_node_infer(ApxGraph *g, int node, ApxDiag *d) {
  if (node < 0 || node >= g->n_nodes)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: infer: bad node id %d", g->file, node);
  const ApxNode *n = &g->nodes[node];
  const InferRule *r = rule_for(n->op);
  if (!r) return unsupported(g, node, d);
  if (!n->typed) return apx_node_error(d, g, node, "has no typed attribute storage");
  if (check_arity(g, node, d)) return -1;
  if (check_inputs_known(g, node, d)) return -1;
  return r->infer(g, node, d);
}
