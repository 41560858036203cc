/* memplan_index.c - the memory planner's ordered structure (memplan_index.h). */
#include "passes/memplan_index.h"

#include <stdlib.h>
#include <string.h>

#define NONE_OFF INT64_MAX /* "no occupied offset above" */

/* Node layouts: what a descent reads (range, children) first; priorities are computed from
 * the node id (prio_of), not stored. 72 and 48 bytes. */
struct ApxPlaceOwn {
  int64_t a, b;         /* byte range [a, b) */
  int32_t l, r;
  int32_t start, end;   /* step interval */
  /* subtree aggregates (in offset order the buffers are disjoint: first a, last b) */
  int64_t first_a, last_b;
  int64_t max_gap;      /* largest free range between two consecutive buffers inside; 0: the
                           subtree is one gapless block */
  int32_t min_start, max_start, min_end, max_end;
};

struct ApxPlaceRun {
  int64_t lo, hi;       /* merged run [lo, hi): runs of one set never touch */
  int32_t l, r;
  int64_t first_lo, last_hi, max_gap; /* subtree: first start, last end, largest gap inside */
};

struct ApxPlaceMemo { /* a set's recent answer (set_fit) */
  int64_t y, size;      /* the question: cursor and size */
  int64_t f, hi, work;  /* the answer: free range [f, hi), gaps walked for it */
  int32_t node, bound;  /* the set */
  int8_t sub, side, used;
  uint32_t ver;         /* the set's version when answered */
};

#define MEMO_SLOTS 4096 /* consecutive queries repeat: a few thousand recent answers suffice */

static uint32_t mix(uint32_t v) { /* deterministic treap priorities */
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  v *= 0x846ca68bu;
  v ^= v >> 16;
  return v;
}

static uint32_t own_prio(int32_t t) { return mix((uint32_t)t + 0x9e3779b9u); }
static uint32_t run_prio(int32_t t) { return mix((uint32_t)t * 2654435761u + 1u); }

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }
static int32_t max32(int32_t a, int32_t b) { return a > b ? a : b; }

/* ---- own sets: buffers of one step node, by offset ------------------------------------ */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void own_pull(ApxPlaceOwn *N, int32_t t) {
  ApxPlaceOwn *n = &N[t];
  n->first_a = n->a;
  n->last_b = n->b;
  n->max_gap = 0;
  if (n->l >= 0) n->max_gap = max64(N[n->l].max_gap, n->a - N[n->l].last_b);
  if (n->r >= 0) n->max_gap = max64(n->max_gap, max64(N[n->r].max_gap, N[n->r].first_a - n->b));
  n->min_start = n->max_start = n->start;
  n->min_end = n->max_end = n->end;
  if (n->l >= 0) {
    const ApxPlaceOwn *c = &N[n->l];
    n->first_a = c->first_a;
    n->min_start = min32(n->min_start, c->min_start);
    n->max_start = max32(n->max_start, c->max_start);
    n->min_end = min32(n->min_end, c->min_end);
    n->max_end = max32(n->max_end, c->max_end);
  }
  if (n->r >= 0) {
    const ApxPlaceOwn *c = &N[n->r];
    n->last_b = c->last_b;
    n->min_start = min32(n->min_start, c->min_start);
    n->max_start = max32(n->max_start, c->max_start);
    n->min_end = min32(n->min_end, c->min_end);
    n->max_end = max32(n->max_end, c->max_end);
  }
}

/* (key < k, key >= k) */
static void own_split(ApxPlaceOwn *N, int32_t t, int64_t k, int32_t *L, int32_t *R) {
  if (t < 0) {
    *L = *R = -1;
    return;
  }
  if (N[t].a < k) {
    own_split(N, N[t].r, k, &N[t].r, R);
    *L = t;
  } else {
    own_split(N, N[t].l, k, L, &N[t].l);
    *R = t;
  }
  own_pull(N, t);
}

/* Inserts node `item` (its own fields set, no children) into treap t; returns the root. */
static int32_t own_insert(ApxPlaceOwn *N, int32_t t, int32_t item) {
  if (t < 0) return item;
  if (own_prio(item) > own_prio(t)) {
    own_split(N, t, N[item].a, &N[item].l, &N[item].r);
    own_pull(N, item);
    return item;
  }
  if (N[item].a < N[t].a)
    N[t].l = own_insert(N, N[t].l, item);
  else
    N[t].r = own_insert(N, N[t].r, item);
  own_pull(N, t);
  return t;
}

