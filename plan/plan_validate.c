/* plan_validate.c - every kernel of a loaded plan against its op's contract, its producers
 * and the aliasing its op allows (plan_validate.h). */
#include "plan/plan_validate.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/validate.h"

static const char *plan_path(const ApxPlan *p) { return p->path ? p->path : "<plan>"; }

static int bad(ApxDiag *d, const ApxPlan *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(ApxDiag *d, const ApxPlan *p, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: invalid plan: %s", plan_path(p), msg);
}

/* "kernel K ('node' Op)" */
static const char *kernel_name(const ApxPlan *p, int32_t k, char *buf, size_t cap) {
  const ApxPlanKernel *kn = &p->kernels[k];
  snprintf(buf, cap, "kernel %d ('%s' %s)", k, kn->node ? kn->node : "", apx_op_name(kn->op));
  return buf;
}

/* A view of buffer id as a kernel would get it, at a fake address that is never dereferenced:
 * region r's byte 0 at r << 58, so views compare as the executor's do (a buffer placed over
 * another has its address) and none is NULL. Absent (-1): a zeroed view. */
static ApxTensor view_of(const ApxPlan *p, int32_t id) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  if (id < 0) return t;
  const ApxPlanBuffer *b = &p->bufs[id];
  t.data = (void *)(((uintptr_t)b->region << 58) + (uintptr_t)b->offset);
  t.dtype = b->dtype;
  t.rank = b->rank;
  memcpy(t.dims, b->dims, sizeof t.dims);
  return t;
}

/* Prefetches the buffer records of n arguments of kn from argument a on (a plan's buffer
 * table is larger than the caches; each view reads its buffer's record). */
static void prefetch_args(const ApxPlan *p, const ApxPlanKernel *kn, int32_t a, int32_t n) {
  for (int32_t e = a + n; a < e && a < kn->n_in + kn->n_out; a++) {
    int32_t id = a < kn->n_in ? kn->in[a] : kn->out[a - kn->n_in];
    if (id >= 0 && id < p->n_bufs) __builtin_prefetch(&p->bufs[id].dims);
  }
}

/* ---- aliasing ------------------------------------------------------------------------- */

/* The bytes one argument of a kernel covers. */
typedef struct Range {
  int64_t start, end;
  int32_t region;
  int32_t arg;    /* inputs 0 .. n_in - 1, then outputs */
  int32_t writes; /* the kernel writes these bytes (outputs, updated inputs) */
} Range;

static int range_cmp(const void *a, const void *b) {
  const Range *x = a, *y = b;
  if (x->region != y->region) return x->region < y->region ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->arg < y->arg ? -1 : x->arg > y->arg;
}

enum { MAX_RUNS = 64 };

/* Ranges ordered by range_cmp through their (region, start) keys: a stable LSD radix sort,
 * RADIX_BITS a pass, skipping digits that are the same in every key; then the ranges that
 * share a key (an in-place pair or a few) ordered by end and argument. For a kernel with many
 * arguments in no memory order (OptimizerStep of a large model: 400k arguments on the
 * 100k-node chain, where qsort cost ~8% of a compile). 0 when sorted; -1 when it cannot
 * (out of memory, an offset beyond 2^46, a region beyond 3): the caller sorts otherwise. */
enum { RADIX_BITS = 12, RADIX_BUCKETS = 1 << RADIX_BITS, KEY_BITS = 48 }; /* region: 2 bits at 46 */

typedef struct RangeKey {
  uint64_t key; /* region << 46 | start */
  int32_t at;   /* index into the ranges */
} RangeKey;

