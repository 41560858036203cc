/* cuda_kernels.h - the CUDA kernels' entry point, the counterpart of kernels/cpu/cpu_kernels.h.
 *
 * apx_cuda_run(ctx, op, attrs, ins, n_in, outs, n_out) queues one op on ctx->stream. Tensors
 * are device views (data: device addresses) with the shapes the compiler inferred; attrs is
 * the op's attrs.h struct (host memory). The call returns once the work is queued: it never
 * synchronizes the stream. Shapes and attributes are checked on the host before anything is
 * queued (APX_STATUS_BAD_INPUT / APX_STATUS_UNSUPPORTED with "<Op>: <what>" in ctx->err).
 *
 * Numerics (DESIGN.md 12, the CPU reference's): fp16/bf16 tensors are loaded to fp32, math is
 * fp32, every output is rounded to nearest-even once on store (__float2half_rn /
 * __float2bfloat16_rn, bit-identical to kernels/half.h); elementwise formulas come from
 * kernels/ew_math.h and Dropout's stream from kernels/philox.h, the same source the CPU
 * compiles. Matrix products go through cuBLASLt with CUBLAS_COMPUTE_32F (fp32 accumulation),
 * convolutions through cuDNN (fp32 accumulation). Reductions are deterministic: fixed
 * partial sums combined in a fixed order (results do not depend on the run, but they are not
 * the CPU's sequential order, so they agree with it within rounding). fp64 runs on the CPU
 * only (gradient checks); apx_cuda_supports says no for fp64 math.
 *
 * Errors found by kernels on the device (a label or gather index out of range) cannot be
 * returned by the launch: the first one is recorded in ctx->dev_err (device memory) with the
 * launch's ctx->seq; the caller reads it after synchronizing (apx_cuda_dev_error).
 *
 * Temporaries (partial sums, fp32 intermediates, workspaces) come from the stream-ordered
 * allocator (cudaMallocAsync / cudaFreeAsync on ctx->stream), released after each op. */
#ifndef APX_CUDA_KERNELS_H
#define APX_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_CUDA_MAX_TMP 16

/* A device-side error record (first error wins). */
typedef struct ApxCudaDevErr {
  int32_t code;  /* ApxCudaDevErrCode; 0: none */
  int32_t op;    /* ApxOp */
  int64_t seq;   /* ctx->seq of the launch */
  int64_t a, b, c;
} ApxCudaDevErr;

typedef enum ApxCudaDevErrCode {
  APX_CUDA_DERR_NONE = 0,
  APX_CUDA_DERR_LABEL = 1, /* label a at line b outside [0, c) */
  APX_CUDA_DERR_INDEX = 2, /* index a at position b outside [-c, c) */
  APX_CUDA_DERR_DIV_ZERO = 3, /* integer Mod: divisor element a is 0 */
} ApxCudaDevErrCode;

typedef struct ApxCudaCtx {
  void *stream;          /* cudaStream_t the work is queued on (NULL: the legacy stream) */
  int32_t device;        /* device ordinal (set current by the caller) */
  int32_t sm_count;      /* multiprocessors (grid sizing) */
  int32_t block;         /* threads per block of the elementwise / row kernels; 0: each
                          * kernel's default. The kernel lab sweeps it (STYLE.md 11). */
  int32_t no_epilogue;   /* 1: FusedDense never uses cuBLASLt epilogues (the lab compares
                          * both paths) */
  uint64_t seed;         /* Dropout's Philox key (attrs seed wins when set) */
  int64_t step;          /* training step: part of the Philox counter ... */
  const int64_t *step_dev; /* ... read by the kernels from this device address instead when
                          * set (the cuda backend: written by apx_cuda_step_write before the
                          * launches, so a captured CUDA Graph replays with each step's value);
                          * NULL: ctx->step by value (the kernel lab, tests) */
  int64_t seq;           /* launch number, recorded with device-side errors */
  void *lt;              /* cublasLtHandle_t */
  void *lt_ws;           /* cuBLASLt workspace (device) */
  size_t lt_ws_bytes;
  void *dnn;             /* cudnnHandle_t, created on first convolution */
  void *lt_cache;        /* matmul.cu: cuBLASLt descriptors and heuristic result per distinct
                          * product, made on its first call and reused (freed by ctx_free) */
  int64_t lt_heuristic_calls; /* cuBLASLt heuristic queries made (tests: one per product) */
  int64_t lt_prefilled;  /* of those, made by apx_cuda_prepare (a plan's products at load) */
  ApxCudaDevErr *dev_err; /* device memory, zeroed by init */
  void *tmp[APX_CUDA_MAX_TMP]; /* this op's temporaries (freed after it) */
  int32_t n_tmp;
  char err[512];         /* one-line reason for a non-OK status */
} ApxCudaCtx;

/* Creates the library handles and device buffers for `device` (made current) and `stream`
 * (a cudaStream_t; NULL: the legacy default stream). Returns APX_STATUS_OK or an error with
 * the failing CUDA call in ctx->err. */
ApxStatus apx_cuda_ctx_init(ApxCudaCtx *ctx, int32_t device, void *stream);
void apx_cuda_ctx_free(ApxCudaCtx *ctx);

/* Queues op (see the file comment). Ops without a CUDA kernel return APX_STATUS_UNSUPPORTED
 * with "<Op>: not supported yet on cuda: <Op>". */
ApxStatus apx_cuda_run(ApxCudaCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins,
                       int n_in, ApxTensor *outs, int n_out);

typedef struct ApxLtCallView ApxLtCallView; /* kernels/cuda/lt_plan.h */

/* Fills the cuBLASLt descriptor and heuristic cache with the distinct products of n kernels
 * (lt_plan.h: what each op issues first), so that their first calls make no heuristic query;
 * a product not derived there is still made at its first call. Nothing is queued. */
ApxStatus apx_cuda_prepare(ApxCudaCtx *ctx, const ApxLtCallView *calls, int32_t n);

/* 1 if apx_cuda_run implements op for its type T = dt (as apx_cpu_supports: the type of the
 * op's float data; any type for data movement and Cast). Pure table lookup: no device needed. */
int apx_cuda_supports(ApxOp op, ApxDType dt);

/* Reads and clears the device-side error record (synchronizes ctx->stream). Returns
 * APX_STATUS_OK when none was recorded, else APX_STATUS_BAD_INPUT with "<Op>: <what>" in
 * ctx->err and the record's launch number in *seq (may be NULL). */
ApxStatus apx_cuda_dev_error(ApxCudaCtx *ctx, int64_t *seq);
/* The same in two halves around the caller's own synchronization (one host wait): _fetch
 * queues the record's copy into host (pinned memory, so the copy is asynchronous) on
 * ctx->stream; after the stream is synchronized, _check decodes it as apx_cuda_dev_error
 * does and clears the device record when one was set. */
ApxStatus apx_cuda_dev_error_fetch(ApxCudaCtx *ctx, ApxCudaDevErr *host);
ApxStatus apx_cuda_dev_error_check(ApxCudaCtx *ctx, const ApxCudaDevErr *rec, int64_t *seq);

/* Queues *dst = step on ctx->stream (a one-thread kernel taking step by value: no host
 * staging, nothing to wait for): the device-side Philox counter of ctx->step_dev. */
ApxStatus apx_cuda_step_write(ApxCudaCtx *ctx, int64_t *dst, int64_t step);

/* The number of CUDA devices, or -1 with the runtime's reason ("cudaGetDeviceCount:
 * cudaErrorNoDevice: no CUDA-capable device is detected") in why. */
int apx_cuda_device_count(char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
