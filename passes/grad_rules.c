/* grad_rules.c - the gradient-rule table (one entry per v1 op, indexed by op) and the
 * helpers rules use to emit backward nodes. */
#include "passes/grad_rules.h"

#include <string.h>

#include "ir/infer.h"

static const GradRuleFn rules[APX_OP_COUNT] = {
    [APX_OP_Gemm] = apx_grad_Gemm,
    [APX_OP_MatMul] = apx_grad_MatMul,
    [APX_OP_Add] = apx_grad_Add,
    [APX_OP_Sub] = apx_grad_Sub,
    [APX_OP_Mul] = apx_grad_Mul,
    [APX_OP_Div] = apx_grad_Div,
    [APX_OP_Neg] = apx_grad_Neg,
    [APX_OP_Relu] = apx_grad_Relu,
    [APX_OP_LeakyRelu] = apx_grad_LeakyRelu,
    [APX_OP_Sigmoid] = apx_grad_Sigmoid,
    [APX_OP_Tanh] = apx_grad_Tanh,
    [APX_OP_Gelu] = apx_grad_Gelu,
    [APX_OP_Erf] = apx_grad_Erf,
    [APX_OP_Sqrt] = apx_grad_Sqrt,
    [APX_OP_Pow] = apx_grad_Pow,
    [APX_OP_Exp] = apx_grad_Exp,
    [APX_OP_Log] = apx_grad_Log,
    [APX_OP_Softmax] = apx_grad_Softmax,
    [APX_OP_LogSoftmax] = apx_grad_LogSoftmax,
    [APX_OP_LayerNormalization] = apx_grad_LayerNormalization,
    [APX_OP_BatchNormalization] = apx_grad_BatchNormalization,
    [APX_OP_Dropout] = apx_grad_Dropout,
    [APX_OP_Conv] = apx_grad_Conv,
    [APX_OP_MaxPool] = apx_grad_MaxPool,
    [APX_OP_AveragePool] = apx_grad_AveragePool,
    [APX_OP_GlobalAveragePool] = apx_grad_GlobalAveragePool,
    [APX_OP_Flatten] = apx_grad_Reshape,
    [APX_OP_Reshape] = apx_grad_Reshape,
    [APX_OP_Transpose] = apx_grad_Transpose,
    [APX_OP_Squeeze] = apx_grad_Reshape,
    [APX_OP_Unsqueeze] = apx_grad_Reshape,
    [APX_OP_Identity] = apx_grad_Identity,
    [APX_OP_Concat] = apx_grad_Concat,
    [APX_OP_Split] = apx_grad_Split,
    [APX_OP_Slice] = apx_grad_Slice,
    [APX_OP_Gather] = apx_grad_Gather,
    [APX_OP_Expand] = apx_grad_Expand,
    [APX_OP_ReduceSum] = apx_grad_ReduceSum,
    [APX_OP_ReduceMean] = apx_grad_ReduceMean,
    [APX_OP_Where] = apx_grad_Where,
    [APX_OP_Cast] = apx_grad_Cast,
    [APX_OP_SoftmaxCrossEntropyLoss] = apx_grad_SoftmaxCrossEntropyLoss,
    [APX_OP_NegativeLogLikelihoodLoss] = apx_grad_NegativeLogLikelihoodLoss,
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
  const char *name = apx_graph_find_value(g, hint) < 0 ? hint : apx_graph_unique_name(g, hint);
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
