/* fuse_common.c - region replacement shared by the fusion passes (see fuse_common.h). */
#include "passes/fuse_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/precision_rules.h"

static int oom(FzCtx *c) { return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory (fusion)", c->g->file); }

const char *fz_dt(ApxDType t) { return t == APX_DT_UNDEFINED ? "undecided" : apx_dtype_short(t); }

int fz_add(FzFusion *f, int node) {
  if (fz_has(f, node)) return 0;
  if (f->n_fwd >= FZ_MAX_NODES) return -1;
  f->fwd[f->n_fwd++] = node;
  return 0;
}

int fz_has(const FzFusion *f, int node) {
  for (int i = 0; i < f->n_fwd; i++)
    if (f->fwd[i] == node) return 1;
  return 0;
}

int fz_is_cast(const ApxGraph *g, int node) {
  if (!fz_live(g, node) || !apx_prec_is_inserted_cast(g, node)) return 0;
  const ApxNode *n = &g->nodes[node];
  return n->n_in >= 1 && n->n_out >= 1 && n->in[0] >= 0 && n->out[0] >= 0 &&
         apx_dtype_is_float(g->vals[n->in[0]].dtype) && apx_dtype_is_float(g->vals[n->out[0]].dtype);
}

int fz_source(const ApxGraph *g, int v) {
  if (v < 0) return v;
  int p = g->vals[v].producer;
  if (p < 0 || !fz_is_cast(g, p)) return v;
  int x = g->nodes[p].in[0];
  if (apx_dtype_is_half(g->vals[x].dtype) && g->vals[v].dtype == APX_DT_F32) return x;
  return v;
}

int fz_scalar(const ApxGraph *g, int v, double *x) {
  if (v < 0) return 0;
  const ApxValue *val = &g->vals[v];
  if (val->kind != APX_VAL_CONST || !val->data || apx_value_numel(val) != 1) return 0;
  switch (val->dtype) {
    case APX_DT_F32: *x = *(const float *)val->data; return 1;
    case APX_DT_F64: *x = *(const double *)val->data; return 1;
    case APX_DT_F16: {
      float f;
      apx_convert_floats(val->data, APX_DT_F16, &f, APX_DT_F32, 1);
      *x = f;
      return 1;
    }
    case APX_DT_BF16: {
      float f;
      apx_convert_floats(val->data, APX_DT_BF16, &f, APX_DT_F32, 1);
      *x = f;
      return 1;
    }
    default: return 0;
  }
}

/* ---- pass state ------------------------------------------------------------------- */

/* Root forward node of node n (see fuse_common.h), memoized for the nodes of the index. */
static int root_of(FzCtx *c, int n) {
  const ApxGraph *g = c->g;
  int path[64], np = 0, cur = n, r = -1;
  for (int hops = 0; hops < 64; hops++) {
    if (cur < 0 || cur >= g->n_nodes) break;
    if (cur < c->n0 && c->root[cur] != -2) {
      r = c->root[cur];
      break;
    }
    const ApxNode *nd = &g->nodes[cur];
    if (cur < c->n0 && np < 64) path[np++] = cur;
    if (nd->section == APX_SEC_FORWARD) {
      r = cur;
      break;
    }
    if (nd->op == APX_OP_LossScaleSeed) break;
    int next = nd->origin; /* an inserted Cast's origin is its first user (cast_insert.h) */
    if (next == cur) break;
    cur = next;
  }
  for (int i = 0; i < np; i++) c->root[path[i]] = r;
  return r;
}

int fz_begin(FzCtx *c, ApxGraph *g, const ApxOptions *o, ApxDiag *d, const char *pass) {
  memset(c, 0, sizeof *c);
  c->g = g, c->o = o, c->d = d, c->pass = pass;
  for (int i = 0; i < 2 * FZ_MAX_IO; i++) c->trial_val[i] = -1;
  ApxFusionLog *l = apx_fusion_log_start(g, o->fusion_traffic);
  if (!l) return oom(c);
  c->traffic_ok = apx_fusion_log_current(g); /* 0 when not counted: no deltas either */
  if (o->no_fuse) {
    l->disabled = 1;
    return 0;
  }
  int n = c->n0 = g->n_nodes;
  if (apx_uses_build(g, &c->uses)) return oom(c);
  c->uses_nvals = g->n_vals;
  c->root = malloc(((size_t)n + 1) * sizeof(int));
  c->bw_start = calloc((size_t)n + 2, sizeof(int));
  c->ch_start = calloc((size_t)n + 2, sizeof(int));
  c->touched = calloc((size_t)n + 1, 1);
  if (!c->root || !c->bw_start || !c->ch_start || !c->touched) return oom(c);
  for (int i = 0; i < n; i++) c->root[i] = -2;
  int nbw = 0, nch = 0;
  for (int i = 0; i < n; i++) {
    const ApxNode *nd = &g->nodes[i];
    if (nd->flags & APX_NODEF_DEAD) continue;
    if (nd->section == APX_SEC_BACKWARD) {
      int r = root_of(c, i);
      if (r >= 0 && r < n) c->bw_start[r + 1]++, nbw++;
    }
    if (nd->origin >= 0 && nd->origin < n) c->ch_start[nd->origin + 1]++, nch++;
  }
  for (int i = 0; i < n; i++) {
    c->bw_start[i + 1] += c->bw_start[i];
    c->ch_start[i + 1] += c->ch_start[i];
  }
  c->bw_node = malloc(((size_t)nbw + 1) * sizeof(int));
  c->ch_node = malloc(((size_t)nch + 1) * sizeof(int));
  int *fill = calloc((size_t)n + 1, sizeof(int)), *fill2 = calloc((size_t)n + 1, sizeof(int));
  if (!c->bw_node || !c->ch_node || !fill || !fill2) {
    free(fill);
    free(fill2);
    return oom(c);
  }
  for (int i = 0; i < n; i++) {
    const ApxNode *nd = &g->nodes[i];
    if (nd->flags & APX_NODEF_DEAD) continue;
    if (nd->section == APX_SEC_BACKWARD) {
      int r = c->root[i];
      if (r >= 0 && r < n) c->bw_node[c->bw_start[r] + fill[r]++] = i;
    }
    if (nd->origin >= 0 && nd->origin < n) c->ch_node[c->ch_start[nd->origin] + fill2[nd->origin]++] = i;
  }
  free(fill);
  free(fill2);
  return 1;
}

int fz_end(FzCtx *c) {
  if (c->g && c->changed && c->traffic_ok)
    apx_fusion_log_after_delta(c->g, &c->traffic_delta);
  else if (c->g)
    apx_fusion_log_after(c->g, c->changed);
  apx_uses_free(&c->uses);
  free(c->root);
  free(c->bw_start);
  free(c->bw_node);
  free(c->ch_start);
  free(c->ch_node);
  free(c->touched);
  free(c->ex_head);
  free(c->ex_node);
  free(c->ex_next);
  free(c->mark);
  free(c->w_nodes);
  free(c->w_vals);
  free(c->w_slot);
  free(c->w_vmark);
  return c->changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}

void fz_traffic_add(FzCtx *c, const ApxTraffic *t) { apx_traffic_add(&c->traffic_delta, t); }

void fz_traffic_node(FzCtx *c, int node, ApxTraffic *t, int sign) {
  if (c->traffic_ok) apx_traffic_count_node(c->g, node, t, sign);
}

int fz_run(ApxGraph *g, const ApxOptions *o, ApxDiag *d, const char *pass, FzWant want,
           FzTry try_node) {
  int any = 0; /* no node the pass looks at: nothing to index (the log still starts here) */
  for (int k = 0; k < g->n_order && !any; k++) any = want(g, g->order[k]);
  if (!any && !o->no_fuse) {
    if (!apx_fusion_log_start(g, o->fusion_traffic))
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    apx_fusion_log_after(g, 0);
    return APX_PASS_UNCHANGED;
  }
  FzCtx c;
  int rc = fz_begin(&c, g, o, d, pass);
  if (rc <= 0) {
    fz_end(&c);
    return rc;
  }
  int n = g->n_order, *order = malloc(((size_t)n + 1) * sizeof(int));
  if (!order) {
    fz_end(&c);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  }
  memcpy(order, g->order, (size_t)n * sizeof(int));
  for (int k = 0; k < n && rc >= 0; k++)
    if (want(g, order[k])) rc = try_node(&c, order[k]);
  free(order);
  int changed = fz_end(&c);
  return rc < 0 ? APX_PASS_ERROR : changed;
}

int fz_fwd_op(const ApxGraph *g, int node, ApxOp op) {
  return fz_live(g, node) && g->nodes[node].section == APX_SEC_FORWARD && g->nodes[node].op == op;
}

/* Registers node (created or rewired since the index was built) as a reader of each of
 * its current inputs; index entries of a rewired node are ignored from now on. */
static int add_extra(FzCtx *c, int node) {
  const ApxGraph *g = c->g;
  if (node < c->n0) c->touched[node] = 1;
  const ApxNode *nd = &g->nodes[node];
  for (int k = 0; k < nd->n_in; k++) {
    int v = nd->in[k];
    if (v < 0) continue;
    if (v >= c->ex_head_cap) {
      int nc = g->n_vals + g->n_vals / 2 + 64;
      int *p = realloc(c->ex_head, (size_t)nc * sizeof *p);
      if (!p) return oom(c);
      for (int i = c->ex_head_cap; i < nc; i++) p[i] = -1;
      c->ex_head = p;
      c->ex_head_cap = nc;
    }
    if (c->n_ex == c->cap_ex) {
      int nc = c->cap_ex ? c->cap_ex * 2 : 256;
      int *a = realloc(c->ex_node, (size_t)nc * sizeof *a);
      if (a) c->ex_node = a;
      int *b = a ? realloc(c->ex_next, (size_t)nc * sizeof *b) : NULL;
      if (!b) return oom(c);
      c->ex_next = b;
      c->cap_ex = nc;
    }
    c->ex_node[c->n_ex] = node;
    c->ex_next[c->n_ex] = c->ex_head[v];
    c->ex_head[v] = c->n_ex++;
  }
  return 0;
}

/* ---- uses ------------------------------------------------------------------------- */

static int push_unique(int *out, int cap, int *n, int node) {
  for (int i = 0; i < *n && i < cap; i++)
    if (out[i] == node) return 0;
  if (*n < cap) out[*n] = node;
  (*n)++;
  return 1;
}

static int users(FzCtx *c, int v, int *out, int cap, int fwd_only) {
  const ApxGraph *g = c->g;
  int n = 0, last = -1;
  if (v >= 0 && v < c->uses_nvals) {
    /* index entries come in node id order, a node's slots adjacent */
    for (int k = c->uses.use_start[v]; k < c->uses.use_start[v + 1]; k++) {
      int node = c->uses.use_node[k];
      if (node == last || !fz_live(g, node) || c->touched[node]) continue;
      if (g->nodes[node].in[c->uses.use_slot[k]] != v) continue;
      if (fwd_only && g->nodes[node].section != APX_SEC_FORWARD) continue;
      last = node;
      if (n < cap) out[n] = node;
      n++;
    }
  }
  /* nodes created or rewired since the index was built */
  for (int e = v >= 0 && v < c->ex_head_cap ? c->ex_head[v] : -1; e >= 0; e = c->ex_next[e]) {
    int node = c->ex_node[e];
    if (!fz_live(g, node)) continue;
    if (fwd_only && g->nodes[node].section != APX_SEC_FORWARD) continue;
    const ApxNode *nd = &g->nodes[node];
    for (int k = 0; k < nd->n_in; k++)
      if (nd->in[k] == v) {
        push_unique(out, cap, &n, node);
        break;
      }
  }
  return n;
}

int fz_users(FzCtx *c, int v, int *out, int cap) { return users(c, v, out, cap, 0); }
int fz_fwd_users(FzCtx *c, int v, int *out, int cap) { return users(c, v, out, cap, 1); }

int fz_next(FzCtx *c, FzFusion *f, int v) {
  for (int hops = 0; hops < 8; hops++) {
    int u[2];
    if (fz_fwd_users(c, v, u, 2) != 1) return -1;
    if (!fz_is_cast(c->g, u[0])) return u[0];
    if (fz_add(f, u[0])) return -1;
    v = c->g->nodes[u[0]].out[0];
  }
  return -1;
}

int fz_prev(FzCtx *c, FzFusion *f, int v, int *pv) {
  const ApxGraph *g = c->g;
  for (int hops = 0; hops < 8 && v >= 0; hops++) {
    int p = g->vals[v].producer;
    if (!fz_live(g, p)) return -1;
    if (!fz_is_cast(g, p)) {
      *pv = v;
      return p;
    }
    if (fz_add(f, p)) return -1;
    v = g->nodes[p].in[0];
  }
  return -1;
}

/* ---- records ------------------------------------------------------------------------ */

/* "a, b, c": the non-Cast nodes of f->fwd */
static const char *node_list(ApxGraph *g, const FzFusion *f) {
  size_t cap = 1;
  for (int i = 0; i < f->n_fwd; i++) cap += strlen(g->nodes[f->fwd[i]].name) + 2;
  char *s = apx_arena_alloc(&g->arena, cap);
  if (!s) return "";
  size_t n = 0;
  for (int i = 0; i < f->n_fwd; i++) {
    if (g->nodes[f->fwd[i]].op == APX_OP_Cast && apx_prec_is_inserted_cast(g, f->fwd[i])) continue;
    n += (size_t)snprintf(s + n, cap - n, "%s%s", n ? ", " : "", g->nodes[f->fwd[i]].name);
  }
  return s;
}

static int vreject(FzCtx *c, const FzFusion *f, ApxOp op, ApxFusionWhy why, const char *fmt, va_list ap) {
  char detail[512];
  vsnprintf(detail, sizeof detail, fmt, ap);
  ApxFusionRecord r = {.pass = c->pass, .pattern = f->pattern, .fused_op = apx_op_name(op),
                       .nodes = node_list(c->g, f), .why = why, .detail = detail};
  return apx_fusion_record(c->g, &r) ? oom(c) : 0;
}

int fz_reject(FzCtx *c, const FzFusion *f, ApxOp fused_op, ApxFusionWhy why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = vreject(c, f, fused_op, why, fmt, ap);
  va_end(ap);
  return rc;
}

static int reject(FzCtx *c, const FzFusion *f, ApxFusionWhy why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int reject(FzCtx *c, const FzFusion *f, ApxFusionWhy why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = vreject(c, f, f->op, why, fmt, ap);
  va_end(ap);
  return rc;
}

/* ---- fz_apply ----------------------------------------------------------------------- */

enum { M_R = 1, M_B = 2 };

typedef struct Work {
  int *B, nB;            /* backward region */
  int *exits, nexit;     /* exit values */
  int *exit_slot;        /* F input slot of each exit */
  int *vmark;            /* [n_vals] stamps for value sets */
  int vstamp;
} Work;

static int mark_of(const FzCtx *c, int n) { return n >= 0 && n < c->mark_cap ? c->mark[n] : 0; }
static int in_R(const FzCtx *c, int n) { return mark_of(c, n) == c->stamp + M_R; }
static int in_B(const FzCtx *c, int n) { return mark_of(c, n) == c->stamp + M_B; }

static int ensure_marks(FzCtx *c) {
  int need = c->g->n_nodes + 2 * FZ_MAX_IO + 8;
  if (need > c->mark_cap) {
    int nc = need * 2;
    int *p = realloc(c->mark, (size_t)nc * sizeof *p);
    if (!p) return oom(c);
    memset(p + c->mark_cap, 0, (size_t)(nc - c->mark_cap) * sizeof *p);
    c->mark = p;
    c->mark_cap = nc;
  }
  c->stamp += 4;
  return 0;
}

/* A gradient value: produced by a backward/optimizer node that is not a Cast of a
 * non-gradient value (backward Casts of saved forward values are reads, not gradients). */
static int is_grad(const ApxGraph *g, int v) {
  for (int hops = 0; hops < 16 && v >= 0; hops++) {
    int p = g->vals[v].producer;
    if (!fz_live(g, p) || g->nodes[p].section == APX_SEC_FORWARD) return 0;
    if (g->nodes[p].op != APX_OP_Cast) return 1;
    v = g->nodes[p].in[0];
  }
  return 0;
}

static int is_output(const ApxGraph *g, int v) {
  return (g->vals[v].flags & (APX_VALF_GRAPH_OUTPUT | APX_VALF_LOSS)) != 0;
}

/* F input slot that value u (read by a node of R) stands for, -1 if none. */
static int fin_slot(const ApxGraph *g, const FzFusion *f, int u) {
  int s = fz_source(g, u);
  for (int j = 0; j < f->n_in; j++)
    if (f->in[j] >= 0 && (f->in[j] == u || f->in[j] == s)) return j;
  return -1;
}

static int same_shape(const ApxValue *a, const ApxValue *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* The F input slot exit e is a gradient contribution to (see fuse_common.h), -1. */
static int map_exit(FzCtx *c, const FzFusion *f, Work *w, int e) {
  const ApxGraph *g = c->g;
  int v = e, p = g->vals[e].producer;
  while (g->nodes[p].op == APX_OP_Cast && g->nodes[p].in[0] >= 0 &&
         in_B(c, g->vals[g->nodes[p].in[0]].producer)) {
    v = g->nodes[p].in[0];
    p = g->vals[v].producer;
  }
  int r = root_of(c, p);
  if (!in_R(c, r)) return -1;
  const ApxNode *rn = &g->nodes[r];
  uint32_t stat = apx_op_info(rn->op)->static_inputs;
  int cand_k[FZ_MAX_IO * 2], cand_j[FZ_MAX_IO * 2], nc = 0;
  for (int k = 0; k < rn->n_in && nc < FZ_MAX_IO * 2; k++) {
    int u = rn->in[k];
    if (u < 0 || (stat & (1u << k))) continue;
    int j = fin_slot(g, f, u);
    if (j < 0) continue;
    const ApxValue *fv = &g->vals[f->in[j]];
    if (!apx_dtype_is_float(fv->dtype) || fv->kind == APX_VAL_CONST) continue;
    cand_k[nc] = k, cand_j[nc] = j, nc++;
  }
  const ApxNode *pn = &g->nodes[p];
  if (pn->n_out > 1 && pn->origin == r) { /* multi-output gradient op: output k <-> input k */
    for (int s = 0; s < pn->n_out; s++)
      if (pn->out[s] == v)
        for (int i = 0; i < nc; i++)
          if (cand_k[i] == s) return cand_j[i];
    return -1;
  }
  if (nc == 1) return cand_j[0];
  if (nc == 0) return -1;
  /* values read by e's backward chain inside B */
  int vs = ++w->vstamp;
  int stack[256], ns = 0;
  stack[ns++] = p;
  int seen_guard = 0;
  while (ns > 0 && seen_guard++ < 4096) {
    const ApxNode *q = &g->nodes[stack[--ns]];
    for (int k = 0; k < q->n_in; k++) {
      int u = q->in[k];
      if (u < 0 || w->vmark[u] == vs) continue;
      w->vmark[u] = vs;
      int pu = g->vals[u].producer;
      if (in_B(c, pu) && ns < 256) stack[ns++] = pu;
    }
  }
  int pick = -1, n_pick = 0;
  for (int i = 0; i < nc; i++) {
    int u = rn->in[cand_k[i]], fj = f->in[cand_j[i]];
    if (w->vmark[u] == vs || w->vmark[fj] == vs) continue;
    if (!same_shape(&g->vals[u], &g->vals[e])) continue;
    if (pick != cand_j[i]) n_pick++;
    pick = cand_j[i];
  }
  return n_pick == 1 ? pick : -1;
}

/* Decides F's precision; returns the node whose decision F takes, -1 after a rejection. */
static int decide(FzCtx *c, const FzFusion *f, ApxDType *comp, int *rejected) {
  const ApxGraph *g = c->g;
  ApxDType t = APX_DT_UNDEFINED;
  int first = -1;
  *rejected = 0;
  for (int i = 0; i < f->n_fwd; i++) {
    int n = f->fwd[i];
    if (g->nodes[n].op == APX_OP_Cast) continue;
    ApxDType dn = g->nodes[n].compute;
    if (first < 0) {
      first = n, t = dn;
      continue;
    }
    if (f->prec == FZ_PREC_AGREE && dn != t) {
      *rejected = 1;
      return reject(c, f, APX_FUSE_NOT_DTYPE, "'%s' runs in %s, '%s' in %s (%s needs one compute type)",
                    g->nodes[first].name, fz_dt(t), g->nodes[n].name, fz_dt(dn), apx_op_name(f->op));
    }
    t = apx_dtype_widest(t, dn);
  }
  *comp = t;
  int best = -1;
  for (int i = 0; i < f->n_fwd; i++) {
    int n = f->fwd[i];
    const ApxNode *nd = &g->nodes[n];
    if (nd->op == APX_OP_Cast || nd->compute != t) continue;
    if (best < 0 || (nd->reason != APX_REASON_UNDECIDED && nd->reason < g->nodes[best].reason)) best = n;
  }
  return best;
}

/* ---- trial nodes -------------------------------------------------------------------- */

static void take_over(ApxGraph *g, int node, int slot, int v);

/* A trial node writes into trial values: values of this pass reused from candidate to
 * candidate (named "<pass>/trial<slot>", not in any live node once the candidate is decided),
 * so that a candidate that is not fused, or an output that takes over a graph value, mints
 * no name and adds no value. Each present output still advances the graph's name counter by
 * the one step apx_graph_unique_name takes (ir/ir.c), and an output kept as a new value at
 * the commit is named "<hint>_apx<that step>": every generated name in the graph, here and in
 * later passes, is the one a fresh value per trial output had given. */
static int trial_value(FzCtx *c, int slot) {
  ApxGraph *g = c->g;
  int v = c->trial_val[slot];
  if (v >= 0) {
    ApxValue *tv = &g->vals[v];
    const char *nm = tv->name;
    memset(tv, 0, sizeof *tv); /* as apx_graph_add_value leaves a value */
    tv->name = nm;
    tv->kind = APX_VAL_ACTIVATION;
    tv->dtype = APX_DT_UNDEFINED;
    tv->rank = -1;
    tv->producer = tv->onnx_index = tv->grad = tv->origin = tv->mem_alias = -1;
    tv->mem_region = APX_MEM_NONE;
    tv->mem_offset = -1;
    return v;
  }
  char name[160];
  snprintf(name, sizeof name, "%s/trial%d", c->pass, slot);
  for (int i = 1; apx_graph_find_value(g, name) >= 0; i++)
    snprintf(name, sizeof name, "%s/trial%d.%d", c->pass, slot, i);
  v = apx_graph_add_value(g, c->d, name, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL);
  c->trial_val[slot] = v;
  return v;
}

/* Output k of committed node `node` (a trial value) becomes a graph value of its own, named
 * `name`, or "<hint>_apx<reserved step>" when name is NULL (see trial_value). */
static int keep_trial_output(FzCtx *c, int node, int k, int slot, const char *hint, const char *name) {
  ApxGraph *g = c->g;
  if (!name) {
    name = apx_arena_printf(&g->arena, "%s_apx%u", hint, c->trial_gen[slot]);
    if (name && apx_graph_find_value(g, name) >= 0) name = apx_graph_unique_name(g, hint);
    if (!name) return oom(c);
  }
  int v = apx_graph_add_value(g, c->d, name, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL);
  if (v < 0) return -1;
  ApxValue *nv = &g->vals[v];
  const char *nm = nv->name;
  *nv = g->vals[g->nodes[node].out[k]]; /* what inference wrote */
  nv->name = nm;
  take_over(g, node, k, v);
  return 0;
}

/* Creates a trial node writing trial values for the present slots and infers it.
 * Returns the node id, -1 on error (d), -2 when inference rejected it (msg in why). */
static int trial_node(FzCtx *c, ApxOp op, const char *name, const void *attrs, int n_in, const int *in,
                      int n_out, const int *present, const ApxDType *preset, ApxSection sec, char *why,
                      size_t why_cap) {
  ApxGraph *g = c->g;
  int outs[FZ_MAX_IO], base = sec == APX_SEC_FORWARD ? 0 : FZ_MAX_IO;
  for (int k = 0; k < n_out; k++) {
    outs[k] = -1;
    if (!present[k]) continue;
    if ((outs[k] = trial_value(c, base + k)) < 0) return -1;
    c->trial_gen[base + k] = (unsigned)g->name_gen++;
    if (preset) g->vals[outs[k]].dtype = preset[k];
  }
  int id = apx_graph_add_node(g, c->d, op, name, n_in, in, n_out, outs);
  if (id < 0) return -1;
  if (attrs) memcpy(g->nodes[id].typed, attrs, apx_op_info(op)->attrs_size);
  g->nodes[id].section = sec;
  if (apx_node_infer(g, id, c->d)) {
    snprintf(why, why_cap, "%s", c->d->msg);
    c->d->code = 0;
    c->d->msg[0] = '\0';
    g->nodes[id].flags |= APX_NODEF_DEAD;
    for (int k = 0; k < n_out; k++)
      if (outs[k] >= 0) g->vals[outs[k]].producer = -1;
    return -2;
  }
  return id;
}

static void kill_trial(ApxGraph *g, int id) {
  if (id < 0) return;
  g->nodes[id].flags |= APX_NODEF_DEAD;
  for (int k = 0; k < g->nodes[id].n_out; k++)
    if (g->nodes[id].out[k] >= 0) g->vals[g->nodes[id].out[k]].producer = -1;
}

/* Compares trial output `got` with the value it takes over; 0 when equal, else rejects. */
static int check_takeover(FzCtx *c, const FzFusion *f, int node, int got, int want, int *bad) {
  const ApxGraph *g = c->g;
  const ApxValue *a = &g->vals[got], *b = &g->vals[want];
  char s1[128], s2[128];
  if (a->dtype != b->dtype) {
    *bad = 1;
    return reject(c, f, APX_FUSE_NOT_DTYPE, "%s would write '%s' as %s, the graph has %s",
                  apx_op_name(g->nodes[node].op), b->name, fz_dt(a->dtype), fz_dt(b->dtype));
  }
  if (!same_shape(a, b)) {
    *bad = 1;
    return reject(c, f, APX_FUSE_NOT_SHAPE, "%s would write '%s' as %s, the graph has %s",
                  apx_op_name(g->nodes[node].op), b->name, apx_value_shape_str(a, s1, sizeof s1),
                  apx_value_shape_str(b, s2, sizeof s2));
  }
  return 0;
}

static void take_over(ApxGraph *g, int node, int slot, int v) {
  int old = g->nodes[node].out[slot];
  if (old >= 0 && old != v) g->vals[old].producer = -1;
  g->nodes[node].out[slot] = v;
  g->vals[v].producer = node;
}

static ApxFusionWhy infer_why(const char *msg) {
  return strstr(msg, "dtype") ? APX_FUSE_NOT_DTYPE : strstr(msg, "shape") ? APX_FUSE_NOT_SHAPE : APX_FUSE_NOT_LEGALITY;
}

/* Removes inserted Casts (and their Cast producers) left without consumers. */
static int drop_dead_cast(FzCtx *c, int node, int *n_fwd, int *n_bwd) {
  ApxGraph *g = c->g;
  for (int hops = 0; hops < 8 && fz_live(g, node) && g->nodes[node].op == APX_OP_Cast; hops++) {
    int v = g->nodes[node].out[0];
    if (v < 0 || is_output(g, v) || fz_users(c, v, NULL, 0) > 0) return 0;
    fz_traffic_node(c, node, &c->traffic_delta, -1);
    g->nodes[node].flags |= APX_NODEF_DEAD;
    *(g->nodes[node].section == APX_SEC_FORWARD ? n_fwd : n_bwd) += 1;
    int in = g->nodes[node].in[0];
    node = in >= 0 ? g->vals[in].producer : -1;
  }
  return 0;
}

static int apply(FzCtx *c, const FzFusion *f, Work *w);

static int grow_ints(FzCtx *c, int **p, int *cap, int need, int zero) {
  if (need <= *cap) return 0;
  int nc = need + need / 2 + 16;
  int *q = realloc(*p, (size_t)nc * sizeof *q);
  if (!q) return oom(c);
  if (zero) memset(q + *cap, 0, (size_t)(nc - *cap) * sizeof *q);
  *p = q;
  *cap = nc;
  return 0;
}

int fz_apply(FzCtx *c, const FzFusion *f) {
  ApxGraph *g = c->g;
  if (ensure_marks(c) || grow_ints(c, &c->w_nodes, &c->w_nodes_cap, g->n_nodes + 1, 0)) return -1;
  int vcap = c->w_vals_cap;
  if (grow_ints(c, &c->w_vals, &vcap, g->n_vals + 1, 0) ||
      grow_ints(c, &c->w_slot, &c->w_vals_cap, g->n_vals + 1, 0) ||
      grow_ints(c, &c->w_vmark, &c->w_vmark_cap, g->n_vals + 4 * FZ_MAX_IO + 8, 1))
    return -1;
  Work w = {.B = c->w_nodes, .exits = c->w_vals, .exit_slot = c->w_slot, .vmark = c->w_vmark,
            .vstamp = c->w_vstamp};
  int rc = apply(c, f, &w);
  c->w_vstamp = w.vstamp;
  return rc;
}

static int apply(FzCtx *c, const FzFusion *f, Work *w) {
  ApxGraph *g = c->g;
  /* R */
  for (int i = 0; i < f->n_fwd; i++) {
    int n = f->fwd[i];
    if (!fz_live(g, n) || g->nodes[n].section != APX_SEC_FORWARD)
      return reject(c, f, APX_FUSE_NOT_LEGALITY, "node '%s' is not a live forward node", g->nodes[n].name);
    c->mark[n] = c->stamp + M_R;
  }
  ApxDType comp = APX_DT_UNDEFINED;
  int rejected = 0;
  int decider = decide(c, f, &comp, &rejected);
  if (rejected) return decider; /* 0, or -1 when the record could not be stored */
  if (decider < 0) return reject(c, f, APX_FUSE_NOT_LEGALITY, "no pattern node");

  /* B: backward nodes whose root is in R */
  w->nB = 0;
  for (int i = 0; i < f->n_fwd; i++) {
    int r = f->fwd[i];
    if (r < c->n0) {
      for (int k = c->bw_start[r]; k < c->bw_start[r + 1]; k++) {
        int b = c->bw_node[k];
        if (fz_live(g, b) && !in_B(c, b)) c->mark[b] = c->stamp + M_B, w->B[w->nB++] = b;
      }
    } else { /* a node created in this pass: scan */
      for (int b = 0; b < g->n_nodes; b++)
        if (fz_live(g, b) && g->nodes[b].section == APX_SEC_BACKWARD && !in_B(c, b) && root_of(c, b) == r)
          c->mark[b] = c->stamp + M_B, w->B[w->nB++] = b;
    }
  }
  /* gradient sums of the region output (and Casts of them) belong to the consumers */
  for (int again = 1; again;) {
    again = 0;
    for (int i = 0; i < w->nB; i++) {
      int b = w->B[i];
      const ApxNode *bn = &g->nodes[b];
      if (bn->op != APX_OP_Add && bn->op != APX_OP_Sum && bn->op != APX_OP_Cast) continue;
      int outside = 1;
      for (int k = 0; k < bn->n_in && outside; k++) {
        int u = bn->in[k];
        outside = u >= 0 && is_grad(g, u) && !in_B(c, g->vals[u].producer);
      }
      if (!outside) continue;
      c->mark[b] = 0;
      w->B[i--] = w->B[--w->nB];
      again = 1;
    }
  }

  /* intermediates: outputs of R that F does not take over */
  for (int i = 0; i < f->n_fwd; i++) {
    const ApxNode *rn = &g->nodes[f->fwd[i]];
    for (int k = 0; k < rn->n_out; k++) {
      int v = rn->out[k];
      if (v < 0) continue;
      int taken = 0;
      for (int o = 0; o < f->n_out; o++) taken |= f->out[o] == v;
      if (taken) continue;
      if (is_output(g, v))
        return reject(c, f, APX_FUSE_NOT_CONSUMERS, "intermediate '%s' is a graph output", g->vals[v].name);
      int us[16], nu = fz_users(c, v, us, 16);
      for (int u = 0; u < nu && u < 16; u++)
        if (!in_R(c, us[u]) && !in_B(c, us[u]))
          return reject(c, f, APX_FUSE_NOT_CONSUMERS, "intermediate '%s' is also read by '%s' (%s)",
                        g->vals[v].name, g->nodes[us[u]].name, apx_op_name(g->nodes[us[u]].op));
    }
  }

  /* incoming gradient and exits */
  int dy = -1;
  w->nexit = 0;
  if (w->nB > 0) {
    if (f->grad_op == APX_OP_INVALID)
      return reject(c, f, APX_FUSE_NOT_LEGALITY, "%s", f->grad_missing ? f->grad_missing : "no fused gradient");
    int incoming[4], n_incoming = 0;
    for (int i = 0; i < w->nB; i++) {
      const ApxNode *bn = &g->nodes[w->B[i]];
      if (bn->n_out == 0 || apx_prec_is_fixed_node(g, w->B[i]))
        return reject(c, f, APX_FUSE_NOT_BACKWARD, "backward node '%s' (%s) is not a gradient computation",
                      bn->name, apx_op_name(bn->op));
      for (int k = 0; k < bn->n_in; k++) {
        int u = bn->in[k], known = 0;
        if (u < 0 || in_B(c, g->vals[u].producer) || !is_grad(g, u)) continue;
        for (int q = 0; q < n_incoming && q < 4; q++) known |= incoming[q] == u;
        if (!known) {
          if (n_incoming < 4) incoming[n_incoming] = u;
          n_incoming++;
        }
      }
    }
    dy = n_incoming > 0 ? incoming[0] : -1;
    if (n_incoming != 1)
      return reject(c, f, APX_FUSE_NOT_BACKWARD, "the backward nodes read %d incoming gradients, expected 1",
                    n_incoming);
    int yv = f->out[0] >= 0 ? f->out[0] : -1;
    if (yv >= 0 && !same_shape(&g->vals[dy], &g->vals[yv]))
      return reject(c, f, APX_FUSE_NOT_BACKWARD, "incoming gradient '%s' does not have the shape of '%s'",
                    g->vals[dy].name, g->vals[yv].name);
    for (int i = 0; i < w->nB; i++) {
      const ApxNode *bn = &g->nodes[w->B[i]];
      for (int k = 0; k < bn->n_out; k++) {
        int v = bn->out[k];
        if (v < 0) continue;
        int us[16], nu = fz_users(c, v, us, 16), outside = is_output(g, v);
        for (int u = 0; u < nu && u < 16; u++) outside |= !in_B(c, us[u]);
        if (!outside) continue;
        int j = map_exit(c, f, w, v);
        if (j < 0)
          return reject(c, f, APX_FUSE_NOT_BACKWARD, "cannot tell which input gradient '%s' belongs to",
                        g->vals[v].name);
        int m = -1;
        for (int s = 0; s < f->grad_n_out; s++)
          if (f->grad_of[s] == j) m = s;
        if (m < 0)
          return reject(c, f, APX_FUSE_NOT_LEGALITY, "%s has no gradient for input %d '%s', which needs one",
                        apx_op_name(f->grad_op), j, g->vals[f->in[j]].name);
        w->exits[w->nexit] = v;
        w->exit_slot[w->nexit++] = j;
      }
    }
  }

  /* per gradient output: the value G writes (an exit, or the sum node's output), or a new
   * value that a kept sum node reads */
  int gout[FZ_MAX_IO], gsum[FZ_MAX_IO], gpresent[FZ_MAX_IO];
  for (int s = 0; s < f->grad_n_out; s++) {
    gout[s] = -1, gsum[s] = -1, gpresent[s] = 0;
    int j = f->grad_of[s];
    if (j < 0 || w->nB == 0) continue;
    int ne = 0, first = -1;
    for (int i = 0; i < w->nexit; i++)
      if (w->exit_slot[i] == j) ne++, first = first < 0 ? w->exits[i] : first;
    if (ne == 0) continue;
    gpresent[s] = 1;
    if (ne == 1) {
      gout[s] = first;
      continue;
    }
    int sum = -1, n_in_sum = 0;
    for (int i = 0; i < w->nexit; i++) {
      if (w->exit_slot[i] != j) continue;
      int e = w->exits[i], us[4], nu = fz_users(c, e, us, 4), outside = -1, n_out = 0;
      for (int u = 0; u < nu && u < 4; u++)
        if (!in_B(c, us[u])) outside = us[u], n_out++;
      if (is_output(g, e) || n_out != 1 || (sum >= 0 && outside != sum))
        return reject(c, f, APX_FUSE_NOT_BACKWARD, "gradient contributions to '%s' are not summed in one place",
                      g->vals[f->in[j]].name);
      sum = outside;
      for (int k = 0; k < g->nodes[sum].n_in; k++) n_in_sum += g->nodes[sum].in[k] == e;
    }
    const ApxNode *sn = &g->nodes[sum];
    if ((sn->op != APX_OP_Add && sn->op != APX_OP_Sum) || sn->section != APX_SEC_BACKWARD || n_in_sum != ne)
      return reject(c, f, APX_FUSE_NOT_BACKWARD, "gradient contributions to '%s' are summed by '%s' (%s)",
                    g->vals[f->in[j]].name, sn->name, apx_op_name(sn->op));
    gsum[s] = sum;
    gout[s] = sn->n_in == ne ? sn->out[0] : FZ_NEW;
  }

  /* trial F */
  char why[sizeof c->d->msg];
  const char *anchor = g->nodes[f->fwd[0]].name;
  const char *fname = apx_arena_printf(&g->arena, "%s/%s", anchor, apx_op_name(f->op));
  int present[FZ_MAX_IO];
  ApxDType preset[FZ_MAX_IO];
  for (int k = 0; k < f->n_out; k++) {
    present[k] = f->out[k] != FZ_ABSENT;
    preset[k] = f->mixed_out && k == 0 && f->out[k] >= 0 ? g->vals[f->out[k]].dtype : APX_DT_UNDEFINED;
  }
  int F = trial_node(c, f->op, fname, f->attrs, f->n_in, f->in, f->n_out, present, preset, APX_SEC_FORWARD,
                     why, sizeof why);
  if (F == -1) return -1;
  if (F == -2) return reject(c, f, infer_why(why), "%s: %s", apx_op_name(f->op), why);
  int bad = 0;
  for (int k = 0; k < f->n_out && !bad; k++)
    if (f->out[k] >= 0 && check_takeover(c, f, F, g->nodes[F].out[k], f->out[k], &bad)) return -1;
  if (bad) {
    kill_trial(g, F);
    return 0;
  }
  /* trial G */
  int G = -1, any_grad = 0;
  for (int s = 0; s < f->grad_n_out; s++) any_grad |= gpresent[s];
  if (w->nB > 0 && any_grad) {
    int gin[FZ_MAX_IO];
    for (int k = 0; k < f->grad_n_in; k++) {
      int x = f->grad_in[k];
      gin[k] = x == FZ_DY ? dy : x <= FZ_FOUT(0) ? g->nodes[F].out[FZ_FOUT(0) - x] : x;
    }
    const char *gname = apx_arena_printf(&g->arena, "%s/%s", anchor, apx_op_name(f->grad_op));
    ApxDType gpre[FZ_MAX_IO];
    for (int s = 0; s < f->grad_n_out; s++) {
      gpre[s] = APX_DT_UNDEFINED;
      for (int i = 0; f->mixed_out && s == 0 && gpresent[s] && i < w->nexit; i++)
        if (w->exit_slot[i] == f->grad_of[s]) gpre[s] = g->vals[w->exits[i]].dtype;
    }
    G = trial_node(c, f->grad_op, gname, f->grad_attrs, f->grad_n_in, gin, f->grad_n_out, gpresent, gpre,
                   APX_SEC_BACKWARD, why, sizeof why);
    if (G == -1) return -1;
    if (G == -2) {
      kill_trial(g, F);
      return reject(c, f, infer_why(why), "%s: %s", apx_op_name(f->grad_op), why);
    }
    for (int s = 0; s < f->grad_n_out && !bad; s++) {
      if (!gpresent[s]) continue;
      int want = gout[s];
      if (want == FZ_NEW) /* a kept sum: same dtype and shape as the contributions */
        for (int i = 0; i < w->nexit; i++)
          if (w->exit_slot[i] == f->grad_of[s]) want = w->exits[i];
      if (check_takeover(c, f, G, g->nodes[G].out[s], want, &bad)) return -1;
    }
    if (bad) {
      kill_trial(g, G);
      kill_trial(g, F);
      return 0;
    }
  } else if (w->nB > 0 && !any_grad) {
    return reject(c, f, APX_FUSE_NOT_BACKWARD, "backward nodes produce no gradient of the fused inputs");
  }

  /* ---- commit ---- */
  int n_fwd = f->n_fwd, n_bwd = w->nB;
  /* traffic: R and B go, F and G (and the sums rewired, counted out before and in after) come */
  ApxTraffic *td = &c->traffic_delta;
  for (int i = 0; i < f->n_fwd; i++) fz_traffic_node(c, f->fwd[i], td, -1);
  for (int i = 0; i < w->nB; i++) fz_traffic_node(c, w->B[i], td, -1);
  for (int s = 0; s < f->grad_n_out; s++) {
    int seen = 0;
    for (int t = 0; t < s; t++) seen |= gpresent[t] && gsum[t] == gsum[s];
    if (G >= 0 && gpresent[s] && gsum[s] >= 0 && !seen) fz_traffic_node(c, gsum[s], td, -1);
  }
  for (int k = 0; k < f->n_out; k++) {
    if (f->out[k] >= 0) {
      take_over(g, F, k, f->out[k]);
    } else if (present[k]) {
      char hint[256];
      snprintf(hint, sizeof hint, "%s/out%d", fname, k);
      if (keep_trial_output(c, F, k, k, hint, NULL)) return -1;
    }
  }
  if (G >= 0) {
    ApxNode *gn = &g->nodes[G];
    for (int k = 0; k < f->grad_n_in; k++)
      if (f->grad_in[k] <= FZ_FOUT(0)) gn->in[k] = g->nodes[F].out[FZ_FOUT(0) - f->grad_in[k]];
    gn->origin = F;
    for (int s = 0; s < f->grad_n_out; s++) {
      if (!gpresent[s]) continue;
      if (gsum[s] >= 0) {
        int sum = gsum[s], j = f->grad_of[s], nk = 0;
        ApxNode *sn = &g->nodes[sum];
        if (gout[s] != FZ_NEW) { /* nothing else in the sum: G writes its output */
          sn->flags |= APX_NODEF_DEAD;
          n_bwd++;
          take_over(g, G, s, gout[s]);
          continue;
        }
        const char *vn = apx_arena_printf(&g->arena, "grad/%s/%s", g->vals[f->in[j]].name, apx_op_name(f->grad_op));
        const char *un = vn ? apx_graph_unique_name(g, vn) : NULL;
        if (!un) return oom(c);
        if (keep_trial_output(c, G, s, FZ_MAX_IO + s, NULL, un)) return -1;
        int *nin = apx_arena_alloc(&g->arena, (size_t)(sn->n_in + 1) * sizeof(int));
        if (!nin) return oom(c);
        for (int k = 0; k < sn->n_in; k++) {
          int e = sn->in[k], mine = 0;
          for (int i = 0; i < w->nexit; i++) mine |= w->exits[i] == e && w->exit_slot[i] == j;
          if (!mine) nin[nk++] = e;
        }
        nin[nk++] = g->nodes[G].out[s];
        sn = &g->nodes[sum];
        sn->in = nin;
        sn->n_in = nk;
        if (nk == 2 && sn->op == APX_OP_Sum) sn->op = APX_OP_Add;
        if (add_extra(c, sum)) return -1;
      } else {
        take_over(g, G, s, gout[s]);
      }
    }
  }
  /* kill R and B; origins pointing into them move to F / G */
  for (int i = 0; i < f->n_fwd; i++) g->nodes[f->fwd[i]].flags |= APX_NODEF_DEAD;
  for (int i = 0; i < w->nB; i++) g->nodes[w->B[i]].flags |= APX_NODEF_DEAD;
  for (int pass = 0; pass < 2; pass++) {
    int n = pass ? w->nB : f->n_fwd;
    for (int i = 0; i < n; i++) {
      int r = pass ? w->B[i] : f->fwd[i];
      if (r >= c->n0) continue;
      for (int k = c->ch_start[r]; k < c->ch_start[r + 1]; k++) {
        int ch = c->ch_node[k];
        if (!fz_live(g, ch)) continue;
        g->nodes[ch].origin = (g->nodes[ch].section == APX_SEC_BACKWARD && G >= 0) ? G : F;
      }
    }
  }
  /* precision */
  const ApxNode *dn = &g->nodes[decider];
  ApxNode *fn = &g->nodes[F];
  fn->compute = comp;
  fn->reason = dn->reason;
  fn->reason_detail = apx_arena_printf(&g->arena, "fused: %s (decision of '%s')",
                                       dn->reason_detail ? dn->reason_detail : apx_reason_id(dn->reason), dn->name);
  fn->note = dn->note;
  for (int i = 0; i < f->n_fwd && !fn->note; i++) fn->note = g->nodes[f->fwd[i]].note;
  if (G >= 0) {
    ApxNode *gn = &g->nodes[G];
    gn->compute = comp;
    gn->reason = APX_REASON_INHERITED;
    gn->reason_detail = apx_arena_printf(&g->arena, "inherited from fused node '%s'", fname);
  }
  fz_traffic_node(c, F, td, 1);
  if (G >= 0) fz_traffic_node(c, G, td, 1);
  for (int s = 0; s < f->grad_n_out; s++) {
    int seen = 0;
    for (int t = 0; t < s; t++) seen |= gpresent[t] && gsum[t] == gsum[s];
    if (G >= 0 && gpresent[s] && gsum[s] >= 0 && !seen) fz_traffic_node(c, gsum[s], td, 1);
  }
  if (add_extra(c, F) || (G >= 0 && add_extra(c, G))) return -1;
  /* inserted Casts that fed only R or B */
  for (int pass = 0; pass < 2; pass++) {
    int n = pass ? w->nB : f->n_fwd;
    for (int i = 0; i < n; i++) {
      const ApxNode *rn = &g->nodes[pass ? w->B[i] : f->fwd[i]];
      for (int k = 0; k < rn->n_in; k++) {
        int u = rn->in[k], p = u >= 0 ? g->vals[u].producer : -1;
        if (fz_live(g, p) && apx_prec_is_inserted_cast(g, p)) drop_dead_cast(c, p, &n_fwd, &n_bwd);
      }
    }
  }
  ApxFusionRecord rec = {.pass = c->pass, .pattern = f->pattern, .fused_op = apx_op_name(f->op),
                         .nodes = node_list(g, f), .why = APX_FUSE_APPLIED, .n_fwd = n_fwd, .n_bwd = n_bwd};
  rec.fused = G >= 0 ? apx_arena_printf(&g->arena, "%s, %s", fname, g->nodes[G].name) : fname;
  if (apx_fusion_record(g, &rec)) return oom(c);
  c->changed = 1;
  return 1;
}
