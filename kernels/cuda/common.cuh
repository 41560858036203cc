/* common.cuh - what every CUDA kernel file shares (not part of the public API):
 *   errors      APX_CUDA_TRY(ctx, call): a CUDA runtime call checked in a do { } while (0)
 *               that records the call text, file and line (STYLE.md 7); apx_cuda_fail
 *   storage     float / __half / __nv_bfloat16 loads to fp32 and RNE stores (ld / st), a
 *               runtime-dtype variant for small side tensors (ld_dt / st_dt), the
 *               APX_CU_FLOAT_SWITCH dispatch over the three float types and
 *               APX_CU_SIZE_SWITCH over element sizes
 *   launches    block size (ctx->block override), grid sizing for grid-stride loops
 *   temporaries apx_cuda_tmp (stream-ordered, freed after the op by dispatch.cu)
 *   reductions  warp / block sums; deterministic two-pass reductions (reduce.cuh)
 * Kernel files follow three layers (STYLE.md 11, ggml scale.cu): a __global__ kernel, a
 * launcher taking a cudaStream_t, an entry taking the op's tensors and attributes. */
#ifndef APX_CUDA_COMMON_CUH
#define APX_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/shape.h"
#include "kernels/ew_math.h"
#include "kernels/half.h"

/* ---- errors --------------------------------------------------------------------------- */

