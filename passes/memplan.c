/* memplan.c - liveness over the schedule, aliasing, arena packing (memplan.h). */
#include "passes/memplan.h"

#include "passes/memplan_index.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  ApxPlaceIndex ix;  /* the placed classes with size > 0 (memplan_index.h) */
  int oom;           /* the index ran out of memory */
  int64_t budget;    /* gaps one placement order may walk (ix.work), -1: unbounded */
  int over_budget;   /* the current order went past it (or past beat): abandoned */
  int64_t top;       /* the current order's arena so far: highest offset + size placed */
  int64_t beat;      /* the smallest arena of the orders before, -1: none yet */
} Plan;

/* Placement orders after the first are abandoned once they walk more than 4 gaps per class
 * on graphs of 4096 classes or more: a deterministic bound (counted, not timed) that keeps
 * every order near-linear. Below that size every order runs in full, so plans are the same
 * as the scan-based planner's; above it the first order (greedy by size) always completes. */
#define BUDGET_MIN_CLASSES 4096
#define BUDGET_GAPS_PER_CLASS 4
/* On graphs that size, an arena within lower / CLOSE_DIV of the lower bound ends the search
 * (memplan.h). Measured: chain-100k at -O0, greedy by size 448 bytes above the bound of 36 MB;
 * greedy by breadth then walked its whole budget and first fit reached the bound, 0.6 s
 * for 0.001% of the arena. Smaller graphs search as before, so their plans do not change. */
#define CLOSE_DIV 1024

int apx_memplan_close_enough(int32_t n_classes, int64_t arena, int64_t lower) {
  if (arena <= lower) return 1;
  return n_classes >= BUDGET_MIN_CLASSES && arena - lower <= lower / CLOSE_DIV;
}

static int64_t align_up(int64_t x) { return (x + APX_MEMPLAN_ALIGN - 1) & ~(int64_t)(APX_MEMPLAN_ALIGN - 1); }

/* In-place and view rules (ops.def flags, attrs.h contracts): pair i of node n says
 * output out_slot may take input in_slot's bytes; view = the output is a SHAPEONLY view
 * (allowed even when the input lives on). */
static int inplace_pairs(const ApxNode *n) {
  uint32_t fl = apx_op_info(n->op)->flags;
  if (n->op == APX_OP_UnscaleCheck) /* (scale, g_0..g_{k-1}) -> (inf, first, norm, u_0..) */
    return n->n_in - 1 < n->n_out - 3 ? n->n_in - 1 : n->n_out - 3;
  if (n->op == APX_OP_Allreduce) /* (g_0..g_{k-1}) -> (r_0..r_{k-1}), reduced in place */
    return n->n_in < n->n_out ? n->n_in : n->n_out;
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
  if (n->op == APX_OP_Allreduce) {
    *in_slot = i;
    *out_slot = i;
    *view = 0;
    return;
  }
  *in_slot = 0;
  *out_slot = 0;
  *view = (apx_op_info(n->op)->flags & APX_OPF_SHAPEONLY) != 0;
}

/* For multi-tensor in-place (UnscaleCheck, Allreduce): the input's class must not feed another slot of
 * the same node, which would then read overwritten bytes. Elementwise INPLACE ops read
 * element i of every input before writing element i, so for them this never matters.
 * uses[r]: how many input slots of the node read class r (counted once per node). */
static int in_used_elsewhere(const ApxNode *n, int r, const int32_t *uses) {
  if (!(apx_op_info(n->op)->flags & APX_OPF_MULTITENSOR)) return 0;
  return uses[r] > 1;
}

static int is_persistent_kind(ApxValueKind k) {
  return k == APX_VAL_PARAM || k == APX_VAL_CONST || k == APX_VAL_STATE;
}

/* The class owning v's bytes: root[] follows mem_alias (kept in step as aliases are made). */
static int root_of(const int32_t *root, int v) { return root[v]; }

typedef ApxFit Fit;
#define FIT_BEST APX_FIT_BEST
#define FIT_FIRST APX_FIT_FIRST

