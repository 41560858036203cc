/* backend_cuda.c - the CUDA backend: device buffers, streams as queues, pinned staging for
 * host copies, events, kernel launch through kernels/cuda (backend_cuda.h has the contract). */
#include "runtime/backend_cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/lt_plan.h"

#define STAGE_SLOTS 8
#define STAGE_SLOT_BYTES ((size_t)4 << 20) /* 8 x 4 MiB of pinned host memory */
#define NAME_RING 4096                     /* launches remembered for device-side errors */

typedef struct CudaQueue {
  cudaStream_t stream;
} CudaQueue;

struct ApxEvent {
  cudaEvent_t ev;
};

struct ApxDevGraph {
  cudaGraphExec_t exec;
};

/* A staging slot: pinned bytes, the event after the last copy through it, and for a D2H copy
 * the caller's destination, filled once the event has completed. */
typedef struct StageSlot {
  char *host;
  cudaEvent_t done;
  int in_use;
  void *d2h_dst;
  size_t d2h_n;
} StageSlot;

typedef struct CudaBe {
  int32_t device;
  ApxCudaCtx kctx;
  StageSlot slot[STAGE_SLOTS];
  char *pinned;
  int next_slot;
  int64_t seq;
  int ready;                    /* the device context exists (setup got that far) */
  cudaStream_t zero_stream;     /* non-blocking stream that zeroes new buffers (buffer_alloc) */
  ApxCudaDevErr *dev_err_host;  /* pinned: the device-side error record, read with each sync */
  int64_t host_waits;           /* times the host blocked on the device (apx_backend_cuda_host_waits) */
  int64_t *step_dev;            /* device: the Philox counter Dropout reads (step_write) */
  int64_t step_written;         /*   the value queued into it last (0: zeroed at setup) */
  cudaStream_t capturing;       /* the stream being captured (capture_begin .. capture_end) */
  const char *names[NAME_RING]; /* node of launch seq % NAME_RING */
} CudaBe;

/* A CUDA runtime call checked in a do { } while (0): the call text, file and line go to be->err. */
#define CU_TRY(be, call)                                                                     \
  do {                                                                                       \
    cudaError_t cu_e_ = (call);                                                              \
    if (cu_e_ != cudaSuccess)                                                                \
      return apx_backend_fail((be), cu_e_ == cudaErrorMemoryAllocation ? APX_STATUS_OOM     \
                                                                       : APX_STATUS_RUNTIME, \
                              "%s: %s: %s (%s:%d)", #call, cudaGetErrorName(cu_e_),          \
                              cudaGetErrorString(cu_e_), __FILE__, __LINE__);                \
  } while (0)

static CudaBe *cb(ApxBackend *be) { return (CudaBe *)be->ctx; }

static cudaStream_t qstream(ApxQueue *q) { return q ? ((CudaQueue *)q)->stream : (cudaStream_t)0; }

void *apx_backend_cuda_stream(ApxQueue *q) { return (void *)qstream(q); }

int32_t apx_backend_cuda_device(const ApxBackend *be) { return ((const CudaBe *)be->ctx)->device; }

/* ---- staging ring ------------------------------------------------------------------------- */

/* Completes slot i's pending D2H (its copy has finished) and frees it. */
static void slot_retire(StageSlot *s) {
  if (s->d2h_dst) memcpy(s->d2h_dst, s->host, s->d2h_n);
  s->d2h_dst = NULL;
  s->d2h_n = 0;
  s->in_use = 0;
}

/* Retires every slot whose copy has finished (all of them when wait is set). */
static ApxStatus stage_flush(ApxBackend *be, int wait) {
  CudaBe *c = cb(be);
  for (int i = 0; i < STAGE_SLOTS; i++) {
    StageSlot *s = &c->slot[i];
    if (!s->in_use) continue;
    if (wait) {
      c->host_waits++;
      CU_TRY(be, cudaEventSynchronize(s->done));
    } else {
      cudaError_t e = cudaEventQuery(s->done);
      if (e == cudaErrorNotReady) continue;
      CU_TRY(be, e);
    }
    slot_retire(s);
  }
  return APX_STATUS_OK;
}

