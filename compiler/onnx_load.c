/* onnx_load.c - ONNX ModelProto -> IR (contract in onnx_load.h; DESIGN.md 2).
 *
 * One pass over the parsed protobuf in this order, so that the first error reported is the
 * most fundamental one: versions and opsets, then every node's domain and op, then
 * initializers, graph inputs, node outputs (all of them before any node is built, so an
 * out-of-order graph resolves), nodes with their inputs and attributes, value_info hints,
 * graph outputs and the loss, and finally the topological order. Everything the IR keeps
 * is copied into g->arena; the unpacked protobuf is freed before returning.
 *
 * Bad input never crashes: the wire format is pre-scanned to bound message nesting
 * (protobuf-c unpacks recursively), every count and size is checked before use, and
 * external data is read only from regular files inside the model's folder. */
#include "compiler/onnx_load.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/export_hazards.h"
#include "compiler/json.h"
#include "compiler/onnx_wire.h"
#include "kernels/half.h"
#include "ir/fileio.h"
#include "ir/loss_list.h"
#include "onnx.pb-c.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "onnx_load.c copies little-endian raw_data as host bytes: big-endian hosts need swaps"
#endif

#define IR_VERSION_MAX 10
#define OPSET_MAX 21
#define OPSET_DEFAULT_MIN 13 /* for messages: the range apexc accepts without flags */
#define OPSET_OLD_MIN 1      /* the range --allow-old-opset accepts */
#define OPSET_OLD_FULL 7     /* from here every op reads as apexc implements it; below it only
                                the ops of oldest_unchanged_opset() */
#define IR_OLD_MIN 3
#define MAX_ELEMENTS (INT64_C(1) << 40)
#define MAX_NESTING 100
#define READ_CHUNK ((size_t)64 << 20)

/* ---- messages ------------------------------------------------------------------------ */

static int err_at(ApxDiag *d, int code, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int err_at(ApxDiag *d, int code, const char *file, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return apx_diag_error(d, code, "%s: %s", file, msg);
}

static char *dims_str(char *buf, size_t cap, const int64_t *dims, int rank) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

/* ---- tensors ------------------------------------------------------------------------- */

/* What a tensor decode needs besides the proto: where to allocate and how to report. */
typedef struct TensorCtx {
  ApxArena *arena;
  ApxDiag *d;
  const char *file;     /* first word of messages */
  const char *base_dir; /* external data folder; NULL refuses external data */
  const ApxRawSpan *raw; /* the tensor's raw_data when the loader took it out of the bytes
                            protobuf-c unpacked (compiler/onnx_wire.h), else NULL */
} TensorCtx;

/* A large payload of the model in the arena: one copy into pages populated in one call
 * (MADV_POPULATE_WRITE, and the source's MADV_POPULATE_READ, where the kernel has them)
 * instead of a page fault per 4 KiB page as memcpy first touches them (a 650 MB model took
 * 160 000 faults, most of its load). The payload cannot keep the file's own pages: it lies
 * at any offset of the file, and a tensor's bytes must be aligned. NULL when out of memory. */
#define POPULATE_MIN ((size_t)1 << 20)
static void *copy_payload(ApxArena *arena, const uint8_t *src, size_t n) {
  uint8_t *dst = apx_arena_alloc_raw(arena, n);
  if (!dst) return NULL;
#ifdef MADV_POPULATE_WRITE
  long pg = sysconf(_SC_PAGESIZE);
  uintptr_t ps = pg > 0 ? (uintptr_t)pg : 4096;
  uintptr_t a = ((uintptr_t)dst + ps - 1) / ps * ps, e = ((uintptr_t)dst + n) / ps * ps;
  if (e > a) madvise((void *)a, (size_t)(e - a), MADV_POPULATE_WRITE); /* advice: may fail */
  uintptr_t sa = (uintptr_t)src / ps * ps, se = ((uintptr_t)src + n + ps - 1) / ps * ps;
  madvise((void *)sa, (size_t)(se - sa), MADV_POPULATE_READ);
#endif
  memcpy(dst, src, n);
  return dst;
}

/* protobuf-c allocator. Payloads of PB_BLOCK_MIN bytes or more (initializer raw_data, mostly)
 * are arena blocks (apx_arena_block_alloc), which decode_tensor hands to the graph's arena as
 * they are instead of copying them (a 650 MB model was copied three times); everything else
 * is bumped from a scratch arena: the unpacked model is hundreds of thousands of small
 * strings and messages, and it is dropped at once (pb_done) instead of freed piece by piece
 * (malloc and free_unpacked were a fifth of loading a 100k-node model). The 4 bytes before
 * each allocation say which it is. It remembers whether an allocation failed (unpack
 * returns NULL both for malformed input and for out-of-memory; only the first is bad input). */
typedef struct PbBlockHead { /* PB_HEADER bytes in front of a block's payload */
  struct PbBlockHead *next;  /* every block of this unpack, for pb_done */
  uint32_t pad, tag;
} PbBlockHead;
typedef struct PbAlloc {
  int oom;
  ApxArena scratch;
  PbBlockHead *blocks;
} PbAlloc;
enum { PB_HEADER = 16, PB_SMALL_HEADER = 8, PB_SMALL = 0x534d, PB_BLOCK = 0x424c,
       PB_DEAD = 0x4445, PB_ADOPTED = 0x4144 };
#define PB_BLOCK_MIN ((size_t)64 << 10)

static uint32_t *pb_tag(void *p) { return (uint32_t *)(void *)((uint8_t *)p - 4); }

static void *pb_alloc(void *data, size_t n) {
  PbAlloc *pa = data;
  if (n > SIZE_MAX - PB_HEADER) return NULL;
  uint8_t *p;
  if (n >= PB_BLOCK_MIN) {
    PbBlockHead *h = apx_arena_block_alloc(n + PB_HEADER);
    if (h) {
      h->next = pa->blocks;
      pa->blocks = h;
    }
    p = h ? (uint8_t *)h + PB_HEADER : NULL;
  } else { /* 8-byte aligned: what protobuf-c's messages need (their widest fields) */
    uint8_t *h = apx_arena_alloc_raw(&pa->scratch, n + PB_SMALL_HEADER);
    p = h ? h + PB_SMALL_HEADER : NULL;
  }
  if (!p) {
    pa->oom = 1;
    return NULL;
  }
  *pb_tag(p) = n >= PB_BLOCK_MIN ? PB_BLOCK : PB_SMALL;
  return p;
}

/* A block is freed by pb_done with the rest (an unpack that fails, or a bytes field given
 * twice, frees early), a small allocation with the scratch arena. */
static void pb_free(void *data, void *p) {
  (void)data;
  if (p && *pb_tag(p) == PB_BLOCK) *pb_tag(p) = PB_DEAD;
}

static void pb_init(PbAlloc *pa, ProtobufCAllocator *a) {
  memset(pa, 0, sizeof *pa);
  apx_arena_init(&pa->scratch);
  a->alloc = pb_alloc;
  a->free = pb_free;
  a->allocator_data = pa;
}

/* Frees everything unpack allocated but the blocks an arena adopted (take_bytes). */
static void pb_done(PbAlloc *pa) {
  for (PbBlockHead *h = pa->blocks, *next; h; h = next) {
    next = h->next;
    if (h->tag != PB_ADOPTED) apx_arena_block_free(h);
  }
  pa->blocks = NULL;
  apx_arena_free(&pa->scratch);
}

/* The unpacked bytes at p (from pb_alloc) for the arena to keep: no copy for a block. */
static void *take_bytes(ApxArena *a, const void *p, size_t n) {
  if (*pb_tag((void *)p) != PB_BLOCK) return apx_arena_memdup(a, p, n);
  *pb_tag((void *)p) = PB_ADOPTED;
  apx_arena_adopt(a, (uint8_t *)(uintptr_t)p - PB_HEADER);
  return (void *)p;
}

/* TERR(c, "fmt", what, args...): "<file>: <what>: <message>", bad input. */
#define TERR(c, ...) err_at((c)->d, APX_EXIT_BAD_INPUT, (c)->file, "%s: " __VA_ARGS__)
#define OOM(c, what) \
  err_at((c)->d, APX_EXIT_RUNTIME, (c)->file, "%s: out of memory", (what))

/* Non-negative decimal integer (external data offset/length); -1 if malformed. */
static int64_t parse_u63(const char *s) {
  if (!s || !*s) return -1;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (*s - '0');
  }
  return v;
}

static int has_dotdot_component(const char *p) {
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 2 && s[0] == '.' && s[1] == '.') return 1;
    if (!e) break;
    s = e + 1;
  }
  return 0;
}

