/* progress.h - apexrun's progress line (DESIGN.md 12): step/total, loss, loss scale, lr,
 * samples/s, steps skipped so far and the time left, printed by rank 0 only.
 *
 *   step 120/200  loss 0.412345  scale 32768  lr 0.001  5321 samples/s  2 skipped  ETA 12s
 *
 * Two forms:
 *   APX_PROGRESS_FORM_TTY    one line updated in place ("\r", no newline until the run ends
 *                            or another message needs the line), at most every 50 ms, and on
 *                            every skipped step and the last one: stdout is a terminal (or
 *                            apexrun --progress)
 *   APX_PROGRESS_FORM_LINES  plain lines for a file, a pipe or mpirun's forwarding: one every
 *                            `every` steps (apexrun --progress-every N) or, without it, one when
 *                            APX_PROGRESS_PERIOD_S seconds have passed since the last; the last
 *                            step gets one too once any was printed (a short run prints none:
 *                            its summary says it all)
 * The values are the step record's (train.h: the loss scale the step used, as the --log row
 * has it); samples/s and the ETA come from the wall time since the first step of this run
 * (checkpoints and logging included), the ETA as remaining steps x seconds per step so far. */
#ifndef APX_PROGRESS_H
#define APX_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APX_PROGRESS_PERIOD_S 10.0
#define APX_PROGRESS_TTY_MS 50.0

typedef enum ApxProgressForm {
  APX_PROGRESS_FORM_NONE = 0,
  APX_PROGRESS_FORM_TTY = 1,
  APX_PROGRESS_FORM_LINES = 2,
} ApxProgressForm;

/* What one line shows. */
typedef struct ApxProgressValues {
  int64_t step, total;
  double loss, loss_scale, lr;
  double samples_per_s;      /* < 0: not known yet */
  int64_t skipped;           /* steps skipped so far in this run */
  double eta_s;              /* < 0: not known yet */
} ApxProgressValues;

typedef struct ApxProgressMeter {
  FILE *out;
  ApxProgressForm form;
  int64_t every;             /* LINES: a line every N steps; 0: by time */
  int64_t total, first_step; /* --steps, the step this run started from */
  double samples_per_step;   /* global: batch x ranks x accumulation */
  double t0_ms, last_ms;     /* start of this run's first step; last line printed */
  int32_t pending;           /* TTY: a line without its newline on the terminal */
  int32_t last_len;          /* TTY: its length */
  int64_t printed;           /* lines printed */
} ApxProgressMeter;

void apx_progress_init(ApxProgressMeter *m, FILE *out, ApxProgressForm form, int64_t every, int64_t total,
                       int64_t first_step, double samples_per_step, double t0_ms);
/* After step v->step (the other fields of v but samples/s and ETA filled in) at time now_ms:
 * prints when due (`force`: a skipped step). */
void apx_progress_step(ApxProgressMeter *m, ApxProgressValues *v, double now_ms, int force);
/* Ends a pending TTY line with its newline (before another message, and at the end). */
void apx_progress_break(ApxProgressMeter *m);
/* The line's text (no "\r", no newline) into buf; returns its length. */
int apx_progress_format(const ApxProgressValues *v, char *buf, size_t cap);
/* "12s", "3m05s", "1h02m", "?" for < 0. */
void apx_progress_eta(double s, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
