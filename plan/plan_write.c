/* plan_write.c - the plan file writer (plan_write.h): a protobuf wire encoder for apexc.Plan
 * working from the ApxPlan arrays, and a staging sink that checksums and writes the file
 * front to back with holes for all-zero blocks.
 *
 * The encoder mirrors protobuf-c 1.4's packing of plan.proto (plan_test checks the bytes
 * against protobuf-c's own pack): fields in number order; a proto3 scalar left out when it is
 * zero (floats and doubles compared as numbers, so -0.0 too), a string when empty, bytes when
 * of length 0; int32 as a sign-extended varint, sint32 zigzag, float/double little-endian
 * fixed; repeated scalars packed (left out when empty); a submessage as its length (the
 * shortest varint) then its bytes. */
#include "plan/plan_write.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ir/fileio.h"

/* ---- CRC32C of a concatenation -------------------------------------------------------- */

/* The CRC register as a GF(2) vector: appending zero bits is linear, a 32x32 matrix. */
static uint32_t gf2_apply(const uint32_t m[32], uint32_t v) {
  uint32_t s = 0;
  for (int i = 0; v; i++, v >>= 1)
    if (v & 1) s ^= m[i];
  return s;
}

static void gf2_square(uint32_t out[32], const uint32_t m[32]) {
  for (int i = 0; i < 32; i++) out[i] = gf2_apply(m, m[i]);
}

uint32_t apx_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (!len_b) return crc_a;
  uint32_t op[32], sq[32]; /* op: the register after one zero bit (reflected polynomial) */
  op[0] = 0x82F63B78u;
  for (int i = 1; i < 32; i++) op[i] = 1u << (i - 1);
  gf2_square(sq, op); /* two bits */
  gf2_square(op, sq); /* four bits */
  /* crc_a shifted over len_b zero bytes, by the binary digits of len_b */
  for (;;) {
    gf2_square(sq, op); /* one byte, then 4, 16, ... */
    if (len_b & 1) crc_a = gf2_apply(sq, crc_a);
    if (!(len_b >>= 1)) break;
    gf2_square(op, sq); /* 2, 8, 32, ... bytes */
    if (len_b & 1) crc_a = gf2_apply(op, crc_a);
    if (!(len_b >>= 1)) break;
  }
  return crc_a ^ crc_b;
}

/* ---- sink: staging buffer -> file --------------------------------------------------------- */

enum { STAGE_BYTES = 4 << 20, HOLE_BYTES = 64 << 10 };

/* ---- a plan file prepared while the compile runs (plan_write.h) ---------------------- */

static struct Prepared {
  char *path, *tmp_path;
  int fd;
  uint64_t hint, filled; /* bytes to fill with zeros; filled so far (read after the join) */
  atomic_int stop;
  int started;
  pthread_t thread;
} prepared = {.fd = -1};

/* An interrupted compile (SIGINT, SIGTERM, SIGHUP left at their default) removes the
 * prepared file before it dies: the handler unlinks the path and re-raises. */
static char signal_tmp_path[4096];
static volatile sig_atomic_t signal_tmp_set;
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction saved_actions[3];
static int saved_installed[3];

