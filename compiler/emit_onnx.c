/* emit_onnx.c - the forward graph of an IR as an ONNX ModelProto (contract in emit_onnx.h).
 *
 * Four steps over g: choose the opset (compiler/onnx_opset.h: raised for bfloat16, or a bf16
 * node written as fp32 compute between Casts), choose what is written (live FORWARD nodes in g->order; every value
 * they read that they do not produce becomes a graph input or an initializer), build the
 * protobuf-c messages in a private arena (all pointers point into the arena or into g, so
 * nothing is freed message by message), then pack once. */
#include "compiler/emit_onnx.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/onnx_opset.h"
#include "kernels/half.h"
#include "onnx.pb-c.h"
#include "passes/precision_rules.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "emit_onnx.c writes host bytes as little-endian raw_data: big-endian hosts need swaps"
#endif

#define MAX_MODEL_BYTES ((size_t)INT32_MAX) /* protobuf's limit without external data */

/* What a value is in the written model. */
enum { ROLE_NONE = 0, ROLE_INPUT, ROLE_PRODUCED, ROLE_INIT };

typedef struct Emit {
  const ApxGraph *g;
  ApxDiag *d;
  ApxArena a;
  uint8_t *role;             /* [n_vals] */
  Onnx__NodeProto **nodes;   /* [g->n_order] */
  size_t n_nodes;
  size_t cap_nodes;
  Onnx__TensorProto **inits; /* [g->n_vals] */
  size_t n_inits;
  ApxOnnxOpsetPlan plan;     /* the opset written; bf16 nodes written as fp32 (onnx_opset.h) */
  int32_t casts_inserted;    /* written Casts that apexc inserted */
  int *master_of;            /* apx_value_master_map, made at the first APX_VALF_DATA_FROM_MASTER */
} Emit;

static int oom(Emit *e) {
  return apx_diag_error(e->d, APX_EXIT_RUNTIME, "%s: --emit-onnx: out of memory", e->g->file);
}

static void *alloc(Emit *e, size_t n) { return apx_arena_alloc(&e->a, n ? n : 1); }

/* ---- tensors ------------------------------------------------------------------------- */

/* The lowest ir_version that admits the opset (onnx's version table). */
static int64_t ir_version_for(int64_t opset) {
  if (opset >= 21) return 10;
  if (opset >= 19) return 9;
  return 8;
}

/* Converts n elements of src (type from) into dst (type to). Float types only, or equal
 * types (a plain copy). Returns 0, -1 if the pair is not convertible. */
static int convert(void *dst, ApxDType to, const void *src, ApxDType from, int64_t n) {
  if (to == from) {
    memcpy(dst, src, (size_t)n * apx_dtype_size(to));
    return 0;
  }
  if (!(from == APX_DT_F32 || apx_dtype_is_half(from)) || !(to == APX_DT_F32 || apx_dtype_is_half(to)))
    return -1;
  const uint16_t *s16 = src;
  const float *s32 = src;
  uint16_t *d16 = dst;
  float *d32 = dst;
  for (int64_t i = 0; i < n; i++) {
    float f = from == APX_DT_F32 ? s32[i] : from == APX_DT_F16 ? apx_f16_to_f32(s16[i]) : apx_bf16_to_f32(s16[i]);
    if (to == APX_DT_F32) d32[i] = f;
    else d16[i] = to == APX_DT_F16 ? apx_f32_to_f16(f) : apx_f32_to_bf16(f);
  }
  return 0;
}

static Onnx__TensorProto *make_tensor(Emit *e, const char *name, ApxDType dt, int32_t rank,
                                      const int64_t *dims, const void *data) {
  Onnx__TensorProto *t = alloc(e, sizeof *t);
  int64_t *tdims = alloc(e, (size_t)(rank > 0 ? rank : 1) * sizeof(int64_t));
  if (!t || !tdims) return NULL;
  onnx__tensor_proto__init(t);
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= (tdims[i] = dims[i]);
  t->n_dims = (size_t)rank;
  t->dims = tdims;
  t->has_data_type = 1;
  t->data_type = (int32_t)dt;
  t->name = (char *)name;
  t->has_raw_data = 1;
  t->raw_data.len = (size_t)numel * apx_dtype_size(dt);
  t->raw_data.data = (uint8_t *)data;
  return t;
}