/* Which of a node's buffers meet the query interval (they all contain the node's center):
 * side 0 all, 1 those with end >= bound (center left of the query), 2 start <= bound. */
static int own_one(const ApxPlaceOwn *n, const ApxPlaceSet *s) {
  return s->side == 0 || (s->side == 1 ? n->end >= s->bound : n->start <= s->bound);
}
static int own_all(const ApxPlaceOwn *n, const ApxPlaceSet *s) {
  return s->side == 0 || (s->side == 1 ? n->min_end >= s->bound : n->max_start <= s->bound);
}
static int own_any(const ApxPlaceOwn *n, const ApxPlaceSet *s) {
  return s->side == 0 || (s->side == 1 ? n->max_end >= s->bound : n->min_start <= s->bound);
}

/* y is the end of a run of counted buffers; extends it over the following buffers while
 * each starts exactly where the run ends and counts. Sets *stop when the run ends. */
static int64_t own_extend(const ApxPlaceOwn *N, int32_t t, int64_t y, const ApxPlaceSet *s,
                          int *stop) {
  while (t >= 0 && !*stop) {
    const ApxPlaceOwn *n = &N[t];
    if (n->last_b <= y) return y; /* the whole subtree lies below y */
    if (n->first_a > y) {         /* it starts above y: a gap */
      *stop = 1;
      return y;
    }
    if (n->first_a == y && n->max_gap == 0 && own_all(n, s)) return n->last_b;
    y = own_extend(N, n->l, y, s, stop);
    if (*stop) return y;
    if (n->b > y) {
      if (n->a != y || !own_one(n, s)) {
        *stop = 1;
        return y;
      }
      y = n->b;
    }
    t = n->r;
  }
  return y;
}

/* Lowest offset >= y that no counted buffer of the set covers. */
static int64_t own_next_free(const ApxPlaceOwn *N, int32_t root, int64_t y, const ApxPlaceSet *s,
                             int32_t *succ) {
  int32_t t = root, j = -1; /* j: the buffer with the largest a <= y; succ: the first above */
  *succ = -1;
  while (t >= 0) {
    if (N[t].a <= y) {
      j = t;
      t = N[t].r;
    } else {
      *succ = t;
      t = N[t].l;
    }
  }
  if (j < 0 || N[j].b <= y || !own_one(&N[j], s)) return y;
  *succ = -1; /* not the first above the end of the run */
  int stop = 0;
  return own_extend(N, root, N[j].b, s, &stop);
}

/* Lowest a > f of a counted buffer, NONE_OFF when none. */
static int64_t own_next_start(const ApxPlaceOwn *N, int32_t t, int64_t f, const ApxPlaceSet *s) {
  while (t >= 0) {
    const ApxPlaceOwn *n = &N[t];
    if (n->last_b <= f || !own_any(n, s)) return NONE_OFF;
    if (n->a > f) {
      int64_t v = own_next_start(N, n->l, f, s);
      if (v != NONE_OFF) return v;
      if (own_one(n, s)) return n->a;
    }
    t = n->r;
  }
  return NONE_OFF;
}

/* ---- sub sets: merged byte runs of a subtree ------------------------------------------ */

static void run_pull(ApxPlaceRun *R, int32_t t) {
  ApxPlaceRun *n = &R[t];
  n->first_lo = n->l >= 0 ? R[n->l].first_lo : n->lo;
  n->last_hi = n->r >= 0 ? R[n->r].last_hi : n->hi;
  n->max_gap = 0;
  if (n->l >= 0) n->max_gap = max64(R[n->l].max_gap, n->lo - R[n->l].last_hi);
  if (n->r >= 0) n->max_gap = max64(n->max_gap, max64(R[n->r].max_gap, R[n->r].first_lo - n->hi));
}

static void run_split(ApxPlaceRun *R, int32_t t, int64_t k, int32_t *L, int32_t *Rt) {
  if (t < 0) {
    *L = *Rt = -1;
    return;
  }
  if (R[t].lo < k) {
    run_split(R, R[t].r, k, &R[t].r, Rt);
    *L = t;
  } else {
    run_split(R, R[t].l, k, L, &R[t].l);
    *Rt = t;
  }
  run_pull(R, t);
}