/* Reads `bytes` bytes of external data for tensor t into a fresh arena buffer. */
static int read_external(TensorCtx *c, const Onnx__TensorProto *t, const char *what,
                         size_t bytes, void **out) {
  const char *loc = NULL, *off_s = NULL, *len_s = NULL;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = t->external_data[i];
    if (!e || !e->key) continue;
    if (strcmp(e->key, "location") == 0) loc = e->value;
    else if (strcmp(e->key, "offset") == 0) off_s = e->value;
    else if (strcmp(e->key, "length") == 0) len_s = e->value;
  }
  if (!loc || !*loc) return TERR(c, "external data has no location", what);
  if (!c->base_dir)
    return TERR(c, "external data '%s' cannot be read here (no model folder)", what, loc);
  if (loc[0] == '/')
    return TERR(c,
                "external data location '%s' is an absolute path (it must be relative to the "
                "model's folder)", what, loc);
  if (has_dotdot_component(loc))
    return TERR(c, "external data location '%s' escapes the model's folder", what, loc);
  int64_t offset = off_s ? parse_u63(off_s) : 0;
  int64_t length = len_s ? parse_u63(len_s) : -1;
  if (offset < 0)
    return TERR(c, "external data '%s': bad offset '%s'", what, loc, off_s);
  if (len_s && length < 0)
    return TERR(c, "external data '%s': bad length '%s'", what, loc, len_s);

  char *joined = NULL, *real_base = NULL, *real_file = NULL;
  int fd = -1, rc = -1;
  size_t nb = strlen(c->base_dir), nl = strlen(loc);
  joined = malloc(nb + nl + 2);
  if (!joined) {
    rc = OOM(c, what);
    goto done;
  }
  memcpy(joined, c->base_dir, nb);
  joined[nb] = '/';
  memcpy(joined + nb + 1, loc, nl + 1);
  real_base = realpath(c->base_dir, NULL);
  if (!real_base) {
    rc = TERR(c, "external data '%s': model folder '%s': %s", what, loc, c->base_dir,
              strerror(errno));
    goto done;
  }
  real_file = realpath(joined, NULL);
  if (!real_file) {
    rc = TERR(c, "cannot open external data file '%s': %s", what, loc, strerror(errno));
    goto done;
  }
  size_t rb = strlen(real_base);
  int inside = strncmp(real_file, real_base, rb) == 0 &&
               (real_file[rb] == '/' || (rb == 1 && real_base[0] == '/'));
  if (!inside) {
    rc = TERR(c, "external data location '%s' escapes the model's folder (resolves to %s)",
              what, loc, real_file);
    goto done;
  }
  /* O_NOFOLLOW: the checked path has no symlink in it; one swapped in since is refused. A
   * bounded read (ir/fileio.h): a FIFO or device is refused without blocking. */
  uint64_t usize;
  const char *why;
  fd = apx_open_regular(real_file, O_NOFOLLOW, &usize, &why);
  if (fd < 0 && why) {
    rc = TERR(c, "external data file '%s' is %s", what, loc, why);
    goto done;
  }
  if (fd < 0) {
    rc = TERR(c, "cannot open external data file '%s': %s", what, loc, strerror(errno));
    goto done;
  }
  int64_t size = (int64_t)usize;
  if (offset > size) {
    rc = TERR(c, "external data file '%s' has %" PRId64 " bytes, offset %" PRId64
              " is beyond its end", what, loc, size, offset);
    goto done;
  }
  if (length < 0) length = size - offset;
  if (length > size - offset) {
    rc = TERR(c, "external data file '%s' has %" PRId64 " bytes, offset %" PRId64
              " + length %" PRId64 " is beyond its end", what, loc, size, offset, length);
    goto done;
  }
  if ((uint64_t)length != (uint64_t)bytes) {
    int64_t dims[APX_MAX_RANK];
    char ds[128];
    for (size_t i = 0; i < t->n_dims && i < APX_MAX_RANK; i++) dims[i] = t->dims[i];
    rc = TERR(c, "external data '%s' holds %" PRId64 " bytes, dims %s (%s) need %zu bytes",
              what, loc, length, dims_str(ds, sizeof ds, dims, (int)t->n_dims),
              apx_dtype_name((ApxDType)t->data_type), bytes);
    goto done;
  }
  unsigned char *dst = apx_arena_alloc_raw(c->arena, bytes);
  if (!dst) {
    rc = OOM(c, what);
    goto done;
  }
  size_t got = 0;
  while (got < bytes) {
    size_t want = bytes - got < READ_CHUNK ? bytes - got : READ_CHUNK;
    ssize_t r = pread(fd, dst + got, want, (off_t)(offset + (int64_t)got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      rc = TERR(c, "reading external data file '%s': %s", what, loc,
                r < 0 ? strerror(errno) : "file is shorter than expected");
      goto done;
    }
    got += (size_t)r;
  }
  *out = dst;
  rc = 0;
done:
  if (fd >= 0) close(fd);
  free(joined);
  free(real_base);
  free(real_file);
  return rc;
}

/* "initializer '<name>'" into buf: the subject of decode_tensor's messages when what is NULL
 * (formatted only for a message: a model has many initializers). */
static const char *init_what(const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "initializer '%s'", name ? name : "");
  return buf;
}

/* Decodes a TensorProto into out (payload in c->arena). what: "node 'n' (Constant) attribute
 * 'value'" etc., or NULL for an initializer (named after t->name). */
static int decode_tensor(TensorCtx *c, const Onnx__TensorProto *t, const char *what_or_null,
                         ApxTensorConst *out) {
  char wbuf[600];
#define what (what_or_null ? what_or_null : init_what(t ? t->name : NULL, wbuf, sizeof wbuf))
  memset(out, 0, sizeof *out);
  if (!t) return TERR(c, "missing tensor", what);
  int32_t dt = t->has_data_type ? t->data_type : 0;
  if (dt == APX_DT_STRING) return TERR(c, "string tensors are not supported", what);
  if (dt == 0) return TERR(c, "tensor has no data type", what);
  if (!apx_dtype_is_supported(dt))
    return TERR(c, "tensor data type %d is not supported", what, (int)dt);
  if (t->n_dims > APX_MAX_RANK)
    return TERR(c, "rank %zu is more than %d", what, t->n_dims, APX_MAX_RANK);
  if (t->segment) return TERR(c, "segmented tensors are not supported", what);
  int rank = (int)t->n_dims;
  int64_t numel = 1;
  int absurd = 0;
  for (int i = 0; i < rank; i++) {
    int64_t v = t->dims[i];
    if (v < 0) return TERR(c, "negative dim %" PRId64 " at axis %d", what, v, i);
    out->dims[i] = v;
    if (v && numel > MAX_ELEMENTS / v) absurd = 1;
    else numel *= v;
  }
  char ds[160]; /* dims_str(ds, ...) where a message needs it */
  if (absurd || numel > MAX_ELEMENTS)
    return TERR(c, "absurd dims %s (more than 2^40 elements)", what,
                dims_str(ds, sizeof ds, out->dims, rank));
  out->dtype = (ApxDType)dt;
  out->rank = rank;
  size_t es = apx_dtype_size(out->dtype);
  size_t bytes = (size_t)numel * es;
  const char *tn = apx_dtype_name(out->dtype);

  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return read_external(c, t, what, bytes, &out->data);

  int has_raw = c->raw ? c->raw->present : t->has_raw_data;
  size_t raw_len = c->raw ? c->raw->len : t->raw_data.len;
  if (has_raw) {
    if (raw_len != bytes)
      return TERR(c, "raw_data has %zu bytes, dims %s (%s) need %zu bytes", what, raw_len,
                  dims_str(ds, sizeof ds, out->dims, rank), tn, bytes);
    if (!bytes)
      out->data = apx_arena_alloc(c->arena, 1);
    else if (c->raw && bytes >= POPULATE_MIN)
      out->data = copy_payload(c->arena, c->raw->data, bytes);
    else if (c->raw) /* in the model's bytes: the one copy */
      out->data = apx_arena_memdup(c->arena, c->raw->data, bytes);
    else
      out->data = take_bytes(c->arena, t->raw_data.data, bytes);
    return out->data ? 0 : OOM(c, what);
  }

  /* typed fields (TensorProto comments say which field carries which type) */
  size_t have;
  const char *field;
  switch (out->dtype) {
    case APX_DT_F32: have = t->n_float_data; field = "float_data"; break;
    case APX_DT_F64: have = t->n_double_data; field = "double_data"; break;
    case APX_DT_I64: have = t->n_int64_data; field = "int64_data"; break;
    case APX_DT_U32:
    case APX_DT_U64: have = t->n_uint64_data; field = "uint64_data"; break;
    default: have = t->n_int32_data; field = "int32_data"; break;
  }
  if (have != (size_t)numel)
    return TERR(c, "%s has %zu elements, dims %s (%s) need %" PRId64, what, field, have,
                dims_str(ds, sizeof ds, out->dims, rank), tn, numel);
  void *p = apx_arena_alloc_raw(c->arena, bytes);
  if (!p) return OOM(c, what);
  size_t n = (size_t)numel;
  switch (out->dtype) {
    case APX_DT_F32: if (n) memcpy(p, t->float_data, bytes); break;
    case APX_DT_F64: if (n) memcpy(p, t->double_data, bytes); break;
    case APX_DT_I64: if (n) memcpy(p, t->int64_data, bytes); break;
    case APX_DT_I32: if (n) memcpy(p, t->int32_data, bytes); break;
    case APX_DT_U64: if (n) memcpy(p, t->uint64_data, bytes); break;
    case APX_DT_U32:
      for (size_t i = 0; i < n; i++) ((uint32_t *)p)[i] = (uint32_t)t->uint64_data[i];
      break;
    case APX_DT_F16:
    case APX_DT_BF16:
    case APX_DT_U16:
    case APX_DT_I16: /* 16-bit patterns in the low half of each int32 */
      for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = (uint16_t)(uint32_t)t->int32_data[i];
      break;
    case APX_DT_U8:
    case APX_DT_I8:
    case APX_DT_BOOL:
      for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)(uint32_t)t->int32_data[i];
      break;
    default: return TERR(c, "tensor data type %d is not supported", what, (int)dt);
  }
  out->data = p;
  return 0;
