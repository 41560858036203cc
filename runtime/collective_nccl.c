/* collective_nccl.c - collective_nccl.h: NCCL communicator bootstrapped over MPI, in-place
 * allreduce/broadcast of device tensors on a CUDA stream, deadline-bounded waits. Compiled
 * only where CUDA is (runtime/BUILD: if_cuda). */
#include "runtime/collective_nccl.h"

#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/half.h"

struct ApxNccl {
  ncclComm_t comm;
  int32_t rank, world, device;
};

static int nfail(const ApxNccl *n, ApxDiag *d, const char *what, const char *call, const char *why,
                 const char *file, int line) {
  return apx_diag_error(d, APX_EXIT_RUNTIME, "rank %d of %d: %s: %s failed: %s (%s:%d)",
                        n ? (int)n->rank : 0, n ? (int)n->world : 1, what, call, why, file, line);
}

/* NCCL and CUDA calls record the call text, file and line (STYLE.md 7). */
#define NCCL_CHECK(n, d, what, call)                                                        \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) return nfail((n), (d), (what), #call, ncclGetErrorString(r_), __FILE__, __LINE__); \
  } while (0)
#define CUDA_CHECK(n, d, what, call)                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) return nfail((n), (d), (what), #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)

static int nccl_type(ApxDType t, ncclDataType_t *out) {
  switch (t) {
    case APX_DT_F16: *out = ncclFloat16; return 0;
    case APX_DT_BF16: *out = ncclBfloat16; return 0;
    case APX_DT_F32: *out = ncclFloat32; return 0;
    case APX_DT_F64: *out = ncclFloat64; return 0;
    case APX_DT_I32: *out = ncclInt32; return 0;
    case APX_DT_I64: *out = ncclInt64; return 0;
    case APX_DT_U8:
    case APX_DT_BOOL: *out = ncclUint8; return 0;
    default: return -1;
  }
}

int apx_nccl_init(ApxNccl **out, ApxColl *c, int32_t device, ApxDiag *d) {
  *out = NULL;
  ApxNccl *n = calloc(1, sizeof *n);
  if (!n) return apx_diag_error(d, APX_EXIT_RUNTIME, "nccl: out of memory");
  n->rank = apx_coll_rank(c);
  n->world = apx_coll_world(c);
  n->device = device;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  int rc = 0;
  if (n->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) rc = nfail(n, d, "init", "ncclGetUniqueId(&id)", ncclGetErrorString(r), __FILE__, __LINE__);
  }
  /* every rank takes part in the broadcast, even after a local failure, so none waits */
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = &id;
  t.dtype = APX_DT_U8;
  t.rank = 1;
  t.dims[0] = (int64_t)sizeof id;
  ApxDiag bd;
  apx_diag_init(&bd);
  if (apx_coll_broadcast(c, &t, 1, 0, "nccl unique id broadcast", &bd) && !rc)
    rc = apx_diag_error(d, bd.code, "%s", bd.msg);
  if (!rc) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
      rc = nfail(n, d, "init", "cudaSetDevice(device)", cudaGetErrorString(e), __FILE__, __LINE__);
  }
  if (!rc) {
    ncclResult_t r = ncclCommInitRank(&n->comm, n->world, id, n->rank);
    if (r != ncclSuccess)
      rc = nfail(n, d, "init", "ncclCommInitRank(&n->comm, n->world, id, n->rank)", ncclGetErrorString(r),
                 __FILE__, __LINE__);
  }
  if (rc) {
    free(n);
    return -1;
  }
  *out = n;
  return 0;
}

void apx_nccl_free(ApxNccl *n) {
  if (!n) return;
  if (n->comm) ncclCommDestroy(n->comm);
  free(n);
}

/* The PreMulSum scalar in t's type, in host memory. */
static void scalar_as(ApxDType t, double v, void *out) {
  switch (t) {
    case APX_DT_F16: *(uint16_t *)out = apx_f32_to_f16((float)v); break;
    case APX_DT_BF16: *(uint16_t *)out = apx_f32_to_bf16((float)v); break;
    case APX_DT_F64: *(double *)out = v; break;
    default: *(float *)out = (float)v; break;
  }
}

