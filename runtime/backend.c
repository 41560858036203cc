/* backend.c - backend registry and the helpers every backend shares (backend.h). */
#include "runtime/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef ApxStatus (*CreateFn)(const ApxBackendConfig *cfg, ApxBackend **out);

static const struct {
  const char *name;
  CreateFn create;
} registry[] = {
    {"cpu", apx_backend_cpu_create},
    /* "cuda" registers here when the CUDA backend is built */
};

const char *apx_backend_names(void) { return "cpu"; }

ApxStatus apx_backend_create(const char *name, const ApxBackendConfig *cfg, ApxBackend **out,
                             char *err, size_t cap) {
  *out = NULL;
  ApxBackendConfig dflt = {0, 0, 0};
  if (!cfg) cfg = &dflt;
  for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
    if (strcmp(registry[i].name, name) != 0) continue;
    ApxStatus st = registry[i].create(cfg, out);
    if (st != APX_STATUS_OK) {
      snprintf(err, cap, "cannot start the %s backend: %s", name,
               *out && (*out)->err[0] ? (*out)->err : apx_status_name(st));
      apx_backend_free(*out);
      *out = NULL;
    }
    return st;
  }
  snprintf(err, cap, "unknown device '%s' (this build has: %s)", name, apx_backend_names());
  return APX_STATUS_BAD_INPUT;
}

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