/* Gives class i its offset among the placed classes whose intervals overlap its own: the
 * smallest gap that holds it (best fit) or the lowest (first fit); above them all when no
 * gap does (memplan_index.h: the same answer as a walk over every placed class in offset
 * order, in O(log) per gap). */
static void place(Plan *pl, int32_t i, Fit fit) {
  Class *c = &pl->cls[i];
  if (c->size == 0) {
    c->offset = 0;
    return;
  }
  c->offset = apx_place_index_find(&pl->ix, c->start, c->end, c->size, fit);
  if (apx_place_index_add(&pl->ix, i, c->start, c->end, c->offset, c->size)) pl->oom = 1;
  if (pl->budget >= 0 && pl->ix.work > pl->budget) pl->over_budget = 1;
  /* the top only grows and an order is kept only when it ends below beat: one that
   * reaches beat cannot win, so it stops here (the plan is the same, sooner) */
  if (c->offset + c->size > pl->top) pl->top = c->offset + c->size;
  if (pl->beat >= 0 && pl->top >= pl->beat) pl->over_budget = 1;
}

static void unplace_all(Plan *pl) {
  for (int32_t i = 0; i < pl->n; i++) pl->cls[i].offset = -1;
  apx_place_index_clear(&pl->ix);
  pl->over_budget = 0;
  pl->top = 0;
}

static int64_t arena_size(const Plan *pl) {
  int64_t top = 0;
  for (int32_t i = 0; i < pl->n; i++)
    if (pl->cls[i].offset + pl->cls[i].size > top) top = pl->cls[i].offset + pl->cls[i].size;
  return top;
}

/* Placement orders: classes sorted by a two-level key, larger first. */
typedef struct Key {
  double a, b;
} Key;

static const Key *g_sort_key; /* qsort context (the pass is single-threaded) */

static int by_key_desc(const void *x, const void *y) {
  int32_t i = *(const int32_t *)x, j = *(const int32_t *)y;
  const Key *p = &g_sort_key[i], *q = &g_sort_key[j];
  if (p->a != q->a) return p->a > q->a ? -1 : 1;
  if (p->b != q->b) return p->b > q->b ? -1 : 1;
  return (i > j) - (i < j);
}

/* A key's bits as an unsigned number that orders as the key does, reversed (ascending bits:
 * descending keys); -0.0 as 0.0, which by_key_desc does not tell apart. */
static uint64_t desc_bits(double x) {
  x += 0.0;
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  u = (u >> 63) ? ~u : (u | (uint64_t)1 << 63);
  return ~u;
}

enum { DIGIT_BITS = 11, DIGITS = (64 + DIGIT_BITS - 1) / DIGIT_BITS, BUCKETS = 1 << DIGIT_BITS };

/* Stable sort of the pairs (k[i], v[i]) by k, least significant digit first (a digit that is
 * the same in every key costs no pass); bk, bv: room for m more. The result ends in k, v. */
static void radix_pairs(uint64_t *k, int32_t *v, uint64_t *bk, int32_t *bv, int32_t m,
                        uint32_t (*count)[BUCKETS]) {
  memset(count, 0, DIGITS * sizeof *count);
  for (int32_t i = 0; i < m; i++)
    for (int d = 0; d < DIGITS; d++) count[d][(k[i] >> (d * DIGIT_BITS)) & (BUCKETS - 1)]++;
  uint64_t *ka = k, *kb = bk;
  int32_t *va = v, *vb = bv;
  for (int d = 0; d < DIGITS; d++) {
    uint32_t *c = count[d];
    if (c[(ka[0] >> (d * DIGIT_BITS)) & (BUCKETS - 1)] == (uint32_t)m) continue;
    uint32_t sum = 0;
    for (int b = 0; b < BUCKETS; b++) {
      uint32_t n = c[b];
      c[b] = sum;
      sum += n;
    }
    for (int32_t i = 0; i < m; i++) {
      uint32_t at = c[(ka[i] >> (d * DIGIT_BITS)) & (BUCKETS - 1)]++;
      kb[at] = ka[i];
      vb[at] = va[i];
    }
    uint64_t *tk = ka;
    ka = kb, kb = tk;
    int32_t *tv = va;
    va = vb, vb = tv;
  }
  if (ka != k) {
    memcpy(k, ka, (size_t)m * sizeof *k);
    memcpy(v, va, (size_t)m * sizeof *v);
  }
}

