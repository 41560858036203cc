/* lr_schedule.c - warmup + constant/cosine/linear (lr_schedule.h). */
#include "runtime/lr_schedule.h"

#include <math.h>

double apx_lr_at(const ApxLrConfig *c, int64_t t) {
  if (t < 0) t = 0;
  if (c->warmup > 0 && t < c->warmup) return c->base * (double)(t + 1) / (double)c->warmup;
  if (c->schedule == APX_LR_CONSTANT) return c->base;
  int64_t span = c->total - c->warmup;
  if (span < 1) span = 1;
  double p = (double)(t - c->warmup) / (double)span;
  if (p < 0) p = 0;
  if (p > 1) p = 1;
  if (c->schedule == APX_LR_COSINE) return c->base * 0.5 * (1.0 + cos(M_PI * p));
  return c->base * (1.0 - p);
}

const char *apx_lr_schedule_name(ApxLrSchedule s) {
  switch (s) {
    case APX_LR_CONSTANT: return "constant";
    case APX_LR_COSINE: return "cosine";
    case APX_LR_LINEAR: return "linear";
  }
  return "?";
}
