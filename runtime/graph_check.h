/* graph_check.h - whether a training run can use CUDA Graph capture (apexrun --cuda-graph):
 * a plain decision on the run's settings, made before any device is started so that an
 * unsupported combination is refused (exit 2) ahead of "no CUDA device found".
 *
 * Capturable today: the cuda backend, one process, one micro-batch per step. The step is then
 * static: the same kernels on the same buffers every step (training plans have static
 * shapes: apexc binds every symbolic dimension), with the per-step values (lr, loss scales,
 * inputs, Dropout's step) uploaded to fixed device buffers before the graph launch and the
 * losses / found_inf / first_bad / norm_sq read back after it (train.h). Refused with
 * "not supported yet: --cuda-graph with ...": another backend (cpu has no graphs), K > 1
 * ranks (NCCL buckets on a second stream, host-side collective polls), gradient accumulation
 * (per-micro-batch inputs and steps inside one update). */
#ifndef APX_GRAPH_CHECK_H
#define APX_GRAPH_CHECK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxGraphUse {
  const char *device;  /* --device (NULL: cpu) */
  int32_t world;       /* ranks (mpirun -np K); 0 or 1: one process */
  int32_t accumulate;  /* micro-batches per step (apexc --accumulate); 0 or 1: none */
} ApxGraphUse;

/* 0 when a run with these settings can be captured; else 1 with the one-line refusal
 * ("not supported yet: --cuda-graph with ...") in why. */
int apx_graph_refusal(const ApxGraphUse *u, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