/* idx[0..m) = the classes 0..m-1 in by_key_desc's order (a, then b, descending; ties by
 * class), by two stable radix sorts (b, then a) instead of qsort's n log n comparisons
 * through a function pointer (~9% of the packing on the 100k-node chain). 0, or -1 when
 * out of memory (idx then holds 0..m-1). */
static int order_by_key(int32_t *idx, int32_t m, const Key *key) {
  for (int32_t i = 0; i < m; i++) idx[i] = i;
  if (m < 2) return 0;
  uint64_t *k = malloc((size_t)m * 2 * sizeof *k);
  int32_t *bv = malloc((size_t)m * sizeof *bv);
  uint32_t(*count)[BUCKETS] = malloc(DIGITS * sizeof *count);
  int rc = -1;
  if (k && bv && count) {
    for (int pass = 0; pass < 2; pass++) {
      for (int32_t i = 0; i < m; i++) k[i] = desc_bits(pass == 0 ? key[idx[i]].b : key[idx[i]].a);
      radix_pairs(k, idx, k + m, bv, m, count);
    }
    rc = 0;
  }
  free(k);
  free(bv);
  free(count);
  return rc;
}

/* Places every class (all unassigned) in key order. */
static void place_all(Plan *pl, int32_t *idx, const Key *key, Fit fit) {
  unplace_all(pl);
  if (order_by_key(idx, pl->n, key)) { /* out of memory: the same order by qsort */
    g_sort_key = key;
    qsort(idx, (size_t)pl->n, sizeof *idx, by_key_desc);
  }
  for (int32_t i = 0; i < pl->n && !pl->over_budget; i++) place(pl, idx[i], fit);
}

static const int64_t *g_sort_live;

static int by_live_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (g_sort_live[x] != g_sort_live[y]) return g_sort_live[x] > g_sort_live[y] ? -1 : 1;
  return (x > y) - (x < y);
}

static const int32_t *g_sort_turn;

static int by_turn_then_key(const void *x, const void *y) {
  int32_t i = *(const int32_t *)x, j = *(const int32_t *)y;
  if (g_sort_turn[i] != g_sort_turn[j]) return g_sort_turn[i] < g_sort_turn[j] ? -1 : 1;
  return by_key_desc(x, y);
}

/* TFLite's GreedyByBreadth: steps with the most live bytes first; at each, its unassigned
 * classes in key order (largest first), each at the best-fitting gap. A class is placed at
 * the first step in that order that it is live at (its "turn": the minimum step rank over
 * its interval, a range-minimum over a segment tree), so one sort by (turn, key) gives
 * the whole order. work: 2 * n_steps + n ints. */