/* The initializer for value v: its own data, or its origin's data converted. */
static int add_initializer(Emit *e, int v) {
  const ApxGraph *g = e->g;
  const ApxValue *val = &g->vals[v];
  if (val->rank < 0 || apx_value_numel(val) < 0 || apx_dtype_size(val->dtype) == 0)
    return apx_value_error(e->d, g, v, "--emit-onnx: constant of unknown shape or dtype %s",
                           apx_dtype_name(val->dtype));
  const void *data = val->data;
  /* a half parameter whose bytes are its master's (passes/cast_insert.c) */
  int from = val->origin;
  if (!data && (val->flags & APX_VALF_DATA_FROM_MASTER)) {
    if (!e->master_of && !(e->master_of = apx_value_master_map(g))) return oom(e);
    from = e->master_of[v];
  }
  if (!data && from >= 0 && g->vals[from].data) {
    const ApxValue *o = &g->vals[from];
    int64_t n = apx_value_numel(val);
    if (apx_value_numel(o) != n)
      return apx_value_error(e->d, g, v, "--emit-onnx: origin '%s' has %lld elements, not %lld",
                             o->name, (long long)apx_value_numel(o), (long long)n);
    void *buf = apx_arena_alloc_raw(&e->a, (size_t)n * apx_dtype_size(val->dtype) + 1);
    if (!buf) return oom(e);
    if (convert(buf, val->dtype, o->data, o->dtype, n))
      return apx_value_error(e->d, g, v, "not supported yet: --emit-onnx of a %s copy of %s '%s'",
                             apx_dtype_name(val->dtype), apx_dtype_name(o->dtype), o->name);
    data = buf;
  }
  if (!data)
    return apx_value_error(e->d, g, v,
                           "--emit-onnx: read by the forward graph but neither computed there "
                           "nor a constant, parameter or graph input");
  Onnx__TensorProto *t = make_tensor(e, val->name, val->dtype, val->rank, val->dims, data);
  if (!t) return oom(e);
  e->inits[e->n_inits++] = t;
  e->role[v] = ROLE_INIT;
  return 0;
}

/* ---- value infos --------------------------------------------------------------------- */

