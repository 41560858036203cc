/* indexing.cu - the v1.1 data-movement and indexing ops on CUDA, the counterpart of
 * kernels/cpu/indexing.c: Pad (constant, reflect, edge), Tile, Trilu, GatherElements and
 * GatherND on every dtype by element size; their float gradients PadGrad,
 * GatherElementsGrad, GatherNDGrad. The index maps and tensor checks are
 * kernels/index_plan.h's, shared with the CPU. Gradients sum each output element's terms in
 * fp32 in the CPU reference's order (PadGrad: one thread per dX element over its preimages in
 * output order; the scatter-adds: one thread per line of the indices / per slice element of a
 * batch, in index order, into an fp32 buffer), so they match the CPU bit for bit and need no
 * atomics. An index outside the data is a device-side error (reported at the next
 * synchronization); the gather writes 0 there and the scatter skips it. */
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/index_plan.h"

/* Shapes as kernel arguments (rank <= 8). */
struct IdxDims {
  int32_t rank;
  int64_t a[APX_MAX_RANK], b[APX_MAX_RANK], sa[APX_MAX_RANK], sb[APX_MAX_RANK];
};

static IdxDims idx_dims(const ApxTensor *a, const ApxTensor *b) {
  IdxDims g;
  memset(&g, 0, sizeof g);
  g.rank = a->rank;
  for (int d = 0; d < a->rank; d++) g.a[d] = a->dims[d];
  for (int d = 0; d < b->rank; d++) g.b[d] = b->dims[d];
  apx_dims_strides(a->dims, a->rank, g.sa);
  apx_dims_strides(b->dims, b->rank, g.sb);
  return g;
}

/* ---- Pad -------------------------------------------------------------------------------- */

struct PadArgs {
  IdxDims g; /* a: input (x), b: output (y) */
  int64_t begins[APX_MAX_RANK];
  int32_t mode;
};

static PadArgs pad_args(const ApxAttrPad *a, const ApxTensor *x, const ApxTensor *y) {
  PadArgs p;
  p.g = idx_dims(x, y);
  p.mode = a->mode;
  for (int d = 0; d < APX_MAX_RANK; d++) p.begins[d] = d < a->rank ? a->begins[d] : 0;
  return p;
}

template <typename U>
APX_CU_KERNEL(pad_kernel)(const U *x, U *y, int64_t n, U value, PadArgs p) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t q = i, off = 0;
    int fill = 0;
    for (int d = p.g.rank - 1; d >= 0; d--) {
      int64_t o = q % p.g.b[d];
      q /= p.g.b[d];
      int64_t s = apx_pad_src(p.mode, o, p.g.a[d], p.begins[d]);
      if (s < 0) fill = 1;
      else off += s * p.g.sa[d];
    }
    y[i] = fill ? value : x[off];
  }
}

template <typename U>
static void launch_pad(const U *x, U *y, int64_t n, U value, const PadArgs &p, cudaStream_t s, int block,
                       unsigned grid) {
  pad_kernel<U><<<grid, block, 0, s>>>(x, y, n, value, p);
}

