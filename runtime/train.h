/* train.h - the training loop of `apexrun PLAN.apx --data DIR --steps N` (DESIGN.md 9, 12, 13).
 *
 * One optimizer step (apx_trainer_step), with one host synchronization (everything below is
 * queued; the losses, found_inf, first_bad and norm_sq come back in one transfer at the end):
 *   lr = schedule(step) -> apx_lr;  scaler's scale -> apx_loss_scale
 *   for each of the plan's --accumulate K micro-batches j:
 *     global batch k = step * K + j from the sampler (sampler.h), gathered from the dataset
 *     into the data inputs; Dropout's Philox counter = k; FORWARD (loss read), BACKWARD
 *   OPTIMIZER: UnscaleCheck (found_inf, first_bad, norm_sq), OptimizerStep (skips itself
 *     when found_inf), BN running statistics and accumulator resets (AssignState, run either
 *     way)
 *   the scaler updates (scaler.h); an overflow names the first parameter whose gradient was
 *   non-finite (UnscaleCheck's first_bad -> OptimizerStep's parameter i -> the model
 *   parameter, the master's origin at O2)
 * The step record holds what the log writes: step (1-based: the n-th update), loss (mean over
 * the K micro-batches), the loss scale used, skipped, overflow_at, grad_norm (unscaled,
 * sqrt(norm_sq); NaN on a skipped step), lr, ms.
 *
 * apx_train_run is the whole command: open the data, resume from the newest checkpoint
 * (--resume), run until --steps optimizer steps are done (a resumed run continues to the
 * same N), progress line per step on a terminal, JSON lines (--log, appended on resume),
 * checkpoints every --checkpoint-every steps and at the end, --export-onnx, one summary line.
 * Before training, --export-onnx and --checkpoint-dir are checked for writing and --log is
 * opened (exit code 2 when one cannot be written). A run whose every step overflowed exits
 * with 1 only when the scale cannot recover (static, below 1, at --min-loss-scale, or
 * APX_SCALER_COLLAPSE_RUN overflows in a row); during the scale's warm-up it warns and
 * completes (export included).
 *
 * Several losses (apexc --loss A,B; passes/autodiff.h): one LossScaleSeed per loss, each
 * with its own scale buffer (apx_loss_scale/<loss>) and its own UnscaleCheck, whose found_inf
 * drives that loss's scaler; the step skips when any loss overflowed (the final UnscaleCheck
 * of the summed gradients, which OptimizerStep reads, sees every non-finite contribution) and
 * only the scalers of the losses that overflowed back off (Apex num_losses / loss_id). The
 * record's loss is the sum of the losses, losses[] and loss_scales[] each one's; an overflow
 * names its loss. Each scaler's state is in the checkpoint (checkpoint.h version 5). Not
 * supported yet with several losses: data parallelism (K ranks; refused here).
 * rank/world select this process's slice of each global batch (sampler.h);
 * under mpirun cfg.coll (collective.h) carries them and dp.h adds what K ranks need:
 * gradient buckets reduced during BACKWARD, found_inf agreed before the update, replica
 * checks (every rank identical) after resume, every --check-replicas N steps and at the
 * end; only rank 0 prints, logs and writes checkpoints, every rank resumes from the same
 * checkpoint file. */
#ifndef APX_TRAIN_H
#define APX_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "ir/diag.h"
#include "kernels/attrs.h"
#include "runtime/checkpoint.h"
#include "runtime/dataset.h"
#include "runtime/dp.h"
#include "runtime/exec.h"
#include "runtime/lr_schedule.h"
#include "plan/plan.h"
#include "runtime/sampler.h"
#include "runtime/scaler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxProgress { APX_PROGRESS_AUTO = -1, APX_PROGRESS_OFF = 0, APX_PROGRESS_ON = 1 } ApxProgress;

/* --resume: the newest checkpoint of --checkpoint-dir; none there is an error (a mistyped
 * folder must not train from scratch). --resume=auto: starts from step 0 when there is none. */
typedef enum ApxResume { APX_RESUME_OFF = 0, APX_RESUME_ON = 1, APX_RESUME_AUTO = 2 } ApxResume;

