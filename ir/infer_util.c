/* infer_util.c - shared inference helpers: attribute and static-input readers, dtype and
 * shape checks with contract messages, broadcasting, and the value_info-checking setter. */
#include "ir/infer_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"

/* ---- node access -------------------------------------------------------------------- */

const ApxValue *infer_in(const ApxGraph *g, int node, int k) {
  const ApxNode *n = &g->nodes[node];
  if (k < 0 || k >= n->n_in || n->in[k] < 0) return NULL;
  return &g->vals[n->in[k]];
}

ApxValue *infer_out(ApxGraph *g, int node, int k) {
  const ApxNode *n = &g->nodes[node];
  if (k < 0 || k >= n->n_out || n->out[k] < 0) return NULL;
  return &g->vals[n->out[k]];
}

IShape infer_shape_of(const ApxValue *v) {
  IShape s;
  memset(&s, 0, sizeof s);
  s.rank = v->rank < 0 ? 0 : v->rank;
  for (int i = 0; i < s.rank; i++) s.dims[i] = v->dims[i];
  return s;
}

char *infer_dims_str(int32_t rank, const int64_t *dims, char *buf, size_t cap) {
  size_t k = 0;
  if (cap == 0) return buf;
  buf[0] = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (int i = 0; i < rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

int64_t infer_numel(int32_t rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] && n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}

int infer_in_error(ApxDiag *d, const ApxGraph *g, int node, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const ApxNode *n = &g->nodes[node];
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: node '%s' (%s) %s", g->file,
                        n->name ? n->name : "?", n->op_type ? n->op_type : apx_op_name(n->op), msg);
}

/* ---- generic attributes ------------------------------------------------------------- */

static const char *attr_type_name(ApxAttrType t) {
  switch (t) {
    case APX_ATTR_FLOAT: return "a float";
    case APX_ATTR_INT: return "an int";
    case APX_ATTR_STRING: return "a string";
    case APX_ATTR_TENSOR: return "a tensor";
    case APX_ATTR_GRAPH: return "a graph";
    case APX_ATTR_FLOATS: return "a list of floats";
    case APX_ATTR_INTS: return "a list of ints";
    case APX_ATTR_STRINGS: return "a list of strings";
    default: return "undefined";
  }
}

static int attr_type_error(const ApxGraph *g, int node, const ApxAttr *a, ApxAttrType want,
                           ApxDiag *d) {
  return apx_node_error(d, g, node, "attribute '%s' must be %s, got %s", a->name,
                        attr_type_name(want), attr_type_name(a->type));
}

int infer_attr_int(const ApxGraph *g, int node, const char *name, int64_t def, int64_t *out,
                   ApxDiag *d) {
  const ApxAttr *a = apx_node_attr(g, node, name);
  *out = def;
  if (!a) return 0;
  if (a->type != APX_ATTR_INT) return attr_type_error(g, node, a, APX_ATTR_INT, d);
  *out = a->i;
  return 0;
}

int infer_attr_float(const ApxGraph *g, int node, const char *name, float def, float *out,
                     ApxDiag *d) {
  const ApxAttr *a = apx_node_attr(g, node, name);
  *out = def;
  if (!a) return 0;
  if (a->type == APX_ATTR_INT) { /* some exporters write 1 for 1.0 */
    *out = (float)a->i;
    return 0;
  }
  if (a->type != APX_ATTR_FLOAT) return attr_type_error(g, node, a, APX_ATTR_FLOAT, d);
  *out = a->f;
  return 0;
}

int infer_attr_string(const ApxGraph *g, int node, const char *name, const char *def,
                      const char **out, ApxDiag *d) {
  const ApxAttr *a = apx_node_attr(g, node, name);
  *out = def;
  if (!a) return 0;
  if (a->type != APX_ATTR_STRING) return attr_type_error(g, node, a, APX_ATTR_STRING, d);
  *out = a->s ? a->s : "";
  return 0;
}