#undef what
}

/* ---- wire-format pre-scan ------------------------------------------------------------ */

static int read_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v) {
  uint64_t r = 0;
  for (int s = 0; s < 64 && *i < len; s += 7) {
    uint8_t b = p[(*i)++];
    r |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) {
      *v = r;
      return 1;
    }
  }
  return 0;
}

/* How deep messages of type desc can nest below it by their schema: 0 without message
 * fields, NEST_ANY when they can nest without bound (NodeProto -> AttributeProto ->
 * GraphProto -> NodeProto ...). Memoized per descriptor; a cycle is found by the entry still
 * being computed. */
#define NEST_ANY INT_MAX
typedef struct NestMemo {
  const ProtobufCMessageDescriptor *desc[48];
  int depth[48]; /* -1 while being computed */
  int n;
} NestMemo;

static int schema_depth(NestMemo *m, const ProtobufCMessageDescriptor *desc) {
  for (int i = 0; i < m->n; i++)
    if (m->desc[i] == desc) return m->depth[i] < 0 ? NEST_ANY : m->depth[i];
  if (m->n == (int)(sizeof m->desc / sizeof m->desc[0])) return NEST_ANY;
  int me = m->n++, d = 0;
  m->desc[me] = desc;
  m->depth[me] = -1;
  for (unsigned k = 0; k < desc->n_fields && d != NEST_ANY; k++) {
    const ProtobufCFieldDescriptor *f = &desc->fields[k];
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    int sub = schema_depth(m, (const ProtobufCMessageDescriptor *)f->descriptor);
    d = sub == NEST_ANY ? NEST_ANY : sub + 1 > d ? sub + 1 : d;
  }
  m->depth[me] = d;
  return d;
}

/* 0 when submessages nest deeper than MAX_NESTING; malformed input passes (unpack rejects
 * it). Recursion depth is bounded by MAX_NESTING, total work by len; a submessage whose
 * schema cannot nest past the bound (TensorProto: every initializer) is not read. */
static int nesting_ok(NestMemo *m, const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                      size_t len, int depth) {
  if (depth > MAX_NESTING) return 0;
  size_t i = 0;
  while (i < len) {
    uint64_t key, v;
    if (!read_varint(p, len, &i, &key)) return 1;
    switch (key & 7) {
      case 0:
        if (!read_varint(p, len, &i, &v)) return 1;
        break;
      case 1:
        if (len - i < 8) return 1;
        i += 8;
        break;
      case 5:
        if (len - i < 4) return 1;
        i += 4;
        break;
      case 2: {
        if (!read_varint(p, len, &i, &v) || v > len - i) return 1;
        uint64_t num = key >> 3;
        const ProtobufCFieldDescriptor *f =
            num <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)num) : NULL;
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
          const ProtobufCMessageDescriptor *sub = f->descriptor;
          int below = schema_depth(m, sub);
          if ((below == NEST_ANY || depth + 1 + below > MAX_NESTING) &&
              !nesting_ok(m, sub, p + i, (size_t)v, depth + 1))
            return 0;
        }
        i += (size_t)v;
        break;
      }
      default: return 1;
    }
  }
  return 1;
}

/* ---- the loader ---------------------------------------------------------------------- */

typedef struct Loader {
  ApxGraph *g;
  ApxDiag *d;
  ApxOptions opt;
  TensorCtx tc;
  const Onnx__GraphProto *gp;
  const char **node_names; /* [n_node] display names ("<op>_<index>" when empty), while loading */
  ApxOp *node_ops;         /* [n_node] */
  char *dim_used;          /* [opt.n_dims] */
  const ApxJson *trainable; /* metadata_props "apexc.trainable" (array of strings) or NULL */
  const ApxRawSpan *raw;    /* [n_raw] initializers' raw_data taken out before unpacking */
  size_t n_raw;
  const void *in_buf;       /* the model's bytes while raw points into them (release_input) */
  uint8_t *in_owned;
  size_t in_map_len;
  struct {                  /* op_type -> op, remembered (apx_op_from_name scans the table) */
    const char *op_type;
    ApxOp op;
    int flow;               /* If, Loop or Scan */
    const char *kept;       /* op_type in the graph's arena, shared by its nodes */
  } op_memo[64];
} Loader;

/* op_type's memo entry, filled on first sight (FNV-1a hash of the name). */
static size_t op_memo_slot(Loader *L, const char *op_type) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)op_type; *p; p++) h = (h ^ *p) * 16777619u;
  size_t slot = h % (sizeof L->op_memo / sizeof L->op_memo[0]);
  if (!L->op_memo[slot].op_type || strcmp(L->op_memo[slot].op_type, op_type) != 0) {
    L->op_memo[slot].op_type = op_type;
    L->op_memo[slot].kept = NULL;
    L->op_memo[slot].op = apx_op_from_name(op_type);
    L->op_memo[slot].flow = strcmp(op_type, "If") == 0 || strcmp(op_type, "Loop") == 0 ||
                            strcmp(op_type, "Scan") == 0;
  }
  return slot;
}

/* The op named op_type; *flow 1 for a control-flow op type. */
static ApxOp op_from_name(Loader *L, const char *op_type, int *flow) {
  size_t slot = op_memo_slot(L, op_type);
  *flow = L->op_memo[slot].flow;
  return L->op_memo[slot].op;
}

/* op_type as the graph keeps it: one arena copy per op type, NULL when out of memory. */
static const char *kept_op_type(Loader *L, const char *op_type) {
  size_t slot = op_memo_slot(L, op_type);
  if (!L->op_memo[slot].kept) L->op_memo[slot].kept = apx_arena_strdup(&L->g->arena, op_type);
  return L->op_memo[slot].kept;
}