/* The next slot, waiting for (and retiring) its previous copy. */
static ApxStatus stage_take(ApxBackend *be, StageSlot **out) {
  CudaBe *c = cb(be);
  StageSlot *s = &c->slot[c->next_slot];
  c->next_slot = (c->next_slot + 1) % STAGE_SLOTS;
  if (s->in_use) {
    c->host_waits++; /* the ring is full: wait for the oldest copy */
    CU_TRY(be, cudaEventSynchronize(s->done));
    slot_retire(s);
  }
  *out = s;
  return APX_STATUS_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */

static ApxStatus cuda_buffer_alloc(ApxBackend *be, size_t size, ApxDevBuffer *out) {
  void *p = NULL;
  size_t n = size ? size : 256;
  CU_TRY(be, cudaSetDevice(cb(be)->device));
  cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return apx_backend_fail(be, APX_STATUS_OOM,
                            "cudaMalloc(%zu bytes): %s (device %d: %zu of %zu bytes free)", size,
                            cudaGetErrorString(e), cb(be)->device, free_b, total);
  }
  /* zeroed on the backend's own stream and waited for here: a cudaMemset on the legacy stream
   * is not ordered before work on the queues (non-blocking streams), so uploads queued right
   * after the allocation could land first and be zeroed */
  e = cudaMemsetAsync(p, 0, n, cb(be)->zero_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cb(be)->zero_stream);
  if (e != cudaSuccess) {
    cudaFree(p);
    CU_TRY(be, e);
  }
  out->base = p;
  out->size = size;
  out->impl = NULL;
  return APX_STATUS_OK;
}

static void cuda_buffer_free(ApxBackend *be, ApxDevBuffer *buf) {
  if (buf->base) cudaFree(buf->base);
  buf->base = NULL;
  buf->size = 0;
}

static ApxStatus cuda_memset(ApxBackend *be, ApxQueue *q, void *dst, int value, size_t n) {
  if (n) CU_TRY(be, cudaMemsetAsync(dst, value, n, qstream(q)));
  return APX_STATUS_OK;
}

/* ---- copies --------------------------------------------------------------------------------- */

static ApxStatus cuda_copy_h2d(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  for (size_t off = 0; off < n; off += STAGE_SLOT_BYTES) {
    size_t len = n - off < STAGE_SLOT_BYTES ? n - off : STAGE_SLOT_BYTES;
    StageSlot *s;
    ApxStatus st = stage_take(be, &s);
    if (st) return st;
    memcpy(s->host, (const char *)src + off, len);
    CU_TRY(be, cudaMemcpyAsync((char *)dst + off, s->host, len, cudaMemcpyHostToDevice, qstream(q)));
    CU_TRY(be, cudaEventRecord(s->done, qstream(q)));
    s->in_use = 1;
  }
  return APX_STATUS_OK;
}

static ApxStatus cuda_copy_d2h(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  for (size_t off = 0; off < n; off += STAGE_SLOT_BYTES) {
    size_t len = n - off < STAGE_SLOT_BYTES ? n - off : STAGE_SLOT_BYTES;
    StageSlot *s;
    ApxStatus st = stage_take(be, &s);
    if (st) return st;
    CU_TRY(be, cudaMemcpyAsync(s->host, (const char *)src + off, len, cudaMemcpyDeviceToHost, qstream(q)));
    CU_TRY(be, cudaEventRecord(s->done, qstream(q)));
    s->in_use = 1;
    s->d2h_dst = (char *)dst + off;
    s->d2h_n = len;
  }
  return APX_STATUS_OK;
}

static ApxStatus cuda_copy_d2d(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  if (n && dst != src) CU_TRY(be, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, qstream(q)));
  return APX_STATUS_OK;
}

/* ---- queues ----------------------------------------------------------------------------------- */

static ApxStatus cuda_queue_create(ApxBackend *be, ApxQueue **q) {
  CudaQueue *cq = calloc(1, sizeof *cq);
  if (!cq) return apx_backend_fail(be, APX_STATUS_OOM, "out of host memory");
  cudaError_t e = cudaSetDevice(cb(be)->device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&cq->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(cq);
    CU_TRY(be, e);
  }
  *q = (ApxQueue *)cq;
  return APX_STATUS_OK;
}