int infer_attr_ints(const ApxGraph *g, int node, const char *name, int64_t *out, int cap,
                    int *n, ApxDiag *d) {
  const ApxAttr *a = apx_node_attr(g, node, name);
  *n = 0;
  if (!a) return 0;
  if (a->type == APX_ATTR_INT) { /* a single int where a list is expected */
    out[0] = a->i;
    *n = 1;
    return 1;
  }
  if (a->type != APX_ATTR_INTS) return attr_type_error(g, node, a, APX_ATTR_INTS, d);
  if (a->n > cap)
    return apx_node_error(d, g, node, "attribute '%s' has %d values, at most %d supported",
                          name, a->n, cap);
  for (int i = 0; i < a->n; i++) out[i] = a->ints[i];
  *n = a->n;
  return 1;
}

/* ---- attributes from the typed struct's fields (attrs.def) ------------------------- */

/* "'a' or 'b'" / "'a', 'b' or 'c'" from an ENUM field's names. */
static void enum_choices(const ApxAttrField *f, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  char name[64];
  int count = 0;
  while (apx_attr_enum_name(f, count, name, sizeof name)) count++;
  for (int i = 0; i < count && len < cap; i++) {
    apx_attr_enum_name(f, i, name, sizeof name);
    const char *sep = i == 0 ? "" : i == count - 1 ? " or " : ", ";
    len += (size_t)snprintf(buf + len, cap - len, "%s'%s'", sep, name);
  }
}

int infer_attrs_from_fields(ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  const ApxAttrDesc *desc = apx_op_attrs(n->op);
  char *base = n->typed;
  for (int32_t i = 0; i < desc->n_fields; i++) {
    const ApxAttrField *f = &desc->fields[i];
    if (!f->onnx) continue;
    char *p = base + f->offset;
    switch ((ApxAttrFieldKind)f->kind) {
      case APX_FIELD_F32: {
        float v;
        if (infer_attr_float(g, node, f->onnx, f->fdef, &v, d)) return -1;
        if (!isfinite(v)) return apx_node_error(d, g, node, "attribute '%s' = %g must be finite", f->onnx, v);
        memcpy(p, &v, sizeof v);
        break;
      }
      case APX_FIELD_I32: case APX_FIELD_BOOL: case APX_FIELD_DTYPE: {
        int64_t v;
        if (infer_attr_int(g, node, f->onnx, f->idef, &v, d)) return -1;
        if (f->kind == APX_FIELD_BOOL && v != 0 && v != 1)
          return apx_node_error(d, g, node, "attribute '%s' = %" PRId64 " (expected 0 or 1)", f->onnx, v);
        if (v < INT32_MIN || v > INT32_MAX)
          return apx_node_error(d, g, node, "attribute '%s' = %" PRId64 " is out of range", f->onnx, v);
        int32_t w = (int32_t)v;
        memcpy(p, &w, sizeof w);
        break;
      }
      case APX_FIELD_I64: {
        int64_t v;
        if (infer_attr_int(g, node, f->onnx, f->idef, &v, d)) return -1;
        memcpy(p, &v, sizeof v);
        break;
      }
      case APX_FIELD_ENUM: {
        char def[64], choices[256];
        const char *s;
        if (!apx_attr_enum_name(f, f->idef, def, sizeof def))
          return apx_node_error(d, g, node, "internal error: attribute '%s' has no default", f->onnx);
        if (infer_attr_string(g, node, f->onnx, def, &s, d)) return -1;
        int32_t idx = apx_attr_enum_index(f, s);
        if (idx < 0) {
          enum_choices(f, choices, sizeof choices);
          return apx_node_error(d, g, node, "attribute '%s' = '%s' (expected %s)", f->onnx, s, choices);
        }
        memcpy(p, &idx, sizeof idx);
        break;
      }
      case APX_FIELD_COUNT: case APX_FIELD_I64S: case APX_FIELD_I64V: case APX_FIELD_F64V:
      case APX_FIELD_LABELV:
        break; /* arrays: ops with array attributes canonicalize them by hand */
    }
  }
  return 0;
}

/* ---- static inputs ------------------------------------------------------------------ */

int infer_is_const(const ApxValue *v) {
  return v->kind == APX_VAL_CONST && v->rank >= 0 && (v->data || apx_value_numel(v) == 0);
}

