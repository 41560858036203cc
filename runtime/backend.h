/* backend.h - the device interface every backend implements (ggml_backend_i style,
 * STYLE.md 10; DESIGN.md 12).
 *
 * A backend owns device memory, queues (CUDA streams; the CPU's are synchronous), kernel
 * dispatch and events. The executor (runtime/exec.h) only talks to this vtable, so a CUDA
 * backend with streams, async copies and NCCL fits without changing the runtime.
 *
 * Memory model: the runtime allocates one arena buffer (reused activations and gradients,
 * carved by the memory plan's offsets) and one persistent buffer (params, constants,
 * states) per device; tensors are ApxTensor views whose data pointers are *device*
 * addresses inside those buffers (host addresses on the CPU backend).
 *
 * Ordering: work submitted to one queue runs in submission order. Copies and launches
 * return as soon as the work is queued. copy_h2d has read its host source before it returns
 * (the CPU copies at once, CUDA stages through pinned memory), so the source may change right
 * after; copy_d2h's destination is written by the time the queue is synchronized (or an event
 * recorded after it completes) and must stay valid until then.
 *
 * Collectives: the slots allreduce/broadcast/allreduce_bucket/barrier start NULL and are
 * filled by a collective layer (runtime/collective.h: MPI for cpu, NCCL for cuda) through
 * apx_backend_set_collectives; the backend struct holds its interface by value for that.
 * rank/world are 0/1 until then. allreduce_bucket_start / request_test / request_wait let the
 * executor overlap a gradient bucket's reduction with the following kernels (exec.h).
 *
 * Every slot returns an ApxStatus; on failure the backend writes a one-line reason into
 * be->err. Slots marked "required" are non-NULL in every backend. */
#ifndef APX_BACKEND_H
#define APX_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxBackend ApxBackend;
typedef struct ApxQueue ApxQueue; /* backend-defined: a CUDA stream; CPU: a token */
typedef struct ApxEvent ApxEvent; /* backend-defined: a CUDA event */
typedef struct ApxCollRequest ApxCollRequest; /* collective layer-defined: a reduction in flight */
typedef struct ApxDevGraph ApxDevGraph; /* backend-defined: an instantiated CUDA Graph */

/* A device allocation. */
typedef struct ApxDevBuffer {
  void *base;  /* device address of byte 0 (never NULL once allocated, even for size 0) */
  size_t size;
  void *impl;  /* backend-private */
} ApxDevBuffer;

/* One kernel launch: the op, its typed attributes (attrs.h struct; may be NULL for
 * ApxAttrNone ops) and device tensor views. ins[i].data == NULL marks an absent input
 * (static operands are absent: kernels read attrs). An output may alias an input only as
 * the memory plan allows (ops.def INPLACE: output 0 over input 0; SHAPEONLY views are
 * skipped by the executor when they alias). */
typedef struct ApxKernelCall {
  ApxOp op;
  const void *attrs;
  const ApxTensor *ins;
  int32_t n_in;
  ApxTensor *outs;
  int32_t n_out;
  int64_t step;        /* training step: Dropout's Philox counter (attrs.h) */
  const char *node;    /* node name, for messages */
} ApxKernelCall;

typedef enum ApxReduceOp { APX_REDUCE_SUM = 0, APX_REDUCE_MAX = 1 } ApxReduceOp;

typedef struct ApxBackendConfig {
  int32_t device;      /* device ordinal (CUDA); 0 for cpu */
  int32_t n_threads;   /* CPU threads; <= 0: library default */
  uint64_t seed;       /* Philox key for Dropout */
} ApxBackendConfig;

