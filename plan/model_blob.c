/* model_blob.c - strip the plan-held initializers from the embedded model (model_blob.h). */
#include "plan/model_blob.h"

#include <string.h>

#include "onnx.pb-c.h"

int32_t apx_model_blob_source(const ApxPlan *p, const char *name) {
  int32_t id = apx_plan_find_buffer(p, name);
  if (id < 0) return -1;
  const ApxPlanBuffer *b = &p->bufs[id];
  if (b->kind == APX_VAL_PARAM || b->kind == APX_VAL_STATE) {
    int32_t m = apx_plan_master_of(p, id);
    return m >= 0 ? m : id;
  }
  if (b->kind == APX_VAL_CONST && b->data && b->data_len) return id;
  return -1;
}

/* 1 when t can be rebuilt from the plan exactly or is replaced by a trained value. */
static int restorable(const ApxPlan *p, const Onnx__TensorProto *t) {
  if (!t->name || (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
    return 0;
  int32_t src = apx_model_blob_source(p, t->name);
  if (src < 0) return 0;
  int32_t id = apx_plan_find_buffer(p, t->name);
  const ApxPlanBuffer *b = &p->bufs[id];
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) n *= t->dims[i];
  size_t es = apx_dtype_size((ApxDType)t->data_type);
  if (!es || n <= 0) return 0;
  if (b->kind == APX_VAL_CONST)
    return (ApxDType)t->data_type == b->dtype && (uint64_t)b->data_len == (uint64_t)n * es;
  const ApxPlanBuffer *s = &p->bufs[src];
  return apx_dtype_is_float((ApxDType)t->data_type) && s->bytes == n * (int64_t)apx_dtype_size(s->dtype);
}

int apx_model_blob_strip(const ApxPlan *p, const void *model, size_t len, ApxArena *A,
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
    if (!restorable(p, t)) continue;
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
