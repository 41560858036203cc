/* fuzz_plan.c - libFuzzer target for plan loading (built by scripts/fuzz_plan.sh, outside
 * Bazel, with -fsanitize=fuzzer,address,undefined).
 *
 * Each input is a plan file: read (plan/plan.c, from a memfd so the real loader runs on it),
 * dumped (apexc --dump-plan's code), and when it loads and its memory is small, run for one
 * step on the CPU backend: data inputs zeroed, then the forward, backward and optimizer
 * sections. Invariants besides "no crash, no leak, no out-of-bounds access, no undefined
 * behaviour": a refused plan or a failed run gives one error line, exit code 1 or 2, and a
 * refused plan's line starts with its path.
 *
 * LLVMFuzzerCustomMutator is structure-aware: most mutations decode the plan
 * (tests/fuzz/plan_edit.h), edit fields of the metadata (buffer ids in kernels, dtypes, dims,
 * sizes, offsets, regions, kinds, aliases, kernel lists and ops, attribute bytes, data
 * inputs, outputs, loss, memory summary) and re-encode it with a valid checksum, so they get
 * past the CRC to the checks that matter; the others mutate the metadata bytes (checksum
 * fixed) or the raw file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "plan/plan.h"
#include "runtime/exec.h"
#include "tests/fuzz/plan_edit.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* Plans whose arena and persistent region together exceed this are loaded and validated but
 * not run (a fuzzing budget, not a limit of apexrun). */
#define RUN_LIMIT_BYTES (8u << 20)

static int g_fd = -1;
static char g_path[64];
static FILE *g_null;
static int g_show; /* APX_FUZZ_SHOW=1: print every refusal (to see where mutations stop) */

/* Outcomes, printed at exit (scripts/fuzz_plan.sh reports them): how far inputs got. */
static long g_refused_file, g_refused_refs, g_refused_kernels, g_loaded, g_ran, g_run_failed;

static void print_stats(void) {
  fprintf(stderr, "fuzz_plan outcomes: refused by the file checks %ld, by the reference checks %ld, "
          "by the kernel checks %ld; loaded %ld, of them run %ld (%ld refused or failed while running)\n",
          g_refused_file, g_refused_refs, g_refused_kernels, g_loaded, g_ran, g_run_failed);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  g_fd = memfd_create("fuzz_plan", MFD_CLOEXEC);
  if (g_fd < 0) abort();
  snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
  g_null = fopen("/dev/null", "w");
  if (!g_null) abort();
  setenv("APX_NO_REEXEC", "1", 1);
  atexit(print_stats);
  g_show = getenv("APX_FUZZ_SHOW") != NULL;
  return 0;
}

static void check_error(const char *what, int rc, const ApxDiag *d, int needs_path) {
  if (rc != -1 || (d->code != APX_EXIT_BAD_INPUT && d->code != APX_EXIT_RUNTIME) || !d->msg[0] ||
      strchr(d->msg, '\n') || (needs_path && strncmp(d->msg, g_path, strlen(g_path)) != 0)) {
    fprintf(stderr, "bad error report from %s: rc %d code %d msg '%s'\n", what, rc, d->code, d->msg);
    abort();
  }
}

static void run_step(const ApxPlan *p) {
  if ((uint64_t)p->mem.arena_bytes + (uint64_t)p->mem.persistent_bytes > RUN_LIMIT_BYTES) return;
  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  cfg.n_threads = 1;
  ApxExec ex;
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  g_ran++;
  int rc = apx_exec_init(&ex, p, &cfg, &d);
  if (rc) {
    check_error("apx_exec_init", rc, &d, 0);
    if (g_show) fprintf(stderr, "run refused: %s\n", d.msg);
    g_run_failed++;
    return;
  }
  for (int32_t i = 0; i < p->n_inputs && rc == 0; i++) {
    const ApxPlanBuffer *b = &p->bufs[p->inputs[i]];
    void *zeros = calloc((size_t)b->bytes + 1, 1);
    if (!zeros) abort();
    rc = apx_exec_write(&ex, p->inputs[i], zeros, (size_t)b->bytes, &d);
    free(zeros);
  }
  for (int s = 0; s < 3 && rc == 0; s++) rc = apx_exec_run(&ex, (ApxSection)s, &d);
  if (rc) {
    check_error("a step", rc, &d, 0);
    if (g_show) fprintf(stderr, "run failed: %s\n", d.msg);
    g_run_failed++;
  }
  apx_exec_free(&ex);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ftruncate(g_fd, 0) || (size && pwrite(g_fd, data, size, 0) != (ssize_t)size)) abort();
  ApxPlan p;
  apx_plan_init(&p);
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  int rc = apx_plan_read(&p, g_path, &d);
  if (rc) {
    check_error("apx_plan_read", rc, &d, 1);
    if (g_show) fprintf(stderr, "refused: %s\n", d.msg);
    if (strstr(d.msg, ": invalid plan: kernel ") && !strstr(d.msg, "refers to buffer") &&
        !strstr(d.msg, "unknown op") && !strstr(d.msg, "cannot run") && !strstr(d.msg, "attributes") &&
        !strstr(d.msg, "section") && !strstr(d.msg, "argument count") && !strstr(d.msg, "compute dtype"))
      g_refused_kernels++;
    else if (strstr(d.msg, ": invalid plan: "))
      g_refused_refs++;
    else
      g_refused_file++;
  } else {
    g_loaded++;
    apx_plan_dump(&p, g_null);
    run_step(&p);
  }
  apx_plan_free(&p);
  return 0;
}

