/* backend_cuda.h - the CUDA backend (runtime/backend_cuda.c), built only where nvcc was
 * detected (target //runtime:backend_cuda). backend.c registers it as "cuda" through a weak
 * reference: a binary that links //runtime:backend_cuda can run plans on GPUs; one that does
 * not answers `--device cuda` with "this apexrun was built without CUDA" (exit code 2).
 *
 * What it does (the vtable in backend.h):
 *   memory   cudaMalloc per buffer (the runtime asks for one arena and one persistent region),
 *            zeroed at allocation; kernels' temporaries come from the stream-ordered pool
 *   queues   one non-blocking CUDA stream each; work on a queue runs in order
 *   copies   host <-> device through a ring of pinned staging slots: an H2D copy is staged
 *            before the call returns (the host buffer may change right after), a D2H copy
 *            lands in the caller's buffer when the queue (or an event after it) is synchronized
 *   prepare  the plan's cuBLASLt products (kernels/cuda/lt_plan.h) get their descriptors and
 *            heuristic results when the plan is loaded, not at their first call
 *   launch   kernels/cuda (apx_cuda_run) on the queue's stream; errors found by kernels on the
 *            device (labels, gather indices) are reported by the next queue_sync, naming the
 *            kernel's node
 *   events   CUDA events (timing disabled)
 *   step     step_write queues the Philox counter into device memory (a one-thread kernel);
 *            a launch whose call->step equals the value written last has Dropout read it
 *            there, any other launch passes it by value (refused during a capture)
 *   graphs   capture_begin / capture_end (cudaStreamBeginCapture in thread-local mode,
 *            cudaStreamEndCapture, cudaGraphInstantiate), graph_launch (cudaGraphLaunch)
 *   collectives  left NULL: the NCCL layer (runtime/collective_nccl.c) installs them; it gets
 *            the stream of a queue with apx_backend_cuda_stream.
 * Every CUDA call is checked by a do { } while (0) macro that records the call text, file and
 * line in be->err (STYLE.md 7). */
#ifndef APX_BACKEND_CUDA_H
#define APX_BACKEND_CUDA_H

#include <stdint.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the backend on device cfg->device. No device: APX_STATUS_RUNTIME with
 * "no CUDA device found (cudaGetDeviceCount: <reason>)" in (*out)->err. */
ApxStatus apx_backend_cuda_create(const ApxBackendConfig *cfg, ApxBackend **out);

/* The cudaStream_t behind a queue of a cuda backend (for the NCCL layer). */
void *apx_backend_cuda_stream(ApxQueue *q);
/* The device ordinal of a cuda backend. */
int32_t apx_backend_cuda_device(const ApxBackend *be);
/* Times the host has blocked on the device since creation (stream and event
 * synchronizations, waits for a staging slot): a training step makes one (train.h). */
int64_t apx_backend_cuda_host_waits(const ApxBackend *be);
/* cuBLASLt heuristic queries made when the plan was loaded (prepare: one per distinct product
 * derived from the plan) and in all so far: equal after step 1 when every product was known. */
void apx_backend_cuda_lt_counts(const ApxBackend *be, int64_t *prefilled, int64_t *heuristic_calls);

#ifdef __cplusplus
}
#endif
#endif
