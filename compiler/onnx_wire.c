/* onnx_wire.c - ModelProto bytes without the initializers' raw_data (see onnx_wire.h). */
#include "compiler/onnx_wire.h"

#include <stdlib.h>
#include <string.h>

enum { MODEL_GRAPH = 7, GRAPH_INITIALIZER = 5, TENSOR_RAW_DATA = 9, WIRE_VARINT = 0,
       WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

/* One field of a message: key from start to key_end, payload (wire type 2) at payload, the
 * next field at end. */
typedef struct Field {
  uint64_t num;
  int wire;
  const uint8_t *start, *key_end, *payload, *end;
  size_t payload_len;
} Field;

static int varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v) {
  uint64_t r = 0;
  for (int s = 0; s < 70 && *i < len; s += 7) {
    uint8_t b = p[(*i)++];
    if (s == 63 && b > 1) return 0; /* more than 64 bits */
    r |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) {
      *v = r;
      return 1;
    }
  }
  return 0;
}

/* 1: *f is the field at *i (moved past it); 0: end of the message; -1: framing not understood. */
static int next_field(const uint8_t *p, size_t len, size_t *i, Field *f) {
  if (*i >= len) return 0;
  f->start = p + *i;
  uint64_t key, v;
  /* protobuf-c reads keys and lengths of at most 5 bytes: anything longer is its error */
  if (!varint(p, len, i, &key) || (key >> 3) == 0 || p + *i - f->start > 5) return -1;
  f->key_end = p + *i;
  f->num = key >> 3;
  f->wire = (int)(key & 7);
  f->payload = NULL;
  f->payload_len = 0;
  switch (f->wire) {
    case WIRE_VARINT:
      if (!varint(p, len, i, &v)) return -1;
      break;
    case WIRE_FIXED64:
      if (len - *i < 8) return -1;
      *i += 8;
      break;
    case WIRE_FIXED32:
      if (len - *i < 4) return -1;
      *i += 4;
      break;
    case WIRE_LEN:
      if (!varint(p, len, i, &v) || p + *i - f->key_end > 5 || v > len - *i) return -1;
      f->payload = p + *i;
      f->payload_len = (size_t)v;
      *i += (size_t)v;
      break;
    default: return -1; /* groups (3, 4) and the rest */
  }
  f->end = p + *i;
  return 1;
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

static uint8_t *put_varint(uint8_t *o, uint64_t v) {
  while (v >= 0x80) *o++ = (uint8_t)(v | 0x80), v >>= 7;
  *o++ = (uint8_t)v;
  return o;
}

static uint8_t *put(uint8_t *o, const uint8_t *from, const uint8_t *to) {
  memcpy(o, from, (size_t)(to - from));
  return o + (to - from);
}

/* An initializer field of the graph: where it is, its TensorProto's length without raw_data,
 * and where its raw_data fields are (the first one; n_raw of them). */
typedef struct Init {
  Field f;
  size_t len;
  const uint8_t *raw_start, *raw_end;
  int n_raw;
} Init;

/* Measures initializer field f into *in and its (last) raw_data into *raw. -1: not understood. */
static int tensor_measure(const Field *f, Init *in, ApxRawSpan *raw) {
  size_t i = 0, n = 0;
  Field t;
  int r;
  in->f = *f;
  in->n_raw = 0;
  memset(raw, 0, sizeof *raw);
  while ((r = next_field(f->payload, f->payload_len, &i, &t)) > 0) {
    if (t.num != TENSOR_RAW_DATA) {
      n += (size_t)(t.end - t.start);
      continue;
    }
    if (t.wire != WIRE_LEN) return -1;
    if (in->n_raw++ == 0) in->raw_start = t.start, in->raw_end = t.end;
    raw->present = 1, raw->data = t.payload, raw->len = t.payload_len;
  }
  in->len = n;
  return r;
}

static uint8_t *tensor_write(uint8_t *o, const Init *in) {
  const uint8_t *p = in->f.payload, *e = p + in->f.payload_len;
  if (in->n_raw == 1) /* the usual case: the bytes around the one raw_data */
    return put(put(o, p, in->raw_start), in->raw_end, e);
  size_t i = 0;
  Field t;
  while (next_field(p, in->f.payload_len, &i, &t) > 0)
    if (t.num != TENSOR_RAW_DATA) o = put(o, t.start, t.end);
  return o;
}

void apx_onnx_stripped_free(ApxStripped *s) {
  free(s->buf);
  free(s->raw);
  memset(s, 0, sizeof *s);
}

static int give_up(ApxStripped *out, Init *inits, int rc) {
  free(inits);
  apx_onnx_stripped_free(out);
  return rc;
}

int apx_onnx_strip_raw(const uint8_t *model, size_t len, ApxStripped *out) {
  memset(out, 0, sizeof *out);
  /* the graph: exactly one length-delimited field 7 */
  size_t i = 0;
  Field f, graph = {0};
  int r, n_graph = 0;
  while ((r = next_field(model, len, &i, &f)) > 0)
    if (f.num == MODEL_GRAPH) {
      if (f.wire != WIRE_LEN) return 0;
      graph = f;
      n_graph++;
    }
  if (r < 0 || n_graph != 1) return 0;
  /* one walk over the graph's fields: each initializer measured without its raw_data */
  const uint8_t *gp = graph.payload;
  size_t glen = graph.payload_len, glen2 = glen, n = 0, cap = 0;
  Init *inits = NULL;
  int any = 0;
  for (i = 0; (r = next_field(gp, glen, &i, &f)) > 0;) {
    if (f.num != GRAPH_INITIALIZER) continue;
    if (f.wire != WIRE_LEN) return give_up(out, inits, 0);
    if (n == cap) {
      size_t nc = cap ? 2 * cap : 1024;
      Init *p = realloc(inits, nc * sizeof *p);
      ApxRawSpan *q = p ? realloc(out->raw, nc * sizeof *q) : NULL;
      if (p) inits = p;
      if (!q) return give_up(out, inits, -1);
      out->raw = q;
      cap = nc;
    }
    if (tensor_measure(&f, &inits[n], &out->raw[n]) < 0) return give_up(out, inits, 0);
    any |= inits[n].n_raw > 0;
    glen2 -= (size_t)(f.end - f.key_end);
    glen2 += varint_size(inits[n].len) + inits[n].len;
    n++;
  }
  if (r < 0 || !any) return give_up(out, inits, 0);
  size_t total = len - (size_t)(graph.end - graph.key_end) + varint_size(glen2) + glen2;
  out->buf = malloc(total + 1);
  if (!out->buf) return give_up(out, inits, -1);
  /* the model with the graph written again: the bytes between initializers as they are */
  uint8_t *o = put(out->buf, model, graph.key_end);
  o = put_varint(o, glen2);
  const uint8_t *from = gp;
  for (size_t k = 0; k < n; k++) {
    o = put(o, from, inits[k].f.key_end);
    o = put_varint(o, inits[k].len);
    o = tensor_write(o, &inits[k]);
    from = inits[k].f.end;
  }
  o = put(o, from, gp + glen);
  o = put(o, graph.end, model + len);
  free(inits);
  out->len = (size_t)(o - out->buf); /* == total */
  out->n_raw = n;
  return 1;
}
