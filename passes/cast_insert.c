/* cast_insert.c - Cast nodes, converted constants and half parameter storage so that every
 * node sees its inputs in its compute type (see cast_insert.h). */
#include "passes/cast_insert.h"

#include <stdlib.h>
#include <string.h>

#include "passes/precision_rules.h"

enum { N_SLOTS = 4 }; /* cast targets cached per value: F32, F16, BF16, F64 */

typedef struct Ctx {
  ApxGraph *g;
  const ApxOptions *o;
  ApxDiag *d;
  ApxPrecSettings s;
  int *cache;       /* [cache_vals * N_SLOTS]: value holding v cast to a type, -1 */
  int32_t cache_vals;
  ApxUses u;        /* consumers at entry */
  int changed;
} Ctx;

static int type_slot(ApxDType t) {
  switch (t) {
    case APX_DT_F32: return 0;
    case APX_DT_F16: return 1;
    case APX_DT_BF16: return 2;
    case APX_DT_F64: return 3;
    default: return -1;
  }
}

/* Pointer to the cache entry for (v, t); grows the cache. NULL on allocation failure or
 * for a non-float t. */
static int *cache_at(Ctx *c, int v, ApxDType t) {
  int s = type_slot(t);
  if (s < 0) return NULL;
  if (v >= c->cache_vals) {
    int32_t nc = c->cache_vals ? c->cache_vals : 64;
    while (nc <= v) nc *= 2;
    int *p = realloc(c->cache, (size_t)nc * N_SLOTS * sizeof(int));
    if (!p) return NULL;
    for (size_t i = (size_t)c->cache_vals * N_SLOTS; i < (size_t)nc * N_SLOTS; i++) p[i] = -1;
    c->cache = p;
    c->cache_vals = nc;
  }
  return &c->cache[(size_t)v * N_SLOTS + (size_t)s];
}

static int oom(Ctx *c) {
  return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory in cast_insert", c->g->file);
}

/* Value holding v converted to t, for consumer node `user`: a converted constant or the
 * output of a (shared) Cast node. */
static int get_cast(Ctx *c, int v, ApxDType t, int user) {
  ApxGraph *g = c->g;
  int *slot = cache_at(c, v, t);
  if (!slot) return oom(c);
  if (*slot >= 0) return *slot;
  const ApxValue *val = &g->vals[v];
  int is_const = val->producer < 0 && val->data &&
                 (val->kind == APX_VAL_CONST || (val->kind == APX_VAL_PARAM && (val->flags & APX_VALF_FROZEN)));
  int nv;
  if (is_const) {
    nv = apx_const_converted_copy(g, v, t, c->d);
    if (nv < 0) return -1;
    g->casts.folded++;
  } else {
    ApxValueKind kind = val->kind;
    int id = apx_cast_node_add(g, v, t, -1, c->d);
    if (id < 0) return -1;
    ApxNode *n = &g->nodes[id];
    n->section = (kind == APX_VAL_PARAM) ? APX_SEC_FORWARD : g->nodes[user].section;
    n->origin = user;
    nv = n->out[0];
    g->casts.inserted++;
  }
  slot = cache_at(c, v, t);
  if (!slot) return oom(c);
  *slot = nv;
  c->changed = 1;
  return nv;
}

/* O2/O3: parameters whose users run in half are stored in half (masters kept at O2). */
static int store_params_half(Ctx *c, int32_t n_vals0) {
  ApxGraph *g = c->g;
  if (!c->s.model_half) return 0;
  for (int v = 0; v < n_vals0; v++) {
    ApxValue *val = &g->vals[v];
    if (val->kind != APX_VAL_PARAM || (val->flags & APX_VALF_FROZEN) || val->producer >= 0 ||
        !val->data || (val->dtype != APX_DT_F32 && val->dtype != APX_DT_F64))
      continue;
    int any_half = 0, keep = 0;
    for (int j = c->u.use_start[v]; j < c->u.use_start[v + 1]; j++) {
      int un = c->u.use_node[j], us = c->u.use_slot[j];
      if (apx_prec_is_fixed_node(g, un)) continue;
      ApxInputRole role = apx_prec_input_role(g, un, us);
      if (role == APX_IN_KEEP) keep = 1;
      if (role == APX_IN_DATA && g->nodes[un].compute == c->s.half) any_half = 1;
    }
    if (!any_half || keep) continue;
    ApxConstRange r;
    apx_const_range_check_memo(g, v, c->s.half, &r);
    if (r.issue != APX_RANGE_OK) continue; /* its users were kept fp32 by the overflow rule */
    int64_t n = apx_value_numel(val);
    if (n < 0) continue;
    /* with a master, the half bytes are the master's converted: made where needed (the plan
     * derives them at load; compiler/emit_plan.c), not here */
    void *half = NULL;
    if (!c->s.master_weights) {
      if (!(half = apx_arena_alloc_raw(&g->arena, (size_t)(n ? n : 1) * 2))) return oom(c);
      if (apx_convert_floats(val->data, val->dtype, half, c->s.half, n))
        return apx_value_error(c->d, g, v, "internal error: cannot convert to %s", apx_dtype_short(c->s.half));
    }
    if (c->s.master_weights) {
      const char *hint = apx_arena_printf(&g->arena, "%s_fp32_master", val->name);
      const char *name = hint ? apx_graph_free_name(g, hint) : NULL;
      int64_t dims[APX_MAX_RANK];
      memcpy(dims, val->dims, sizeof dims);
      int m = apx_graph_add_value(g, c->d, name, APX_VAL_STATE, val->dtype, val->rank, dims);
      if (m < 0) return -1;
      val = &g->vals[v];
      ApxValue *mv = &g->vals[m];
      mv->data = val->data;
      mv->origin = v;
      mv->flags |= APX_VALF_MASTER;
      mv->dim_params = val->dim_params;
    }
    val->data = half;
    val->dtype = c->s.half;
    if (!half) val->flags |= APX_VALF_DATA_FROM_MASTER;
    c->changed = 1;
  }
  return 0;
}