/* Run-time hyperparameters (apexrun --lr, --weight-decay, --lr-schedule, --warmup-steps,
 * --total-steps, --clip-grad-norm): each one whose APX_HP_* bit is in `given` replaces the
 * plan's value for this run, without recompiling. The lr schedule's fields are step-time
 * scalars already (the runtime writes apx_lr before every step); weight decay and the
 * clipping norm are fixed for a run, so the trainer runs the OptimizerStep kernel with its
 * own copy of the kernel's typed attributes holding them (exec.h apx_exec_set_attrs): the
 * plan file, the kernel ABI and every backend stay as they are, and a step costs nothing
 * more. Values are rounded to fp32 as apexc stores them, so `apexrun --lr X` trains exactly
 * as a plan compiled with `apexc --lr X`. Checkpoints record the values a run trained with
 * and which were given (checkpoint.h, version 4): a resume without a flag continues with the
 * value its checkpoint's run was given; one whose flag contradicts the checkpoint is refused. */
enum {
  APX_HP_LR = 1,
  APX_HP_WEIGHT_DECAY = 2,
  APX_HP_SCHEDULE = 4,
  APX_HP_WARMUP = 8,
  APX_HP_TOTAL = 16,
  APX_HP_CLIP = 32,
  APX_HP_ALL = 63,
};
typedef struct ApxHparams {
  uint32_t given;            /* APX_HP_* bits */
  float lr, weight_decay, clip_grad_norm; /* clip 0: off */
  int32_t schedule;          /* ApxLrSchedule */
  int64_t warmup, total;     /* total >= 1 */
} ApxHparams;

/* The apexrun flag of one APX_HP_* bit ("--lr"). */
const char *apx_hparam_flag(uint32_t bit);

typedef struct ApxTrainConfig {
  const char *data_dir;
  int64_t steps;             /* train until this many optimizer steps are done */
  uint64_t seed;             /* sampler seed (and Dropout key when the plan has none) */
  int32_t seed_set;          /* 0: the plan's seed option */
  ApxSampleOrder order;
  int32_t rank, world;       /* 0 / 1 */
  const char *log_path;      /* JSON lines, NULL: none */
  const char *tensorboard_dir; /* TensorBoard event files (tensorboard.h), NULL: none */
  const char *ckpt_dir;
  int64_t ckpt_every;        /* 0: only at the end (when ckpt_dir is set) */
  int32_t resume;            /* ApxResume */
  const char *export_onnx;
  int32_t quiet;
  ApxProgress progress;
  int64_t progress_every;    /* > 0: a plain progress line every N steps (--progress-every) */
  FILE *out;                 /* progress and summary (stdout when NULL) */
  ApxHparams hp;             /* run-time overrides of the plan's hyperparameters */
  ApxExecConfig exec;
  struct ApxColl *coll;      /* data parallelism (dp.h, collective.h); NULL: one process.
                                rank and world must match it */
  int64_t check_replicas;    /* replica check every N steps under K ranks (0: start and end) */
  int32_t cuda_graph;        /* apexrun --cuda-graph: step 1 runs as usual, step 2 is captured as
                                a CUDA Graph, every step from 2 on is one graph launch (the
                                uploads before it, the readback after it; graph_check.h says
                                which runs are refused, exit 2, before the device starts) */
} ApxTrainConfig;

/* Why a step's loss or gradients were not finite (ApxStepRecord.cause). */
typedef enum ApxStepCause {
  APX_CAUSE_NONE = 0,
  APX_CAUSE_OVERFLOW = 1,    /* finite loss, non-finite gradients: the loss scale overflowed them
                                (a static scale <= 1: they are not finite at any scale) */
  APX_CAUSE_DATA = 2,        /* the batch holds a NaN/Inf input value (dataset.h) */
  APX_CAUSE_LOSS = 3,        /* the loss is not finite with finite inputs: the forward pass */
} ApxStepCause;

#define APX_TRAIN_MAX_LOSSES 8

typedef struct ApxStepRecord {
  int64_t step;              /* 1-based */
  int32_t n_losses;          /* 1, or a plan's several losses (--loss A,B) */
  const char *loss_names[APX_TRAIN_MAX_LOSSES]; /* several losses: each one's name, loss and */
  double losses[APX_TRAIN_MAX_LOSSES];          /* scale used (loss is their sum, loss_scale */
  double loss_scales[APX_TRAIN_MAX_LOSSES];     /* the first one's) */
  int32_t overflow_loss;     /* the first loss whose gradients overflowed, -1 */
  double loss, loss_scale, grad_norm, lr, ms;
  int32_t skipped;
  const char *overflow_at;   /* parameter name or NULL */
  ApxStepCause cause;        /* when the loss or a gradient was not finite */
  const char *reason;        /* the same in words (the log's "reason": "non-finite input:
                                data/x.npy sample 37 element 5 is nan"), NULL for a clean step;
                                valid until the next step */
  int32_t scaler_events;     /* APX_SCALER_* bits */
  int64_t overlap_kernels;   /* K > 1 ranks: kernels launched while a gradient bucket's
                                allreduce was in flight (0 with --no-overlap); one process: -1 */
} ApxStepRecord;

