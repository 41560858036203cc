/* tensor.h - the tensor view every kernel receives, and the kernel status (ggml_status).
 * A view does not own its bytes: the runtime carves them from the arena (DESIGN.md 12). */
#ifndef APX_TENSOR_H
#define APX_TENSOR_H

#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxTensor {
  void *data;                  /* NULL for an absent optional input/output */
  ApxDType dtype;
  int32_t rank;
  int64_t dims[APX_MAX_RANK];  /* row-major, contiguous */
} ApxTensor;

typedef enum ApxStatus {
  APX_STATUS_OK = 0,
  APX_STATUS_BAD_INPUT,   /* the kernel's inputs break its contract (shape, dtype, attr) */
  APX_STATUS_UNSUPPORTED, /* "not supported yet": valid but unimplemented combination */
  APX_STATUS_OOM,
  APX_STATUS_RUNTIME,     /* backend failure (CUDA error, collective failure, ...) */
} ApxStatus;

static inline int64_t apx_tensor_numel(const ApxTensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

static inline size_t apx_tensor_bytes(const ApxTensor *t) {
  return (size_t)apx_tensor_numel(t) * apx_dtype_size(t->dtype);
}

const char *apx_status_name(ApxStatus s);

#ifdef __cplusplus
}
#endif
#endif
