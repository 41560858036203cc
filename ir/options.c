/* options.c - option defaults and the Apex opt-level presets (DESIGN.md 5). */
#include "ir/options.h"

#include <stdio.h>
#include <string.h>

void apx_options_init(ApxOptions *o) {
  memset(o, 0, sizeof *o);
  o->opt_level = APX_O1;
  o->half = APX_DT_F16;
  o->cast_model_type = APX_DT_UNDEFINED;
  o->patch_lists = APX_TRI_UNSET;
  o->keep_batchnorm_fp32 = APX_TRI_UNSET;
  o->master_weights = APX_TRI_UNSET;
  o->loss_scale_mode = APX_LOSS_SCALE_DYNAMIC;
  o->loss_scale = 65536.0f;
  o->max_loss_scale = 16777216.0f;
  o->scale_window = 2000;
  o->hysteresis = 1;
  o->growth_factor = 2.0f;
  o->backoff_factor = 0.5f;
  o->ir_version_min = 7;
  o->opset_min = 13;
  o->training = 1;
  o->fold_max_mb = APX_FOLD_MAX_MB_DEFAULT;
  o->optimizer = APX_OPTIM_ADAMW;
  o->lr = 1e-3f;
  o->beta1 = 0.9f;
  o->beta2 = 0.999f;
  o->eps = 1e-8f;
  o->weight_decay = 0.01f; /* AdamW's; the preset makes it 0 for SGD unless set */
  o->accumulate = 1;
  o->seed = 0;
  o->bucket_mb = 25.0;
  o->first_bucket_mb = 1.0;
  o->grad_predivide = 1.0f;
  o->fusion_traffic = 1;
}

int apx_name_list_has(const ApxNameList *l, const char *name) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->items[i], name) == 0) return 1;
  return 0;
}

int apx_options_apply_preset(ApxOptions *o, char *err, size_t cap) {
  /* Apex's Properties setters reject these combinations with O1 (frontend.py). */
  if (o->opt_level == APX_O1 && o->keep_batchnorm_fp32 != APX_TRI_UNSET) {
    snprintf(err, cap, "--keep-batchnorm-fp32 with -O1: with opt level O1 the per-op lists "
                       "decide batchnorm's precision, so keep_batchnorm_fp32 must stay unset");
    return -1;
  }
  if (o->opt_level == APX_O1 && o->master_weights != APX_TRI_UNSET) {
    snprintf(err, cap, "--master-weights with -O1: it doesn't make sense to use master weights "
                       "with O1; with O1 the model weights themselves stay fp32");
    return -1;
  }
  switch (o->opt_level) {
    case APX_O0:
      o->cast_model_type = APX_DT_F32;
      if (o->patch_lists == APX_TRI_UNSET) o->patch_lists = APX_TRI_OFF;
      if (o->keep_batchnorm_fp32 == APX_TRI_UNSET) o->keep_batchnorm_fp32 = APX_TRI_OFF;
      if (o->master_weights == APX_TRI_UNSET) o->master_weights = APX_TRI_OFF;
      if (!o->loss_scale_set) {
        o->loss_scale_mode = APX_LOSS_SCALE_STATIC;
        o->loss_scale = 1.0f;
      }
      break;
    case APX_O1:
      o->cast_model_type = APX_DT_F32;
      if (o->patch_lists == APX_TRI_UNSET) o->patch_lists = APX_TRI_ON;
      o->keep_batchnorm_fp32 = APX_TRI_OFF;
      o->master_weights = APX_TRI_OFF;
      break;
    case APX_O2:
      o->cast_model_type = o->half;
      if (o->patch_lists == APX_TRI_UNSET) o->patch_lists = APX_TRI_OFF;
      if (o->keep_batchnorm_fp32 == APX_TRI_UNSET) o->keep_batchnorm_fp32 = APX_TRI_ON;
      if (o->master_weights == APX_TRI_UNSET) o->master_weights = APX_TRI_ON;
      break;
    case APX_O3:
      o->cast_model_type = o->half;
      if (o->patch_lists == APX_TRI_UNSET) o->patch_lists = APX_TRI_OFF;
      if (o->keep_batchnorm_fp32 == APX_TRI_UNSET) o->keep_batchnorm_fp32 = APX_TRI_OFF;
      if (o->master_weights == APX_TRI_UNSET) o->master_weights = APX_TRI_OFF;
      if (!o->loss_scale_set) {
        o->loss_scale_mode = APX_LOSS_SCALE_STATIC;
        o->loss_scale = 1.0f;
      }
      break;
  }
  /* bf16 has fp32's exponent range: loss scaling defaults to off (static 1). */
  if (o->half == APX_DT_BF16 && !o->loss_scale_set && o->opt_level != APX_O0) {
    o->loss_scale_mode = APX_LOSS_SCALE_STATIC;
    o->loss_scale = 1.0f;
  }
  /* Optimizer defaults follow PyTorch (DESIGN.md 13): weight decay 0.01 is AdamW's (and
   * apex FusedLAMB's); torch.optim.SGD's is 0. */
  if (o->optimizer == APX_OPTIM_SGD && !o->weight_decay_set) o->weight_decay = 0.0f;
  if (o->loss_scale_mode == APX_LOSS_SCALE_DYNAMIC && o->loss_scale_set == 0)
    o->loss_scale = 65536.0f;
  if (o->min_loss_scale < 0 || o->max_loss_scale <= 0 ||
      (o->min_loss_scale > 0 && o->min_loss_scale > o->max_loss_scale)) {
    snprintf(err, cap, "--min-loss-scale %g must not exceed --max-loss-scale %g",
             (double)o->min_loss_scale, (double)o->max_loss_scale);
    return -1;
  }
  return 0;
}