static void greedy_by_breadth(Plan *pl, int32_t n_steps, const int64_t *live, int32_t *idx,
                              int32_t *steps, int32_t *work, const Key *key) {
  unplace_all(pl);
  for (int32_t t = 0; t < n_steps; t++) steps[t] = t;
  g_sort_live = live;
  qsort(steps, (size_t)n_steps, sizeof *steps, by_live_desc);
  int32_t *tree = work, *turn = work + 2 * (size_t)n_steps; /* tree[n + t]: rank of step t */
  for (int32_t r = 0; r < n_steps; r++) tree[n_steps + steps[r]] = r;
  for (int32_t k = n_steps - 1; k >= 1; k--)
    tree[k] = tree[2 * k] < tree[2 * k + 1] ? tree[2 * k] : tree[2 * k + 1];
  for (int32_t i = 0; i < pl->n; i++) {
    int32_t best = INT32_MAX;
    for (int32_t lo = pl->cls[i].start + n_steps, hi = pl->cls[i].end + n_steps + 1; lo < hi;
         lo >>= 1, hi >>= 1) {
      if (lo & 1) best = tree[lo] < best ? tree[lo] : best, lo++;
      if (hi & 1) --hi, best = tree[hi] < best ? tree[hi] : best;
    }
    turn[i] = best; /* INT32_MAX: live at no step (none expected): placed last */
    idx[i] = i;
  }
  g_sort_key = key;
  g_sort_turn = turn;
  qsort(idx, (size_t)pl->n, sizeof *idx, by_turn_then_key);
  for (int32_t i = 0; i < pl->n && !pl->over_budget; i++) place(pl, idx[i], FIT_BEST);
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Runs every placement heuristic and keeps the smallest arena in best_off (stops early at
 * the lower bound, or close to it on big graphs: apx_memplan_close_enough):
 *   greedy by size (TFLite GreedyBySize), best and first fit; by size x lifetime; by
 *   start step; greedy by breadth (TFLite GreedyByBreadth); then randomized size orders
 *   (each size scaled by a factor in [e^-0.5, e^0.5]), as many as the graph size allows.
 * Deterministic: the random orders come from a fixed seed. Returns the arena size. */
static int64_t pack_arena(Plan *pl, int32_t n_steps, const int64_t *live, int64_t lower,
                          int32_t *idx, int32_t *steps, int32_t *work, Key *key, int64_t *best_off) {
  int64_t best = -1;
#define KEEP()                                                              \
  do {                                                                      \
    int64_t sz_ = pl->over_budget ? -1 : arena_size(pl);                    \
    if (sz_ >= 0 && (best < 0 || sz_ < best)) {                             \
      best = pl->beat = sz_;                                                \
      for (int32_t i_ = 0; i_ < pl->n; i_++) best_off[i_] = pl->cls[i_].offset; \
    }                                                                       \
    if (apx_memplan_close_enough(pl->n, best, lower)) return best;          \
  } while (0)
  for (int32_t i = 0; i < pl->n; i++) key[i] = (Key){(double)pl->cls[i].size, pl->cls[i].end - pl->cls[i].start};
  pl->budget = -1; /* the first order always completes */
  place_all(pl, idx, key, FIT_BEST);
  KEEP();
  if (pl->n >= BUDGET_MIN_CLASSES) pl->budget = (int64_t)BUDGET_GAPS_PER_CLASS * pl->n;
  greedy_by_breadth(pl, n_steps, live, idx, steps, work, key);
  KEEP();
  place_all(pl, idx, key, FIT_FIRST);
  KEEP();
  for (int32_t i = 0; i < pl->n; i++)
    key[i] = (Key){(double)pl->cls[i].size * (pl->cls[i].end - pl->cls[i].start + 1), (double)pl->cls[i].size};
  place_all(pl, idx, key, FIT_BEST);
  KEEP();
  for (int32_t i = 0; i < pl->n; i++) key[i] = (Key){-(double)pl->cls[i].start, (double)pl->cls[i].size};
  place_all(pl, idx, key, FIT_BEST);
  KEEP();
  /* the trial count is the one the quadratic planner could afford (each trial cost about
   * n^2 of its steps; total near 2e8): kept so that plans stay the same */
  double n2 = (double)pl->n * (double)pl->n + 1.0;
  int trials = (int)(2e8 / n2);
  if (trials > 64) trials = 64;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < trials; t++) {
    for (int32_t i = 0; i < pl->n; i++) {
      double u = (double)(xorshift(&rng) >> 11) / 9007199254740992.0; /* [0, 1) */
      key[i] = (Key){(double)pl->cls[i].size * exp(u - 0.5), pl->cls[i].end - pl->cls[i].start};
    }
    place_all(pl, idx, key, t % 2 ? FIT_FIRST : FIT_BEST);
    KEEP();
  }
#undef KEEP
  return best;
}

/* One planning run's arrays. pass_memplan fills them through the classes (steps 1-3), the
 * packing may then run on a thread of its own (ApxOptions.memplan_background) and
 * memplan_finish gives the arena values their offsets. */
