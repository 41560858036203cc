/* fold_constants.c - folds Shape, the compile-time ops and cheap shape subgraphs on
 * constants into constant values (contract in fold_constants.h). */
#include "passes/fold_constants.h"

#include <stdio.h>
#include <string.h>

#include "ir/infer.h"
#include "kernels/cpu/cpu_kernels.h"

/* 1 when every present input is a constant with its bytes. */
static int inputs_const(const ApxGraph *g, int node, int *bad) {
  const ApxNode *n = &g->nodes[node];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0) continue;
    const ApxValue *x = &g->vals[v];
    if (x->kind != APX_VAL_CONST || (!x->data && apx_value_numel(x) != 0)) {
      *bad = k;
      return 0;
    }
  }
  return 1;
}

/* Cheap shape-subgraph ops worth folding when their inputs are constant. */
static int is_cheap(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  switch (n->op) {
    case APX_OP_Identity: case APX_OP_Reshape: case APX_OP_Flatten: case APX_OP_Squeeze:
    case APX_OP_Unsqueeze: case APX_OP_Transpose: case APX_OP_Concat: case APX_OP_Split:
    case APX_OP_Slice: case APX_OP_Gather: case APX_OP_Expand: case APX_OP_Where:
    case APX_OP_Cast:
      return 1;
    case APX_OP_Add: case APX_OP_Sub: case APX_OP_Mul: case APX_OP_Div: case APX_OP_Neg: {
      int v = n->out[0];
      return v >= 0 && apx_dtype_is_int(g->vals[v].dtype) && g->vals[v].dtype != APX_DT_BOOL;
    }
    default:
      return 0;
  }
}

/* Output bytes for value v in the arena (at least 1 byte so data is never NULL). */
static void *alloc_out(ApxGraph *g, int v) {
  int64_t bytes = apx_value_bytes(&g->vals[v]);
  return apx_arena_alloc(&g->arena, bytes > 0 ? (size_t)bytes : 1);
}

static int oom(ApxDiag *d, const ApxGraph *g, int node) {
  apx_node_error(d, g, node, "out of memory folding constants");
  d->code = APX_EXIT_RUNTIME;
  return -1;
}

/* Shape, Constant, ConstantOfShape and copy-only ops, evaluated here. Fills out[0] data.
 * Returns 1 (done), 0 (not one of these), -1 (error). */
static int eval_direct(ApxGraph *g, int node, void **out, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  int y = n->out[0];
  switch (n->op) {
    case APX_OP_Shape: {
      const ApxAttrShape *a = APX_NODE_ATTRS(g, node, ApxAttrShape);
      const ApxValue *x = &g->vals[n->in[0]];
      int64_t *p = alloc_out(g, y);
      if (!p) return oom(d, g, node);
      for (int64_t i = 0; i < apx_value_numel(&g->vals[y]); i++) p[i] = x->dims[a->start + i];
      out[0] = p;
      return 1;
    }
    case APX_OP_Constant: {
      ApxTensorConst t;
      if (apx_constant_node_value(g, node, &t, d)) return -1;
      int64_t bytes = apx_value_bytes(&g->vals[y]);
      void *p = alloc_out(g, y);
      if (!p) return oom(d, g, node);
      if (bytes > 0) memcpy(p, t.data, (size_t)bytes);
      out[0] = p;
      return 1;
    }
    case APX_OP_ConstantOfShape: {
      ApxDType dt;
      const void *elem;
      if (apx_constant_of_shape_value(g, node, &dt, &elem, d)) return -1;
      size_t es = apx_dtype_size(dt);
      int64_t cnt = apx_value_numel(&g->vals[y]);
      char *p = alloc_out(g, y);
      if (!p) return oom(d, g, node);
      for (int64_t i = 0; i < cnt; i++) memcpy(p + (size_t)i * es, elem, es);
      out[0] = p;
      return 1;
    }
    case APX_OP_Identity: case APX_OP_Reshape: case APX_OP_Flatten: case APX_OP_Squeeze:
    case APX_OP_Unsqueeze: {
      const ApxValue *x = &g->vals[n->in[0]];
      int64_t bytes = apx_value_bytes(x);
      void *p = alloc_out(g, y);
      if (!p) return oom(d, g, node);
      if (bytes > 0) memcpy(p, x->data, (size_t)bytes);
      out[0] = p;
      return 1;
    }
    default:
      return 0;
  }
}

static ApxTensor tensor_of(const ApxValue *v, void *data) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = v->dtype;
  t.rank = v->rank < 0 ? 0 : v->rank;
  for (int i = 0; i < t.rank; i++) t.dims[i] = v->dims[i];
  return t;
}