int apx_nccl_allreduce(ApxNccl *n, void *stream, ApxTensor *t, int32_t count, ApxReduceOp op, float pre,
                       float post, const char *what, ApxDiag *d) {
  if (!what) what = "allreduce";
  cudaStream_t s = (cudaStream_t)stream;
  double scale = 1.0; /* PreMulSum factor, 1: plain sum */
  if (op == APX_REDUCE_SUM) {
    if (post == 1.0f)
      scale = pre;
    else if (fabs((double)pre * (double)post * (double)n->world - 1.0) < 1e-6)
      scale = 1.0 / (double)n->world;
    else
      return apx_diag_error(d, APX_EXIT_RUNTIME,
                            "rank %d of %d: %s: not supported yet: a post-reduction scale of %g on NCCL "
                            "(needs a scaling kernel)",
                            (int)n->rank, (int)n->world, what, (double)post);
  }
  ncclRedOp_t ops[64];
  int32_t n_ops = 0;
  NCCL_CHECK(n, d, what, ncclGroupStart());
  int rc = 0;
  for (int32_t i = 0; i < count && !rc; i++) {
    if (!t[i].data) continue;
    ncclDataType_t dt;
    if (nccl_type(t[i].dtype, &dt)) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "rank %d of %d: %s: not supported yet: tensor %d of type %s",
                          (int)n->rank, (int)n->world, what, i, apx_dtype_name(t[i].dtype));
      break;
    }
    ncclRedOp_t rop = op == APX_REDUCE_MAX ? ncclMax : ncclSum;
    int is_float = apx_dtype_is_float(t[i].dtype);
    if (op == APX_REDUCE_SUM && scale != 1.0 && is_float && n_ops < 64) {
      unsigned char sc[8];
      scalar_as(t[i].dtype, scale, sc);
      ncclResult_t r = ncclRedOpCreatePreMulSum(&rop, sc, dt, ncclScalarHostImmediate, n->comm);
      if (r != ncclSuccess) {
        rc = nfail(n, d, what, "ncclRedOpCreatePreMulSum(&rop, sc, dt, ncclScalarHostImmediate, n->comm)",
                   ncclGetErrorString(r), __FILE__, __LINE__);
        break;
      }
      ops[n_ops++] = rop;
    } else if (op == APX_REDUCE_SUM && scale != 1.0 && is_float) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "rank %d of %d: %s: not supported yet: more than 64 scaled tensors in one call",
                          (int)n->rank, (int)n->world, what);
      break;
    }
    ncclResult_t r = ncclAllReduce(t[i].data, t[i].data, (size_t)apx_tensor_numel(&t[i]), dt, rop, n->comm, s);
    if (r != ncclSuccess)
      rc = nfail(n, d, what, "ncclAllReduce(t[i].data, t[i].data, numel, dt, rop, n->comm, s)",
                 ncclGetErrorString(r), __FILE__, __LINE__);
  }
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && !rc) rc = nfail(n, d, what, "ncclGroupEnd()", ncclGetErrorString(r), __FILE__, __LINE__);
  for (int32_t k = 0; k < n_ops; k++) ncclRedOpDestroy(ops[k], n->comm);
  return rc ? -1 : 0;
}

int apx_nccl_broadcast(ApxNccl *n, void *stream, ApxTensor *t, int32_t count, int32_t root,
                       const char *what, ApxDiag *d) {
  if (!what) what = "broadcast";
  cudaStream_t s = (cudaStream_t)stream;
  NCCL_CHECK(n, d, what, ncclGroupStart());
  int rc = 0;
  for (int32_t i = 0; i < count && !rc; i++) {
    if (!t[i].data) continue;
    ncclResult_t r = ncclBroadcast(t[i].data, t[i].data, apx_tensor_bytes(&t[i]), ncclUint8, root, n->comm, s);
    if (r != ncclSuccess)
      rc = nfail(n, d, what, "ncclBroadcast(t[i].data, t[i].data, bytes, ncclUint8, root, n->comm, s)",
                 ncclGetErrorString(r), __FILE__, __LINE__);
  }
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && !rc) rc = nfail(n, d, what, "ncclGroupEnd()", ncclGetErrorString(r), __FILE__, __LINE__);
  return rc ? -1 : 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int apx_nccl_wait(ApxNccl *n, void *stream, double timeout_s, const char *what, ApxDiag *d) {
  if (!what) what = "wait";
  cudaStream_t s = (cudaStream_t)stream;
  double t0 = now_s();
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) return nfail(n, d, what, "cudaStreamQuery(s)", cudaGetErrorString(e), __FILE__, __LINE__);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(n, d, what, ncclCommGetAsyncError(n->comm, &async));
    if (async != ncclSuccess) {
      ncclCommAbort(n->comm);
      n->comm = NULL;
      return nfail(n, d, what, "NCCL communicator", ncclGetErrorString(async), __FILE__, __LINE__);
    }
    double waited = now_s() - t0;
    if (timeout_s > 0 && waited > timeout_s) {
      ncclCommAbort(n->comm);
      n->comm = NULL;
      return apx_diag_error(d, APX_EXIT_RUNTIME,
                            "rank %d of %d: collective '%s' did not complete within %.1f s (waited %.1f s): a "
                            "peer rank is dead or hung",
                            (int)n->rank, (int)n->world, what, timeout_s, waited);
    }
    struct timespec ts = {0, 100000}; /* 0.1 ms */
    nanosleep(&ts, NULL);
  }
}
