/* scaler.c - dynamic/static loss-scale updates (scaler.h). */
#include "runtime/scaler.h"

#include <string.h>

int apx_scaler_init(ApxScaler *s, const ApxScalerConfig *cfg) {
  memset(s, 0, sizeof *s);
  s->cfg = *cfg;
  if (s->cfg.window < 1) s->cfg.window = 1;
  if (s->cfg.hysteresis < 1) s->cfg.hysteresis = 1;
  if (!(s->cfg.growth > 0)) s->cfg.growth = 2.0;    /* plans written before the option */
  if (!(s->cfg.backoff > 0)) s->cfg.backoff = 0.5;
  s->scale = cfg->init_scale;
  if (cfg->dynamic && s->scale > cfg->max_scale) s->scale = cfg->max_scale;
  if (cfg->dynamic && cfg->min_scale > 0 && s->scale < cfg->min_scale) s->scale = cfg->min_scale;
  s->hysteresis_left = s->cfg.hysteresis;
  return s->scale != cfg->init_scale;
}

int apx_scaler_update(ApxScaler *s, int found_inf) {
  int ev = 0;
  if (found_inf) {
    ev |= APX_SCALER_SKIPPED;
    s->n_overflows++;
    s->overflow_run++;
    if (s->overflow_run == APX_SCALER_COLLAPSE_RUN) ev |= APX_SCALER_WARN_RUN;
    if (s->cfg.dynamic) {
      s->clean = 0;
      if (s->hysteresis_left > 0) s->hysteresis_left--;
      if (s->hysteresis_left == 0) {
        double next = s->scale * s->cfg.backoff;
        if (s->cfg.min_scale > 0 && next < s->cfg.min_scale) next = s->cfg.min_scale;
        if (next != s->scale) ev |= APX_SCALER_BACKED_OFF;
        s->scale = next;
      }
    }
  } else {
    s->overflow_run = 0;
    if (s->cfg.dynamic && ++s->clean >= s->cfg.window) {
      double next = s->scale * s->cfg.growth;
      if (next > s->cfg.max_scale) next = s->cfg.max_scale;
      if (next != s->scale) ev |= APX_SCALER_GREW;
      s->scale = next;
      s->clean = 0;
      s->hysteresis_left = s->cfg.hysteresis;
    }
  }
  if (s->scale < 1.0) {
    if (!s->below_one_warned) ev |= APX_SCALER_WARN_BELOW_ONE;
    s->below_one_warned = 1;
  } else {
    s->below_one_warned = 0;
  }
  return ev;
}