/* One loss of a plan with several (--loss A,B): its buffers and its own scaler. */
typedef struct ApxTrainLoss {
  const char *name;          /* the loss buffer's name */
  int32_t loss_buf, scale_buf, found_inf_buf, first_bad_buf;
  int32_t check_kernel;      /* its UnscaleCheck */
  ApxScaler scaler;          /* loss 0: the trainer's scaler (apx_trainer_scaler) */
} ApxTrainLoss;

typedef struct ApxTrainer {
  const ApxPlan *plan;
  ApxTrainConfig cfg;
  ApxExec ex;
  int32_t have_ex;
  ApxDataset ds;
  ApxSampler sampler;
  ApxScaler scaler;          /* the (first) loss's scaler */
  int32_t n_losses;          /* LossScaleSeed kernels: 1, or several (--loss A,B) */
  ApxTrainLoss losses[APX_TRAIN_MAX_LOSSES]; /* n_losses > 1 */
  ApxLrConfig lr;            /* the run's schedule: the plan's, or cfg.hp's overrides */
  ApxAttrOptimizer opt_attrs; /* OptimizerStep's attributes this run uses (weight decay,
                                 clipping from cfg.hp); the executor points at this copy */
  int32_t opt_kernel;        /* OptimizerStep's kernel index */
  uint32_t hp_given;         /* APX_HP_* values given at run time (this command line, or the
                                run a resumed checkpoint continues) */
  uint32_t hp_adopted;       /* of those, the ones taken from the resumed checkpoint */
  ApxDp dp;                  /* data-parallel hooks (dp.h) */
  int32_t accumulate;
  int32_t graph_state;       /* --cuda-graph: 0 off, 1 next step runs uncaptured (fills the
                                cuBLASLt / cuDNN caches), 2 next step is captured, 3 replayed */
  int32_t scale_clamped;     /* the plan's initial loss scale was outside [min, max] */
  int64_t step;              /* optimizer steps done */
  uint64_t sampler_seed;
  /* buffers */
  int32_t loss_buf, scale_buf, lr_buf, found_inf_buf, first_bad_buf, norm_sq_buf;
  int32_t n_params;
  const char **param_names;  /* [n_params] OptimizerStep order */
  /* host staging */
  int64_t *idx;              /* [batch] */
  void **host;               /* [n_inputs] one batch per input */
  void *loss_host;
  void *readback;            /* [accumulate + 3 (+ 3 per loss when several)] 8-byte slots: losses,
                                found_inf, first_bad, norm_sq (then each loss's loss, found_inf,
                                first_bad) */
  /* naming the cause of a non-finite step (only when the data holds a NaN/Inf) */
  ApxSampler global;         /* every rank's samples of a global batch: batch x world */
  int64_t *global_idx;       /* [batch x world] */
  char reason[640];          /* ApxStepRecord.reason */
} ApxTrainer;

void apx_train_config_init(ApxTrainConfig *c);

/* Loss i's scaler (0: t->scaler). */
ApxScaler *apx_trainer_scaler(ApxTrainer *t, int32_t i);

/* Checks the plan is a trainable plan (one loss, or several with their own scalers), creates
 * the executor and opens the dataset. total_steps of the lr schedule defaults to cfg->steps. Returns 0 or -1. */
int apx_trainer_init(ApxTrainer *t, const ApxPlan *plan, const ApxTrainConfig *cfg, ApxDiag *d);
void apx_trainer_free(ApxTrainer *t);

/* One optimizer step. Returns 0 or -1 (kernel failure: exit code 1). */
int apx_trainer_step(ApxTrainer *t, ApxStepRecord *rec, ApxDiag *d);

/* The trainer's position and scaler as a checkpoint state, and back (resume). */
void apx_trainer_state(const ApxTrainer *t, ApxTrainState *st);
/* Loads a checkpoint into the trainer: buffers, scaler and position. Refuses one written with
 * another sampler seed/order, world size or accumulation (code 2). */
int apx_trainer_load(ApxTrainer *t, const char *path, ApxDiag *d);
int apx_trainer_save(ApxTrainer *t, char **path_out, ApxDiag *d);

/* One JSON object (no newline) for rec into buf; returns the length. */
int apx_step_json(const ApxStepRecord *rec, char *buf, size_t cap);

/* The whole `apexrun PLAN --data ...` command. Returns the exit code (0, 1, 2); errors are
 * printed as one line on stderr. */
int apx_train_run(const ApxPlan *plan, const ApxTrainConfig *cfg);

#ifdef __cplusplus
}
#endif
#endif