static int lerr(Loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lerr(Loader *L, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return apx_diag_error(L->d, APX_EXIT_BAD_INPUT, "%s: %s", L->g->file, msg);
}

static int loom(Loader *L) {
  return apx_diag_error(L->d, APX_EXIT_RUNTIME, "%s: out of memory loading the model",
                        L->g->file);
}

static const char *op_type_of(const Onnx__NodeProto *n) {
  return n->op_type && *n->op_type ? n->op_type : "?";
}

static int node_err(Loader *L, size_t k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int node_err(Loader *L, size_t k, const char *fmt, ...) {
  char msg[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const Onnx__NodeProto *n = L->gp->node[k];
  return apx_diag_error(L->d, APX_EXIT_BAD_INPUT, "%s: node '%s' (%s): %s", L->g->file,
                        L->node_names[k], op_type_of(n), msg);
}

static int count_v1_ops(void) {
  int n = 0;
  for (int op = 1; op < APX_OP_COUNT; op++)
    n += (apx_op_info((ApxOp)op)->flags & (APX_OPF_V1 | APX_OPF_FOLD)) != 0;
  return n;
}

static int is_ai_onnx(const char *domain) {
  return !domain || !*domain || strcmp(domain, "ai.onnx") == 0;
}

static int check_versions(Loader *L, const Onnx__ModelProto *m) {
  int64_t ir = m->has_ir_version ? m->ir_version : 0;
  L->g->ir_version = ir;
  if (ir < L->opt.ir_version_min)
    return lerr(L, "ir_version %" PRId64 " is too old (apexc accepts %d..%d; --allow-old-opset "
                "accepts %d..%d)", ir, 7, IR_VERSION_MAX, IR_OLD_MIN, 6);
  if (ir > IR_VERSION_MAX)
    apx_diag_warn(L->d, "%s: ir_version %" PRId64 " is newer than %d; reading it as %d",
                  L->g->file, ir, IR_VERSION_MAX, IR_VERSION_MAX);
  int found = 0;
  int64_t opset = 0;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *os = m->opset_import[i];
    if (!os || !is_ai_onnx(os->domain)) continue;
    if (!found || os->version > opset) opset = os->has_version ? os->version : 0;
    found = 1;
  }
  L->g->opset = opset;
  if (!found) return 0; /* reported after the nodes: a foreign domain is the better message */
  if (opset < L->opt.opset_min || opset > OPSET_MAX)
    return lerr(L, "unsupported opset %" PRId64 " (apexc accepts %d..%d; --allow-old-opset "
                "accepts %d..%d)", opset, OPSET_DEFAULT_MIN, OPSET_MAX, OPSET_OLD_MIN,
                OPSET_DEFAULT_MIN - 1);
  return 0;
}

static int is_graph_attr(const Onnx__AttributeProto *a) {
  return a && (a->g || a->n_graphs ||
               (a->has_type && (a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ||
                                a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS)));
}

/* One op type the model uses and apexc does not support: every node of it counted, the first
 * named (DESIGN.md 2: every unsupported op is reported at once). */
typedef struct Unsupported {
  const char *domain, *op_type;
  size_t first; /* node index */
  int count;
} Unsupported;

#define MAX_UNSUPPORTED_LINES 32

/* Models older than opset 7 (--allow-old-opset): the ops whose definition, as apexc
 * implements it, already held at that opset (later versions only added types), with the
 * opset it dates from; 0 for every other op, which changed since (broadcasting, is_test,
 * consumed_inputs, axis rules) and is refused there. */
static int oldest_unchanged_opset(ApxOp op) {
  switch (op) {
    case APX_OP_Identity: case APX_OP_Softplus: case APX_OP_Not: return 1;
    case APX_OP_Relu: case APX_OP_LeakyRelu: case APX_OP_Sigmoid: case APX_OP_Tanh:
    case APX_OP_Exp: case APX_OP_Log: case APX_OP_Sqrt: case APX_OP_Neg:
    case APX_OP_HardSigmoid: return 6;
    default: return 0;
  }
}

/* Why node k cannot be loaded ("" when it can). */
static const char *unsupported_why(Loader *L, size_t k, char *buf, size_t cap) {
  const Onnx__NodeProto *n = L->gp->node[k];
  if (!is_ai_onnx(n->domain)) {
    snprintf(buf, cap, "domain '%s' is not supported (apexc v1 reads ai.onnx ops only)",
             n->domain);
    return buf;
  }
  int flow;
  ApxOp op = op_from_name(L, n->op_type, &flow);
  for (size_t a = 0; a < n->n_attribute && !flow; a++) flow = is_graph_attr(n->attribute[a]);
  if (flow) return "control flow is not supported in v1";
  if (op == APX_OP_INVALID) {
    snprintf(buf, cap, "unknown op '%s' (apexc v1 supports %d ops: see apexc --list-ops)",
             n->op_type, count_v1_ops());
    return buf;
  }
  uint32_t fl = apx_op_info(op)->flags;
  if (fl & APX_OPF_TIER2) {
    snprintf(buf, cap, "not supported yet: %s is a tier-2 op", n->op_type);
    return buf;
  }
  if (!(fl & (APX_OPF_V1 | APX_OPF_FOLD))) {
    snprintf(buf, cap, "not supported yet: %s", n->op_type);
    return buf;
  }
  int64_t opset = L->g->opset;
  if (opset > 0 && opset < OPSET_OLD_FULL &&
      (oldest_unchanged_opset(op) == 0 || oldest_unchanged_opset(op) > opset)) {
    snprintf(buf, cap, "not supported yet: %s at opset %" PRId64 " (apexc reads it from opset %d; "
             "re-export with a newer opset)", n->op_type, opset, OPSET_OLD_FULL);
    return buf;
  }
  L->node_ops[k] = op;
  return "";
}

/* Names, domains and ops of every node, before any value is built. Every unsupported op type
 * is reported, one line each with its node count and first node, in graph order. */
static int check_nodes(Loader *L) {
  const Onnx__GraphProto *gp = L->gp;
  L->node_names = apx_arena_alloc(&L->g->arena, (gp->n_node + 1) * sizeof(char *));
  L->node_ops = apx_arena_alloc(&L->g->arena, (gp->n_node + 1) * sizeof(ApxOp));
  if (!L->node_names || !L->node_ops) return loom(L);
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    const char *ot = op_type_of(n);
    /* the unpacked name itself (alive while loading; apx_graph_add_node keeps a copy) */
    L->node_names[k] = n->name && *n->name ? n->name
                                           : apx_arena_printf(&L->g->arena, "%s_%zu", ot, k);
    if (!L->node_names[k]) return loom(L);
  }
  for (size_t k = 0; k < gp->n_node; k++)
    if (!gp->node[k]->op_type || !*gp->node[k]->op_type)
      return node_err(L, k, "node has no op_type");
  Unsupported *u = NULL;
  int n_u = 0, cap = 0;
  char why[600];
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    if (!*unsupported_why(L, k, why, sizeof why)) continue;
    const char *dom = is_ai_onnx(n->domain) ? "" : n->domain;
    int i = 0;
    while (i < n_u && !(strcmp(u[i].op_type, n->op_type) == 0 && strcmp(u[i].domain, dom) == 0))
      i++;
    if (i == n_u) {
      if (n_u == cap) {
        int nc = cap ? 2 * cap : 16;
        Unsupported *p = realloc(u, (size_t)nc * sizeof *u);
        if (!p) {
          free(u);
          return loom(L);
        }
        u = p;
        cap = nc;
      }
      u[n_u++] = (Unsupported){dom, n->op_type, k, 0};
    }
    u[i].count++;
  }
  for (int i = 0; i < n_u; i++) {
    size_t k = u[i].first;
    if (i == MAX_UNSUPPORTED_LINES) {
      apx_diag_error_append(L->d, APX_EXIT_BAD_INPUT, "%s: and %d more unsupported op types",
                            L->g->file, n_u - i);
      break;
    }
    const char *w = unsupported_why(L, k, why, sizeof why);
    apx_diag_error_append(L->d, APX_EXIT_BAD_INPUT, "%s: node '%s' (%s): %s (%s%d node%s)",
                          L->g->file, L->node_names[k], op_type_of(gp->node[k]), w,
                          u[i].count == 1 ? "" : "first of ", u[i].count,
                          u[i].count == 1 ? "" : "s");
  }
  free(u);
  return n_u ? -1 : 0;
}

/* dtype, rank, dims and symbolic dims of a TypeProto. tp NULL: unknown. Non-tensor types are
 * errors when strict, else *dt = -1 (caller skips the hint). */
static int parse_type(Loader *L, const Onnx__TypeProto *tp, const char *what, int strict,
                      int *dt, int32_t *rank, int64_t *dims, const char ***dim_params) {
  *dt = APX_DT_UNDEFINED;
  *rank = -1;
  *dim_params = NULL;
  if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) return 0;
  if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
    const char *kind = tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE   ? "sequence"
                       : tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE      ? "map"
                       : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? "optional"
                       : tp->value_case == ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE
                           ? "sparse tensor"
                           : "non-tensor";
    if (!strict) {
      *dt = -1;
      return 0;
    }
    return lerr(L, "%s: %s types are not supported (only dense tensors)", what, kind);
  }
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  if (!tt) return 0;
  if (tt->has_elem_type && tt->elem_type != 0) {
    if (tt->elem_type == APX_DT_STRING)
      return lerr(L, "%s: string tensors are not supported", what);
    if (!apx_dtype_is_supported(tt->elem_type))
      return lerr(L, "%s: tensor data type %d is not supported", what, (int)tt->elem_type);
    *dt = tt->elem_type;
  }
  const Onnx__TensorShapeProto *sh = tt->shape;
  if (!sh) return 0;
  if (sh->n_dim > APX_MAX_RANK)
    return lerr(L, "%s: rank %zu is more than %d", what, sh->n_dim, APX_MAX_RANK);
  int r = (int)sh->n_dim;
  int64_t numel = 1;
  for (int i = 0; i < r; i++) {
    const Onnx__TensorShapeProto__Dimension *dm = sh->dim[i];
    dims[i] = -1;
    if (!dm) continue;
    if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dm->dim_value < 0)
        return lerr(L, "%s: negative dim %" PRId64 " at axis %d", what, dm->dim_value, i);
      dims[i] = dm->dim_value;
    } else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               dm->dim_param && *dm->dim_param) {
      int bound = 0;
      for (int b = 0; b < L->opt.n_dims && !bound; b++)
        if (L->opt.dim_names[b] && strcmp(L->opt.dim_names[b], dm->dim_param) == 0) {
          dims[i] = L->opt.dim_values[b];
          L->dim_used[b] = 1;
          bound = 1;
        }
      if (!bound) {
        if (!*dim_params) {
          *dim_params = apx_arena_alloc(&L->g->arena, (size_t)r * sizeof(char *));
          if (!*dim_params) return loom(L);
        }
        (*dim_params)[i] = apx_arena_strdup(&L->g->arena, dm->dim_param);
        if (!(*dim_params)[i]) return loom(L);
      }
    }
    if (dims[i] > 0) {
      if (numel > MAX_ELEMENTS / dims[i]) {
        char ds[160];
        dims_str(ds, sizeof ds, dims, i + 1);
        return lerr(L, "%s: absurd dims %s... (more than 2^40 elements)", what, ds);
      }
      numel *= dims[i];
    }
  }
  *rank = r;
  return 0;
}

/* Applies a type hint (value_info, graph output) to a value that has none yet. */
static int apply_hint(Loader *L, int v, const Onnx__TypeProto *tp, const char *what, int strict) {
  int dt;
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
  const char **dp;
  if (parse_type(L, tp, what, strict, &dt, &rank, dims, &dp)) return -1;
  if (dt < 0) return 0;
  ApxValue *val = &L->g->vals[v];
  if (val->dtype == APX_DT_UNDEFINED) val->dtype = (ApxDType)dt;
  if (val->rank < 0 && rank >= 0) {
    apx_value_set_shape(val, rank, dims);
    val->dim_params = dp;
  }
  return 0;
}