static void cuda_queue_destroy(ApxBackend *be, ApxQueue *q) {
  if (!q) return;
  CudaQueue *cq = (CudaQueue *)q;
  cudaStreamSynchronize(cq->stream);
  stage_flush(be, 1);
  cudaStreamDestroy(cq->stream);
  free(cq);
}

/* A device-side error recorded by a kernel queued on q (its record fetched into
 * c->dev_err_host before the sync): names the launch's node. */
static ApxStatus check_dev_error(ApxBackend *be, ApxQueue *q) {
  CudaBe *c = cb(be);
  c->kctx.stream = (void *)qstream(q);
  int64_t seq = -1;
  ApxStatus st = apx_cuda_dev_error_check(&c->kctx, c->dev_err_host, &seq);
  if (st == APX_STATUS_OK) return st;
  const char *node = seq >= 0 && seq > c->seq - NAME_RING ? c->names[seq % NAME_RING] : NULL;
  if (node) return apx_backend_fail(be, st, "node '%s': %s", node, c->kctx.err);
  return apx_backend_fail(be, st, "%s", c->kctx.err);
}

/* One host wait: the device error record is copied (pinned, async) behind the queue's work,
 * then the stream is synchronized once. */
static ApxStatus cuda_queue_sync(ApxBackend *be, ApxQueue *q) {
  CudaBe *c = cb(be);
  c->kctx.stream = (void *)qstream(q);
  ApxStatus st = apx_cuda_dev_error_fetch(&c->kctx, c->dev_err_host);
  if (st != APX_STATUS_OK) return apx_backend_fail(be, st, "%s", c->kctx.err);
  c->host_waits++;
  CU_TRY(be, cudaStreamSynchronize(qstream(q)));
  st = stage_flush(be, 0);
  if (st) return st;
  return check_dev_error(be, q);
}

int64_t apx_backend_cuda_host_waits(const ApxBackend *be) { return ((const CudaBe *)be->ctx)->host_waits; }

/* ---- kernels ----------------------------------------------------------------------------------- */

static ApxStatus cuda_launch(ApxBackend *be, ApxQueue *q, const ApxKernelCall *call) {
  CudaBe *c = cb(be);
  c->kctx.stream = (void *)qstream(q);
  c->kctx.step = call->step;
  /* the device-side counter holds this launch's step: kernels read it there (the value a
   * replayed graph sees is the one written before its launch); otherwise by value, which a
   * capture would freeze into the graph */
  c->kctx.step_dev = call->step == c->step_written ? c->step_dev : NULL;
  if (!c->kctx.step_dev && c->capturing)
    return apx_backend_fail(be, APX_STATUS_RUNTIME,
                            "step %lld launched during graph capture, but the device-side step holds %lld "
                            "(step_write before capture_begin)", (long long)call->step, (long long)c->step_written);
  c->kctx.seq = ++c->seq;
  c->names[c->seq % NAME_RING] = call->node;
  ApxStatus st = apx_cuda_run(&c->kctx, call->op, call->attrs, call->ins, call->n_in, call->outs,
                              call->n_out);
  if (st != APX_STATUS_OK)
    return apx_backend_fail(be, st, "%s", c->kctx.err[0] ? c->kctx.err : apx_status_name(st));
  return APX_STATUS_OK;
}

static int cuda_supports(ApxBackend *be, ApxOp op, ApxDType dt) { return apx_cuda_supports(op, dt); }

/* The plan's cuBLASLt products, made before step 1 (kernels/cuda/lt_plan.h). */
static ApxStatus cuda_prepare(ApxBackend *be, const ApxKernelCall *calls, int32_t n) {
  CudaBe *c = cb(be);
  ApxLtCallView *v = calloc((size_t)n + 1, sizeof *v);
  if (!v) return apx_backend_fail(be, APX_STATUS_OOM, "out of host memory");
  for (int32_t i = 0; i < n; i++)
    v[i] = (ApxLtCallView){calls[i].op, calls[i].attrs, calls[i].ins, calls[i].n_in, calls[i].outs, calls[i].n_out};
  ApxStatus st = apx_cuda_prepare(&c->kctx, v, n);
  free(v);
  if (st != APX_STATUS_OK) return apx_backend_fail(be, st, "%s", c->kctx.err);
  return APX_STATUS_OK;
}