ApxStatus apx_cuda_fail(ApxCudaCtx *ctx, ApxStatus st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "<call>: cudaErrorX: <text> (file:line)", APX_STATUS_RUNTIME (OOM for allocation failures). */
ApxStatus apx_cuda_fail_call(ApxCudaCtx *ctx, cudaError_t e, const char *call, const char *file,
                             int line);

#define APX_CUDA_TRY(ctx, call)                                                   \
  do {                                                                            \
    cudaError_t apx_e_ = (call);                                                  \
    if (apx_e_ != cudaSuccess)                                                    \
      return apx_cuda_fail_call((ctx), apx_e_, #call, __FILE__, __LINE__);        \
  } while (0)

/* After a <<<>>> launch: configuration errors surface here. */
#define APX_CUDA_LAUNCHED(ctx) APX_CUDA_TRY(ctx, cudaGetLastError())

/* Propagates a non-OK ApxStatus. */
#define APX_TRY(expr)                 \
  do {                                \
    ApxStatus apx_s_ = (expr);        \
    if (apx_s_ != APX_STATUS_OK) return apx_s_; \
  } while (0)

static inline cudaStream_t apx_cu_stream(const ApxCudaCtx *ctx) {
  return (cudaStream_t)ctx->stream;
}

/* ---- storage types -------------------------------------------------------------------- */

static __device__ __forceinline__ float ld(float v) { return v; }
static __device__ __forceinline__ float ld(__half v) { return __half2float(v); }
static __device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/* Runtime-dtype access for small side tensors (scales, statistics, scalars): F32/F16/BF16
 * as floats, F64 narrowed to float, integers converted. */
static __device__ __forceinline__ float ld_dt(const void *p, int dt, int64_t i) {
  switch (dt) {
    case APX_DT_F16: return __half2float(((const __half *)p)[i]);
    case APX_DT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case APX_DT_F64: return (float)((const double *)p)[i];
    case APX_DT_I64: return (float)((const long long *)p)[i];
    case APX_DT_I32: return (float)((const int *)p)[i];
    default: return ((const float *)p)[i];
  }
}

static __device__ __forceinline__ void st_dt(void *p, int dt, int64_t i, float v) {
  switch (dt) {
    case APX_DT_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case APX_DT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case APX_DT_F64: ((double *)p)[i] = (double)v; break;
    default: ((float *)p)[i] = v; break;
  }
}

/* Integer element i of an index tensor (I64 or I32). */
static __device__ __forceinline__ int64_t ld_index(const void *p, int dt, int64_t i) {
  return dt == APX_DT_I32 ? (int64_t)((const int *)p)[i] : (int64_t)((const long long *)p)[i];
}

static inline int apx_cu_is_float16(ApxDType dt) {
  return dt == APX_DT_F32 || dt == APX_DT_F16 || dt == APX_DT_BF16;
}

/* Runs the statements with T = the storage type of dt (F32, F16, BF16); other types fail
 * with UNSUPPORTED. */
#define APX_CU_FLOAT_SWITCH(ctx, dt, T, ...)                                              \
  do {                                                                                    \
    switch (dt) {                                                                         \
      case APX_DT_F32: {                                                                  \
        typedef float T;                                                                  \
        __VA_ARGS__;                                                                      \
        break;                                                                            \
      }                                                                                   \
      case APX_DT_F16: {                                                                  \
        typedef __half T;                                                                 \
        __VA_ARGS__;                                                                      \
        break;                                                                            \
      }                                                                                   \
      case APX_DT_BF16: {                                                                 \
        typedef __nv_bfloat16 T;                                                          \
        __VA_ARGS__;                                                                      \
        break;                                                                            \
      }                                                                                   \
      default:                                                                            \
        return apx_cuda_fail((ctx), APX_STATUS_UNSUPPORTED,                               \
                             "not supported yet on cuda: type %s", apx_dtype_name(dt));   \
    }                                                                                     \
  } while (0)

/* Runs the statements with U = an unsigned type of `size` bytes (1, 2, 4, 8): data movement
 * on any dtype; other sizes fail with UNSUPPORTED. */
#define APX_CU_SIZE_SWITCH(ctx, size, U, ...)                                             \
  do {                                                                                    \
    switch (size) {                                                                       \
      case 1: { typedef uint8_t U; __VA_ARGS__; break; }                                  \
      case 2: { typedef uint16_t U; __VA_ARGS__; break; }                                 \
      case 4: { typedef uint32_t U; __VA_ARGS__; break; }                                 \
      case 8: { typedef unsigned long long U; __VA_ARGS__; break; }                       \
      default:                                                                            \
        return apx_cuda_fail((ctx), APX_STATUS_UNSUPPORTED,                               \
                             "not supported yet on cuda: %zu-byte elements", (size_t)(size)); \
    }                                                                                     \
  } while (0)

/* ---- launches ------------------------------------------------------------------------- */

/* Every kernel is declared APX_CU_KERNEL(name): __launch_bounds__ from its entry in the
 * launch table (launch.h), so ptxas keeps its registers within what that block size allows. */
#define APX_CU_MAXB_ENTRY_(k, b) APX_CU_MAXB_##k = (b),
enum { APX_CU_KERNELS(APX_CU_MAXB_ENTRY_) };
#define APX_CU_KERNEL(k) __global__ void __launch_bounds__(APX_CU_MAXB_##k) k

/* Threads per block: ctx->block when set (rounded to a warp multiple in
 * [32, APX_CU_BLOCK_MAX]), else dflt. Kernels launched with it have APX_CU_BLOCK_MAX in the
 * launch table. */
static inline int apx_cu_block(const ApxCudaCtx *ctx, int dflt) {
  int b = ctx->block > 0 ? ctx->block : dflt;
  b = (b + 31) / 32 * 32;
  return b < 32 ? 32 : b > APX_CU_BLOCK_MAX ? APX_CU_BLOCK_MAX : b;
}

/* Blocks for a grid-stride loop over n items: enough to fill the device, never more than
 * the items need. */
static inline unsigned apx_cu_grid(const ApxCudaCtx *ctx, int64_t n, int block) {
  int64_t need = (n + block - 1) / block;
  int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 80) * 32;
  if (need > cap) need = cap;
  return (unsigned)(need < 1 ? 1 : need);
}

#define APX_CU_GRID_STRIDE(i, n)                                                    \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);         \
       i += (int64_t)gridDim.x * blockDim.x)

/* ---- temporaries ---------------------------------------------------------------------- */

/* Stream-ordered device scratch of `bytes`, released after the op. */
ApxStatus apx_cuda_tmp(ApxCudaCtx *ctx, size_t bytes, void **out);
/* Releases the op's temporaries (dispatch.cu, after every op). */
void apx_cuda_tmp_release(ApxCudaCtx *ctx);
/* Frees matmul.cu's descriptor and heuristic cache (apx_cuda_ctx_free). */
void apx_cuda_lt_cache_free(ApxCudaCtx *ctx);

/* ---- device-side errors --------------------------------------------------------------- */

