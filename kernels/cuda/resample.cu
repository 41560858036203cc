/* resample.cu - Resize (nearest, linear), ResizeGrad and Einsum on CUDA, the counterpart of
 * kernels/cpu/resample.c on fp32 / fp16 / bf16 tensors. The geometry, label plans and tensor
 * checks are kernels/resample_plan.h's (shared with the CPU and kernels/validate.c). Values
 * are summed in fp32 in the CPU reference's order: Resize one thread per output element over
 * its corners; ResizeGrad one thread per dX element over the output coordinates that read it
 * (row-major, no atomics); Einsum one thread per free-label tuple over the contracted labels
 * (a direct loop, correctness first: no tensor cores). */
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/resample_plan.h"

/* ---- Resize ------------------------------------------------------------------------------- */

template <typename T>
APX_CU_KERNEL(resize_kernel)(const T *x, T *y, int64_t n, ApxResizePlan p) {
  APX_CU_GRID_STRIDE(o, n) {
    int64_t q = o, base = 0, step[APX_MAX_RANK];
    double w[APX_MAX_RANK];
    int k = 0;
    for (int d = p.rank - 1; d >= 0; d--) {
      int64_t c = q % p.ax[d].out, i0, i1;
      double w1;
      q /= p.ax[d].out;
      apx_resize_src(&p, d, c, &i0, &i1, &w1);
      base += i0 * p.xs[d];
      if (i1 != i0) {
        step[k] = (i1 - i0) * p.xs[d];
        w[k++] = w1;
      }
    }
    float acc = 0.0f;
    for (int m = 0; m < (1 << k); m++) {
      double wt = 1.0;
      int64_t off = base;
      for (int j = 0; j < k; j++) {
        if (m >> j & 1) {
          wt *= w[j];
          off += step[j];
        } else {
          wt *= 1.0 - w[j];
        }
      }
      acc += (float)wt * ld(x[off]);
    }
    y[o] = st<T>(acc);
  }
}

template <typename T>
APX_CU_KERNEL(resize_grad_kernel)(const T *dy, T *dx, int64_t n, ApxResizePlan p) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t c[APX_MAX_RANK], lo[APX_MAX_RANK], hi[APX_MAX_RANK], o[APX_MAX_RANK], q = i;
    int empty = 0, r = p.rank;
    for (int d = r - 1; d >= 0; d--) {
      c[d] = q % p.ax[d].in;
      q /= p.ax[d].in;
      apx_resize_pre_range(&p, d, c[d], &lo[d], &hi[d]);
      empty |= lo[d] >= hi[d];
      o[d] = lo[d];
    }
    float acc = 0.0f;
    while (!empty) {
      double wt = 1.0;
      int64_t off = 0;
      for (int d = 0; d < r && wt != 0.0; d++) {
        wt *= apx_resize_weight(&p, d, o[d], c[d]);
        off += o[d] * p.ys[d];
      }
      if (wt != 0.0) acc += (float)wt * ld(dy[off]);
      int d = r - 1;
      for (; d >= 0; d--) {
        if (++o[d] < hi[d]) break;
        o[d] = lo[d];
      }
      if (d < 0) break;
    }
    dx[i] = st<T>(acc);
  }
}

template <typename T>
static void launch_resize(int grad, const T *in, T *out, int64_t n, const ApxResizePlan &p, cudaStream_t s,
                          int block, unsigned grid) {
  if (grad)
    resize_grad_kernel<T><<<grid, block, 0, s>>>(in, out, n, p);
  else
    resize_kernel<T><<<grid, block, 0, s>>>(in, out, n, p);
}

static ApxStatus run_resize(ApxCudaCtx *ctx, const void *attrs, const ApxTensor *in, const ApxTensor *out,
                            int grad) {
  ApxResizePlan p;
  const ApxTensor *x = grad ? out : in, *y = grad ? in : out;
  APX_TRY(apx_shape_status(apx_resize_plan((const ApxAttrResize *)attrs, x, y, &p, ctx->err, sizeof ctx->err)));
  int64_t n = apx_tensor_numel(out);
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_FLOAT_SWITCH(ctx, out->dtype, T, {
    launch_resize<T>(grad, (const T *)in->data, (T *)out->data, n, p, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_resize) { return run_resize(ctx, attrs, &ins[0], &outs[0], 0); }
APX_CUDA_ENTRY(apx_cuda_resize_grad) { return run_resize(ctx, attrs, &ins[0], &outs[0], 1); }

/* ---- Einsum ------------------------------------------------------------------------------- */

template <typename T>
APX_CU_KERNEL(einsum_kernel)(const T *a, const T *b, T *y, ApxEinsumPlan p) {
  APX_CU_GRID_STRIDE(f, p.n_free) {
    int64_t q = f, oa = 0, ob = 0, oy = 0;
    for (int j = p.nf - 1; j >= 0; j--) {
      int64_t v = q % p.fsize[j];
      q /= p.fsize[j];
      oa += v * p.fa[j];
      ob += v * p.fb[j];
      oy += v * p.fy[j];
    }
    int64_t cv[APX_EINSUM_MAX_LABELS];
    for (int j = 0; j < p.nc; j++) cv[j] = 0;
    float acc = 0.0f;
    for (int64_t t = 0; t < p.n_con; t++) {
      acc += ld(a[oa]) * (b ? ld(b[ob]) : 1.0f);
      for (int j = p.nc - 1; j >= 0; j--) {
        oa += p.ca[j];
        ob += p.cb[j];
        if (++cv[j] < p.csize[j]) break;
        oa -= cv[j] * p.ca[j];
        ob -= cv[j] * p.cb[j];
        cv[j] = 0;
      }
    }
    y[oy] = st<T>(acc);
  }
}

template <typename T>
static void launch_einsum(const T *a, const T *b, T *y, const ApxEinsumPlan &p, cudaStream_t s, int block,
                          unsigned grid) {
  einsum_kernel<T><<<grid, block, 0, s>>>(a, b, y, p);
}

APX_CUDA_ENTRY(apx_cuda_einsum) {
  ApxEinsumPlan p;
  const ApxTensor *b = n_in > 1 && ins[1].data ? &ins[1] : NULL;
  APX_TRY(apx_shape_status(
      apx_einsum_plan((const ApxAttrEinsum *)attrs, &ins[0], b, &outs[0], &p, ctx->err, sizeof ctx->err)));
  int64_t ny = apx_tensor_numel(&outs[0]);
  if (ny == 0) return APX_STATUS_OK;
  if (p.zero_first)
    APX_CUDA_TRY(ctx, cudaMemsetAsync(outs[0].data, 0, (size_t)ny * apx_dtype_size(outs[0].dtype),
                                      apx_cu_stream(ctx)));
  if (p.n_free == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, p.n_free, block);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    launch_einsum<T>((const T *)ins[0].data, b ? (const T *)b->data : (const T *)NULL, (T *)outs[0].data, p,
                     apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