/* ---- the structure-aware mutator ------------------------------------------------------- */

static uint32_t rnd(uint32_t *s) { /* xorshift32 */
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static int64_t interesting(uint32_t *s) {
  static const int64_t v[] = {0, 1, 2, 3, 4, 7, 8, 16, 63, 64, 65, 255, 256, 1024, 4096, -1, -2,
                              INT32_MAX, INT32_MIN, (int64_t)1 << 32, INT64_MAX, INT64_MIN};
  return rnd(s) % 4 ? v[rnd(s) % (sizeof v / sizeof *v)] : (int64_t)(rnd(s) % 200) - 20;
}

static const int32_t k_dtypes[] = {1, 1, 10, 16, 11, 7, 6, 9, 2, 3, 4, 5, 12, 13, 0, 8, 99};

static int32_t some_buffer(const Apexc__Plan *m, uint32_t *s) {
  int32_t n = (int32_t)m->n_buffers;
  uint32_t r = rnd(s) % 16;
  if (r == 0) return -1;
  if (r == 1) return n + (int32_t)(rnd(s) % 3);
  return n ? (int32_t)(rnd(s) % (uint32_t)n) : -1;
}

/* One edit of a buffer's fields; bytes kept consistent with shape x dtype most of the time so
 * the edit reaches the kernel checks. */
static void edit_buffer(ApxPlanEdit *e, uint32_t *s) {
  Apexc__Plan *m = e->meta;
  if (!m->n_buffers) return;
  size_t bi = rnd(s) % m->n_buffers;
  Apexc__Buffer *b = m->buffers[bi];
  int64_t old_off = b->offset;
  int32_t old_region = b->region;
  static const uint8_t pick[16] = {0, 0, 0, 8, 8, 8, 2, 2, 6, 6, 1, 3, 4, 5, 7, 9};
  switch (pick[rnd(s) % 16]) { /* weighted towards edits that keep the format valid */
    case 0: { /* mostly a dtype of the same element size: the byte checks still pass */
      static const int32_t same[4][4] = {{9, 2, 3, 9}, {10, 16, 5, 4}, {1, 6, 12, 1}, {7, 11, 13, 7}};
      int row = -1;
      for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
          if (same[r][c] == b->dtype) row = r;
      b->dtype = row >= 0 && rnd(s) % 4 ? same[row][rnd(s) % 4]
                                        : k_dtypes[rnd(s) % (sizeof k_dtypes / sizeof *k_dtypes)];
      break;
    }
    case 1: b->data_offset = (uint64_t)(rnd(s) % 16) * 64; break;
    case 2: { /* mostly an aligned offset inside its region */
      int64_t cap = !m->memory ? 0 : b->region == 1 ? m->memory->arena_bytes : m->memory->persistent_bytes;
      int64_t room;
      if (__builtin_sub_overflow(cap, b->bytes, &room)) room = 0;
      b->offset = rnd(s) % 4 && room > 0 ? (int64_t)((uint64_t)rnd(s) % ((uint64_t)room / 64 + 1)) * 64
                                         : interesting(s);
      break;
    }
    case 3: /* wrapping arithmetic: the mutator itself must not overflow */
      b->bytes = rnd(s) % 2 ? (int64_t)((uint64_t)b->bytes + rnd(s) % 9 - 4) : interesting(s);
      break;
    case 4: b->region = (int32_t)(rnd(s) % 4); break;
    case 5: b->kind = (int32_t)(rnd(s) % 6); break;
    case 6: b->alias_of = some_buffer(m, s); break;
    case 7: b->data_len = rnd(s) % 2 ? 0 : (uint64_t)interesting(s); break;
    case 8: { /* onto another buffer's bytes (of the same region: in bounds when it fits) */
      const Apexc__Buffer *o = m->buffers[rnd(s) % m->n_buffers];
      if (o->region == b->region || rnd(s) % 4 == 0) {
        b->offset = o->offset;
        b->region = o->region;
      }
      break;
    }
    case 9: b->alias_of = -1; break;
  }
  if (b->offset != old_off || b->region != old_region) {
    /* a moved buffer is no view of another any more; its own views move with it */
    b->alias_of = -1;
    for (size_t j = 0; j < m->n_buffers; j++)
      if (m->buffers[j]->alias_of == (int32_t)bi) {
        m->buffers[j]->offset =
            (int64_t)((uint64_t)m->buffers[j]->offset + (uint64_t)b->offset - (uint64_t)old_off);
        m->buffers[j]->region = b->region;
      }
  }
}

static void edit_dims(ApxPlanEdit *e, uint32_t *s) {
  Apexc__Plan *m = e->meta;
  if (!m->n_buffers) return;
  size_t i = rnd(s) % m->n_buffers;
  Apexc__Buffer *b = m->buffers[i];
  size_t rank = rnd(s) % 5;
  int64_t d[4];
  uint32_t how = rnd(s) % 4;
  uint64_t numel = 1;
  for (size_t k = 0; k < b->n_dims; k++) numel *= (uint64_t)b->dims[k]; /* wraps on absurd dims */
  if (how < 2 && numel <= (1u << 24)) { /* the same element count in another shape: every byte check still passes */
    int64_t n = (int64_t)numel;
    rank = 1 + rnd(s) % 4;
    for (size_t k = 0; k < rank; k++) d[k] = 1;
    for (int64_t f = 2; n > 1 && f <= n; f++)
      while (n % f == 0) {
        d[rnd(s) % rank] *= f;
        n /= f;
      }
    if (n == 0) d[rnd(s) % rank] = 0;
  } else if (how == 2 && b->n_dims) { /* one dim of the old shape, often smaller */
    rank = b->n_dims < 4 ? b->n_dims : 4;
    for (size_t k = 0; k < rank; k++) d[k] = b->dims[k];
    size_t k = rnd(s) % rank;
    d[k] = d[k] > 1 && rnd(s) % 2 ? d[k] - 1 : (int64_t)(rnd(s) % 17);
  } else {
    for (size_t k = 0; k < rank; k++) d[k] = rnd(s) % 8 ? (int64_t)(rnd(s) % 17) : interesting(s);
  }
  static const int64_t es[17] = {0, 4, 1, 1, 2, 2, 4, 8, 0, 1, 2, 8, 4, 8, 0, 0, 2};
  int64_t size = b->dtype >= 0 && b->dtype <= 16 ? es[b->dtype] : 0;
  apx_plan_edit_set_dims(e, i, d, rank, size);
  if (b->data_len && rnd(s) % 8) b->data_len = (uint64_t)b->bytes;
}

static void edit_kernel_args(ApxPlanEdit *e, uint32_t *s) {
  Apexc__Plan *m = e->meta;
  if (!m->n_kernels) return;
  Apexc__Kernel *k = m->kernels[rnd(s) % m->n_kernels];
  int outs = rnd(s) % 2;
  size_t *n = outs ? &k->n_outputs : &k->n_inputs;
  int32_t **v = outs ? &k->outputs : &k->inputs;
  switch (rnd(s) % 4) {
    case 0:
    case 1:
      if (*n) (*v)[rnd(s) % *n] = some_buffer(m, s);
      break;
    case 2: { /* one more argument */
      int32_t *w = realloc(*v, (*n + 1) * sizeof *w);
      if (!w) return;
      w[*n] = some_buffer(m, s);
      *v = w;
      (*n)++;
      break;
    }
    case 3:
      if (*n) (*n)--;
      break;
  }
}

/* One attribute field of k set to an interesting value (int32, int64 or a float). */
static void edit_attrs(Apexc__Kernel *k, uint32_t *s) {
  if (k->attrs.len < 4) return;
  size_t at = (rnd(s) % (k->attrs.len / 4)) * 4;
  int64_t v = interesting(s);
  if (at + 8 <= k->attrs.len && rnd(s) % 3 == 0) {
    memcpy(k->attrs.data + at, &v, 8);
    return;
  }
  int32_t v32 = (int32_t)v;
  if (rnd(s) % 4 == 0) {
    static const float f[] = {-1.0f, 0.0f, 0.5f, 2.5f, 1e30f, -1e-30f};
    memcpy(&v32, &f[rnd(s) % 6], 4);
  }
  memcpy(k->attrs.data + at, &v32, 4);
}

static void edit_kernel(ApxPlanEdit *e, uint32_t *s) {
  Apexc__Plan *m = e->meta;
  if (!m->n_kernels) return;
  size_t ki = rnd(s) % m->n_kernels;
  Apexc__Kernel *k = m->kernels[ki];
  switch (rnd(s) % 7) {
    case 0: { /* another op, with attribute bytes of its size */
      ApxOp op = (ApxOp)(1 + rnd(s) % (APX_OP_COUNT - 1));
      free(k->op);
      k->op = strdup(apx_op_name(op));
      size_t len = apx_op_info(op)->attrs_size;
      uint8_t *a = calloc(len + 1, 1);
      if (!a || !k->op) abort();
      if (k->attrs.data && k->attrs.len) memcpy(a, k->attrs.data, k->attrs.len < len ? k->attrs.len : len);
      free(k->attrs.data);
      k->attrs.data = a;
      k->attrs.len = len;
      break;
    }
    case 1:
    case 2:
    case 3: /* an attribute field: int32 or int64 sized */
      edit_attrs(k, s);
      break;
    case 4: apx_plan_edit_drop_kernel(e, ki); break;
    case 5: { /* swap with another kernel */
      size_t kj = rnd(s) % m->n_kernels;
      Apexc__Kernel *t = m->kernels[ki];
      m->kernels[ki] = m->kernels[kj];
      m->kernels[kj] = t;
      break;
    }
    case 6: k->section = (int32_t)(rnd(s) % 4); break;
  }
}

static void edit_plan(ApxPlanEdit *e, uint32_t *s) {
  Apexc__Plan *m = e->meta;
  switch (rnd(s) % 6) {
    case 0:
      if (m->n_inputs) m->inputs[rnd(s) % m->n_inputs] = some_buffer(m, s);
      break;
    case 1:
      if (m->n_inputs) m->n_inputs--;
      break;
    case 2:
      if (m->n_outputs) m->outputs[rnd(s) % m->n_outputs] = some_buffer(m, s);
      break;
    case 3: m->loss = some_buffer(m, s); break;
    case 4:
      if (m->memory) {
        int64_t v = rnd(s) % 2 ? (int64_t)(rnd(s) % 64) * 64 : interesting(s);
        if (rnd(s) % 2)
          m->memory->arena_bytes = v;
        else
          m->memory->persistent_bytes = v;
      }
      break;
    case 5:
      if (m->options) m->options->training = (int32_t)(rnd(s) % 2);
      break;
  }
}

static size_t emit(const uint8_t *f, size_t n, uint8_t *data, size_t max_size) {
  if (!f || n > max_size) return 0;
  memcpy(data, f, n);
  return n;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  uint32_t s = seed ? seed : 0x9e3779b9u;
  uint32_t mode = rnd(&s) % 16;
  ApxPlanEdit e;
  if (mode == 0 || apx_plan_edit_decode(&e, data, size) != 0)
    return LLVMFuzzerMutate(data, size, max_size); /* raw bytes: the header and checksum paths */
  size_t out = 0;
  if (mode == 1) { /* the metadata's bytes, checksum fixed: the protobuf parser and from_message */
    size_t len = apexc__plan__get_packed_size(e.meta), cap = len * 2 + 64;
    uint8_t *meta = malloc(cap);
    if (!meta) abort();
    apexc__plan__pack(e.meta, meta);
    len = LLVMFuzzerMutate(meta, len, cap);
    size_t n = 0;
    uint8_t *f = apx_plan_edit_assemble(meta, len, e.data, e.data_len, e.meta->format_version, &n);
    out = emit(f, n, data, max_size);
    free(f);
    free(meta);
  } else {
    int edits = rnd(&s) % 2 ? 1 : 2 + (int)(rnd(&s) % 2);
    for (int i = 0; i < edits; i++) {
      switch (rnd(&s) % 10) {
        case 0: edit_buffer(&e, &s); break;
        case 1:
        case 2: edit_dims(&e, &s); break;
        case 3:
        case 4: edit_kernel_args(&e, &s); break;
        case 5: edit_kernel(&e, &s); break;
        case 6: edit_plan(&e, &s); break;
        default: /* attribute values: the edits that most often still load and run */
          if (e.meta->n_kernels) edit_attrs(e.meta->kernels[rnd(&s) % e.meta->n_kernels], &s);
          break;
      }
    }
    size_t n = 0;
    uint8_t *f = apx_plan_edit_encode(&e, &n);
    out = emit(f, n, data, max_size);
    free(f);
  }
  apx_plan_edit_free(&e);
  return out ? out : LLVMFuzzerMutate(data, size, max_size);
}