void apx_backend_cuda_lt_counts(const ApxBackend *be, int64_t *prefilled, int64_t *heuristic_calls) {
  const CudaBe *c = (const CudaBe *)be->ctx;
  *prefilled = c->kctx.lt_prefilled;
  *heuristic_calls = c->kctx.lt_heuristic_calls;
}

/* ---- device-side step and graph capture ------------------------------------------------------- */

static ApxStatus cuda_step_write(ApxBackend *be, ApxQueue *q, int64_t step) {
  CudaBe *c = cb(be);
  if (c->capturing)
    return apx_backend_fail(be, APX_STATUS_RUNTIME, "step_write during graph capture (it belongs before the launch)");
  c->kctx.stream = (void *)qstream(q);
  ApxStatus st = apx_cuda_step_write(&c->kctx, c->step_dev, step);
  if (st != APX_STATUS_OK) return apx_backend_fail(be, st, "%s", c->kctx.err);
  c->step_written = step;
  return APX_STATUS_OK;
}

static ApxStatus cuda_capture_begin(ApxBackend *be, ApxQueue *q) {
  CudaBe *c = cb(be);
  if (c->capturing) return apx_backend_fail(be, APX_STATUS_RUNTIME, "a graph capture is already in progress");
  /* thread-local: this thread's unsafe calls (a synchronization, a legacy-stream copy) fail
   * the capture instead of silently running outside it */
  CU_TRY(be, cudaStreamBeginCapture(qstream(q), cudaStreamCaptureModeThreadLocal));
  c->capturing = qstream(q);
  return APX_STATUS_OK;
}

static ApxStatus cuda_capture_end(ApxBackend *be, ApxQueue *q, ApxDevGraph **out) {
  CudaBe *c = cb(be);
  *out = NULL;
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture(qstream(q), &graph);
  c->capturing = NULL;
  if (e != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    CU_TRY(be, e);
  }
  ApxDevGraph *g = calloc(1, sizeof *g);
  if (!g) {
    cudaGraphDestroy(graph);
    return apx_backend_fail(be, APX_STATUS_OOM, "out of host memory");
  }
  e = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph); /* the executable graph keeps what it needs */
  if (e != cudaSuccess) {
    free(g);
    CU_TRY(be, e);
  }
  *out = g;
  return APX_STATUS_OK;
}

static ApxStatus cuda_graph_launch(ApxBackend *be, ApxQueue *q, ApxDevGraph *g) {
  CU_TRY(be, cudaGraphLaunch(g->exec, qstream(q)));
  return APX_STATUS_OK;
}

static void cuda_graph_free(ApxBackend *be, ApxDevGraph *g) {
  if (!g) return;
  if (g->exec) cudaGraphExecDestroy(g->exec);
  free(g);
}

/* ---- events ------------------------------------------------------------------------------------ */

static ApxStatus cuda_event_create(ApxBackend *be, ApxEvent **ev) {
  ApxEvent *e = calloc(1, sizeof *e);
  if (!e) return apx_backend_fail(be, APX_STATUS_OOM, "out of host memory");
  cudaError_t r = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
  if (r != cudaSuccess) {
    free(e);
    CU_TRY(be, r);
  }
  *ev = e;
  return APX_STATUS_OK;
}

static void cuda_event_destroy(ApxBackend *be, ApxEvent *ev) {
  if (!ev) return;
  cudaEventDestroy(ev->ev);
  free(ev);
}

static ApxStatus cuda_event_record(ApxBackend *be, ApxEvent *ev, ApxQueue *q) {
  CU_TRY(be, cudaEventRecord(ev->ev, qstream(q)));
  return APX_STATUS_OK;
}

static ApxStatus cuda_queue_wait(ApxBackend *be, ApxQueue *q, ApxEvent *ev) {
  CU_TRY(be, cudaStreamWaitEvent(qstream(q), ev->ev, 0));
  return APX_STATUS_OK;
}

static ApxStatus cuda_event_sync(ApxBackend *be, ApxEvent *ev) {
  cb(be)->host_waits++;
  CU_TRY(be, cudaEventSynchronize(ev->ev));
  return stage_flush(be, 0); /* D2H copies queued before the event have landed */
}