static __device__ __forceinline__ void apx_cu_dev_fail(ApxCudaDevErr *e, int code, int op,
                                                        int64_t seq, int64_t a, int64_t b,
                                                        int64_t c) {
  if (!e) return;
  if (atomicCAS(&e->code, 0, -1) == 0) { /* claim, fill, publish */
    e->op = op;
    e->seq = seq;
    e->a = a;
    e->b = b;
    e->c = c;
    __threadfence();
    atomicExch(&e->code, code);
  }
}

/* ---- warp / block sums ---------------------------------------------------------------- */

static __device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = (w > v || isnan(w)) ? w : v;
  }
  return v;
}

/* Sum over the block (any multiple of 32 threads); every thread gets the result. `sh` holds
 * at least 33 values of T. Fixed tree order: deterministic for a given block size. */
template <typename T>
static __device__ __forceinline__ T block_sum(T v, T *sh) {
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads(); /* sh may hold a previous call's values */
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  T r = lane < nw ? sh[lane] : (T)0;
  if (wid == 0) {
    r = warp_sum(r);
    if (lane == 0) sh[32] = r;
  }
  __syncthreads();
  return sh[32];
}

/* Max over the block, NaN wins (as the CPU's softmax max). */
static __device__ __forceinline__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  float r = lane < nw ? sh[lane] : -INFINITY;
  if (wid == 0) {
    r = warp_max(r);
    if (lane == 0) sh[32] = r;
  }
  __syncthreads();
  return sh[32];
}

/* Present (data != NULL) input/output i. Required ones and every shape are checked before an
 * entry runs (kernels/validate.h, dispatch.cu). */
static inline int apx_cu_has(const ApxTensor *t, int n, int i) { return i < n && t[i].data; }

/* ---- kernel families (entries; each file documents its ops) ----------------------------- */

#define APX_CUDA_ENTRY(name)                                                                \
  ApxStatus name(ApxCudaCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins, int n_in, \
                 ApxTensor *outs, int n_out)

