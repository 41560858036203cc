/* bind_inputs.c - graph inputs bound to given tensors before compiling (bind_inputs.h). */
#include "compiler/bind_inputs.h"

#include <string.h>

#include "kernels/op.h"

int apx_input_must_be_constant(const ApxGraph *g, int v) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ApxNode *n = &g->nodes[i];
    if (n->flags & APX_NODEF_DEAD) continue;
    int fold = (apx_op_info(n->op)->flags & APX_OPF_FOLD) && n->op != APX_OP_Shape;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == v && (fold || apx_op_input_is_static(n->op, k))) return 1;
  }
  return 0;
}

ApxDType apx_bind_data_dtype(ApxDType file, ApxDType declared) {
  return (file == APX_DT_U16 && declared == APX_DT_BF16) ? APX_DT_BF16 : file;
}

static const char *where(const ApxInputBinding *b) { return b->file ? b->file : "bound data"; }

static char *dims_text(char *buf, size_t cap, int32_t rank, const int64_t *dims) {
  size_t l = 0;
  l += (size_t)snprintf(buf + l, cap - l, "[");
  for (int i = 0; i < rank && l < cap; i++) l += (size_t)snprintf(buf + l, cap - l, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (l < cap) snprintf(buf + l, cap - l, "]");
  return buf;
}

static int is_read(const ApxGraph *g, int v) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v && !(g->nodes[i].flags & APX_NODEF_DEAD)) return 1;
  return 0;
}

/* Checks data t against runtime input val and completes val's unknown dims from it. An
 * input no node reads takes the data's shape unchecked: nothing depends on it. */
static int bind_runtime(const ApxGraph *g, int v, const ApxInputBinding *b, ApxDiag *d) {
  ApxValue *val = &g->vals[v];
  char a[128], c[128];
  if (!is_read(g, v)) {
    val->dim_params = NULL;
    apx_value_set_shape(val, b->t.rank, b->t.dims);
    return 0;
  }
  if (val->rank >= 0 && val->rank != b->t.rank)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: input '%s' has rank %d, the model declares %s", where(b),
                          val->name, b->t.rank, apx_value_shape_str(val, c, sizeof c));
  for (int i = 0; val->rank >= 0 && i < val->rank; i++) {
    int symbolic = val->dim_params && val->dim_params[i];
    if (val->dims[i] >= 0 && !symbolic && val->dims[i] != b->t.dims[i])
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: input '%s' has shape %s, the model declares %s", where(b),
                            val->name, dims_text(a, sizeof a, b->t.rank, b->t.dims),
                            apx_value_shape_str(val, c, sizeof c));
  }
  val->dim_params = NULL;
  apx_value_set_shape(val, b->t.rank, b->t.dims);
  return 0;
}

int apx_bind_inputs(ApxGraph *g, ApxInputBinding *b, int n, ApxDiag *d) {
  int n_inputs = g->n_inputs;
  int *keep = apx_arena_alloc(&g->arena, sizeof(int) * (size_t)(n_inputs + 1));
  if (!keep) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  /* resolve every binding to a graph input first (indices refer to the inputs as loaded) */
  int *vid = apx_arena_alloc(&g->arena, sizeof(int) * (size_t)(n + 1));
  if (!vid) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  for (int i = 0; i < n; i++) {
    vid[i] = -1;
    if (!b[i].name) {
      if (b[i].index < 0 || b[i].index >= n_inputs)
        return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the model has %d data input%s, this is one more",
                              where(&b[i]), n_inputs, n_inputs == 1 ? "" : "s");
      vid[i] = g->inputs[b[i].index];
      b[i].name = g->vals[vid[i]].name;
    } else {
      for (int k = 0; k < n_inputs; k++)
        if (!strcmp(g->vals[g->inputs[k]].name, b[i].name)) vid[i] = g->inputs[k];
      if (vid[i] < 0)
        return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the model has no data input '%s'", where(&b[i]),
                              b[i].name);
    }
    for (int j = 0; j < i; j++)
      if (vid[j] == vid[i])
        return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: input '%s' is given twice (also by %s)", where(&b[i]),
                              b[i].name, where(&b[j]));
  }
  for (int i = 0; i < n; i++) {
    ApxValue *val = &g->vals[vid[i]];
    ApxDType dt = apx_bind_data_dtype(b[i].t.dtype, val->dtype);
    if (val->dtype != APX_DT_UNDEFINED && dt != val->dtype)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: input '%s' holds %s data, the model declares %s",
                            where(&b[i]), val->name, apx_dtype_name(b[i].t.dtype), apx_dtype_name(val->dtype));
    val->dtype = dt;
    b[i].constant = apx_input_must_be_constant(g, vid[i]);
    if (!b[i].constant) {
      if (bind_runtime(g, vid[i], &b[i], d)) return -1;
      continue;
    }
    int64_t numel = 1;
    for (int k = 0; k < b[i].t.rank; k++) numel *= b[i].t.dims[k];
    size_t bytes = (size_t)numel * apx_dtype_size(dt);
    void *data = apx_arena_alloc_raw(&g->arena, bytes + 1);
    if (!data) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    if (bytes) memcpy(data, b[i].t.data, bytes);
    val->dim_params = NULL;
    apx_value_set_shape(val, b[i].t.rank, b[i].t.dims);
    val->kind = APX_VAL_CONST;
    val->data = data;
  }
  int m = 0;
  for (int k = 0; k < n_inputs; k++)
    if (g->vals[g->inputs[k]].kind == APX_VAL_INPUT) keep[m++] = g->inputs[k];
  memcpy(g->inputs, keep, sizeof(int) * (size_t)m);
  g->n_inputs = m;
  return 0;
}
