/* indexing.c - the v1.1 data-movement and indexing ops on every dtype, by element size (raw
 * kernels): Pad (constant, reflect, edge), Tile, Trilu, GatherElements, GatherND; and their
 * float gradients (math kernels, indexing_real.inc): PadGrad, GatherElementsGrad and
 * GatherNDGrad, scatter-adds that sum each output element's contributions in a fixed order
 * (row-major order of the forward output or of the indices) whatever the thread count.
 * Index maps and tensor checks are kernels/index_plan.h's, shared with the CUDA kernels.
 * These kernels also evaluate the ops on constants at compile time (Trilu masks,
 * GatherElements position ids), so they are exact for every dtype (bool, integers, half). */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/index_plan.h"

/* One element of es bytes (1, 2, 4 or 8). */
static inline void put_elem(char *dst, const char *src, size_t es) {
  switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
  }
}

static ApxStatus check_elem_size(ApxCpuCtx *ctx, const ApxTensor *t) {
  size_t es = apx_dtype_size(t->dtype);
  if (es == 1 || es == 2 || es == 4 || es == 8) return APX_STATUS_OK;
  return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s",
                      apx_dtype_name(t->dtype));
}

/* ---- Pad ------------------------------------------------------------------------------ */

/* Pad(data, pads, constant_value?, axes?) -> output (attrs: ApxAttrPad). Each output row
 * (every dim but the last) reads one input row, or is all `value` when a leading coordinate
 * falls in constant padding; along the row the inside run is one copy. */
APX_CPU_KERNEL(apx_cpu_pad) {
  ApxStatus s;
  if ((s = check_elem_size(ctx, &ins[0]))) return s;
  const ApxAttrPad *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxTensor *y = &outs[0];
  if ((s = apx_shape_status(apx_pad_plan(a, x, y, ctx->err, sizeof ctx->err)))) return s;
  size_t es = apx_dtype_size(x->dtype);
  const char *val = (const char *)&a->value; /* little-endian: the element's bytes first */
  int r = x->rank;
  if (r == 0) {
    memmove(y->data, x->data, es);
    return APX_STATUS_OK;
  }
  int64_t xs[APX_MAX_RANK];
  apx_dims_strides(x->dims, r, xs);
  int64_t W = y->dims[r - 1], n = x->dims[r - 1], b = a->begins[r - 1];
  if (W == 0) return APX_STATUS_OK;
  int64_t rows = apx_tensor_numel(y) / W;
  int64_t lo = b > 0 ? b : 0, hi = b + n < W ? b + n : W; /* inside run [lo, hi) */
  if (hi < lo) hi = lo;
  int32_t mode = a->mode;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(rows * W > APX_CPU_PAR_WORK && rows > 1)
  for (int64_t row = 0; row < rows; row++) {
    int64_t q = row, off = 0;
    int fill = 0;
    for (int d = r - 2; d >= 0; d--) {
      int64_t o = q % y->dims[d];
      q /= y->dims[d];
      int64_t src = apx_pad_src(mode, o, x->dims[d], a->begins[d]);
      if (src < 0) fill = 1;
      else off += src * xs[d];
    }
    char *dst = (char *)y->data + (size_t)(row * W) * es;
    const char *srow = (const char *)x->data + (size_t)off * es;
    if (fill) {
      for (int64_t o = 0; o < W; o++) put_elem(dst + (size_t)o * es, val, es);
      continue;
    }
    for (int64_t o = 0; o < W; o++) {
      if (o == lo && hi > lo) { /* the inside run, then the right border */
        memcpy(dst + (size_t)lo * es, srow + (size_t)(lo - b) * es, (size_t)(hi - lo) * es);
        o = hi - 1;
        continue;
      }
      int64_t src = apx_pad_src(mode, o, n, b);
      put_elem(dst + (size_t)o * es, src < 0 ? val : srow + (size_t)src * es, es);
    }
  }
  return APX_STATUS_OK;
}

/* ---- Tile, Trilu ---------------------------------------------------------------------- */

/* Tile(input, repeats) -> output: output row (every dim but the last) reads input row
 * (o_d mod dim_d), copied repeats[last] times. */
