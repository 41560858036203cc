/* common.cu - context setup (cuBLASLt handle, workspace, device error record), error text,
 * stream-ordered temporaries, device-side error readback, device count. */
#include <cublasLt.h>
#include <cudnn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/validate.h"

#define LT_WORKSPACE_BYTES (32u << 20) /* cuBLASLt: 32 MiB is enough for Hopper's kernels */

ApxStatus apx_cuda_fail(ApxCudaCtx *ctx, ApxStatus st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
  va_end(ap);
  return st;
}

ApxStatus apx_cuda_fail_call(ApxCudaCtx *ctx, cudaError_t e, const char *call, const char *file,
                             int line) {
  const char *base = strrchr(file, '/');
  ApxStatus st = e == cudaErrorMemoryAllocation ? APX_STATUS_OOM : APX_STATUS_RUNTIME;
  return apx_cuda_fail(ctx, st, "%s: %s: %s (%s:%d)", call, cudaGetErrorName(e),
                       cudaGetErrorString(e), base ? base + 1 : file, line);
}

int apx_cuda_device_count(char *why, size_t cap) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why && cap) snprintf(why, cap, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError(); /* clear the sticky-free error state */
    return -1;
  }
  if (n == 0 && why && cap) snprintf(why, cap, "cudaGetDeviceCount: 0 devices");
  return n;
}

ApxStatus apx_cuda_ctx_init(ApxCudaCtx *ctx, int32_t device, void *stream) {
  memset(ctx, 0, sizeof *ctx);
  ctx->device = device;
  ctx->stream = stream;
  APX_CUDA_TRY(ctx, cudaSetDevice(device));
  APX_CUDA_TRY(ctx, cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, device));
  /* keep freed temporaries in the stream-ordered pool instead of returning them each op */
  cudaMemPool_t pool;
  APX_CUDA_TRY(ctx, cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = UINT64_MAX;
  APX_CUDA_TRY(ctx, cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  APX_CUDA_TRY(ctx, cudaMalloc((void **)&ctx->dev_err, sizeof(ApxCudaDevErr)));
  /* zeroed and waited for before any kernel can record into it (a plain cudaMemset runs on
   * the legacy stream, unordered with the non-blocking streams the kernels run on) */
  APX_CUDA_TRY(ctx, cudaMemsetAsync(ctx->dev_err, 0, sizeof(ApxCudaDevErr), (cudaStream_t)stream));
  APX_CUDA_TRY(ctx, cudaStreamSynchronize((cudaStream_t)stream));
  APX_CUDA_TRY(ctx, cudaMalloc(&ctx->lt_ws, LT_WORKSPACE_BYTES));
  ctx->lt_ws_bytes = LT_WORKSPACE_BYTES;
  cublasLtHandle_t lt = NULL;
  cublasStatus_t bs = cublasLtCreate(&lt);
  if (bs != CUBLAS_STATUS_SUCCESS)
    return apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "cublasLtCreate: %s (%s:%d)",
                         cublasLtGetStatusName(bs), __FILE__, __LINE__);
  ctx->lt = lt;
  return APX_STATUS_OK;
}

void apx_cuda_ctx_free(ApxCudaCtx *ctx) {
  if (!ctx) return;
  apx_cuda_tmp_release(ctx);
  apx_cuda_lt_cache_free(ctx);
  if (ctx->dnn) cudnnDestroy((cudnnHandle_t)ctx->dnn);
  if (ctx->lt) cublasLtDestroy((cublasLtHandle_t)ctx->lt);
  if (ctx->lt_ws) cudaFree(ctx->lt_ws);
  if (ctx->dev_err) cudaFree(ctx->dev_err);
  ctx->dnn = ctx->lt = ctx->lt_ws = NULL;
  ctx->dev_err = NULL;
}

ApxStatus apx_cuda_tmp(ApxCudaCtx *ctx, size_t bytes, void **out) {
  *out = NULL;
  if (ctx->n_tmp >= APX_CUDA_MAX_TMP)
    return apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "more than %d temporaries in one op",
                         APX_CUDA_MAX_TMP);
  APX_CUDA_TRY(ctx, cudaMallocAsync(out, bytes ? bytes : 256, apx_cu_stream(ctx)));
  ctx->tmp[ctx->n_tmp++] = *out;
  return APX_STATUS_OK;
}

void apx_cuda_tmp_release(ApxCudaCtx *ctx) {
  for (int i = 0; i < ctx->n_tmp; i++) cudaFreeAsync(ctx->tmp[i], apx_cu_stream(ctx));
  ctx->n_tmp = 0;
}

ApxStatus apx_cuda_dev_error(ApxCudaCtx *ctx, int64_t *seq) {
  ApxCudaDevErr e;
  if (seq) *seq = -1;
  if (!ctx->dev_err) return APX_STATUS_OK;
  APX_TRY(apx_cuda_dev_error_fetch(ctx, &e));
  APX_CUDA_TRY(ctx, cudaStreamSynchronize(apx_cu_stream(ctx)));
  return apx_cuda_dev_error_check(ctx, &e, seq);
}

ApxStatus apx_cuda_dev_error_fetch(ApxCudaCtx *ctx, ApxCudaDevErr *host) {
  memset(host, 0, sizeof *host);
  if (!ctx->dev_err) return APX_STATUS_OK;
  APX_CUDA_TRY(ctx, cudaMemcpyAsync(host, ctx->dev_err, sizeof *host, cudaMemcpyDeviceToHost,
                                    apx_cu_stream(ctx)));
  return APX_STATUS_OK;
}

ApxStatus apx_cuda_dev_error_check(ApxCudaCtx *ctx, const ApxCudaDevErr *rec, int64_t *seq) {
  if (seq) *seq = -1;
  if (!ctx->dev_err || rec->code == 0) return APX_STATUS_OK;
  ApxCudaDevErr e = *rec;
  APX_CUDA_TRY(ctx, cudaMemsetAsync(ctx->dev_err, 0, sizeof e, apx_cu_stream(ctx)));
  if (seq) *seq = e.seq;
  const char *op = apx_op_name((ApxOp)e.op);
  switch (e.code) {
    case APX_CUDA_DERR_LABEL:
      return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "%s: " APX_MSG_LABEL_RANGE, op, (long long)e.a, (long long)e.b, (long long)e.c);
    case APX_CUDA_DERR_INDEX:
      return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "%s: " APX_MSG_INDEX_RANGE, op,
                           (long long)e.a, (long long)e.b, (long long)e.c, (long long)e.c);
    case APX_CUDA_DERR_DIV_ZERO:
      return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "%s: integer modulo by zero (divisor element %lld)",
                           op, (long long)e.a);
    default:
      return apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "%s: device error %d", op, e.code);
  }
}