int64_t infer_elem_i64(const void *data, ApxDType dt, int64_t i) {
  switch (dt) {
    case APX_DT_I64: return ((const int64_t *)data)[i];
    case APX_DT_I32: return ((const int32_t *)data)[i];
    case APX_DT_I16: return ((const int16_t *)data)[i];
    case APX_DT_I8: return ((const int8_t *)data)[i];
    case APX_DT_U8: return ((const uint8_t *)data)[i];
    case APX_DT_BOOL: return ((const uint8_t *)data)[i] != 0;
    case APX_DT_U16: return ((const uint16_t *)data)[i];
    case APX_DT_U32: return ((const uint32_t *)data)[i];
    case APX_DT_U64: return (int64_t)((const uint64_t *)data)[i];
    default: return (int64_t)infer_elem_f64(data, dt, i);
  }
}

double infer_elem_f64(const void *data, ApxDType dt, int64_t i) {
  switch (dt) {
    case APX_DT_F32: return ((const float *)data)[i];
    case APX_DT_F64: return ((const double *)data)[i];
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)data)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)data)[i]);
    case APX_DT_U64: return (double)((const uint64_t *)data)[i];
    default: return (double)infer_elem_i64(data, dt, i);
  }
}

static int static_not_const(const ApxGraph *g, int node, int slot, const char *what,
                            const ApxValue *v, ApxDiag *d) {
  const char *why;
  char buf[300];
  if (v->kind == APX_VAL_INPUT)
    why = "it is a graph input";
  else if (v->kind == APX_VAL_PARAM)
    why = "it is a trainable parameter";
  else if (v->kind == APX_VAL_STATE)
    why = "it is runtime state";
  else if (v->producer >= 0) {
    const ApxNode *p = &g->nodes[v->producer];
    snprintf(buf, sizeof buf, "it is computed at run time by node '%s' (%s)", p->name,
             p->op_type ? p->op_type : apx_op_name(p->op));
    why = buf;
  } else
    why = "it has no data";
  return infer_in_error(d, g, node, "input %d '%s' must be a compile-time constant (value '%s': %s)",
                        slot, what, v->name, why);
}

int infer_static_ints(const ApxGraph *g, int node, int slot, const char *what, int64_t *out,
                      int cap, int *n, ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  *n = 0;
  if (!v) return 0;
  if (!infer_is_const(v)) return static_not_const(g, node, slot, what, v, d);
  if (v->dtype != APX_DT_I64 && v->dtype != APX_DT_I32)
    return infer_in_error(d, g, node, "input %d '%s' must be int64 or int32, got %s", slot,
                          what, apx_dtype_name(v->dtype));
  if (v->rank > 1)
    return infer_in_error(d, g, node, "input %d '%s' must be 1-D, got rank %d", slot, what,
                          v->rank);
  int64_t cnt = apx_value_numel(v);
  if (cnt > cap)
    return infer_in_error(d, g, node, "input %d '%s' has %" PRId64 " values, at most %d supported",
                          slot, what, cnt, cap);
  for (int64_t i = 0; i < cnt; i++) out[i] = infer_elem_i64(v->data, v->dtype, i);
  *n = (int)cnt;
  return 1;
}

int infer_static_scalar(const ApxGraph *g, int node, int slot, const char *what, double *out,
                        ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  if (!v) return 0;
  if (!infer_is_const(v)) return static_not_const(g, node, slot, what, v, d);
  if (apx_value_numel(v) != 1)
    return infer_in_error(d, g, node, "input %d '%s' must be a scalar, got %" PRId64 " values",
                          slot, what, apx_value_numel(v));
  if (apx_dtype_size(v->dtype) == 0)
    return infer_in_error(d, g, node, "input %d '%s' has unsupported dtype %s", slot, what,
                          apx_dtype_name(v->dtype));
  *out = infer_elem_f64(v->data, v->dtype, 0);
  return 1;
}

/* ---- checks ------------------------------------------------------------------------- */

int infer_dtype_in(ApxDType t, unsigned mask) {
  switch (t) {
    case APX_DT_F16: case APX_DT_BF16: case APX_DT_F32: case APX_DT_F64:
      return (mask & INFER_DT_FLOAT) != 0;
    case APX_DT_I32: case APX_DT_I64:
      return (mask & (INFER_DT_SINT | INFER_DT_INDEX)) != 0;
    case APX_DT_I8: case APX_DT_I16:
      return (mask & INFER_DT_SINT) != 0;
    case APX_DT_U8: case APX_DT_U16: case APX_DT_U32: case APX_DT_U64:
      return (mask & INFER_DT_UINT) != 0;
    case APX_DT_BOOL:
      return (mask & INFER_DT_BOOL) != 0;
    default:
      return 0;
  }
}