static int32_t run_merge(ApxPlaceRun *R, int32_t a, int32_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (run_prio(a) > run_prio(b)) {
    R[a].r = run_merge(R, R[a].r, b);
    run_pull(R, a);
    return a;
  }
  R[b].l = run_merge(R, a, R[b].l);
  run_pull(R, b);
  return b;
}

static void run_release(ApxPlaceIndex *x, int32_t t) {
  while (t >= 0) {
    run_release(x, x->runs[t].l);
    int32_t r = x->runs[t].r;
    x->runs[t].l = x->free_run;
    x->free_run = t;
    t = r;
  }
}

static int32_t run_alloc(ApxPlaceIndex *x) {
  if (x->free_run >= 0) {
    int32_t t = x->free_run;
    x->free_run = x->runs[t].l;
    return t;
  }
  if (x->n_runs == x->cap_runs) {
    int32_t nc = x->cap_runs ? x->cap_runs * 2 : 1024;
    ApxPlaceRun *p = realloc(x->runs, (size_t)nc * sizeof *p);
    if (!p) return -1;
    x->runs = p;
    x->cap_runs = nc;
  }
  int32_t t = x->n_runs++;
  return t;
}

/* Adds [a, b) to the run set *root, merging the runs it touches. Without splits when [a, b)
 * lies inside a run, or reaches above the last one (most buffers go on top). Returns 1 when
 * the set changed, 0 when [a, b) was covered already, -1 when out of memory. */
static int run_insert(ApxPlaceIndex *x, int32_t *root, int64_t a, int64_t b) {
  ApxPlaceRun *R = x->runs;
  if (*root >= 0 && a >= R[*root].first_lo) {
    int32_t j = -1; /* the run with the largest lo <= a */
    for (int32_t t = *root; t >= 0;) {
      if (R[t].lo <= a) {
        j = t;
        t = R[t].r;
      } else {
        t = R[t].l;
      }
    }
    if (R[j].hi >= b) return 0; /* already covered */
    if (R[j].hi >= a && R[*root].last_hi == R[j].hi) { /* the last run grows up to b */
      for (int32_t t = *root; t >= 0; t = R[t].r) R[t].last_hi = b;
      R[j].hi = b;
      return 1;
    }
  }
  int32_t nn = run_alloc(x);
  if (nn < 0) return -1;
  R = x->runs;
  if (*root >= 0 && a > R[*root].last_hi) { /* a new last run */
    R[nn].lo = a;
    R[nn].hi = b;
    R[nn].l = R[nn].r = -1;
    run_pull(R, nn);
    *root = run_merge(R, *root, nn);
    return 1;
  }
  int32_t L, M, Rt;
  run_split(R, *root, a, &L, &Rt); /* L: lo < a */
  if (L >= 0) {                    /* the last run of L may reach a */
    int32_t t = L;
    while (R[t].r >= 0) t = R[t].r;
    if (R[t].hi >= a) {
      int32_t L1, last;
      run_split(R, L, R[t].lo, &L1, &last);
      a = R[last].lo;
      if (R[last].hi > b) b = R[last].hi;
      run_release(x, last);
      L = L1;
    }
  }
  run_split(R, Rt, b + 1, &M, &Rt); /* M: runs starting inside [a, b] */
  if (M >= 0) {
    int32_t t = M;
    while (R[t].r >= 0) t = R[t].r;
    if (R[t].hi > b) b = R[t].hi;
    run_release(x, M);
  }
  R[nn].lo = a;
  R[nn].hi = b;
  R[nn].l = R[nn].r = -1;
  run_pull(R, nn);
  *root = run_merge(R, run_merge(R, L, nn), Rt);
  return 1;
}

/* ---- fits: the lowest offset >= y with `size` free bytes above it in one set --------------- */

/* In the ordered disjoint intervals of a subtree (ApxPlaceOwn a/b or ApxPlaceRun lo/hi), the
 * end of the first interval starting at or after p whose following free range (up to the
 * next interval, `next` after the subtree, NONE_OFF: none) holds size bytes, with the start
 * of that next interval in *nx_out; -1 if none. Subtrees whose gaps are all smaller are
 * skipped whole (max_gap). */
