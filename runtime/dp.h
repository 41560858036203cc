/* dp.h - data parallelism in the training loop (DESIGN.md 11, 13): what one training step
 * does differently under `mpirun -np K apexrun PLAN --data DIR ...`.
 *
 * Each rank runs the same plan on its slice of every global batch (sampler.h: with
 * --no-shuffle global batch k is samples [kKB, (k+1)KB), rank r takes [kKB + rB, kKB + (r+1)B);
 * with shuffling every rank draws the same permutation from the same seed). The plan's
 * Allreduce kernels (passes/bucketing.h) sit right after the backward kernel that completes
 * their bucket, so running BACKWARD in plan order reduces each bucket as soon as it is
 * ready: on the cpu backend the collective blocks (the overlap is a no-op sequence), on a
 * backend with asynchronous queues the same launch order overlaps communication with the
 * rest of backward. Averaging (and --grad-predivide) happen inside the reduction.
 *
 * apx_dp_init (once, before the first step) with K > 1 ranks:
 *   - refuses a plan without gradient buckets (compiled with --disable-pass=bucketing, or
 *     an inference plan) with exit code 2;
 *   - installs the collective slots in the executor's backend (collective.h: MPI for cpu,
 *     NCCL for cuda); one process installs none, on any backend;
 *   - checks with one allgather that every rank runs the same plan (plan hash), the same
 *     data size and batch: "rank R runs plan hash H, rank 0 H0" (exit code 2).
 * apx_dp_run_optimizer replaces running the OPTIMIZER section: it queues it (no host
 *   synchronization: apx_exec_queue_range; the caller synchronizes once per step) up to and including
 *   UnscaleCheck, takes the maximum of found_inf over the ranks (so the loss-scaler decision
 *   is the same everywhere: an overflow on any rank makes every rank skip the step and halve
 *   its scale), then runs the rest (OptimizerStep skips itself when found_inf is set).
 *   Every gradient UnscaleCheck reads is already a reduced one, so found_inf agrees anyway;
 *   the extra 4-byte reduction makes the agreement not depend on it.
 * apx_dp_check_replicas gathers a CRC32C of every trained buffer (parameters, fp32
 *   masters, optimizer state, step counter, loss scale) plus the step and the scaler's
 *   scale from every rank and fails naming the first buffer that differs from rank 0's
 *   (exit code 1). BatchNorm running statistics are per rank without --sync-bn (each rank
 *   normalizes its own batch, as torch DDP with broadcast_buffers=False; rank 0's are the
 *   ones checkpointed) and are left out of the check then.
 * With one process (coll NULL or world 1) everything reduces to the plain loop. */
#ifndef APX_DP_H
#define APX_DP_H

#include <stdint.h>

#include "ir/diag.h"
#include "runtime/collective.h"
#include "runtime/exec.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxDp {
  ApxColl *coll;          /* NULL: one process */
  int32_t rank, world;
  int32_t split;          /* first OPTIMIZER kernel after UnscaleCheck, -1 when none */
  int32_t found_inf_buf;  /* UnscaleCheck's found_inf buffer, -1 */
  int64_t check_every;    /* replica check every N steps (0: at start and end only) */
  uint8_t *checked;       /* [n_bufs] 1: buffer is part of the replica check */
  int32_t n_checked;
} ApxDp;

/* batch: per-rank batch (first dim of the data inputs); n_samples: samples in --data. */
int apx_dp_init(ApxDp *dp, ApxColl *coll, ApxExec *ex, const ApxPlan *plan, int64_t n_samples,
                int64_t batch, int64_t check_every, ApxDiag *d);
void apx_dp_free(ApxDp *dp);

/* The OPTIMIZER section with found_inf agreed over the ranks, queued without a final host
 * synchronization (the caller's next sync completes it). Returns 0 or -1. */
int apx_dp_run_optimizer(ApxDp *dp, ApxExec *ex, ApxDiag *d);

/* Replica check after `step` optimizer steps with loss scale `scale`. quiet = 0 prints one
 * line on rank 0 when the replicas agree. Returns 0 or -1. */
int apx_dp_check_replicas(ApxDp *dp, ApxExec *ex, int64_t step, double scale, int quiet, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
