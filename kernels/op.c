/* op.c - the op table expanded: names, traits, arity, attribute structs and their fields. */
#include "kernels/op.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- attribute field tables (attrs.def), one per struct --------------------------------
 * Each table is built inside a function so that its fields can name the struct as S. */
#define APX_FIELD_ROW(f, onnx, kind, n, fdef, idef, names) \
  {#f, onnx, kind, n, (uint32_t)offsetof(S, f), fdef, idef, names},
#define APX_F32(f, onnx, def) APX_FIELD_ROW(f, onnx, APX_FIELD_F32, 1, def, 0, NULL)
#define APX_I32(f, onnx, def) APX_FIELD_ROW(f, onnx, APX_FIELD_I32, 1, 0.0f, def, NULL)
#define APX_I64(f, onnx, def) APX_FIELD_ROW(f, onnx, APX_FIELD_I64, 1, 0.0f, def, NULL)
#define APX_BOOL(f, onnx, def) APX_FIELD_ROW(f, onnx, APX_FIELD_BOOL, 1, 0.0f, def, NULL)
#define APX_ENUM(f, onnx, def, names) APX_FIELD_ROW(f, onnx, APX_FIELD_ENUM, 1, 0.0f, def, names)
#define APX_DTYPE(f, onnx, def) APX_FIELD_ROW(f, onnx, APX_FIELD_DTYPE, 1, 0.0f, def, NULL)
#define APX_COUNT(f) APX_FIELD_ROW(f, NULL, APX_FIELD_COUNT, 1, 0.0f, 0, NULL)
#define APX_I64S(f, n, onnx) APX_FIELD_ROW(f, onnx, APX_FIELD_I64S, n, 0.0f, 0, NULL)
#define APX_I64V(f, max, onnx) APX_FIELD_ROW(f, onnx, APX_FIELD_I64V, max, 0.0f, 0, NULL)
#define APX_F64V(f, max) APX_FIELD_ROW(f, NULL, APX_FIELD_F64V, max, 0.0f, 0, NULL)
#define APX_LABELV(f, max) APX_FIELD_ROW(f, NULL, APX_FIELD_LABELV, max, 0.0f, 0, NULL)
#define APX_ATTRS(Name, FIELDS)                                                     \
  static const ApxAttrDesc *desc_##Name(void) {                                     \
    typedef Name S;                                                                 \
    static const ApxAttrField fields[] = {FIELDS};                                  \
    static const ApxAttrDesc desc = {#Name, sizeof(S),                              \
                                     (int32_t)(sizeof fields / sizeof fields[0]), fields}; \
    return &desc;                                                                   \
  }
#include "kernels/attrs.def"
#undef APX_ATTRS
#undef APX_FIELD_ROW
#undef APX_F32
#undef APX_I32
#undef APX_I64
#undef APX_BOOL
#undef APX_ENUM
#undef APX_DTYPE
#undef APX_COUNT
#undef APX_I64S
#undef APX_I64V
#undef APX_F64V
#undef APX_LABELV

/* ---- the op table ---------------------------------------------------------------------- */
static const ApxOpInfo op_table[APX_OP_COUNT] = {
    [APX_OP_INVALID] = {"?", APX_PREC_PASS, 0, 0, 0, "ApxAttrNone", 0, 0, 0, 0, 0, 0},
#define IO(a, b, c, d) a, b, c, d
#define APX_GRAD(rule) 1
#define APX_NOGRAD 0
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND)                     \
  [APX_OP_##ID] = {NAME, APX_PREC_##PREC, (FLAGS), (STATIC), sizeof(ATTRS), #ATTRS, ARITY, \
                   GRAD, APX_KIND_##KIND},
#define V1 APX_OPF_V1
#define FOLD APX_OPF_FOLD
#define TIER2 APX_OPF_TIER2
#define LISTED APX_OPF_LISTED
#define INTERNAL APX_OPF_INTERNAL
#define ELEMWISE APX_OPF_ELEMWISE
#define INPLACE APX_OPF_INPLACE
#define SHAPEONLY APX_OPF_SHAPEONLY
#define MULTITENSOR APX_OPF_MULTITENSOR
#define REWRITE APX_OPF_REWRITE
#define RANDOM APX_OPF_RANDOM
#include "kernels/ops.def"
#undef APX_OP
#undef IO
#undef APX_GRAD
#undef APX_NOGRAD
#undef V1
#undef FOLD
#undef TIER2
#undef LISTED
#undef INTERNAL
#undef ELEMWISE
#undef INPLACE
#undef SHAPEONLY
#undef MULTITENSOR
#undef REWRITE
#undef RANDOM
};

const ApxOpInfo *apx_op_info(ApxOp op) {
  if ((int)op <= 0 || op >= APX_OP_COUNT) return &op_table[APX_OP_INVALID];
  return &op_table[op];
}

ApxOp apx_op_from_name(const char *name) {
  if (!name) return APX_OP_INVALID;
  for (int i = 1; i < APX_OP_COUNT; i++)
    if (strcmp(op_table[i].name, name) == 0) return (ApxOp)i;
  return APX_OP_INVALID;
}

const ApxAttrDesc *apx_op_attrs(ApxOp op) {
  switch (op) {
#define IO(a, b, c, d)
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) \
  case APX_OP_##ID: return desc_##ATTRS();
#include "kernels/ops.def"
#undef APX_OP
#undef IO
    default: return desc_ApxAttrNone();
  }
}