#define GAP_AFTER(NAME, T, LO, HI)                                                            \
  static int64_t NAME(const T *N, int32_t t, int64_t p, int64_t size, int64_t next,            \
                      int64_t *nx_out) {                                                      \
    while (t >= 0) {                                                                          \
      const T *n = &N[t];                                                                     \
      int64_t first = n->first_##LO, last = n->last_##HI;                                     \
      if (last <= p) return -1; /* every interval starts below p */                           \
      if (first >= p && n->max_gap < size && next != NONE_OFF && next - last < size) return -1; \
      int64_t r = NAME(N, n->l, p, size, n->LO, nx_out);                                      \
      if (r >= 0) return r;                                                                   \
      if (n->LO >= p) {                                                                       \
        int64_t nx = n->r >= 0 ? N[n->r].first_##LO : next;                                   \
        if (nx == NONE_OFF || nx - n->HI >= size) {                                           \
          *nx_out = nx;                                                                       \
          return n->HI;                                                                       \
        }                                                                                     \
      }                                                                                       \
      t = n->r;                                                                               \
    }                                                                                         \
    return -1;                                                                                \
  }
GAP_AFTER(own_gap_after, ApxPlaceOwn, a, b)
GAP_AFTER(run_gap_after, ApxPlaceRun, lo, hi)
#undef GAP_AFTER

/* In a whole set of ordered disjoint intervals: the lowest f >= y with [f, f + size) free and
 * the start of the next interval above f in *hi (NONE_OFF: none). One descent finds the
 * intervals around y (the last starting at or below it, the first above it); only when
 * the free range there is too small does GAP_AFTER look further. */
#define FIT_FROM(NAME, T, LO, HI, GAP)                                                        \
  static int64_t NAME(const T *N, int32_t root, int64_t y, int64_t size, int64_t *hi) {        \
    int64_t pred_end = -1, succ = NONE_OFF;                                                   \
    for (int32_t t = root; t >= 0;) {                                                         \
      if (N[t].LO <= y) {                                                                     \
        pred_end = N[t].HI;                                                                   \
        t = N[t].r;                                                                           \
      } else {                                                                                \
        succ = N[t].LO;                                                                       \
        t = N[t].l;                                                                           \
      }                                                                                       \
    }                                                                                         \
    if (pred_end > y) y = pred_end;                                                           \
    if (succ == NONE_OFF || succ - y >= size) {                                               \
      *hi = succ;                                                                             \
      return y;                                                                               \
    }                                                                                         \
    return GAP(N, root, y, size, NONE_OFF, hi);                                               \
  }
FIT_FROM(own_fit_from, ApxPlaceOwn, a, b, own_gap_after)
FIT_FROM(run_fit_from, ApxPlaceRun, lo, hi, run_gap_after)
#undef FIT_FROM

/* ---- the index -------------------------------------------------------------------------- */

int apx_place_index_init(ApxPlaceIndex *x, int32_t n_steps, int32_t n_items) {
  memset(x, 0, sizeof *x);
  x->n_steps = n_steps > 0 ? n_steps : 0;
  x->n_items = n_items > 0 ? n_items : 0;
  x->root = -1;
  x->free_run = -1;
  size_t ns = (size_t)x->n_steps + 1;
  x->lo = malloc(ns * sizeof(int32_t));
  x->hi = malloc(ns * sizeof(int32_t));
  x->left = malloc(ns * sizeof(int32_t));
  x->right = malloc(ns * sizeof(int32_t));
  x->parent = malloc(ns * sizeof(int32_t));
  x->own = malloc(ns * sizeof(int32_t));
  x->sub = malloc(ns * sizeof(int32_t));
  x->stack = malloc(3 * ns * sizeof(int32_t) + 64 * sizeof(int32_t));
  x->items = malloc(((size_t)x->n_items + 1) * sizeof *x->items);
  x->cap_sets = 256; /* 4 per tree level covers any query (tree depth < 64) */
  x->sets = malloc((size_t)x->cap_sets * sizeof *x->sets);
  x->free_lo = malloc((size_t)x->cap_sets * sizeof *x->free_lo);
  x->free_hi = malloc((size_t)x->cap_sets * sizeof *x->free_hi);
  x->own_ver = calloc(ns, sizeof *x->own_ver);
  x->sub_ver = calloc(ns, sizeof *x->sub_ver);
  x->memo = malloc(MEMO_SLOTS * sizeof *x->memo);
  if (!x->own_ver || !x->sub_ver || !x->memo || !x->free_lo || !x->free_hi || !x->lo || !x->hi || !x->left || !x->right || !x->parent || !x->own || !x->sub ||
      !x->stack || !x->items || !x->sets)
    return -1;
  /* the step tree: node = center step of [lo, hi] */
  if (x->n_steps > 0) {
    int32_t *st = x->stack, sp = 0;
    st[sp++] = 0;
    st[sp++] = x->n_steps - 1;
    st[sp++] = -1;
    while (sp) {
      int32_t par = st[--sp], hi = st[--sp], lo = st[--sp];
      int32_t c = lo + (hi - lo) / 2;
      x->lo[c] = lo;
      x->hi[c] = hi;
      x->parent[c] = par;
      x->left[c] = lo <= c - 1 ? lo + (c - 1 - lo) / 2 : -1;
      x->right[c] = c + 1 <= hi ? c + 1 + (hi - c - 1) / 2 : -1;
      if (par < 0) x->root = c;
      if (lo <= c - 1) {
        st[sp++] = lo;
        st[sp++] = c - 1;
        st[sp++] = c;
      }
      if (c + 1 <= hi) {
        st[sp++] = c + 1;
        st[sp++] = hi;
        st[sp++] = c;
      }
    }
  }
  apx_place_index_clear(x);
  return 0;
}