static int radix_sort_ranges(Range *rg, Range *tmp, int32_t n) {
  RangeKey *keys = malloc((size_t)n * 2 * sizeof *keys), *a = keys, *b = keys + n;
  uint32_t(*count)[RADIX_BUCKETS] = calloc(KEY_BITS / RADIX_BITS, sizeof *count);
  int rc = -1;
  if (!keys || !count) goto out;
  for (int32_t i = 0; i < n; i++) {
    if (rg[i].start < 0 || rg[i].start >= (int64_t)1 << 46 || rg[i].region < 0 || rg[i].region > 3)
      goto out;
    a[i] = (RangeKey){(uint64_t)rg[i].region << 46 | (uint64_t)rg[i].start, i};
    for (int d = 0; d < KEY_BITS / RADIX_BITS; d++)
      count[d][(a[i].key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
  }
  for (int d = 0; d < KEY_BITS / RADIX_BITS; d++) {
    uint32_t *c = count[d];
    if (c[(a[0].key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)] == (uint32_t)n) continue;
    uint32_t sum = 0;
    for (int v = 0; v < RADIX_BUCKETS; v++) {
      uint32_t k = c[v];
      c[v] = sum;
      sum += k;
    }
    for (int32_t i = 0; i < n; i++) b[c[(a[i].key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++] = a[i];
    RangeKey *t = a;
    a = b;
    b = t;
  }
  for (int32_t i = 0; i < n; i++) tmp[i] = rg[a[i].at];
  for (int32_t g0 = 0, g1; g0 < n; g0 = g1) { /* equal keys: by end, then argument */
    for (g1 = g0 + 1; g1 < n && a[g1].key == a[g0].key; g1++) {
      Range x = tmp[g1];
      int32_t j = g1 - 1;
      for (; j >= g0 && range_cmp(&tmp[j], &x) > 0; j--) tmp[j + 1] = tmp[j];
      tmp[j + 1] = x;
    }
  }
  memcpy(rg, tmp, (size_t)n * sizeof *rg);
  rc = 0;
out:
  free(keys);
  free(count);
  return rc;
}

/* Sorts rg[0, n) by range_cmp (tmp: room for n). A kernel lists its arguments in a few
 * groups, each usually in memory order (OptimizerStep: parameters, gradients, state...), so
 * the ascending runs already there are merged pairwise: O(n log runs); few arguments:
 * insertion; many runs: radix_sort_ranges (qsort if that cannot). */
static void sort_ranges(Range *rg, Range *tmp, int32_t n) {
  if (n < 16) {
    for (int32_t i = 1; i < n; i++) {
      Range x = rg[i];
      int32_t j = i - 1;
      for (; j >= 0 && range_cmp(&rg[j], &x) > 0; j--) rg[j + 1] = rg[j];
      rg[j + 1] = x;
    }
    return;
  }
  int32_t start[MAX_RUNS + 1], runs = 0;
  start[runs++] = 0;
  for (int32_t i = 1; i < n; i++)
    if (range_cmp(&rg[i - 1], &rg[i]) > 0) {
      if (runs == MAX_RUNS) {
        if (radix_sort_ranges(rg, tmp, n)) qsort(rg, (size_t)n, sizeof *rg, range_cmp);
        return;
      }
      start[runs++] = i;
    }
  start[runs] = n;
  Range *src = rg, *dst = tmp;
  while (runs > 1) {
    int32_t r = 0, out = 0;
    for (; r + 1 < runs; r += 2) { /* merge runs r and r + 1 into dst */
      int32_t a = start[r], ae = start[r + 1], b = ae, be = start[r + 2], k = a;
      while (a < ae && b < be) dst[k++] = range_cmp(&src[b], &src[a]) < 0 ? src[b++] : src[a++];
      while (a < ae) dst[k++] = src[a++];
      while (b < be) dst[k++] = src[b++];
      start[out++] = start[r];
    }
    if (r < runs) { /* an odd run left: copied as it is */
      memcpy(dst + start[r], src + start[r], (size_t)(start[r + 1] - start[r]) * sizeof *dst);
      start[out++] = start[r];
    }
    start[out] = n;
    runs = out;
    Range *t = src;
    src = dst;
    dst = t;
  }
  if (src != rg) memcpy(rg, src, (size_t)n * sizeof *rg);
}

/* Inputs the kernel updates in place: AssignState's dst, OptimizerStep's step counter and
 * every group but the gradients (parameters, state, half copies). */
static int writes_input(const ApxPlanKernel *kn, int32_t i) {
  if (kn->op == APX_OP_AssignState) return i == 1;
  if (kn->op == APX_OP_OptimizerStep) {
    const ApxAttrOptimizer *a = kn->attrs;
    int64_t n = a->n_params, g = i >= 4 && n > 0 ? (i - 4) / n : -1;
    return i == 3 || (i >= 4 && g != 1);
  }
  return 0;
}

/* 1 when output o of kn may take the bytes of input i (identical range checked by the
 * caller): the in-place pairs of passes/memplan.c, with one dtype. */
static int pair_allowed(const ApxPlan *p, const ApxPlanKernel *kn, int32_t o, int32_t i,
                        int in0_there) {
  int32_t ob = kn->out[o], ib = kn->in[i];
  if (p->bufs[ob].dtype != p->bufs[ib].dtype) return 0;
  if (kn->op == APX_OP_UnscaleCheck) return o >= 3 && i == 1 + (o - 3);
  if (kn->op == APX_OP_Allreduce) return i == o;
  if (apx_op_info(kn->op)->flags & (APX_OPF_INPLACE | APX_OPF_SHAPEONLY))
    return o == 0 && in0_there; /* elementwise: every input read before the element is written */
  return 0;
}

static void arg_name(const ApxPlan *p, const ApxPlanKernel *kn, int32_t arg, char *buf, size_t cap) {
  int out = arg >= kn->n_in;
  int32_t slot = out ? arg - kn->n_in : arg, id = out ? kn->out[slot] : kn->in[slot];
  snprintf(buf, cap, "%s %d ('%s')", out ? "output" : "input", slot, p->bufs[id].name);
}

static int alias_error(ApxDiag *d, const ApxPlan *p, int32_t k, int32_t a, int32_t b) {
  const ApxPlanKernel *kn = &p->kernels[k];
  char kb[160], na[192], nb[192];
  arg_name(p, kn, a, na, sizeof na);
  arg_name(p, kn, b, nb, sizeof nb);
  return bad(d, p, "%s: %s shares bytes with %s (the op allows only its in-place pairs, over "
             "identical bytes)", kernel_name(p, k, kb, sizeof kb), na, nb);
}

/* No bytes a kernel writes are shared with another of its arguments, except an in-place pair
 * over identical bytes. Ranges sorted, then identical ranges in groups: a group may hold one
 * written argument and the inputs its op lets it take; a group that partly overlaps an earlier
 * one must not be written, nor overlap a written one. */
static int check_aliasing(const ApxPlan *p, int32_t k, Range *rg, Range *tmp, ApxDiag *d) {
  const ApxPlanKernel *kn = &p->kernels[k];
  int32_t n = 0;
  for (int32_t a = 0; a < kn->n_in + kn->n_out; a++) {
    int out = a >= kn->n_in;
    int32_t id = out ? kn->out[a - kn->n_in] : kn->in[a];
    if (id < 0 || p->bufs[id].bytes == 0) continue;
    const ApxPlanBuffer *b = &p->bufs[id];
    rg[n++] = (Range){b->offset, b->offset + b->bytes, (int32_t)b->region, a,
                      out || writes_input(kn, a)};
  }
  sort_ranges(rg, tmp, n);
  int64_t reach = INT64_MIN, out_reach = INT64_MIN;
  int32_t reach_arg = -1, out_reach_arg = -1, region = -1;
  for (int32_t g0 = 0, g1; g0 < n; g0 = g1) {
    for (g1 = g0 + 1; g1 < n && rg[g1].region == rg[g0].region && rg[g1].start == rg[g0].start &&
                      rg[g1].end == rg[g0].end;
         g1++) {
    }
    if (rg[g0].region != region) {
      region = rg[g0].region;
      reach = out_reach = INT64_MIN;
    }
    int32_t writer = -1, in0_there = 0;
    for (int32_t j = g0; j < g1; j++) {
      if (rg[j].writes) {
        if (writer >= 0) return alias_error(d, p, k, rg[writer].arg, rg[j].arg);
        writer = j;
      }
      in0_there |= rg[j].arg == 0;
    }
    /* a partial overlap with an earlier range */
    if (writer >= 0 && reach > rg[g0].start) return alias_error(d, p, k, rg[writer].arg, reach_arg);
    if (out_reach > rg[g0].start) return alias_error(d, p, k, out_reach_arg, rg[g0].arg);
    if (writer >= 0) {
      int32_t o = rg[writer].arg - kn->n_in;
      for (int32_t j = g0; j < g1; j++) {
        if (j == writer) continue;
        if (o < 0 || rg[j].arg >= kn->n_in || !pair_allowed(p, kn, o, rg[j].arg, in0_there))
          return alias_error(d, p, k, rg[writer].arg, rg[j].arg);
      }
      if (rg[g0].end > out_reach) out_reach = rg[g0].end, out_reach_arg = rg[writer].arg;
    }
    if (rg[g0].end > reach) reach = rg[g0].end, reach_arg = rg[g0].arg;
  }
  return 0;
}

/* ---- kernels -------------------------------------------------------------------------- */

struct ApxPlanCheckScratch {
  int64_t max_args; /* the most arguments (inputs and outputs) of one kernel */
  ApxTensor *t;     /* [max_args + 1] views, every one set before use */
  Range *rg;        /* [2 * (max_args + 1)] ranges, then merge room */
  uint8_t *ready, *listed; /* [n_bufs + 1] */
};

ApxPlanCheckScratch *apx_plan_check_scratch_new(const ApxPlan *p) {
  ApxPlanCheckScratch *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  for (int32_t k = 0; k < p->n_kernels; k++)
    if (p->kernels[k].n_in + p->kernels[k].n_out > s->max_args)
      s->max_args = p->kernels[k].n_in + p->kernels[k].n_out;
  s->t = malloc(((size_t)s->max_args + 1) * sizeof *s->t);
  s->rg = malloc(((size_t)s->max_args + 1) * 2 * sizeof *s->rg);
  s->ready = malloc((size_t)p->n_bufs + 1);
  s->listed = malloc((size_t)p->n_bufs + 1);
  if (!s->t || !s->rg || !s->ready || !s->listed) {
    apx_plan_check_scratch_free(s);
    return NULL;
  }
  return s;
}

void apx_plan_check_scratch_free(ApxPlanCheckScratch *s) {
  if (!s) return;
  free(s->t);
  free(s->rg);
  free(s->ready);
  free(s->listed);
  free(s);
}

int apx_plan_check_kernels(const ApxPlan *p, ApxDiag *d) {
  ApxPlanCheckScratch *s = apx_plan_check_scratch_new(p);
  int rc = apx_plan_check_kernels_in(p, s, d);
  apx_plan_check_scratch_free(s);
  return rc;
}

int apx_plan_check_kernels_in(const ApxPlan *p, ApxPlanCheckScratch *s, ApxDiag *d) {
  if (!s) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", plan_path(p));
  int64_t max_args = s->max_args;
  ApxTensor *t = s->t;
  Range *rg = s->rg;
  uint8_t *ready = s->ready, *listed = s->listed;
  int rc = -1;
  char kb[160], err[512];
  memset(listed, 0, (size_t)p->n_bufs + 1);
  memset(ready, 0, (size_t)p->n_bufs + 1);
  for (int32_t i = 0; i < p->n_inputs; i++) listed[p->inputs[i]] = 1;
  /* loaded before a step: data inputs (set by the runtime), parameters, constants, state */
  for (int32_t b = 0; b < p->n_bufs; b++)
    ready[b] = p->bufs[b].kind == APX_VAL_INPUT ? listed[b] : p->bufs[b].kind != APX_VAL_ACTIVATION;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const ApxPlanKernel *kn = &p->kernels[k];
    if (k + 2 < p->n_kernels) prefetch_args(p, &p->kernels[k + 2], 0, 8);
    for (int32_t a = 0; a < kn->n_in + kn->n_out; a++) {
      if ((a & 7) == 0) prefetch_args(p, kn, a + 32, 8); /* long lists (OptimizerStep) */
      t[a] = view_of(p, a < kn->n_in ? kn->in[a] : kn->out[a - kn->n_in]);
    }
    err[0] = '\0';
    if (apx_kernel_validate(kn->op, kn->attrs, t, kn->n_in, t + kn->n_in, kn->n_out, err,
                            sizeof err) != APX_STATUS_OK) {
      rc = bad(d, p, "%s: %s", kernel_name(p, k, kb, sizeof kb), err);
      goto out;
    }
    for (int32_t i = 0; i < kn->n_in; i++) {
      int32_t id = kn->in[i];
      if (id < 0 || ready[id]) continue;
      rc = bad(d, p, "%s: input %d reads '%s', %s", kernel_name(p, k, kb, sizeof kb), i,
               p->bufs[id].name,
               p->bufs[id].kind == APX_VAL_INPUT ? "a data input the plan does not list"
                                                 : "which no earlier kernel writes");
      goto out;
    }
    if (check_aliasing(p, k, rg, rg + max_args + 1, d)) goto out;
    for (int32_t o = 0; o < kn->n_out; o++)
      if (kn->out[o] >= 0) ready[kn->out[o]] = 1;
  }
  for (int32_t i = 0; i < p->n_outputs; i++)
    if (!ready[p->outputs[i]]) {
      rc = bad(d, p, "output %d ('%s') is written by no kernel", i, p->bufs[p->outputs[i]].name);
      goto out;
    }
  if (p->loss >= 0 && !ready[p->loss]) {
    rc = bad(d, p, "the loss ('%s') is written by no kernel", p->bufs[p->loss].name);
    goto out;
  }
  rc = 0;
out:
  return rc;
}