const char *apx_prec_class_name(ApxPrecClass c) {
  switch (c) {
    case APX_PREC_HALF: return "half";
    case APX_PREC_FP32: return "fp32";
    case APX_PREC_PROMOTE: return "promote";
    case APX_PREC_PASS: return "pass";
    case APX_PREC_INHERIT: return "inherit";
    case APX_PREC_FIXED: return "fixed";
  }
  return "?";
}

/* ---- attribute fields ------------------------------------------------------------------ */

const char *apx_attr_enum_name(const ApxAttrField *f, int64_t v, char *buf, size_t cap) {
  if (!f->names || v < 0 || cap == 0) return NULL;
  const char *p = f->names;
  for (int64_t i = 0; i < v; i++) {
    p = strchr(p, '|');
    if (!p) return NULL;
    p++;
  }
  size_t len = strcspn(p, "|");
  if (len >= cap) len = cap - 1;
  memcpy(buf, p, len);
  buf[len] = '\0';
  return buf;
}

int apx_attr_enum_index(const ApxAttrField *f, const char *name) {
  if (!f->names || !name) return -1;
  size_t want = strlen(name);
  const char *p = f->names;
  for (int i = 0;; i++) {
    size_t len = strcspn(p, "|");
    if (len == want && strncmp(p, name, len) == 0) return i;
    if (!p[len]) return -1;
    p += len + 1;
  }
}

static int32_t field_i32(const void *a, const ApxAttrField *f) {
  int32_t v;
  memcpy(&v, (const char *)a + f->offset, sizeof v);
  return v;
}

void apx_attrs_defaults(ApxOp op, void *attrs) {
  const ApxAttrDesc *d = apx_op_attrs(op);
  memset(attrs, 0, d->size);
  for (int32_t i = 0; i < d->n_fields; i++) {
    const ApxAttrField *f = &d->fields[i];
    char *p = (char *)attrs + f->offset;
    switch ((ApxAttrFieldKind)f->kind) {
      case APX_FIELD_F32: memcpy(p, &f->fdef, sizeof f->fdef); break;
      case APX_FIELD_I32: case APX_FIELD_BOOL: case APX_FIELD_ENUM: case APX_FIELD_DTYPE: {
        int32_t v = (int32_t)f->idef;
        memcpy(p, &v, sizeof v);
        break;
      }
      case APX_FIELD_I64: memcpy(p, &f->idef, sizeof f->idef); break;
      case APX_FIELD_COUNT: case APX_FIELD_I64S: case APX_FIELD_I64V: case APX_FIELD_F64V:
      case APX_FIELD_LABELV: break;
    }
  }
}

char *apx_attrs_format(ApxOp op, const void *attrs, char *buf, size_t cap) {
  const ApxAttrDesc *d = apx_op_attrs(op);
  size_t len = 0;
  if (cap) buf[0] = '\0';
  if (!attrs || !d || !strcmp(d->type, "ApxAttrNone")) return buf;
#define PUT(...)                                                                \
  do {                                                                          \
    if (len < cap) len += (size_t)snprintf(buf + len, cap - len, __VA_ARGS__); \
  } while (0)
  int32_t count = 0;
  for (int32_t i = 0; i < d->n_fields; i++) {
    const ApxAttrField *f = &d->fields[i];
    const char *p = (const char *)attrs + f->offset;
    if (f->kind == APX_FIELD_COUNT) {
      count = field_i32(attrs, f);
      continue; /* shown as its array's length */
    }
    PUT("%s%s=", len ? " " : "", f->name);
    switch ((ApxAttrFieldKind)f->kind) {
      case APX_FIELD_F32: {
        float v;
        memcpy(&v, p, sizeof v);
        PUT("%g", v);
        break;
      }
      case APX_FIELD_I32: case APX_FIELD_BOOL: PUT("%d", field_i32(attrs, f)); break;
      case APX_FIELD_I64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        PUT("%" PRId64, v);
        break;
      }
      case APX_FIELD_ENUM: {
        char name[32];
        int32_t v = field_i32(attrs, f);
        const char *s = apx_attr_enum_name(f, v, name, sizeof name);
        if (s) PUT("%s", s); else PUT("%d", v);
        break;
      }
      case APX_FIELD_DTYPE: PUT("%s", apx_dtype_short((ApxDType)field_i32(attrs, f))); break;
      case APX_FIELD_COUNT: break;
      case APX_FIELD_I64S: case APX_FIELD_I64V: {
        int32_t n = f->kind == APX_FIELD_I64S ? f->n : (count < 0 ? 0 : count > f->n ? f->n : count);
        PUT("[");
        for (int32_t k = 0; k < n; k++) {
          int64_t v;
          memcpy(&v, p + (size_t)k * sizeof v, sizeof v);
          PUT("%s%" PRId64, k ? "," : "", v);
        }
        PUT("]");
        break;
      }
      case APX_FIELD_F64V: case APX_FIELD_LABELV: {
        int32_t n = count < 0 ? 0 : count > f->n ? f->n : count;
        if (f->kind == APX_FIELD_LABELV) PUT("\"");
        else PUT("[");
        for (int32_t k = 0; k < n; k++) {
          if (f->kind == APX_FIELD_F64V) {
            double v;
            memcpy(&v, p + (size_t)k * sizeof v, sizeof v);
            PUT("%s%.17g", k ? "," : "", v);
          } else {
            int64_t v;
            memcpy(&v, p + (size_t)k * sizeof v, sizeof v);
            PUT("%c", v > 32 && v < 127 ? (char)v : '?');
          }
        }
        PUT(f->kind == APX_FIELD_LABELV ? "\"" : "]");
        break;
      }
    }
  }
#undef PUT
  return buf;
}
