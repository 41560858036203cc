/* backend_registry.h - creates a backend by name (DESIGN.md 12: cpu, cuda). */
#ifndef APX_BACKEND_REGISTRY_H
#define APX_BACKEND_REGISTRY_H

#include <stddef.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the backend named name ("cpu"; "cuda" where built). Returns APX_STATUS_OK or an
 * error with a one-line reason in err (unknown name: APX_STATUS_BAD_INPUT). */
ApxStatus apx_backend_create(const char *name, const ApxBackendConfig *cfg, ApxBackend **out,
                             char *err, size_t cap);
/* Comma-separated names of the backends built in ("cpu" or "cpu,cuda"). */
const char *apx_backend_names(void);

#ifdef __cplusplus
}
#endif
#endif
