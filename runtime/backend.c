/* backend.c - the helpers every backend shares (backend.h); the registry that creates a
 * backend by name is backend_registry.c. */
#include "runtime/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void apx_backend_free(ApxBackend *be) {
  if (!be) return;
  if (be->coll_free) be->coll_free(be);
  if (be->iface.free) be->iface.free(be);
  free(be);
}

void apx_backend_set_collectives(ApxBackend *be, const ApxBackendI *coll, void *coll_ctx,
                                 void (*coll_free)(ApxBackend *be), int32_t rank, int32_t world) {
  be->iface.allreduce = coll->allreduce;
  be->iface.broadcast = coll->broadcast;
  be->iface.allreduce_bucket = coll->allreduce_bucket;
  be->iface.barrier = coll->barrier;
  be->iface.allreduce_bucket_start = coll->allreduce_bucket_start;
  be->iface.request_test = coll->request_test;
  be->iface.request_wait = coll->request_wait;
  be->coll_ctx = coll_ctx;
  be->coll_free = coll_free;
  be->rank = rank;
  be->world = world;
}

ApxStatus apx_backend_fail(ApxBackend *be, ApxStatus st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(be->err, sizeof be->err, fmt, ap);
  va_end(ap);
  return st;
}