/* Graph output w produced in half by node id: the node writes a new value, a Cast back to
 * w's dtype produces w, and w's other users take the new value. The Cast's origin is the
 * producer for a graph output; for a parameter's gradient it is w's first reader (as for
 * every inserted Cast of a value read outside its producer's region: the fusion passes
 * then leave the Cast to the reader, fuse_common.h). */
static int keep_output_dtype(Ctx *c, int id, int o, ApxDType t, int grad) {
  ApxGraph *g = c->g;
  int w = g->nodes[id].out[o];
  ApxDType orig = g->vals[w].dtype;
  int nv = apx_value_add_like(g, w, APX_VAL_ACTIVATION, t, c->d);
  if (nv < 0) return -1;
  g->vals[nv].origin = w;
  g->nodes[id].out[o] = nv;
  g->vals[nv].producer = id;
  for (int j = c->u.use_start[w]; j < c->u.use_start[w + 1]; j++) {
    int un = c->u.use_node[j], us = c->u.use_slot[j];
    if (apx_prec_is_fixed_node(g, un)) continue; /* optimizer / state users keep w */
    if (g->nodes[un].in[us] == w) g->nodes[un].in[us] = nv;
  }
  int first_user = apx_uses_count(&c->u, w) > 0 ? c->u.use_node[c->u.use_start[w]] : -1;
  int cid = apx_cast_node_add(g, nv, orig, w, c->d);
  if (cid < 0) return -1;
  g->nodes[cid].section = g->nodes[id].section;
  g->nodes[cid].origin = grad ? first_user : id;
  g->vals[w].dtype = orig;
  int *slot = cache_at(c, nv, orig);
  if (!slot) return oom(c);
  *slot = w;
  g->casts.inserted++;
  c->changed = 1;
  return 0;
}

/* A parameter's gradient takes the parameter's storage type, as Apex and torch AMP do (the
 * backward of the per-step Cast widens): at O1 every fp32 weight gets an fp32 gradient, so
 * buckets, allreduce and --accumulate sums are fp32; at O2/O3 a parameter stored in half has
 * a half gradient (--allreduce-fp32 widens it for the allreduce), one kept in fp32 an fp32
 * one. */
static int is_wide_param_grad(const ApxGraph *g, int w, ApxDType t) {
  const ApxValue *wv = &g->vals[w];
  if (!(wv->flags & APX_VALF_GRAD) || wv->origin < 0 || wv->origin >= g->n_vals) return 0;
  const ApxValue *p = &g->vals[wv->origin];
  return p->kind == APX_VAL_PARAM && apx_dtype_is_float(p->dtype) && apx_dtype_size(p->dtype) > apx_dtype_size(t);
}

static int process_node(Ctx *c, int id) {
  ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  if (apx_prec_is_inserted_cast(g, id) || apx_prec_is_fixed_node(g, id) || n->op == APX_OP_Cast) return 0;
  ApxDType t = n->compute;
  if (!apx_dtype_is_float(t)) return 0;
  int fl = apx_prec_is_float_node(g, id);
  int cast_inputs = fl || apx_op_info(n->op)->prec == APX_PREC_PROMOTE;
  for (int k = 0; cast_inputs && k < g->nodes[id].n_in; k++) {
    int v = g->nodes[id].in[k];
    if (v < 0 || apx_prec_input_role(g, id, k) != APX_IN_DATA) continue;
    ApxDType vt = g->vals[v].dtype;
    if (!apx_dtype_is_float(vt) || vt == t) continue;
    int nv = get_cast(c, v, t, id);
    if (nv < 0) return -1;
    g->nodes[id].in[k] = nv;
  }
  if (!fl) return 0;
  for (int o = 0; o < g->nodes[id].n_out; o++) {
    int w = g->nodes[id].out[o];
    if (w < 0 || !apx_prec_output_follows(g, id, o)) continue;
    ApxValue *wv = &g->vals[w];
    if (!apx_dtype_is_float(wv->dtype) || wv->dtype == t) continue;
    int grad = is_wide_param_grad(g, w, t);
    if ((wv->flags & APX_VALF_GRAPH_OUTPUT) || w == g->loss || grad) {
      if (keep_output_dtype(c, id, o, t, grad && !(wv->flags & APX_VALF_GRAPH_OUTPUT) && w != g->loss)) return -1;
    } else {
      wv->dtype = t;
      c->changed = 1;
    }
  }
  return 0;
}

int pass_cast_insert(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  Ctx c;
  memset(&c, 0, sizeof c);
  c.g = g;
  c.o = o;
  c.d = d;
  c.s = apx_prec_settings(o);
  int32_t n_order = g->n_order, n_vals0 = g->n_vals;
  int *order = malloc(((size_t)n_order + 1) * sizeof *order);
  if (!order || apx_uses_build(g, &c.u)) {
    free(order);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory in cast_insert", g->file);
  }
  memcpy(order, g->order, (size_t)n_order * sizeof *order);
  int rc = store_params_half(&c, n_vals0);
  for (int k = 0; rc == 0 && k < n_order; k++)
    if (!(g->nodes[order[k]].flags & APX_NODEF_DEAD)) rc = process_node(&c, order[k]);
  free(order);
  free(c.cache);
  apx_uses_free(&c.u);
  if (rc) return -1;
  return c.changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
