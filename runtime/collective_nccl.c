/* collective_nccl.c - collective_nccl.h: NCCL communicator bootstrapped over MPI, in-place
 * allreduce/broadcast of device tensors on a CUDA stream, deadline-bounded waits, and the cuda
 * backend's collective slots (apx_coll_attach_nccl). Compiled only where CUDA is (runtime/BUILD:
 * if_cuda); NCCL itself is loaded at run time (kernels/cuda/cudalibs.h). */
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
#include "runtime/backend_cuda.h"

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

/* ---- the cuda backend's collective slots (apx_coll_attach -> apx_coll_attach_nccl) ----------
 * Blocking slots (allreduce, allreduce_bucket, broadcast) are queued on the caller's queue
 * (stream order does the rest: no host wait). A non-blocking bucket runs on the
 * communicator's own stream: start copies ins to outs on the queue where they differ (so the
 * memory plan may reuse ins right after), records an event, the NCCL stream waits for it and
 * reduces outs in place, then records `done`; test polls `done`; wait makes the queue wait for
 * `done` (no host wait either). The kernels between start and wait overlap the reduction;
 * the executor keeps every kernel touching outs after the wait. The host waits only at the
 * executor's synchronization: the queue_sync slot is wrapped to poll the queue with the
 * collective deadline (apx_nccl_wait: a dead or hung peer aborts the communicator and fails
 * the step, naming the wait) before the backend's own queue_sync. */

typedef struct NcclReq {
  struct NcclReq *next;
  cudaEvent_t start, done;
} NcclReq;

typedef struct NcclSlots {
  ApxNccl *n;
  ApxColl *c;
  cudaStream_t ns;     /* the communicator's stream */
  ApxStatus (*queue_sync)(ApxBackend *be, ApxQueue *q); /* the backend's own */
  NcclReq *free_reqs;
  int dirty;           /* NCCL work queued since the last sync */
} NcclSlots;

static NcclSlots *slots_of(ApxBackend *be) { return (NcclSlots *)be->coll_ctx; }

static ApxStatus slot_fail(ApxBackend *be, const ApxDiag *d) {
  return apx_backend_fail(be, APX_STATUS_RUNTIME, "%s", d->msg);
}

static ApxStatus nccl_allreduce_slot(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, ApxReduceOp op) {
  NcclSlots *s = slots_of(be);
  ApxDiag d;
  apx_diag_init(&d);
  s->dirty = 1;
  return apx_nccl_allreduce(s->n, apx_backend_cuda_stream(q), t, n, op, 1.0f, 1.0f, "allreduce", &d)
             ? slot_fail(be, &d)
             : APX_STATUS_OK;
}

static ApxStatus nccl_bucket_slot(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, const ApxAttrAllreduce *a) {
  NcclSlots *s = slots_of(be);
  ApxDiag d;
  apx_diag_init(&d);
  float pre, post;
  apx_coll_bucket_scales(a, be->world, &pre, &post);
  char what[64];
  apx_coll_bucket_what(a, what, sizeof what);
  s->dirty = 1;
  return apx_nccl_allreduce(s->n, apx_backend_cuda_stream(q), t, n, APX_REDUCE_SUM, pre, post, what, &d)
             ? slot_fail(be, &d)
             : APX_STATUS_OK;
}