typedef struct Run {
  Plan pl;
  int32_t n_steps;
  int64_t peak;
  int32_t *def, *last, *idx, *steps, *work, *root;
  int32_t *arena_alias, n_arena_alias; /* values that alias an arena class (step 4a), in
                                          last's memory (unused once the classes are made) */
  int64_t *live, *best_off, *bytes;
  Key *key;
  int64_t best; /* the packed arena's size */
  /* background packing */
  pthread_t thread;
  int started;
  atomic_int packed; /* set by the packing thread when it is done */
  double wall_s, cpu_s; /* the packing's own time (--time-passes) */
} Run;

static void run_free(Run *r) {
  free(r->def);
  free(r->last);
  free(r->pl.cls);
  free(r->live);
  free(r->idx);
  free(r->steps);
  free(r->work);
  free(r->root);
  apx_place_index_free(&r->pl.ix);
  free(r->best_off);
  free(r->key);
  free(r->bytes);
}

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Step 3b: the packing. Reads and writes the run only, never the graph. */
static void run_pack(Run *r) {
  double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  r->best = r->pl.n ? pack_arena(&r->pl, r->n_steps, r->live, r->peak, r->idx, r->steps, r->work,
                                 r->key, r->best_off)
                    : 0;
  r->wall_s = clock_s(CLOCK_MONOTONIC) - t0;
  r->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
}

static void *pack_main(void *arg) {
  Run *r = arg;
  run_pack(r);
  atomic_store_explicit(&r->packed, 1, memory_order_release);
  return NULL;
}

static int memplan_ready(void *arg) {
  Run *r = arg;
  return atomic_load_explicit(&r->packed, memory_order_acquire);
}

/* Step 4: the arena classes' offsets, then their aliases'. */
static int memplan_finish(ApxGraph *g, Run *r, ApxDiag *d) {
  if (r->pl.oom) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory planning memory", g->file);
  for (int32_t i = 0; i < r->pl.n; i++) g->vals[r->pl.cls[i].root].mem_offset = r->best_off[i];
  /* the aliases step 4a listed, not a sweep over every value: this runs after the packing,
   * when building the plan waits for it */
  for (int32_t i = 0; i < r->n_arena_alias; i++) {
    int v = r->arena_alias[i];
    g->vals[v].mem_offset = g->vals[root_of(r->root, v)].mem_offset;
  }
  g->arena_bytes = r->best > 0 ? r->best : 0;
  return 0;
}

/* apx_graph_settle for a packing left running: joins it and finishes the plan. */
static int memplan_settle(ApxGraph *g, void *arg, ApxDiag *d) {
  Run *r = arg;
  if (r->started) pthread_join(r->thread, NULL);
  g->background_s = r->wall_s;
  g->background_cpu_s = r->cpu_s;
  int rc = memplan_finish(g, r, d);
  run_free(r);
  free(r);
  return rc;
}

int pass_memplan(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  /* a plan of this graph still being packed (the pass run again) is finished first */
  if (apx_graph_settle(g, d)) return -1;
  int nv = g->n_vals;
  Run *r = calloc(1, sizeof *r);
  if (!r) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory planning memory", g->file);
  atomic_init(&r->packed, 0);
  int32_t n_steps = r->n_steps = g->n_order + 1; /* step n_order: after the run (outputs are read) */
  int32_t *def = r->def = malloc(((size_t)nv + 1) * sizeof *def);
  int32_t *last = r->last = malloc(((size_t)nv + 1) * sizeof *last);
  r->pl = (Plan){calloc((size_t)nv + 1, sizeof(Class)), 0, {0}, 0, -1, 0, 0, -1};
  Plan *pl = &r->pl;
  int64_t *live = r->live = calloc((size_t)n_steps + 1, sizeof *live);
  int32_t *idx = r->idx = malloc(((size_t)nv + (size_t)n_steps + 1) * sizeof *idx);
  int32_t *steps = r->steps = malloc(((size_t)n_steps + 1) * sizeof *steps);
  int32_t *work = r->work = malloc((2 * (size_t)n_steps + (size_t)nv + 1) * sizeof *work);
  int32_t *root = r->root = malloc(((size_t)nv + 1) * sizeof *root);
  int64_t *best_off = r->best_off = malloc(((size_t)nv + 1) * sizeof *best_off);
  Key *key = r->key = malloc(((size_t)nv + 1) * sizeof *key);
  int64_t *bytes = r->bytes = malloc(((size_t)nv + 1) * sizeof *bytes); /* [v] of runtime values */
  int rc = 0;
  if (!def || !last || !pl->cls || !live || !idx || !steps || !work || !root || !best_off || !key ||
      !bytes) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory planning memory", g->file);
    goto out;
  }
  /* 1. which values are runtime tensors, where they are defined and last used */
  for (int v = 0; v < nv; v++) {
    def[v] = NOT_RUNTIME;
    last[v] = NOT_RUNTIME;
    root[v] = v;
  }
