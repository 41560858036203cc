/* checkpoint.h - training checkpoints (DESIGN.md 12): everything a run needs to continue bit
 * for bit, in one checksummed file written atomically.
 *
 * Content: the plan hash (a checkpoint from another plan is refused naming both hashes),
 * the training state (ApxTrainState: step, data position, sampler seed and order, scaler
 * state, Dropout step counter), and every persistent buffer that training changes: PARAM
 * (the model parameters, half copies at O2) and STATE (fp32 master weights, optimizer
 * moments, step counter, learning rate, loss scale, gradient accumulators, BatchNorm
 * running statistics), each by name with dtype and shape.
 *
 * File layout (little-endian):
 *   0   char  magic[8]  "APXCKPT\0"
 *   8   u32   version   APX_CHECKPOINT_VERSION (APX_CHECKPOINT_VERSION_LOSSES: several losses)
 *   12  u32   flags     0
 *   16  u64   plan_hash apx_plan_hash() of the plan that wrote it
 *   24  u64   file_size the whole file; anything else is a truncated/padded file
 *   32  u32   n_tensors
 *   36  u32   checksum  CRC32C of the whole file with these 4 bytes as zero
 *   40  u32   state_len bytes of the training-state block (8 per field: 67 in version 5,
 *                   which adds the other losses' scalers, 24 in version 4,
 *                   19 in version 3, which had no run-time hyperparameters, 18 in version 2,
 *                   which had no data digest either, 16 in version 1, which had no lr
 *                   schedule fields either)
 *   44  u8    reserved[20] zero (a nonzero byte is a corrupt checkpoint)
 *   64  training state: u64 fields in ApxTrainState order (doubles as their bits)
 *   then per tensor: u32 name_len, name bytes, u32 dtype, u32 rank, i64 dims[rank],
 *       u64 nbytes, zero padding to 64, nbytes of data, zero padding to 8
 *
 * Writing: D/.ckpt-STEP.apxckpt.tmp.PID, fsync, rename to D/ckpt-STEP.apxckpt (12-digit
 * step), fsync of D. A crash leaves at most a temporary file, which is never loaded; the
 * next successful write removes such leftovers (regular files named like a temporary file
 * whose PID is not a live process).
 * (Test hooks: the environment variable APX_TEST_CHECKPOINT_KILL_AT=STEP:BYTES makes the
 * writer SIGKILL its own process after BYTES bytes of step STEP's file;
 * APX_TEST_CHECKPOINT_SIGNALS_AT=STEP:BYTES sends it SIGINT then SIGTERM there instead.)
 * Reading (a bounded read, fileio.h: a FIFO, device or folder is refused at open) takes the
 * 64-byte header first and checks magic, version (1 to 5 are read), the declared size
 * against the file's, the plan hash, flags, state layout and reserved bytes, and that the
 * size is one a checkpoint of this plan can have; only then is the rest read (exactly the
 * declared size), the checksum checked and the state validated: loss scale finite and > 0,
 * every counter >= 0 (lr warmup -1 only in version 1), sample order known, overflow run <=
 * overflows, batches = step x accumulation = Dropout counter, and (version 4) the
 * hyperparameters finite and >= 0, the schedule known, only known bits given. Then every tensor against the
 * plan (name, dtype, shape, and that every saved buffer of the plan is present), then the
 * caller's check (train.c: settings, and ranges that depend on the plan's scaler and data),
 * all before touching the executor: a bad checkpoint changes nothing. Errors are one line
 * naming the file (exit code 2). */
#ifndef APX_CHECKPOINT_H
#define APX_CHECKPOINT_H

#include <stdint.h>

#include "ir/diag.h"
#include "runtime/exec.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_CHECKPOINT_VERSION 4u /* written; versions 3 (no run-time hyperparameters), 2 (no
                                     data digest either) and 1 (no lr schedule fields either)
                                     are still read */
#define APX_CHECKPOINT_VERSION_LOSSES 5u /* written by a plan with several losses (apexc
                                     --loss A,B): version 4's fields, then the count of the other
                                     losses' scalers and APX_CHECKPOINT_MORE_SCALERS scaler records
                                     (6 fields each, unused ones zero); state_len 536 */
#define APX_CHECKPOINT_MORE_SCALERS 7 /* losses 2..8 */

/* One more loss's scaler, as saved (the fields of the first loss's, in that order). */
typedef struct ApxCkptScaler {
  double scale;
  int64_t clean, hysteresis_left, overflow_run, overflows, below_one_warned;
} ApxCkptScaler;

