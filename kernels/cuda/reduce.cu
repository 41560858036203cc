/* reduce.cu - ReduceSum, ReduceMean (fp32 / fp16 / bf16, sums in fp32) and ReduceSumTo (a
 * broadcast result summed down to an operand's shape, for gradients), over the
 * deterministic reductions of reduce.cuh. Also apx_cuda_reduce_sum, shared by other
 * families (PowGrad, FusedDenseGrad's bias gradient, GlobalAveragePool). ReduceMax (a block per
 * output, NaN wins) and ReduceMaxGrad (ties share the gradient evenly, as the CPU). */
#include "kernels/cuda/reduce.cuh"

/* x element (o, r) of a reduction plan, loaded to fp32. */
template <typename T>
struct SumLoad {
  const T *x;
  ApxCuRedArgs g;
  __device__ double operator()(int64_t o, int64_t r) const {
    return (double)ld(x[apx_cu_goff(o, g.kd, g.ks, g.nk) + apx_cu_goff(r, g.rd, g.rs, g.nr)]);
  }
};

/* out[o] = the sum, divided by div as the CPU does it: APX_CU_MEAN_FP32 rounds the sum to
 * fp32 and divides in fp32 (ReduceMean), APX_CU_MEAN_FP64 divides in fp64 and rounds once
 * (GlobalAveragePool); stored in out's type. */
struct SumStore {
  void *out;
  int32_t dt;
  float div;
  int32_t mode;
  __device__ void operator()(int64_t o, double v) const {
    float r = mode == APX_CU_MEAN_FP64 ? (float)(v / (double)div)
              : mode == APX_CU_MEAN_FP32 ? (float)v / div : (float)v;
    st_dt(out, dt, o, r);
  }
};

template <typename T>
static ApxStatus launch_reduce_sum(ApxCudaCtx *ctx, const T *x, const ApxReducePlan *p, float div,
                                   int mode, void *out, ApxDType odt) {
  SumLoad<T> f = {x, apx_cu_red_args(p)};
  SumStore s = {out, (int32_t)odt, div, mode};
  return apx_cu_reduce(ctx, f, s, p->ny, p->empty ? 0 : p->nred, p->inner_reduced);
}

ApxStatus apx_cuda_reduce_sum(ApxCudaCtx *ctx, const void *x, ApxDType dt, const ApxReducePlan *p,
                              float div, int mode, void *out, ApxDType odt) {
  if (!apx_cu_is_float16(odt))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(odt));
  APX_CU_FLOAT_SWITCH(ctx, dt, T, return launch_reduce_sum<T>(ctx, (const T *)x, p, div, mode, out, odt));
  return APX_STATUS_OK;
}

static ApxStatus run_sum(ApxCudaCtx *ctx, const ApxTensor *x, uint32_t mask, ApxTensor *y, int mean) {
  ApxReducePlan p;
  apx_reduce_plan(&p, x->dims, x->rank, mask);
  if (y->dtype != x->dtype) /* y's element count: kernels/validate.h */
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: %s sum into %s",
                         apx_dtype_name(x->dtype), apx_dtype_name(y->dtype));
  /* ReduceMean divides the fp32 sum by the reduced count (0 elements: 0 / 0 = NaN, as the CPU) */
  float div = mean ? (float)p.nred : 1.0f;
  return apx_cuda_reduce_sum(ctx, x->data, x->dtype, &p, div, mean ? APX_CU_MEAN_FP32 : APX_CU_SUM,
                             y->data, y->dtype);
}

