/* index_plan.c - host-side planners of the v1.1 data-movement and indexing ops
 * (index_plan.h): each checks a kernel's tensors against its attributes for both backends. */
#include "kernels/index_plan.h"

#include <stdarg.h>
#include <stdio.h>

#include "kernels/shape.h"

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && cap) vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return APX_SHAPE_BAD;
}

static int same_type(const ApxTensor *a, const ApxTensor *b, char *err, size_t cap) {
  if (a->dtype == b->dtype) return 0;
  return fail(err, cap, "types differ (%s, %s)", apx_dtype_name(a->dtype), apx_dtype_name(b->dtype));
}

int apx_pad_plan(const ApxAttrPad *a, const ApxTensor *x, const ApxTensor *y, char *err,
                 size_t cap) {
  char sx[96], sy[96];
  if (same_type(x, y, err, cap)) return APX_SHAPE_BAD;
  if (a->mode < APX_PAD_CONSTANT || a->mode > APX_PAD_EDGE)
    return fail(err, cap, "mode %d out of range", a->mode);
  if (a->rank != x->rank || y->rank != x->rank)
    return fail(err, cap, "pads for rank %d, input %s, output %s", a->rank,
                apx_dims_str(x, sx, sizeof sx), apx_dims_str(y, sy, sizeof sy));
  for (int32_t d = 0; d < x->rank; d++) {
    if (y->dims[d] != x->dims[d] + a->begins[d] + a->ends[d])
      return fail(err, cap, "output %s is not input %s padded by the typed pads",
                  apx_dims_str(y, sy, sizeof sy), apx_dims_str(x, sx, sizeof sx));
    if (a->mode != APX_PAD_CONSTANT && x->dims[d] == 0 && y->dims[d] > 0)
      return fail(err, cap, "%s padding of an empty dim %d", a->mode == APX_PAD_EDGE ? "edge" : "reflect", d);
  }
  return 0;
}

int apx_tile_plan(const ApxAttrTile *a, const ApxTensor *x, const ApxTensor *y, char *err,
                  size_t cap) {
  char sx[96], sy[96];
  if (same_type(x, y, err, cap)) return APX_SHAPE_BAD;
  int ok = a->rank == x->rank && y->rank == x->rank;
  for (int32_t d = 0; ok && d < x->rank; d++) ok = a->repeats[d] >= 0 && y->dims[d] == x->dims[d] * a->repeats[d];
  if (!ok)
    return fail(err, cap, "output %s is not input %s tiled by the typed repeats",
                apx_dims_str(y, sy, sizeof sy), apx_dims_str(x, sx, sizeof sx));
  return 0;
}

int apx_trilu_plan(const ApxTensor *x, const ApxTensor *y, int64_t *batch, int64_t *rows,
                   int64_t *cols, char *err, size_t cap) {
  char sx[96], sy[96];
  if (same_type(x, y, err, cap)) return APX_SHAPE_BAD;
  if (x->rank < 2) return fail(err, cap, "input must have rank >= 2, got %d", x->rank);
  if (!apx_same_dims(x, y))
    return fail(err, cap, "output %s differs from input %s", apx_dims_str(y, sy, sizeof sy),
                apx_dims_str(x, sx, sizeof sx));
  *batch = apx_dims_prod(x->dims, 0, x->rank - 2);
  *rows = x->dims[x->rank - 2];
  *cols = x->dims[x->rank - 1];
  return 0;
}

int apx_gather_elements_plan(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                             const ApxTensor *out, char *err, size_t cap) {
  char sd[96], si[96], so[96];
  if (axis < 0 || axis >= data->rank)
    return fail(err, cap, "axis %lld out of range for rank %d", (long long)axis, data->rank);
  if (idx->dtype != APX_DT_I64 && idx->dtype != APX_DT_I32)
    return fail(err, cap, "indices must be int32 or int64, got %s", apx_dtype_name(idx->dtype));
  if (same_type(data, out, err, cap)) return APX_SHAPE_BAD;
  int ok = idx->rank == data->rank && apx_same_dims(idx, out);
  for (int32_t d = 0; ok && d < data->rank; d++) ok = d == axis || idx->dims[d] <= data->dims[d];
  if (!ok)
    return fail(err, cap, "indices %s and output %s do not fit data %s along axis %lld",
                apx_dims_str(idx, si, sizeof si), apx_dims_str(out, so, sizeof so),
                apx_dims_str(data, sd, sizeof sd), (long long)axis);
  return 0;
}

int apx_gather_nd_plan(int64_t b, const ApxTensor *data, const ApxTensor *idx,
                       const ApxTensor *out, ApxGatherNDPlan *p, char *err, size_t cap) {
  char sd[96], si[96], so[96];
  int32_t r = data->rank, q = idx->rank;
  if (idx->dtype != APX_DT_I64 && idx->dtype != APX_DT_I32)
    return fail(err, cap, "indices must be int64, got %s", apx_dtype_name(idx->dtype));
  if (same_type(data, out, err, cap)) return APX_SHAPE_BAD;
  if (q < 1 || b < 0 || b >= q || b >= r)
    return fail(err, cap, "batch_dims %lld does not fit data %s and indices %s", (long long)b,
                apx_dims_str(data, sd, sizeof sd), apx_dims_str(idx, si, sizeof si));
  int64_t m = idx->dims[q - 1];
  int ok = m >= 1 && m <= r - b && out->rank == q - 1 + r - b - m;
  for (int32_t d = 0; ok && d < b; d++) ok = idx->dims[d] == data->dims[d];
  for (int32_t d = 0; ok && d < q - 1; d++) ok = out->dims[d] == idx->dims[d];
  for (int32_t d = q - 1; ok && d < out->rank; d++) ok = out->dims[d] == data->dims[d - (q - 1) + b + m];
  if (!ok)
    return fail(err, cap, "output %s does not match data %s, indices %s (batch_dims %lld)",
                apx_dims_str(out, so, sizeof so), apx_dims_str(data, sd, sizeof sd),
                apx_dims_str(idx, si, sizeof si), (long long)b);
  p->batches = apx_dims_prod(data->dims, 0, (int32_t)b);
  p->n = apx_dims_prod(idx->dims, (int32_t)b, q - 1);
  p->m = m;
  p->slice = apx_dims_prod(data->dims, (int32_t)(b + m), r);
  p->batch_stride = apx_dims_prod(data->dims, (int32_t)b, r);
  int64_t s = p->slice;
  for (int64_t k = m - 1; k >= 0; k--) {
    p->dims[k] = data->dims[b + k];
    p->strides[k] = s;
    s *= p->dims[k];
  }
  return 0;
}