void apx_place_index_free(ApxPlaceIndex *x) {
  free(x->lo);
  free(x->hi);
  free(x->left);
  free(x->right);
  free(x->parent);
  free(x->own);
  free(x->sub);
  free(x->stack);
  free(x->items);
  free(x->runs);
  free(x->sets);
  free(x->free_lo);
  free(x->free_hi);
  free(x->own_ver);
  free(x->sub_ver);
  free(x->memo);
  memset(x, 0, sizeof *x);
  x->root = -1;
}

void apx_place_index_clear(ApxPlaceIndex *x) {
  for (int32_t c = 0; c < x->n_steps; c++) x->own[c] = x->sub[c] = -1;
  x->n_runs = 0;
  x->free_run = -1;
  x->work = 0;
  x->top_start = x->top_end = -1;
  x->top_placed = 0;
  x->fast = 0;
  if (x->memo) memset(x->memo, 0, MEMO_SLOTS * sizeof *x->memo); /* versions go on counting */
  x->memo_hits = 0;
}

int apx_place_index_add(ApxPlaceIndex *x, int32_t item, int32_t start, int32_t end,
                        int64_t offset, int64_t size) {
  int32_t c = x->root;
  while (c >= 0 && (c < start || c > end)) c = c < start ? x->right[c] : x->left[c];
  if (c < 0) return -1; /* not inside [0, n_steps) */
  /* the buffer on top of the last answer's union (find's repeated-interval path) */
  if (x->top_start == start && x->top_end == end && x->top_at == offset && !x->top_placed) {
    x->top_at = offset + size;
    x->top_placed = 1;
  } else {
    x->top_start = x->top_end = -1;
  }
  ApxPlaceOwn *N = x->items, *n = &N[item];
  n->a = offset;
  n->b = offset + size;
  n->start = start;
  n->end = end;
  n->l = n->r = -1;
  own_pull(N, item);
  x->own[c] = own_insert(N, x->own[c], item);
  x->own_ver[c]++;
  for (int32_t p = c; p >= 0; p = x->parent[p]) {
    int changed = run_insert(x, &x->sub[p], offset, offset + size);
    if (changed < 0) return -1;
    x->sub_ver[p] += (uint32_t)changed;
  }
  return 0;
}

/* The sets that hold every placed buffer meeting [s, e] (BST range decomposition). */
static void collect_sets(ApxPlaceIndex *x, int32_t s, int32_t e) {
  x->n_sets = 0;
  int32_t *st = x->stack, sp = 0;
  if (x->root >= 0) st[sp++] = x->root;
  while (sp) {
    int32_t c = st[--sp];
    if (x->sub[c] < 0 || x->hi[c] < s || x->lo[c] > e) continue; /* nothing there */
    if (s <= x->lo[c] && x->hi[c] <= e) {
      x->sets[x->n_sets++] = (ApxPlaceSet){c, 1, 0, 0};
      continue;
    }
    if (x->own[c] >= 0) { /* its buffers, unless none of them reaches into [s, e] */
      ApxPlaceSet set = c < s ? (ApxPlaceSet){c, 0, 1, s}
                        : c > e ? (ApxPlaceSet){c, 0, 2, e}
                                : (ApxPlaceSet){c, 0, 0, 0};
      if (own_any(&x->items[x->own[c]], &set)) x->sets[x->n_sets++] = set;
    }
    if (x->left[c] >= 0 && s < c) st[sp++] = x->left[c];
    if (x->right[c] >= 0 && e > c) st[sp++] = x->right[c];
  }
}

