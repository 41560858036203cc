/* reduce.cuh - deterministic sums: out[o] = sum over r < nred of f(o, r), accumulated in
 * fp64 like the CPU reference's double lanes (kernels/cpu/sum_real.inc): terms are formed in
 * fp64 from the fp32 values, so a sum is exact to fp32's eyes whatever the order, and the
 * rounding to fp32 (by the store) agrees with the CPU's in nearly every case.
 *
 * Two layouts, chosen by where the data is contiguous:
 *   ROW  consecutive r are contiguous (the innermost group is reduced): one block per
 *        (output, chunk of r), threads stride over the chunk, a fixed block tree sums them;
 *   COL  consecutive o are contiguous (the innermost group is kept): one thread per output
 *        (per chunk of r) sums its chunk in r order; neighbouring threads read neighbouring
 *        elements (coalesced).
 * Large reductions with few outputs are cut into chunks of r whose partial sums go to a
 * temporary and are added in chunk order by a second kernel. Chunking depends only on
 * (ny, nred) (not on the device or the block size for COL), so a result is the same on every
 * run. f: `__device__ double operator()(int64_t o, int64_t r) const`;
 * s: `__device__ void operator()(int64_t o, double sum) const` stores output o. */
#ifndef APX_CUDA_REDUCE_CUH
#define APX_CUDA_REDUCE_CUH

#include "kernels/cuda/common.cuh"

#define APX_CU_REDUCE_TARGET_TASKS 1024 /* enough independent tasks to fill a large GPU */

template <class F, class S>
APX_CU_KERNEL(apx_cu_reduce_row_kernel)(F f, S s, int64_t ny, int64_t nred, int64_t chunk,
                                         int64_t nch, double *partial) {
  __shared__ double sh[33];
  for (int64_t task = blockIdx.x; task < ny * nch; task += gridDim.x) {
    int64_t o = task / nch, c = task % nch;
    int64_t r0 = c * chunk, r1 = r0 + chunk < nred ? r0 + chunk : nred;
    double acc = 0.0;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) acc += f(o, r);
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) {
      if (partial)
        partial[o * nch + c] = acc;
      else
        s(o, acc);
    }
  }
}

template <class F, class S>
APX_CU_KERNEL(apx_cu_reduce_col_kernel)(F f, S s, int64_t ny, int64_t nred, int64_t chunk,
                                         double *partial) {
  int64_t c = blockIdx.y;
  int64_t r0 = c * chunk, r1 = r0 + chunk < nred ? r0 + chunk : nred;
  APX_CU_GRID_STRIDE(o, ny) {
    double acc = 0.0;
    for (int64_t r = r0; r < r1; r++) acc += f(o, r);
    if (partial)
      partial[c * ny + o] = acc;
    else
      s(o, acc);
  }
}

template <class S>
APX_CU_KERNEL(apx_cu_reduce_finish_kernel)(S s, const double *partial, int64_t ny, int64_t nch,
                                            int row_layout) {
  APX_CU_GRID_STRIDE(o, ny) {
    double acc = 0.0;
    for (int64_t c = 0; c < nch; c++) acc += row_layout ? partial[o * nch + c] : partial[c * ny + o];
    s(o, acc);
  }
}

/* Chunks of r for a reduction of ny outputs over nred (shape-only, see above). */
static inline int64_t apx_cu_reduce_chunks(int64_t ny, int64_t nred, int row_layout) {
  if (nred <= 0 || ny <= 0) return 1;
  int64_t tasks = row_layout ? ny : (ny + 255) / 256;
  int64_t want = (APX_CU_REDUCE_TARGET_TASKS + tasks - 1) / tasks;
  int64_t most = (nred + (row_layout ? 2047 : 63)) / (row_layout ? 2048 : 64);
  if (want > most) want = most;
  if (want > 1024) want = 1024;
  return want < 1 ? 1 : want;
}

template <class F, class S>
static ApxStatus apx_cu_reduce(ApxCudaCtx *ctx, F f, S s, int64_t ny, int64_t nred,
                               int row_layout) {
  if (ny <= 0) return APX_STATUS_OK;
  cudaStream_t stream = apx_cu_stream(ctx);
  int64_t nch = apx_cu_reduce_chunks(ny, nred, row_layout);
  int64_t chunk = nred > 0 ? (nred + nch - 1) / nch : 0;
  if (chunk > 0) nch = (nred + chunk - 1) / chunk;
  double *partial = NULL;
  if (nch > 1) APX_TRY(apx_cuda_tmp(ctx, (size_t)(ny * nch) * sizeof(double), (void **)&partial));
  if (row_layout) {
    int block = apx_cu_block(ctx, 256);
    int64_t tasks = ny * nch;
    unsigned grid = (unsigned)(tasks < 65535 * 16 ? tasks : 65535 * 16);
    apx_cu_reduce_row_kernel<F, S><<<grid, block, 0, stream>>>(f, s, ny, nred, chunk, nch, partial);
  } else {
    int block = apx_cu_block(ctx, 256);
    dim3 grid(apx_cu_grid(ctx, ny, block), (unsigned)nch);
    apx_cu_reduce_col_kernel<F, S><<<grid, block, 0, stream>>>(f, s, ny, nred, chunk, partial);
  }
  APX_CUDA_LAUNCHED(ctx);
  if (partial) {
    int block = apx_cu_block(ctx, 256);
    apx_cu_reduce_finish_kernel<S><<<apx_cu_grid(ctx, ny, block), block, 0, stream>>>(
        s, partial, ny, nch, row_layout);
    APX_CUDA_LAUNCHED(ctx);
  }
  return APX_STATUS_OK;
}

/* Group offsets of a reduction plan (ApxReducePlan), as kernel arguments. */
struct ApxCuRedArgs {
  int32_t nk, nr;
  int64_t kd[APX_MAX_RANK], ks[APX_MAX_RANK], rd[APX_MAX_RANK], rs[APX_MAX_RANK];
};

static inline ApxCuRedArgs apx_cu_red_args(const ApxReducePlan *p) {
  ApxCuRedArgs a;
  a.nk = p->nk;
  a.nr = p->nr;
  for (int i = 0; i < APX_MAX_RANK; i++) {
    a.kd[i] = p->kd[i];
    a.ks[i] = p->ks[i];
    a.rd[i] = p->rd[i];
    a.rs[i] = p->rs[i];
  }
  return a;
}

static __device__ __forceinline__ int64_t apx_cu_goff(int64_t i, const int64_t *d, const int64_t *s,
                                                      int n) {
  if (n == 1) return i * s[0];
  int64_t off = 0;
  for (int g = n - 1; g >= 0; g--) {
    off += (i % d[g]) * s[g];
    i /= d[g];
  }
  return off;
}

#endif
