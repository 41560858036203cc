/* memplan.c - liveness over the schedule, aliasing, arena packing (memplan.h). */
#include "passes/memplan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NOT_RUNTIME INT32_MIN

typedef struct Class {
  int root;              /* value owning the bytes */
  int32_t start, end;    /* closed interval of schedule steps */
  int64_t size;          /* aligned bytes */
  int64_t offset;        /* -1 unassigned */
} Class;

typedef struct Plan {
  Class *cls;
  int32_t n;
} Plan;

static int64_t align_up(int64_t x) { return (x + APX_MEMPLAN_ALIGN - 1) & ~(int64_t)(APX_MEMPLAN_ALIGN - 1); }

int apx_memplan_input_is_runtime(const ApxNode *n, int k) {
  if (k < 0 || k >= n->n_in || n->in[k] < 0) return 0;
  uint32_t mask = apx_op_info(n->op)->static_inputs;
  return !(k < 32 && (mask >> k) & 1u);
}

/* In-place and view rules (ops.def flags, attrs.h contracts): pair i of node n says
 * output out_slot may take input in_slot's bytes; view = the output is a SHAPEONLY view
 * (allowed even when the input lives on). */
static int inplace_pairs(const ApxNode *n) {
  uint32_t fl = apx_op_info(n->op)->flags;
  if (n->op == APX_OP_UnscaleCheck) /* (scale, g_0..g_{k-1}) -> (inf, first, norm, u_0..) */
    return n->n_in - 1 < n->n_out - 3 ? n->n_in - 1 : n->n_out - 3;
  if ((fl & (APX_OPF_SHAPEONLY | APX_OPF_INPLACE)) && n->n_in >= 1 && n->n_out >= 1) return 1;
  return 0;
}

static void inplace_pair(const ApxNode *n, int i, int *in_slot, int *out_slot, int *view) {
  if (n->op == APX_OP_UnscaleCheck) {
    *in_slot = 1 + i;
    *out_slot = 3 + i;
    *view = 0;
    return;
  }
  *in_slot = 0;
  *out_slot = 0;
  *view = (apx_op_info(n->op)->flags & APX_OPF_SHAPEONLY) != 0;
}

static int root_of(const ApxGraph *g, int v);

/* For multi-tensor in-place (UnscaleCheck): the input's class must not feed another slot of
 * the same node, which would then read overwritten bytes. Elementwise INPLACE ops read
 * element i of every input before writing element i, so for them this never matters. */
static int in_used_elsewhere(const ApxNode *n, int in_slot, int r, const ApxGraph *g) {
  if (!(apx_op_info(n->op)->flags & APX_OPF_MULTITENSOR)) return 0;
  for (int k = 0; k < n->n_in; k++)
    if (k != in_slot && n->in[k] >= 0 && root_of(g, n->in[k]) == r) return 1;
  return 0;
}

static int is_persistent_kind(ApxValueKind k) {
  return k == APX_VAL_PARAM || k == APX_VAL_CONST || k == APX_VAL_STATE;
}

static int root_of(const ApxGraph *g, int v) {
  while (g->vals[v].mem_alias >= 0) v = g->vals[v].mem_alias;
  return v;
}

static int cmp_start(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Best-fit offset for c among assigned classes whose intervals overlap c's. */
static int64_t best_fit(const Plan *pl, const Class *c, int64_t (*tmp)[2]) {
  int32_t m = 0;
  for (int32_t i = 0; i < pl->n; i++) {
    const Class *o = &pl->cls[i];
    if (o->offset < 0 || o == c || o->size == 0) continue;
    if (o->end < c->start || c->end < o->start) continue;
    tmp[m][0] = o->offset;
    tmp[m][1] = o->offset + o->size;
    m++;
  }
  qsort(tmp, (size_t)m, sizeof *tmp, cmp_start);
  int64_t cursor = 0, best = -1, best_gap = INT64_MAX;
  for (int32_t i = 0; i < m; i++) {
    if (tmp[i][0] > cursor) {
      int64_t gap = tmp[i][0] - cursor;
      if (gap >= c->size && gap < best_gap) {
        best_gap = gap;
        best = cursor;
      }
    }
    if (tmp[i][1] > cursor) cursor = tmp[i][1];
  }
  return best >= 0 ? best : cursor;
}

static int64_t arena_size(const Plan *pl) {
  int64_t top = 0;
  for (int32_t i = 0; i < pl->n; i++)
    if (pl->cls[i].offset + pl->cls[i].size > top) top = pl->cls[i].offset + pl->cls[i].size;
  return top;
}

static const Class *g_sort_cls; /* qsort context (single-threaded pass) */

static int by_size_desc(const void *a, const void *b) {
  const Class *x = &g_sort_cls[*(const int32_t *)a], *y = &g_sort_cls[*(const int32_t *)b];
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  int32_t lx = x->end - x->start, ly = y->end - y->start;
  if (lx != ly) return lx > ly ? -1 : 1;
  return (x->start > y->start) - (x->start < y->start);
}

/* TFLite's GreedyBySize: largest first, each at the best-fitting gap. */
static void greedy_by_size(Plan *pl, int32_t *idx, int64_t (*tmp)[2]) {
  for (int32_t i = 0; i < pl->n; i++) {
    idx[i] = i;
    pl->cls[i].offset = -1;
  }
  g_sort_cls = pl->cls;
  qsort(idx, (size_t)pl->n, sizeof *idx, by_size_desc);
  for (int32_t i = 0; i < pl->n; i++) {
    Class *c = &pl->cls[idx[i]];
    c->offset = c->size ? best_fit(pl, c, tmp) : 0;
  }
}

static const int64_t *g_sort_live;

static int by_live_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (g_sort_live[x] != g_sort_live[y]) return g_sort_live[x] > g_sort_live[y] ? -1 : 1;
  return (x > y) - (x < y);
}