APX_CPU_KERNEL(apx_cpu_tile) {
  ApxStatus s;
  const ApxAttrTile *a = attrs;
  const ApxTensor *x = &ins[0];
  ApxTensor *y = &outs[0];
  if ((s = apx_shape_status(apx_tile_plan(a, x, y, ctx->err, sizeof ctx->err)))) return s;
  size_t es = apx_dtype_size(x->dtype);
  int r = x->rank;
  int64_t ny = apx_tensor_numel(y);
  if (ny == 0) return APX_STATUS_OK;
  if (r == 0) {
    memmove(y->data, x->data, es);
    return APX_STATUS_OK;
  }
  int64_t xs[APX_MAX_RANK];
  apx_dims_strides(x->dims, r, xs);
  int64_t n = x->dims[r - 1], reps = a->repeats[r - 1], rows = ny / (n * reps);
  size_t row_bytes = (size_t)n * es;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(ny > APX_CPU_PAR_WORK && rows > 1)
  for (int64_t row = 0; row < rows; row++) {
    int64_t q = row, off = 0;
    for (int d = r - 2; d >= 0; d--) {
      off += (q % y->dims[d]) % x->dims[d] * xs[d];
      q /= y->dims[d];
    }
    char *dst = (char *)y->data + (size_t)row * row_bytes * (size_t)reps;
    const char *src = (const char *)x->data + (size_t)off * es;
    for (int64_t t = 0; t < reps; t++) memcpy(dst + (size_t)t * row_bytes, src, row_bytes);
  }
  return APX_STATUS_OK;
}

/* Trilu(input, k?) -> output: per row i of each matrix, columns outside the kept range are
 * zero bytes (0, false, +0.0 in every dtype). Output may alias the input. */
APX_CPU_KERNEL(apx_cpu_trilu) {
  ApxStatus s;
  const ApxAttrTrilu *a = attrs;
  int64_t batch, rows, cols;
  if ((s = apx_shape_status(apx_trilu_plan(&ins[0], &outs[0], &batch, &rows, &cols, ctx->err,
                                           sizeof ctx->err))))
    return s;
  size_t es = apx_dtype_size(ins[0].dtype);
  int64_t nrow = batch * rows;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(nrow * cols > APX_CPU_PAR_WORK && nrow > 1)
  for (int64_t t = 0; t < nrow; t++) {
    int64_t lo, hi;
    apx_trilu_row(a->upper, a->k, t % rows, cols, &lo, &hi);
    char *dst = (char *)outs[0].data + (size_t)(t * cols) * es;
    const char *src = (const char *)ins[0].data + (size_t)(t * cols) * es;
    if (hi > lo) memmove(dst + (size_t)lo * es, src + (size_t)lo * es, (size_t)(hi - lo) * es);
    memset(dst, 0, (size_t)lo * es);
    memset(dst + (size_t)hi * es, 0, (size_t)(cols - hi) * es);
  }
  return APX_STATUS_OK;
}

/* ---- GatherElements ------------------------------------------------------------------- */

/* Every index within [-A, A) (A = data->dims[axis]). */
static ApxStatus check_indices(ApxCpuCtx *ctx, const ApxTensor *idx, int64_t A) {
  int64_t ni = apx_tensor_numel(idx);
  for (int64_t j = 0; j < ni; j++) {
    int64_t v = apx_cpu_index_at(idx, j);
    if (v < -A || v >= A)
      return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "index %lld at position %lld outside [-%lld, %lld)",
                          (long long)v, (long long)j, (long long)A, (long long)A);
  }
  return APX_STATUS_OK;
}

/* Offset into data (strides ds) of element t of indices (dims id), coordinate axis replaced
 * by the normalized index v. */
static inline int64_t ge_offset(int64_t t, const int64_t *id, const int64_t *ds, int r, int axis,
                                int64_t v) {
  int64_t off = v * ds[axis];
  for (int d = r - 1; d >= 0 && t > 0; d--) {
    int64_t c = t % id[d];
    t /= id[d];
    if (d != axis) off += c * ds[d];
  }
  return off;
}

APX_CPU_KERNEL(apx_cpu_gather_elements) {
  ApxStatus s;
  if ((s = check_elem_size(ctx, &ins[0])))
    return s;
  int axis = (int)((const ApxAttrAxis *)attrs)->axis;
  const ApxTensor *x = &ins[0], *idx = &ins[1];
  if ((s = apx_shape_status(apx_gather_elements_plan(axis, x, idx, &outs[0], ctx->err, sizeof ctx->err))))
    return s;
  int64_t A = x->dims[axis];
  if ((s = check_indices(ctx, idx, A))) return s;
  size_t es = apx_dtype_size(x->dtype);
  int64_t ds[APX_MAX_RANK], ni = apx_tensor_numel(idx);
  apx_dims_strides(x->dims, x->rank, ds);
  const char *src = x->data;
  char *dst = outs[0].data;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(ni > APX_CPU_PAR_WORK / 4)
  for (int64_t t = 0; t < ni; t++) {
    int64_t v = apx_cpu_index_at(idx, t);
    if (v < 0) v += A;
    put_elem(dst + (size_t)t * es, src + (size_t)ge_offset(t, idx->dims, ds, x->rank, axis, v) * es, es);
  }
  return APX_STATUS_OK;
}

/* ---- GatherND ------------------------------------------------------------------------- */

