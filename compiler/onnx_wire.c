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

/* A TensorProto's length without raw_data, and its (last) raw_data. -1: not understood. */
static int tensor_measure(const uint8_t *p, size_t len, size_t *out_len, ApxRawSpan *raw) {
  size_t i = 0, n = 0;
  Field f;
  int r;
  memset(raw, 0, sizeof *raw);
  while ((r = next_field(p, len, &i, &f)) > 0) {
    if (f.num != TENSOR_RAW_DATA) {
      n += (size_t)(f.end - f.start);
    } else if (f.wire != WIRE_LEN) {
      return -1;
    } else {
      raw->present = 1, raw->data = f.payload, raw->len = f.payload_len;
    }
  }
  *out_len = n;
  return r;
}

static uint8_t *tensor_write(uint8_t *o, const uint8_t *p, size_t len) {
  size_t i = 0;
  Field f;
  while (next_field(p, len, &i, &f) > 0)
    if (f.num != TENSOR_RAW_DATA) o = put(o, f.start, f.end);
  return o;
}

void apx_onnx_stripped_free(ApxStripped *s) {
  free(s->buf);
  free(s->raw);
  memset(s, 0, sizeof *s);
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
  const uint8_t *gp = graph.payload;
  size_t glen = graph.payload_len, n_init = 0;
  for (i = 0; (r = next_field(gp, glen, &i, &f)) > 0;)
    if (f.num == GRAPH_INITIALIZER) {
      if (f.wire != WIRE_LEN) return 0;
      n_init++;
    }
  if (r < 0 || n_init == 0) return 0;
  size_t *tlen = malloc(n_init * sizeof *tlen);
  out->raw = calloc(n_init, sizeof *out->raw);
  if (!tlen || !out->raw) {
    free(tlen);
    apx_onnx_stripped_free(out);
    return -1;
  }
  /* sizes: the graph's and each initializer's without raw_data */
  size_t k = 0, glen2 = 0, any = 0;
  for (i = 0; next_field(gp, glen, &i, &f) > 0;) {
    if (f.num != GRAPH_INITIALIZER) {
      glen2 += (size_t)(f.end - f.start);
      continue;
    }
    if (tensor_measure(f.payload, f.payload_len, &tlen[k], &out->raw[k]) < 0) {
      free(tlen);
      apx_onnx_stripped_free(out);
      return 0;
    }
    any |= out->raw[k].present;
    glen2 += (size_t)(f.key_end - f.start) + varint_size(tlen[k]) + tlen[k];
    k++;
  }
  if (!any) {
    free(tlen);
    apx_onnx_stripped_free(out);
    return 0;
  }
  size_t total = len - (size_t)(graph.end - graph.start) + (size_t)(graph.key_end - graph.start) +
                 varint_size(glen2) + glen2;
  out->buf = malloc(total + 1);
  if (!out->buf) {
    free(tlen);
    apx_onnx_stripped_free(out);
    return -1;
  }
  uint8_t *o = out->buf;
  for (i = 0; next_field(model, len, &i, &f) > 0;) {
    if (f.num != MODEL_GRAPH) {
      o = put(o, f.start, f.end);
      continue;
    }
    o = put(o, f.start, f.key_end);
    o = put_varint(o, glen2);
    size_t j = 0;
    Field h;
    for (k = 0; next_field(gp, glen, &j, &h) > 0;) {
      if (h.num != GRAPH_INITIALIZER) {
        o = put(o, h.start, h.end);
        continue;
      }
      o = put(o, h.start, h.key_end);
      o = put_varint(o, tlen[k]);
      o = tensor_write(o, h.payload, h.payload_len);
      k++;
    }
  }
  free(tlen);
  out->len = (size_t)(o - out->buf); /* == total */
  out->n_raw = n_init;
  return 1;
}
