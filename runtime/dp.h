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
 * apx_dp_agree (once, after the data is open, before any checkpoint is read): one allgather
 *   of every setting the ranks must share, compared with rank 0's in this order: plan hash,
 *   sample count, batch, number of data files, the data digest (dataset.h: size, dtype, shape
 *   and every byte of each file), --steps, --seed, --no-shuffle, accumulation,
 *   --check-replicas, --checkpoint-dir (given or not: only rank 0 writes), --checkpoint-every,
 *   --resume, --export-onnx and --log (given or not), the run-time hyperparameters (--lr,
 *   --weight-decay, --clip-grad-norm, --lr-schedule, --warmup-steps, --total-steps: values
 *   and which are given). The first difference is named on every
 *   rank, e.g. "--steps: rank 1 has 20, rank 0 10: every rank needs the same settings (the
 *   same apexrun arguments)"; a data difference takes a second allgather of the per-file
 *   digests to name the file. Exit code 2 on every rank (apx_coll_mark_agreed_exit: no
 *   MPI_Abort, each rank prints its line). Settings that cannot change the result are not
 *   compared (--threads, --no-overlap, --collective-timeout, --quiet, --progress,
 *   --progress-every).
 * apx_dp_run_optimizer replaces running the OPTIMIZER section: it queues it (no host
 *   synchronization: apx_exec_queue_range; the caller synchronizes once per step) up to and including
 *   UnscaleCheck, takes the maximum of found_inf over the ranks (so the loss-scaler decision
 *   is the same everywhere: an overflow on any rank makes every rank skip the step and halve
 *   its scale), then runs the rest (OptimizerStep skips itself when found_inf is set).
 *   Every gradient UnscaleCheck reads is already a reduced one, so found_inf agrees anyway;
 *   the extra 4-byte reduction makes the agreement not depend on it. The same reduction
 *   carries dp->stop (stop.h: a SIGINT/SIGTERM on any rank), so every rank learns in the same
 *   step that one of them was asked to stop, and all stop after that step.
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
  float stop;             /* in: this rank's stop request before apx_dp_run_optimizer (a signal
                             number, 0: none); out: the maximum over the ranks (host memory:
                             the cpu backend's reduction; K > 1 ranks only) */
} ApxDp;

/* What every rank must agree on before the first step (apx_dp_agree). */
typedef struct ApxDpSettings {
  int64_t n_samples, batch;       /* per-rank batch */
  int32_t n_inputs;               /* data files */
  uint64_t data_digest;           /* dataset.h */
  const uint64_t *file_digests;   /* [n_inputs] */
  char *const *file_paths;        /* [n_inputs], for the message */
  int64_t steps;
  uint64_t seed;                  /* sampler seed (also the Dropout key) */
  int64_t order;                  /* ApxSampleOrder */
  int64_t accumulate, check_replicas;
  int64_t checkpoint_dir;         /* 1: given */
  int64_t checkpoint_every;
  int64_t resume;                 /* 0, 1 (--resume), 2 (--resume=auto) */
  int64_t export_onnx, log;       /* 1: given */
  /* the run-time hyperparameters this run trains with (train.h ApxHparams: the plan's or
   * the command line's) and which were given: a resume continues with a checkpoint's value
   * only where the flag is not given, so both must agree */
  double lr, weight_decay, clip_grad_norm;
  int64_t lr_schedule, warmup, total;
  uint64_t hp_given;
} ApxDpSettings;

int apx_dp_init(ApxDp *dp, ApxColl *coll, ApxExec *ex, const ApxPlan *plan, int64_t check_every,
                ApxDiag *d);
void apx_dp_free(ApxDp *dp);

/* The start-up agreement (above). Returns 0, or -1 (code 2 for a difference, with the
 * collective layer marked for an agreed exit; code 1 when the exchange itself failed). */
int apx_dp_agree(ApxDp *dp, const ApxPlan *plan, const ApxDpSettings *s, ApxDiag *d);

/* The OPTIMIZER section with found_inf (and dp->stop) agreed over the ranks, queued without
 * a final host synchronization (the caller's next sync completes it). Returns 0 or -1. */
int apx_dp_run_optimizer(ApxDp *dp, ApxExec *ex, ApxDiag *d);

/* Replica check after `step` optimizer steps with loss scale `scale`. quiet = 0 prints one
 * line on rank 0 when the replicas agree. Returns 0 or -1. */
int apx_dp_check_replicas(ApxDp *dp, ApxExec *ex, int64_t step, double scale, int quiet, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