#define USE(v, t)                                        \
  do {                                                   \
    if (def[v] == NOT_RUNTIME) def[v] = -1;              \
    if ((t) > last[v]) last[v] = (t);                    \
  } while (0)
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    for (int k = 0; k < n->n_in; k++)
      if (apx_node_input_is_runtime(n, k) && n->in[k] < nv) USE(n->in[k], t);
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || v >= nv) continue;
      def[v] = t;
      if (t > last[v]) last[v] = t;
    }
    /* the trainer reads every loss (LossScaleSeed input 0) and every UnscaleCheck's
     * found_inf, first_bad and norm_sq after the step (several losses: one check per loss,
     * train.h) */
    if (n->op == APX_OP_LossScaleSeed && n->n_in > 0 && n->in[0] >= 0 && n->in[0] < nv)
      USE(n->in[0], n_steps - 1);
    for (int k = 0; n->op == APX_OP_UnscaleCheck && k < 3 && k < n->n_out; k++)
      if (n->out[k] >= 0 && n->out[k] < nv) USE(n->out[k], n_steps - 1);
  }
  /* data inputs stay valid for the whole run and between runs: set once, run many */
  for (int i = 0; i < g->n_inputs; i++) USE(g->inputs[i], n_steps - 1);
  for (int i = 0; i < g->n_outputs; i++) USE(g->outputs[i], n_steps - 1);
  if (g->loss >= 0) USE(g->loss, n_steps - 1);