static const char *mask_name(unsigned mask) {
  if (mask == INFER_DT_FLOAT) return "a float type";
  if (mask == INFER_DT_INDEX) return "int32 or int64";
  if (mask == INFER_DT_BOOL) return "bool";
  if (mask == INFER_DT_NUMERIC) return "a numeric type";
  if (mask == (INFER_DT_FLOAT | INFER_DT_INDEX)) return "a float type, int32 or int64";
  if (mask == (INFER_DT_FLOAT | INFER_DT_SINT)) return "a float or signed integer type";
  return "another type";
}

int infer_check_dtype(const ApxGraph *g, int node, int slot, unsigned mask, ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  if (!v || infer_dtype_in(v->dtype, mask)) return 0;
  return infer_in_error(d, g, node, "input %d '%s': dtype %s not supported here (expected %s)",
                        slot, v->name, apx_dtype_name(v->dtype), mask_name(mask));
}

int infer_same_dtype(const ApxGraph *g, int node, int a, int b, ApxDiag *d) {
  const ApxValue *va = infer_in(g, node, a), *vb = infer_in(g, node, b);
  if (!va || !vb || va->dtype == vb->dtype) return 0;
  return infer_in_error(d, g, node, "input %d '%s': dtype %s, expected %s (the dtype of input %d)",
                        b, vb->name, apx_dtype_name(vb->dtype), apx_dtype_name(va->dtype), a);
}

int infer_check_rank(const ApxGraph *g, int node, int slot, int lo, int hi, ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  if (!v || (v->rank >= lo && v->rank <= hi)) return 0;
  char buf[256], want[64];
  apx_value_shape_str(v, buf, sizeof buf);
  if (lo == hi)
    snprintf(want, sizeof want, "rank %d", lo);
  else if (hi >= APX_MAX_RANK)
    snprintf(want, sizeof want, "rank >= %d", lo);
  else
    snprintf(want, sizeof want, "rank %d..%d", lo, hi);
  return infer_in_error(d, g, node, "input %d '%s': expected %s, got %s", slot, v->name, want,
                        buf);
}

int infer_err_expected(const ApxGraph *g, int node, int slot, int32_t rank,
                       const int64_t *dims, ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  char e[256], got[256];
  infer_dims_str(rank, dims, e, sizeof e);
  if (v)
    apx_value_shape_str(v, got, sizeof got);
  else
    snprintf(got, sizeof got, "nothing");
  return infer_in_error(d, g, node, "input %d: expected %s, got %s", slot, e, got);
}

int infer_check_shape(const ApxGraph *g, int node, int slot, int32_t rank, const int64_t *dims,
                      ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  int ok = v && v->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = v->dims[i] == dims[i];
  return ok ? 0 : infer_err_expected(g, node, slot, rank, dims, d);
}

