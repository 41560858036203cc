/* dropout.cu - Dropout(data, ratio?, training_mode?) -> output, mask? and DropoutGrad(dY,
 * mask) -> dX. The keep decision is kernels/philox.h's mapping, the same stream the CPU
 * draws (key: attrs seed when has_seed, else ctx->seed; counter: element block i / 4,
 * the step, attrs rng_stream): element i is kept when its uniform is >= ratio, and then
 * scaled by 1 / (1 - ratio) computed in fp32. One thread per block of four elements (one
 * Philox call). Inference mode: identity with an all-true mask. RandomUniformLike draws the same
 * stream's uniforms (philox.h). The step is read from device memory at ctx->step_dev when set
 * (the cuda backend writes it there with apx_cuda_step_write, so a captured CUDA Graph draws
 * each step's masks), else ctx->step by value: the same number either way, the same masks. */
#include "kernels/cuda/common.cuh"
#include "kernels/philox.h"

/* The step a kernel draws with: the device-side counter when there is one. */
static __device__ __forceinline__ int64_t draw_step(const long long *step_dev, int64_t step) {
  return step_dev ? (int64_t)*step_dev : step;
}

APX_CU_KERNEL(step_write_kernel)(long long *dst, long long step) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *dst = step;
}

ApxStatus apx_cuda_step_write(ApxCudaCtx *ctx, int64_t *dst, int64_t step) {
  step_write_kernel<<<1, 32, 0, apx_cu_stream(ctx)>>>((long long *)dst, (long long)step);
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

template <typename T>
APX_CU_KERNEL(dropout_kernel)(const T *x, T *y, uint8_t *mask, int64_t n, float ratio, float scale,
                               uint64_t seed, uint64_t stream, const long long *step_dev, int64_t step_val) {
  int64_t nb = (n + 3) / 4;
  int64_t step = draw_step(step_dev, step_val);
  APX_CU_GRID_STRIDE(b, nb) {
    ApxPhilox4 r = apx_philox_block(seed, stream, step, (uint64_t)b);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      int64_t i = 4 * b + k;
      if (i >= n) break;
      int keep = apx_philox_uniform(r.v[k]) >= ratio;
      y[i] = keep ? st<T>(ld(x[i]) * scale) : st<T>(0.0f);
      if (mask) mask[i] = (uint8_t)keep;
    }
  }
}

template <typename T>
APX_CU_KERNEL(dropout_grad_kernel)(const T *dy, const uint8_t *mask, T *dx, int64_t n, float scale) {
  APX_CU_GRID_STRIDE(i, n) dx[i] = mask[i] ? st<T>(ld(dy[i]) * scale) : st<T>(0.0f);
}

template <typename T>
static void launch_dropout(const T *x, T *y, uint8_t *mask, int64_t n, float ratio, float scale,
                           uint64_t seed, uint64_t rng_stream, const int64_t *step_dev, int64_t step,
                           cudaStream_t s, int block, unsigned grid) {
  dropout_kernel<T><<<grid, block, 0, s>>>(x, y, mask, n, ratio, scale, seed, rng_stream,
                                           (const long long *)step_dev, step);
}

/* Shapes, the bool mask and the ratio: kernels/validate.h */
APX_CUDA_ENTRY(apx_cuda_dropout) {
  const ApxAttrDropout *a = (const ApxAttrDropout *)attrs;
  int64_t n = apx_tensor_numel(&ins[0]);
  ApxDType dt = ins[0].dtype;
  uint8_t *mask = apx_cu_has(outs, n_out, 1) ? (uint8_t *)outs[1].data : NULL;
  if (outs[0].dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed types");
  if (!apx_cu_is_float16(dt))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(dt));
  if (n == 0) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  if (!a->training_mode) {
    if (outs[0].data != ins[0].data)
      APX_CUDA_TRY(ctx, cudaMemcpyAsync(outs[0].data, ins[0].data, (size_t)n * apx_dtype_size(dt),
                                        cudaMemcpyDeviceToDevice, s));
    if (mask) APX_CUDA_TRY(ctx, cudaMemsetAsync(mask, 1, (size_t)n, s));
    return APX_STATUS_OK;
  }
  uint64_t seed = a->has_seed ? (uint64_t)a->seed : ctx->seed;
  float scale = 1.0f / (1.0f - a->ratio); /* as the CPU's real_t scale (inf at ratio 1) */
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, (n + 3) / 4, block);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    launch_dropout<T>((const T *)ins[0].data, (T *)outs[0].data, mask, n, a->ratio, scale, seed,
                      (uint64_t)a->rng_stream, ctx->step_dev, ctx->step, s, block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_dropout_grad) {
  const ApxAttrDropout *a = (const ApxAttrDropout *)attrs;
  int64_t n = apx_tensor_numel(&ins[0]);
  if (outs[0].dtype != ins[0].dtype)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed types");
  if (!apx_cu_is_float16(outs[0].dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(outs[0].dtype));
  if (n == 0) return APX_STATUS_OK;
  /* inference mode: the forward was the identity (scale 1, the mask is all true) */
  float scale = a->training_mode && a->ratio < 1.0f ? 1.0f / (1.0f - a->ratio)
                : a->training_mode ? 0.0f : 1.0f;
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    dropout_grad_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)ins[0].data, (const uint8_t *)ins[1].data, (T *)outs[0].data, n, scale);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* RandomUniformLike(input) -> output: element i = apx_random_uniform (philox.h) in fp32,
 * rounded once to the output type (the CPU's values); the input is never read. */
template <typename T>
APX_CU_KERNEL(random_uniform_kernel)(T *y, int64_t n, float low, float high, uint64_t seed, uint64_t stream,
                                      const long long *step_dev, int64_t step_val) {
  int64_t step = draw_step(step_dev, step_val);
  APX_CU_GRID_STRIDE(i, n) y[i] = st<T>(apx_random_uniform_f32(seed, stream, step, (uint64_t)i, low, high));
}

template <typename T>
static void launch_random_uniform(T *y, int64_t n, float low, float high, uint64_t seed, uint64_t stream,
                                  const int64_t *step_dev, int64_t step, cudaStream_t s, int block,
                                  unsigned grid) {
  random_uniform_kernel<T><<<grid, block, 0, s>>>(y, n, low, high, seed, stream, (const long long *)step_dev,
                                                  step);
}

APX_CUDA_ENTRY(apx_cuda_random_uniform_like) {
  const ApxAttrRandomUniform *a = (const ApxAttrRandomUniform *)attrs;
  int64_t n = apx_tensor_numel(&outs[0]); /* the input's element count: kernels/validate.c */
  if (n == 0) return APX_STATUS_OK;
  uint64_t key = apx_random_key(a->has_seed, a->seed, ctx->seed);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    launch_random_uniform<T>((T *)outs[0].data, n, a->low, a->high, key, (uint64_t)a->rng_stream, ctx->step_dev,
                             ctx->step, apx_cu_stream(ctx), block, grid);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