APX_CUDA_ENTRY(apx_cuda_cast);          /* convert.cu */
APX_CUDA_ENTRY(apx_cuda_unary);         /* elementwise.cu */
APX_CUDA_ENTRY(apx_cuda_unary_grad);
APX_CUDA_ENTRY(apx_cuda_binary);
APX_CUDA_ENTRY(apx_cuda_sum);
APX_CUDA_ENTRY(apx_cuda_pow_grad);
APX_CUDA_ENTRY(apx_cuda_reduce);        /* reduce.cu */
APX_CUDA_ENTRY(apx_cuda_reduce_sum_to);
APX_CUDA_ENTRY(apx_cuda_softmax);       /* softmax.cu */
APX_CUDA_ENTRY(apx_cuda_softmax_grad);
APX_CUDA_ENTRY(apx_cuda_fused_softmax);
APX_CUDA_ENTRY(apx_cuda_fused_softmax_grad);
APX_CUDA_ENTRY(apx_cuda_layer_norm);    /* norm.cu */
APX_CUDA_ENTRY(apx_cuda_layer_norm_grad);
APX_CUDA_ENTRY(apx_cuda_batch_norm);
APX_CUDA_ENTRY(apx_cuda_batch_norm_grad);
APX_CUDA_ENTRY(apx_cuda_loss);          /* loss.cu */
APX_CUDA_ENTRY(apx_cuda_loss_grad);
APX_CUDA_ENTRY(apx_cuda_dropout);       /* dropout.cu */
APX_CUDA_ENTRY(apx_cuda_dropout_grad);
APX_CUDA_ENTRY(apx_cuda_copy);          /* shape_ops.cu */
APX_CUDA_ENTRY(apx_cuda_transpose);
APX_CUDA_ENTRY(apx_cuda_concat);
APX_CUDA_ENTRY(apx_cuda_split);
APX_CUDA_ENTRY(apx_cuda_slice);
APX_CUDA_ENTRY(apx_cuda_slice_grad);
APX_CUDA_ENTRY(apx_cuda_gather);
APX_CUDA_ENTRY(apx_cuda_gather_grad);
APX_CUDA_ENTRY(apx_cuda_expand);
APX_CUDA_ENTRY(apx_cuda_where);
APX_CUDA_ENTRY(apx_cuda_loss_scale_seed); /* training.cu */
APX_CUDA_ENTRY(apx_cuda_assign_state);
APX_CUDA_ENTRY(apx_cuda_unscale_check);
APX_CUDA_ENTRY(apx_cuda_optimizer_step);
APX_CUDA_ENTRY(apx_cuda_gemm);          /* matmul.cu (cuBLASLt) */
APX_CUDA_ENTRY(apx_cuda_matmul);
APX_CUDA_ENTRY(apx_cuda_fused_dense);
APX_CUDA_ENTRY(apx_cuda_fused_dense_grad);
APX_CUDA_ENTRY(apx_cuda_conv);          /* conv.cu (cuDNN) */
APX_CUDA_ENTRY(apx_cuda_conv_grad);     /* ConvGrad, ConvBiasReluGrad, ConvTransposeGrad */
APX_CUDA_ENTRY(apx_cuda_conv_transpose);
APX_CUDA_ENTRY(apx_cuda_pool);          /* pool.cu */
APX_CUDA_ENTRY(apx_cuda_pool_grad);
APX_CUDA_ENTRY(apx_cuda_global_avg_pool);
APX_CUDA_ENTRY(apx_cuda_global_avg_pool_grad);
APX_CUDA_ENTRY(apx_cuda_compare);       /* compare.cu: Less, LessOrEqual, Greater, GreaterOrEqual */
APX_CUDA_ENTRY(apx_cuda_logic);         /* Not, And, Or */
APX_CUDA_ENTRY(apx_cuda_isclass);       /* IsNaN, IsInf */
APX_CUDA_ENTRY(apx_cuda_minmax);        /* Min, Max */
APX_CUDA_ENTRY(apx_cuda_clip);
APX_CUDA_ENTRY(apx_cuda_mod);
APX_CUDA_ENTRY(apx_cuda_clip_grad);
APX_CUDA_ENTRY(apx_cuda_minmax_grad);
/* v1.1 data movement, indexing and reductions: indexing.cu, reduce.cu, dropout.cu */
APX_CUDA_ENTRY(apx_cuda_pad);
APX_CUDA_ENTRY(apx_cuda_pad_grad);
APX_CUDA_ENTRY(apx_cuda_tile);
APX_CUDA_ENTRY(apx_cuda_trilu);
APX_CUDA_ENTRY(apx_cuda_gather_elements);
APX_CUDA_ENTRY(apx_cuda_gather_elements_grad);
APX_CUDA_ENTRY(apx_cuda_gather_nd);
APX_CUDA_ENTRY(apx_cuda_gather_nd_grad);
APX_CUDA_ENTRY(apx_cuda_reduce_max);
APX_CUDA_ENTRY(apx_cuda_reduce_max_grad);
APX_CUDA_ENTRY(apx_cuda_random_uniform_like);
/* v1.1 resampling and contraction: resample.cu */
APX_CUDA_ENTRY(apx_cuda_resize);
APX_CUDA_ENTRY(apx_cuda_resize_grad);
APX_CUDA_ENTRY(apx_cuda_einsum);

/* Shared between families. */
/* dst (n elements of dtype dt) = src converted from sdt; n_src == 1 fills (AssignState). */
ApxStatus apx_cuda_convert(ApxCudaCtx *ctx, const void *src, ApxDType sdt, int64_t n_src,
                           void *dst, ApxDType ddt, int64_t n);
/* out (reduced shape of plan) = sum of x (dtype dt) over the plan's groups, accumulated in
 * fp64 (reduce.cuh), divided by div per mode (APX_CU_SUM: not; APX_CU_MEAN_FP32: the fp32 sum
 * by div in fp32, as ReduceMean; APX_CU_MEAN_FP64: in fp64, as GlobalAveragePool), stored in
 * odt (reduce.cu). */
enum { APX_CU_SUM = 0, APX_CU_MEAN_FP32 = 1, APX_CU_MEAN_FP64 = 2 };
ApxStatus apx_cuda_reduce_sum(ApxCudaCtx *ctx, const void *x, ApxDType dt, const ApxReducePlan *p,
                              float div, int mode, void *out, ApxDType odt);
/* Broadcast copy src -> dst of the same element size (Expand, Gemm's C). */
ApxStatus apx_cuda_broadcast_copy(ApxCudaCtx *ctx, const ApxTensor *src, ApxTensor *dst);
/* g = dY * (Y > 0) into a temporary of dY's type (fused Relu gradients). */
ApxStatus apx_cuda_relu_mask(ApxCudaCtx *ctx, const ApxTensor *dy, const ApxTensor *y, void **g);

#endif