int infer_norm_axis(const ApxGraph *g, int node, const char *what, int64_t axis, int32_t rank,
                    int inclusive_end, int64_t *out, ApxDiag *d) {
  int64_t hi = inclusive_end ? rank : rank - 1;
  if (axis < -(int64_t)rank || axis > hi)
    return apx_node_error(d, g, node, "%s = %" PRId64 " is out of range for a rank-%d input",
                          what, axis, rank);
  *out = axis < 0 ? axis + rank : axis;
  return 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int infer_norm_axes(const ApxGraph *g, int node, const char *what, int64_t *axes, int n,
                    int32_t rank, ApxDiag *d) {
  for (int i = 0; i < n; i++)
    if (infer_norm_axis(g, node, what, axes[i], rank, 0, &axes[i], d)) return -1;
  qsort(axes, (size_t)n, sizeof *axes, cmp_i64);
  for (int i = 1; i < n; i++)
    if (axes[i] == axes[i - 1])
      return apx_node_error(d, g, node, "%s lists axis %" PRId64 " twice", what, axes[i]);
  return 0;
}

int infer_broadcast_inputs(const ApxGraph *g, int node, const int *slots, int n, IShape *out,
                           ApxDiag *d) {
  IShape acc;
  memset(&acc, 0, sizeof acc);
  int first = -1;
  for (int k = 0; k < n; k++) {
    const ApxValue *v = infer_in(g, node, slots[k]);
    if (!v) continue;
    if (first < 0) {
      acc = infer_shape_of(v);
      first = slots[k];
      continue;
    }
    int bad = apx_broadcast_shape(acc.rank, acc.dims, v->rank, v->dims, &acc.rank, acc.dims);
    if (bad) {
      char a[256], b[256];
      infer_dims_str(acc.rank, acc.dims, a, sizeof a);
      apx_value_shape_str(v, b, sizeof b);
      return infer_in_error(d, g, node, "input %d: shape %s does not broadcast with %s%s "
                            "(dim -%d)", slots[k], b, k == 1 ? "input 0's " : "", a, bad);
    }
  }
  *out = acc;
  return 0;
}

int infer_broadcasts_to(const IShape *small, const IShape *big) {
  return apx_broadcasts_to(small->rank, small->dims, big->rank, big->dims);
}

/* ---- outputs ------------------------------------------------------------------------ */

int infer_set_out(ApxGraph *g, int node, int slot, ApxDType dt, int32_t rank,
                  const int64_t *dims, ApxDiag *d) {
  ApxValue *v = infer_out(g, node, slot);
  if (!v) return 0;
  const ApxNode *n = &g->nodes[node];
  const char *op = n->op_type ? n->op_type : apx_op_name(n->op);
  if (v->dtype != APX_DT_UNDEFINED && v->dtype != dt)
    return apx_value_error(d, g, n->out[slot], "declared as %s, but node '%s' (%s) output %d is %s",
                           apx_dtype_name(v->dtype), n->name, op, slot, apx_dtype_name(dt));
  if (v->rank >= 0) {
    int ok = v->rank == rank;
    for (int i = 0; ok && i < rank; i++) ok = v->dims[i] < 0 || v->dims[i] == dims[i];
    if (!ok) {
      char a[256], b[256];
      apx_value_shape_str(v, a, sizeof a);
      infer_dims_str(rank, dims, b, sizeof b);
      return apx_value_error(d, g, n->out[slot], "declared with shape %s, but node '%s' (%s) "
                             "output %d has shape %s", a, n->name, op, slot, b);
    }
  }
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0)
      return apx_node_error(d, g, node, "output %d '%s': inferred a negative dim", slot, v->name);
  int64_t numel = infer_numel(rank, dims);
  if (numel < 0 || numel > INT64_MAX / 16) {
    char b[256];
    infer_dims_str(rank, dims, b, sizeof b);
    return apx_node_error(d, g, node, "output %d '%s': shape %s has too many elements", slot,
                          v->name, b);
  }
  v->dtype = dt;
  apx_value_set_shape(v, rank, dims);
  return 0;
}

int infer_set_out_like(ApxGraph *g, int node, int slot, int in_slot, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, in_slot);
  if (!x) return infer_in_error(d, g, node, "input %d is required", in_slot);
  IShape s = infer_shape_of(x);
  return infer_set_out(g, node, slot, x->dtype, s.rank, s.dims, d);
}

int infer_out_shaped(const ApxGraph *g, int node, int slot) {
  const ApxNode *n = &g->nodes[node];
  if (slot >= n->n_out || n->out[slot] < 0) return 0;
  const ApxValue *v = &g->vals[n->out[slot]];
  return v->rank >= 0 && (v->flags & APX_VALF_SHAPE_KNOWN);
}

int infer_preset_shape(ApxGraph *g, int node, int slot, IShape *out, ApxDiag *d) {
  ApxValue *v = infer_out(g, node, slot);
  if (!v) return apx_node_error(d, g, node, "output %d is required", slot);
  if (!infer_out_shaped(g, node, slot))
    return apx_node_error(d, g, node, "output %d '%s' must be shaped by the pass that creates "
                          "the node (its shape is not a function of the inputs)", slot, v->name);
  *out = infer_shape_of(v);
  return 0;
}
