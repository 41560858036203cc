/* cast_cleanup.c - round trips, no-op casts, constant casts and duplicates removed (see
 * cast_cleanup.h). Removed nodes are only flagged dead; users are rewired at the end, so
 * no consumer list is walked while it changes. */
#include "passes/cast_cleanup.h"

#include <stdlib.h>
#include <string.h>

#include "passes/precision_rules.h"

enum { N_SLOTS = 4 };

static int type_slot(ApxDType t) {
  switch (t) {
    case APX_DT_F32: return 0;
    case APX_DT_F16: return 1;
    case APX_DT_BF16: return 2;
    case APX_DT_F64: return 3;
    default: return -1;
  }
}

/* 1 when every value of type a converts exactly to type b. */
static int lossless(ApxDType a, ApxDType b) {
  if (a == b) return 1;
  if (b == APX_DT_F64) return a == APX_DT_F32 || a == APX_DT_F16 || a == APX_DT_BF16;
  if (b == APX_DT_F32) return a == APX_DT_F16 || a == APX_DT_BF16;
  return 0;
}

static int live_cast(const ApxGraph *g, int id) {
  return id >= 0 && g->nodes[id].op == APX_OP_Cast && !(g->nodes[id].flags & APX_NODEF_DEAD);
}

static int count_casts(const ApxGraph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += live_cast(g, i);
  return n;
}

static int resolve(const int *repl, int32_t cap, int v) {
  while (v >= 0 && v < cap && repl[v] >= 0) v = repl[v];
  return v;
}

static int pinned(const ApxGraph *g, int v) {
  return (g->vals[v].flags & APX_VALF_GRAPH_OUTPUT) || v == g->loss;
}

int pass_cast_cleanup(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  (void)o;
  int32_t cap = g->n_vals;
  g->casts.before_cleanup = count_casts(g);
  int *repl = malloc(((size_t)cap + 1) * sizeof *repl);
  int *dup = malloc(((size_t)cap + 1) * N_SLOTS * sizeof *dup);
  int *fold = malloc(((size_t)cap + 1) * N_SLOTS * sizeof *fold);
  if (!repl || !dup || !fold) {
    free(repl);
    free(dup);
    free(fold);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory in cast_cleanup", g->file);
  }
  for (int32_t i = 0; i < cap; i++) repl[i] = -1;
  for (size_t i = 0; i < (size_t)cap * N_SLOTS; i++) dup[i] = fold[i] = -1;
  int changed = 0, rc = 0;
  for (int k = 0; k < g->n_order && rc == 0; k++) {
    int id = g->order[k];
    if (!live_cast(g, id) || g->nodes[id].n_in < 1 || g->nodes[id].n_out < 1) continue;
    int y = g->nodes[id].out[0];
    int x = resolve(repl, cap, g->nodes[id].in[0]);
    if (x < 0 || y < 0) continue;
    ApxDType t = (ApxDType)APX_NODE_ATTRS(g, id, ApxAttrCast)->to;
    /* look through inserted or lossless casts */
    for (;;) {
      int p = g->vals[x].producer;
      if (!live_cast(g, p) || g->nodes[p].n_in < 1 || g->nodes[p].in[0] < 0) break;
      int z = resolve(repl, cap, g->nodes[p].in[0]);
      if (!apx_dtype_is_float(g->vals[z].dtype) || !apx_dtype_is_float(g->vals[x].dtype)) break;
      if (!apx_prec_is_inserted_cast(g, p) && !lossless(g->vals[z].dtype, g->vals[x].dtype)) break;
      x = z;
    }
    if (g->nodes[id].in[0] != x) {
      g->nodes[id].in[0] = x;
      changed = 1;
    }
    if (pinned(g, y) || y >= cap) continue;
    int s = type_slot(t);
    const ApxValue *xv = &g->vals[x];
    if (xv->dtype == t) { /* no-op */
      repl[y] = x;
    } else if (s >= 0 && x < cap && xv->producer < 0 && xv->data && apx_dtype_is_float(xv->dtype) &&
               (xv->kind == APX_VAL_CONST || (xv->kind == APX_VAL_PARAM && (xv->flags & APX_VALF_FROZEN)))) {
      int *f = &fold[(size_t)x * N_SLOTS + (size_t)s];
      if (*f < 0) {
        int nv = apx_const_converted_copy(g, x, t, d);
        if (nv < 0) {
          rc = -1;
          break;
        }
        *f = nv;
        g->casts.folded++;
      }
      repl[y] = *f;
    } else if (s >= 0 && x < cap) {
      int *u = &dup[(size_t)x * N_SLOTS + (size_t)s];
      if (*u < 0) {
        *u = y;
        continue;
      }
      repl[y] = *u;
    } else {
      continue;
    }
    g->nodes[id].flags |= APX_NODEF_DEAD;
    changed = 1;
  }
  /* rewire users of removed casts */
  for (int i = 0; rc == 0 && i < g->n_nodes; i++) {
    ApxNode *n = &g->nodes[i];
    if (n->flags & APX_NODEF_DEAD) continue;
    for (int k = 0; k < n->n_in; k++) {
      int v = resolve(repl, cap, n->in[k]);
      if (v != n->in[k]) {
        n->in[k] = v;
        changed = 1;
      }
    }
  }
  /* inserted casts nobody reads any more */
  for (int again = 1; rc == 0 && again;) {
    again = 0;
    ApxUses u;
    if (apx_uses_build(g, &u)) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory in cast_cleanup", g->file);
      break;
    }
    for (int i = 0; i < g->n_nodes; i++) {
      if (!live_cast(g, i) || !apx_prec_is_inserted_cast(g, i)) continue;
      int y = g->nodes[i].out[0];
      if (y < 0 || pinned(g, y) || apx_uses_count(&u, y) > 0) continue;
      g->nodes[i].flags |= APX_NODEF_DEAD;
      again = changed = 1;
    }
    apx_uses_free(&u);
  }
  free(repl);
  free(dup);
  free(fold);
  g->casts.after_cleanup = count_casts(g);
  if (rc) return -1;
  return changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