static Onnx__ValueInfoProto *make_value_info(Emit *e, int v) {
  const ApxValue *val = &e->g->vals[v];
  Onnx__ValueInfoProto *vi = alloc(e, sizeof *vi);
  Onnx__TypeProto *tp = alloc(e, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = alloc(e, sizeof *tt);
  if (!vi || !tp || !tt) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  vi->name = (char *)val->name;
  vi->type = tp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  if (val->dtype != APX_DT_UNDEFINED) {
    tt->has_elem_type = 1;
    tt->elem_type = (int32_t)val->dtype;
  }
  if (val->rank >= 0) {
    Onnx__TensorShapeProto *sh = alloc(e, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dims = alloc(e, (size_t)(val->rank + 1) * sizeof *dims);
    if (!sh || !dims) return NULL;
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < val->rank; i++) {
      Onnx__TensorShapeProto__Dimension *dim = alloc(e, sizeof *dim);
      if (!dim) return NULL;
      onnx__tensor_shape_proto__dimension__init(dim);
      if (val->dims[i] >= 0) {
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dim->dim_value = val->dims[i];
      } else if (val->dim_params && val->dim_params[i]) {
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        dim->dim_param = (char *)val->dim_params[i];
      }
      dims[i] = dim;
    }
    sh->n_dim = (size_t)val->rank;
    sh->dim = dims;
    tt->shape = sh;
  }
  return vi;
}

/* ---- attributes ---------------------------------------------------------------------- */

typedef struct AttrList {
  Onnx__AttributeProto **items;
  size_t n, cap;
} AttrList;

static Onnx__AttributeProto *attr_new(Emit *e, AttrList *l, const char *name, ApxAttrType type) {
  if (l->n == l->cap) return NULL; /* capacity is sized by the caller */
  Onnx__AttributeProto *a = alloc(e, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = (Onnx__AttributeProto__AttributeType)type;
  l->items[l->n++] = a;
  return a;
}

static int attr_int(Emit *e, AttrList *l, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr_new(e, l, name, APX_ATTR_INT);
  if (!a) return -1;
  a->has_i = 1;
  a->i = v;
  return 0;
}

static int attr_float(Emit *e, AttrList *l, const char *name, float v) {
  Onnx__AttributeProto *a = attr_new(e, l, name, APX_ATTR_FLOAT);
  if (!a) return -1;
  a->has_f = 1;
  a->f = v;
  return 0;
}

static int attr_string(Emit *e, AttrList *l, const char *name, const char *s) {
  Onnx__AttributeProto *a = attr_new(e, l, name, APX_ATTR_STRING);
  if (!a) return -1;
  a->has_s = 1;
  a->s.len = strlen(s);
  a->s.data = (uint8_t *)s;
  return 0;
}

static int attr_ints(Emit *e, AttrList *l, const char *name, const int64_t *v, int n) {
  Onnx__AttributeProto *a = attr_new(e, l, name, APX_ATTR_INTS);
  if (!a) return -1;
  a->n_ints = (size_t)n;
  a->ints = (int64_t *)v;
  return 0;
}

/* A generic attribute as loaded. */
static int attr_generic(Emit *e, AttrList *l, int node, const ApxAttr *src) {
  Onnx__AttributeProto *a = attr_new(e, l, src->name, src->type);
  if (!a) return oom(e);
  switch (src->type) {
    case APX_ATTR_FLOAT: a->has_f = 1; a->f = src->f; break;
    case APX_ATTR_INT: a->has_i = 1; a->i = src->i; break;
    case APX_ATTR_STRING:
      a->has_s = 1;
      a->s.len = src->s ? strlen(src->s) : 0;
      a->s.data = (uint8_t *)(src->s ? src->s : "");
      break;
    case APX_ATTR_TENSOR:
      if (!src->t) return apx_node_error(e->d, e->g, node, "attribute '%s' holds no tensor", src->name);
      if (!(a->t = make_tensor(e, NULL, src->t->dtype, src->t->rank, src->t->dims, src->t->data)))
        return oom(e);
      break;
    case APX_ATTR_FLOATS: a->n_floats = (size_t)src->n; a->floats = src->floats; break;
    case APX_ATTR_INTS: a->n_ints = (size_t)src->n; a->ints = src->ints; break;
    case APX_ATTR_STRINGS: {
      ProtobufCBinaryData *s = alloc(e, (size_t)src->n * sizeof *s);
      if (!s) return oom(e);
      for (int i = 0; i < src->n; i++) {
        s[i].len = strlen(src->strings[i]);
        s[i].data = (uint8_t *)src->strings[i];
      }
      a->n_strings = (size_t)src->n;
      a->strings = s;
      break;
    }
    default:
      return apx_node_error(e->d, e->g, node,
                            "not supported yet: --emit-onnx of attribute '%s' of type %d",
                            src->name, (int)src->type);
  }
  return 0;
}

static const char *reduction_name(int32_t r) {
  return r == APX_RED_SUM ? "sum" : r == APX_RED_NONE ? "none" : "mean";
}

/* The typed struct's fields written as the ONNX attributes they name (attrs.def), when
 * every field but the counts has an ONNX name; else "not supported yet". */
static int attrs_from_fields(Emit *e, AttrList *l, int node) {
  const ApxGraph *g = e->g;
  const ApxNode *n = &g->nodes[node];
  const ApxAttrDesc *desc = apx_op_attrs(n->op);
  if (!strcmp(desc->type, "ApxAttrNone")) return 0;
  for (int32_t i = 0; i < desc->n_fields; i++)
    if (desc->fields[i].kind != APX_FIELD_COUNT && !desc->fields[i].onnx)
      return apx_node_error(e->d, g, node,
                            "not supported yet: --emit-onnx of a %s node created by a pass",
                            apx_op_name(n->op));
  const char *t = n->typed;
  int rc = 0;
  int32_t count = 0;
  for (int32_t i = 0; i < desc->n_fields && rc == 0; i++) {
    const ApxAttrField *f = &desc->fields[i];
    const char *p = t + f->offset;
    int32_t i32;
    int64_t i64;
    float f32;
    char name[64];
    switch ((ApxAttrFieldKind)f->kind) {
      case APX_FIELD_COUNT: memcpy(&count, p, sizeof count); break;
      case APX_FIELD_F32: memcpy(&f32, p, sizeof f32); rc = attr_float(e, l, f->onnx, f32); break;
      case APX_FIELD_I32: case APX_FIELD_BOOL: case APX_FIELD_DTYPE:
        memcpy(&i32, p, sizeof i32);
        rc = attr_int(e, l, f->onnx, i32);
        break;
      case APX_FIELD_I64: memcpy(&i64, p, sizeof i64); rc = attr_int(e, l, f->onnx, i64); break;
      case APX_FIELD_ENUM:
        memcpy(&i32, p, sizeof i32);
        if (!apx_attr_enum_name(f, i32, name, sizeof name))
          return apx_node_error(e->d, g, node, "typed attribute '%s' = %d is out of range", f->name, i32);
        rc = attr_string(e, l, f->onnx, name);
        break;
      case APX_FIELD_I64S: rc = attr_ints(e, l, f->onnx, (const int64_t *)(const void *)p, f->n); break;
      case APX_FIELD_I64V:
        if (count < 0 || count > f->n)
          return apx_node_error(e->d, g, node, "typed attribute '%s' has %d entries", f->name, count);
        rc = attr_ints(e, l, f->onnx, (const int64_t *)(const void *)p, count);
        break;
      case APX_FIELD_F64V: case APX_FIELD_LABELV: break; /* no attribute form: refused above */
    }
  }
  return rc ? oom(e) : 0;
}

/* A window's kernel_shape, strides, pads and dilations (dilations NULL: not written) for an
 * input of rank `rank` (3, 4 or 5): the typed attributes hold three spatial entries, a 2-D or
 * 1-D window its own in the last ones. */
static int window_attrs(Emit *e, AttrList *l, int rank, const int64_t *kernel, const int64_t *strides,
                        const int64_t *pads, const int64_t *dilations) {
  int ns = rank - 2 < 1 ? 1 : rank - 2 > 3 ? 3 : rank - 2, off = 3 - ns;
  int64_t p[6];
  for (int i = 0; i < ns; i++) { /* begins, then ends, of the window's own dims */
    p[i] = pads[off + i];
    p[ns + i] = pads[3 + off + i];
  }
  int rc = attr_ints(e, l, "kernel_shape", kernel + off, ns) | attr_ints(e, l, "strides", strides + off, ns) |
           attr_ints(e, l, "pads", p, 2 * ns);
  if (dilations) rc |= attr_ints(e, l, "dilations", dilations + off, ns);
  return rc;
}

/* ONNX attributes equivalent to the typed struct of a node a pass created (no generic
 * attributes): from the fields (attrs.def), except for the ops whose attributes depend on
 * the opset or on other fields (and 1-D windows: window_attrs). */
static int attrs_from_typed(Emit *e, AttrList *l, int node) {
  const ApxGraph *g = e->g;
  const ApxNode *n = &g->nodes[node];
  const void *t = n->typed;
  int rc = 0;
  if (!t) return apx_node_error(e->d, g, node, "--emit-onnx: node has no typed attributes");
  switch (n->op) {
    case APX_OP_Cast: /* saturate exists from opset 19 */
      rc = attr_int(e, l, "to", ((const ApxAttrCast *)t)->to);
      break;
    case APX_OP_BatchNormalization: { /* training_mode exists from opset 14 */
      const ApxAttrBatchNorm *a = t;
      rc = attr_float(e, l, "epsilon", a->epsilon) | attr_float(e, l, "momentum", a->momentum);
      if (a->training_mode) rc |= attr_int(e, l, "training_mode", 1);
      break;
    }
    case APX_OP_SoftmaxCrossEntropyLoss: case APX_OP_NegativeLogLikelihoodLoss: {
      const ApxAttrLoss *a = t; /* ignore_index only when set */
      rc = attr_string(e, l, "reduction", reduction_name(a->reduction));
      if (a->has_ignore_index) rc |= attr_int(e, l, "ignore_index", a->ignore_index);
      break;
    }
    case APX_OP_MaxPool: case APX_OP_AveragePool: { /* per-op and per-opset attributes */
      const ApxAttrPool *a = t;
      int dil = n->op == APX_OP_MaxPool || g->opset >= 19;
      rc = window_attrs(e, l, g->vals[n->in[0]].rank, a->kernel, a->strides, a->pads, dil ? a->dilations : NULL) |
           attr_int(e, l, "ceil_mode", a->ceil_mode);
      if (n->op == APX_OP_AveragePool) rc |= attr_int(e, l, "count_include_pad", a->count_include_pad);
      else rc |= attr_int(e, l, "storage_order", a->storage_order);
      break;
    }
    case APX_OP_Conv: { /* 3-D: from the fields; 2-D, 1-D: window_attrs */
      const ApxAttrConv *a = t;
      int rank = g->vals[n->in[0]].rank;
      if (rank == 5) return attrs_from_fields(e, l, node);
      rc = window_attrs(e, l, rank, a->kernel, a->strides, a->pads, a->dilations) | attr_int(e, l, "group", a->group);
      break;
    }
    case APX_OP_ConvTranspose: {
      const ApxAttrConvTranspose *a = t;
      int rank = g->vals[n->in[0]].rank, ns = rank == 3 ? 1 : 2;
      if (rank == 5) return attrs_from_fields(e, l, node);
      rc = window_attrs(e, l, rank, a->kernel, a->strides, a->pads, a->dilations) |
           attr_ints(e, l, "output_padding", a->output_padding + 3 - ns, ns) | attr_int(e, l, "group", a->group);
      break;
    }
    case APX_OP_Reshape: /* allowzero exists from opset 14 */
      if (((const ApxAttrReshape *)t)->allowzero) rc = attr_int(e, l, "allowzero", 1);
      break;
    default: return attrs_from_fields(e, l, node);
  }
  return rc ? oom(e) : 0;
}

/* ---- nodes --------------------------------------------------------------------------- */

/* Outputs ONNX defines for the op; apexc may add more (BatchNormalization in training mode
 * adds the saved mean and inverse std as outputs 3 and 4). */
static int onnx_output_count(const ApxNode *n) {
  if (n->op == APX_OP_BatchNormalization && n->n_out > 3) return 3;
  return n->n_out;
}

static const char *value_name(const ApxGraph *g, int v) { return v >= 0 ? g->vals[v].name : ""; }

/* The node's doc_string (Netron shows it): apexc's decision and its reason, the note, and
 * for a node written as fp32 compute, why. */
static char *node_doc(Emit *e, int node) {
  const ApxGraph *g = e->g;
  const ApxNode *n = &g->nodes[node];
  const char *dec = n->compute == APX_DT_UNDEFINED ? "undecided" : apx_dtype_short(n->compute);
  if (apx_prec_is_inserted_cast(g, node) && n->n_in > 0 && n->in[0] >= 0 && n->out[0] >= 0)
    return apx_arena_printf(&e->a, "apexc: Cast inserted by apexc (%s -> %s): a consumer computes in %s",
                            apx_dtype_short(g->vals[n->in[0]].dtype), apx_dtype_short(g->vals[n->out[0]].dtype),
                            apx_dtype_short(g->vals[n->out[0]].dtype));
  return apx_arena_printf(&e->a, "apexc: %s (%s)%s%s%s%s", dec, n->reason_detail ? n->reason_detail : "no reason",
                          n->note ? "; note: " : "", n->note ? n->note : "",
                          e->plan.widen[node] ? "; " : "", e->plan.widen[node] ? e->plan.why[node] : "");
}

/* A Cast node of the emitted model only (widening a bf16 node to fp32 compute). */
static int emit_cast(Emit *e, const char *name, const char *in, const char *out, ApxDType to, const char *doc) {
  Onnx__NodeProto *p = alloc(e, sizeof *p);
  AttrList l = {NULL, 0, 1};
  if (!p || !(l.items = alloc(e, sizeof *l.items))) return oom(e);
  onnx__node_proto__init(p);
  p->name = (char *)name;
  p->op_type = (char *)"Cast";
  p->doc_string = (char *)doc;
  p->input = alloc(e, sizeof(char *));
  p->output = alloc(e, sizeof(char *));
  if (!p->name || !p->input || !p->output || attr_int(e, &l, "to", to)) return oom(e);
  p->input[0] = (char *)in;
  p->output[0] = (char *)out;
  p->n_input = p->n_output = 1;
  p->n_attribute = l.n;
  p->attribute = l.items;
  if (e->n_nodes == e->cap_nodes) return oom(e);
  e->nodes[e->n_nodes++] = p;
  return 0;
}

static int emit_node(Emit *e, int node) {
  const ApxGraph *g = e->g;
  const ApxNode *n = &g->nodes[node];
  Onnx__NodeProto *p = alloc(e, sizeof *p);
  if (!p) return oom(e);
  onnx__node_proto__init(p);
  p->name = (char *)(n->name ? n->name : "");
  p->op_type = (char *)apx_op_name(n->op);
  if (!(p->doc_string = node_doc(e, node))) return oom(e);
  if (apx_prec_is_inserted_cast(g, node)) e->casts_inserted++;

  int n_in = n->n_in, n_out = onnx_output_count(n);
  while (n_in > 0 && n->in[n_in - 1] < 0) n_in--; /* trailing absent optionals */
  while (n_out > 1 && n->out[n_out - 1] < 0) n_out--;
  p->input = alloc(e, (size_t)n_in * sizeof(char *));
  p->output = alloc(e, (size_t)n_out * sizeof(char *));
  if (!p->input || !p->output) return oom(e);
  for (int i = 0; i < n_in; i++) p->input[i] = (char *)value_name(g, n->in[i]);
  for (int i = 0; i < n_out; i++) p->output[i] = (char *)value_name(g, n->out[i]);
  p->n_input = (size_t)n_in;
  p->n_output = (size_t)n_out;
  if (e->plan.widen[node]) { /* bf16 node without a bf16 form at the written opset: fp32 compute */
    const char *doc = apx_arena_printf(&e->a, "apexc --emit-onnx: fp32 compute for '%s' (see its doc_string)", p->name);
    for (int i = 0; i < n_in; i++) {
      if (n->in[i] < 0 || g->vals[n->in[i]].dtype != APX_DT_BF16) continue;
      char *wide = apx_arena_printf(&e->a, "%s__apx_fp32_in%d", p->name, i);
      char *cname = apx_arena_printf(&e->a, "%s__apx_widen_in%d", p->name, i);
      if (!wide || !cname || !doc || emit_cast(e, cname, p->input[i], wide, APX_DT_F32, doc)) return oom(e);
      p->input[i] = wide;
    }
  }

  AttrList l = {NULL, 0, (size_t)n->n_attrs + 8};
  if (!(l.items = alloc(e, l.cap * sizeof *l.items))) return oom(e);
  const ApxAttrCast *cast = n->op == APX_OP_Cast ? n->typed : NULL;
  /* RandomUniformLike's dtype is its output's type as written: the precision passes may
   * have given the output the half type (fp32 when a bf16 result is computed wide). */
  int random_dtype = n->op == APX_OP_RandomUniformLike && n->out[0] >= 0
                         ? (e->plan.widen[node] && g->vals[n->out[0]].dtype == APX_DT_BF16
                                ? APX_DT_F32 : (int)g->vals[n->out[0]].dtype)
                         : 0;
  if (random_dtype && attr_int(e, &l, "dtype", random_dtype)) return oom(e);
  if (n->n_attrs > 0 || n->onnx_index >= 0) {
    int wrote_to = 0;
    for (int i = 0; i < n->n_attrs; i++) {
      const ApxAttr *src = &n->attrs[i];
      if (random_dtype && strcmp(src->name, "dtype") == 0) continue;
      if (cast && cast->to != APX_DT_UNDEFINED && strcmp(src->name, "to") == 0) {
        if (attr_int(e, &l, "to", cast->to)) return oom(e);
        wrote_to = 1;
        continue;
      }
      if (attr_generic(e, &l, node, src)) return -1;
    }
    if (cast && cast->to != APX_DT_UNDEFINED && !wrote_to && attr_int(e, &l, "to", cast->to))
      return oom(e);
  } else if (attrs_from_typed(e, &l, node)) {
    return -1;
  }
  p->n_attribute = l.n;
  p->attribute = l.items;
  if (e->n_nodes == e->cap_nodes) return oom(e);
  e->nodes[e->n_nodes++] = p;
  if (e->plan.widen[node]) /* fp32 results rounded back to the bf16 values the graph holds */
    for (int i = 0; i < n_out; i++) {
      if (n->out[i] < 0 || g->vals[n->out[i]].dtype != APX_DT_BF16) continue;
      char *wide = apx_arena_printf(&e->a, "%s__apx_fp32_out%d", p->name, i);
      char *cname = apx_arena_printf(&e->a, "%s__apx_narrow_out%d", p->name, i);
      const char *doc = apx_arena_printf(&e->a, "apexc --emit-onnx: bf16 result of '%s' (fp32 compute)", p->name);
      if (!wide || !cname || !doc || emit_cast(e, cname, wide, p->output[i], APX_DT_BF16, doc)) return oom(e);
      p->output[i] = wide;
    }
  return 0;
}

/* ---- the model ----------------------------------------------------------------------- */

static int is_written(const ApxNode *n) {
  return !(n->flags & APX_NODEF_DEAD) && n->section == APX_SEC_FORWARD;
}

static int build(Emit *e, Onnx__ModelProto *m) {
  const ApxGraph *g = e->g;
  e->role = alloc(e, (size_t)g->n_vals);
  e->cap_nodes = 0; /* each node, and room for a Cast per slot of a widened one */
  for (int k = 0; k < g->n_order; k++) e->cap_nodes += 1 + (size_t)(g->nodes[g->order[k]].n_in + g->nodes[g->order[k]].n_out);
  e->nodes = alloc(e, e->cap_nodes * sizeof *e->nodes);
  e->inits = alloc(e, (size_t)g->n_vals * sizeof *e->inits);
  if (!e->role || !e->nodes || !e->inits || apx_onnx_opset_plan(g, &e->a, &e->plan)) return oom(e);

  /* what is written, and the role of every value in it */
  for (int i = 0; i < g->n_inputs; i++) e->role[g->inputs[i]] = ROLE_INPUT;
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    if (!is_written(n)) continue;
    if (apx_op_info(n->op)->flags & APX_OPF_INTERNAL)
      return apx_node_error(e->d, g, g->order[k], "not supported yet: --emit-onnx of internal op %s",
                            apx_op_name(n->op));
    if (!(apx_op_info(n->op)->flags & (APX_OPF_V1 | APX_OPF_FOLD)))
      return apx_node_error(e->d, g, g->order[k], "not supported yet: --emit-onnx of op %s",
                            apx_op_name(n->op));
    for (int i = 0; i < onnx_output_count(n); i++)
      if (n->out[i] >= 0) e->role[n->out[i]] = ROLE_PRODUCED;
  }
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    if (!is_written(n)) continue;
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] >= 0 && e->role[n->in[i]] == ROLE_NONE && add_initializer(e, n->in[i])) return -1;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (e->role[g->outputs[i]] == ROLE_NONE && add_initializer(e, g->outputs[i])) return -1;
  for (int k = 0; k < g->n_order; k++)
    if (is_written(&g->nodes[g->order[k]]) && emit_node(e, g->order[k])) return -1;

  /* graph */
  Onnx__GraphProto *gp = alloc(e, sizeof *gp);
  if (!gp) return oom(e);
  onnx__graph_proto__init(gp);
  gp->name = (char *)(g->name && *g->name ? g->name : "apexc");
  gp->n_node = e->n_nodes;
  gp->node = e->nodes;
  gp->n_initializer = e->n_inits;
  gp->initializer = e->inits;
  gp->input = alloc(e, (size_t)g->n_inputs * sizeof *gp->input);
  gp->output = alloc(e, (size_t)g->n_outputs * sizeof *gp->output);
  gp->value_info = alloc(e, (size_t)g->n_vals * sizeof *gp->value_info);
  if (!gp->input || !gp->output || !gp->value_info) return oom(e);
  for (int i = 0; i < g->n_inputs; i++)
    if (!(gp->input[gp->n_input++] = make_value_info(e, g->inputs[i]))) return oom(e);
  for (int i = 0; i < g->n_outputs; i++) {
    const ApxValue *v = &g->vals[g->outputs[i]];
    if (v->dtype == APX_DT_UNDEFINED)
      return apx_value_error(e->d, g, g->outputs[i], "--emit-onnx: graph output of unknown dtype");
    if (!(gp->output[gp->n_output++] = make_value_info(e, g->outputs[i]))) return oom(e);
  }
  /* bfloat16 tensors (and Cast to bfloat16) exist in ai.onnx only from opset 13 */
  if (g->opset < 13)
    for (int v = 0; v < g->n_vals; v++)
      if (e->role[v] != ROLE_NONE && g->vals[v].dtype == APX_DT_BF16)
        return apx_diag_error(e->d, APX_EXIT_BAD_INPUT,
                              "%s: --emit-onnx: bfloat16 needs ai.onnx opset 13 or newer; the "
                              "model is opset %lld (use --half=fp16, or re-export at opset >= 13)",
                              g->file, (long long)g->opset);
  uint8_t *is_output = alloc(e, (size_t)g->n_vals);
  if (!is_output) return oom(e);
  for (int i = 0; i < g->n_outputs; i++) is_output[g->outputs[i]] = 1;
  for (int v = 0; v < g->n_vals; v++)
    if (e->role[v] == ROLE_PRODUCED && !is_output[v] && g->vals[v].dtype != APX_DT_UNDEFINED &&
        !(gp->value_info[gp->n_value_info++] = make_value_info(e, v)))
      return oom(e);

  /* model */
  Onnx__OperatorSetIdProto *opset = alloc(e, sizeof *opset);
  Onnx__OperatorSetIdProto **opsets = alloc(e, sizeof *opsets);
  if (!opset || !opsets) return oom(e);
  onnx__operator_set_id_proto__init(opset);
  opset->domain = (char *)"";
  opset->has_version = 1;
  opset->version = e->plan.opset;
  opsets[0] = opset;
  onnx__model_proto__init(m);
  m->has_ir_version = 1;
  m->ir_version = ir_version_for(e->plan.opset);
  m->n_opset_import = 1;
  m->opset_import = opsets;
  m->producer_name = (char *)"apexc";
  m->producer_version = (char *)"1";
  char raised[96] = "";
  if (e->plan.opset != g->opset)
    snprintf(raised, sizeof raised, "; ai.onnx opset raised from %lld to %lld for bfloat16", (long long)g->opset,
             (long long)e->plan.opset);
  m->doc_string = apx_arena_printf(&e->a, "mixed-precision forward graph of %s (apexc --emit-onnx)%s%s",
                                   g->file ? g->file : "?", raised,
                                   e->plan.n_widened ? "; some bf16 nodes written as fp32 compute (see their "
                                                       "doc_string)" : "");
  m->graph = gp;
  return 0;
}