#undef USE
  /* one sweep over the value records: every value's place reset, the runtime ones sized */
  for (int v = 0; v < nv; v++) {
    ApxValue *val = &g->vals[v];
    val->mem_region = APX_MEM_NONE;
    val->mem_offset = -1;
    val->mem_alias = -1;
    if (def[v] == NOT_RUNTIME) continue;
    if (val->kind == APX_VAL_INPUT || is_persistent_kind(val->kind) || def[v] < 0) def[v] = 0;
    if ((bytes[v] = apx_value_bytes(val)) < 0) {
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
  int32_t *uses = work; /* [nv] input slots of the current multi-tensor node per class */
  memset(uses, 0, (size_t)nv * sizeof *uses);
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    int pairs = inplace_pairs(n);
    int multi = pairs > 0 && (apx_op_info(n->op)->flags & APX_OPF_MULTITENSOR);
    if (multi) /* the node's inputs keep their classes while its outputs are aliased */
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && n->in[k] < nv) uses[root[n->in[k]]]++;
    for (int i = 0; i < pairs; i++) {
      int in_slot, out_slot, view;
      inplace_pair(n, i, &in_slot, &out_slot, &view);
      int in = n->in[in_slot], out = n->out[out_slot];
      if (in < 0 || out < 0 || in >= nv || out >= nv || in == out) continue;
      if (!apx_node_input_is_runtime(n, in_slot) || g->vals[out].mem_alias >= 0) continue;
      ApxValue *vi = &g->vals[in], *vo = &g->vals[out];
      if (vo->kind != APX_VAL_ACTIVATION) continue;
      if (bytes[out] != bytes[in]) continue; /* both runtime: sized in step 1 */
      int r = root_of(root, in);
      if (!view) {
        if (g->vals[r].kind != APX_VAL_ACTIVATION) continue; /* persistent or data input */
        if (vo->dtype != vi->dtype || apx_value_numel(vo) != apx_value_numel(vi)) continue;
        if (cls_end[r] != t) continue; /* class still needed later */
        if (in_used_elsewhere(n, r, uses)) continue;
      }
      vo->mem_alias = in;
      root[out] = r;
      if (last[out] > cls_end[r]) cls_end[r] = last[out];
    }
    if (multi)
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && n->in[k] < nv) uses[root[n->in[k]]] = 0;
  }

  /* 3. classes: persistent roots laid out in value order, arena roots packed; no_reuse
   * counts every non-view arena value */
  int64_t pers = 0, no_reuse = 0;
  for (int v = 0; v < nv; v++) {
    if (def[v] == NOT_RUNTIME) continue;
    ApxValue *val = &g->vals[v];
    int64_t sz = align_up(bytes[v]);
    if (val->mem_alias >= 0) {
      if (is_persistent_kind(g->vals[root_of(root, v)].kind)) continue;
      int view = val->producer >= 0 && (apx_op_info(g->nodes[val->producer].op)->flags & APX_OPF_SHAPEONLY);
      if (!view) no_reuse += sz;
      continue;
    }
    if (is_persistent_kind(val->kind)) {
      val->mem_region = APX_MEM_PERSISTENT;
      val->mem_offset = pers;
      pers += sz;
      continue;
    }
    no_reuse += sz;
    val->mem_region = APX_MEM_ARENA;
    Class *c = &pl->cls[pl->n];
    c->root = v;
    c->start = def[v];
    c->end = cls_end[v];
    if (c->end < c->start) c->end = c->start;
    c->size = sz;
    c->offset = -1;
    pl->n++;
  }
  free(bytes); /* before the index takes its memory */
  bytes = r->bytes = NULL;
  int64_t peak = 0;
  for (int32_t i = 0; i < pl->n; i++) { /* difference array over steps */
    live[pl->cls[i].start] += pl->cls[i].size;
    live[pl->cls[i].end + 1] -= pl->cls[i].size;
  }
  for (int32_t t = 0; t < n_steps; t++) {
    if (t) live[t] += live[t - 1];
    if (live[t] > peak) peak = live[t];
  }
  r->peak = peak;
  /* the index holds the arena classes only (a tenth of the values on training chains) */
  if (pl->n && apx_place_index_init(&pl->ix, n_steps, pl->n)) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory planning memory", g->file);
    goto out;
  }
  /* the packing reads and writes only the run (never the graph): on a thread it starts as
   * soon as its classes are made, and the caller goes on (the aliases below, then building
   * the plan) until apx_graph_settle */
  if (o && o->memplan_background && pl->n > 0)
    r->started = pthread_create(&r->thread, NULL, pack_main, r) == 0;
  /* 4a. aliases take their root's region now, and a persistent root's offset; arena
   * offsets come with the packing (memplan_finish), for the aliases listed here */
  int32_t *arena_alias = r->arena_alias = last; /* (a new array would grow the heap a step) */
  for (int v = 0; v < nv; v++) {
    ApxValue *val = &g->vals[v];
    if (def[v] == NOT_RUNTIME || val->mem_alias < 0) continue;
    const ApxValue *rv = &g->vals[root_of(root, v)];
    val->mem_region = rv->mem_region;
    val->mem_offset = rv->mem_region == APX_MEM_ARENA ? -1 : rv->mem_offset;
    if (rv->mem_region == APX_MEM_ARENA) arena_alias[r->n_arena_alias++] = v;
  }
  g->arena_bytes = -1;
  g->peak_live_bytes = peak;
  g->no_reuse_bytes = no_reuse;
  g->persistent_bytes = pers;
  if (r->started) {
    g->settle_fn = memplan_settle;
    g->settle_ready_fn = memplan_ready;
    g->settle_arg = r;
    return APX_PASS_UNCHANGED;
  }
  run_pack(r);
  rc = memplan_finish(g, r, d) ? -1 : APX_PASS_UNCHANGED;
out:
  run_free(r);
  free(r);
  return rc;
}
