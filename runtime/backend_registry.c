/* backend_registry.c - the backends by name: "cpu" always, "cuda" where the CUDA backend
 * is linked (backend_registry.h). */
#include "runtime/backend_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef ApxStatus (*CreateFn)(const ApxBackendConfig *cfg, ApxBackend **out);

/* The CUDA backend (runtime/backend_cuda.c, target //runtime:backend_cuda) is linked only
 * into binaries built with CUDA; a weak reference keeps every other binary linkable. */
ApxStatus apx_backend_cuda_create(const ApxBackendConfig *cfg, ApxBackend **out)
    __attribute__((weak));

/* "cuda" in a binary without the CUDA backend: a backend shell carrying the reason. */
static ApxStatus cuda_create(const ApxBackendConfig *cfg, ApxBackend **out) {
  if (apx_backend_cuda_create) return apx_backend_cuda_create(cfg, out);
  *out = calloc(1, sizeof **out);
  if (*out) snprintf((*out)->err, sizeof (*out)->err, "this apexrun was built without CUDA");
  return APX_STATUS_BAD_INPUT;
}

static const struct {
  const char *name;
  CreateFn create;
} registry[] = {
    {"cpu", apx_backend_cpu_create},
    {"cuda", cuda_create},
};

const char *apx_backend_names(void) { return apx_backend_cuda_create ? "cpu,cuda" : "cpu"; }

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