/* Runs the CPU kernel. Returns 1 (done), 0 (kernel cannot: only when !must), -1. */
static int eval_kernel(ApxGraph *g, int node, int must, void **out, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  ApxTensor ins[16], outs[16];
  if (n->n_in > 16 || n->n_out > 16) {
    if (!must) return 0;
    return apx_node_error(d, g, node, "compile-time only op has too many inputs/outputs to fold");
  }
  static const char nothing = 0;
  for (int k = 0; k < n->n_in; k++) {
    if (n->in[k] < 0) {
      memset(&ins[k], 0, sizeof ins[k]);
      continue;
    }
    const ApxValue *v = &g->vals[n->in[k]];
    ins[k] = tensor_of(v, v->data ? v->data : (void *)&nothing);
  }
  for (int k = 0; k < n->n_out; k++) {
    if (n->out[k] < 0) {
      memset(&outs[k], 0, sizeof outs[k]);
      continue;
    }
    void *p = alloc_out(g, n->out[k]);
    if (!p) return oom(d, g, node);
    outs[k] = tensor_of(&g->vals[n->out[k]], p);
  }
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  ctx.n_threads = 1;
  ApxStatus st = apx_cpu_run(&ctx, n->op, n->typed, ins, n->n_in, outs, n->n_out);
  if (st != APX_STATUS_OK) {
    if (!must) return 0;
    return apx_node_error(d, g, node, "compile-time only op could not be evaluated: %s (%s)",
                          ctx.err[0] ? ctx.err : "kernel failed", apx_status_name(st));
  }
  for (int k = 0; k < n->n_out; k++) out[k] = outs[k].data;
  return 1;
}

static int fold_node(ApxGraph *g, int node, int must, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  void *out[16] = {0};
  if (n->n_out > 16) return 0;
  for (int k = 0; k < n->n_out; k++) {
    if (n->out[k] < 0) continue;
    int64_t bytes = apx_value_bytes(&g->vals[n->out[k]]);
    if (bytes >= 0 && bytes <= APX_FOLD_MAX_BYTES) continue;
    if (!must) return 0;
    return apx_node_error(d, g, node, "compile-time constant output %d '%s' would take %lld "
                          "bytes (at most %lld are folded)", k, g->vals[n->out[k]].name,
                          (long long)bytes, (long long)APX_FOLD_MAX_BYTES);
  }
  int done = eval_direct(g, node, out, d);
  if (done == 0) done = eval_kernel(g, node, must, out, d);
  if (done <= 0) return done;
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v < 0) continue;
    ApxValue *val = &g->vals[v];
    val->kind = APX_VAL_CONST;
    val->data = out[k];
    val->producer = -1;
  }
  g->nodes[node].flags |= APX_NODEF_DEAD;
  return 1;
}

/* A float initializer (PARAM) whose every use is a static-input slot or an input of a
 * compile-time op is an operand, not a weight (an exporter's Dropout ratio, Range bounds):
 * it becomes CONST so that it is read as a constant and never trained. */
static int params_to_consts(ApxGraph *g, ApxDiag *d) {
  ApxUses u;
  if (apx_uses_build(g, &u)) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory building use lists", g->file);
    return -1;
  }
  int changed = 0;
  for (int v = 0; v < g->n_vals; v++) {
    ApxValue *val = &g->vals[v];
    if (val->kind != APX_VAL_PARAM || (val->flags & APX_VALF_GRAPH_OUTPUT) || !apx_uses_count(&u, v))
      continue;
    int operand_only = 1;
    for (int j = u.use_start[v]; j < u.use_start[v + 1] && operand_only; j++) {
      const ApxNode *n = &g->nodes[u.use_node[j]];
      const ApxOpInfo *info = apx_op_info(n->op);
      int slot = u.use_slot[j];
      operand_only = ((info->flags & APX_OPF_FOLD) && n->op != APX_OP_Shape) ||
                     (slot < 32 && ((info->static_inputs >> slot) & 1));
    }
    if (operand_only) {
      val->kind = APX_VAL_CONST;
      changed = 1;
    }
  }
  apx_uses_free(&u);
  return changed;
}

int pass_fold_constants(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  int changed = params_to_consts(g, d);
  if (changed < 0) return APX_PASS_ERROR;
  for (int k = 0; k < g->n_order; k++) {
    int node = g->order[k];
    const ApxNode *n = &g->nodes[node];
    if (n->flags & APX_NODEF_DEAD) continue;
    uint32_t flags = apx_op_info(n->op)->flags;
    int bad = -1;
    int consts = inputs_const(g, node, &bad);
    int fold_op = (flags & APX_OPF_FOLD) != 0;
    if (fold_op && n->op != APX_OP_Shape && !consts) {
      const ApxValue *x = &g->vals[n->in[bad]];
      return apx_node_error(d, g, node, "compile-time only op: its inputs are not constant "
                            "(input %d '%s' %s)", bad, x->name,
                            x->kind == APX_VAL_INPUT ? "is a graph input"
                            : x->kind == APX_VAL_PARAM ? "is a trainable parameter"
                            : x->producer >= 0 ? "is computed at run time"
                            : "has no data");
    }
    if (apx_node_canonicalize(g, node, d) || apx_node_infer(g, node, d)) return APX_PASS_ERROR;
    n = &g->nodes[node];
    int want = fold_op;
    if (!want && consts && n->n_in > 0 && is_cheap(g, node)) {
      want = 1;
      for (int o2 = 0; o2 < n->n_out && want; o2++) {
        int v = n->out[o2];
        if (v < 0) continue;
        int64_t cnt = apx_value_numel(&g->vals[v]);
        want = cnt >= 0 && cnt <= APX_FOLD_MAX_ELEMS;
      }
    }
    if (!want) continue;
    int r = fold_node(g, node, fold_op, d);
    if (r < 0) return APX_PASS_ERROR;
    if (r > 0) changed = 1;
  }
  return changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
