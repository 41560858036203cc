/* plan_write.c - the plan file writer (plan_write.h): a protobuf wire encoder for apexc.Plan
 * working from the ApxPlan arrays, and a staging sink that checksums and writes the file
 * front to back with holes for all-zero blocks.
 *
 * The encoder mirrors protobuf-c 1.4's packing of plan.proto (plan_test checks the bytes
 * against protobuf-c's own pack): fields in number order; a proto3 scalar left out when it is
 * zero (floats and doubles compared as numbers, so -0.0 too), a string when empty, bytes when
 * of length 0; int32 as a sign-extended varint, sint32 zigzag, float/double little-endian
 * fixed; repeated scalars packed (left out when empty); a submessage as its length then its
 * bytes, the length from a counting run of the same encoder. */
#include "plan/plan_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

typedef struct Sink {
  int fd;
  uint64_t pos; /* file offset of buf[0] */
  uint8_t *buf;
  size_t n;
  uint32_t crc; /* of everything put, from file offset APX_PLAN_HEADER_BYTES */
  int err;      /* errno of the first failed write, 0 */
} Sink;

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

/* n bytes at file offset s->pos (then advanced): whole 64 KiB blocks of zeros are skipped
 * (holes; the final ftruncate sizes the file), the rest written in as few calls as runs. */
static void write_sparse(Sink *s, const uint8_t *p, size_t n) {
  uint64_t off = s->pos;
  size_t run = 0, i = 0;
  while (i < n) {
    size_t e = i + (HOLE_BYTES - (size_t)((off + i) % HOLE_BYTES));
    if (e > n) e = n;
    if (e - i == HOLE_BYTES && block_is_zero(p + i)) {
      if (i > run) pwrite_all(s, p + run, i - run, off + run);
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
      s->pos += k; /* hole */
    }
    n -= k;
  }
}

/* ---- protobuf wire encoder ----------------------------------------------------------- */

/* s NULL: counts the bytes only (a submessage's length before its bytes). */
typedef struct Enc {
  Sink *s;
  uint64_t count;
} Enc;

static size_t varint_len(uint64_t v) { return 1 + (size_t)(63 - __builtin_clzll(v | 1)) / 7; }

static void e_varint(Enc *e, uint64_t v) {
  if (!e->s) {
    e->count += varint_len(v);
    return;
  }
  Sink *s = e->s;
  if (STAGE_BYTES - s->n < 10) sink_flush(s);
  uint8_t *b = s->buf + s->n;
  while (v >= 0x80) {
    *b++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *b++ = (uint8_t)v;
  s->n = (size_t)(b - s->buf);
}

static void e_raw(Enc *e, const void *p, size_t n) {
  if (e->s)
    sink_put(e->s, p, n);
  else
    e->count += n;
}

static void e_tag(Enc *e, uint32_t num, int type) { e_varint(e, ((uint64_t)num << 3) | (uint64_t)type); }

static uint64_t zigzag32(int32_t v) { return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)); }

static void f_u64(Enc *e, uint32_t num, uint64_t v) {
  if (!v) return;
  e_tag(e, num, 0);
  e_varint(e, v);
}
static void f_i32(Enc *e, uint32_t num, int32_t v) { f_u64(e, num, (uint64_t)(int64_t)v); }
static void f_i64(Enc *e, uint32_t num, int64_t v) { f_u64(e, num, (uint64_t)v); }
static void f_s32(Enc *e, uint32_t num, int32_t v) { f_u64(e, num, zigzag32(v)); }

static void f_float(Enc *e, uint32_t num, float v) {
  if (v == 0) return;
  uint32_t bits;
  memcpy(&bits, &v, 4);
  uint8_t b[4];
  apx_le_put_u32(b, bits);
  e_tag(e, num, 5);
  e_raw(e, b, 4);
}

static void f_double(Enc *e, uint32_t num, double v) {
  if (v == 0) return;
  uint64_t bits;
  memcpy(&bits, &v, 8);
  uint8_t b[8];
  apx_le_put_u64(b, bits);
  e_tag(e, num, 1);
  e_raw(e, b, 8);
}

static void f_bytes(Enc *e, uint32_t num, const void *p, size_t n) {
  if (!n) return;
  e_tag(e, num, 2);
  e_varint(e, n);
  e_raw(e, p, n);
}

