/* model_blob.c - strip the plan-held initializers from the embedded model (model_blob.h):
 * a walk over the protobuf wire format that copies every field except the data fields of the
 * initializers the plan restores (no tensor bytes are unpacked or copied), with the
 * protobuf-c unpack-and-repack kept for a model the walk cannot parse. */
#include "plan/model_blob.h"

#include <string.h>

#include "onnx.pb-c.h"

/* Where an initializer's buffer is found: the caller's lookup (apx_model_blob_strip_by),
 * else the plan's own index. */
typedef struct Lookup {
  const ApxPlan *p;
  const ApxBlobLookup *by; /* NULL: apx_plan_find_buffer */
} Lookup;

/* The source buffer of initializer buffer id (apx_model_blob_source), -1. */
static int32_t source_of(const ApxPlan *p, int32_t id) {
  if (id < 0) return -1;
  const ApxPlanBuffer *b = &p->bufs[id];
  if (b->kind == APX_VAL_PARAM || b->kind == APX_VAL_STATE) {
    int32_t m = apx_plan_master_of(p, id);
    return m >= 0 ? m : id;
  }
  if (b->kind == APX_VAL_CONST && b->data && b->data_len) return id;
  return -1;
}

int32_t apx_model_blob_source(const ApxPlan *p, const char *name) {
  return source_of(p, apx_plan_find_buffer(p, name));
}

/* 1 when an initializer (name, data type, element count n, external data or not) can be
 * rebuilt from the plan exactly or is replaced by a trained value. One name lookup. A PARAM
 * or STATE of n elements: export writes its trained value (from its fp32 master when it has
 * one, of the same shape); a CONST: its initial bytes, when they are the initializer's. */
static int restorable_as(const Lookup *k, const char *name, int32_t data_type, int64_t n,
                         int external) {
  if (!name || external) return 0;
  int32_t id = k->by ? k->by->find(k->by->ctx, name) : apx_plan_find_buffer(k->p, name);
  if (id < 0) return 0;
  const ApxPlanBuffer *b = &k->p->bufs[id];
  size_t es = apx_dtype_size((ApxDType)data_type);
  if (!es || n <= 0) return 0;
  if (b->kind == APX_VAL_CONST)
    return b->data && b->data_len && (ApxDType)data_type == b->dtype &&
           (uint64_t)b->data_len == (uint64_t)n * es;
  return (b->kind == APX_VAL_PARAM || b->kind == APX_VAL_STATE) &&
         apx_dtype_is_float((ApxDType)data_type) && b->bytes == n * (int64_t)apx_dtype_size(b->dtype);
}

static int restorable(const Lookup *k, const Onnx__TensorProto *t) {
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) n *= t->dims[i];
  return restorable_as(k, t->name, t->data_type, n,
                       t->has_data_location &&
                           t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL);
}

/* ---- the same on the wire format, without unpacking the tensors' bytes ------------------
 * ModelProto.graph (7) -> GraphProto.initializer (5) -> TensorProto: dims 1, data_type 2,
 * float_data 4, int32_data 5, string_data 6, int64_data 7, name 8, raw_data 9, double_data 10,
 * uint64_data 11, data_location 14 (onnx.proto). Every other field is copied as it is. */

typedef struct Wire {
  const uint8_t *p;
  size_t len, i;
} Wire;

static int w_varint(Wire *w, uint64_t *v) {
  uint64_t r = 0;
  for (int s = 0; s < 64 && w->i < w->len; s += 7) {
    uint8_t b = w->p[w->i++];
    r |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) {
      *v = r;
      return 0;
    }
  }
  return -1;
}

/* One field: its number, wire type, and the [start, end) of the whole field and of its
 * payload (the bytes after the length of a length-delimited field). */
typedef struct Field {
  uint64_t num;
  int type;
  size_t start, end, body;
  uint64_t value; /* varint value */
} Field;