/* ---- recent set answers (memplan_index.h) ------------------------------------------------ */

static uint32_t set_ver(const ApxPlaceIndex *x, const ApxPlaceSet *s) {
  return s->sub ? x->sub_ver[s->node] : x->own_ver[s->node];
}

static ApxPlaceMemo *memo_slot(ApxPlaceIndex *x, const ApxPlaceSet *s, int64_t y, int64_t size) {
  uint64_t h = (uint64_t)(uint32_t)s->node * 0x9E3779B97F4A7C15ull;
  h ^= ((uint64_t)s->sub << 1 | (uint64_t)(uint8_t)s->side << 2) + (uint64_t)(uint32_t)s->bound * 0xC2B2AE3D27D4EB4Full;
  h ^= (uint64_t)y * 0x165667B19E3779F9ull;
  h ^= (uint64_t)size * 0x27D4EB2F165667C5ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return &x->memo[h & (MEMO_SLOTS - 1)];
}

static int memo_matches(const ApxPlaceMemo *m, const ApxPlaceSet *s, int64_t y, int64_t size,
                        uint32_t ver) {
  return m->used && m->y == y && m->size == size && m->node == s->node && m->bound == s->bound &&
         m->sub == s->sub && m->side == s->side && m->ver == ver;
}

static int set_fit_root(ApxPlaceIndex *x, int32_t i, int64_t y, int64_t size, int64_t *f);
static int64_t set_fit_walk(ApxPlaceIndex *x, int32_t i, int64_t y, int64_t size);

/* set_fit_walk's answer: O(1) from the set's root when it can be (no work counted, nothing
 * to remember), else from the table when the set has not changed since it was asked the same
 * (the same free range and the same work counted), else walked */
static int64_t set_fit(ApxPlaceIndex *x, int32_t i, int64_t y, int64_t size) {
  if (x->free_lo[i] <= y && y < x->free_hi[i] && x->free_hi[i] - y >= size) return y;
  int64_t at;
  if (set_fit_root(x, i, y, size, &at)) return at;
  const ApxPlaceSet *s = &x->sets[i];
  uint32_t ver = set_ver(x, s);
  ApxPlaceMemo *m = memo_slot(x, s, y, size);
  if (memo_matches(m, s, y, size, ver)) {
    x->free_lo[i] = m->f;
    x->free_hi[i] = m->hi;
    x->work += m->work;
    x->memo_hits++;
    return m->f;
  }
  int64_t work0 = x->work, f = set_fit_walk(x, i, y, size);
  *m = (ApxPlaceMemo){y, size, f, x->free_hi[i], x->work - work0, s->node, s->bound, s->sub, s->side, 1, ver};
  return f;
}

/* O(1) from the treap root (1, *f the answer, free_lo/free_hi[i] set), or 0: above the set's
 * last byte everything is free; a set whose every buffer counts and that has no gap inside is
 * [first, last). */
static int set_fit_root(ApxPlaceIndex *x, int32_t i, int64_t y, int64_t size, int64_t *f) {
  const ApxPlaceSet *s = &x->sets[i];
  int64_t first, last;
  int whole;
  if (s->sub) {
    const ApxPlaceRun *r = &x->runs[x->sub[s->node]];
    first = r->first_lo, last = r->last_hi, whole = r->max_gap == 0;
  } else {
    const ApxPlaceOwn *r = &x->items[x->own[s->node]];
    first = r->first_a, last = r->last_b, whole = r->max_gap == 0 && own_all(r, s);
  }
  if (y >= last || (whole && y + size > first)) {
    if (y < last) y = last;
    x->free_lo[i] = y;
    x->free_hi[i] = NONE_OFF;
    *f = y;
    return 1;
  }
  if (whole) { /* y + size <= first */
    x->free_lo[i] = y;
    x->free_hi[i] = first;
    *f = y;
    return 1;
  }
  return 0;
}