static void f_str(Enc *e, uint32_t num, const char *s) {
  if (s) f_bytes(e, num, s, strlen(s));
}

/* packed repeated int32 (zig 0: sign-extended) or sint32 (zig 1) */
static void f_packed32(Enc *e, uint32_t num, const int32_t *v, int32_t n, int zig) {
  if (n <= 0) return;
  uint64_t len = 0;
  for (int32_t i = 0; i < n; i++) len += varint_len(zig ? zigzag32(v[i]) : (uint64_t)(int64_t)v[i]);
  e_tag(e, num, 2);
  e_varint(e, len);
  if (!e->s) {
    e->count += len;
    return;
  }
  for (int32_t i = 0; i < n; i++) e_varint(e, zig ? zigzag32(v[i]) : (uint64_t)(int64_t)v[i]);
}

static void f_packed_i64(Enc *e, uint32_t num, const int64_t *v, int32_t n) {
  if (n <= 0) return;
  uint64_t len = 0;
  for (int32_t i = 0; i < n; i++) len += varint_len((uint64_t)v[i]);
  e_tag(e, num, 2);
  e_varint(e, len);
  for (int32_t i = 0; i < n; i++) e_varint(e, (uint64_t)v[i]);
}

typedef void (*EncFn)(Enc *e, const ApxPlan *p, int32_t i);

/* Submessage field num: fn(p, i)'s bytes after their length. */
static void f_msg(Enc *e, uint32_t num, EncFn fn, const ApxPlan *p, int32_t i) {
  Enc c = {NULL, 0};
  fn(&c, p, i);
  e_tag(e, num, 2);
  e_varint(e, c.count);
  if (e->s)
    fn(e, p, i);
  else
    e->count += c.count;
}

/* ---- the messages of plan.proto -------------------------------------------------------- */

static void enc_options(Enc *e, const ApxPlan *p, int32_t unused) {
  (void)unused;
  const ApxPlanOptions *o = &p->opts;
  f_i32(e, 1, o->opt_level);
  f_i32(e, 2, (int32_t)o->half);
  f_i32(e, 3, (int32_t)o->cast_model_type);
  f_i32(e, 4, o->keep_batchnorm_fp32);
  f_i32(e, 5, o->master_weights);
  f_i32(e, 6, o->training);
  f_i32(e, 10, o->loss_scale_mode);
  f_float(e, 11, o->loss_scale);
  f_float(e, 12, o->min_loss_scale);
  f_float(e, 13, o->max_loss_scale);
  f_i32(e, 14, o->scale_window);
  f_i32(e, 15, o->hysteresis);
  f_float(e, 16, o->growth_factor);
  f_float(e, 17, o->backoff_factor);
  f_i32(e, 20, o->optimizer);
  f_float(e, 21, o->lr);
  f_float(e, 22, o->momentum);
  f_float(e, 23, o->beta1);
  f_float(e, 24, o->beta2);
  f_float(e, 25, o->eps);
  f_float(e, 26, o->weight_decay);
  f_i32(e, 27, o->nesterov);
  f_float(e, 28, o->clip_grad_norm);
  f_i32(e, 29, o->accumulate);
  f_i32(e, 30, o->warmup_steps);
  f_i32(e, 31, o->schedule);
  f_i64(e, 32, o->total_steps);
  f_u64(e, 33, o->seed);
  f_double(e, 40, o->bucket_mb);
  f_double(e, 41, o->first_bucket_mb);
  f_i32(e, 42, o->allreduce_fp32);
  f_float(e, 43, o->grad_predivide);
  f_i32(e, 44, o->sync_bn);
}

static void enc_buffer(Enc *e, const ApxPlan *p, int32_t i) {
  const ApxPlanBuffer *b = &p->bufs[i];
  f_i32(e, 1, i);
  f_str(e, 2, b->name);
  f_i32(e, 3, (int32_t)b->kind);
  f_u64(e, 4, b->flags);
  f_i32(e, 5, (int32_t)b->dtype);
  f_packed_i64(e, 6, b->dims, b->rank);
  f_i32(e, 7, (int32_t)b->region);
  f_i64(e, 8, b->offset);
  f_i64(e, 9, b->bytes);
  f_u64(e, 10, b->data_offset);
  f_u64(e, 11, b->data_len);
  f_s32(e, 12, b->alias_of);
  f_s32(e, 13, b->origin);
}