/* Without --loss, the loss is the first graph output (DESIGN.md §2). A training graph with
 * several float scalar outputs computed from parameters (a second loss, or a metric) gets a
 * warning naming the one trained, so a second loss is never dropped silently. Runs after the
 * toposort; scalar means declared rank 0 in graph.output. */
static int warn_other_loss_candidates(Loader *L) {
  ApxGraph *g = L->g;
  int first = -1, second = -1;
  char *dep = calloc((size_t)g->n_vals + 1, 1); /* value computed from a parameter */
  if (!dep) return loom(L);
  for (int v = 0; v < g->n_vals; v++) dep[v] = g->vals[v].kind == APX_VAL_PARAM;
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    int any = 0;
    for (int i = 0; i < n->n_in; i++) any |= n->in[i] >= 0 && dep[n->in[i]];
    for (int i = 0; any && i < n->n_out; i++)
      if (n->out[i] >= 0) dep[n->out[i]] = 1;
  }
  for (int i = 0; i < g->n_outputs && second < 0; i++) {
    const ApxValue *val = &g->vals[g->outputs[i]];
    if (val->kind != APX_VAL_ACTIVATION || !dep[g->outputs[i]] || val->rank != 0 ||
        !apx_dtype_is_float(val->dtype))
      continue;
    if (first < 0) first = g->outputs[i];
    else if (first != g->outputs[i]) second = g->outputs[i];
  }
  free(dep);
  if (second < 0 || first != g->outputs[0]) return 0;
  apx_diag_warn(L->d, "%s: graph outputs '%s' and '%s' are both float scalars computed from "
                "parameters; training the first, '%s', as the loss (--loss NAME picks another; "
                "several losses are not supported yet: add them into one output)", g->file,
                g->vals[first].name, g->vals[second].name, g->vals[first].name);
  return 0;
}

/* metadata_props "apexc.trainable" (DESIGN.md 2): a JSON array of initializer names, the
 * parameters to train (written by scripts/apexc_torch.py). Sets L->trainable, or leaves it
 * NULL when the key is absent. */
static int read_trainable_list(Loader *L, const Onnx__ModelProto *m) {
  const Onnx__StringStringEntryProto *found = NULL;
  for (size_t i = 0; i < m->n_metadata_props; i++) {
    const Onnx__StringStringEntryProto *e = m->metadata_props[i];
    if (!e || !e->key || strcmp(e->key, APX_TRAINABLE_KEY) != 0) continue;
    if (found) return lerr(L, "metadata_props has '%s' twice", APX_TRAINABLE_KEY);
    found = e;
  }
  if (!found) return 0;
  const char *text = found->value ? found->value : "";
  char err[200];
  const ApxJson *j = apx_json_parse(&L->g->arena, text, strlen(text), err, sizeof err);
  if (!j)
    return lerr(L, "metadata_props '%s': not JSON (%s); expected an array of initializer "
                "names", APX_TRAINABLE_KEY, err);
  if (j->type != APX_JSON_ARRAY)
    return lerr(L, "metadata_props '%s' is a JSON %s; expected an array of initializer names",
                APX_TRAINABLE_KEY, apx_json_type_name(j->type));
  for (int i = 0; i < j->n; i++)
    if (j->items[i].type != APX_JSON_STRING || strlen(j->items[i].str) != j->items[i].len)
      return lerr(L, "metadata_props '%s': element %d is not a name (a JSON %s)",
                  APX_TRAINABLE_KEY, i,
                  j->items[i].type == APX_JSON_STRING ? "string with a NUL byte"
                                                      : apx_json_type_name(j->items[i].type));
  L->trainable = j;
  return 0;
}

/* With apexc.trainable: exactly the listed initializers are parameters, every other float
 * initializer is a constant (as --frozen makes it). A listed name that is not a float
 * initializer is an error. Runs after the initializers are values, before --frozen. */
static int apply_trainable_list(Loader *L, int n_init_vals) {
  ApxGraph *g = L->g;
  const ApxJson *j = L->trainable;
  char *listed = calloc((size_t)n_init_vals + 1, 1);
  if (!listed) return loom(L);
  int rc = 0;
  for (int i = 0; i < j->n && rc == 0; i++) {
    const char *nm = j->items[i].str;
    int v = apx_graph_find_value(g, nm);
    if (v < 0 || v >= n_init_vals) {
      int more = 0;
      for (int k = i + 1; k < j->n; k++) {
        int w = apx_graph_find_value(g, j->items[k].str);
        more += w < 0 || w >= n_init_vals;
      }
      char tail[64] = "";
      if (more) snprintf(tail, sizeof tail, " (and %d more listed names)", more);
      rc = lerr(L, "metadata_props '%s' names '%s', which is not an initializer of the model%s",
                APX_TRAINABLE_KEY, nm, tail);
    } else if (!apx_dtype_is_float(g->vals[v].dtype)) {
      rc = lerr(L, "metadata_props '%s' names '%s', a %s initializer: only float initializers "
                "can be trained", APX_TRAINABLE_KEY, nm, apx_dtype_name(g->vals[v].dtype));
    } else {
      listed[v] = 1;
    }
  }
  for (int v = 0; v < n_init_vals && rc == 0; v++) {
    ApxValue *val = &g->vals[v];
    if (val->kind == APX_VAL_PARAM && !listed[v]) {
      val->kind = APX_VAL_CONST;
      val->flags |= APX_VALF_FROZEN;
    }
  }
  free(listed);
  return rc;
}

/* The model's bytes, once nothing points into them (load_buffer's buf_owned / map_len). */
static void release_input(Loader *L) {
  free(L->in_owned);
  if (L->in_map_len) munmap((void *)(uintptr_t)L->in_buf, L->in_map_len);
  L->in_buf = NULL, L->in_owned = NULL, L->in_map_len = 0;
  L->raw = NULL, L->n_raw = 0;
}

static int load_initializers(Loader *L) {
  const Onnx__GraphProto *gp = L->gp;
  for (size_t k = 0; k < gp->n_initializer; k++) {
    const Onnx__TensorProto *t = gp->initializer[k];
    if (!t || !t->name || !*t->name) return lerr(L, "initializer %zu has no name", k);
    ApxTensorConst tc;
    L->tc.raw = k < L->n_raw ? &L->raw[k] : NULL;
    int bad = decode_tensor(&L->tc, t, NULL, &tc);
    L->tc.raw = NULL;
    if (bad) return -1;
    int is_float = apx_dtype_is_float(tc.dtype);
    int frozen = is_float && apx_name_list_has(&L->opt.frozen, t->name);
    ApxValueKind kind = is_float && !frozen ? APX_VAL_PARAM : APX_VAL_CONST;
    int v = apx_graph_add_value(L->g, L->d, t->name, kind, tc.dtype, tc.rank, tc.dims);
    if (v < 0) return -1;
    ApxValue *val = &L->g->vals[v];
    val->data = tc.data;
    val->onnx_index = (int)k;
    if (frozen) val->flags |= APX_VALF_FROZEN;
  }
  release_input(L); /* every payload is in the arena now */
  if (L->trainable && apply_trainable_list(L, L->g->n_vals)) return -1;
  for (int i = 0; i < L->opt.frozen.n; i++) {
    const char *nm = L->opt.frozen.items[i];
    int v = nm ? apx_graph_find_value(L->g, nm) : -1;
    if (v < 0) return lerr(L, "--frozen '%s': no such initializer", nm ? nm : "");
  }
  return 0;
}

static int load_inputs(Loader *L, int n_init_vals) {
  const Onnx__GraphProto *gp = L->gp;
  L->g->inputs = apx_arena_alloc(&L->g->arena, (gp->n_input + 1) * sizeof(int));
  if (!L->g->inputs) return loom(L);
  for (size_t k = 0; k < gp->n_input; k++) {
    const Onnx__ValueInfoProto *vi = gp->input[k];
    if (!vi || !vi->name || !*vi->name) return lerr(L, "graph input %zu has no name", k);
    int existing = apx_graph_find_value(L->g, vi->name);
    if (existing >= 0 && existing < n_init_vals) continue; /* the initializer itself */
    char what[600];
    snprintf(what, sizeof what, "graph input '%s'", vi->name);
    int dt;
    int32_t rank;
    int64_t dims[APX_MAX_RANK];
    const char **dp;
    if (parse_type(L, vi->type, what, 1, &dt, &rank, dims, &dp)) return -1;
    int v = apx_graph_add_value(L->g, L->d, vi->name, APX_VAL_INPUT, (ApxDType)dt, rank, dims);
    if (v < 0) return -1;
    L->g->vals[v].dim_params = dp;
    L->g->vals[v].onnx_index = (int)k;
    L->g->inputs[L->g->n_inputs++] = v;
  }
  return 0;
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t a = 0; a < n->n_attribute; a++)
    if (n->attribute[a] && n->attribute[a]->name && strcmp(n->attribute[a]->name, name) == 0)
      return n->attribute[a];
  return NULL;
}

