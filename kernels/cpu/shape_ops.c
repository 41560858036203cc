/* shape_ops.c - data movement for every dtype, by element size: Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity (copies), Transpose, Concat, Split, Slice, SliceGrad, Gather, Expand,
 * Where; GatherGrad (scatter-add, float); the folding helpers Shape, ConstantOfShape and
 * Range. Output shapes are the ones the compiler inferred; kernels check them. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/validate.h"

/* Shapes and dtypes are checked by kernels/validate.h before any of these runs. */

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the bytes are unchanged (the runtime may
 * alias output and input; then there is nothing to do). */
APX_CPU_KERNEL(apx_cpu_copy) {
  if (outs[0].data != ins[0].data) memmove(outs[0].data, ins[0].data, apx_tensor_bytes(&ins[0]));
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_transpose) {
  ApxStatus s;
  const ApxAttrTranspose *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxTensor *y = &outs[0];
  int r = x->rank;
  int64_t ss[APX_MAX_RANK], ys[APX_MAX_RANK];
  if ((s = apx_shape_status(apx_transpose_plan(a, x, y, ss, ctx->err, sizeof ctx->err))))
    return s;
  apx_dims_strides(y->dims, r, ys);
  apx_cpu_strided_copy(y->data, ys, x->data, ss, y->dims, r, apx_dtype_size(x->dtype),
                       apx_cpu_threads(ctx));
  return APX_STATUS_OK;
}

/* Concat(inputs...) -> output along axis; Split(input) -> outputs... along axis. The joined
 * tensor is `whole`, the pieces `parts` (absent pieces of a Split are skipped). */
static ApxStatus concat_split(ApxCpuCtx *ctx, int split, int64_t axis, ApxTensor *whole,
                              ApxTensor *parts, int n) {
  int64_t outer, inner;
  ApxStatus s = apx_shape_status(
      apx_concat_plan(axis, whole, parts, n, split, &outer, &inner, ctx->err, sizeof ctx->err));
  if (s) return s;
  inner *= (int64_t)apx_dtype_size(whole->dtype); /* bytes */
  int64_t row = whole->dims[axis] * inner;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(outer * row > APX_CPU_PAR_WORK && outer > 1)
  for (int64_t o = 0; o < outer; o++) {
    int64_t pos = o * row;
    for (int k = 0; k < n; k++) {
      int64_t len = parts[k].dims[axis] * inner;
      if (len && parts[k].data) {
        char *w = (char *)whole->data + pos, *p = (char *)parts[k].data + o * len;
        if (split)
          memcpy(p, w, (size_t)len);
        else
          memcpy(w, p, (size_t)len);
      }
      pos += len;
    }
  }
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_concat) {
  return concat_split(ctx, 0, ((const ApxAttrAxis *)attrs)->axis, &outs[0], (ApxTensor *)ins,
                      n_in);
}

APX_CPU_KERNEL(apx_cpu_split) {
  return concat_split(ctx, 1, ((const ApxAttrSplit *)attrs)->axis, (ApxTensor *)&ins[0], outs,
                      n_out);
}

/* Slice view of `full` (attrs starts/steps, counts `part` dims): base offset and element
 * strides into full. */
static ApxStatus slice_view(ApxCpuCtx *ctx, const ApxAttrSlice *a, const ApxTensor *full,
                            const ApxTensor *part, int64_t *base, int64_t *strides) {
  return apx_shape_status(
      apx_slice_view(a, full, part, base, strides, ctx->err, sizeof ctx->err));
}

APX_CPU_KERNEL(apx_cpu_slice) {
  ApxStatus s;
  int64_t base, ss[APX_MAX_RANK], ys[APX_MAX_RANK];
  if ((s = slice_view(ctx, attrs, &ins[0], &outs[0], &base, ss))) return s;
  size_t es = apx_dtype_size(ins[0].dtype);
  apx_dims_strides(outs[0].dims, outs[0].rank, ys);
  apx_cpu_strided_copy(outs[0].data, ys, (const char *)ins[0].data + base * (int64_t)es, ss,
                       outs[0].dims, outs[0].rank, es, apx_cpu_threads(ctx));
  return APX_STATUS_OK;
}