static int w_field(Wire *w, Field *f) {
  uint64_t key, v;
  f->start = w->i;
  if (w_varint(w, &key)) return -1;
  f->num = key >> 3;
  f->type = (int)(key & 7);
  switch (f->type) {
    case 0:
      if (w_varint(w, &f->value)) return -1;
      break;
    case 1:
    case 5: {
      size_t k = f->type == 1 ? 8 : 4;
      if (w->len - w->i < k) return -1;
      w->i += k;
      break;
    }
    case 2:
      if (w_varint(w, &v) || v > w->len - w->i) return -1;
      f->body = w->i;
      w->i += (size_t)v;
      break;
    default: return -1;
  }
  f->end = w->i;
  return 0;
}

/* The stripped model is never longer than the model (a submessage's new length takes at most
 * the bytes of its old one), so o->p has the model's length plus slack for the reserved
 * length slots below. */
typedef struct Out {
  uint8_t *p;
  size_t n;
} Out;

static void o_bytes(Out *o, const void *b, size_t n) {
  memcpy(o->p + o->n, b, n);
  o->n += n;
}

static size_t varint_put(uint8_t b[10], uint64_t v) {
  size_t k = 0;
  do {
    b[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) b[k] |= 0x80;
    k++;
  } while (v);
  return k;
}

static void o_varint(Out *o, uint64_t v) {
  uint8_t b[10];
  o_bytes(o, b, varint_put(b, v));
}

static int is_data_field(uint64_t num) {
  return num == 4 || num == 5 || num == 6 || num == 7 || num == 9 || num == 10 || num == 11;
}

/* A TensorProto (model bytes [b, e)) into o: whole, or without its data fields when the
 * plan restores it (*stripped incremented). -1 when it does not parse. */
static int strip_tensor(const Lookup *k, const uint8_t *m, size_t b, size_t e, Out *o,
                        size_t *stripped) {
  Wire w = {m, e, b};
  Field f;
  char name[1024];
  int has_name = 0, external = 0;
  int32_t data_type = 0;
  int64_t n = 1;
  while (w.i < e) { /* what the tensor is */
    if (w_field(&w, &f)) return -1;
    if (f.num == 8 && f.type == 2 && f.end - f.body < sizeof name) {
      memcpy(name, m + f.body, f.end - f.body);
      name[f.end - f.body] = 0;
      has_name = 1;
    } else if (f.num == 2 && f.type == 0) {
      data_type = (int32_t)f.value;
    } else if (f.num == 14 && f.type == 0) {
      external = f.value == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    } else if (f.num == 1) { /* dims: one varint per field, or packed */
      Wire d = {m, f.end, f.body};
      if (f.type == 0) {
        n = f.value && (uint64_t)n > (uint64_t)INT64_MAX / f.value ? -1 : n * (int64_t)f.value;
      } else if (f.type == 2) {
        uint64_t v;
        while (d.i < d.len) {
          if (w_varint(&d, &v)) return -1;
          n = v && (uint64_t)n > (uint64_t)INT64_MAX / v ? -1 : n * (int64_t)v;
          if (n < 0) break;
        }
      }
      if (n < 0) n = -1;
    }
  }
  if (!has_name || n < 0 || !restorable_as(k, name, data_type, n, external)) {
    o_bytes(o, m + b, e - b);
    return 0;
  }
  (*stripped)++;
  for (w.i = b; w.i < e;) {
    if (w_field(&w, &f)) return -1;
    if (!is_data_field(f.num)) o_bytes(o, m + f.start, f.end - f.start);
  }
  return 0;
}

typedef int (*StripFn)(const Lookup *k, const uint8_t *m, size_t b, size_t e, Out *o,
                       size_t *stripped);

/* A message (model bytes [b, e)): every field copied, except that each field `num` (a
 * submessage) goes through sub, written once after a 10-byte slot for its length, which is
 * then filled and the bytes moved up to it. */