/* Node k's output j names a value already defined: say by what (the first definition). */
static int redefined(Loader *L, size_t k, size_t j) {
  const Onnx__GraphProto *gp = L->gp;
  const char *name = gp->node[k]->output[j];
  for (size_t k2 = 0; k2 <= k; k2++) {
    const Onnx__NodeProto *n2 = gp->node[k2];
    for (size_t j2 = 0; j2 < n2->n_output && (k2 < k || j2 < j); j2++) {
      if (!n2->output[j2] || strcmp(n2->output[j2], name) != 0) continue;
      if (k2 == k) return node_err(L, k, "output '%s' is listed twice", name);
      return node_err(L, k, "output '%s' is already produced by node '%s' (%s)", name,
                      L->node_names[k2], op_type_of(n2));
    }
  }
  for (size_t i = 0; i < gp->n_initializer; i++)
    if (gp->initializer[i] && gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name))
      return node_err(L, k, "output '%s' is already an initializer", name);
  for (size_t i = 0; i < gp->n_input; i++)
    if (gp->input[i] && gp->input[i]->name && !strcmp(gp->input[i]->name, name))
      return node_err(L, k, "output '%s' is already a graph input", name);
  return node_err(L, k, "output '%s' is defined twice", name);
}

/* Constant node k -> a CONST value named after its output. */
static int load_constant(Loader *L, size_t k) {
  const Onnx__NodeProto *n = L->gp->node[k];
  if (n->n_output < 1 || !n->output[0] || !*n->output[0])
    return node_err(L, k, "Constant has no output");
  if (n->n_output > 1) return node_err(L, k, "Constant has %zu outputs, expected 1", n->n_output);
  ApxTensorConst tc;
  memset(&tc, 0, sizeof tc);
  const Onnx__AttributeProto *a;
  if ((a = find_attr(n, "value"))) {
    char what[900];
    snprintf(what, sizeof what, "node '%s' (Constant) attribute 'value'", L->node_names[k]);
    if (!a->t) return node_err(L, k, "attribute 'value' holds no tensor");
    if (decode_tensor(&L->tc, a->t, what, &tc)) return -1;
  } else if ((a = find_attr(n, "value_float"))) {
    tc.dtype = APX_DT_F32;
    tc.rank = 0;
    tc.data = apx_arena_memdup(&L->g->arena, &a->f, sizeof(float));
  } else if ((a = find_attr(n, "value_int"))) {
    tc.dtype = APX_DT_I64;
    tc.rank = 0;
    tc.data = apx_arena_memdup(&L->g->arena, &a->i, sizeof(int64_t));
  } else if ((a = find_attr(n, "value_floats"))) {
    tc.dtype = APX_DT_F32;
    tc.rank = 1;
    tc.dims[0] = (int64_t)a->n_floats;
    tc.data = apx_arena_memdup(&L->g->arena, a->floats, a->n_floats * sizeof(float));
  } else if ((a = find_attr(n, "value_ints"))) {
    tc.dtype = APX_DT_I64;
    tc.rank = 1;
    tc.dims[0] = (int64_t)a->n_ints;
    tc.data = apx_arena_memdup(&L->g->arena, a->ints, a->n_ints * sizeof(int64_t));
  } else if ((a = find_attr(n, "value_string")) || (a = find_attr(n, "value_strings")) ||
             (a = find_attr(n, "sparse_value"))) {
    return node_err(L, k, "not supported yet: Constant with attribute '%s'", a->name);
  } else {
    return node_err(L, k, "Constant has no value attribute");
  }
  if (!tc.data) return loom(L);
  if (apx_graph_find_value(L->g, n->output[0]) >= 0) return redefined(L, k, 0);
  int v = apx_graph_add_value(L->g, L->d, n->output[0], APX_VAL_CONST, tc.dtype, tc.rank,
                              tc.dims);
  if (v < 0) return -1;
  L->g->vals[v].data = tc.data;
  L->g->vals[v].onnx_index = (int)k; /* no producer node: index of the Constant in graph.node */
  return 0;
}

/* Generic attribute copy (ApxAttrType values equal ONNX AttributeType). */
static int copy_attr(Loader *L, size_t k, const Onnx__AttributeProto *a, ApxAttr *out) {
  ApxArena *ar = &L->g->arena;
  if (!a || !a->name || !*a->name) return node_err(L, k, "attribute without a name");
  out->name = apx_arena_strdup(ar, a->name);
  if (!out->name) return loom(L);
  int type = a->has_type ? (int)a->type : 0;
  if (type == 0) { /* IR < 3 writers leave the type out: infer it from the field set */
    if (a->has_f) type = APX_ATTR_FLOAT;
    else if (a->has_i) type = APX_ATTR_INT;
    else if (a->has_s) type = APX_ATTR_STRING;
    else if (a->t) type = APX_ATTR_TENSOR;
    else if (a->n_floats) type = APX_ATTR_FLOATS;
    else if (a->n_ints) type = APX_ATTR_INTS;
    else if (a->n_strings) type = APX_ATTR_STRINGS;
    else return node_err(L, k, "attribute '%s' has no type and no value", a->name);
  }
  out->type = (ApxAttrType)type;
  switch (type) {
    case APX_ATTR_FLOAT: out->f = a->f; break;
    case APX_ATTR_INT: out->i = a->i; break;
    case APX_ATTR_STRING:
      out->s = apx_arena_strndup(ar, a->s.data ? (const char *)a->s.data : "", a->s.len);
      if (!out->s) return loom(L);
      break;
    case APX_ATTR_TENSOR: {
      if (!a->t) return node_err(L, k, "attribute '%s' holds no tensor", a->name);
      char what[900];
      snprintf(what, sizeof what, "node '%s' (%s) attribute '%s'", L->node_names[k],
               op_type_of(L->gp->node[k]), a->name);
      out->t = apx_arena_alloc(ar, sizeof(ApxTensorConst));
      if (!out->t) return loom(L);
      if (decode_tensor(&L->tc, a->t, what, out->t)) return -1;
      break;
    }
    case APX_ATTR_FLOATS:
      if (a->n_floats > INT32_MAX) return node_err(L, k, "attribute '%s' is too long", a->name);
      out->n = (int32_t)a->n_floats;
      out->floats = apx_arena_memdup(ar, a->floats, a->n_floats * sizeof(float));
      if (!out->floats) return loom(L);
      break;
    case APX_ATTR_INTS:
      if (a->n_ints > INT32_MAX) return node_err(L, k, "attribute '%s' is too long", a->name);
      out->n = (int32_t)a->n_ints;
      out->ints = apx_arena_memdup(ar, a->ints, a->n_ints * sizeof(int64_t));
      if (!out->ints) return loom(L);
      break;
    case APX_ATTR_STRINGS:
      if (a->n_strings > INT32_MAX) return node_err(L, k, "attribute '%s' is too long", a->name);
      out->n = (int32_t)a->n_strings;
      out->strings = apx_arena_alloc(ar, (a->n_strings + 1) * sizeof(char *));
      if (!out->strings) return loom(L);
      for (size_t i = 0; i < a->n_strings; i++) {
        const ProtobufCBinaryData *s = &a->strings[i];
        out->strings[i] = apx_arena_strndup(ar, s->data ? (const char *)s->data : "", s->len);
        if (!out->strings[i]) return loom(L);
      }
      break;
    case APX_ATTR_GRAPH: return node_err(L, k, "control flow is not supported in v1");
    default:
      return node_err(L, k, "not supported yet: attribute '%s' of type %d", a->name, type);
  }
  return 0;
}