/* ---- lifetime ------------------------------------------------------------------------------------ */

static void cuda_free(ApxBackend *be) {
  CudaBe *c = cb(be);
  if (!c) return;
  if (c->ready) {
    cudaSetDevice(c->device);
    cudaDeviceSynchronize();
  }
  for (int i = 0; i < STAGE_SLOTS; i++) {
    if (c->slot[i].in_use) slot_retire(&c->slot[i]);
    if (c->slot[i].done) cudaEventDestroy(c->slot[i].done);
  }
  if (c->pinned) cudaFreeHost(c->pinned);
  if (c->dev_err_host) cudaFreeHost(c->dev_err_host);
  if (c->zero_stream) cudaStreamDestroy(c->zero_stream);
  if (c->step_dev) cudaFree(c->step_dev);
  apx_cuda_ctx_free(&c->kctx);
  free(c);
  be->ctx = NULL;
}

static const ApxBackendI cuda_iface = {
    .name = "cuda",
    .free = cuda_free,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .memset = cuda_memset,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .queue_create = cuda_queue_create,
    .queue_destroy = cuda_queue_destroy,
    .queue_sync = cuda_queue_sync,
    .launch = cuda_launch,
    .supports = cuda_supports,
    .prepare = cuda_prepare,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .queue_wait = cuda_queue_wait,
    .event_sync = cuda_event_sync,
    .step_write = cuda_step_write,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

static ApxStatus setup(ApxBackend *be, const ApxBackendConfig *cfg) {
  CudaBe *c = cb(be);
  char why[256] = "";
  int n = apx_cuda_device_count(why, sizeof why);
  if (n <= 0) return apx_backend_fail(be, APX_STATUS_RUNTIME, "no CUDA device found (%s)", why);
  if (cfg->device < 0 || cfg->device >= n)
    return apx_backend_fail(be, APX_STATUS_BAD_INPUT, "CUDA device %d out of range (%d device%s)",
                            cfg->device, n, n == 1 ? "" : "s");
  c->device = cfg->device;
  c->ready = 1;
  ApxStatus st = apx_cuda_ctx_init(&c->kctx, c->device, NULL);
  if (st != APX_STATUS_OK) return apx_backend_fail(be, st, "%s", c->kctx.err);
  c->kctx.seed = cfg->seed;
  CU_TRY(be, cudaStreamCreateWithFlags(&c->zero_stream, cudaStreamNonBlocking));
  /* the device-side step, zeroed like a buffer: it holds step 0 until the first step_write */
  CU_TRY(be, cudaMalloc((void **)&c->step_dev, sizeof *c->step_dev));
  CU_TRY(be, cudaMemsetAsync(c->step_dev, 0, sizeof *c->step_dev, c->zero_stream));
  CU_TRY(be, cudaStreamSynchronize(c->zero_stream));
  c->step_written = 0;
  CU_TRY(be, cudaHostAlloc((void **)&c->dev_err_host, sizeof *c->dev_err_host, cudaHostAllocDefault));
  memset(c->dev_err_host, 0, sizeof *c->dev_err_host);
  CU_TRY(be, cudaHostAlloc((void **)&c->pinned, STAGE_SLOTS * STAGE_SLOT_BYTES, cudaHostAllocDefault));
  for (int i = 0; i < STAGE_SLOTS; i++) {
    c->slot[i].host = c->pinned + (size_t)i * STAGE_SLOT_BYTES;
    CU_TRY(be, cudaEventCreateWithFlags(&c->slot[i].done, cudaEventDisableTiming));
  }
  return APX_STATUS_OK;
}

ApxStatus apx_backend_cuda_create(const ApxBackendConfig *cfg, ApxBackend **out) {
  ApxBackend *be = calloc(1, sizeof *be);
  CudaBe *c = calloc(1, sizeof *c);
  *out = be;
  if (!be || !c) {
    free(c);
    if (be) snprintf(be->err, sizeof be->err, "out of host memory");
    return APX_STATUS_OOM;
  }
  be->iface = cuda_iface;
  be->ctx = c;
  be->rank = 0;
  be->world = 1;
  return setup(be, cfg); /* on failure the caller frees be (apx_backend_free -> cuda_free) */
}
