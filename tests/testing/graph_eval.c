/* graph_eval.c - test-only evaluator of a graph on the CPU reference kernels. */
#include "tests/testing/graph_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"

int apx_eval_init(ApxEval *e, const ApxGraph *g) {
  memset(e, 0, sizeof *e);
  e->g = g;
  e->n_vals = g->n_vals;
  apx_cpu_ctx_init(&e->ctx);
  e->ctx.n_threads = 1;
  e->ctx.seed = 1234;
  e->buf = calloc((size_t)g->n_vals + 1, sizeof *e->buf);
  e->bytes = calloc((size_t)g->n_vals + 1, sizeof *e->bytes);
  if (!e->buf || !e->bytes) {
    snprintf(e->err, sizeof e->err, "out of memory");
    return -1;
  }
  for (int v = 0; v < g->n_vals; v++) {
    int64_t b = apx_value_bytes(&g->vals[v]);
    if (b < 0) continue;
    e->buf[v] = calloc((size_t)b + 1, 1);
    if (!e->buf[v]) {
      snprintf(e->err, sizeof e->err, "out of memory for value '%s'", g->vals[v].name);
      return -1;
    }
    e->bytes[v] = (size_t)b;
    if (g->vals[v].data && g->vals[v].kind != APX_VAL_ACTIVATION)
      memcpy(e->buf[v], g->vals[v].data, (size_t)b);
  }
  /* half parameters whose bytes are their masters' converted (passes/cast_insert.c), as the
   * runtime makes them at load */
  int *master_of = NULL;
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *val = &g->vals[v];
    if (val->data || !(val->flags & APX_VALF_DATA_FROM_MASTER) || !e->buf[v]) continue;
    if (!master_of && !(master_of = apx_value_master_map(g))) {
      snprintf(e->err, sizeof e->err, "out of memory");
      return -1;
    }
    int m = master_of[v];
    const ApxValue *mv = m >= 0 ? &g->vals[m] : NULL;
    if (!mv || !mv->data ||
        apx_cpu_convert(mv->data, mv->dtype, e->buf[v], val->dtype, apx_value_numel(val)) != APX_STATUS_OK) {
      snprintf(e->err, sizeof e->err, "half parameter '%s' without its master's data", val->name);
      free(master_of);
      return -1;
    }
  }
  free(master_of);
  return 0;
}

void apx_eval_free(ApxEval *e) {
  if (e->buf)
    for (int v = 0; v < e->n_vals; v++) free(e->buf[v]);
  free(e->buf);
  free(e->bytes);
  memset(e, 0, sizeof *e);
}

void *apx_eval_buf(ApxEval *e, int v) {
  return v >= 0 && v < e->n_vals ? e->buf[v] : NULL;
}

static ApxTensor tensor_of(ApxEval *e, int v) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  if (v < 0 || v >= e->n_vals) return t;
  const ApxValue *val = &e->g->vals[v];
  t.data = e->buf[v];
  t.dtype = val->dtype;
  t.rank = val->rank < 0 ? 0 : val->rank;
  for (int i = 0; i < t.rank; i++) t.dims[i] = val->dims[i];
  return t;
}

double apx_eval_get(ApxEval *e, int v, int64_t i) {
  const void *p = e->buf[v];
  switch (e->g->vals[v].dtype) {
    case APX_DT_F64: return ((const double *)p)[i];
    case APX_DT_F32: return ((const float *)p)[i];
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)p)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)p)[i]);
    case APX_DT_I64: return (double)((const int64_t *)p)[i];
    case APX_DT_I32: return ((const int32_t *)p)[i];
    case APX_DT_BOOL:
    case APX_DT_U8: return ((const uint8_t *)p)[i];
    default: return 0.0;
  }
}

void apx_eval_set(ApxEval *e, int v, int64_t i, double x) {
  void *p = e->buf[v];
  switch (e->g->vals[v].dtype) {
    case APX_DT_F64: ((double *)p)[i] = x; break;
    case APX_DT_F32: ((float *)p)[i] = (float)x; break;
    case APX_DT_F16: ((uint16_t *)p)[i] = apx_f32_to_f16((float)x); break;
    case APX_DT_BF16: ((uint16_t *)p)[i] = apx_f32_to_bf16((float)x); break;
    case APX_DT_I64: ((int64_t *)p)[i] = (int64_t)x; break;
    case APX_DT_I32: ((int32_t *)p)[i] = (int32_t)x; break;
    case APX_DT_BOOL:
    case APX_DT_U8: ((uint8_t *)p)[i] = (uint8_t)(x != 0.0); break;
    default: break;
  }
}

int apx_eval_run(ApxEval *e, unsigned mask) {
  const ApxGraph *g = e->g;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    if ((n->flags & APX_NODEF_DEAD) || !(mask & (1u << n->section))) continue;
    ApxTensor *ins = calloc((size_t)n->n_in + 1, sizeof *ins);
    ApxTensor *outs = calloc((size_t)n->n_out + 1, sizeof *outs);
    if (!ins || !outs) {
      free(ins);
      free(outs);
      snprintf(e->err, sizeof e->err, "out of memory");
      return -1;
    }
    for (int i = 0; i < n->n_in; i++) ins[i] = tensor_of(e, n->in[i]);
    for (int i = 0; i < n->n_out; i++) outs[i] = tensor_of(e, n->out[i]);
    ApxStatus st = APX_STATUS_OK;
    if (n->op == APX_OP_Allreduce) { /* one process: the reduction is the identity */
      for (int i = 0; i < n->n_in && i < n->n_out; i++)
        if (ins[i].data && outs[i].data && ins[i].data != outs[i].data)
          memcpy(outs[i].data, ins[i].data, apx_tensor_bytes(&ins[i]));
    } else {
      st = apx_cpu_run(&e->ctx, n->op, n->typed, ins, n->n_in, outs, n->n_out);
    }
    free(ins);
    free(outs);
    if (st != APX_STATUS_OK) {
      snprintf(e->err, sizeof e->err, "node '%s' (%s): %s: %s", n->name, apx_op_name(n->op),
               apx_status_name(st), e->ctx.err);
      return -1;
    }
  }
  return 0;
}
