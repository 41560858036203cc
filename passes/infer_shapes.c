/* infer_shapes.c - canonicalize + infer every live node in order; every used value ends
 * with a known dtype and static shape (contract in infer_shapes.h). */
#include "passes/infer_shapes.h"

#include <string.h>

#include "ir/infer.h"

typedef struct Snap {
  ApxDType dtype;
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
} Snap;

static Snap snap_of(const ApxValue *v) {
  Snap s;
  memset(&s, 0, sizeof s);
  s.dtype = v->dtype;
  s.rank = v->rank;
  for (int i = 0; i < v->rank && i < APX_MAX_RANK; i++) s.dims[i] = v->dims[i];
  return s;
}

static int known(const ApxValue *v) {
  return apx_dtype_size(v->dtype) != 0 && v->rank >= 0 && (v->flags & APX_VALF_SHAPE_KNOWN);
}

int pass_infer_shapes(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  int changed = 0;
  for (int k = 0; k < g->n_order; k++) {
    int node = g->order[k];
    if (g->nodes[node].flags & APX_NODEF_DEAD) continue;
    int n_out = g->nodes[node].n_out;
    Snap before[16];
    for (int i = 0; i < n_out && i < 16; i++) {
      int v = g->nodes[node].out[i];
      if (v >= 0) before[i] = snap_of(&g->vals[v]);
    }
    if (apx_node_canonicalize(g, node, d) || apx_node_infer(g, node, d)) return APX_PASS_ERROR;
    const ApxNode *n = &g->nodes[node];
    for (int i = 0; i < n_out; i++) {
      int v = n->out[i];
      if (v < 0) continue;
      const ApxValue *val = &g->vals[v];
      if (!known(val))
        return apx_node_error(d, g, node, "output %d '%s' has no inferred dtype and shape", i,
                              val->name);
      if (i >= 16) {
        changed = 1;
        continue;
      }
      Snap after = snap_of(val);
      if (memcmp(&before[i], &after, sizeof after) != 0) changed = 1;
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i];
    if (v < 0 || v >= g->n_vals) continue;
    if (!known(&g->vals[v]))
      return apx_value_error(d, g, v, "graph output has no known dtype and shape (no live node "
                             "produces it and the model does not declare it)");
  }
  return changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
