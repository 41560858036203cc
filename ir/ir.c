/* ir.c - graph construction, name lookup, topological order, verifier, use lists. */
#include "ir/ir.h"

#include "ir/name_hash.h"
#include "ir/prefault.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- growable arrays ---------------------------------------------------------------- */

/* The capacity a growable array doubles to (from 64) to hold need; -1 past INT32_MAX. */
static int32_t doubled_cap(int32_t cap, int32_t need) {
  int32_t nc = cap ? cap : 64;
  while (nc < need) {
    if (nc > INT32_MAX / 2) return -1;
    nc *= 2;
  }
  return nc;
}

static int grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
  if (need <= *cap) return 0;
  int32_t nc = doubled_cap(*cap, need);
  if (nc < 0) return -1;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

/* The value and node arrays, the graph's largest, grow by doubling in mappings of their own:
 * mremap moves their pages instead of copying them. (apexc serves every malloc from its heap,
 * apexc_main.c, where realloc copied the 77 MB value array of a 100k-node training graph at
 * each doubling and faulted in every new page: 3% of that compile.) Under AddressSanitizer,
 * realloc as above, so that the arrays stay checked. */
#if defined(__SANITIZE_ADDRESS__)
#define GROW_MAPPED_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GROW_MAPPED_OFF 1
#endif
#endif

#ifndef GROW_MAPPED_OFF
static size_t mapped_bytes(int32_t cap, size_t elem) {
  static size_t page;
  if (!page) {
    long pg = sysconf(_SC_PAGESIZE);
    page = pg > 0 ? (size_t)pg : 4096;
  }
  return ((size_t)cap * elem + page - 1) / page * page;
}
#endif

#ifndef GROW_MAPPED_OFF
/* The helper thread of ir/prefault.h maps an array's pages in ahead of its growth: each time
 * the used bytes cross a PREFAULT_STEP boundary, the next 2 * PREFAULT_STEP bytes (within
 * the mapping) are hinted, so that a doubled mapping is populated as it fills, not whole. */
#define PREFAULT_STEP ((size_t)4 << 20)

static void prefault_ahead(void *arr, int32_t cap, int32_t need, size_t elem) {
  size_t end = (size_t)need * elem;
  if (need > 1 && (end - elem) / PREFAULT_STEP == end / PREFAULT_STEP) return;
  size_t lo = end / PREFAULT_STEP * PREFAULT_STEP, hi = lo + 2 * PREFAULT_STEP;
  size_t mapped = mapped_bytes(cap, elem);
  if (hi > mapped) hi = mapped;
  if (lo < hi) apx_prefault_hint((char *)arr + lo, hi - lo);
}
#endif

