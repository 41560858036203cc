/* lr_schedule.h - the learning rate of each optimizer step (apexc --lr, --warmup-steps,
 * --lr-schedule constant|cosine|linear, --total-steps; stored in the plan's options).
 *
 * For optimizer step t = 0, 1, ... (the t-th update; t counts skipped steps too, as
 * PyTorch's schedulers step whether or not GradScaler skipped the update):
 *   warmup W > 0 and t < W:  lr = base * (t + 1) / W        (reaches base at t = W - 1)
 *   otherwise, with progress p = clamp((t - W) / max(1, T - W), 0, 1):
 *     constant: base;  cosine: base * 0.5 * (1 + cos(pi p));  linear: base * (1 - p)
 * T is the plan's total_steps, or, when the plan has none (0), the run's --steps. After T
 * the cosine and linear schedules stay at 0. Computed in double, stored as float (apx_lr). */
#ifndef APX_LR_SCHEDULE_H
#define APX_LR_SCHEDULE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxLrSchedule {
  APX_LR_CONSTANT = 0,
  APX_LR_COSINE = 1,
  APX_LR_LINEAR = 2,
} ApxLrSchedule;

typedef struct ApxLrConfig {
  double base;
  int64_t warmup;
  ApxLrSchedule schedule;
  int64_t total;
} ApxLrConfig;

double apx_lr_at(const ApxLrConfig *c, int64_t t);
const char *apx_lr_schedule_name(ApxLrSchedule s);

#ifdef __cplusplus
}
#endif
#endif