/* The rest of set_fit (set_fit_root did not answer): the lowest f >= y such that
 * [f, f + size) is free in set i, with the free range [f, hi) it starts (hi: the set's next
 * occupied offset) kept in free_lo/free_hi[i]: the cursor only moves up, so the set is asked
 * again only once the cursor leaves that range. Sub sets and own sets whose every buffer
 * counts skip gaps that are too small through max_gap; own sets that count only the buffers
 * reaching into the query interval step from gap to gap. */
static int64_t set_fit_walk(ApxPlaceIndex *x, int32_t i, int64_t y, int64_t size) {
  const ApxPlaceSet *s = &x->sets[i];
  if (s->sub || s->side == 0) { /* every buffer counts */
    y = s->sub ? run_fit_from(x->runs, x->sub[s->node], y, size, &x->free_hi[i])
               : own_fit_from(x->items, x->own[s->node], y, size, &x->free_hi[i]);
    x->free_lo[i] = y;
    return y;
  }
  const ApxPlaceOwn *N = x->items; /* own buffers of which only some count: gap by gap */
  int32_t root = x->own[s->node];
  for (;; x->work++) {
    int32_t succ;
    int64_t f = own_next_free(N, root, y, s, &succ);
    /* the next counted start: the first buffer above f when it counts, else a walk */
    int64_t a = succ >= 0 && own_one(&N[succ], s) ? N[succ].a : own_next_start(N, root, f, s);
    if (a - f >= size || a == NONE_OFF) {
      x->free_lo[i] = f;
      x->free_hi[i] = a;
      return f;
    }
    y = a;
  }
}

/* The walk over the gaps of the union of the sets (the file comment); *top: 1 when the answer
 * is the top (no gap held size bytes). */
static int64_t find_in_sets(ApxPlaceIndex *x, int32_t start, int32_t end, int64_t size, ApxFit fit,
                            int *top) {
  *top = 1;
  collect_sets(x, start, end);
  int32_t k = x->n_sets;
  if (k == 0) return 0;
  for (int32_t i = 0; i < k; i++) x->free_lo[i] = x->free_hi[i] = -1; /* nothing known yet */
  int64_t cur = 0, best = -1, best_gap = INT64_MAX;
  for (;;) {
    /* f: the lowest offset >= cur with size bytes free above it in every set (each set jumps
     * to its own next fit, round robin until k sets agree); gaps of the union that are too
     * small are never visited one by one. f starts a gap of the union: cur is 0 or the end of
     * the previous gap, so the byte below f is taken or f == cur. */
    int64_t f = cur;
    for (int32_t i = 0, agree = 0; agree < k; i = i + 1 == k ? 0 : i + 1) {
      int64_t y = set_fit(x, i, f, size);
      if (y != f) {
        f = y;
        agree = 1;
      } else {
        agree++;
      }
    }
    int64_t a = NONE_OFF; /* the gap [f, a), at least size bytes: every set is free over */
    for (int32_t i = 0; i < k; i++) /* [f, free_hi) */
      if (x->free_hi[i] < a) a = x->free_hi[i];
    if (a == NONE_OFF) { /* free above f in every set: the top */
      *top = best < 0;
      return best >= 0 ? best : f;
    }
    int64_t gap = a - f;
    x->work++;
    if (gap < best_gap) {
      best = f;
      best_gap = gap;
      if (fit == APX_FIT_FIRST || gap == size) { /* nothing later beats it */
        *top = 0;
        return best;
      }
    }
    cur = a;
  }
}

int64_t apx_place_index_find(ApxPlaceIndex *x, int32_t start, int32_t end, int64_t size, ApxFit fit) {
  int64_t at;
  int top = 1;
  if (x->top_placed && x->top_start == start && x->top_end == end && size >= x->top_size) {
    at = x->top_at; /* the same interval on top of the last answer: no new gap */
    x->fast++;
  } else {
    at = find_in_sets(x, start, end, size, fit, &top);
  }
  x->top_placed = 0;
  if (top) {
    x->top_start = start;
    x->top_end = end;
    x->top_at = at;
    x->top_size = size;
  } else {
    x->top_start = x->top_end = -1;
  }
  return at;
}