static int grow_mapped(void **arr, int32_t *cap, int32_t need, size_t elem) {
#ifdef GROW_MAPPED_OFF
  return grow(arr, cap, need, elem);
#else
  if (need > *cap) {
    int32_t nc = doubled_cap(*cap, need);
    if (nc < 0) return -1;
    size_t nb = mapped_bytes(nc, elem);
    void *p = *arr ? mremap(*arr, mapped_bytes(*cap, elem), nb, MREMAP_MAYMOVE)
                   : mmap(NULL, nb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    *arr = p;
    *cap = nc;
  }
  prefault_ahead(*arr, *cap, need, elem);
  return 0;
#endif
}

static void free_mapped(void *arr, int32_t cap, size_t elem) {
#ifdef GROW_MAPPED_OFF
  (void)cap;
  (void)elem;
  free(arr);
#else
  if (arr) munmap(arr, mapped_bytes(cap, elem));
#endif
}

void apx_graph_init(ApxGraph *g, const char *file) {
  memset(g, 0, sizeof *g);
  apx_arena_init(&g->arena);
  g->file = apx_arena_strdup(&g->arena, file ? file : "<model>");
  g->loss = -1;
  g->arena_bytes = g->peak_live_bytes = g->no_reuse_bytes = g->persistent_bytes = -1;
}

int apx_graph_settle(ApxGraph *g, ApxDiag *d) {
  if (!g->settle_fn) return 0;
  int (*fn)(ApxGraph *, void *, ApxDiag *) = g->settle_fn;
  void *arg = g->settle_arg;
  g->settle_fn = NULL;
  g->settle_ready_fn = NULL;
  g->settle_arg = NULL;
  ApxDiag scratch;
  if (!d) {
    apx_diag_init(&scratch);
    scratch.quiet = 1;
    d = &scratch;
  }
  return fn(g, arg, d) ? -1 : 0;
}

int apx_graph_settle_ready(const ApxGraph *g) {
  if (!g->settle_fn) return 1;
  return g->settle_ready_fn ? g->settle_ready_fn(g->settle_arg) : 0;
}

void apx_graph_free(ApxGraph *g) {
  apx_graph_settle(g, NULL);
  free_mapped(g->vals, g->cap_vals, sizeof(ApxValue));
  free_mapped(g->nodes, g->cap_nodes, sizeof(ApxNode));
  free(g->order);
  free(g->name_slots);
  free(g->name_bits);
  free(g->name_pending);
  free(g->name_deferred);
  free(g->range_ok);
  apx_arena_free(&g->arena);
  memset(g, 0, sizeof *g);
}

/* ---- name table --------------------------------------------------------------------- */

static uint32_t hash_str(const char *s) { return apx_name_hash(s); }

/* Slot k is name_slots[2k] (value id, -1 empty) and name_slots[2k + 1] (its name's hash).
 * name_bits: a filter of 4 * name_cap bits (a quarter of the table's bytes), bit
 * filter_bit(hash) set for every name; a lookup whose bit is clear is a miss without
 * touching the table (at most one name in eight sets a bit, so a name that is not there
 * finds its bit clear about nine times in ten). */
static uint32_t filter_bit(uint32_t hv, int32_t cap) {
  int b = __builtin_ctz((unsigned)cap) + 2; /* log2(4 * cap): cap is a power of two */
  return (uint32_t)(((uint64_t)(hv * 0x9E3779B1u) << b) >> 32);
}

static void filter_set(ApxGraph *g, uint32_t hv) {
  uint32_t fb = filter_bit(hv, g->name_cap);
  g->name_bits[fb >> 6] |= 1ull << (fb & 63);
}

/* Puts value id (name hash hv) in a slot; the table has room (table_fit). */
static void slot_put(ApxGraph *g, int id, uint32_t hv) {
  uint32_t h = hv & (uint32_t)(g->name_cap - 1);
  while (g->name_slots[2 * h] >= 0) h = (h + 1) & (uint32_t)(g->name_cap - 1);
  g->name_slots[2 * h] = id;
  g->name_slots[2 * h + 1] = (int)hv;
  filter_set(g, hv);
}

/* Grows the table (rehash) so that every value fits at a load of 1/2 at most; the deferred
 * names' filter bits are set again for the new size. Returns 0, -1 when out of memory. */
static int table_fit(ApxGraph *g) {
  if ((g->n_vals + 1) * 2 <= g->name_cap) return 0;
  int32_t nc = g->name_cap ? g->name_cap * 2 : 256;
  while ((g->n_vals + 1) * 2 > nc) nc *= 2;
  int *slots = malloc((size_t)nc * 2 * sizeof *slots);
  uint64_t *bits = calloc((size_t)nc / 16 + 1, sizeof *bits);
  if (!slots || !bits) {
    free(slots);
    free(bits);
    return -1;
  }
  for (int32_t i = 0; i < nc; i++) slots[2 * i] = -1;
  int *old = g->name_slots;
  int32_t old_cap = g->name_cap;
  free(g->name_bits);
  g->name_slots = slots;
  g->name_bits = bits;
  g->name_cap = nc;
  for (int32_t i = 0; i < old_cap; i++)
    if (old[2 * i] >= 0) slot_put(g, old[2 * i], (uint32_t)old[2 * i + 1]);
  free(old);
  for (int32_t i = 0; i < g->n_name_deferred; i++) filter_set(g, g->name_deferred[2 * i + 1]);
  return 0;
}

static int name_insert(ApxGraph *g, int id) {
  if (table_fit(g)) return -1;
  slot_put(g, id, hash_str(g->vals[id].name));
  return 0;
}

/* The deferred names into their slots. A slot is a cache miss in a table of millions: the
 * slots of a batch are prefetched together so that the misses overlap instead of following
 * one another (one per insert was ~5% of a 100k-node compile). */
static void flush_deferred(ApxGraph *g) {
  enum { BATCH = 16 };
  const uint32_t mask = (uint32_t)(g->name_cap - 1);
  for (int32_t i0 = 0; i0 < g->n_name_deferred; i0 += BATCH) {
    int32_t i1 = i0 + BATCH < g->n_name_deferred ? i0 + BATCH : g->n_name_deferred;
    for (int32_t i = i0; i < i1; i++)
      __builtin_prefetch(&g->name_slots[2 * (g->name_deferred[2 * i + 1] & mask)], 1);
    for (int32_t i = i0; i < i1; i++)
      slot_put(g, (int)g->name_deferred[2 * i], g->name_deferred[2 * i + 1]);
  }
  g->n_name_deferred = 0;
}

/* A new value's name: in the filter now, in its slot with the next batch (flush_deferred). */
static int name_defer(ApxGraph *g, int id) {
  if (table_fit(g)) return -1;
  uint32_t hv = hash_str(g->vals[id].name);
  if (g->n_name_deferred == g->cap_name_deferred) {
    int32_t nc = g->cap_name_deferred ? g->cap_name_deferred * 2 : 256;
    uint32_t *p = realloc(g->name_deferred, (size_t)nc * 2 * sizeof *p);
    if (!p) { /* no room to defer: inserted now */
      slot_put(g, id, hv);
      return 0;
    }
    g->name_deferred = p;
    g->cap_name_deferred = nc;
  }
  g->name_deferred[2 * g->n_name_deferred] = (uint32_t)id;
  g->name_deferred[2 * g->n_name_deferred + 1] = hv;
  g->n_name_deferred++;
  filter_set(g, hv);
  return 0;
}

/* 1 when name has the generated form "<anything>_apx<digits>" (apx_graph_unique_name). */
static int has_generated_form(const char *name) {
  size_t len = strlen(name), k = len;
  while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9') k--;
  return k < len && k >= 4 && memcmp(name + k - 4, "_apx", 4) == 0;
}

/* Puts the pending generated names in the table (sized for every value already). */
static int flush_pending(ApxGraph *g) {
  for (int32_t i = 0; i < g->n_name_pending; i++)
    if (name_insert(g, g->name_pending[i])) {
      memmove(g->name_pending, g->name_pending + i, (size_t)(g->n_name_pending - i) * sizeof *g->name_pending);
      g->n_name_pending -= i;
      return -1;
    }
  g->n_name_pending = 0;
  return 0;
}

int apx_graph_find_value(const ApxGraph *g, const char *name) {
  if (!name) return -1;
  /* a pending name can only equal a name of the generated form; the table is private to
   * this file and logically part of the lookup, so a const graph may fill it */
  if (g->n_name_pending > 0 && has_generated_form(name) && flush_pending((ApxGraph *)g)) {
    /* out of memory: answer by a scan of the pending names */
    for (int32_t i = 0; i < g->n_name_pending; i++)
      if (strcmp(g->vals[g->name_pending[i]].name, name) == 0) return g->name_pending[i];
  }
  if (!g->name_cap) return -1;
  uint32_t hv = hash_str(name), h = hv & (uint32_t)(g->name_cap - 1);
  uint32_t fb = filter_bit(hv, g->name_cap);
  if (!(g->name_bits[fb >> 6] >> (fb & 63) & 1)) return -1;
  /* the bit is set: the name may be a deferred one (the table is logically part of the
   * lookup, as above) */
  if (g->n_name_deferred > 0) flush_deferred((ApxGraph *)g);
  while (g->name_slots[2 * h] >= 0) {
    int v = g->name_slots[2 * h];
    if ((uint32_t)g->name_slots[2 * h + 1] == hv && strcmp(g->vals[v].name, name) == 0) return v;
    h = (h + 1) & (uint32_t)(g->name_cap - 1);
  }
  return -1;
}

void apx_graph_find_values(const ApxGraph *g, const char *const *names, int n, int *ids) {
  enum { BATCH = 16 };
  /* pending generated names go into the table on the first lookup of a name of their form;
   * deferred ones on the first lookup whose filter bit is set: one plain lookup settles both
   * (the table is logically part of the lookup, as in apx_graph_find_value) */
  if (g->n_name_pending > 0 && flush_pending((ApxGraph *)g)) { /* out of memory: one by one */
    for (int i = 0; i < n; i++) ids[i] = names[i] && *names[i] ? apx_graph_find_value(g, names[i]) : -1;
    return;
  }
  if (g->n_name_deferred > 0) flush_deferred((ApxGraph *)g);
  if (!g->name_cap) {
    for (int i = 0; i < n; i++) ids[i] = -1;
    return;
  }
  const uint32_t mask = (uint32_t)(g->name_cap - 1);
  for (int i0 = 0; i0 < n; i0 += BATCH) {
    int i1 = i0 + BATCH < n ? i0 + BATCH : n;
    uint32_t hv[BATCH];
    int cand[BATCH];
    for (int i = i0; i < i1; i++) { /* hash, filter, the slot */
      const char *nm = names[i];
      cand[i - i0] = -1;
      ids[i] = -1;
      if (!nm || !*nm) continue;
      hv[i - i0] = hash_str(nm);
      uint32_t fb = filter_bit(hv[i - i0], g->name_cap);
      if (!(g->name_bits[fb >> 6] >> (fb & 63) & 1)) continue; /* not there */
      cand[i - i0] = -2;
      __builtin_prefetch(&g->name_slots[2 * (hv[i - i0] & mask)]);
    }
    for (int i = i0; i < i1; i++) { /* the first slot with the name's hash, its value */
      if (cand[i - i0] != -2) continue;
      uint32_t h = hv[i - i0] & mask;
      while (g->name_slots[2 * h] >= 0 && (uint32_t)g->name_slots[2 * h + 1] != hv[i - i0]) h = (h + 1) & mask;
      int v = g->name_slots[2 * h];
      cand[i - i0] = v >= 0 ? v : -1;
      if (v >= 0) __builtin_prefetch(&g->vals[v].name);
    }
    for (int i = i0; i < i1; i++)
      if (cand[i - i0] >= 0) __builtin_prefetch(g->vals[cand[i - i0]].name);
    for (int i = i0; i < i1; i++) { /* compare; a hash shared by another name: the full probe */
      int v = cand[i - i0];
      if (v < 0) continue;
      ids[i] = strcmp(g->vals[v].name, names[i]) == 0 ? v : apx_graph_find_value(g, names[i]);
    }
  }
}

/* "<hint>_apx<counter>", formatted by hand: passes ask for one name per new value, and
 * vsnprintf was a visible share of a 100k-node compile. */
const char *apx_graph_unique_name(ApxGraph *g, const char *hint) {
  if (!hint) hint = "v";
  size_t len = strlen(hint);
  for (;;) {
    char digits[16];
    int nd = 0;
    unsigned gen = (unsigned)g->name_gen++; /* counts up from 0 */
    do {
      digits[nd++] = (char)('0' + gen % 10);
      gen /= 10;
    } while (gen);
    char *n = apx_arena_alloc_raw(&g->arena, len + 4 + (size_t)nd + 1);
    if (!n) return NULL;
    memcpy(n, hint, len);
    memcpy(n + len, "_apx", 4);
    for (int i = 0; i < nd; i++) n[len + 4 + i] = digits[nd - 1 - i];
    n[len + 4 + nd] = '\0';
    if (g->n_apx_form_names == 0 || apx_graph_find_value(g, n) < 0) {
      g->last_unique = n;
      g->last_unique_generated = 1;
      return n;
    }
  }
}

/* A name given explicitly in the generated form "<anything>_apx<n>" (apx_graph_unique_name)
 * could meet a generated one only at counter value n: the counter moves past n, so later
 * generated names never do. Returns 1 when it cannot (n out of the counter's range), so
 * that name must be looked up from now on. */
static int note_explicit_name(ApxGraph *g, const char *name) {
  size_t len = strlen(name), k = len;
  while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9') k--;
  if (k == len || k < 4 || memcmp(name + k - 4, "_apx", 4) != 0) return 0;
  if (name[k] == '0' && len - k > 1) return 0; /* generated digits have no leading zero */
  int64_t n = 0;
  for (size_t i = k; i < len; i++) {
    n = n * 10 + (name[i] - '0');
    if (n >= INT32_MAX) return 1;
  }
  if (n >= g->name_gen) g->name_gen = (int32_t)n + 1;
  return 0;
}

int *apx_value_master_map(const ApxGraph *g) {
  int *m = malloc(((size_t)g->n_vals + 1) * sizeof *m);
  if (!m) return NULL;
  for (int v = 0; v < g->n_vals; v++) m[v] = -1;
  for (int v = 0; v < g->n_vals; v++) {
    int p = g->vals[v].origin;
    if ((g->vals[v].flags & APX_VALF_MASTER) && p >= 0 && p < g->n_vals && m[p] < 0) m[p] = v;
  }
  return m;
}

/* ---- values and nodes --------------------------------------------------------------- */

int apx_graph_add_value(ApxGraph *g, ApxDiag *d, const char *name, ApxValueKind kind,
                        ApxDType dtype, int32_t rank, const int64_t *dims) {
  /* the name apx_graph_unique_name or apx_graph_free_name returned last, no value added
   * since: known to be free */
  int known_free = name && name == g->last_unique;
  if (name && !known_free && apx_graph_find_value(g, name) >= 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: value '%s' is defined twice", g->file, name);
  if (rank > APX_MAX_RANK)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: value '%s' has rank %d, more than %d",
                          g->file, name ? name : "?", rank, APX_MAX_RANK);
  /* a generated name is in the arena already */
  int generated = known_free && g->last_unique_generated;
  const char *nm = generated ? name
                   : name    ? apx_arena_strdup(&g->arena, name)
                             : apx_graph_unique_name(g, "v");
  if (!nm || grow_mapped((void **)&g->vals, &g->cap_vals, g->n_vals + 1, sizeof(ApxValue)))
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory adding a value", g->file);
  int id = g->n_vals;
  ApxValue *v = &g->vals[id];
  memset(v, 0, sizeof *v);
  v->name = nm;
  v->kind = kind;
  v->dtype = dtype;
  v->producer = -1;
  v->onnx_index = -1;
  v->grad = -1;
  v->origin = -1;
  v->mem_region = APX_MEM_NONE;
  v->mem_offset = -1;
  v->mem_alias = -1;
  v->rank = -1;
  if (rank >= 0) apx_value_set_shape(v, rank, dims);
  g->n_vals++;
  if (name && !generated && note_explicit_name(g, name)) g->n_apx_form_names++;
  g->last_unique = NULL;
  if (generated) { /* into the table when a name of its form is looked up */
    if (g->n_name_pending == g->cap_name_pending) {
      int32_t nc = g->cap_name_pending ? g->cap_name_pending * 2 : 256;
      int32_t *p = realloc(g->name_pending, (size_t)nc * sizeof *p);
      if (!p) {
        g->n_vals--;
        return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory adding a value", g->file);
      }
      g->name_pending = p;
      g->cap_name_pending = nc;
    }
    g->name_pending[g->n_name_pending++] = id;
    return id;
  }
  if (name_defer(g, id)) {
    g->n_vals--;
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory adding a value", g->file);
  }
  return id;
}

const char *apx_graph_free_name(ApxGraph *g, const char *name) {
  if (!name) return NULL;
  if (apx_graph_find_value(g, name) >= 0) return apx_graph_unique_name(g, name);
  g->last_unique = name;
  g->last_unique_generated = 0;
  return name;
}

int apx_graph_add_node(ApxGraph *g, ApxDiag *d, ApxOp op, const char *name, int n_in,
                       const int *in, int n_out, const int *out) {
  if (grow_mapped((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(ApxNode)))
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory adding a node", g->file);
  const ApxOpInfo *info = apx_op_info(op);
  int id = g->n_nodes;
  ApxNode *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->op_type = info->name;
  n->name = name ? apx_arena_strdup(&g->arena, name)
                 : apx_arena_printf(&g->arena, "%s_apx%d", info->name, g->name_gen++);
  n->onnx_index = -1;
  n->origin = -1;
  n->section = APX_SEC_FORWARD;
  n->n_in = n_in;
  n->n_out = n_out;
  n->in = apx_arena_memdup(&g->arena, in, (size_t)n_in * sizeof(int));
  n->out = apx_arena_memdup(&g->arena, out, (size_t)n_out * sizeof(int));
  n->typed = apx_arena_alloc(&g->arena, info->attrs_size ? info->attrs_size : 1);
  if (!n->name || !n->in || !n->out || !n->typed)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory adding a node", g->file);
  for (int i = 0; i < n_out; i++)
    if (out[i] >= 0 && out[i] < g->n_vals) g->vals[out[i]].producer = id;
  g->n_nodes++;
  return id;
}

const ApxAttr *apx_node_attr(const ApxGraph *g, int node, const char *name) {
  const ApxNode *n = &g->nodes[node];
  for (int i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].name && strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

/* ---- shapes ------------------------------------------------------------------------- */

int64_t apx_value_numel(const ApxValue *v) {
  if (v->rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) {
    if (v->dims[i] < 0) return -1;
    if (v->dims[i] && n > INT64_MAX / v->dims[i]) return -1;
    n *= v->dims[i];
  }
  return n;
}

int64_t apx_value_bytes(const ApxValue *v) {
  int64_t n = apx_value_numel(v);
  size_t es = apx_dtype_size(v->dtype);
  if (n < 0 || es == 0 || n > INT64_MAX / (int64_t)es) return -1;
  return n * (int64_t)es;
}

void apx_value_set_shape(ApxValue *v, int32_t rank, const int64_t *dims) {
  v->rank = rank;
  int known = rank >= 0;
  for (int i = 0; i < APX_MAX_RANK; i++) {
    v->dims[i] = (i < rank && dims) ? dims[i] : (i < rank ? -1 : 0);
    if (i < rank && v->dims[i] < 0) known = 0;
  }
  if (known)
    v->flags |= APX_VALF_SHAPE_KNOWN;
  else
    v->flags &= ~(uint32_t)APX_VALF_SHAPE_KNOWN;
}

char *apx_value_shape_str(const ApxValue *v, char *buf, size_t cap) {
  if (cap == 0) return buf;
  if (v->rank < 0) {
    snprintf(buf, cap, "?");
    return buf;
  }
  size_t k = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (int i = 0; i < v->rank && k < cap; i++) {
    const char *sep = i ? "," : "";
    if (v->dims[i] >= 0)
      k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, sep, v->dims[i]);
    else if (v->dim_params && v->dim_params[i])
      k += (size_t)snprintf(buf + k, cap - k, "%s%s", sep, v->dim_params[i]);
    else
      k += (size_t)snprintf(buf + k, cap - k, "%s?", sep);
  }
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

/* ---- topological order -------------------------------------------------------------- */

/* The heap key of node a: (section * 2 + not eager) above the id, so the heap compares
 * integers without reading the nodes. */
#define DEAD_KEY UINT64_MAX

static uint64_t topo_key(const ApxNode *nd, int a) {
  uint32_t cls = (uint32_t)nd->section * 2u + ((nd->flags & APX_NODEF_EAGER) ? 0u : 1u);
  return ((uint64_t)cls << 32) | (uint32_t)a;
}

int apx_graph_toposort(ApxGraph *g, ApxDiag *d) {
  int n = g->n_nodes;
  /* key[i] (DEAD_KEY for dead nodes), indeg[i] (edges from live producers, one per input slot),
   * nsucc[i + 1] (edges to live consumers); sorted: every edge goes from a smaller key to a
   * larger one, so the nodes in key order are already a valid order */
  uint64_t *key = malloc(((size_t)n + 1) * sizeof *key);
  int *indeg = calloc((size_t)n + 1, sizeof(int));
  int *succ_start = calloc((size_t)n + 2, sizeof(int));
  int *succ = NULL, *fill = NULL, *edge_src = NULL;
  uint64_t *heap = NULL;
  int rc = 0, live = 0, sorted = 1;
  size_t edges = 0, n_in_total = 0;
  /* prod[v]: the producer of value v, read from the value records in one sequential sweep
   * (the edge loop below then looks producers up in a small array instead of missing the
   * cache on a value record per edge) */
  int *prod = malloc(((size_t)g->n_vals + 1) * sizeof *prod);
  if (!key || !indeg || !succ_start || !prod) {
    free(prod);
    goto oom;
  }
  for (int v = 0; v < g->n_vals; v++) prod[v] = g->vals[v].producer;
  for (int i = 0; i < n; i++) {
    const ApxNode *nd = &g->nodes[i];
    key[i] = (nd->flags & APX_NODEF_DEAD) ? DEAD_KEY : topo_key(nd, i);
    if (!(nd->flags & APX_NODEF_DEAD)) n_in_total += (size_t)nd->n_in;
  }
  /* edge_src: the producer of each edge, edges grouped by consumer in id order (indeg[i] of
   * them for node i), so the successor lists are filled without reading the nodes again */
  edge_src = malloc((n_in_total + 1) * sizeof *edge_src);
  if (!edge_src) {
    free(prod);
    goto oom;
  }
  for (int i = 0; i < n; i++) {
    if (key[i] == DEAD_KEY) continue;
    const ApxNode *nd = &g->nodes[i];
    live++;
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      if (v < 0) continue;
      int p = prod[v];
      if (p < 0 || key[p] == DEAD_KEY) continue;
      indeg[i]++;
      succ_start[p + 1]++;
      edge_src[edges++] = p;
      sorted &= key[p] < key[i];
    }
  }
  free(prod);
  /* never NULL, even for a graph without nodes: passes copy it with memcpy */
  if (grow((void **)&g->order, &g->cap_order, live > 0 ? live : 1, sizeof(int))) goto oom;
  if (sorted) {
    /* Kahn with a min-heap would take the nodes in key order: a counting sort by the key's
     * class (section, eager) keeps ids ascending within each */
    int count[2 * (APX_SEC_OPTIMIZER + 1) + 1] = {0};
    int ncls = 2 * (APX_SEC_OPTIMIZER + 1);
    for (int i = 0; i < n; i++)
      if (key[i] != DEAD_KEY) count[(key[i] >> 32) + 1]++;
    for (int c = 0; c < ncls; c++) count[c + 1] += count[c];
    for (int i = 0; i < n; i++)
      if (key[i] != DEAD_KEY) g->order[count[key[i] >> 32]++] = i;
    g->n_order = live;
    goto out;
  }
  for (int i = 0; i < n; i++) succ_start[i + 1] += succ_start[i];
  succ = malloc((edges + 1) * sizeof *succ);
  fill = malloc(((size_t)n + 1) * sizeof *fill);
  heap = malloc(((size_t)live + 1) * sizeof *heap);
  if (!succ || !fill || !heap) goto oom;
  memcpy(fill, succ_start, (size_t)n * sizeof *fill);
  for (size_t e = 0, i = 0; i < (size_t)n; i++)
    for (int j = 0; j < indeg[i]; j++, e++) succ[fill[edge_src[e]]++] = (int)i;
  /* Kahn with a min-heap on the keys keeps the model's order where it is already valid:
   * section first (forward, backward, optimizer: a later section never feeds an earlier
   * one), then eager nodes (as soon as ready), then node id */
  int hn = 0;
#define HEAP_PUSH(x)                                                     \
  do {                                                                   \
    int c_ = hn++;                                                       \
    uint64_t k_ = key[x];                                                \
    while (c_ > 0 && k_ < heap[(c_ - 1) / 2]) {                          \
      heap[c_] = heap[(c_ - 1) / 2];                                     \
      c_ = (c_ - 1) / 2;                                                 \
    }                                                                    \
    heap[c_] = k_;                                                       \
  } while (0)
  for (int i = 0; i < n; i++)
    if (key[i] != DEAD_KEY && indeg[i] == 0) HEAP_PUSH(i);
  int k = 0;
  while (hn > 0) {
    int top = (int)(uint32_t)heap[0];
    uint64_t last = heap[--hn];
    int c = 0;
    for (;;) { /* sift the last entry down from the root */
      int l = 2 * c + 1, r = l + 1, m = -1;
      if (l >= hn) break;
      m = r < hn && heap[r] < heap[l] ? r : l;
      if (heap[m] >= last) break;
      heap[c] = heap[m];
      c = m;
    }
    if (hn > 0) heap[c] = last;
    g->order[k++] = top;
    for (int j = succ_start[top]; j < succ_start[top + 1]; j++) {
      int cn = succ[j];
      if (--indeg[cn] == 0) HEAP_PUSH(cn);
    }
  }
#undef HEAP_PUSH
  g->n_order = k;
  if (k != live) {
    int culprit = -1;
    for (int i = 0; i < n && culprit < 0; i++)
      if (key[i] != DEAD_KEY && indeg[i] > 0) culprit = i;
    rc = apx_node_error(d, g, culprit, "is part of a cycle (graph is not a DAG)");
  }
  goto out;
oom:
  rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory sorting the graph", g->file);
out:
  free(key);
  free(indeg);
  free(succ_start);
  free(succ);
  free(fill);
  free(edge_src);
  free(heap);
  return rc;
}

int apx_graph_order_append(ApxGraph *g, int n_before, ApxDiag *d) {
  int n = g->n_nodes;
  if (n_before < 0 || n_before > n) return 1;
  /* the old nodes' largest key; the order must hold exactly the live old nodes (a node
   * killed or added since the sort, not an append-only pass: a sort is asked for) */
  uint64_t old_max = 0;
  int have_old = 0, live_old = 0;
  for (int a = 0; a < n_before; a++) {
    const ApxNode *nd = &g->nodes[a];
    if (nd->flags & APX_NODEF_DEAD) continue;
    uint64_t ka = topo_key(nd, a);
    if (!have_old || ka > old_max) old_max = ka;
    have_old = 1;
    live_old++;
  }
  if (live_old != g->n_order) return 1;
  for (int k = 0; k < g->n_order; k++) {
    int a = g->order[k];
    if (a < 0 || a >= n_before || (g->nodes[a].flags & APX_NODEF_DEAD)) return 1;
  }
  /* every edge into an appended node from a live node with a smaller key */
  int live_new = 0;
  int count[2 * (APX_SEC_OPTIMIZER + 1) + 1] = {0};
  for (int i = n_before; i < n; i++) {
    const ApxNode *nd = &g->nodes[i];
    if (nd->flags & APX_NODEF_DEAD) continue;
    if ((uint32_t)nd->section > APX_SEC_OPTIMIZER) return 1;
    uint64_t ki = topo_key(nd, i);
    if (have_old && ki <= old_max) return 1;
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      if (v < 0) continue;
      int p = g->vals[v].producer;
      if (p < 0) continue;
      if (g->nodes[p].flags & APX_NODEF_DEAD) continue; /* as the sort: no edge */
      if (p >= n_before && topo_key(&g->nodes[p], p) >= ki) return 1; /* old ones sort before */
    }
    count[(ki >> 32) + 1]++;
    live_new++;
  }
  int base = g->n_order;
  if (grow((void **)&g->order, &g->cap_order, base + live_new > 0 ? base + live_new : 1, sizeof(int)))
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory sorting the graph", g->file);
  int ncls = 2 * (APX_SEC_OPTIMIZER + 1);
  for (int c = 0; c < ncls; c++) count[c + 1] += count[c];
  for (int i = n_before; i < n; i++) {
    const ApxNode *nd = &g->nodes[i];
    if (nd->flags & APX_NODEF_DEAD) continue;
    g->order[base + count[topo_key(nd, i) >> 32]++] = i;
  }
  g->n_order = base + live_new;
  return 2;
}

/* ---- use lists ---------------------------------------------------------------------- */

int apx_uses_build(const ApxGraph *g, ApxUses *u) {
  memset(u, 0, sizeof *u);
  u->use_start = calloc((size_t)g->n_vals + 2, sizeof(int));
  if (!u->use_start) return -1;
  size_t total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ApxNode *nd = &g->nodes[i];
    if (nd->flags & APX_NODEF_DEAD) continue;
    for (int k = 0; k < nd->n_in; k++)
      if (nd->in[k] >= 0 && nd->in[k] < g->n_vals) {
        u->use_start[nd->in[k] + 1]++;
        total++;
      }
  }
  for (int v = 0; v < g->n_vals; v++) u->use_start[v + 1] += u->use_start[v];
  u->use_node = malloc((total + 1) * sizeof(int));
  u->use_slot = malloc((total + 1) * sizeof(int));
  int *fill = malloc(((size_t)g->n_vals + 1) * sizeof(int));
  if (!u->use_node || !u->use_slot || !fill) {
    free(fill);
    apx_uses_free(u);
    return -1;
  }
  memcpy(fill, u->use_start, (size_t)g->n_vals * sizeof(int));
  for (int i = 0; i < g->n_nodes; i++) {
    const ApxNode *nd = &g->nodes[i];
    if (nd->flags & APX_NODEF_DEAD) continue;
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      if (v < 0 || v >= g->n_vals) continue;
      u->use_node[fill[v]] = i;
      u->use_slot[fill[v]] = k;
      fill[v]++;
    }
  }
  free(fill);
  return 0;
}

