/* split_sequences.c - SplitToSequence + SequenceAt into the outputs of one Split (contract
 * in split_sequences.h). */
#include "passes/split_sequences.h"

#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"

#define MAX_PIECES 4096

static int oom(ApxDiag *d, const ApxGraph *g) {
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory splitting sequences", g->file);
}

/* A new node made of the sequence node seq: attributes, canonicalization and inference. */
static int add_node(ApxGraph *g, ApxDiag *d, int seq, ApxOp op, const char *suffix, int n_in,
                    const int *in, int n_out, const int *out, ApxAttr *attrs, int n_attrs) {
  const char *name = apx_arena_printf(&g->arena, "%s/%s", g->nodes[seq].name, suffix);
  if (!name) return oom(d, g);
  int id = apx_graph_add_node(g, d, op, name, n_in, in, n_out, out);
  if (id < 0) return -1;
  ApxNode *n = &g->nodes[id];
  n->origin = seq;
  n->attrs = attrs;
  n->n_attrs = n_attrs;
  if (apx_node_canonicalize(g, id, d) || apx_node_infer(g, id, d)) return -1;
  return id;
}

/* A fresh activation value shaped like piece k of x (sizes along axis). */
static int piece_value(ApxGraph *g, ApxDiag *d, int x, int64_t axis, int64_t size, const char *hint) {
  ApxValue xv = g->vals[x];
  xv.dims[axis] = size;
  return apx_graph_add_value(g, d, apx_graph_unique_name(g, hint), APX_VAL_ACTIVATION, xv.dtype,
                             xv.rank, xv.dims);
}

static int rewrite(ApxGraph *g, ApxDiag *d, const ApxUses *u, int seq) {
  int64_t sizes[MAX_PIECES];
  int n, squeeze;
  if (apx_split_to_sequence_pieces(g, seq, sizes, MAX_PIECES, &n, &squeeze, d)) return -1;
  int x = g->nodes[seq].in[0], sv = g->nodes[seq].out[0];
  int64_t axis = APX_NODE_ATTRS(g, seq, ApxAttrSplitToSequence)->axis;
  int *piece = malloc((size_t)(n + 1) * sizeof *piece);
  if (!piece) return oom(d, g);
  for (int k = 0; k < n; k++) piece[k] = -1;
  int rc = 0;
  for (int j = u->use_start[sv]; j < u->use_start[sv + 1] && rc == 0; j++) {
    const ApxNode *c = &g->nodes[u->use_node[j]];
    if (c->op != APX_OP_SequenceAt || u->use_slot[j] != 0)
      rc = apx_node_error(d, g, seq, "not supported yet: the sequence '%s' is used by node '%s' (%s); "
                          "apexc has no sequence values, only SequenceAt with a constant position "
                          "may read one", g->vals[sv].name, c->name, c->op_type ? c->op_type : apx_op_name(c->op));
  }
  if (rc == 0 && (g->vals[sv].flags & APX_VALF_GRAPH_OUTPUT))
    rc = apx_node_error(d, g, seq, "not supported yet: the sequence '%s' is a graph output (apexc has "
                        "no sequence values)", g->vals[sv].name);
  /* 1. SequenceAt outputs that can be Split outputs themselves */
  for (int j = u->use_start[sv]; j < u->use_start[sv + 1] && !squeeze && rc == 0; j++) {
    int at = u->use_node[j];
    int64_t p = APX_NODE_ATTRS(g, at, ApxAttrSequenceAt)->position;
    if (piece[p] < 0) {
      piece[p] = g->nodes[at].out[0];
      g->nodes[at].flags |= APX_NODEF_DEAD;
    }
  }
  for (int k = 0; k < n && rc == 0; k++)
    if (piece[k] < 0 && (piece[k] = piece_value(g, d, x, axis, sizes[k], g->vals[sv].name)) < 0) rc = -1;
  /* 2. the Split */
  if (rc == 0) {
    int64_t *sz = apx_arena_memdup(&g->arena, sizes, (size_t)(n ? n : 1) * sizeof *sizes);
    ApxAttr *attrs = apx_arena_alloc(&g->arena, 2 * sizeof *attrs);
    const char *axis_name = apx_arena_strdup(&g->arena, "axis"), *split_name = apx_arena_strdup(&g->arena, "split");
    if (!sz || !attrs || !axis_name || !split_name) rc = oom(d, g);
    int in[2] = {x, -1}, n_attrs = 1;
    if (rc == 0) {
      attrs[0] = (ApxAttr){.name = axis_name, .type = APX_ATTR_INT, .i = axis};
      if (g->opset > 0 && g->opset < 13) {
        attrs[1] = (ApxAttr){.name = split_name, .type = APX_ATTR_INTS, .n = n, .ints = sz};
        n_attrs = 2;
      } else {
        int64_t len = n;
        const char *hint = apx_arena_printf(&g->arena, "%s/split_sizes", g->nodes[seq].name);
        in[1] = hint ? apx_graph_add_value(g, d, apx_graph_unique_name(g, hint), APX_VAL_CONST,
                                           APX_DT_I64, 1, &len)
                     : oom(d, g);
        if (in[1] < 0) rc = -1;
        else g->vals[in[1]].data = sz;
      }
    }
    if (rc == 0 && add_node(g, d, seq, APX_OP_Split, "split", in[1] >= 0 ? 2 : 1, in, n, piece, attrs,
                            n_attrs) < 0)
      rc = -1;
  }
  /* 3. the other SequenceAt: Identity (a piece read twice) or Reshape (axis dropped) */
  for (int j = u->use_start[sv]; j < u->use_start[sv + 1] && rc == 0; j++) {
    int at = u->use_node[j];
    if (g->nodes[at].flags & APX_NODEF_DEAD) continue;
    int64_t p = APX_NODE_ATTRS(g, at, ApxAttrSequenceAt)->position;
    int y = g->nodes[at].out[0];
    g->nodes[at].flags |= APX_NODEF_DEAD;
    if (add_node(g, d, seq, squeeze ? APX_OP_Reshape : APX_OP_Identity, g->nodes[at].name, 1,
                 &piece[p], 1, &y, NULL, 0) < 0)
      rc = -1;
  }
  free(piece);
  if (rc == 0) g->nodes[seq].flags |= APX_NODEF_DEAD;
  return rc;
}

int pass_split_sequences(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  (void)o;
  int any = 0;
  for (int k = 0; k < g->n_order && !any; k++) any = g->nodes[g->order[k]].op == APX_OP_SplitToSequence;
  if (!any) return APX_PASS_UNCHANGED;
  ApxUses u;
  if (apx_uses_build(g, &u)) return oom(d, g);
  int n_order = g->n_order, rc = APX_PASS_UNCHANGED;
  int *order = malloc((size_t)n_order * sizeof *order);
  if (!order) {
    apx_uses_free(&u);
    return oom(d, g);
  }
  memcpy(order, g->order, (size_t)n_order * sizeof *order);
  for (int k = 0; k < n_order && rc >= 0; k++) {
    int id = order[k];
    if (g->nodes[id].op != APX_OP_SplitToSequence || (g->nodes[id].flags & APX_NODEF_DEAD)) continue;
    rc = rewrite(g, d, &u, id) ? APX_PASS_ERROR : APX_PASS_CHANGED;
  }
  free(order);
  apx_uses_free(&u);
  return rc;
}