APX_CUDA_ENTRY(apx_cuda_pad) {
  const ApxAttrPad *a = (const ApxAttrPad *)attrs;
  APX_TRY(apx_shape_status(apx_pad_plan(a, &ins[0], &outs[0], ctx->err, sizeof ctx->err)));
  int64_t n = apx_tensor_numel(&outs[0]);
  if (n == 0) return APX_STATUS_OK;
  PadArgs p = pad_args(a, &ins[0], &outs[0]);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(ins[0].dtype), U, {
    U value;
    memcpy(&value, &a->value, sizeof value); /* little-endian: the element's bytes first */
    launch_pad<U>((const U *)ins[0].data, (U *)outs[0].data, n, value, p, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* dX[i] = sum of dY over i's preimages, in output order (an odometer, as the CPU's). */
template <typename T>
APX_CU_KERNEL(pad_grad_kernel)(const T *dy, T *dx, int64_t n, PadArgs p) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t c[APX_MAX_RANK], o[APX_MAX_RANK], q = i, off = 0;
    int none = 0, r = p.g.rank;
    for (int d = r - 1; d >= 0; d--) {
      c[d] = q % p.g.a[d];
      q /= p.g.a[d];
      o[d] = apx_pad_next_pre(p.mode, c[d], p.g.a[d], p.begins[d], p.g.b[d], -1);
      none |= o[d] < 0;
      off += o[d] * p.g.sb[d];
    }
    float acc = 0.0f;
    while (!none) {
      acc += ld(dy[off]);
      int d = r - 1;
      for (; d >= 0; d--) {
        int64_t nxt = apx_pad_next_pre(p.mode, c[d], p.g.a[d], p.begins[d], p.g.b[d], o[d]);
        if (nxt >= 0) {
          off += (nxt - o[d]) * p.g.sb[d];
          o[d] = nxt;
          break;
        }
        int64_t first = apx_pad_next_pre(p.mode, c[d], p.g.a[d], p.begins[d], p.g.b[d], -1);
        off -= (o[d] - first) * p.g.sb[d];
        o[d] = first;
      }
      if (d < 0) break;
    }
    dx[i] = st<T>(acc);
  }
}

template <typename T>
static void launch_pad_grad(const T *dy, T *dx, int64_t n, const PadArgs &p, cudaStream_t s, int block,
                            unsigned grid) {
  pad_grad_kernel<T><<<grid, block, 0, s>>>(dy, dx, n, p);
}

APX_CUDA_ENTRY(apx_cuda_pad_grad) {
  const ApxAttrPad *a = (const ApxAttrPad *)attrs;
  APX_TRY(apx_shape_status(apx_pad_plan(a, &outs[0], &ins[0], ctx->err, sizeof ctx->err)));
  int64_t n = apx_tensor_numel(&outs[0]);
  if (n == 0) return APX_STATUS_OK;
  PadArgs p = pad_args(a, &outs[0], &ins[0]);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    launch_pad_grad<T>((const T *)ins[0].data, (T *)outs[0].data, n, p, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- Tile, Trilu ------------------------------------------------------------------------ */

template <typename U>
APX_CU_KERNEL(tile_kernel)(const U *x, U *y, int64_t n, IdxDims g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t q = i, off = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      off += (q % g.b[d]) % g.a[d] * g.sa[d];
      q /= g.b[d];
    }
    y[i] = x[off];
  }
}

template <typename U>
static void launch_tile(const U *x, U *y, int64_t n, const IdxDims &g, cudaStream_t s, int block, unsigned grid) {
  tile_kernel<U><<<grid, block, 0, s>>>(x, y, n, g);
}