/* The run's position and the loss scaler, as saved (fields in file order). */
typedef struct ApxTrainState {
  int64_t step;            /* optimizer steps completed */
  int64_t batches;         /* global (micro-)batches consumed = step * accumulate */
  int64_t epoch;           /* data position of the next batch: epoch ... */
  int64_t epoch_pos;       /* ... and index in that epoch's sample order */
  uint64_t sampler_seed;
  int64_t order;           /* ApxSampleOrder */
  int64_t world;           /* data-parallel ranks */
  int64_t accumulate;
  int64_t dropout_step;    /* Philox counter of the next micro-batch (= batches) */
  uint64_t dropout_seed;   /* Philox key */
  double scale;            /* loss scaler (scaler.h) */
  int64_t scale_clean;
  int64_t scale_hysteresis_left;
  int64_t scale_overflow_run;
  int64_t scale_overflows;
  int64_t scale_below_one_warned;
  int64_t lr_total;        /* lr schedule length T (lr_schedule.h); 0: unknown (version 1) */
  int64_t lr_warmup;       /* lr schedule warmup W; -1: unknown (version 1) */
  uint64_t data_digest;    /* the --data files (dataset.h digest); 0: unknown (versions 1, 2) */
  /* version 4: the hyperparameters the run trained with (train.h ApxHparams); older
   * checkpoints read as unknown (lr_schedule -1, the others NaN, hp_given 0): such a run
   * trained with its plan's values */
  double lr_base;          /* the schedule's base lr (apexc/apexrun --lr) */
  int64_t lr_schedule;     /* ApxLrSchedule; -1: unknown */
  double weight_decay;
  double max_grad_norm;    /* --clip-grad-norm, 0: off */
  uint64_t hp_given;       /* APX_HP_* bits given on that run's apexrun command line */
  /* version 5: the scalers of losses 2.. of a plan with several (the first loss's is above);
   * 0 in older checkpoints */
  int64_t n_more_scalers;
  ApxCkptScaler more[APX_CHECKPOINT_MORE_SCALERS];
} ApxTrainState;

/* 1 when buffer b is saved in checkpoints (persistent PARAM or STATE that owns its bytes). */
int apx_checkpoint_saves(const ApxPlanBuffer *b);

/* Identity of a plan file: CRC32C of its metadata (high 32 bits) and the file checksum
 * from its header (low 32 bits); 0 for a plan not read from a file. */
uint64_t apx_plan_hash(const ApxPlan *p);

/* Before training: creates dir if missing (with its parents, as the writer does), checks it
 * is a folder, and probes that a temporary file can be created in it (created, removed).
 * Returns 0 or -1 with "<dir>: cannot write checkpoints: <reason>" (code 2). */
int apx_checkpoint_dir_check(const char *dir, ApxDiag *d);

/* Writes dir/ckpt-STEP.apxckpt atomically (dir and its parents are created if missing).
 * *path_out (may be NULL) receives the malloc'ed final path. Returns 0 or -1 (code 1: I/O). */
int apx_checkpoint_write(const char *dir, const ApxTrainState *st, ApxExec *ex, char **path_out,
                         ApxDiag *d);

/* Optional check of the saved state before anything is uploaded: 0 accepts, -1 refuses
 * (with the error in d). */
typedef int (*ApxCheckpointCheck)(void *ctx, const ApxTrainState *st, const char *path, ApxDiag *d);

/* Reads path, validates it against ex's plan (and check, when not NULL) and, only when
 * everything is valid, uploads the tensors into ex and fills st. Returns 0 or -1 (code 2:
 * bad or foreign checkpoint). */
int apx_checkpoint_read(const char *path, ApxTrainState *st, ApxExec *ex, ApxCheckpointCheck check,
                        void *ctx, ApxDiag *d);

/* The newest dir/ckpt-STEP.apxckpt (largest STEP; temporary files are ignored): 1 and a
 * malloc'ed *path, 0 when there is none (or no dir), -1 on error. */
int apx_checkpoint_latest(const char *dir, char **path, int64_t *step, ApxDiag *d);

/* dir/ckpt-STEP.apxckpt, malloc'ed into *path. 0, or -1 (out of memory, *path NULL). */
int apx_checkpoint_path(const char *dir, int64_t step, char **path);
/* 1 when path names a file the writer may create or replace in dir: ckpt-*.apxckpt, or a
 * temporary (.ckpt-*) beside them; the folder compared as a file (fileio.h apx_same_file). */
int apx_checkpoint_owns_name(const char *dir, const char *path);

#ifdef __cplusplus
}
#endif
#endif
