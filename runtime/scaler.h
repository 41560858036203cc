/* scaler.h - the loss-scale state machine (DESIGN.md 9), one per loss.
 *
 * Dynamic (Apex LossScaler / Megatron DynamicGradScaler with hysteresis):
 *   init: scale = the plan's loss_scale (2^16), clean = 0, hysteresis_left = hysteresis
 *   step without overflow: clean += 1; when clean reaches window (2000): scale =
 *       min(scale * growth (2), max_scale) (max 2^24), clean = 0, hysteresis_left = hysteresis
 *   step with overflow (found_inf): the step is skipped, clean = 0, hysteresis_left -= 1;
 *       when it reaches 0 (at once with hysteresis 1): scale = max(scale * backoff (0.5),
 *       min_scale)
 *       (min_scale 0: no floor) and hysteresis_left stays 0, so further overflows keep
 *       halving until the next growth restores it
 * Static: scale never changes; an overflowing step is still skipped (the optimizer kernel
 *   never applies non-finite gradients), which the log reports.
 * Collapse warnings (returned as events, printed by the trainer): the scale falls below 1,
 * or APX_SCALER_COLLAPSE_RUN consecutive steps overflowed. Ten halvings in a row take the
 * default 2^16 down to 64; a model whose half-precision gradients still overflow there has a
 * real problem (inf/nan in the forward, a diverging loss), not a scale that is too high. */
#ifndef APX_SCALER_H
#define APX_SCALER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APX_SCALER_COLLAPSE_RUN 10

typedef struct ApxScalerConfig {
  int32_t dynamic;          /* 1 dynamic, 0 static */
  double init_scale;
  double min_scale;         /* 0: no floor */
  double max_scale;
  int32_t window;           /* growth interval >= 1 */
  int32_t hysteresis;       /* >= 1 */
  double growth;            /* > 1 (GradScaler's growth_factor); <= 0: 2 */
  double backoff;           /* in (0, 1) (backoff_factor); <= 0: 0.5 */
} ApxScalerConfig;

typedef struct ApxScaler {
  ApxScalerConfig cfg;
  double scale;
  int64_t clean;            /* consecutive clean steps since the last change/overflow */
  int32_t hysteresis_left;
  int64_t overflow_run;     /* consecutive overflowing steps */
  int64_t n_overflows;      /* total */
  int32_t below_one_warned; /* 1 while the scale is below 1 and that was reported */
} ApxScaler;

/* What apx_scaler_update did (bit set). */
enum {
  APX_SCALER_SKIPPED = 1,        /* the step overflowed: the optimizer did not update */
  APX_SCALER_GREW = 2,
  APX_SCALER_BACKED_OFF = 4,
  APX_SCALER_WARN_BELOW_ONE = 8, /* the scale just fell below 1 */
  APX_SCALER_WARN_RUN = 16,      /* the APX_SCALER_COLLAPSE_RUN-th overflow in a row */
};

/* A dynamic scaler starts at init_scale clamped into [min_scale, max_scale] (Apex:
 * min(init, max)); returns 1 when it was clamped (s->scale differs from cfg->init_scale),
 * which the caller reports. A static scale is used as given. */
int apx_scaler_init(ApxScaler *s, const ApxScalerConfig *cfg);
/* Updates after a step whose gradients were (found_inf != 0) or were not finite. Returns
 * the APX_SCALER_* bits. s->scale is the scale for the next step. */
int apx_scaler_update(ApxScaler *s, int found_inf);

#ifdef __cplusplus
}
#endif
#endif