static ApxStatus nccl_bucket_start_slot(ApxBackend *be, ApxQueue *q, const ApxTensor *ins, const ApxTensor *outs,
                                        int32_t n, const ApxAttrAllreduce *a, ApxCollRequest **req) {
  NcclSlots *s = slots_of(be);
  *req = NULL;
  cudaStream_t qs = (cudaStream_t)apx_backend_cuda_stream(q);
  NcclReq *r = s->free_reqs;
  if (r) {
    s->free_reqs = r->next;
  } else {
    r = calloc(1, sizeof *r);
    if (!r) return apx_backend_fail(be, APX_STATUS_OOM, "out of host memory");
    if (cudaEventCreateWithFlags(&r->start, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming) != cudaSuccess) {
      free(r);
      return apx_backend_fail(be, APX_STATUS_RUNTIME, "cudaEventCreateWithFlags: %s",
                              cudaGetErrorString(cudaGetLastError()));
    }
  }
  ApxTensor t[64];
  if (n > 64) return apx_backend_fail(be, APX_STATUS_UNSUPPORTED, "not supported yet: a bucket of %d tensors", n);
  for (int32_t i = 0; i < n; i++) {
    t[i] = outs[i];
    if (!ins[i].data || !outs[i].data || ins[i].data == outs[i].data) continue;
    cudaError_t e = cudaMemcpyAsync(outs[i].data, ins[i].data, apx_tensor_bytes(&ins[i]), cudaMemcpyDeviceToDevice, qs);
    if (e != cudaSuccess) return apx_backend_fail(be, APX_STATUS_RUNTIME, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
  }
  cudaError_t e = cudaEventRecord(r->start, qs);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(s->ns, r->start, 0);
  if (e != cudaSuccess) return apx_backend_fail(be, APX_STATUS_RUNTIME, "ordering a bucket: %s", cudaGetErrorString(e));
  ApxDiag d;
  apx_diag_init(&d);
  float pre, post;
  apx_coll_bucket_scales(a, be->world, &pre, &post);
  char what[64];
  apx_coll_bucket_what(a, what, sizeof what);
  s->dirty = 1;
  if (apx_nccl_allreduce(s->n, s->ns, t, n, APX_REDUCE_SUM, pre, post, what, &d)) return slot_fail(be, &d);
  e = cudaEventRecord(r->done, s->ns);
  if (e != cudaSuccess) return apx_backend_fail(be, APX_STATUS_RUNTIME, "cudaEventRecord: %s", cudaGetErrorString(e));
  *req = (ApxCollRequest *)r;
  return APX_STATUS_OK;
}

static ApxStatus nccl_request_test_slot(ApxBackend *be, ApxCollRequest *req, int *done) {
  *done = 1;
  if (!req) return APX_STATUS_OK;
  cudaError_t e = cudaEventQuery(((NcclReq *)req)->done);
  if (e == cudaErrorNotReady) {
    *done = 0;
    return APX_STATUS_OK;
  }
  return e == cudaSuccess ? APX_STATUS_OK
                          : apx_backend_fail(be, APX_STATUS_RUNTIME, "cudaEventQuery: %s", cudaGetErrorString(e));
}

static ApxStatus nccl_request_wait_slot(ApxBackend *be, ApxQueue *q, ApxCollRequest *req) {
  if (!req) return APX_STATUS_OK;
  NcclSlots *s = slots_of(be);
  NcclReq *r = (NcclReq *)req;
  cudaError_t e = cudaStreamWaitEvent((cudaStream_t)apx_backend_cuda_stream(q), r->done, 0);
  r->next = s->free_reqs;
  s->free_reqs = r;
  return e == cudaSuccess ? APX_STATUS_OK
                          : apx_backend_fail(be, APX_STATUS_RUNTIME, "cudaStreamWaitEvent: %s", cudaGetErrorString(e));
}

static ApxStatus nccl_broadcast_slot(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, int32_t root) {
  NcclSlots *s = slots_of(be);
  ApxDiag d;
  apx_diag_init(&d);
  s->dirty = 1;
  return apx_nccl_broadcast(s->n, apx_backend_cuda_stream(q), t, n, root, "broadcast", &d) ? slot_fail(be, &d)
                                                                                          : APX_STATUS_OK;
}

static ApxStatus nccl_barrier_slot(ApxBackend *be) {
  ApxDiag d;
  apx_diag_init(&d);
  return apx_coll_barrier(slots_of(be)->c, "barrier", &d) ? slot_fail(be, &d) : APX_STATUS_OK;
}

/* The backend's queue_sync behind a deadline-bounded poll while NCCL work is queued. */
static ApxStatus nccl_queue_sync(ApxBackend *be, ApxQueue *q) {
  NcclSlots *s = slots_of(be);
  if (s->dirty) {
    ApxDiag d;
    apx_diag_init(&d);
    if (apx_nccl_wait(s->n, apx_backend_cuda_stream(q), apx_coll_timeout(s->c), "step synchronization", &d))
      return slot_fail(be, &d);
    s->dirty = 0;
  }
  return s->queue_sync(be, q);
}

static void nccl_slots_free(ApxBackend *be) {
  NcclSlots *s = slots_of(be);
  if (!s) return;
  if (s->ns) cudaStreamSynchronize(s->ns);
  while (s->free_reqs) {
    NcclReq *r = s->free_reqs;
    s->free_reqs = r->next;
    cudaEventDestroy(r->start);
    cudaEventDestroy(r->done);
    free(r);
  }
  apx_nccl_free(s->n);
  if (s->ns) cudaStreamDestroy(s->ns);
  be->iface.queue_sync = s->queue_sync;
  free(s);
  be->coll_ctx = NULL;
}

int apx_coll_attach_nccl(ApxColl *c, ApxBackend *be, ApxDiag *d) {
  NcclSlots *s = calloc(1, sizeof *s);
  if (!s) return apx_diag_error(d, APX_EXIT_RUNTIME, "nccl: out of memory");
  s->c = c;
  int32_t device = apx_backend_cuda_device(be);
  if (apx_nccl_init(&s->n, c, device, d)) {
    free(s);
    return -1;
  }
  cudaError_t e = cudaStreamCreateWithFlags(&s->ns, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    apx_nccl_free(s->n);
    free(s);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "rank %d of %d: nccl: cudaStreamCreateWithFlags: %s",
                          (int)apx_coll_rank(c), (int)apx_coll_world(c), cudaGetErrorString(e));
  }
  ApxBackendI slots;
  memset(&slots, 0, sizeof slots);
  slots.allreduce = nccl_allreduce_slot;
  slots.allreduce_bucket = nccl_bucket_slot;
  slots.allreduce_bucket_start = nccl_bucket_start_slot;
  slots.request_test = nccl_request_test_slot;
  slots.request_wait = nccl_request_wait_slot;
  slots.broadcast = nccl_broadcast_slot;
  slots.barrier = nccl_barrier_slot;
  s->queue_sync = be->iface.queue_sync;
  apx_backend_set_collectives(be, &slots, s, nccl_slots_free, apx_coll_rank(c), apx_coll_world(c));
  be->iface.queue_sync = nccl_queue_sync;
  return 0;
}
