/* reduce.cu - ReduceSum, ReduceMean (fp32 / fp16 / bf16, sums in fp32) and ReduceSumTo (a
 * broadcast result summed down to an operand's shape, for gradients), over the
 * deterministic reductions of reduce.cuh. Also apx_cuda_reduce_sum, shared by other
 * families (PowGrad, FusedDenseGrad's bias gradient, GlobalAveragePool). */
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