APX_CUDA_ENTRY(apx_cuda_reduce) {
  uint32_t mask = 0;
  if (apx_reduce_mask((const ApxAttrReduce *)attrs, ins[0].rank, &mask, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  return run_sum(ctx, &ins[0], mask, &outs[0], op == APX_OP_ReduceMean);
}

/* ReduceSumTo(X, Like?) -> Y: Y broadcasts to X (kernels/validate.h) */
APX_CUDA_ENTRY(apx_cuda_reduce_sum_to) {
  int64_t mask = apx_sum_to_mask(&ins[0], &outs[0]);
  return run_sum(ctx, &ins[0], (uint32_t)mask, &outs[0], 0);
}

/* ---- ReduceMax and its gradient ------------------------------------------------------- */

/* One block per output (grid-stride over outputs): the max of its group, NaN wins (the
 * CPU's rule; a max is exact in any order), -inf for an empty group. */
template <typename T>
APX_CU_KERNEL(reduce_max_kernel)(const T *x, T *y, int64_t ny, int64_t nred, ApxCuRedArgs g) {
  __shared__ float sh[33];
  for (int64_t o = blockIdx.x; o < ny; o += gridDim.x) {
    int64_t base = apx_cu_goff(o, g.kd, g.ks, g.nk);
    float m = -INFINITY;
    for (int64_t r = threadIdx.x; r < nred; r += blockDim.x) {
      float v = ld(x[base + apx_cu_goff(r, g.rd, g.rs, g.nr)]);
      m = (v > m || isnan(v)) ? v : m;
    }
    m = block_max(m, sh);
    if (threadIdx.x == 0) y[o] = st<T>(m);
  }
}

/* One block per group: count = elements equal to the max (exact in fp64), then
 * dX = (dY / count) * (X == Y) in fp32, as the CPU (PyTorch's amax rule). */
template <typename T>
APX_CU_KERNEL(reduce_max_grad_kernel)(const T *dy, const T *x, const T *y, T *dx, int64_t ny, int64_t nred,
                                       ApxCuRedArgs g) {
  __shared__ double sh[33];
  for (int64_t o = blockIdx.x; o < ny; o += gridDim.x) {
    int64_t base = apx_cu_goff(o, g.kd, g.ks, g.nk);
    float yo = ld(y[o]);
    double c = 0.0;
    for (int64_t r = threadIdx.x; r < nred; r += blockDim.x)
      c += ld(x[base + apx_cu_goff(r, g.rd, g.rs, g.nr)]) == yo ? 1.0 : 0.0;
    float q = ld(dy[o]) / (float)block_sum(c, sh);
    for (int64_t r = threadIdx.x; r < nred; r += blockDim.x) {
      int64_t i = base + apx_cu_goff(r, g.rd, g.rs, g.nr);
      dx[i] = st<T>(q * (ld(x[i]) == yo ? 1.0f : 0.0f));
    }
  }
}

template <typename T>
static void launch_reduce_max(const T *x, T *y, int64_t ny, int64_t nred, const ApxCuRedArgs &g, cudaStream_t s,
                              int block) {
  unsigned grid = (unsigned)(ny < 65535 * 16 ? ny : 65535 * 16);
  reduce_max_kernel<T><<<grid, block, 0, s>>>(x, y, ny, nred, g);
}

template <typename T>
static void launch_reduce_max_grad(const T *dy, const T *x, const T *y, T *dx, int64_t ny, int64_t nred,
                                   const ApxCuRedArgs &g, cudaStream_t s, int block) {
  unsigned grid = (unsigned)(ny < 65535 * 16 ? ny : 65535 * 16);
  reduce_max_grad_kernel<T><<<grid, block, 0, s>>>(dy, x, y, dx, ny, nred, g);
}

/* The reduction plan of ReduceMax / ReduceMaxGrad over x (attrs: ApxAttrReduce). */
static ApxStatus max_plan(ApxCudaCtx *ctx, const void *attrs, const ApxTensor *x, ApxReducePlan *p) {
  uint32_t mask = 0;
  if (apx_reduce_mask((const ApxAttrReduce *)attrs, x->rank, &mask, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  apx_reduce_plan(p, x->dims, x->rank, mask);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_reduce_max) {
  ApxReducePlan p;
  APX_TRY(max_plan(ctx, attrs, &ins[0], &p));
  if (apx_tensor_numel(&outs[0]) != p.ny || outs[0].dtype != ins[0].dtype)
    return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "output (%s, %lld elements) does not match the reduction "
                         "of the input (%s, %lld)", apx_dtype_name(outs[0].dtype),
                         (long long)apx_tensor_numel(&outs[0]), apx_dtype_name(ins[0].dtype), (long long)p.ny);
  if (p.ny == 0) return APX_STATUS_OK;
  ApxCuRedArgs g = apx_cu_red_args(&p);
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, ins[0].dtype, T, {
    launch_reduce_max<T>((const T *)ins[0].data, (T *)outs[0].data, p.ny, p.empty ? 0 : p.nred, g,
                         apx_cu_stream(ctx), block);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_reduce_max_grad) {
  ApxReducePlan p;
  APX_TRY(max_plan(ctx, attrs, &ins[1], &p));
  if (!apx_same_dims(&outs[0], &ins[1]) || apx_tensor_numel(&ins[0]) != p.ny || apx_tensor_numel(&ins[2]) != p.ny ||
      ins[0].dtype != outs[0].dtype || ins[1].dtype != outs[0].dtype || ins[2].dtype != outs[0].dtype)
    return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "dY and Y must have the reduced shape of X, dX X's shape, "
                         "all one type");
  cudaStream_t s = apx_cu_stream(ctx);
  if (p.empty) {
    APX_CUDA_TRY(ctx, cudaMemsetAsync(outs[0].data, 0, apx_tensor_bytes(&outs[0]), s));
    return APX_STATUS_OK;
  }
  ApxCuRedArgs g = apx_cu_red_args(&p);
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    launch_reduce_max_grad<T>((const T *)ins[0].data, (const T *)ins[1].data, (const T *)ins[2].data,
                              (T *)outs[0].data, p.ny, p.nred, g, s, block);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
