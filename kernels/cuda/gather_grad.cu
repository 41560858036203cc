/* gather_grad.cu - GatherGrad(dY, Indices) -> dData: zeros of the forward data's shape, then
 * dData[o, idx[j], k] += dY[o, j, k] for every j. Deterministic without atomics on floats:
 * the indices (normalized to [0, A)) are radix-sorted stably with their positions j (CUB),
 * so each data row sums its contributions in increasing j, the CPU reference's order
 * (gather_real.inc) - an embedding gradient is bit-reproducible and matches the CPU sum order.
 * An index outside [-A, A) is a device-side error; it contributes nothing. */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"

/* keys[j] = normalized index (A for an out-of-range one: sorted last, ignored), vals[j] = j */
APX_CU_KERNEL(gather_keys_kernel)(const void *idx, int idt, uint32_t *keys, int32_t *vals,
                                   int64_t ni, int64_t A, int op, int64_t seq, ApxCudaDevErr *err) {
  APX_CU_GRID_STRIDE(j, ni) {
    int64_t v = ld_index(idx, idt, j);
    if (v < -A || v >= A) {
      apx_cu_dev_fail(err, APX_CUDA_DERR_INDEX, op, seq, v, j, A);
      v = A;
    } else if (v < 0) {
      v += A;
    }
    keys[j] = (uint32_t)v;
    vals[j] = (int32_t)j;
  }
}

/* One thread per (sorted position p, o, k): the first position of each run of equal keys
 * sums the run's dY rows in order into dData[o, key, k]. */
template <typename T>
APX_CU_KERNEL(gather_grad_sum_kernel)(const T *dy, const uint32_t *keys, const int32_t *pos, T *dd,
                                       int64_t outer, int64_t A, int64_t inner, int64_t ni) {
  int64_t n = ni * outer * inner;
  APX_CU_GRID_STRIDE(i, n) {
    int64_t k = i % inner, t = i / inner, o = t % outer, p = t / outer;
    uint32_t key = keys[p];
    if (key >= (uint32_t)A || (p > 0 && keys[p - 1] == key)) continue;
    float acc = 0.0f;
    for (int64_t q = p; q < ni && keys[q] == key; q++) acc += ld(dy[(o * ni + pos[q]) * inner + k]);
    dd[(o * A + key) * inner + k] = st<T>(acc);
  }
}

template <typename T>
static void launch_gather_grad_sum(const T *dy, const uint32_t *keys, const int32_t *pos, T *dd,
                                   int64_t outer, int64_t A, int64_t inner, int64_t ni,
                                   cudaStream_t s, int block, unsigned grid) {
  gather_grad_sum_kernel<T><<<grid, block, 0, s>>>(dy, keys, pos, dd, outer, A, inner, ni);
}

APX_CUDA_ENTRY(apx_cuda_gather_grad) {
  if (ins[0].dtype != outs[0].dtype)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: dY and dData of types %s and %s",
                         apx_dtype_name(ins[0].dtype), apx_dtype_name(outs[0].dtype));
  int64_t outer = 0, A = 0, inner = 0;
  if (apx_cu_gather_shape(((const ApxAttrAxis *)attrs)->axis, &outs[0], &ins[1], &ins[0], &outer,
                          &A, &inner, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  int64_t ni = apx_tensor_numel(&ins[1]);
  if (A >= 0x7fffffff || ni >= 0x7fffffff)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: more than 2^31 rows");
  if (!apx_cu_is_float16(outs[0].dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(outs[0].dtype));
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CUDA_TRY(ctx, cudaMemsetAsync(outs[0].data, 0, apx_tensor_bytes(&outs[0]), s));
  if (ni == 0 || outer * inner == 0) return APX_STATUS_OK;
  uint32_t *keys = NULL;
  int32_t *vals = NULL;
  APX_TRY(apx_cuda_tmp(ctx, (size_t)ni * 2 * (sizeof(uint32_t) + sizeof(int32_t)), (void **)&keys));
  uint32_t *skeys = keys + ni;
  vals = (int32_t *)(skeys + ni);
  int32_t *svals = vals + ni;
  int block = apx_cu_block(ctx, 256);
  gather_keys_kernel<<<apx_cu_grid(ctx, ni, block), block, 0, s>>>(
      ins[1].data, ins[1].dtype, keys, vals, ni, A, (int)op, ctx->seq, ctx->dev_err);
  APX_CUDA_LAUNCHED(ctx);
  int bits = 1;
  while (bits < 32 && ((uint64_t)1 << bits) <= (uint64_t)A) bits++;
  size_t tmp_bytes = 0;
  APX_CUDA_TRY(ctx, cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, keys, skeys, vals, svals,
                                                    (int)ni, 0, bits, s));
  void *tmp = NULL;
  APX_TRY(apx_cuda_tmp(ctx, tmp_bytes, &tmp));
  APX_CUDA_TRY(ctx, cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, keys, skeys, vals, svals,
                                                    (int)ni, 0, bits, s));
  int64_t n = ni * outer * inner;
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    launch_gather_grad_sum<T>((const T *)ins[0].data, skeys, svals, (T *)outs[0].data, outer, A,
                              inner, ni, s, block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