static int emit_memory(const ApxGraph *g, void **buf, size_t *len, ApxEmitOnnxInfo *info, ApxDiag *d) {
  Emit e = {.g = g, .d = d};
  Onnx__ModelProto m;
  int rc = -1;
  *buf = NULL;
  *len = 0;
  apx_arena_init(&e.a);
  if (build(&e, &m) == 0) {
    size_t n = protobuf_c_message_get_packed_size(&m.base);
    if (n > MAX_MODEL_BYTES) {
      apx_diag_error(d, APX_EXIT_BAD_INPUT,
                     "%s: not supported yet: --emit-onnx of a model over 2 GiB (%zu bytes; "
                     "would need external data)", g->file, n);
    } else if (!(*buf = malloc(n ? n : 1))) {
      oom(&e);
    } else {
      *len = protobuf_c_message_pack(&m.base, *buf);
      rc = 0;
      if (info) {
        info->model_opset = g->opset;
        info->opset = e.plan.opset;
        info->nodes = (int32_t)e.n_nodes;
        info->casts_inserted = e.casts_inserted;
        info->initializers = (int32_t)e.n_inits;
        info->widened = e.plan.n_widened;
        info->bytes = *len;
      }
    }
  }
  apx_arena_free(&e.a);
  free(e.master_of);
  return rc;
}

int apx_emit_onnx_memory(const ApxGraph *g, void **buf, size_t *len, ApxDiag *d) {
  return emit_memory(g, buf, len, NULL, d);
}

int apx_emit_onnx(const ApxGraph *g, const char *path, ApxDiag *d) {
  return apx_emit_onnx_file(g, path, NULL, d);
}

int apx_emit_onnx_file(const ApxGraph *g, const char *path, ApxEmitOnnxInfo *info, ApxDiag *d) {
  void *buf;
  size_t len;
  if (emit_memory(g, &buf, &len, info, d)) return -1;
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(buf, 1, len, f) == len;
  int err = errno;
  if (f && fclose(f) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  free(buf);
  if (!ok)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: --emit-onnx: cannot write: %s", path,
                          strerror(err));
  return 0;
}