/* SliceGrad(dY) -> dX: zeros of the forward input's shape with dY written at the slice. */
APX_CPU_KERNEL(apx_cpu_slice_grad) {
  ApxStatus s;
  int64_t base, ds[APX_MAX_RANK], ys[APX_MAX_RANK];
  if ((s = slice_view(ctx, attrs, &outs[0], &ins[0], &base, ds))) return s;
  size_t es = apx_dtype_size(outs[0].dtype);
  memset(outs[0].data, 0, apx_tensor_bytes(&outs[0]));
  apx_dims_strides(ins[0].dims, ins[0].rank, ys);
  apx_cpu_strided_copy((char *)outs[0].data + base * (int64_t)es, ds, ins[0].data, ys,
                       ins[0].dims, ins[0].rank, es, apx_cpu_threads(ctx));
  return APX_STATUS_OK;
}

/* data (outer, A, inner), indices (I...), out (outer, I..., inner): checks shapes and every
 * index (negative ones count from the end). */
static ApxStatus gather_shape(ApxCpuCtx *ctx, int64_t axis, const ApxTensor *data,
                              const ApxTensor *idx, const ApxTensor *out, int64_t *outer,
                              int64_t *A, int64_t *inner) {
  ApxStatus s = apx_shape_status(
      apx_gather_shape(axis, data, idx, out, outer, A, inner, ctx->err, sizeof ctx->err));
  if (s) return s;
  int64_t ni = apx_tensor_numel(idx);
  for (int64_t j = 0; j < ni; j++) {
    int64_t v = apx_cpu_index_at(idx, j);
    if (v < -*A || v >= *A)
      return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, APX_MSG_INDEX_RANGE, (long long)v,
                          (long long)j, (long long)*A, (long long)*A);
  }
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_gather) {
  ApxStatus s;
  int64_t outer = 0, A = 0, inner = 0;
  if ((s = gather_shape(ctx, ((const ApxAttrAxis *)attrs)->axis, &ins[0], &ins[1], &outs[0],
                        &outer, &A, &inner)))
    return s;
  int64_t ni = apx_tensor_numel(&ins[1]);
  size_t row = (size_t)inner * apx_dtype_size(ins[0].dtype);
  const char *src = ins[0].data;
  char *dst = outs[0].data;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(outer * ni * (int64_t)row > APX_CPU_PAR_WORK && outer * ni > 1)
  for (int64_t t = 0; t < outer * ni; t++) {
    int64_t o = t / ni, j = t % ni, v = apx_cpu_index_at(&ins[1], j);
    if (v < 0) v += A;
    memcpy(dst + (size_t)t * row, src + (size_t)(o * A + v) * row, row);
  }
  return APX_STATUS_OK;
}

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/gather_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/gather_real.inc"
#include "kernels/cpu/real_end.h"

/* GatherGrad(dY, Indices) -> dData (math kernel: indices arrive as int64) */
APX_CPU_KERNEL(apx_cpu_gather_grad) {
  ApxStatus s;
  int64_t outer = 0, A = 0, inner = 0;
  if ((s = gather_shape(ctx, ((const ApxAttrAxis *)attrs)->axis, &outs[0], &ins[1], &ins[0],
                        &outer, &A, &inner)))
    return s;
  int64_t ni = apx_tensor_numel(&ins[1]);
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    gather_grad_f64(ins[0].data, ins[1].data, outs[0].data, outer, A, inner, ni, nt);
  else
    gather_grad_f32(ins[0].data, ins[1].data, outs[0].data, outer, A, inner, ni, nt);
  return APX_STATUS_OK;
}

/* Expand(input, shape) -> output (numpy broadcast of input to the output's shape) */
APX_CPU_KERNEL(apx_cpu_expand) {
  apx_cpu_broadcast_copy(&ins[0], &outs[0], apx_cpu_threads(ctx));
  return APX_STATUS_OK;
}

/* Where(condition, X, Y) -> condition ? X : Y with broadcasting */
APX_CPU_KERNEL(apx_cpu_where) {
  ApxStatus s;
  const ApxTensor *tri[3] = {&ins[0], &ins[1], &ins[2]};
  ApxBcast bc;
  if ((s = apx_shape_status(apx_bcast_plan(&bc, &outs[0], tri, 3, ctx->err, sizeof ctx->err))))
    return s;
  const uint8_t *c = ins[0].data;
  int64_t sc = apx_bcast_istride(&bc, 0), sx = apx_bcast_istride(&bc, 1),
          sy = apx_bcast_istride(&bc, 2);
  int nt = apx_cpu_threads(ctx);
#define WHERE(T)                                                                    \
  do {                                                                              \
    const T *px = ins[1].data, *py = ins[2].data;                                   \
    T *po = outs[0].data;                                                           \
    APX_BCAST_SEGMENTS(&bc, for (int64_t j = 0; j < seg_len; j++) po[seg_i + j] =  \
                                c[seg_off[0] + j * sc] ? px[seg_off[1] + j * sx]    \
                                                       : py[seg_off[2] + j * sy]); \
  } while (0)
  switch (apx_dtype_size(outs[0].dtype)) {
    case 1: WHERE(uint8_t); break;
    case 2: WHERE(uint16_t); break;
    case 4: WHERE(uint32_t); break;
    case 8: WHERE(uint64_t); break;
    default:
      return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s",
                          apx_dtype_name(outs[0].dtype));
  }