/* TFLite's GreedyByBreadth: steps with the most live bytes first; at each, its unassigned
 * classes largest first, each at the best-fitting gap. */
static void greedy_by_breadth(Plan *pl, int32_t n_steps, const int64_t *live, int32_t *idx,
                              int32_t *steps, int64_t (*tmp)[2]) {
  for (int32_t i = 0; i < pl->n; i++) pl->cls[i].offset = -1;
  for (int32_t t = 0; t < n_steps; t++) steps[t] = t;
  g_sort_live = live;
  qsort(steps, (size_t)n_steps, sizeof *steps, by_live_desc);
  g_sort_cls = pl->cls;
  for (int32_t s = 0; s < n_steps; s++) {
    int32_t t = steps[s], m = 0;
    for (int32_t i = 0; i < pl->n; i++)
      if (pl->cls[i].offset < 0 && pl->cls[i].start <= t && t <= pl->cls[i].end) idx[m++] = i;
    qsort(idx, (size_t)m, sizeof *idx, by_size_desc);
    for (int32_t i = 0; i < m; i++) {
      Class *c = &pl->cls[idx[i]];
      c->offset = c->size ? best_fit(pl, c, tmp) : 0;
    }
  }
  for (int32_t i = 0; i < pl->n; i++) /* classes live at no step (none expected) */
    if (pl->cls[i].offset < 0) pl->cls[i].offset = pl->cls[i].size ? best_fit(pl, &pl->cls[i], tmp) : 0;
}

int pass_memplan(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  (void)o;
  int nv = g->n_vals;
  int32_t n_steps = g->n_order + 1; /* step n_order: after the run (outputs are read) */
  int32_t *def = malloc(((size_t)nv + 1) * sizeof *def);
  int32_t *last = malloc(((size_t)nv + 1) * sizeof *last);
  Plan pl = {calloc((size_t)nv + 1, sizeof(Class)), 0};
  int64_t *live = calloc((size_t)n_steps + 1, sizeof *live);
  int32_t *idx = malloc(((size_t)nv + (size_t)n_steps + 1) * sizeof *idx);
  int32_t *steps = malloc(((size_t)n_steps + 1) * sizeof *steps);
  int64_t(*tmp)[2] = malloc(((size_t)nv + 1) * sizeof *tmp);
  int64_t *best_off = malloc(((size_t)nv + 1) * sizeof *best_off);
  int rc = 0;
  if (!def || !last || !pl.cls || !live || !idx || !steps || !tmp || !best_off) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory planning memory", g->file);
    goto out;
  }

  /* 1. which values are runtime tensors, where they are defined and last used */
  for (int v = 0; v < nv; v++) {
    ApxValue *val = &g->vals[v];
    def[v] = NOT_RUNTIME;
    last[v] = NOT_RUNTIME;
    val->mem_region = APX_MEM_NONE;
    val->mem_offset = -1;
    val->mem_alias = -1;
  }
#define USE(v, t)                                        \
  do {                                                   \
    if (def[v] == NOT_RUNTIME) def[v] = -1;              \
    if ((t) > last[v]) last[v] = (t);                    \
  } while (0)
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    for (int k = 0; k < n->n_in; k++)
      if (apx_memplan_input_is_runtime(n, k) && n->in[k] < nv) USE(n->in[k], t);
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || v >= nv) continue;
      def[v] = t;
      if (t > last[v]) last[v] = t;
    }
  }
  for (int i = 0; i < g->n_inputs; i++) USE(g->inputs[i], 0);
  for (int i = 0; i < g->n_outputs; i++) USE(g->outputs[i], n_steps - 1);
  if (g->loss >= 0) USE(g->loss, n_steps - 1);
