/* backend_cpu.c - the CPU backend: host memory, a synchronous queue, kernels through
 * apx_cpu_run (the reference kernels, kernels/cpu). No events: work is complete when a
 * call returns. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/backend.h"

typedef struct CpuCtx {
  ApxCpuCtx kctx;
  int queue_token;
} CpuCtx;

#define ALIGN 256

static void cpu_free(ApxBackend *be) {
  free(be->ctx);
  be->ctx = NULL;
}

static ApxStatus cpu_buffer_alloc(ApxBackend *be, size_t size, ApxDevBuffer *out) {
  size_t n = (size + ALIGN - 1) / ALIGN * ALIGN;
  if (n == 0) n = ALIGN;
  if (n < size) return apx_backend_fail(be, APX_STATUS_OOM, "allocation of %zu bytes overflows", size);
  void *p = aligned_alloc(ALIGN, n);
  if (!p) return apx_backend_fail(be, APX_STATUS_OOM, "out of host memory allocating %zu bytes", size);
  memset(p, 0, n);
  out->base = p;
  out->size = size;
  out->impl = NULL;
  return APX_STATUS_OK;
}

static void cpu_buffer_free(ApxBackend *be, ApxDevBuffer *buf) {
  free(buf->base);
  buf->base = NULL;
  buf->size = 0;
}

static ApxStatus cpu_memset(ApxBackend *be, ApxQueue *q, void *dst, int value, size_t n) {
  if (n) memset(dst, value, n);
  return APX_STATUS_OK;
}

static ApxStatus cpu_copy(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  if (n && dst != src) memmove(dst, src, n);
  return APX_STATUS_OK;
}

static ApxStatus cpu_queue_create(ApxBackend *be, ApxQueue **q) {
  *q = (ApxQueue *)&((CpuCtx *)be->ctx)->queue_token;
  return APX_STATUS_OK;
}

static void cpu_queue_destroy(ApxBackend *be, ApxQueue *q) {}

static ApxStatus cpu_queue_sync(ApxBackend *be, ApxQueue *q) { return APX_STATUS_OK; }

static ApxStatus cpu_launch(ApxBackend *be, ApxQueue *q, const ApxKernelCall *call) {
  CpuCtx *c = be->ctx;
  c->kctx.step = call->step;
  c->kctx.err[0] = 0;
  ApxStatus st = apx_cpu_run(&c->kctx, call->op, call->attrs, call->ins, call->n_in, call->outs,
                             call->n_out);
  if (st != APX_STATUS_OK)
    return apx_backend_fail(be, st, "%s", c->kctx.err[0] ? c->kctx.err : apx_status_name(st));
  return APX_STATUS_OK;
}

static int cpu_supports(ApxBackend *be, ApxOp op, ApxDType dt) { return apx_cpu_supports(op, dt); }

static const ApxBackendI cpu_iface = {
    .name = "cpu",
    .free = cpu_free,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .memset = cpu_memset,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .queue_create = cpu_queue_create,
    .queue_destroy = cpu_queue_destroy,
    .queue_sync = cpu_queue_sync,
    .launch = cpu_launch,
    .supports = cpu_supports,
};

ApxStatus apx_backend_cpu_create(const ApxBackendConfig *cfg, ApxBackend **out) {
  ApxBackend *be = calloc(1, sizeof *be);
  CpuCtx *c = calloc(1, sizeof *c);
  if (!be || !c) {
    free(be);
    free(c);
    *out = NULL;
    return APX_STATUS_OOM;
  }
  be->iface = cpu_iface;
  be->ctx = c;
  be->rank = 0;
  be->world = 1;
  apx_cpu_ctx_init(&c->kctx);
  c->kctx.n_threads = cfg->n_threads;
  c->kctx.seed = cfg->seed;
  *out = be;
  return APX_STATUS_OK;
}