#undef WHERE
  return APX_STATUS_OK;
}

/* Shape(data) -> int64 dims[start:end] (attrs: opset-15 start/end, negative from the end,
 * clamped) */
APX_CPU_KERNEL(apx_cpu_shape) {
  const ApxAttrShape *a = attrs;
  int64_t st, n; /* n: the output's element count (int64) */
  apx_shape_slice(a->start, a->end, ins[0].rank, &st, &n);
  for (int64_t i = 0; i < n; i++) ((int64_t *)outs[0].data)[i] = ins[0].dims[st + i];
  return APX_STATUS_OK;
}

/* ConstantOfShape(shape?, value?) -> output filled with value (ONNX's `value` attribute,
 * passed as optional one-element input 1 of any type, converted to the output's type;
 * absent: zeros). The shape is the output's. */
APX_CPU_KERNEL(apx_cpu_constant_of_shape) {
  ApxStatus s;
  ApxTensor *o = &outs[0];
  size_t es = apx_dtype_size(o->dtype);
  int64_t n = apx_tensor_numel(o);
  if (!apx_cpu_has(ins, n_in, 1)) {
    memset(o->data, 0, (size_t)n * es);
    return APX_STATUS_OK;
  }
  unsigned char v[16];
  if ((s = apx_cpu_convert(ins[1].data, ins[1].dtype, v, o->dtype, 1)))
    return apx_cpu_fail(ctx, s, "cannot convert value to %s", apx_dtype_name(o->dtype));
  for (int64_t i = 0; i < n; i++) memcpy((char *)o->data + (size_t)i * es, v, es);
  return APX_STATUS_OK;
}

/* Range(start, limit, delta) -> start + i * delta, i < max(ceil((limit - start) / delta), 0)
 * (math kernel: float in the math type, integers as int64) */
APX_CPU_KERNEL(apx_cpu_range) {
  ApxTensor *o = &outs[0];
  int64_t n = apx_tensor_numel(o), want;
  if (o->dtype == APX_DT_I64) {
    int64_t st = *(const int64_t *)ins[0].data, li = *(const int64_t *)ins[1].data,
            de = *(const int64_t *)ins[2].data;
    if (de == 0) return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "delta is 0");
    int64_t span = li - st;
    want = de > 0 ? (span + de - 1) / de : (span + de + 1) / de;
    if ((de > 0 && span <= 0) || (de < 0 && span >= 0)) want = 0;
    if (want == n)
      for (int64_t i = 0; i < n; i++) ((int64_t *)o->data)[i] = st + i * de;
  } else if (o->dtype == APX_DT_F64 || o->dtype == APX_DT_F32) {
    int f64 = o->dtype == APX_DT_F64;
    double st = f64 ? *(const double *)ins[0].data : *(const float *)ins[0].data;
    double li = f64 ? *(const double *)ins[1].data : *(const float *)ins[1].data;
    double de = f64 ? *(const double *)ins[2].data : *(const float *)ins[2].data;
    if (de == 0) return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "delta is 0");
    double c = ceil((li - st) / de);
    want = c > 0 ? (int64_t)c : 0;
    if (want == n) {
      if (f64) {
        for (int64_t i = 0; i < n; i++) ((double *)o->data)[i] = st + (double)i * de;
      } else {
        float fs = (float)st, fd = (float)de;
        for (int64_t i = 0; i < n; i++) ((float *)o->data)[i] = fs + (float)i * fd;
      }
    }
  } else {
    return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s",
                        apx_dtype_name(o->dtype));
  }
  if (want != n)
    return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "output has %lld elements, range gives %lld",
                        (long long)n, (long long)want);
  return APX_STATUS_OK;
}