#undef USE
  for (int v = 0; v < nv; v++) {
    if (def[v] == NOT_RUNTIME) continue;
    const ApxValue *val = &g->vals[v];
    if (val->kind == APX_VAL_INPUT || is_persistent_kind(val->kind) || def[v] < 0) def[v] = 0;
    if (apx_value_bytes(val) < 0) {
      char shape[128];
      rc = apx_value_error(d, g, v, "memory plan: %s tensor of shape %s has no known size%s",
                           apx_dtype_name(val->dtype), apx_value_shape_str(val, shape, sizeof shape),
                           val->rank >= 0 ? " (bind symbolic dims with --dim NAME=V)" : "");
      goto out;
    }
  }

  /* 2. aliases, in schedule order: SHAPEONLY views and in-place outputs join their input's
   * class. cls_end[root] tracks the class's last use so far. */
  int32_t *cls_end = last; /* last[] of a root becomes its class's end */
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    int pairs = inplace_pairs(n);
    for (int i = 0; i < pairs; i++) {
      int in_slot, out_slot, view;
      inplace_pair(n, i, &in_slot, &out_slot, &view);
      int in = n->in[in_slot], out = n->out[out_slot];
      if (in < 0 || out < 0 || in >= nv || out >= nv || in == out) continue;
      if (!apx_memplan_input_is_runtime(n, in_slot) || g->vals[out].mem_alias >= 0) continue;
      ApxValue *vi = &g->vals[in], *vo = &g->vals[out];
      if (vo->kind != APX_VAL_ACTIVATION) continue;
      if (apx_value_bytes(vo) != apx_value_bytes(vi)) continue;
      int r = root_of(g, in);
      if (!view) {
        if (g->vals[r].kind != APX_VAL_ACTIVATION) continue; /* persistent or data input */
        if (vo->dtype != vi->dtype || apx_value_numel(vo) != apx_value_numel(vi)) continue;
        if (cls_end[r] != t) continue; /* class still needed later */
        if (in_used_elsewhere(n, in_slot, r, g)) continue;
      }
      vo->mem_alias = in;
      if (last[out] > cls_end[r]) cls_end[r] = last[out];
    }
  }

  /* 3. classes: persistent roots laid out in value order, arena roots packed */
  int64_t pers = 0, no_reuse = 0;
  for (int v = 0; v < nv; v++) {
    if (def[v] == NOT_RUNTIME || g->vals[v].mem_alias >= 0) continue;
    ApxValue *val = &g->vals[v];
    int64_t sz = align_up(apx_value_bytes(val));
    if (is_persistent_kind(val->kind)) {
      val->mem_region = APX_MEM_PERSISTENT;
      val->mem_offset = pers;
      pers += sz;
      continue;
    }
    val->mem_region = APX_MEM_ARENA;
    Class *c = &pl.cls[pl.n];
    c->root = v;
    c->start = def[v];
    c->end = cls_end[v];
    if (c->end < c->start) c->end = c->start;
    c->size = sz;
    c->offset = -1;
    pl.n++;
  }
  for (int v = 0; v < nv; v++) { /* count every non-view arena value for no_reuse */
    if (def[v] == NOT_RUNTIME) continue;
    int r = root_of(g, v);
    if (is_persistent_kind(g->vals[r].kind)) continue;
    int view = g->vals[v].mem_alias >= 0 && g->vals[v].producer >= 0 &&
               (apx_op_info(g->nodes[g->vals[v].producer].op)->flags & APX_OPF_SHAPEONLY);
    if (!view) no_reuse += align_up(apx_value_bytes(&g->vals[v]));
  }
  int64_t peak = 0;
  for (int32_t i = 0; i < pl.n; i++) { /* difference array over steps */
    live[pl.cls[i].start] += pl.cls[i].size;
    live[pl.cls[i].end + 1] -= pl.cls[i].size;
  }
  for (int32_t t = 0; t < n_steps; t++) {
    if (t) live[t] += live[t - 1];
    if (live[t] > peak) peak = live[t];
  }
  int64_t best = -1;
  if (pl.n) {
    greedy_by_size(&pl, idx, tmp);
    best = arena_size(&pl);
    for (int32_t i = 0; i < pl.n; i++) best_off[i] = pl.cls[i].offset;
    greedy_by_breadth(&pl, n_steps, live, idx, steps, tmp);
    if (arena_size(&pl) < best) {
      best = arena_size(&pl);
      for (int32_t i = 0; i < pl.n; i++) best_off[i] = pl.cls[i].offset;
    }
  }
  for (int32_t i = 0; i < pl.n; i++) g->vals[pl.cls[i].root].mem_offset = best_off[i];

  /* 4. aliases take their root's place */
  for (int v = 0; v < nv; v++) {
    ApxValue *val = &g->vals[v];
    if (def[v] == NOT_RUNTIME || val->mem_alias < 0) continue;
    const ApxValue *r = &g->vals[root_of(g, v)];
    val->mem_region = r->mem_region;
    val->mem_offset = r->mem_offset;
  }
  g->arena_bytes = best > 0 ? best : 0;
  g->peak_live_bytes = peak;
  g->no_reuse_bytes = no_reuse;
  g->persistent_bytes = pers;
  rc = APX_PASS_UNCHANGED;
out:
  free(def);
  free(last);
  free(pl.cls);
  free(live);
  free(idx);
  free(steps);
  free(tmp);
  free(best_off);
  return rc;
}
