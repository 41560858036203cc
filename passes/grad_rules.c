/* grad_rules.c - the gradient-rule table (expanded from ops.def's GRAD column, indexed by
 * op) and the helpers rules use to emit backward nodes. */
#include "passes/grad_rules.h"

#include <string.h>

#include "ir/infer.h"

static const GradRuleFn rules[APX_OP_COUNT] = {
#define IO(a, b, c, d)
#define APX_GRAD(rule) apx_grad_##rule
#define APX_NOGRAD NULL
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) [APX_OP_##ID] = GRAD,
#include "kernels/ops.def"
#undef APX_OP
#undef APX_GRAD
#undef APX_NOGRAD
#undef IO
};

GradRuleFn apx_grad_rule(ApxOp op) {
  return (op > APX_OP_INVALID && op < APX_OP_COUNT) ? rules[op] : NULL;
}

/* ---- helpers ------------------------------------------------------------------------ */

int gr_new_value(GradCtx *c, ApxDType dt, int32_t rank, const int64_t *dims) {
  ApxGraph *g = c->g;
  const char *hint = apx_arena_printf(&g->arena, "grad/%s", g->nodes[c->node].name);
  if (!hint) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  return apx_graph_add_value(g, c->d, apx_graph_unique_name(g, hint), APX_VAL_ACTIVATION, dt,
                             rank, dims);
}

int gr_node(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in, int n_out,
            const int *out) {
  ApxGraph *g = c->g;
  const char *name = apx_arena_printf(&g->arena, "%s/grad/%s%d", g->nodes[c->node].name,
                                      apx_op_name(op), c->n_made++);
  if (!name) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  int id = apx_graph_add_node(g, c->d, op, name, n_in, in, n_out, out);
  if (id < 0) return -1;
  ApxNode *n = &g->nodes[id];
  n->section = APX_SEC_BACKWARD;
  n->origin = c->node;
  if (attrs) memcpy(n->typed, attrs, apx_op_info(op)->attrs_size);
  if (apx_node_infer(g, id, c->d)) return -1;
  return id;
}

int gr_op(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in) {
  int out = gr_new_value(c, APX_DT_UNDEFINED, -1, NULL);
  if (out < 0 || gr_node(c, op, attrs, n_in, in, 1, &out) < 0) return -1;
  return out;
}

int gr_op_like(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in, int like,
               ApxDType dt) {
  int64_t dims[APX_MAX_RANK];
  int32_t rank = c->g->vals[like].rank;
  memcpy(dims, c->g->vals[like].dims, sizeof dims);
  int out = gr_new_value(c, dt, rank, dims);
  if (out < 0 || gr_node(c, op, attrs, n_in, in, 1, &out) < 0) return -1;
  return out;
}

static int same_shape(const ApxValue *v, int32_t rank, const int64_t *dims) {
  if (v->rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (v->dims[i] != dims[i]) return 0;
  return 1;
}

int gr_sum_to_shape(GradCtx *c, int v, int32_t rank, const int64_t *dims) {
  if (v < 0) return -1;
  if (same_shape(&c->g->vals[v], rank, dims)) return v;
  int64_t d[APX_MAX_RANK];
  memcpy(d, dims, (size_t)rank * sizeof *d);
  int out = gr_new_value(c, c->g->vals[v].dtype, rank, d);
  if (out < 0 || gr_node(c, APX_OP_ReduceSumTo, NULL, 1, &v, 1, &out) < 0) return -1;
  return out;
}

int gr_reshape_shape(GradCtx *c, int v, int32_t rank, const int64_t *dims) {
  if (v < 0) return -1;
  if (same_shape(&c->g->vals[v], rank, dims)) return v;
  int64_t d[APX_MAX_RANK];
  memcpy(d, dims, (size_t)rank * sizeof *d);
  int out = gr_new_value(c, c->g->vals[v].dtype, rank, d);
  if (out < 0 || gr_node(c, APX_OP_Reshape, NULL, 1, &v, 1, &out) < 0) return -1;
  return out;
}

static int make_const(GradCtx *c, ApxDType dt, int32_t rank, const int64_t *dims,
                      const char *hint) {
  ApxGraph *g = c->g;
  const char *h = apx_arena_printf(&g->arena, "grad/%s/%s", g->nodes[c->node].name, hint);
  if (!h) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  int v = apx_graph_add_value(g, c->d, apx_graph_unique_name(g, h), APX_VAL_CONST, dt, rank,
                              dims);
  if (v < 0) return -1;
  int64_t bytes = apx_value_bytes(&g->vals[v]);
  if (bytes < 0)
    return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: internal error: constant of unknown size",
                          g->file);
  g->vals[v].data = apx_arena_alloc(&g->arena, (size_t)bytes); /* zeroed */
  if (!g->vals[v].data) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  return v;
}

int gr_scalar(GradCtx *c, double x, ApxDType dt) {
  int v = make_const(c, dt, 0, NULL, "const");
  if (v < 0) return -1;
  void *p = c->g->vals[v].data;
  switch (dt) {
    case APX_DT_F64: *(double *)p = x; break;
    case APX_DT_F32: *(float *)p = (float)x; break;
    default:
      return apx_node_error(c->d, c->g, c->node,
                            "not supported yet: gradient constants of type %s",
                            apx_dtype_name(dt));
  }
  return v;
}

int gr_zeros(GradCtx *c, int like) {
  int64_t dims[APX_MAX_RANK];
  memcpy(dims, c->g->vals[like].dims, sizeof dims);
  return make_const(c, c->g->vals[like].dtype, c->g->vals[like].rank, dims, "zeros");
}

int gr_forward_output(GradCtx *c, int slot, const char *what) {
  ApxGraph *g = c->g;
  ApxNode *n = &g->nodes[c->node];
  if (slot < n->n_out && n->out[slot] >= 0) return n->out[slot];
  const char *hint = apx_arena_printf(&g->arena, "%s_%s", n->name, what);
  if (!hint) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  const char *name = apx_graph_free_name(g, hint);
  int v = apx_graph_add_value(g, c->d, name, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL);
  if (v < 0) return -1;
  n = &g->nodes[c->node];
  if (slot >= n->n_out) {
    int *out = apx_arena_alloc(&g->arena, (size_t)(slot + 1) * sizeof *out);
    if (!out) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    for (int k = 0; k <= slot; k++) out[k] = k < n->n_out ? n->out[k] : -1;
    n->out = out;
    n->n_out = slot + 1;
  }
  n->out[slot] = v;
  g->vals[v].producer = c->node;
  if (apx_node_infer(g, c->node, c->d)) return -1;
  return v;
}

int gr_unsupported(GradCtx *c, const char *what) {
  return apx_node_error(c->d, c->g, c->node, "not supported yet: gradient %s", what);
}