void apx_uses_free(ApxUses *u) {
  free(u->use_start);
  free(u->use_node);
  free(u->use_slot);
  memset(u, 0, sizeof *u);
}

/* ---- verifier ----------------------------------------------------------------------- */

int apx_graph_verify(const ApxGraph *g, ApxDiag *d) {
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *val = &g->vals[v];
    if (val->rank > APX_MAX_RANK)
      return apx_value_error(d, g, v, "verifier: rank %d out of range", val->rank);
    if (val->producer >= g->n_nodes)
      return apx_value_error(d, g, v, "verifier: producer id %d out of range", val->producer);
    if ((val->kind == APX_VAL_CONST || val->kind == APX_VAL_PARAM) && val->producer < 0 &&
        !val->data && !(val->flags & APX_VALF_DATA_FROM_MASTER) && apx_value_numel(val) != 0)
      return apx_value_error(d, g, v, "verifier: constant without data");
    if (val->producer >= 0) {
      const ApxNode *p = &g->nodes[val->producer];
      int found = 0;
      for (int o = 0; o < p->n_out; o++) found |= p->out[o] == v;
      if (!found)
        return apx_value_error(d, g, v, "verifier: producer '%s' does not list it as output",
                               p->name);
    }
  }
  char *seen = calloc((size_t)g->n_nodes + 1, 1);
  char *ready = calloc((size_t)g->n_vals + 1, 1);
  if (!seen || !ready) {
    free(seen);
    free(ready);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory verifying", g->file);
  }
  int rc = 0;
  for (int v = 0; v < g->n_vals; v++)
    ready[v] = g->vals[v].producer < 0 || (g->nodes[g->vals[v].producer].flags & APX_NODEF_DEAD);
  int live = 0;
  for (int i = 0; i < g->n_nodes; i++) live += !(g->nodes[i].flags & APX_NODEF_DEAD);
  if (live != g->n_order)
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: verifier: order holds %d nodes, %d are live",
                        g->file, g->n_order, live);
  for (int k = 0; k < g->n_order && rc == 0; k++) {
    int id = g->order[k];
    if (id < 0 || id >= g->n_nodes) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: verifier: bad node id %d in order", g->file, id);
      break;
    }
    const ApxNode *nd = &g->nodes[id];
    if (nd->flags & APX_NODEF_DEAD) {
      rc = apx_node_error(d, g, id, "verifier: dead node in order");
      break;
    }
    if (seen[id]) {
      rc = apx_node_error(d, g, id, "verifier: node twice in order");
      break;
    }
    seen[id] = 1;
    if (!nd->typed) {
      rc = apx_node_error(d, g, id, "verifier: no typed attributes");
      break;
    }
    for (int i = 0; i < nd->n_in && rc == 0; i++) {
      int v = nd->in[i];
      if (v < -1 || v >= g->n_vals)
        rc = apx_node_error(d, g, id, "verifier: input %d has bad value id %d", i, v);
      else if (v >= 0 && !ready[v])
        rc = apx_node_error(d, g, id, "verifier: input %d '%s' is used before it is produced",
                            i, g->vals[v].name);
      else if (v >= 0 && g->vals[v].kind == APX_VAL_ACTIVATION && g->vals[v].producer < 0)
        rc = apx_node_error(d, g, id, "verifier: input %d '%s' has no producer", i,
                            g->vals[v].name);
    }
    for (int o = 0; o < nd->n_out && rc == 0; o++) {
      int v = nd->out[o];
      if (v < -1 || v >= g->n_vals)
        rc = apx_node_error(d, g, id, "verifier: output %d has bad value id %d", o, v);
      else if (v >= 0 && g->vals[v].producer != id)
        rc = apx_node_error(d, g, id, "verifier: output %d '%s' names another producer", o,
                            g->vals[v].name);
      else if (v >= 0)
        ready[v] = 1;
    }
  }
  free(seen);
  free(ready);
  return rc;
}

/* ---- messages ----------------------------------------------------------------------- */

int apx_node_error(ApxDiag *d, const ApxGraph *g, int node, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (node < 0 || node >= g->n_nodes)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s", g->file, msg);
  const ApxNode *n = &g->nodes[node];
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: node '%s' (%s): %s", g->file,
                        n->name ? n->name : "?", n->op_type ? n->op_type : apx_op_name(n->op), msg);
}

int apx_value_error(ApxDiag *d, const ApxGraph *g, int value, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *nm = (value >= 0 && value < g->n_vals) ? g->vals[value].name : "?";
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: value '%s': %s", g->file, nm, msg);
}

void apx_node_warn(ApxDiag *d, const ApxGraph *g, int node, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (node < 0 || node >= g->n_nodes) {
    apx_diag_warn(d, "%s: %s", g->file, msg);
    return;
  }
  const ApxNode *n = &g->nodes[node];
  apx_diag_warn(d, "%s: node '%s' (%s): %s", g->file, n->name, n->op_type ? n->op_type : apx_op_name(n->op), msg);
}