/* Element offset into data of tuple (batch bi, tuple j); -1 when an entry is out of range. */
static inline int64_t gnd_offset(const ApxGatherNDPlan *p, const ApxTensor *idx, int64_t bi, int64_t j) {
  int64_t off = bi * p->batch_stride, base = (bi * p->n + j) * p->m;
  for (int64_t k = 0; k < p->m; k++) {
    int64_t v = apx_cpu_index_at(idx, base + k), dim = p->dims[k];
    if (v < -dim || v >= dim) return -1;
    off += (v < 0 ? v + dim : v) * p->strides[k];
  }
  return off;
}

static ApxStatus check_tuples(ApxCpuCtx *ctx, const ApxGatherNDPlan *p, const ApxTensor *idx) {
  for (int64_t bi = 0; bi < p->batches; bi++)
    for (int64_t j = 0; j < p->n; j++)
      if (gnd_offset(p, idx, bi, j) < 0)
        return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "index tuple %lld of batch %lld is outside the data",
                            (long long)j, (long long)bi);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_gather_nd) {
  ApxStatus s;
  ApxGatherNDPlan p;
  const ApxTensor *idx = &ins[1];
  if ((s = apx_shape_status(apx_gather_nd_plan(((const ApxAttrGatherND *)attrs)->batch_dims, &ins[0],
                                               idx, &outs[0], &p, ctx->err, sizeof ctx->err))) ||
      (s = check_tuples(ctx, &p, idx)))
    return s;
  size_t bytes = (size_t)p.slice * apx_dtype_size(ins[0].dtype);
  int64_t nt_ = p.batches * p.n;
  int nt = apx_cpu_threads(ctx);
  APX_OMP_FOR(nt_ * p.slice > APX_CPU_PAR_WORK && nt_ > 1)
  for (int64_t t = 0; t < nt_; t++) {
    int64_t off = gnd_offset(&p, idx, t / p.n, t % p.n);
    memcpy((char *)outs[0].data + (size_t)t * bytes,
           (const char *)ins[0].data + (size_t)off * apx_dtype_size(ins[0].dtype), bytes);
  }
  return APX_STATUS_OK;
}

/* ---- gradients (math kernels: float in the math type, indices as int64) --------------- */

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/indexing_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/indexing_real.inc"
#include "kernels/cpu/real_end.h"

/* PadGrad(dY) -> dX (dX: the forward input's shape) */
APX_CPU_KERNEL(apx_cpu_pad_grad) {
  ApxStatus s;
  const ApxAttrPad *a = attrs;
  if ((s = apx_shape_status(apx_pad_plan(a, &outs[0], &ins[0], ctx->err, sizeof ctx->err)))) return s;
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    pad_grad_f64(ins[0].data, outs[0].data, a, outs[0].dims, ins[0].dims, outs[0].rank, nt);
  else
    pad_grad_f32(ins[0].data, outs[0].data, a, outs[0].dims, ins[0].dims, outs[0].rank, nt);
  return APX_STATUS_OK;
}

/* GatherElementsGrad(dY, indices) -> dData */
APX_CPU_KERNEL(apx_cpu_gather_elements_grad) {
  ApxStatus s;
  int axis = (int)((const ApxAttrAxis *)attrs)->axis;
  const ApxTensor *dd = &outs[0], *idx = &ins[1];
  if ((s = apx_shape_status(apx_gather_elements_plan(axis, dd, idx, &ins[0], ctx->err, sizeof ctx->err))) ||
      (s = check_indices(ctx, idx, dd->dims[axis])))
    return s;
  int nt = apx_cpu_threads(ctx);
  if (dd->dtype == APX_DT_F64)
    gather_elements_grad_f64(ins[0].data, idx->data, dd->data, dd->dims, idx->dims, dd->rank, axis, nt);
  else
    gather_elements_grad_f32(ins[0].data, idx->data, dd->data, dd->dims, idx->dims, dd->rank, axis, nt);
  return APX_STATUS_OK;
}

/* GatherNDGrad(dY, indices) -> dData */
APX_CPU_KERNEL(apx_cpu_gather_nd_grad) {
  ApxStatus s;
  ApxGatherNDPlan p;
  const ApxTensor *idx = &ins[1];
  if ((s = apx_shape_status(apx_gather_nd_plan(((const ApxAttrGatherND *)attrs)->batch_dims, &outs[0],
                                               idx, &ins[0], &p, ctx->err, sizeof ctx->err))) ||
      (s = check_tuples(ctx, &p, idx)))
    return s;
  int nt = apx_cpu_threads(ctx);
  int64_t nd = apx_tensor_numel(&outs[0]);
  if (outs[0].dtype == APX_DT_F64)
    gather_nd_grad_f64(ins[0].data, idx->data, outs[0].data, nd, &p, nt);
  else
    gather_nd_grad_f32(ins[0].data, idx->data, outs[0].data, nd, &p, nt);
  return APX_STATUS_OK;
}