typedef struct ApxBackendI {
  const char *name; /* required: "cpu", "cuda" */

  /* required: releases everything the backend owns (called by apx_backend_free) */
  void (*free)(ApxBackend *be);

  /* ---- memory ---- */
  /* required: allocates size bytes (zeroed), aligned to at least 256 bytes */
  ApxStatus (*buffer_alloc)(ApxBackend *be, size_t size, ApxDevBuffer *out);
  /* required: frees a buffer from buffer_alloc (NULL base: no-op) */
  void (*buffer_free)(ApxBackend *be, ApxDevBuffer *buf);
  /* required: async memset of device bytes on q */
  ApxStatus (*memset)(ApxBackend *be, ApxQueue *q, void *dst, int value, size_t n);

  /* ---- copies (async on q) ---- */
  ApxStatus (*copy_h2d)(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n); /* required */
  ApxStatus (*copy_d2h)(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n); /* required */
  ApxStatus (*copy_d2d)(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n); /* required */

  /* ---- queues ---- */
  ApxStatus (*queue_create)(ApxBackend *be, ApxQueue **q); /* required */
  void (*queue_destroy)(ApxBackend *be, ApxQueue *q);       /* required */
  /* required: blocks until every piece of work queued on q has finished; reports an
   * asynchronous failure of that work */
  ApxStatus (*queue_sync)(ApxBackend *be, ApxQueue *q);

  /* ---- kernels ---- */
  /* required: queues one kernel on q */
  ApxStatus (*launch)(ApxBackend *be, ApxQueue *q, const ApxKernelCall *call);
  /* optional: 1 if op runs with output dtype dt (the precision pass's backend query);
   * NULL: every op the plan holds */
  int (*supports)(ApxBackend *be, ApxOp op, ApxDType dt);

  /* ---- events (optional: NULL where queues are synchronous, as on cpu) ---- */
  ApxStatus (*event_create)(ApxBackend *be, ApxEvent **ev);
  void (*event_destroy)(ApxBackend *be, ApxEvent *ev);
  /* marks the point in q reached by the work queued so far */
  ApxStatus (*event_record)(ApxBackend *be, ApxEvent *ev, ApxQueue *q);
  /* work queued on q after this call waits for ev */
  ApxStatus (*queue_wait)(ApxBackend *be, ApxQueue *q, ApxEvent *ev);
  /* host blocks until ev completed */
  ApxStatus (*event_sync)(ApxBackend *be, ApxEvent *ev);

  /* ---- collectives (optional; filled by a collective layer) ---- */
  /* in place over every rank: t[i] = op over ranks of t[i], for i < n (one fused call) */
  ApxStatus (*allreduce)(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, ApxReduceOp op);
  /* in place: every rank receives root's t[i] */
  ApxStatus (*broadcast)(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, int32_t root);
  /* one gradient bucket (attrs.h ApxAttrAllreduce) in place over every rank: the sum with
   * predivide and averaging applied as runtime/collective.h says (queued on q) */
  ApxStatus (*allreduce_bucket)(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n,
                                const ApxAttrAllreduce *a);
  /* host-side barrier over all ranks */
  ApxStatus (*barrier)(ApxBackend *be);
  /* optional, all three or none (NULL: allreduce_bucket blocks): one gradient bucket without
   * blocking, so it overlaps the kernels launched before its wait. start reads every ins[i]
   * completely before it returns (the memory plan may reuse them right after the Allreduce
   * kernel) and keeps outs[i] (same dtypes and sizes; outs[i].data == ins[i].data is fine),
   * which only request_wait writes: the result equals allreduce_bucket's, bit for bit. */
  ApxStatus (*allreduce_bucket_start)(ApxBackend *be, ApxQueue *q, const ApxTensor *ins,
                                      const ApxTensor *outs, int32_t n, const ApxAttrAllreduce *a,
                                      ApxCollRequest **req);
  /* lets req progress (never blocks); *done = 1 once complete (outs not yet written) */
  ApxStatus (*request_test)(ApxBackend *be, ApxCollRequest *req, int *done);
  /* blocks until req completes (under the collective deadline), writes its outs (queued on
   * q) and releases req, also on failure */
  ApxStatus (*request_wait)(ApxBackend *be, ApxQueue *q, ApxCollRequest *req);

  /* optional: called once by the executor with every kernel of the plan as it will be
   * launched (device views), before the first launch: the backend may make per-product state
   * now (cuda: cuBLASLt descriptors and heuristic results) instead of at the first call.
   * Queues nothing. */
  ApxStatus (*prepare)(ApxBackend *be, const ApxKernelCall *calls, int32_t n);

  /* ---- device-side step counter (optional; NULL: kernels get ApxKernelCall.step by value,
   * as on cpu) ---- */
  /* queues the write of `step` into the backend's device-side Philox counter on q, which
   * later launches with call->step == step read (a captured graph replays with the value
   * written before each launch) */
  ApxStatus (*step_write)(ApxBackend *be, ApxQueue *q, int64_t step);

  /* ---- graph capture (optional, all four or none; NULL: not capturable, as on cpu) ---- */
  /* work queued on q from here on is recorded, not run (nothing may synchronize the host
   * or stage a host copy until capture_end) */
  ApxStatus (*capture_begin)(ApxBackend *be, ApxQueue *q);
  /* ends the capture and instantiates what was recorded into *g (NULL on failure: the
   * capture is ended either way) */
  ApxStatus (*capture_end)(ApxBackend *be, ApxQueue *q, ApxDevGraph **g);
  /* queues one replay of g on q */
  ApxStatus (*graph_launch)(ApxBackend *be, ApxQueue *q, ApxDevGraph *g);
  void (*graph_free)(ApxBackend *be, ApxDevGraph *g);
} ApxBackendI;

struct ApxBackend {
  ApxBackendI iface;   /* by value: a collective layer fills the collective slots */
  void *ctx;           /* backend-private state */
  void *coll_ctx;      /* collective layer's state */
  void (*coll_free)(ApxBackend *be); /* releases coll_ctx (apx_backend_free calls it) */
  int32_t rank, world; /* this process among the data-parallel ranks: 0 / 1 by default */
  char err[512];       /* one-line reason for the last non-OK status */
};

/* Releases a backend made by apx_backend_create (runtime/backend_registry.h); NULL is fine. */
void apx_backend_free(ApxBackend *be);

/* For a collective layer: installs its slots (NULL slots stay NULL) and world layout. */
void apx_backend_set_collectives(ApxBackend *be, const ApxBackendI *coll, void *coll_ctx,
                                 void (*coll_free)(ApxBackend *be), int32_t rank, int32_t world);

/* Records a formatted reason in be->err and returns st. */
ApxStatus apx_backend_fail(ApxBackend *be, ApxStatus st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The CPU backend (runtime/backend_cpu.c): launch = apx_cpu_run, synchronous queue. */
ApxStatus apx_backend_cpu_create(const ApxBackendConfig *cfg, ApxBackend **out);

#ifdef __cplusplus
}
#endif
#endif