APX_CUDA_ENTRY(apx_cuda_tile) {
  APX_TRY(apx_shape_status(apx_tile_plan((const ApxAttrTile *)attrs, &ins[0], &outs[0], ctx->err, sizeof ctx->err)));
  int64_t n = apx_tensor_numel(&outs[0]);
  if (n == 0) return APX_STATUS_OK;
  IdxDims g = idx_dims(&ins[0], &outs[0]);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(ins[0].dtype), U, {
    launch_tile<U>((const U *)ins[0].data, (U *)outs[0].data, n, g, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* Element (row i, column j) of each matrix kept or zero; may run in place. */
template <typename U>
APX_CU_KERNEL(trilu_kernel)(const U *x, U *y, int64_t n, int64_t rows, int64_t cols, int32_t upper,
                             int64_t k) {
  APX_CU_GRID_STRIDE(t, n) {
    int64_t j = t % cols, i = t / cols % rows, lo, hi;
    apx_trilu_row(upper, k, i, cols, &lo, &hi);
    y[t] = j >= lo && j < hi ? x[t] : (U)0;
  }
}

template <typename U>
static void launch_trilu(const U *x, U *y, int64_t n, int64_t rows, int64_t cols, int32_t upper, int64_t k,
                         cudaStream_t s, int block, unsigned grid) {
  trilu_kernel<U><<<grid, block, 0, s>>>(x, y, n, rows, cols, upper, k);
}

APX_CUDA_ENTRY(apx_cuda_trilu) {
  const ApxAttrTrilu *a = (const ApxAttrTrilu *)attrs;
  int64_t batch, rows, cols;
  APX_TRY(apx_shape_status(apx_trilu_plan(&ins[0], &outs[0], &batch, &rows, &cols, ctx->err, sizeof ctx->err)));
  int64_t n = batch * rows * cols;
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(ins[0].dtype), U, {
    launch_trilu<U>((const U *)ins[0].data, (U *)outs[0].data, n, rows, cols, a->upper, a->k,
                    apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- GatherElements --------------------------------------------------------------------- */

/* out[t] = data[t's coordinates in the indices' dims (g.b), axis replaced by idx[t]] */
template <typename U>
APX_CU_KERNEL(gather_elements_kernel)(const U *data, const void *idx, int idt, U *out, int64_t n, IdxDims g,
                                       int axis, int op, int64_t seq, ApxCudaDevErr *err) {
  int64_t A = g.a[axis];
  APX_CU_GRID_STRIDE(t, n) {
    int64_t v = ld_index(idx, idt, t);
    if (v < -A || v >= A) {
      apx_cu_dev_fail(err, APX_CUDA_DERR_INDEX, op, seq, v, t, A);
      out[t] = (U)0;
      continue;
    }
    int64_t q = t, off = (v < 0 ? v + A : v) * g.sa[axis];
    for (int d = g.rank - 1; d >= 0; d--) {
      if (d != axis) off += (q % g.b[d]) * g.sa[d];
      q /= g.b[d];
    }
    out[t] = data[off];
  }
}

template <typename U>
static void launch_gather_elements(const U *data, const void *idx, int idt, U *out, int64_t n, const IdxDims &g,
                                   int axis, int op, int64_t seq, ApxCudaDevErr *err, cudaStream_t s, int block,
                                   unsigned grid) {
  gather_elements_kernel<U><<<grid, block, 0, s>>>(data, idx, idt, out, n, g, axis, op, seq, err);
}

APX_CUDA_ENTRY(apx_cuda_gather_elements) {
  int axis = (int)((const ApxAttrAxis *)attrs)->axis;
  APX_TRY(apx_shape_status(apx_gather_elements_plan(axis, &ins[0], &ins[1], &outs[0], ctx->err, sizeof ctx->err)));
  int64_t n = apx_tensor_numel(&ins[1]);
  if (n == 0) return APX_STATUS_OK;
  IdxDims g = idx_dims(&ins[0], &ins[1]);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(ins[0].dtype), U, {
    launch_gather_elements<U>((const U *)ins[0].data, ins[1].data, ins[1].dtype, (U *)outs[0].data, n, g, axis,
                              (int)op, ctx->seq, ctx->dev_err, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* One thread per line of the indices (every coordinate but axis fixed): acc[line, idx[j]] +=
 * dY[line, j] in j order, into fp32 (the CPU's order; lines are disjoint in acc). */
template <typename T>
APX_CU_KERNEL(gather_elements_grad_kernel)(const T *dy, const void *idx, int idt, float *acc, int64_t lines,
                                            IdxDims g, int axis, int op, int64_t seq, ApxCudaDevErr *err) {
  int64_t A = g.a[axis], J = g.b[axis];
  APX_CU_GRID_STRIDE(l, lines) {
    int64_t q = l, bi = 0, bd = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      if (d == axis) continue;
      int64_t c = q % g.b[d];
      q /= g.b[d];
      bi += c * g.sb[d];
      bd += c * g.sa[d];
    }
    for (int64_t j = 0; j < J; j++) {
      int64_t t = bi + j * g.sb[axis], v = ld_index(idx, idt, t);
      if (v < -A || v >= A) {
        apx_cu_dev_fail(err, APX_CUDA_DERR_INDEX, op, seq, v, t, A);
        continue;
      }
      acc[bd + (v < 0 ? v + A : v) * g.sa[axis]] += ld(dy[t]);
    }
  }
}

template <typename T>
static void launch_gather_elements_grad(const T *dy, const void *idx, int idt, float *acc, int64_t lines,
                                        const IdxDims &g, int axis, int op, int64_t seq, ApxCudaDevErr *err,
                                        cudaStream_t s, int block, unsigned grid) {
  gather_elements_grad_kernel<T><<<grid, block, 0, s>>>(dy, idx, idt, acc, lines, g, axis, op, seq, err);
}

/* An fp32 accumulator of out's elements, zeroed: out itself when it is fp32. */
static ApxStatus fp32_accumulator(ApxCudaCtx *ctx, ApxTensor *out, float **acc) {
  size_t n = (size_t)apx_tensor_numel(out);
  if (out->dtype == APX_DT_F32)
    *acc = (float *)out->data;
  else
    APX_TRY(apx_cuda_tmp(ctx, n * sizeof(float), (void **)acc));
  APX_CUDA_TRY(ctx, cudaMemsetAsync(*acc, 0, n * sizeof(float), apx_cu_stream(ctx)));
  return APX_STATUS_OK;
}

static ApxStatus fp32_finish(ApxCudaCtx *ctx, const float *acc, ApxTensor *out) {
  if (out->dtype == APX_DT_F32) return APX_STATUS_OK;
  int64_t n = apx_tensor_numel(out);
  return apx_cuda_convert(ctx, acc, APX_DT_F32, n, out->data, out->dtype, n);
}

APX_CUDA_ENTRY(apx_cuda_gather_elements_grad) {
  int axis = (int)((const ApxAttrAxis *)attrs)->axis;
  APX_TRY(apx_shape_status(apx_gather_elements_plan(axis, &outs[0], &ins[1], &ins[0], ctx->err, sizeof ctx->err)));
  if (!apx_cu_is_float16(outs[0].dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(outs[0].dtype));
  float *acc = NULL;
  APX_TRY(fp32_accumulator(ctx, &outs[0], &acc));
  int64_t ni = apx_tensor_numel(&ins[1]), J = ins[1].dims[axis];
  if (ni > 0 && J > 0) {
    int64_t lines = ni / J;
    IdxDims g = idx_dims(&outs[0], &ins[1]);
    int block = apx_cu_block(ctx, 256);
    unsigned grid = apx_cu_grid(ctx, lines, block);
    APX_CU_FLOAT_SWITCH(ctx, ins[0].dtype, T, {
      launch_gather_elements_grad<T>((const T *)ins[0].data, ins[1].data, ins[1].dtype, acc, lines, g, axis,
                                     (int)op, ctx->seq, ctx->dev_err, apx_cu_stream(ctx), block, grid);
    });
    APX_CUDA_LAUNCHED(ctx);
  }
  return fp32_finish(ctx, acc, &outs[0]);
}

/* ---- GatherND --------------------------------------------------------------------------- */

struct GndArgs {
  int64_t batches, n, m, slice, batch_stride;
  int64_t dims[APX_MAX_RANK], strides[APX_MAX_RANK];
};

static GndArgs gnd_args(const ApxGatherNDPlan *p) {
  GndArgs a;
  memset(&a, 0, sizeof a);
  a.batches = p->batches, a.n = p->n, a.m = p->m, a.slice = p->slice, a.batch_stride = p->batch_stride;
  for (int k = 0; k < APX_MAX_RANK; k++) a.dims[k] = p->dims[k], a.strides[k] = p->strides[k];
  return a;
}

/* Element offset of tuple t (= batch * n + j) of the indices, -1 (a device error) when out of
 * range. */
static __device__ __forceinline__ int64_t gnd_offset(const GndArgs &a, const void *idx, int idt, int64_t t,
                                                     int op, int64_t seq, ApxCudaDevErr *err) {
  int64_t off = t / a.n * a.batch_stride;
  for (int64_t k = 0; k < a.m; k++) {
    int64_t v = ld_index(idx, idt, t * a.m + k), dim = a.dims[k];
    if (v < -dim || v >= dim) {
      apx_cu_dev_fail(err, APX_CUDA_DERR_INDEX, op, seq, v, t * a.m + k, dim);
      return -1;
    }
    off += (v < 0 ? v + dim : v) * a.strides[k];
  }
  return off;
}

template <typename U>
APX_CU_KERNEL(gather_nd_kernel)(const U *data, const void *idx, int idt, U *out, GndArgs a, int op, int64_t seq,
                                 ApxCudaDevErr *err) {
  int64_t n = a.batches * a.n * a.slice;
  APX_CU_GRID_STRIDE(i, n) {
    int64_t t = i / a.slice, k = i % a.slice;
    int64_t off = gnd_offset(a, idx, idt, t, k == 0 ? op : -1, seq, k == 0 ? err : NULL);
    out[i] = off < 0 ? (U)0 : data[off + k];
  }
}

template <typename U>
static void launch_gather_nd(const U *data, const void *idx, int idt, U *out, const GndArgs &a, int op,
                             int64_t seq, ApxCudaDevErr *err, cudaStream_t s, int block, unsigned grid) {
  gather_nd_kernel<U><<<grid, block, 0, s>>>(data, idx, idt, out, a, op, seq, err);
}

APX_CUDA_ENTRY(apx_cuda_gather_nd) {
  ApxGatherNDPlan p;
  APX_TRY(apx_shape_status(apx_gather_nd_plan(((const ApxAttrGatherND *)attrs)->batch_dims, &ins[0], &ins[1], &outs[0],
                                       &p, ctx->err, sizeof ctx->err)));
  int64_t n = p.batches * p.n * p.slice;
  if (n == 0) return APX_STATUS_OK;
  GndArgs a = gnd_args(&p);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(ins[0].dtype), U, {
    launch_gather_nd<U>((const U *)ins[0].data, ins[1].data, ins[1].dtype, (U *)outs[0].data, a, (int)op, ctx->seq,
                        ctx->dev_err, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* One thread per (batch, slice element k): acc[tuple j's slice + k] += dY[j, k] for j in order
 * (the CPU's order; different k never collide). */
template <typename T>
APX_CU_KERNEL(gather_nd_grad_kernel)(const T *dy, const void *idx, int idt, float *acc, GndArgs a, int op,
                                      int64_t seq, ApxCudaDevErr *err) {
  int64_t n = a.batches * a.slice;
  APX_CU_GRID_STRIDE(i, n) {
    int64_t bi = i / a.slice, k = i % a.slice;
    for (int64_t j = 0; j < a.n; j++) {
      int64_t t = bi * a.n + j, off = gnd_offset(a, idx, idt, t, op, seq, k == 0 ? err : NULL);
      if (off >= 0) acc[off + k] += ld(dy[t * a.slice + k]);
    }
  }
}

template <typename T>
static void launch_gather_nd_grad(const T *dy, const void *idx, int idt, float *acc, const GndArgs &a, int op,
                                  int64_t seq, ApxCudaDevErr *err, cudaStream_t s, int block, unsigned grid) {
  gather_nd_grad_kernel<T><<<grid, block, 0, s>>>(dy, idx, idt, acc, a, op, seq, err);
}

APX_CUDA_ENTRY(apx_cuda_gather_nd_grad) {
  ApxGatherNDPlan p;
  APX_TRY(apx_shape_status(apx_gather_nd_plan(((const ApxAttrGatherND *)attrs)->batch_dims, &outs[0], &ins[1], &ins[0],
                                       &p, ctx->err, sizeof ctx->err)));
  if (!apx_cu_is_float16(outs[0].dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(outs[0].dtype));
  float *acc = NULL;
  APX_TRY(fp32_accumulator(ctx, &outs[0], &acc));
  int64_t n = p.batches * p.slice;
  if (n > 0 && p.n > 0) {
    GndArgs a = gnd_args(&p);
    int block = apx_cu_block(ctx, 256);
    unsigned grid = apx_cu_grid(ctx, n, block);
    APX_CU_FLOAT_SWITCH(ctx, ins[0].dtype, T, {
      launch_gather_nd_grad<T>((const T *)ins[0].data, ins[1].data, ins[1].dtype, acc, a, (int)op, ctx->seq,
                               ctx->dev_err, apx_cu_stream(ctx), block, grid);
    });
    APX_CUDA_LAUNCHED(ctx);
  }
  return fp32_finish(ctx, acc, &outs[0]);
}
