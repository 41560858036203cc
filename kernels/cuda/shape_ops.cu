/* shape_ops.cu - data movement for every dtype, by element size: Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity (copies), Transpose, Concat, Split (2-D pitched copies), Slice,
 * SliceGrad, Gather, Expand, Where; apx_cuda_broadcast_copy. (GatherGrad: gather_grad.cu.)
 * Output shapes are the ones the compiler inferred; entries check them like the CPU
 * reference (kernels/cpu/shape_ops.c). A gather index outside [-A, A) is a device-side error
 * (reported at the next synchronization); its output row is zero. */
#include "kernels/cuda/common.cuh"

/* A dims[rank] block copied element by element between strided layouts (elements). */
struct StridedArgs {
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
  int64_t dst[APX_MAX_RANK], src[APX_MAX_RANK];
};

/* Collapses unit dims and merges neighbours contiguous in both layouts. Returns the element
 * count. */
static int64_t strided_args(StridedArgs *g, const int64_t *dims, int rank, const int64_t *dst_st,
                            const int64_t *src_st) {
  int n = 0;
  int64_t total = 1;
  for (int d = 0; d < rank; d++) {
    total *= dims[d];
    if (dims[d] == 1) continue;
    if (n > 0 && g->dst[n - 1] == dst_st[d] * dims[d] && g->src[n - 1] == src_st[d] * dims[d]) {
      g->dims[n - 1] *= dims[d];
      g->dst[n - 1] = dst_st[d];
      g->src[n - 1] = src_st[d];
    } else {
      g->dims[n] = dims[d];
      g->dst[n] = dst_st[d];
      g->src[n] = src_st[d];
      n++;
    }
  }
  g->rank = n;
  return total;
}

template <typename U>
APX_CU_KERNEL(strided_copy_kernel)(U *dst, const U *src, int64_t n, StridedArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t q = i, od = 0, os = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t id = q % g.dims[d];
      q /= g.dims[d];
      od += id * g.dst[d];
      os += id * g.src[d];
    }
    dst[od] = src[os];
  }
}

template <typename U>
static void launch_strided_copy(U *dst, const U *src, int64_t n, const StridedArgs &g, cudaStream_t s,
                                int block, unsigned grid) {
  strided_copy_kernel<U><<<grid, block, 0, s>>>(dst, src, n, g);
}

/* dst (dims, dst strides) = src (src strides), esz-byte elements, element offsets applied
 * by the caller. */
static ApxStatus strided_copy(ApxCudaCtx *ctx, void *dst, const int64_t *dst_st, const void *src,
                              const int64_t *src_st, const int64_t *dims, int rank, size_t esz) {
  StridedArgs g;
  int64_t n = strided_args(&g, dims, rank, dst_st, src_st);
  if (n == 0) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  if (g.rank == 0 || (g.rank == 1 && g.dst[0] == 1 && g.src[0] == 1)) {
    APX_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, (size_t)n * esz, cudaMemcpyDeviceToDevice, s));
    return APX_STATUS_OK;
  }
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, esz, U, launch_strided_copy<U>((U *)dst, (const U *)src, n, g, s, block, grid));
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

ApxStatus apx_cuda_broadcast_copy(ApxCudaCtx *ctx, const ApxTensor *src, ApxTensor *dst) {
  ApxBcast bc;
  const ApxTensor *one[1] = {src};
  char a[96], b[96];
  if (apx_bcast_init_t(&bc, dst, one, 1, NULL) != 0)
    return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "input %s does not broadcast to %s",
                         apx_dims_str(src, a, sizeof a), apx_dims_str(dst, b, sizeof b));
  int64_t ds[APX_MAX_RANK];
  apx_dims_strides(bc.dims, bc.rank, ds);
  return strided_copy(ctx, dst->data, ds, src->data, bc.strides[0], bc.dims, bc.rank,
                      apx_dtype_size(dst->dtype));
}

/* ---- entries ----------------------------------------------------------------------------------- */

/* Dtypes (one, with a size) and shapes are checked by kernels/validate.h. */