/* Node outputs first (so inputs resolve in any order), then the nodes themselves. */
static int load_nodes(Loader *L) {
  const Onnx__GraphProto *gp = L->gp;
  ApxGraph *g = L->g;
  size_t n_outs = 0; /* the value of every output, kept for the second loop */
  for (size_t k = 0; k < gp->n_node; k++)
    if (L->node_ops[k] != APX_OP_Constant) n_outs += gp->node[k]->n_output;
  int *out_vals = malloc((n_outs + 1) * sizeof(int));
  if (!out_vals) return loom(L);
  size_t at = 0;
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    if (L->node_ops[k] == APX_OP_Constant) {
      if (load_constant(L, k)) goto fail;
      continue;
    }
    for (size_t j = 0; j < n->n_output; j++) {
      out_vals[at++] = -1;
      if (!n->output[j] || !*n->output[j]) continue;
      int v = apx_graph_add_value(g, L->d, n->output[j], APX_VAL_ACTIVATION, APX_DT_UNDEFINED,
                                  -1, NULL);
      if (v < 0) {
        if (apx_graph_find_value(g, n->output[j]) >= 0) { /* defined twice: say by what */
          L->d->code = 0;
          L->d->msg[0] = '\0';
          redefined(L, k, j);
        }
        goto fail;
      }
      g->vals[v].onnx_index = (int)j;
      out_vals[at - 1] = v;
    }
  }
  /* every node input resolved in one batched lookup (apx_graph_find_values), in node order */
  size_t n_ins = 0;
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    if (L->node_ops[k] == APX_OP_Constant) continue;
    if (n->n_input > INT32_MAX / 2 || n->n_output > INT32_MAX / 2 || n->n_attribute > INT32_MAX) {
      free(out_vals);
      return node_err(L, k, "too many inputs, outputs or attributes");
    }
    n_ins += n->n_input;
  }
  const char **in_names = malloc((n_ins + 1) * sizeof *in_names);
  int *in_vals = malloc((n_ins + 1) * sizeof *in_vals);
  if (!in_names || !in_vals) {
    free(in_names);
    free(in_vals);
    free(out_vals);
    return loom(L);
  }
  size_t at_in = 0;
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    if (L->node_ops[k] == APX_OP_Constant) continue;
    for (size_t j = 0; j < n->n_input; j++) in_names[at_in++] = n->input[j];
  }
  for (size_t i0 = 0; i0 < n_ins; i0 += (size_t)1 << 30) { /* int counts */
    size_t m = n_ins - i0 < ((size_t)1 << 30) ? n_ins - i0 : ((size_t)1 << 30);
    apx_graph_find_values(g, in_names + i0, (int)m, in_vals + i0);
  }
  free(in_names);
  at = 0;
  at_in = 0;
  int cap = 0;
  int *ids = NULL;
  int rc = 0;
  for (size_t k = 0; k < gp->n_node && rc == 0; k++) {
    const Onnx__NodeProto *n = gp->node[k];
    if (L->node_ops[k] == APX_OP_Constant) continue;
    int need = (int)(n->n_input + n->n_output);
    if (need > cap || !ids) {
      int *p = realloc(ids, ((size_t)need + 1) * sizeof(int));
      if (!p) {
        rc = loom(L);
        break;
      }
      ids = p;
      cap = need;
    }
    int *in = ids, *out = ids + n->n_input;
    for (size_t j = 0; j < n->n_input && rc == 0; j++) {
      const char *nm = n->input[j];
      in[j] = in_vals[at_in++];
      if (nm && *nm && in[j] < 0)
        rc = apx_diag_error(L->d, APX_EXIT_BAD_INPUT, "%s: node '%s' (%s) input %zu: undefined "
                            "value '%s'", g->file, L->node_names[k], n->op_type, j, nm);
    }
    for (size_t j = 0; j < n->n_output; j++) out[j] = out_vals[at++];
    if (rc) break;
    int id = apx_graph_add_node(g, L->d, L->node_ops[k], L->node_names[k], (int)n->n_input, in,
                                (int)n->n_output, out);
    if (id < 0) {
      rc = -1;
      break;
    }
    ApxNode *nd = &g->nodes[id];
    nd->op_type = kept_op_type(L, n->op_type);
    nd->onnx_index = (int)k;
    nd->n_attrs = (int32_t)n->n_attribute;
    nd->attrs = apx_arena_alloc(&g->arena, (n->n_attribute + 1) * sizeof(ApxAttr));
    if (!nd->op_type || !nd->attrs) {
      rc = loom(L);
      break;
    }
    for (size_t a = 0; a < n->n_attribute && rc == 0; a++)
      rc = copy_attr(L, k, n->attribute[a], &g->nodes[id].attrs[a]);
  }
  free(ids);
  free(in_vals);
  free(out_vals);
  return rc;
fail:
  free(out_vals);
  return -1;
}

static int load_outputs(Loader *L) {
  const Onnx__GraphProto *gp = L->gp;
  ApxGraph *g = L->g;
  for (size_t k = 0; k < gp->n_value_info; k++) {
    const Onnx__ValueInfoProto *vi = gp->value_info[k];
    if (!vi || !vi->name) continue;
    int v = apx_graph_find_value(g, vi->name);
    if (v < 0) continue; /* stale hint for a value that does not exist: harmless */
    char what[600];
    snprintf(what, sizeof what, "value_info '%s'", vi->name);
    if (apply_hint(L, v, vi->type, what, 0)) return -1;
  }
  g->outputs = apx_arena_alloc(&g->arena, (gp->n_output + 1) * sizeof(int));
  if (!g->outputs) return loom(L);
  for (size_t k = 0; k < gp->n_output; k++) {
    const Onnx__ValueInfoProto *vi = gp->output[k];
    if (!vi || !vi->name || !*vi->name) return lerr(L, "graph output %zu has no name", k);
    int v = apx_graph_find_value(g, vi->name);
    if (v < 0)
      return lerr(L, "graph output '%s': undefined value (no node, input or initializer "
                  "defines it)", vi->name);
    char what[600];
    snprintf(what, sizeof what, "graph output '%s'", vi->name);
    if (apply_hint(L, v, vi->type, what, 1)) return -1;
    g->vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
    g->outputs[g->n_outputs++] = v;
  }
  int loss = g->outputs[0];
  if (L->opt.loss_name && *L->opt.loss_name) {
    /* --loss A,B: several losses, each with its own scaler (passes/autodiff.h); g->loss is
     * the first, every one is flagged APX_VALF_LOSS */
    int ids[APX_MAX_LOSSES];
    char why[600];
    int n = apx_loss_list_resolve(g, L->opt.loss_name, ids, APX_MAX_LOSSES, why, sizeof why);
    if (n < 0) return lerr(L, "%s", why);
    loss = ids[0];
    for (int i = 1; i < n; i++) g->vals[ids[i]].flags |= APX_VALF_LOSS;
  } else if (L->opt.training && warn_other_loss_candidates(L)) {
    return -1;
  }
  g->loss = loss;
  g->vals[loss].flags |= APX_VALF_LOSS;
  return 0;
}

/* Who wrote the model, and what follows from it: BatchNorm's running variance is updated
 * with the unbiased batch variance for PyTorch's exporters (PyTorch trains so), with the
 * batch variance itself (ONNX's BatchNormalization) for any other producer, unless
 * --bn-running-var says which (kernels/attrs.def ApxAttrBatchNorm). */
static int read_producer(Loader *L, const Onnx__ModelProto *m) {
  if (m->producer_name && *m->producer_name &&
      !(L->g->producer_name = apx_arena_strdup(&L->g->arena, m->producer_name)))
    return loom(L);
  int pytorch = L->g->producer_name && strcmp(L->g->producer_name, "pytorch") == 0;
  L->g->bn_unbiased_running_var = L->opt.bn_running_var == APX_BN_VAR_UNBIASED ||
                                  (L->opt.bn_running_var == APX_BN_VAR_AUTO && pytorch);
  return 0;
}

static int load_model(Loader *L, const Onnx__ModelProto *m, size_t len) {
  if (check_versions(L, m) || read_producer(L, m)) return -1;
  const Onnx__GraphProto *gp = m->graph;
  if (!gp) return lerr(L, "not a valid ONNX model (no graph, %zu bytes)", len);
  L->gp = gp;
  if (gp->name) {
    L->g->name = apx_arena_strdup(&L->g->arena, gp->name);
    if (!L->g->name) return loom(L);
  }
  if (gp->n_node == 0) return lerr(L, "graph has no nodes");
  if (gp->n_output == 0) return lerr(L, "graph has no outputs");
  if (gp->n_sparse_initializer)
    return lerr(L, "not supported yet: sparse initializers");
  for (size_t k = 0; k < gp->n_node; k++)
    if (!gp->node[k]) return lerr(L, "node %zu is empty", k);
  if (check_nodes(L)) return -1;
  int has_ai_onnx = 0;
  for (size_t i = 0; i < m->n_opset_import; i++)
    has_ai_onnx |= m->opset_import[i] && is_ai_onnx(m->opset_import[i]->domain);
  if (!has_ai_onnx) return lerr(L, "model has no ai.onnx opset_import");
  if (read_trainable_list(L, m)) return -1;
  if (load_initializers(L)) return -1;
  if (load_inputs(L, L->g->n_vals)) return -1;
  if (load_nodes(L)) return -1;
  if (apx_graph_toposort(L->g, L->d)) return -1;
  if (load_outputs(L)) return -1;
  if (L->opt.training)
    apx_warn_export_hazards(L->g, &L->opt,
                            L->trainable ? APX_TRAINABLE_LISTED : APX_TRAINABLE_ALL_FLOATS, L->d);
  for (int b = 0; b < L->opt.n_dims; b++)
    if (!L->dim_used[b] && L->opt.dim_names[b])
      apx_diag_warn(L->d, "%s: --dim %s: no graph input has this symbolic dim", L->g->file,
                    L->opt.dim_names[b]);
  return 0;
}

/* buf_owned: malloc'd buffer the loader frees once nothing points into it, or NULL; map_len:
 * buf is a mapping of that many bytes, unmapped then. Initializer payloads are copied from buf
 * (onnx_wire.h), so buf lives until the initializers are loaded (either way the peak is about
 * the model size plus the payloads, which the graph keeps). */
