/* master_weights.c - pass_master_weights: OptimizerStep on fp32 masters, half copies
 * refreshed in the same pass. See master_weights.h. */
#include "passes/master_weights.h"

#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/optimizer.h"

static int same_shape(const ApxValue *a, const ApxValue *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* master_of[p]: the fp32 master of parameter p (STATE, APX_VALF_MASTER, origin p, fp32,
 * p's shape; passes/cast_insert.c), -1 if none. One scan over the values. */
static int *compute_masters(const ApxGraph *g) {
  int *master_of = malloc(((size_t)g->n_vals + 1) * sizeof(int));
  if (!master_of) return NULL;
  for (int v = 0; v < g->n_vals; v++) master_of[v] = -1;
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *m = &g->vals[v];
    int p = m->origin;
    if (p < 0 || p >= g->n_vals || !(m->flags & APX_VALF_MASTER) || m->kind != APX_VAL_STATE ||
        m->dtype != APX_DT_F32 || !same_shape(m, &g->vals[p]) || master_of[p] >= 0)
      continue;
    master_of[p] = v;
  }
  return master_of;
}

static int rewrite(ApxGraph *g, const ApxOptions *o, ApxDiag *d, int node, const int *master_of) {
  ApxAttrOptimizer *at = APX_NODE_ATTRS(g, node, ApxAttrOptimizer);
  int n = at->n_params, k = apx_optimizer_state_groups(at);
  const int first = APX_OPTIM_IN_FIRST_GROUP;
  ApxAttrOptimizer with_copies = *at;
  with_copies.master_weights = 1;
  /* the half copies H_i become the last group: it starts at the count without them */
  int n_before = (int)apx_optimizer_n_inputs(at), n_in = (int)apx_optimizer_n_inputs(&with_copies);
  if (g->nodes[node].n_in != n_before)
    return apx_node_error(d, g, node, "internal error: %d inputs, expected %d for %d parameters",
                          g->nodes[node].n_in, n_before, n);
  int *master = malloc(((size_t)n + 1) * sizeof(int));
  int *copy = malloc(((size_t)n + 1) * sizeof(int));
  int *in = malloc((size_t)n_in * sizeof(int));
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
    int m = master_of[p];
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
  memcpy(in + n_before, copy, (size_t)n * sizeof(int));
  int *arr = apx_arena_memdup(&g->arena, in, (size_t)n_in * sizeof(int));
  if (!arr) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    goto out;
  }
  /* the order stays the one a re-sort would give when no edge changed: every input taken
   * out (p) and put in (M_i, H_i) is produced by no node (initializers, masters) */
  int edges_same = 1;
  for (int i = 0; i < n && edges_same; i++)
    edges_same = g->vals[old[first + i]].producer < 0 && g->vals[master[i]].producer < 0 &&
                 (copy[i] < 0 || g->vals[copy[i]].producer < 0);
  g->nodes[node].in = arr;
  g->nodes[node].n_in = n_in;
  APX_NODE_ATTRS(g, node, ApxAttrOptimizer)->master_weights = 1;
  rc = apx_node_infer(g, node, d) ? -1 : edges_same ? APX_PASS_CHANGED_KEEPS_ORDER : APX_PASS_CHANGED;
out:
  free(master);
  free(copy);
  free(in);
  return rc;
}

int pass_master_weights(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  int changed = 0, *master_of = NULL;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    if (g->nodes[id].op != APX_OP_OptimizerStep ||
        APX_NODE_ATTRS(g, id, ApxAttrOptimizer)->master_weights)
      continue;
    if (!master_of && !(master_of = compute_masters(g)))
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    int rc = rewrite(g, o, d, id, master_of);
    if (rc < 0) {
      free(master_of);
      return APX_PASS_ERROR;
    }
    if (rc == APX_PASS_CHANGED || (rc == APX_PASS_CHANGED_KEEPS_ORDER && changed == 0)) changed = rc;
  }
  free(master_of);
  return changed; /* CHANGED when any edge changed (the pipeline re-sorts) */
}