static int strip_message(const Lookup *k, const uint8_t *m, size_t b, size_t e, Out *o,
                         size_t *stripped, uint64_t num, StripFn sub) {
  Wire w = {m, e, b};
  Field f;
  while (w.i < e) {
    if (w_field(&w, &f)) return -1;
    if (f.num != num || f.type != 2) {
      o_bytes(o, m + f.start, f.end - f.start);
      continue;
    }
    o_varint(o, (num << 3) | 2);
    size_t at = o->n;
    o->n += 10;
    if (sub(k, m, f.body, f.end, o, stripped)) return -1;
    size_t len = o->n - at - 10, kb = varint_put(o->p + at, len);
    memmove(o->p + at + kb, o->p + at + 10, len);
    o->n = at + kb + len;
  }
  return 0;
}

/* GraphProto: initializers (5) through strip_tensor. */
static int strip_graph(const Lookup *k, const uint8_t *m, size_t b, size_t e, Out *o,
                       size_t *stripped) {
  return strip_message(k, m, b, e, o, stripped, 5, strip_tensor);
}

/* ModelProto: the graph (7) through strip_graph; -1 when it does not parse. */
static int strip_model(const Lookup *k, const uint8_t *m, size_t len, Out *o, size_t *stripped) {
  return strip_message(k, m, 0, len, o, stripped, 7, strip_graph);
}

/* The protobuf-c way (unpack, swap in emptied copies, pack): for a model the wire walk does
 * not parse (unpack then decides what it is). */
static int strip_unpacked(const Lookup *k, const void *model, size_t len, ApxArena *A,
                          const void **out, size_t *out_len);

int apx_model_blob_strip(const ApxPlan *p, const void *model, size_t len, ApxArena *A,
                         const void **out, size_t *out_len) {
  return apx_model_blob_strip_by(p, NULL, model, len, A, out, out_len);
}

int apx_model_blob_strip_by(const ApxPlan *plan, const ApxBlobLookup *by, const void *model,
                            size_t len, ApxArena *A, const void **out, size_t *out_len) {
  Lookup lk = {plan, by}, *k = &lk;
  *out = model;
  *out_len = len;
  /* room: the model, and 9 bytes per open submessage (two levels) for the length slots */
  Out o = {apx_arena_alloc_raw(A, len + 32), 0};
  if (!o.p) return -1;
  size_t stripped = 0;
  if (strip_model(k, model, len, &o, &stripped)) return strip_unpacked(k, model, len, A, out, out_len);
  if (!stripped) return 0;
  *out = o.p;
  *out_len = o.n;
  return 0;
}

static int strip_unpacked(const Lookup *k, const void *model, size_t len, ApxArena *A,
                          const void **out, size_t *out_len) {
  *out = model;
  *out_len = len;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, model);
  if (!m || !m->graph) {
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    return 0;
  }
  Onnx__GraphProto *g = m->graph;
  /* shallow copies with empty data, swapped in for packing, then the originals restored */
  Onnx__TensorProto **orig = apx_arena_alloc(A, (g->n_initializer + 1) * sizeof *orig);
  Onnx__TensorProto *copies = apx_arena_alloc(A, (g->n_initializer + 1) * sizeof *copies);
  int rc = 0;
  if (!orig || !copies) {
    rc = -1;
    goto done;
  }
  size_t n_stripped = 0;
  for (size_t i = 0; i < g->n_initializer; i++) {
    Onnx__TensorProto *t = g->initializer[i];
    orig[i] = t;
    if (!restorable(k, t)) continue;
    Onnx__TensorProto *c = &copies[i];
    *c = *t;
    c->has_raw_data = 0;
    c->raw_data.len = 0;
    c->raw_data.data = NULL;
    c->n_float_data = c->n_int32_data = c->n_int64_data = c->n_double_data = c->n_uint64_data = 0;
    c->n_string_data = 0;
    g->initializer[i] = c;
    n_stripped++;
  }
  if (n_stripped) {
    size_t n = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = apx_arena_alloc_raw(A, n ? n : 1);
    if (!buf) {
      rc = -1;
    } else {
      onnx__model_proto__pack(m, buf);
      *out = buf;
      *out_len = n;
    }
  }
  for (size_t i = 0; i < g->n_initializer; i++) g->initializer[i] = orig[i];
done:
  onnx__model_proto__free_unpacked(m, NULL);
  return rc;
}