static int load_buffer(ApxGraph *g, const void *buf, size_t len, uint8_t *buf_owned,
                       size_t map_len, const char *base_dir, const ApxOptions *o, ApxDiag *d) {
  Loader L;
  memset(&L, 0, sizeof L);
  L.g = g;
  L.d = d;
  if (o)
    L.opt = *o;
  else
    apx_options_init(&L.opt);
  if (L.opt.n_dims < 0 || L.opt.n_dims > APX_MAX_DIMS_BOUND) L.opt.n_dims = 0;
  if (L.opt.frozen.n < 0 || L.opt.frozen.n > APX_MAX_LIST) L.opt.frozen.n = 0;
  L.tc.arena = &g->arena;
  L.tc.d = d;
  L.tc.file = g->file;
  L.tc.base_dir = base_dir;
  char dim_used[APX_MAX_DIMS_BOUND + 1] = {0};
  L.dim_used = dim_used;

  /* plan/plan.h's magic: a compiled plan given where the model goes */
  static const char plan_magic[8] = {'A', 'P', 'X', 'P', 'L', 'A', 'N', 0};
  if (buf && len >= sizeof plan_magic && memcmp(buf, plan_magic, sizeof plan_magic) == 0) {
    free(buf_owned);
    if (map_len) munmap((void *)buf, map_len);
    return lerr(&L, "this is an apexc plan, not an ONNX model (run it with apexrun)");
  }
  PbAlloc pba;
  ProtobufCAllocator pa;
  pb_init(&pba, &pa);
  Onnx__ModelProto *m = NULL;
  int deep = 0;
  ApxStripped st = {0};
  if (len > 0 && buf) {
    NestMemo nm = {.n = 0};
    deep = !nesting_ok(&nm, &onnx__model_proto__descriptor, buf, len, 0);
    /* without the initializers' raw_data, which is copied once, from buf (onnx_wire.h); out
     * of memory there just unpacks buf as it is */
    if (!deep && apx_onnx_strip_raw(buf, len, &st) > 0) {
      m = onnx__model_proto__unpack(&pa, st.len, st.buf);
      free(st.buf);
      st.buf = NULL;
      if (m && m->graph && m->graph->n_initializer == st.n_raw) {
        L.raw = st.raw, L.n_raw = st.n_raw;
        L.in_buf = buf, L.in_owned = buf_owned, L.in_map_len = map_len;
      } else { /* not what the strip promised, or an error: protobuf-c reads buf itself */
        pba.oom = 0;
        m = onnx__model_proto__unpack(&pa, len, buf);
      }
    } else if (!deep) {
      m = onnx__model_proto__unpack(&pa, len, buf);
    }
  }
  if (!L.raw) { /* nothing points into buf */
    free(buf_owned);
    if (map_len) munmap((void *)buf, map_len);
  }
  int rc;
  if (deep)
    rc = lerr(&L, "not a valid ONNX model (messages nested deeper than %d, %zu bytes)",
              MAX_NESTING, len);
  else if (!m && pba.oom)
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory parsing the model (%zu bytes)",
                        g->file, len);
  else if (!m)
    rc = lerr(&L, "not a valid ONNX model (protobuf parse failed, %zu bytes)", len);
  else if (!m->has_ir_version && !m->graph)
    rc = lerr(&L, "not a valid ONNX model (no ir_version and no graph, %zu bytes)", len);
  else
    rc = load_model(&L, m, len);
  pb_done(&pba); /* the unpacked model, without free_unpacked's walk */
  release_input(&L); /* when load_model stopped before its initializers */
  apx_onnx_stripped_free(&st);
  return rc;
}

int apx_onnx_load_memory(ApxGraph *g, const void *buf, size_t len, const char *base_dir,
                         const ApxOptions *o, ApxDiag *d) {
  return load_buffer(g, buf, len, NULL, 0, base_dir, o, d);
}

/* ---- files --------------------------------------------------------------------------- */

/* protobuf cannot encode a message over 2 GiB: a larger model or tensor file is not valid
 * (large models keep their weights in external data files) */
#define MAX_PROTO_FILE ((uint64_t)INT32_MAX)

/* Whole file into a malloc'd buffer: a bounded read (ir/fileio.h; a FIFO, device or
 * folder is refused at open, the size is known before reading). Returns 0, or -1 with
 * "<path>: cannot ..." in d. */
static int slurp(const char *path, const char *what, ApxDiag *d, uint8_t **out, size_t *out_len) {
  return apx_read_file_bounded(path, what, MAX_PROTO_FILE,
                               "a protobuf file can have (larger models keep their weights in "
                               "external data files)", out, out_len, d);
}

/* Folder of path ("." when it has none), in arena. */
static const char *dir_of(ApxArena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return apx_arena_strdup(a, ".");
  if (slash == path) return apx_arena_strdup(a, "/");
  return apx_arena_strndup(a, path, (size_t)(slash - path));
}

int apx_onnx_load_file(ApxGraph *g, const char *path, const ApxOptions *o, ApxDiag *d) {
  if (!g->file || strcmp(g->file, "<model>") == 0) {
    const char *f = apx_arena_strdup(&g->arena, path);
    if (!f) return err_at(d, APX_EXIT_RUNTIME, path, "out of memory");
    g->file = f;
  }
  const char *base = dir_of(&g->arena, path);
  if (!base) return err_at(d, APX_EXIT_RUNTIME, path, "out of memory");
  /* a regular file is mapped (its pages are the page cache's: not copied); anything else
   * goes to the bounded reader, which says what is wrong (ir/fileio.h) */
  uint64_t size = 0;
  const char *why = NULL;
  int fd = apx_open_regular(path, 0, &size, &why);
  if (fd >= 0 && size > 0 && size <= MAX_PROTO_FILE && size <= SIZE_MAX) {
    size_t len = (size_t)size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map != MAP_FAILED) {
      madvise(map, len, MADV_SEQUENTIAL);
      return load_buffer(g, map, len, NULL, len, base, o, d); /* unmaps it */
    }
  } else if (fd >= 0) {
    close(fd);
  }
  uint8_t *buf;
  size_t len;
  if (slurp(path, "model", d, &buf, &len)) return -1;
  return load_buffer(g, buf, len, buf, 0, base, o, d); /* frees buf */
}

int apx_onnx_read_tensor_file(const char *path, ApxArena *arena, ApxTensorConst *out,
                              const char **name, ApxDiag *d) {
  memset(out, 0, sizeof *out);
  if (name) *name = NULL;
  uint8_t *buf;
  size_t len;
  if (slurp(path, "tensor file", d, &buf, &len)) return -1;
  int rc = -1;
  PbAlloc pba;
  ProtobufCAllocator pa;
  pb_init(&pba, &pa);
  Onnx__TensorProto *t = NULL;
  NestMemo nm = {.n = 0};
  if (len > 0 && nesting_ok(&nm, &onnx__tensor_proto__descriptor, buf, len, 0))
    t = onnx__tensor_proto__unpack(&pa, len, buf);
  free(buf);
  if (!t) {
    int oom = pba.oom;
    pb_done(&pba);
    if (oom) return err_at(d, APX_EXIT_RUNTIME, path, "out of memory parsing the tensor");
    return err_at(d, APX_EXIT_BAD_INPUT, path,
                  "not a valid TensorProto file (protobuf parse failed, %zu bytes)", len);
  }
  TensorCtx c = {arena, d, path, NULL, NULL};
  const char *base = dir_of(arena, path);
  c.base_dir = base;
  char what[600];
  snprintf(what, sizeof what, "tensor '%s'", t->name ? t->name : "");
  if (!base) {
    rc = err_at(d, APX_EXIT_RUNTIME, path, "out of memory");
  } else if (decode_tensor(&c, t, what, out) == 0) {
    rc = 0;
    if (name) {
      *name = apx_arena_strdup(arena, t->name ? t->name : "");
      if (!*name) rc = err_at(d, APX_EXIT_RUNTIME, path, "out of memory");
    }
  }
  pb_done(&pba);
  return rc;
}

int apx_onnx_write_tensor_file(const char *path, const char *name, const ApxTensor *t,
                               ApxDiag *d) {
  if (!apx_dtype_is_supported(t->dtype))
    return err_at(d, APX_EXIT_BAD_INPUT, path, "cannot write a tensor of type %s",
                  apx_dtype_name(t->dtype));
  if (t->rank < 0 || t->rank > APX_MAX_RANK)
    return err_at(d, APX_EXIT_BAD_INPUT, path, "cannot write a tensor of rank %d", t->rank);
  int64_t numel = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0 || (t->dims[i] && numel > MAX_ELEMENTS / t->dims[i]))
      return err_at(d, APX_EXIT_BAD_INPUT, path, "cannot write a tensor with dim %" PRId64,
                    t->dims[i]);
    numel *= t->dims[i];
  }
  size_t bytes = (size_t)numel * apx_dtype_size(t->dtype);
  if (bytes && !t->data) return err_at(d, APX_EXIT_BAD_INPUT, path, "tensor has no data");
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[APX_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i];
  tp.n_dims = (size_t)t->rank;
  tp.dims = dims;
  tp.has_data_type = 1;
  tp.data_type = (int32_t)t->dtype;
  tp.name = (char *)(name ? name : "");
  tp.has_raw_data = 1;
  tp.raw_data.len = bytes;
  tp.raw_data.data = (uint8_t *)t->data;
  size_t n = onnx__tensor_proto__get_packed_size(&tp);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return err_at(d, APX_EXIT_RUNTIME, path, "out of memory writing the tensor");
  onnx__tensor_proto__pack(&tp, buf);
  FILE *f = fopen(path, "wb");
  if (!f) {
    int e = errno;
    free(buf);
    return err_at(d, APX_EXIT_RUNTIME, path, "cannot write: %s", strerror(e));
  }
  size_t w = fwrite(buf, 1, n, f);
  int e = errno;
  free(buf);
  if (fclose(f) != 0 || w != n) {
    if (w == n) e = errno;
    return err_at(d, APX_EXIT_RUNTIME, path, "cannot write: %s", strerror(e));
  }
  return 0;
}