APX_CUDA_ENTRY(apx_cuda_copy) {
  size_t bytes = apx_tensor_bytes(&ins[0]);
  if (outs[0].data != ins[0].data && bytes)
    APX_CUDA_TRY(ctx, cudaMemcpyAsync(outs[0].data, ins[0].data, bytes, cudaMemcpyDeviceToDevice,
                                      apx_cu_stream(ctx)));
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_transpose) {
  int64_t ss[APX_MAX_RANK], ys[APX_MAX_RANK];
  if (apx_transpose_plan((const ApxAttrTranspose *)attrs, &ins[0], &outs[0], ss, ctx->err,
                            sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  apx_dims_strides(outs[0].dims, outs[0].rank, ys);
  return strided_copy(ctx, outs[0].data, ys, ins[0].data, ss, outs[0].dims, outs[0].rank,
                      apx_dtype_size(ins[0].dtype));
}

/* Concat / Split: each part is an (outer, len) block of bytes at column `pos` of the whole
 * (outer, row): one pitched 2-D copy per part. */
static ApxStatus concat_split(ApxCudaCtx *ctx, int split, int64_t axis, const ApxTensor *whole,
                              const ApxTensor *parts, int n) {
  int64_t outer, inner;
  if (apx_concat_plan(axis, whole, parts, n, split, &outer, &inner, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  inner *= (int64_t)apx_dtype_size(whole->dtype); /* bytes */
  int64_t row = whole->dims[axis] * inner, pos = 0;
  cudaStream_t s = apx_cu_stream(ctx);
  for (int k = 0; k < n; k++) {
    int64_t len = parts[k].dims[axis] * inner;
    if (len && outer && parts[k].data) {
      char *w = (char *)whole->data + pos;
      if (split)
        APX_CUDA_TRY(ctx, cudaMemcpy2DAsync(parts[k].data, (size_t)len, w, (size_t)row, (size_t)len,
                                            (size_t)outer, cudaMemcpyDeviceToDevice, s));
      else
        APX_CUDA_TRY(ctx, cudaMemcpy2DAsync(w, (size_t)row, parts[k].data, (size_t)len, (size_t)len,
                                            (size_t)outer, cudaMemcpyDeviceToDevice, s));
    }
    pos += len;
  }
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_concat) {
  return concat_split(ctx, 0, ((const ApxAttrAxis *)attrs)->axis, &outs[0], ins, n_in);
}

APX_CUDA_ENTRY(apx_cuda_split) {
  return concat_split(ctx, 1, ((const ApxAttrSplit *)attrs)->axis, &ins[0], outs, n_out);
}

APX_CUDA_ENTRY(apx_cuda_slice) {
  int64_t base, ss[APX_MAX_RANK], ys[APX_MAX_RANK];
  if (apx_slice_view((const ApxAttrSlice *)attrs, &ins[0], &outs[0], &base, ss, ctx->err,
                        sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  size_t es = apx_dtype_size(ins[0].dtype);
  apx_dims_strides(outs[0].dims, outs[0].rank, ys);
  return strided_copy(ctx, outs[0].data, ys, (const char *)ins[0].data + base * (int64_t)es, ss,
                      outs[0].dims, outs[0].rank, es);
}

APX_CUDA_ENTRY(apx_cuda_slice_grad) {
  int64_t base, ds[APX_MAX_RANK], ys[APX_MAX_RANK];
  if (apx_slice_view((const ApxAttrSlice *)attrs, &outs[0], &ins[0], &base, ds, ctx->err,
                        sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  size_t es = apx_dtype_size(outs[0].dtype);
  APX_CUDA_TRY(ctx, cudaMemsetAsync(outs[0].data, 0, apx_tensor_bytes(&outs[0]), apx_cu_stream(ctx)));
  apx_dims_strides(ins[0].dims, ins[0].rank, ys);
  return strided_copy(ctx, (char *)outs[0].data + base * (int64_t)es, ds, ins[0].data, ys,
                      ins[0].dims, ins[0].rank, es);
}

APX_CUDA_ENTRY(apx_cuda_expand) {
  return apx_cuda_broadcast_copy(ctx, &ins[0], &outs[0]);
}

/* ---- Gather --------------------------------------------------------------------------------- */

/* out (outer, ni, inner) = data (outer, A, inner) rows picked by idx */
template <typename U>
APX_CU_KERNEL(gather_kernel)(const U *data, const void *idx, int idt, U *out, int64_t outer,
                              int64_t A, int64_t inner, int64_t ni, int op, int64_t seq,
                              ApxCudaDevErr *err) {
  int64_t n = outer * ni * inner;
  APX_CU_GRID_STRIDE(i, n) {
    int64_t k = i % inner, t = i / inner, j = t % ni, o = t / ni;
    int64_t v = ld_index(idx, idt, j);
    if (v < -A || v >= A) {
      if (k == 0 && o == 0) apx_cu_dev_fail(err, APX_CUDA_DERR_INDEX, op, seq, v, j, A);
      out[i] = 0;
      continue;
    }
    if (v < 0) v += A;
    out[i] = data[(o * A + v) * inner + k];
  }
}

APX_CUDA_ENTRY(apx_cuda_gather) {
  int64_t outer = 0, A = 0, inner = 0;
  if (apx_cu_gather_shape(((const ApxAttrAxis *)attrs)->axis, &ins[0], &ins[1], &outs[0], &outer,
                          &A, &inner, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  int64_t ni = apx_tensor_numel(&ins[1]), n = outer * ni * inner;
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(ins[0].dtype), U, {
    gather_kernel<U><<<grid, block, 0, apx_cu_stream(ctx)>>>(
        (const U *)ins[0].data, ins[1].data, ins[1].dtype, (U *)outs[0].data, outer, A, inner, ni,
        (int)op, ctx->seq, ctx->dev_err);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- Where ------------------------------------------------------------------------------------ */

struct WhereArgs {
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
  int64_t st[3][APX_MAX_RANK];
};

template <typename U>
APX_CU_KERNEL(where_kernel)(const uint8_t *c, const U *x, const U *y, U *o, int64_t n, WhereArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t q = i, oc = 0, ox = 0, oy = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      int64_t id = q % g.dims[d];
      q /= g.dims[d];
      oc += id * g.st[0][d];
      ox += id * g.st[1][d];
      oy += id * g.st[2][d];
    }
    o[i] = c[oc] ? x[ox] : y[oy];
  }
}

APX_CUDA_ENTRY(apx_cuda_where) {
  const ApxTensor *tri[3] = {&ins[0], &ins[1], &ins[2]};
  ApxBcast bc;
  if (apx_bcast_plan(&bc, &outs[0], tri, 3, ctx->err, sizeof ctx->err)) return APX_STATUS_BAD_INPUT;
  int64_t n = bc.numel;
  if (n == 0) return APX_STATUS_OK;
  WhereArgs g;
  g.rank = bc.rank;
  for (int d = 0; d < APX_MAX_RANK; d++) {
    g.dims[d] = bc.dims[d];
    for (int k = 0; k < 3; k++) g.st[k][d] = bc.strides[k][d];
  }
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_SIZE_SWITCH(ctx, apx_dtype_size(outs[0].dtype), U, {
    where_kernel<U><<<grid, block, 0, apx_cu_stream(ctx)>>>(
        (const uint8_t *)ins[0].data, (const U *)ins[1].data, (const U *)ins[2].data,
        (U *)outs[0].data, n, g);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