static void on_fatal_signal(int sig) {
  if (signal_tmp_set) unlink(signal_tmp_path);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void cleanup_on_signals(const char *tmp_path) {
  if (strlen(tmp_path) >= sizeof signal_tmp_path) return;
  memcpy(signal_tmp_path, tmp_path, strlen(tmp_path) + 1);
  signal_tmp_set = 1;
  for (int i = 0; i < 3; i++) {
    struct sigaction now;
    saved_installed[i] = 0;
    if (sigaction(cleanup_signals[i], NULL, &now) || now.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    saved_installed[i] = sigaction(cleanup_signals[i], &sa, &saved_actions[i]) == 0;
  }
}

static void no_cleanup_on_signals(void) {
  for (int i = 0; i < 3; i++)
    if (saved_installed[i]) sigaction(cleanup_signals[i], &saved_actions[i], NULL);
  memset(saved_installed, 0, sizeof saved_installed);
  signal_tmp_set = 0;
}

static void *fill_main(void *arg) {
  struct Prepared *o = arg;
  static const uint8_t zeros[1 << 20];
  while (o->filled < o->hint && !atomic_load_explicit(&o->stop, memory_order_relaxed)) {
    size_t k = o->hint - o->filled < sizeof zeros ? (size_t)(o->hint - o->filled) : sizeof zeros;
    ssize_t w = pwrite(o->fd, zeros, k, (off_t)o->filled);
    if (w <= 0) break; /* (EINTR or a full disk: the writer finds out for itself) */
    o->filled += (uint64_t)w;
  }
  return NULL;
}

void apx_plan_prepare_output(const char *path, uint64_t size_hint) {
  apx_plan_cancel_output();
  if (!path || !size_hint || apx_exists_not_regular(path)) return;
  struct Prepared *o = &prepared;
  o->path = strdup(path);
  if (!o->path || asprintf(&o->tmp_path, "%s.tmp.%ld", path, (long)getpid()) < 0) {
    free(o->path);
    o->path = o->tmp_path = NULL;
    return;
  }
  /* the handler before the file: a signal right after the file appears (a script that waits
   * for it, then stops the compile) still finds it removed */
  cleanup_on_signals(o->tmp_path);
  o->fd = open(o->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (o->fd < 0) { /* the writer says why when it tries */
    apx_plan_cancel_output();
    return;
  }
  o->hint = size_hint;
  o->filled = 0;
  atomic_store(&o->stop, 0);
  o->started = pthread_create(&o->thread, NULL, fill_main, o) == 0;
}

/* Stops and joins the filling. */
static void prepared_stop(struct Prepared *o) {
  atomic_store(&o->stop, 1);
  if (o->started) pthread_join(o->thread, NULL);
  o->started = 0;
}

void apx_plan_prepare_more(uint64_t size_hint) {
  struct Prepared *o = &prepared;
  if (!o->path || o->fd < 0 || size_hint <= o->hint) return;
  prepared_stop(o); /* (at most one more 1 MiB write) */
  o->hint = size_hint;
  atomic_store(&o->stop, 0);
  o->started = pthread_create(&o->thread, NULL, fill_main, o) == 0;
}

void apx_plan_cancel_output(void) {
  struct Prepared *o = &prepared;
  no_cleanup_on_signals(); /* (kept through a write that took the file: renamed, or removed) */
  if (!o->path) return;
  prepared_stop(o);
  if (o->fd >= 0) {
    close(o->fd);
    unlink(o->tmp_path);
  }
  free(o->path);
  free(o->tmp_path);
  o->path = o->tmp_path = NULL;
  o->fd = -1;
}

/* The prepared file for path, taken over by the writer (its zero-filled length in *filled),
 * or -1 (none prepared for path: the writer opens its own). */
static int take_prepared(const char *path, char **tmp_path, uint64_t *filled) {
  struct Prepared *o = &prepared;
  if (!o->path || strcmp(o->path, path)) return -1;
  prepared_stop(o);
  int fd = o->fd;
  *tmp_path = o->tmp_path;
  *filled = o->filled;
  free(o->path);
  o->path = o->tmp_path = NULL;
  o->fd = -1;
  return fd;
}

typedef struct Sink {
  int fd;
  uint64_t pos; /* file offset of buf[0] */
  uint8_t *buf;
  size_t n;
  uint32_t crc; /* of everything put, from file offset APX_PLAN_HEADER_BYTES */
  int err;      /* errno of the first failed write, 0 */
  uint64_t filled; /* the file's first bytes, zeros already (a prepared file): a hole there
                      is punched, not skipped */
  int mem;         /* a memory sink (apx_plan_ahead_step): buf (cap bytes) grows to hold
                      everything put; nothing goes to a file */
  size_t cap;
} Sink;

/* Room for n more bytes in a memory sink (s->err on failure). Its own mapping, grown by
 * mremap (pages move, nothing is copied), not the heap: in apexc a heap that grows past its
 * next 64 MiB step has all of that step mapped in (ir/prefault.h), for 14 MB of records on
 * the 100k-node chain; the first touch of each page is taken while the packing is waited for. */
static int mem_reserve(Sink *s, size_t n) {
  if (s->cap - s->n >= n) return 0;
  size_t nc = s->cap * 2 > s->n + n ? s->cap * 2 : s->n + n;
  if (nc < ((size_t)4 << 20)) nc = (size_t)4 << 20;
  void *q = s->buf ? mremap(s->buf, s->cap, nc, MREMAP_MAYMOVE)
                   : mmap(NULL, nc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (q == MAP_FAILED) {
    s->err = ENOMEM;
    return -1;
  }
  s->buf = q;
  s->cap = nc;
  return 0;
}

static int block_is_zero(const uint8_t *p) {
  uint64_t acc = 0;
  for (size_t i = 0; i < HOLE_BYTES; i += 64) { /* early out on the first non-zero line */
    uint64_t v[8];
    memcpy(v, p + i, sizeof v);
    acc = v[0] | v[1] | v[2] | v[3] | v[4] | v[5] | v[6] | v[7];
    if (acc) return 0;
  }
  return 1;
}

static void pwrite_all(Sink *s, const uint8_t *p, size_t n, uint64_t off) {
  while (n && !s->err) {
    ssize_t k = pwrite(s->fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n, (off_t)off);
    if (k < 0) {
      if (errno != EINTR) s->err = errno;
      continue;
    }
    p += k;
    n -= (size_t)k;
    off += (uint64_t)k;
  }
}

/* n bytes of zeros at file offset off left unwritten: a hole, the final ftruncate sizes the
 * file; where a prepared file holds zeros already, the hole is punched (best effort: the
 * bytes read as zeros either way). */
static void hole(Sink *s, uint64_t off, uint64_t n) {
  if (off >= s->filled) return;
  if (n > s->filled - off) n = s->filled - off;
  fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)n);
}

/* n bytes at file offset s->pos (then advanced): whole 64 KiB blocks of zeros are skipped
 * (holes), the rest written in as few calls as runs. */
static void write_sparse(Sink *s, const uint8_t *p, size_t n) {
  uint64_t off = s->pos;
  size_t run = 0, i = 0;
  while (i < n) {
    size_t e = i + (HOLE_BYTES - (size_t)((off + i) % HOLE_BYTES));
    if (e > n) e = n;
    if (e - i == HOLE_BYTES && block_is_zero(p + i)) {
      if (i > run) pwrite_all(s, p + run, i - run, off + run);
      hole(s, off + i, HOLE_BYTES);
      run = e;
    }
    i = e;
  }
  if (n > run) pwrite_all(s, p + run, n - run, off + run);
  s->pos += n;
}

static void sink_flush(Sink *s) {
  if (!s->n) return;
  s->crc = apx_crc32c(s->crc, s->buf, s->n);
  write_sparse(s, s->buf, s->n);
  s->n = 0;
}

static void sink_put(Sink *s, const void *p, size_t n) {
  if (s->mem) {
    if (!mem_reserve(s, n)) memcpy(s->buf + s->n, p, n), s->n += n;
    return;
  }
  if (n > STAGE_BYTES - s->n) {
    sink_flush(s);
    if (n >= STAGE_BYTES / 2) { /* large: straight from the caller's memory */
      s->crc = apx_crc32c(s->crc, p, n);
      write_sparse(s, p, n);
      return;
    }
  }
  memcpy(s->buf + s->n, p, n);
  s->n += n;
}

static void sink_zeros(Sink *s, uint64_t n) {
  static const uint8_t zeros[HOLE_BYTES];
  while (n) {
    size_t k = n > HOLE_BYTES ? HOLE_BYTES : (size_t)n;
    if (k <= STAGE_BYTES - s->n) {
      memset(s->buf + s->n, 0, k);
      s->n += k;
    } else {
      sink_flush(s);
      s->crc = apx_crc32c(s->crc, zeros, k);
      hole(s, s->pos, k);
      s->pos += k;
    }
    n -= k;
  }
}

/* ---- protobuf wire encoder ----------------------------------------------------------- */

/* Each message is written straight into the staging buffer by a body function after its tag
 * and a length slot sized for an upper bound of its length (made room for first), then the
 * length is filled in and, when it takes fewer bytes than the slot, the body moved up: one
 * pass, no capacity check per field. */

static size_t varint_len(uint64_t v) { return 1 + (size_t)(63 - __builtin_clzll(v | 1)) / 7; }

static inline uint8_t *p_varint(uint8_t *q, uint64_t v) {
  while (v >= 0x80) {
    *q++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *q++ = (uint8_t)v;
  return q;
}

static inline uint8_t *p_tag(uint8_t *q, uint32_t num, int type) {
  return p_varint(q, ((uint64_t)num << 3) | (uint64_t)type);
}

static inline uint64_t zigzag32(int32_t v) { return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)); }

static inline uint8_t *p_u64(uint8_t *q, uint32_t num, uint64_t v) {
  return v ? p_varint(p_tag(q, num, 0), v) : q;
}
static inline uint8_t *p_i32(uint8_t *q, uint32_t num, int32_t v) { return p_u64(q, num, (uint64_t)(int64_t)v); }
static inline uint8_t *p_i64(uint8_t *q, uint32_t num, int64_t v) { return p_u64(q, num, (uint64_t)v); }
static inline uint8_t *p_s32(uint8_t *q, uint32_t num, int32_t v) { return p_u64(q, num, zigzag32(v)); }

static uint8_t *p_float(uint8_t *q, uint32_t num, float v) {
  if (v == 0) return q;
  uint32_t bits;
  memcpy(&bits, &v, 4);
  q = p_tag(q, num, 5);
  apx_le_put_u32(q, bits);
  return q + 4;
}

static uint8_t *p_double(uint8_t *q, uint32_t num, double v) {
  if (v == 0) return q;
  uint64_t bits;
  memcpy(&bits, &v, 8);
  q = p_tag(q, num, 1);
  apx_le_put_u64(q, bits);
  return q + 8;
}

static inline uint8_t *p_bytes(uint8_t *q, uint32_t num, const void *b, size_t n) {
  if (!n) return q;
  q = p_varint(p_tag(q, num, 2), n);
  memcpy(q, b, n);
  return q + n;
}

static inline uint8_t *p_str(uint8_t *q, uint32_t num, const char *s) {
  return s ? p_bytes(q, num, s, strlen(s)) : q;
}

static size_t str_len(const char *s) { return s ? strlen(s) : 0; }

/* packed repeated int32 (zig 0: sign-extended varints) or sint32 (zig 1) */
static uint8_t *p_packed32(uint8_t *q, uint32_t num, const int32_t *v, int32_t n, int zig) {
  if (n <= 0) return q;
  uint64_t len = 0;
  for (int32_t i = 0; i < n; i++) len += varint_len(zig ? zigzag32(v[i]) : (uint64_t)(int64_t)v[i]);
  q = p_varint(p_tag(q, num, 2), len);
  if (zig)
    for (int32_t i = 0; i < n; i++) q = p_varint(q, zigzag32(v[i]));
  else
    for (int32_t i = 0; i < n; i++) q = p_varint(q, (uint64_t)(int64_t)v[i]);
  return q;
}

static uint8_t *p_packed_i64(uint8_t *q, uint32_t num, const int64_t *v, int32_t n) {
  if (n <= 0) return q;
  uint64_t len = 0;
  for (int32_t i = 0; i < n; i++) len += varint_len((uint64_t)v[i]);
  q = p_varint(p_tag(q, num, 2), len);
  for (int32_t i = 0; i < n; i++) q = p_varint(q, (uint64_t)v[i]);
  return q;
}

typedef uint8_t *(*BodyFn)(uint8_t *q, const ApxPlan *p, int32_t i);

/* Room for n more bytes at s->buf + s->n, NULL when n exceeds the staging buffer. */
static uint8_t *sink_room(Sink *s, size_t n) {
  if (s->mem) return mem_reserve(s, n) ? NULL : s->buf + s->n;
  if (n > STAGE_BYTES - s->n) sink_flush(s);
  return n <= STAGE_BYTES - s->n ? s->buf + s->n : NULL;
}

/* fn's bytes (at most ub of them), top-level fields (no tag or length) when num is 0. */
static void put_body(Sink *s, uint32_t num, BodyFn fn, const ApxPlan *p, int32_t i, size_t ub) {
  size_t slot = num ? varint_len(ub) : 0, need = ub + slot + 10;
  uint8_t *heap = NULL, *q = sink_room(s, need);
  if (!q && !(q = heap = malloc(need))) {
    s->err = ENOMEM;
    return;
  }
  uint8_t *start = q;
  if (num) q = p_tag(q, num, 2);
  uint8_t *body = q + slot, *end = fn(body, p, i);
  if (num) {
    size_t len = (size_t)(end - body), k = varint_len(len);
    p_varint(q, len);
    if (k < slot) memmove(q + k, body, len);
    end = q + k + len;
  }
  if (heap) {
    sink_put(s, heap, (size_t)(end - heap));
    free(heap);
  } else {
    s->n += (size_t)(end - start);
  }
}

/* ---- the messages of plan.proto -------------------------------------------------------- */

enum { FIELD_MAX = 11 }; /* bytes of a scalar field at most: tag, 10-byte varint */

static uint8_t *b_options(uint8_t *q, const ApxPlan *p, int32_t unused) {
  (void)unused;
  const ApxPlanOptions *o = &p->opts;
  q = p_i32(q, 1, o->opt_level);
  q = p_i32(q, 2, (int32_t)o->half);
  q = p_i32(q, 3, (int32_t)o->cast_model_type);
  q = p_i32(q, 4, o->keep_batchnorm_fp32);
  q = p_i32(q, 5, o->master_weights);
  q = p_i32(q, 6, o->training);
  q = p_i32(q, 10, o->loss_scale_mode);
  q = p_float(q, 11, o->loss_scale);
  q = p_float(q, 12, o->min_loss_scale);
  q = p_float(q, 13, o->max_loss_scale);
  q = p_i32(q, 14, o->scale_window);
  q = p_i32(q, 15, o->hysteresis);
  q = p_float(q, 16, o->growth_factor);
  q = p_float(q, 17, o->backoff_factor);
  q = p_i32(q, 20, o->optimizer);
  q = p_float(q, 21, o->lr);
  q = p_float(q, 22, o->momentum);
  q = p_float(q, 23, o->beta1);
  q = p_float(q, 24, o->beta2);
  q = p_float(q, 25, o->eps);
  q = p_float(q, 26, o->weight_decay);
  q = p_i32(q, 27, o->nesterov);
  q = p_float(q, 28, o->clip_grad_norm);
  q = p_i32(q, 29, o->accumulate);
  q = p_i32(q, 30, o->warmup_steps);
  q = p_i32(q, 31, o->schedule);
  q = p_i64(q, 32, o->total_steps);
  q = p_u64(q, 33, o->seed);
  q = p_double(q, 40, o->bucket_mb);
  q = p_double(q, 41, o->first_bucket_mb);
  q = p_i32(q, 42, o->allreduce_fp32);
  q = p_float(q, 43, o->grad_predivide);
  q = p_i32(q, 44, o->sync_bn);
  return q;
}
enum { OPTIONS_MAX = 40 * FIELD_MAX };

static uint8_t *b_buffer(uint8_t *q, const ApxPlan *p, int32_t i) {
  const ApxPlanBuffer *b = &p->bufs[i];
  q = p_i32(q, 1, i);
  q = p_str(q, 2, b->name);
  q = p_i32(q, 3, (int32_t)b->kind);
  q = p_u64(q, 4, b->flags);
  q = p_i32(q, 5, (int32_t)b->dtype);
  q = p_packed_i64(q, 6, b->dims, b->rank);
  q = p_i32(q, 7, (int32_t)b->region);
  q = p_i64(q, 8, b->offset);
  q = p_i64(q, 9, b->bytes);
  q = p_u64(q, 10, b->data_offset);
  q = p_u64(q, 11, b->data_len);
  q = p_s32(q, 12, b->alias_of);
  q = p_s32(q, 13, b->origin);
  return q;
}
static size_t buffer_max(const ApxPlanBuffer *b) {
  return str_len(b->name) + (12 + 1) * FIELD_MAX + (size_t)(b->rank > 0 ? b->rank : 0) * 10;
}

static uint8_t *b_kernel(uint8_t *q, const ApxPlan *p, int32_t k) {
  const ApxPlanKernel *kn = &p->kernels[k];
  q = p_str(q, 1, apx_op_name(kn->op));
  q = p_str(q, 2, kn->node);
  q = p_i32(q, 3, (int32_t)kn->section);
  q = p_i32(q, 4, (int32_t)kn->compute);
  q = p_bytes(q, 5, kn->attrs, apx_op_info(kn->op)->attrs_size);
  q = p_packed32(q, 6, kn->in, kn->n_in, 1);
  q = p_packed32(q, 7, kn->out, kn->n_out, 1);
  return q;
}
static size_t kernel_max(const ApxPlanKernel *kn) {
  return str_len(apx_op_name(kn->op)) + str_len(kn->node) + apx_op_info(kn->op)->attrs_size +
         7 * FIELD_MAX + 5 * (size_t)((kn->n_in > 0 ? kn->n_in : 0) + (kn->n_out > 0 ? kn->n_out : 0));
}

static uint8_t *b_decision(uint8_t *q, const ApxPlan *p, int32_t i) {
  const ApxPlanDecision *dc = &p->decisions[i];
  q = p_str(q, 1, dc->node);
  q = p_str(q, 2, dc->op);
  q = p_i32(q, 3, (int32_t)dc->decision);
  q = p_i32(q, 4, dc->rule_code);
  q = p_str(q, 5, dc->rule);
  q = p_str(q, 6, dc->detail);
  q = p_i32(q, 7, dc->casts_added);
  return q;
}
static size_t decision_max(const ApxPlanDecision *dc) {
  return str_len(dc->node) + str_len(dc->op) + str_len(dc->rule) + str_len(dc->detail) + 7 * FIELD_MAX;
}

static uint8_t *b_bucket(uint8_t *q, const ApxPlan *p, int32_t i) {
  const ApxPlanBucket *bk = &p->buckets[i];
  q = p_i32(q, 1, bk->id);
  q = p_i32(q, 2, (int32_t)bk->dtype);
  q = p_packed32(q, 3, bk->members, bk->n_members, 0);
  q = p_i64(q, 4, bk->bytes);
  q = p_i32(q, 5, bk->ready_at);
  return q;
}

static uint8_t *b_memory(uint8_t *q, const ApxPlan *p, int32_t unused) {
  (void)unused;
  q = p_i64(q, 1, p->mem.arena_bytes);
  q = p_i64(q, 2, p->mem.peak_live_bytes);
  q = p_i64(q, 3, p->mem.no_reuse_bytes);
  return p_i64(q, 4, p->mem.persistent_bytes);
}

static uint8_t *b_blob(uint8_t *q, const ApxPlan *p, int32_t i) {
  q = p_str(q, 1, p->blobs[i].name);
  q = p_u64(q, 2, p->blobs[i].data_offset);
  return p_u64(q, 3, p->blobs[i].data_len);
}

static uint8_t *b_derived(uint8_t *q, const ApxPlan *p, int32_t i) {
  q = p_i32(q, 1, i);
  return p_i32(q, 2, p->bufs[i].init_from);
}

/* Plan fields 1-6 */
static uint8_t *b_head(uint8_t *q, const ApxPlan *p, int32_t unused) {
  (void)unused;
  q = p_u64(q, 1, p->format_version);
  q = p_u64(q, 2, p->attrs_abi);
  q = p_str(q, 3, p->producer);
  q = p_str(q, 4, p->model_name);
  q = p_u64(q, 5, p->model_crc32c);
  return p_u64(q, 6, p->model_bytes);
}

/* Plan fields 12-16 */
static uint8_t *b_tail(uint8_t *q, const ApxPlan *p, int32_t unused) {
  (void)unused;
  q = p_packed32(q, 12, p->inputs, p->n_inputs, 0);
  q = p_packed32(q, 13, p->outputs, p->n_outputs, 0);
  q = p_s32(q, 14, p->loss);
  uint8_t *m = p_tag(q, 15, 2), *body = m + 1, *end = b_memory(body, p, 0); /* < 128 bytes */
  *m = (uint8_t)(end - body);
  return p_u64(end, 16, p->data_bytes);
}

/* The strings of a record lie apart from it (in the graph's arena): each is prefetched AHEAD
 * records before its turn, so that its cache miss overlaps the records between. */
enum { AHEAD = 16 };

static void put_kernel(Sink *s, const ApxPlan *p, int32_t k) {
  if (k + AHEAD < p->n_kernels) {
    __builtin_prefetch(p->kernels[k + AHEAD].node);
    __builtin_prefetch(p->kernels[k + AHEAD].in);
  }
  put_body(s, 9, b_kernel, p, k, kernel_max(&p->kernels[k]));
}

static void put_decision(Sink *s, const ApxPlan *p, int32_t i) {
  if (i + AHEAD < p->n_decisions) {
    __builtin_prefetch(p->decisions[i + AHEAD].node);
    __builtin_prefetch(p->decisions[i + AHEAD].detail);
  }
  put_body(s, 10, b_decision, p, i, decision_max(&p->decisions[i]));
}

void apx_plan_ahead_init(ApxPlanAhead *a) { memset(a, 0, sizeof *a); }

void apx_plan_ahead_free(ApxPlanAhead *a) {
  if (a->buf) munmap(a->buf, a->cap);
  memset(a, 0, sizeof *a);
}

int apx_plan_ahead_step(ApxPlanAhead *a, const ApxPlan *p, int32_t max) {
  if (a->done) return 1;
  Sink s = {.fd = -1, .buf = a->buf, .n = a->n, .mem = 1, .cap = a->cap};
  for (int32_t r = 0; r < max && !s.err; r++) {
    if (a->n_kernels == p->n_kernels && a->n_decisions == p->n_decisions) break;
    if (a->n_kernels < p->n_kernels)
      put_kernel(&s, p, a->n_kernels++);
    else
      put_decision(&s, p, a->n_decisions++);
  }
  a->buf = s.buf, a->n = s.n, a->cap = s.cap;
  if (s.err) { /* out of memory: nothing ahead, the write encodes every record itself */
    apx_plan_ahead_free(a);
    a->done = 1;
    return 1;
  }
  a->done = a->n_kernels == p->n_kernels && a->n_decisions == p->n_decisions;
  return a->done;
}

static void encode_plan(Sink *s, const ApxPlan *p, const ApxPlanAhead *ahead) {
  put_body(s, 0, b_head, p, 0, str_len(p->producer) + str_len(p->model_name) + 6 * FIELD_MAX);
  put_body(s, 7, b_options, p, 0, OPTIONS_MAX);
  for (int32_t i = 0; i < p->n_bufs; i++) {
    if (i + AHEAD < p->n_bufs) __builtin_prefetch(p->bufs[i + AHEAD].name);
    put_body(s, 8, b_buffer, p, i, buffer_max(&p->bufs[i]));
  }
  /* the records encoded ahead: the first kernels, and decisions only once every kernel was */
  int32_t k0 = ahead ? ahead->n_kernels : 0, i0 = ahead ? ahead->n_decisions : 0;
  if (ahead && ahead->n) sink_put(s, ahead->buf, ahead->n);
  for (int32_t k = k0; k < p->n_kernels; k++) put_kernel(s, p, k);
  for (int32_t i = i0; i < p->n_decisions; i++) put_decision(s, p, i);
  for (int32_t i = 0; i < p->n_buckets; i++)
    put_body(s, 11, b_bucket, p, i, 5 * FIELD_MAX + 5 * (size_t)(p->buckets[i].n_members > 0 ? p->buckets[i].n_members : 0));
  put_body(s, 0, b_tail, p, 0,
           10 * FIELD_MAX + 5 * (size_t)((p->n_inputs > 0 ? p->n_inputs : 0) + (p->n_outputs > 0 ? p->n_outputs : 0)));
  for (int32_t i = 0; i < p->n_blobs; i++) put_body(s, 17, b_blob, p, i, str_len(p->blobs[i].name) + 3 * FIELD_MAX);
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (p->bufs[i].init_from >= 0) put_body(s, 18, b_derived, p, i, 2 * FIELD_MAX);
}

/* ---- the file ------------------------------------------------------------------------ */

static uint64_t align_up(uint64_t x) { return (x + APX_PLAN_ALIGN - 1) & ~(uint64_t)(APX_PLAN_ALIGN - 1); }

typedef struct Range {
  uint64_t off, len;
  const void *data;
  const char *name;
} Range;

static int range_cmp(const void *a, const void *b) {
  const Range *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* The data section's byte ranges (buffers, then blobs) in offset order; NULL when out of
 * memory. */
static Range *data_ranges(const ApxPlan *p, int32_t *n_out) {
  Range *ord = malloc(((size_t)p->n_bufs + (size_t)p->n_blobs + 1) * sizeof *ord);
  if (!ord) return NULL;
  int32_t n = 0, sorted = 1;
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (p->bufs[i].data_len)
      ord[n++] = (Range){p->bufs[i].data_offset, p->bufs[i].data_len, p->bufs[i].data, p->bufs[i].name};
  for (int32_t i = 0; i < p->n_blobs; i++)
    if (p->blobs[i].data_len)
      ord[n++] = (Range){p->blobs[i].data_offset, p->blobs[i].data_len, p->blobs[i].data, p->blobs[i].name};
  for (int32_t i = 1; i < n && sorted; i++) sorted = ord[i - 1].off <= ord[i].off;
  if (!sorted) qsort(ord, (size_t)n, sizeof *ord, range_cmp); /* (stable enough: equal
                                                                 offsets overlap, written once) */
  *n_out = n;
  return ord;
}

int apx_plan_write_file(const ApxPlan *p, const char *path, ApxDiag *d) {
  return apx_plan_write_file_gated(p, path, NULL, NULL, d);
}

int apx_plan_write_file_gated(const ApxPlan *p, const char *path, int (*gate)(void *ctx, ApxDiag *d),
                              void *gate_ctx, ApxDiag *d) {
  return apx_plan_write_file_ahead(p, NULL, path, gate, gate_ctx, d);
}

int apx_plan_write_file_ahead(const ApxPlan *p, const ApxPlanAhead *ahead, const char *path,
                              int (*gate)(void *ctx, ApxDiag *d), void *gate_ctx, ApxDiag *d) {
  char *tmp_path = NULL;
  uint64_t filled = 0;
  int fd0 = take_prepared(path, &tmp_path, &filled);
  if (fd0 < 0 && asprintf(&tmp_path, "%s.tmp.%ld", path, (long)getpid()) < 0)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  int32_t n = 0;
  Range *ord = data_ranges(p, &n);
  Sink s = {.fd = fd0, .pos = APX_PLAN_HEADER_BYTES, .buf = malloc(STAGE_BYTES), .n = 0, .crc = 0, .err = 0,
            .filled = filled};
  int rc = -1;
  const char *what = "write failed";
  if (!ord || !s.buf) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory writing the plan", path);
    goto out;
  }
  if (s.fd < 0) s.fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (s.fd < 0) {
    what = "cannot create the plan file";
    goto io_error;
  }
  encode_plan(&s, p, ahead);
  if (s.err) {
    errno = s.err;
    goto io_error;
  }
  uint64_t meta_len = s.pos + s.n - APX_PLAN_HEADER_BYTES;
  uint64_t data_offset = align_up(APX_PLAN_HEADER_BYTES + meta_len);
  sink_zeros(&s, data_offset - APX_PLAN_HEADER_BYTES - meta_len);
  uint64_t cur = 0; /* position in the data section */
  for (int32_t i = 0; i < n; i++) {
    const Range *b = &ord[i];
    if (b->off < cur) continue; /* overlapping ranges: written by the earlier one */
    if (!b->data) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: '%s' has a data range but no bytes", path,
                          b->name);
      goto out;
    }
    sink_zeros(&s, b->off - cur);
    sink_put(&s, b->data, b->len);
    cur = b->off + b->len;
  }
  sink_zeros(&s, p->data_bytes - cur);
  sink_flush(&s);
  if (s.err) {
    errno = s.err;
    goto io_error;
  }
  if (ftruncate(s.fd, (off_t)s.pos)) {
    what = "cannot size the plan file";
    goto io_error;
  }
  uint8_t hb[APX_PLAN_HEADER_BYTES];
  apx_plan_header_encode(hb, p->format_version, meta_len, p->data_bytes, 0);
  uint32_t crc = apx_crc32c_combine(apx_crc32c(0, hb, sizeof hb), s.crc, s.pos - APX_PLAN_HEADER_BYTES);
  apx_plan_header_encode(hb, p->format_version, meta_len, p->data_bytes, crc);
  pwrite_all(&s, hb, sizeof hb, 0);
  if (s.err) {
    errno = s.err;
    goto io_error;
  }
  if (fsync(s.fd)) {
    what = "fsync failed";
    goto io_error;
  }
  int fd = s.fd;
  s.fd = -1;
  if (close(fd)) {
    what = "close failed";
    goto io_error;
  }
  if (gate && gate(gate_ctx, d)) goto out; /* rc -1: the temporary file is removed */
  if (rename(tmp_path, path)) {
    what = "cannot rename the temporary plan file into place";
    goto io_error;
  }
  apx_fsync_dir_of(path); /* make the rename durable */
  rc = 0;
  goto out;
io_error:
  rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: %s: %s", path, what, strerror(errno));
out:
  if (s.fd >= 0) close(s.fd);
  if (rc) unlink(tmp_path);
  free(tmp_path);
  free(s.buf);
  free(ord);
  return rc ? -1 : 0;
}
