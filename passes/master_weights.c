/* master_weights.c - pass_master_weights: OptimizerStep on fp32 masters, half copies
 * refreshed in the same pass. See master_weights.h. */
#include "passes/master_weights.h"

#include <stdlib.h>
#include <string.h>

#include "compiler/infer.h"
#include "passes/optimizer.h"

static int same_shape(const ApxValue *a, const ApxValue *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static int is_input_of(const ApxNode *n, int v) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] == v) return 1;
  return 0;
}

/* The fp32 master of half parameter p: the STATE value with APX_VALF_MASTER and origin p
 * (passes/cast_insert.c), not already an input of node; -1 if none. */
static int find_master(const ApxGraph *g, int node, int p) {
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *m = &g->vals[v];
    if (m->origin != p || !(m->flags & APX_VALF_MASTER) || m->kind != APX_VAL_STATE) continue;
    if (m->dtype != APX_DT_F32 || !same_shape(m, &g->vals[p]) || is_input_of(&g->nodes[node], v))
      continue;
    return v;
  }
  return -1;
}

static int rewrite(ApxGraph *g, const ApxOptions *o, ApxDiag *d, int node) {
  ApxAttrOptimizer *at = APX_NODE_ATTRS(g, node, ApxAttrOptimizer);
  int n = at->n_params, k = apx_optimizer_state_groups(at);
  const int first = APX_OPTIM_IN_FIRST_GROUP;
  if (g->nodes[node].n_in != first + n * (2 + k))
    return apx_node_error(d, g, node, "internal error: %d inputs, expected %d for %d parameters",
                          g->nodes[node].n_in, first + n * (2 + k), n);
  int *master = malloc(((size_t)n + 1) * sizeof(int));
  int *copy = malloc(((size_t)n + 1) * sizeof(int));
  int *in = malloc(((size_t)(first + n * (3 + k))) * sizeof(int));
  int rc = -1, pairs = 0;
  if (!master || !copy || !in) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    goto out;
  }
  for (int i = 0; i < n; i++) {
    int p = g->nodes[node].in[first + i];
    master[i] = p;
    copy[i] = -1;
    if (!apx_dtype_is_half(g->vals[p].dtype)) continue; /* fp32 storage: updated itself */
    int m = find_master(g, node, p);
    if (m >= 0) {
      master[i] = m;
      copy[i] = p;
      pairs++;
    } else if (o->master_weights == APX_TRI_ON) {
      rc = apx_node_error(d, g, node, "internal error: parameter '%s' is %s but has no fp32 "
                          "master (the precision pass did not create one)",
                          g->vals[p].name, apx_dtype_short(g->vals[p].dtype));
      d->code = APX_EXIT_RUNTIME;
      goto out;
    }
  }
  if (pairs == 0) {
    rc = 0;
    goto out;
  }
  const int *old = g->nodes[node].in;
  memcpy(in, old, (size_t)first * sizeof(int));
  memcpy(in + first, master, (size_t)n * sizeof(int));
  memcpy(in + first + n, old + first + n, (size_t)(n * (1 + k)) * sizeof(int));
  memcpy(in + first + n * (2 + k), copy, (size_t)n * sizeof(int));
  int n_in = first + n * (3 + k);
  int *arr = apx_arena_memdup(&g->arena, in, (size_t)n_in * sizeof(int));
  if (!arr) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    goto out;
  }
  g->nodes[node].in = arr;
  g->nodes[node].n_in = n_in;
  APX_NODE_ATTRS(g, node, ApxAttrOptimizer)->master_weights = 1;
  rc = apx_node_infer(g, node, d) ? -1 : 1;
out:
  free(master);
  free(copy);
  free(in);
  return rc;
}

int pass_master_weights(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  int changed = 0;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    if (g->nodes[id].op != APX_OP_OptimizerStep ||
        APX_NODE_ATTRS(g, id, ApxAttrOptimizer)->master_weights)
      continue;
    int rc = rewrite(g, o, d, id);
    if (rc < 0) return APX_PASS_ERROR;
    changed |= rc;
  }
  return changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
