/* collective_nccl.h - NCCL collectives for the CUDA backend, bootstrapped over MPI
 * (DESIGN.md 11, runtime/collective.h).
 *
 * Built only where CUDA is (bazel/cuda.bzl if_cuda: the library is empty otherwise) and
 * linked into apexrun there: apx_coll_attach gives a cuda backend under K > 1 ranks the slots
 * of apx_coll_attach_nccl (collective.h), which call these functions with the queue's stream
 * (blocking slots) or the communicator's own stream ordered by CUDA events (overlapped
 * buckets: start records an event on the queue, the NCCL stream waits for it, reduces, records
 * `done`; the wait makes the queue wait for `done`), and poll the queue under the collective
 * deadline before each host synchronization (apx_nccl_wait).
 * Numerics: NCCL sums fp16 / bf16 buckets in their own type (the MPI engine widens to fp32),
 * so K-rank results agree with one process within half rounding, not bit for bit; averaging
 * is PreMulSum(1 / K) and a sum with --grad-predivide but without averaging is "not supported
 * yet" (it needs a scaling kernel).
 *
 *   apx_nccl_init       rank 0 creates the NCCL unique id, apx_coll_broadcast sends it to
 *                       every rank (MPI, under the collective watchdog), each rank binds its
 *                       CUDA device and joins the communicator (ncclCommInitRank)
 *   apx_nccl_allreduce  in place on device tensors, queued on stream, one NCCL group per
 *                       call: SUM (ncclSum), MAX (ncclMax); pre/post scaling as
 *                       collective.h says, mapped to NCCL's ops: pre only -> PreMulSum(pre);
 *                       an average (post = 1 / world, or predivide with averaging, where
 *                       pre * post * world = 1) -> PreMulSum(1 / world); any other post scale
 *                       needs a scaling kernel: "not supported yet"
 *   apx_nccl_broadcast  ncclBroadcast per tensor
 *   apx_nccl_wait       host waits for stream with a deadline, polling ncclCommGetAsyncError;
 *                       past the deadline the communicator is aborted (ncclCommAbort) and an
 *                       error naming the operation and the wait is returned (the caller ends
 *                       the job with apx_coll_abort), so a hung peer never blocks forever
 * Every function returns 0 or -1 with "rank R of K: <op>: <NCCL/CUDA call> failed: <why>
 * (file:line)" in d (exit code 1). */
#ifndef APX_COLLECTIVE_NCCL_H
#define APX_COLLECTIVE_NCCL_H

#include <stdint.h>

#include "ir/diag.h"
#include "kernels/tensor.h"
#include "runtime/backend.h"
#include "runtime/collective.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxNccl ApxNccl;

int apx_nccl_init(ApxNccl **out, ApxColl *c, int32_t device, ApxDiag *d);
void apx_nccl_free(ApxNccl *n);

/* stream: a cudaStream_t (NULL: the legacy default stream) */
int apx_nccl_allreduce(ApxNccl *n, void *stream, ApxTensor *t, int32_t count, ApxReduceOp op, float pre,
                       float post, const char *what, ApxDiag *d);
int apx_nccl_broadcast(ApxNccl *n, void *stream, ApxTensor *t, int32_t count, int32_t root,
                       const char *what, ApxDiag *d);
int apx_nccl_wait(ApxNccl *n, void *stream, double timeout_s, const char *what, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