static void enc_kernel(Enc *e, const ApxPlan *p, int32_t k) {
  const ApxPlanKernel *kn = &p->kernels[k];
  f_str(e, 1, apx_op_name(kn->op));
  f_str(e, 2, kn->node);
  f_i32(e, 3, (int32_t)kn->section);
  f_i32(e, 4, (int32_t)kn->compute);
  f_bytes(e, 5, kn->attrs, apx_op_info(kn->op)->attrs_size);
  f_packed32(e, 6, kn->in, kn->n_in, 1);
  f_packed32(e, 7, kn->out, kn->n_out, 1);
}

static void enc_decision(Enc *e, const ApxPlan *p, int32_t i) {
  const ApxPlanDecision *dc = &p->decisions[i];
  f_str(e, 1, dc->node);
  f_str(e, 2, dc->op);
  f_i32(e, 3, (int32_t)dc->decision);
  f_i32(e, 4, dc->rule_code);
  f_str(e, 5, dc->rule);
  f_str(e, 6, dc->detail);
  f_i32(e, 7, dc->casts_added);
}

static void enc_bucket(Enc *e, const ApxPlan *p, int32_t i) {
  const ApxPlanBucket *bk = &p->buckets[i];
  f_i32(e, 1, bk->id);
  f_i32(e, 2, (int32_t)bk->dtype);
  f_packed32(e, 3, bk->members, bk->n_members, 0);
  f_i64(e, 4, bk->bytes);
  f_i32(e, 5, bk->ready_at);
}

static void enc_memory(Enc *e, const ApxPlan *p, int32_t unused) {
  (void)unused;
  f_i64(e, 1, p->mem.arena_bytes);
  f_i64(e, 2, p->mem.peak_live_bytes);
  f_i64(e, 3, p->mem.no_reuse_bytes);
  f_i64(e, 4, p->mem.persistent_bytes);
}

static void enc_blob(Enc *e, const ApxPlan *p, int32_t i) {
  f_str(e, 1, p->blobs[i].name);
  f_u64(e, 2, p->blobs[i].data_offset);
  f_u64(e, 3, p->blobs[i].data_len);
}

static void enc_derived(Enc *e, const ApxPlan *p, int32_t i) {
  f_i32(e, 1, i);
  f_i32(e, 2, p->bufs[i].init_from);
}

static void enc_plan(Enc *e, const ApxPlan *p) {
  f_u64(e, 1, p->format_version);
  f_u64(e, 2, p->attrs_abi);
  f_str(e, 3, p->producer);
  f_str(e, 4, p->model_name);
  f_u64(e, 5, p->model_crc32c);
  f_u64(e, 6, p->model_bytes);
  f_msg(e, 7, enc_options, p, 0);
  for (int32_t i = 0; i < p->n_bufs; i++) f_msg(e, 8, enc_buffer, p, i);
  for (int32_t k = 0; k < p->n_kernels; k++) f_msg(e, 9, enc_kernel, p, k);
  for (int32_t i = 0; i < p->n_decisions; i++) f_msg(e, 10, enc_decision, p, i);
  for (int32_t i = 0; i < p->n_buckets; i++) f_msg(e, 11, enc_bucket, p, i);
  f_packed32(e, 12, p->inputs, p->n_inputs, 0);
  f_packed32(e, 13, p->outputs, p->n_outputs, 0);
  f_s32(e, 14, p->loss);
  f_msg(e, 15, enc_memory, p, 0);
  f_u64(e, 16, p->data_bytes);
  for (int32_t i = 0; i < p->n_blobs; i++) f_msg(e, 17, enc_blob, p, i);
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (p->bufs[i].init_from >= 0) f_msg(e, 18, enc_derived, p, i);
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
  char *tmp_path = NULL;
  if (asprintf(&tmp_path, "%s.tmp.%ld", path, (long)getpid()) < 0)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  int32_t n = 0;
  Range *ord = data_ranges(p, &n);
  Sink s = {.fd = -1, .pos = APX_PLAN_HEADER_BYTES, .buf = malloc(STAGE_BYTES), .n = 0, .crc = 0, .err = 0};
  int rc = -1;
  const char *what = "write failed";
  if (!ord || !s.buf) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory writing the plan", path);
    goto out;
  }
  s.fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (s.fd < 0) {
    what = "cannot create the plan file";
    goto io_error;
  }
  Enc e = {&s, 0};
  enc_plan(&e, p);
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
