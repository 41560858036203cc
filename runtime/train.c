/* train.c - the training loop (train.h). */
#include "runtime/train.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/attrs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/export_onnx.h"
#include "runtime/graph_check.h"
#include "ir/fileio.h"
#include "runtime/progress.h"
#include "runtime/stop.h"
#include "runtime/tensorboard.h"

void apx_train_config_init(ApxTrainConfig *c) {
  memset(c, 0, sizeof *c);
  c->order = APX_ORDER_SHUFFLE;
  c->world = 1;
  c->progress = APX_PROGRESS_AUTO;
  apx_exec_config_init(&c->exec);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static const char *plan_name(const ApxPlan *p) { return p->path ? p->path : "<plan>"; }

/* A plan with several losses (passes/autodiff.h): each LossScaleSeed's loss and scale, and
 * the UnscaleCheck that reads that scale (found_inf, first_bad). */
static int find_losses(ApxTrainer *t, ApxDiag *d) {
  const ApxPlan *p = t->plan;
  int32_t n = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const ApxPlanKernel *ks = &p->kernels[k];
    if (ks->op != APX_OP_LossScaleSeed) continue;
    ApxTrainLoss *l = &t->losses[n++];
    l->loss_buf = ks->n_in > 1 ? ks->in[0] : -1;
    l->scale_buf = ks->n_in > 1 ? ks->in[1] : -1;
    l->check_kernel = -1;
    for (int32_t u = 0; u < p->n_kernels && l->scale_buf >= 0; u++)
      if (p->kernels[u].op == APX_OP_UnscaleCheck && p->kernels[u].n_in > 0 && p->kernels[u].n_out > 2 &&
          p->kernels[u].in[0] == l->scale_buf)
        l->check_kernel = u;
    if (l->check_kernel < 0 || l->loss_buf < 0)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: malformed training step (LossScaleSeed %d has no "
                            "UnscaleCheck of its scale)", plan_name(p), (int)n - 1);
    const ApxPlanKernel *ku = &p->kernels[l->check_kernel];
    l->found_inf_buf = ku->out[APX_UNSCALE_OUT_FOUND_INF];
    l->first_bad_buf = ku->out[APX_UNSCALE_OUT_FIRST_BAD];
    l->name = p->bufs[l->loss_buf].name;
    const int32_t bufs[] = {l->scale_buf, l->found_inf_buf, l->first_bad_buf};
    for (int i = 0; i < 3; i++)
      if (p->bufs[bufs[i]].bytes != 4)
        return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: buffer '%s' is not a 4-byte scalar",
                              plan_name(p), p->bufs[bufs[i]].name);
    if (p->bufs[l->loss_buf].bytes != (int64_t)apx_dtype_size(p->bufs[l->loss_buf].dtype) ||
        !apx_dtype_is_float(p->bufs[l->loss_buf].dtype))
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the loss '%s' is not a float scalar",
                            plan_name(p), l->name);
  }
  return 0;
}

/* The name of the parameter whose gradient is input 1 + i of UnscaleCheck kernel k (its
 * unscaled output's origin: the model parameter, or the master's origin at O2), "?". */
static const char *checked_param(const ApxPlan *p, int32_t k, int32_t i) {
  const ApxPlanKernel *ku = &p->kernels[k];
  if (i < 0 || APX_UNSCALE_OUT_FIRST_GRAD + i >= ku->n_out) return "?";
  int32_t b = ku->out[APX_UNSCALE_OUT_FIRST_GRAD + i];
  const ApxPlanBuffer *pb = b >= 0 ? &p->bufs[b] : NULL;
  if (pb && pb->origin >= 0 && pb->origin < p->n_bufs) pb = &p->bufs[pb->origin];
  if (pb && (pb->flags & APX_VALF_MASTER) && pb->origin >= 0 && pb->origin < p->n_bufs) pb = &p->bufs[pb->origin];
  return pb ? pb->name : "?";
}

ApxScaler *apx_trainer_scaler(ApxTrainer *t, int32_t i) { return i <= 0 ? &t->scaler : &t->losses[i].scaler; }

/* The plan's training kernels: one LossScaleSeed, UnscaleCheck and OptimizerStep; or with
 * several losses one LossScaleSeed and UnscaleCheck per loss and the final UnscaleCheck. */
static int find_training_kernels(ApxTrainer *t, ApxDiag *d) {
  const ApxPlan *p = t->plan;
  int32_t seed = -1, unscale = -1, opt = -1, n_seed = 0, n_unscale = 0, n_opt = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    ApxOp op = p->kernels[k].op;
    if (op == APX_OP_LossScaleSeed) seed = k, n_seed++;
    if (op == APX_OP_UnscaleCheck) unscale = k, n_unscale++;
    if (op == APX_OP_OptimizerStep) opt = k, n_opt++;
  }
  if (!p->opts.training || n_seed == 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: the plan has no training graph (compiled with --inference?); "
                          "run it with 'apexrun infer' or recompile it with apexc", plan_name(p));
  if (n_seed > APX_TRAIN_MAX_LOSSES || n_opt > 1 || (n_seed == 1 && n_unscale > 1) ||
      (n_seed > 1 && n_unscale != n_seed + 1))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: malformed training step (%d LossScaleSeed, %d UnscaleCheck, %d "
                          "OptimizerStep kernels)", plan_name(p), n_seed, n_unscale, n_opt);
  if (n_opt == 0 || n_unscale == 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: the plan has no optimizer step (no trainable parameter reaches the "
                          "loss), nothing to train", plan_name(p));
  if (n_seed > 1) {
    /* several losses: the UnscaleCheck OptimizerStep reads is the final one (of the sum) */
    unscale = -1;
    for (int32_t k = 0; k < p->n_kernels; k++)
      if (p->kernels[k].op == APX_OP_UnscaleCheck && p->kernels[k].n_out > 0 &&
          p->kernels[opt].n_in > APX_OPTIM_IN_FOUND_INF &&
          p->kernels[k].out[APX_UNSCALE_OUT_FOUND_INF] == p->kernels[opt].in[APX_OPTIM_IN_FOUND_INF])
        unscale = k;
    if (unscale < 0 || find_losses(t, d)) {
      if (unscale < 0) apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: malformed training step (no "
                                      "UnscaleCheck feeds OptimizerStep)", plan_name(p));
      return -1;
    }
  }
  t->n_losses = n_seed;
  const ApxPlanKernel *ks = &p->kernels[seed], *ku = &p->kernels[unscale], *ko = &p->kernels[opt];
  const ApxAttrOptimizer *oa = ko->attrs;
  t->scale_buf = n_seed > 1 ? ku->in[0] : ks->n_in > 1 ? ks->in[1] : -1; /* several: the constant 1 */
  t->found_inf_buf = ku->n_out > 2 ? ku->out[APX_UNSCALE_OUT_FOUND_INF] : -1;
  t->first_bad_buf = ku->n_out > 2 ? ku->out[APX_UNSCALE_OUT_FIRST_BAD] : -1;
  t->norm_sq_buf = ku->n_out > 2 ? ku->out[APX_UNSCALE_OUT_NORM_SQ] : -1;
  t->lr_buf = ko->n_in > APX_OPTIM_IN_LR ? ko->in[APX_OPTIM_IN_LR] : -1;
  t->n_params = oa->n_params;
  if (t->scale_buf < 0 || t->found_inf_buf < 0 || t->first_bad_buf < 0 || t->norm_sq_buf < 0 ||
      t->lr_buf < 0 || ku->n_out - APX_UNSCALE_OUT_FIRST_GRAD != t->n_params ||
      ko->n_in < APX_OPTIM_IN_FIRST_GROUP + t->n_params || ku->in[0] != t->scale_buf)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: malformed training step (LossScaleSeed / UnscaleCheck / "
                          "OptimizerStep disagree)", plan_name(p));
  const int32_t want_bytes[] = {4, 4, 4, 4};
  const int32_t bufs[] = {t->scale_buf, t->found_inf_buf, t->first_bad_buf, t->norm_sq_buf};
  for (int i = 0; i < 4; i++)
    if (p->bufs[bufs[i]].bytes != want_bytes[i])
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: buffer '%s' is not a 4-byte scalar",
                            plan_name(p), p->bufs[bufs[i]].name);
  if (p->bufs[t->lr_buf].dtype != APX_DT_F32 || p->bufs[t->lr_buf].bytes != 4)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: buffer '%s' is not an fp32 scalar", plan_name(p),
                          p->bufs[t->lr_buf].name);
  t->param_names = calloc((size_t)t->n_params + 1, sizeof *t->param_names);
  if (!t->param_names) return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  for (int32_t i = 0; i < t->n_params; i++) {
    int32_t b = ko->in[APX_OPTIM_IN_FIRST_GROUP + i];
    const ApxPlanBuffer *pb = b >= 0 ? &p->bufs[b] : NULL;
    if (pb && (pb->flags & APX_VALF_MASTER) && pb->origin >= 0) pb = &p->bufs[pb->origin];
    t->param_names[i] = pb ? pb->name : "?";
  }
  t->lr.base = oa->lr;
  t->opt_kernel = opt;
  t->opt_attrs = *oa;
  return 0;
}

const char *apx_hparam_flag(uint32_t bit) {
  switch (bit) {
    case APX_HP_LR: return "--lr";
    case APX_HP_WEIGHT_DECAY: return "--weight-decay";
    case APX_HP_SCHEDULE: return "--lr-schedule";
    case APX_HP_WARMUP: return "--warmup-steps";
    case APX_HP_TOTAL: return "--total-steps";
    case APX_HP_CLIP: return "--clip-grad-norm";
  }
  return "?";
}

/* cfg->hp over the plan's hyperparameters (train.h ApxHparams): the lr schedule in t->lr,
 * weight decay and clipping in t->opt_attrs, which the executor runs OptimizerStep with. */
static int apply_hparams(ApxTrainer *t, const ApxTrainConfig *cfg, ApxDiag *d) {
  const ApxHparams *hp = &cfg->hp;
  const ApxPlanOptions *po = &t->plan->opts;
  t->hp_given = hp->given & APX_HP_ALL;
  if (hp->given & APX_HP_LR) t->lr.base = hp->lr;
  if (hp->given & APX_HP_SCHEDULE) t->lr.schedule = (ApxLrSchedule)hp->schedule;
  if (hp->given & APX_HP_WARMUP) t->lr.warmup = hp->warmup;
  if (hp->given & APX_HP_TOTAL) t->lr.total = hp->total;
  if (hp->given & APX_HP_WEIGHT_DECAY) t->opt_attrs.weight_decay = hp->weight_decay;
  if (hp->given & APX_HP_CLIP) t->opt_attrs.max_grad_norm = hp->clip_grad_norm;
  /* a schedule length that is given (here or in the plan) must hold the warmup, as apexc asks */
  int64_t total_set = hp->given & APX_HP_TOTAL ? hp->total : po->total_steps;
  if (total_set > 0 && t->lr.warmup > total_set && (hp->given & (APX_HP_WARMUP | APX_HP_TOTAL)))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "apexrun: %s %" PRId64 " is more than %s %" PRId64 "%s",
                          hp->given & APX_HP_WARMUP ? "--warmup-steps" : "the plan's --warmup-steps",
                          t->lr.warmup, hp->given & APX_HP_TOTAL ? "--total-steps" : "the plan's --total-steps",
                          total_set, " (the warmup is part of the lr schedule)");
  return 0;
}

int apx_trainer_init(ApxTrainer *t, const ApxPlan *plan, const ApxTrainConfig *cfg, ApxDiag *d) {
  memset(t, 0, sizeof *t);
  t->plan = plan;
  t->cfg = *cfg;
  t->loss_buf = plan->loss;
  if (find_training_kernels(t, d)) return -1;
  if (plan->loss < 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the plan has no loss", plan_name(plan));
  const ApxPlanOptions *po = &plan->opts;
  t->accumulate = po->accumulate > 1 ? po->accumulate : 1;
  t->lr.warmup = po->warmup_steps;
  t->lr.schedule = (ApxLrSchedule)po->schedule;
  if (po->schedule < 0 || po->schedule > 2)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: unknown lr schedule %d", plan_name(plan), po->schedule);
  t->lr.total = po->total_steps > 0 ? po->total_steps : cfg->steps;
  if (apply_hparams(t, cfg, d)) return -1;
  ApxScalerConfig sc = {po->loss_scale_mode == 1, po->loss_scale, po->min_loss_scale,
                        po->max_loss_scale, po->scale_window, po->hysteresis,
                        po->growth_factor, po->backoff_factor};
  t->scale_clamped = apx_scaler_init(&t->scaler, &sc);
  for (int32_t i = 1; i < t->n_losses; i++) apx_scaler_init(&t->losses[i].scaler, &sc);
  if (t->n_losses > 1 && cfg->world > 1)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet: several losses (%s, %s%s) with "
                          "data parallelism (%d ranks); run it as one process", plan_name(plan),
                          t->losses[0].name, t->losses[1].name, t->n_losses > 2 ? ", ..." : "", (int)cfg->world);
  t->sampler_seed = cfg->seed_set ? cfg->seed : po->seed;
  if (cfg->cuda_graph) { /* refused before the device starts (graph_check.h) */
    ApxGraphUse gu = {cfg->exec.device, cfg->world, t->accumulate};
    char why[400];
    if (apx_graph_refusal(&gu, why, sizeof why))
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s", plan_name(plan), why);
  }

  ApxExecConfig ec = cfg->exec;
  if (cfg->seed_set) { /* --seed 0 is a seed like any other */
    ec.seed = cfg->seed;
    ec.seed_set = 1;
  }
  if (apx_exec_init(&t->ex, plan, &ec, d)) return -1;
  t->have_ex = 1;
  apx_exec_set_attrs(&t->ex, t->opt_kernel, &t->opt_attrs); /* run-time weight decay, clipping */
  if (cfg->cuda_graph) {
    if (!apx_exec_can_capture(&t->ex))
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet: --cuda-graph on the %s backend",
                            plan_name(plan), t->ex.be->iface.name);
    t->graph_state = 1;
  }
  if (apx_dataset_open(&t->ds, plan, cfg->data_dir, d)) return -1;
  /* a (global) batch of distinct samples: fewer samples would repeat some within a batch */
  int64_t world = cfg->world > 1 ? cfg->world : 1;
  if (t->ds.n_samples < t->ds.batch * world) {
    if (world > 1)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "%s: %" PRId64 " samples, fewer than the global batch size %" PRId64
                            " (%" PRId64 " ranks x batch size %" PRId64 ")", t->ds.paths[0],
                            t->ds.n_samples, t->ds.batch * world, world, t->ds.batch);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %" PRId64 " samples, fewer than batch size %" PRId64,
                          t->ds.paths[0], t->ds.n_samples, t->ds.batch);
  }
  ApxSamplerConfig smp = {t->ds.n_samples, t->ds.batch, cfg->rank, cfg->world, t->sampler_seed, cfg->order};
  if (apx_sampler_init(&t->sampler, &smp, d)) return -1;
  if (t->ds.n_nonfinite > 0) {
    /* a step that is not finite looks for the NaN/Inf in every rank's samples (sampler.h: one
     * process with batch x world sees exactly what the ranks see together) */
    ApxSamplerConfig g = {t->ds.n_samples, t->ds.batch * world, 0, 1, t->sampler_seed, cfg->order};
    if (apx_sampler_init(&t->global, &g, d)) return -1;
    if (!(t->global_idx = calloc((size_t)(t->ds.batch * world), sizeof *t->global_idx)))
      return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  }
  if (apx_dp_init(&t->dp, cfg->coll, &t->ex, plan, cfg->check_replicas, d)) return -1;
  /* every rank the same settings and data, before anything is trained or read (dp.h) */
  ApxDpSettings agree = {t->ds.n_samples, t->ds.batch, t->ds.n_inputs, t->ds.digest, t->ds.digests,
                         t->ds.paths, cfg->steps, t->sampler_seed, cfg->order, t->accumulate,
                         cfg->check_replicas, cfg->ckpt_dir != NULL, cfg->ckpt_every, cfg->resume,
                         cfg->export_onnx != NULL, cfg->log_path != NULL,
                         t->lr.base, t->opt_attrs.weight_decay, t->opt_attrs.max_grad_norm,
                         t->lr.schedule, t->lr.warmup, t->lr.total, t->hp_given};
  if (apx_dp_agree(&t->dp, plan, &agree, d)) return -1;
  t->idx = calloc((size_t)t->ds.batch, sizeof *t->idx);
  t->host = calloc((size_t)t->ds.n_inputs, sizeof *t->host);
  t->loss_host = calloc(1, (size_t)plan->bufs[plan->loss].bytes + 8);
  if (!t->idx || !t->host || !t->loss_host) return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  /* the step's one host synchronization reads the loss of every micro-batch, found_inf,
   * first_bad and norm_sq together (apx_trainer_step) */
  int32_t n_slots = t->accumulate + 3 + (t->n_losses > 1 ? 3 * t->n_losses : 0);
  if (apx_exec_readback_init(&t->ex, n_slots, d)) return -1;
  t->readback = calloc((size_t)n_slots, 8);
  if (!t->readback) return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  for (int32_t i = 0; i < t->ds.n_inputs; i++) {
    t->host[i] = malloc((size_t)t->ds.batch * t->ds.sample_bytes[i] + 1);
    if (!t->host[i]) return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  }
  if (plan->bufs[plan->loss].bytes != (int64_t)apx_dtype_size(plan->bufs[plan->loss].dtype) ||
      !apx_dtype_is_float(plan->bufs[plan->loss].dtype))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the loss '%s' is not a float scalar",
                          plan_name(plan), plan->bufs[plan->loss].name);
  return 0;
}

void apx_trainer_free(ApxTrainer *t) {
  if (t->host)
    for (int32_t i = 0; i < t->ds.n_inputs; i++) free(t->host[i]);
  free(t->host);
  if (t->have_ex) apx_exec_free(&t->ex);
  apx_dp_free(&t->dp);
  apx_dataset_free(&t->ds);
  apx_sampler_free(&t->sampler);
  apx_sampler_free(&t->global);
  free(t->global_idx);
  free(t->idx);
  free(t->loss_host);
  free(t->readback);
  free(t->param_names);
  memset(t, 0, sizeof *t);
}

/* Queued without a synchronization (copy_h2d reads f before returning). */
static int write_f32(ApxTrainer *t, int32_t buf, double v, ApxDiag *d) {
  float f = (float)v;
  return apx_exec_write_async(&t->ex, buf, &f, 4, d);
}

/* Why step t->step (being completed: rec holds its loss, scale and overflow_at) was not
 * finite: its batches hold a NaN/Inf input (every rank's samples, dataset.h), or the loss is
 * not finite from finite inputs, or the loss is finite and only the gradients are not
 * (an overflow of the scaled gradients). rec->cause and rec->reason. Returns 0 or -1. */
static int name_cause(ApxTrainer *t, ApxStepRecord *rec, ApxDiag *d) {
  if (t->ds.n_nonfinite > 0) {
    const int64_t n = t->ds.batch * (t->cfg.world > 1 ? t->cfg.world : 1);
    for (int32_t j = 0; j < t->accumulate; j++) {
      ApxDataCulprit c;
      if (apx_sampler_batch(&t->global, t->step * t->accumulate + j, t->global_idx, d)) return -1;
      if (!apx_dataset_find_nonfinite(&t->ds, t->global_idx, n, &c)) continue;
      char what[480];
      apx_dataset_culprit_text(&t->ds, &c, what, sizeof what);
      rec->cause = APX_CAUSE_DATA;
      rec->overflow_at = NULL; /* the gradients follow the input: not an overflow */
      snprintf(t->reason, sizeof t->reason, "non-finite input: %s", what);
      rec->reason = t->reason;
      return 0;
    }
  }
  if (!isfinite(rec->loss)) {
    /* half-precision activations are the usual cause; apexc --explain lists them */
    const ApxPlanOptions *po = &t->plan->opts;
    char hint[160] = "";
    if (po->opt_level > 0 && po->half == APX_DT_F16)
      snprintf(hint, sizeof hint, " (at -O%d in float16: an activation beyond its range? apexc --explain shows "
               "which nodes run in half precision)", (int)po->opt_level);
    rec->cause = APX_CAUSE_LOSS;
    rec->overflow_at = NULL; /* the gradients follow the loss: not an overflow */
    snprintf(t->reason, sizeof t->reason, "non-finite loss (%s) from finite inputs: the forward pass produced it%s",
             isnan(rec->loss) ? "nan" : rec->loss > 0 ? "inf" : "-inf", hint);
  } else {
    rec->cause = APX_CAUSE_OVERFLOW;
    const char *who = rec->overflow_at ? rec->overflow_at : "?";
    /* several losses: the one whose gradients overflowed, at its own scale */
    int li = rec->overflow_loss;
    double at = li >= 0 ? rec->loss_scales[li] : rec->loss_scale;
    char of[320] = "";
    if (li >= 0) snprintf(of, sizeof of, " of loss '%s'", rec->loss_names[li]);
    if (!t->scaler.cfg.dynamic && at <= 1)
      snprintf(t->reason, sizeof t->reason, "non-finite gradient in '%s'%s (the loss is finite; at loss scale %g "
               "this is not a scaling overflow)", who, of, at);
    else
      snprintf(t->reason, sizeof t->reason, "gradient overflow in '%s'%s at loss scale %g", who, of, at);
  }
  rec->reason = t->reason;
  return 0;
}

/* Micro-batch j's kernels: FORWARD, its loss staged into readback slot j, BACKWARD. */
static int queue_micro_batch(ApxTrainer *t, int32_t j, ApxDiag *d) {
  const ApxPlan *p = t->plan;
  return apx_exec_queue_range(&t->ex, p->sec_begin[APX_SEC_FORWARD], p->sec_end[APX_SEC_FORWARD], d) ||
                 apx_exec_readback_stage(&t->ex, j, t->loss_buf, d) ||
                 apx_exec_queue_range(&t->ex, p->sec_begin[APX_SEC_BACKWARD], p->sec_end[APX_SEC_BACKWARD], d)
             ? -1
             : 0;
}

/* OPTIMIZER, then found_inf, first_bad, norm_sq (and each loss's scalars when several) staged
 * into the readback slots after the K losses. */
static int queue_update(ApxTrainer *t, ApxDiag *d) {
  const int32_t K = t->accumulate, NL = t->n_losses > 1 ? t->n_losses : 0;
  if (apx_dp_run_optimizer(&t->dp, &t->ex, d)) return -1; /* found_inf agreed over ranks */
  if (apx_exec_readback_stage(&t->ex, K, t->found_inf_buf, d) ||
      apx_exec_readback_stage(&t->ex, K + 1, t->first_bad_buf, d) ||
      apx_exec_readback_stage(&t->ex, K + 2, t->norm_sq_buf, d))
    return -1;
  for (int32_t i = 0; i < NL; i++) /* K is 1 with several losses (apexc refuses --accumulate) */
    if (apx_exec_readback_stage(&t->ex, K + 3 + 3 * i, t->losses[i].loss_buf, d) ||
        apx_exec_readback_stage(&t->ex, K + 4 + 3 * i, t->losses[i].found_inf_buf, d) ||
        apx_exec_readback_stage(&t->ex, K + 5 + 3 * i, t->losses[i].first_bad_buf, d))
      return -1;
  return 0;
}

/* --cuda-graph (one micro-batch; its inputs, lr, scales are queued as uploads already): the
 * first step runs its kernels as usual (cuBLASLt descriptors and algorithms, cuDNN's handle
 * and choices are made outside any capture), the second records them into a CUDA Graph,
 * and it and every later step launch that graph, the device-side Dropout step written
 * before each launch (exec.h). */
static int run_graphed(ApxTrainer *t, ApxDiag *d) {
  if (t->graph_state == 1) {
    if (queue_micro_batch(t, 0, d) || queue_update(t, d)) return -1;
    t->graph_state = 2;
    return 0;
  }
  if (t->graph_state == 2) {
    if (apx_exec_capture_begin(&t->ex, d)) return -1;
    if (queue_micro_batch(t, 0, d) || queue_update(t, d)) {
      ApxDiag ignored; /* the capture is ended either way; the first error is the one to report */
      apx_diag_init(&ignored);
      apx_exec_capture_end(&t->ex, &ignored);
      return -1;
    }
    if (apx_exec_capture_end(&t->ex, d)) return -1;
    t->graph_state = 3;
  }
  return apx_exec_graph_launch(&t->ex, d);
}

/* One optimizer step with one host synchronization: lr, scale and every micro-batch's inputs
 * are queued as copies, the sections as kernels, each loss and then found_inf / first_bad /
 * norm_sq are staged device-side into the readback slots, and one transfer + sync at the end
 * brings them all to the host. */
int apx_trainer_step(ApxTrainer *t, ApxStepRecord *rec, ApxDiag *d) {
  const ApxPlan *p = t->plan;
  memset(rec, 0, sizeof *rec);
  double t0 = now_ms();
  int64_t overlapped0 = t->ex.overlapped_total;
  double lr = apx_lr_at(&t->lr, t->step);
  double scale = t->scaler.scale;
  const int32_t NL = t->n_losses > 1 ? t->n_losses : 0; /* several losses: their own scales */
  if (write_f32(t, t->lr_buf, lr, d) || (NL == 0 && write_f32(t, t->scale_buf, scale, d))) return -1;
  for (int32_t i = 0; i < NL; i++)
    if (write_f32(t, t->losses[i].scale_buf, apx_trainer_scaler(t, i)->scale, d)) return -1;
  const int32_t K = t->accumulate;
  for (int32_t j = 0; j < K; j++) {
    int64_t k = t->step * K + j;
    if (apx_sampler_batch(&t->sampler, k, t->idx, d)) return -1;
    for (int32_t i = 0; i < t->ds.n_inputs; i++) {
      apx_dataset_gather(&t->ds, i, t->idx, t->ds.batch, t->host[i]);
      if (apx_exec_write_async(&t->ex, p->inputs[i], t->host[i], (size_t)p->bufs[p->inputs[i]].bytes, d))
        return -1;
    }
    apx_exec_set_step(&t->ex, k);
    if (t->graph_state) break; /* K is 1 (graph_check.h): the kernels are queued below */
    if (queue_micro_batch(t, j, d)) return -1;
  }
  if (t->graph_state ? run_graphed(t, d) : queue_update(t, d)) return -1;
  if (apx_exec_readback_fetch(&t->ex, K + 3 + 3 * NL, t->readback, d)) return -1;
  const uint8_t *rb = t->readback;
  double loss_sum = 0;
  const ApxPlanBuffer *lb = &p->bufs[t->loss_buf];
  for (int32_t j = 0; j < K; j++) {
    double l = 0;
    apx_cpu_convert(rb + 8 * j, lb->dtype, &l, APX_DT_F64, 1);
    loss_sum += l;
  }
  float found_inf = 0, norm_sq = 0;
  int32_t first_bad = -1;
  memcpy(&found_inf, rb + 8 * K, 4);
  memcpy(&first_bad, rb + 8 * (K + 1), 4);
  memcpy(&norm_sq, rb + 8 * (K + 2), 4);
  int overflow = found_inf != 0.0f;
  rec->n_losses = NL ? NL : 1;
  rec->overflow_loss = -1;
  rec->step = t->step + 1;
  rec->loss = loss_sum / K;
  rec->loss_scale = scale;
  rec->overflow_at = overflow && first_bad >= 0 && first_bad < t->n_params ? t->param_names[first_bad] : NULL;
  if (NL == 0) {
    rec->scaler_events = apx_scaler_update(&t->scaler, overflow);
  } else {
    /* each loss's scaler sees its own overflow; the step skips when any overflowed */
    rec->loss = 0;
    for (int32_t i = 0; i < NL; i++) {
      const ApxTrainLoss *l = &t->losses[i];
      const uint8_t *slot = rb + 8 * (K + 3 + 3 * i);
      float inf_i = 0;
      int32_t bad_i = -1;
      double li = 0;
      apx_cpu_convert(slot, p->bufs[l->loss_buf].dtype, &li, APX_DT_F64, 1);
      memcpy(&inf_i, slot + 8, 4);
      memcpy(&bad_i, slot + 16, 4);
      ApxScaler *sc = apx_trainer_scaler(t, i);
      rec->loss_names[i] = l->name;
      rec->losses[i] = li;
      rec->loss_scales[i] = sc->scale;
      rec->loss += li;
      if (inf_i != 0.0f && rec->overflow_loss < 0) {
        rec->overflow_loss = i;
        rec->overflow_at = checked_param(p, l->check_kernel, bad_i);
      }
      overflow |= inf_i != 0.0f;
      rec->scaler_events |= apx_scaler_update(sc, inf_i != 0.0f);
    }
    if (overflow) rec->scaler_events |= APX_SCALER_SKIPPED;
  }
  rec->skipped = overflow;
  rec->grad_norm = overflow ? NAN : sqrt((double)norm_sq);
  rec->lr = (double)(float)lr;
  if ((overflow || !isfinite(rec->loss)) && name_cause(t, rec, d)) return -1;
  t->step++;
  rec->ms = now_ms() - t0;
  rec->overlap_kernels = t->dp.world > 1 ? t->ex.overlapped_total - overlapped0 : -1;
  return 0;
}

void apx_trainer_state(const ApxTrainer *t, ApxTrainState *st) {
  memset(st, 0, sizeof *st);
  st->step = t->step;
  st->batches = t->step * t->accumulate;
  apx_sampler_position(&t->sampler, st->batches, &st->epoch, &st->epoch_pos);
  st->sampler_seed = t->sampler_seed;
  st->order = t->cfg.order;
  st->world = t->cfg.world;
  st->accumulate = t->accumulate;
  st->dropout_step = st->batches;
  st->dropout_seed = t->cfg.seed_set ? t->cfg.seed : t->plan->opts.seed;
  st->scale = t->scaler.scale;
  st->scale_clean = t->scaler.clean;
  st->scale_hysteresis_left = t->scaler.hysteresis_left;
  st->scale_overflow_run = t->scaler.overflow_run;
  st->scale_overflows = t->scaler.n_overflows;
  st->scale_below_one_warned = t->scaler.below_one_warned;
  st->n_more_scalers = t->n_losses > 1 ? t->n_losses - 1 : 0; /* several losses: version 5 */
  for (int32_t i = 1; i < t->n_losses && i <= APX_CHECKPOINT_MORE_SCALERS; i++) {
    const ApxScaler *sc = &t->losses[i].scaler;
    st->more[i - 1] = (ApxCkptScaler){sc->scale, sc->clean, sc->hysteresis_left, sc->overflow_run,
                                      sc->n_overflows, sc->below_one_warned};
  }
  st->lr_total = t->lr.total;
  st->lr_warmup = t->lr.warmup;
  st->data_digest = t->ds.digest;
  st->lr_base = t->lr.base;
  st->lr_schedule = t->lr.schedule;
  st->weight_decay = t->opt_attrs.weight_decay;
  st->max_grad_norm = t->opt_attrs.max_grad_norm;
  st->hp_given = t->hp_given;
}

int apx_trainer_save(ApxTrainer *t, char **path_out, ApxDiag *d) {
  ApxTrainState st;
  apx_trainer_state(t, &st);
  return apx_checkpoint_write(t->cfg.ckpt_dir, &st, &t->ex, path_out, d);
}

/* ---- run-time hyperparameters on resume ------------------------------------------------ */

/* The hyperparameters a resume from st trains with (train.h ApxHparams): a value given on
 * this command line; else the one the checkpoint's run was given on its command line (a
 * resume need not repeat the flags); else the plan's (the schedule's length: the plan's
 * --total-steps, or --steps). As a state: lr_base, lr_schedule, lr_warmup, lr_total,
 * weight_decay, max_grad_norm, hp_given; *adopted: the bits taken from st. */
static void resume_hparams(const ApxTrainer *t, const ApxTrainState *st, ApxTrainState *h, uint32_t *adopted) {
  apx_trainer_state(t, h);
  uint32_t take = (uint32_t)st->hp_given & ~t->cfg.hp.given & APX_HP_ALL;
  if (take & APX_HP_LR) h->lr_base = st->lr_base;
  if (take & APX_HP_SCHEDULE) h->lr_schedule = st->lr_schedule;
  if (take & APX_HP_WARMUP) h->lr_warmup = st->lr_warmup;
  if (take & APX_HP_TOTAL) h->lr_total = st->lr_total;
  if (take & APX_HP_WEIGHT_DECAY) h->weight_decay = st->weight_decay;
  if (take & APX_HP_CLIP) h->max_grad_norm = st->max_grad_norm;
  h->hp_given |= take;
  *adopted = take;
}

/* "--lr 0.01" for bit of state s. */
static void hparam_text(uint32_t bit, const ApxTrainState *s, char *buf, size_t cap) {
  const char *f = apx_hparam_flag(bit);
  switch (bit) {
    case APX_HP_LR: snprintf(buf, cap, "%s %g", f, s->lr_base); break;
    case APX_HP_SCHEDULE: snprintf(buf, cap, "%s %s", f, apx_lr_schedule_name((ApxLrSchedule)s->lr_schedule)); break;
    case APX_HP_WARMUP: snprintf(buf, cap, "%s %" PRId64, f, s->lr_warmup); break;
    case APX_HP_TOTAL: snprintf(buf, cap, "%s %" PRId64, f, s->lr_total); break;
    case APX_HP_WEIGHT_DECAY: snprintf(buf, cap, "%s %g", f, s->weight_decay); break;
    case APX_HP_CLIP: snprintf(buf, cap, "%s %g", f, s->max_grad_norm); break;
    default: snprintf(buf, cap, "?");
  }
}

/* The first hyperparameter (in APX_HP_* order) in which the checkpoint st contradicts what a
 * resume would train with (h), as "--lr 0.01, this run gives --lr 0.02; resume with ..." in
 * msg; 0 when none. The schedule's length counts only for a decaying schedule, and when this
 * run sets it from --steps (no --total-steps anywhere) the caller says more. The warmup and
 * the length are not compared where st does not record them (version 1). */
static int hparam_conflict(const ApxTrainer *t, const ApxTrainState *st, const ApxTrainState *h,
                           int total_from_steps, char *msg, size_t cap) {
  for (uint32_t bit = 1; bit & APX_HP_ALL; bit <<= 1) {
    int differs = 0;
    switch (bit) {
      case APX_HP_LR: differs = st->lr_base != h->lr_base; break;
      case APX_HP_SCHEDULE: differs = st->lr_schedule != h->lr_schedule; break;
      case APX_HP_WARMUP: differs = st->lr_warmup >= 0 && st->lr_warmup != h->lr_warmup; break;
      case APX_HP_TOTAL:
        differs = h->lr_schedule != APX_LR_CONSTANT && st->lr_total > 0 && st->lr_total != h->lr_total &&
                  !total_from_steps;
        break;
      case APX_HP_WEIGHT_DECAY: differs = st->weight_decay != h->weight_decay; break;
      case APX_HP_CLIP: differs = st->max_grad_norm != h->max_grad_norm; break;
    }
    if (!differs) continue;
    char was[96], now[96];
    hparam_text(bit, st, was, sizeof was);
    hparam_text(bit, h, now, sizeof now);
    const char *f = apx_hparam_flag(bit);
    if (t->cfg.hp.given & bit) {
      /* without the flag the checkpoint's value is used, except a length that came from its
       * run's --steps */
      int without = bit != APX_HP_TOTAL || (st->hp_given & bit) || t->plan->opts.total_steps > 0;
      snprintf(msg, cap, "%s, this run gives %s (a resume continues the run it saved); resume with %s%s%s",
               was, now, was, without ? ", or without " : "", without ? f : "");
    } else {
      snprintf(msg, cap, "%s, this run's plan has %s; resume with %s", was, strchr(now, ' ') + 1, was);
    }
    return 1;
  }
  return 0;
}

/* Refuses a checkpoint whose run settings differ from this run's, or whose scaler and data
 * position this plan cannot have produced (before any upload). */
static int check_settings(void *ctx, const ApxTrainState *st_in, const char *path, ApxDiag *d) {
  const ApxTrainer *t = ctx;
  ApxTrainState st_full = *st_in, mine_st;
  const ApxTrainState *st = &st_full;
  if (st_full.lr_schedule < 0) {
    /* a checkpoint older than version 4 was trained with the plan's hyperparameters (there
     * were no run-time ones): compared as such */
    const ApxAttrOptimizer *pa = t->plan->kernels[t->opt_kernel].attrs;
    st_full.lr_base = pa->lr;
    st_full.lr_schedule = t->plan->opts.schedule;
    st_full.weight_decay = pa->weight_decay;
    st_full.max_grad_norm = pa->max_grad_norm;
  }
  uint32_t adopted;
  resume_hparams(t, st, &mine_st, &adopted); /* the settings a resume from st trains with */
  const ApxTrainState *mine = &mine_st;
  const ApxScalerConfig *sc = &t->scaler.cfg;
  /* the lr schedule's length only matters when the lr decays over it (lr_schedule.h);
   * lr_total 0 / lr_warmup -1: a version 1 checkpoint, which did not record them. It is
   * --steps when neither the plan nor either run's command line set it */
  int decays = mine->lr_schedule != APX_LR_CONSTANT;
  int total_from_steps = t->plan->opts.total_steps <= 0 && !(mine->hp_given & APX_HP_TOTAL);
  char msg[480];
  if (hparam_conflict(t, st, mine, total_from_steps, msg, sizeof msg)) {
    /* msg names the hyperparameter */
  } else if (st->sampler_seed != mine->sampler_seed)
    snprintf(msg, sizeof msg, "data seed %" PRIu64 ", this run %" PRIu64 " (--seed); resume with --seed %"
             PRIu64, st->sampler_seed, mine->sampler_seed, st->sampler_seed);
  else if (st->order != mine->order)
    snprintf(msg, sizeof msg, "%s", st->order == APX_ORDER_FILE
             ? "batches in file order (--no-shuffle), this run shuffles them; resume with --no-shuffle"
             : "shuffled batches, this run reads them in file order (--no-shuffle); resume without "
               "--no-shuffle");
  else if (st->world != mine->world)
    snprintf(msg, sizeof msg, "%" PRId64 " ranks, this run %" PRId64 " (not supported yet: resuming on "
             "another number of ranks); resume with mpirun -np %" PRId64, st->world, mine->world, st->world);
  else if (st->accumulate != mine->accumulate)
    snprintf(msg, sizeof msg, "accumulation %" PRId64 " (apexc --accumulate), this plan accumulates %" PRId64
             "; resume with the plan that wrote it", st->accumulate, mine->accumulate);
  else if (st->dropout_seed != mine->dropout_seed)
    snprintf(msg, sizeof msg, "Dropout seed %" PRIu64 ", this run %" PRIu64 " (--seed); resume with --seed %"
             PRIu64, st->dropout_seed, mine->dropout_seed, st->dropout_seed);
  else if (st->data_digest && st->data_digest != mine->data_digest)
    snprintf(msg, sizeof msg, "other data (digest %016" PRIx64 " of its --data files, %s has %016" PRIx64
             ": a file changed, was replaced or regenerated); resume with the data it was trained on",
             st->data_digest, t->cfg.data_dir ? t->cfg.data_dir : "this run's --data", mine->data_digest);
  else if (decays && total_from_steps && st->lr_total > 0 && st->lr_total != mine->lr_total) {
    /* its own message: "the same settings" would be resuming at the checkpoint's length */
    const char *sn = apx_lr_schedule_name((ApxLrSchedule)mine->lr_schedule);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: the checkpoint's %s lr schedule runs over %" PRId64 " steps, this run "
                          "asks for %" PRId64 " (--steps sets the length when there is no "
                          "--total-steps); to train longer with a %s schedule, start over with "
                          "--total-steps (apexc or apexrun), or resume with --steps %" PRId64,
                          path, sn, st->lr_total, mine->lr_total, sn, st->lr_total);
  } else {
    /* what this plan's scaler and this data cannot produce: a corrupt (crafted) state */
    int64_t epoch, pos;
    apx_sampler_position(&t->sampler, st->batches, &epoch, &pos);
    int64_t more = t->n_losses > 1 ? t->n_losses - 1 : 0;
    const ApxCkptScaler *bad = NULL; /* another loss's scaler out of this plan's range */
    for (int64_t i = 0; i < st->n_more_scalers && i < more && !bad; i++) {
      const ApxCkptScaler *m = &st->more[i];
      if ((sc->dynamic && (m->scale > sc->max_scale || (sc->min_scale > 0 && m->scale < sc->min_scale))) ||
          (!sc->dynamic && m->scale != t->scaler.cfg.init_scale) || m->clean >= sc->window ||
          m->hysteresis_left > sc->hysteresis)
        bad = m;
    }
    if (st->n_more_scalers != more) {
      /* not corrupt: a checkpoint of another plan would have another hash; say it plainly */
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the checkpoint holds %" PRId64 " loss scaler%s, this "
                            "plan trains %" PRId64 " loss%s", path, st->n_more_scalers + 1,
                            st->n_more_scalers ? "s" : "", more + 1, more ? "es" : "");
    } else if (bad)
      snprintf(msg, sizeof msg, "loss scaler %d (scale %g, %" PRId64 " clean steps, hysteresis %" PRId64 ") "
               "outside this plan's scaler settings", (int)(bad - st->more) + 2, bad->scale, bad->clean,
               bad->hysteresis_left);
    else if (sc->dynamic && (st->scale > sc->max_scale || (sc->min_scale > 0 && st->scale < sc->min_scale)))
      snprintf(msg, sizeof msg, "loss scale %g outside this plan's range [%g, %g]", st->scale,
               sc->min_scale, sc->max_scale);
    else if (!sc->dynamic && st->scale != t->scaler.scale)
      snprintf(msg, sizeof msg, "loss scale %g, but the plan's static loss scale is %g", st->scale,
               t->scaler.scale);
    else if (st->scale_clean >= sc->window)
      snprintf(msg, sizeof msg, "%" PRId64 " clean steps since the last scale change, the plan's "
               "window is %d", st->scale_clean, (int)sc->window);
    else if (st->scale_hysteresis_left > sc->hysteresis)
      snprintf(msg, sizeof msg, "hysteresis counter %" PRId64 ", the plan's hysteresis is %d",
               st->scale_hysteresis_left, (int)sc->hysteresis);
    else if (st->epoch != epoch || st->epoch_pos != pos)
      snprintf(msg, sizeof msg, "data position epoch %" PRId64 " sample %" PRId64 ", but batch %" PRId64
               " of %" PRId64 " samples starts at epoch %" PRId64 " sample %" PRId64, st->epoch,
               st->epoch_pos, st->batches, t->ds.n_samples, epoch, pos);
    else
      return 0;
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: corrupt checkpoint: invalid training state (%s)",
                          path, msg);
  }
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the checkpoint was trained with %s", path, msg);
}

int apx_trainer_load(ApxTrainer *t, const char *path, ApxDiag *d) {
  ApxTrainState st, h;
  if (apx_checkpoint_read(path, &st, &t->ex, check_settings, t, d)) return -1;
  /* the run-time hyperparameters the checkpoint's run was given and this one is not */
  resume_hparams(t, &st, &h, &t->hp_adopted);
  t->lr.base = h.lr_base;
  t->lr.schedule = (ApxLrSchedule)h.lr_schedule;
  t->lr.warmup = h.lr_warmup;
  t->lr.total = h.lr_total;
  t->opt_attrs.weight_decay = (float)h.weight_decay;
  t->opt_attrs.max_grad_norm = (float)h.max_grad_norm;
  t->hp_given = (uint32_t)h.hp_given;
  t->step = st.step;
  t->scaler.scale = st.scale;
  t->scaler.clean = st.scale_clean;
  t->scaler.hysteresis_left = (int32_t)st.scale_hysteresis_left;
  t->scaler.overflow_run = st.scale_overflow_run;
  t->scaler.n_overflows = st.scale_overflows;
  t->scaler.below_one_warned = (int32_t)st.scale_below_one_warned;
  for (int32_t i = 1; i < t->n_losses; i++) {
    const ApxCkptScaler *m = &st.more[i - 1];
    ApxScaler *sc = &t->losses[i].scaler;
    sc->scale = m->scale;
    sc->clean = m->clean;
    sc->hysteresis_left = (int32_t)m->hysteresis_left;
    sc->overflow_run = m->overflow_run;
    sc->n_overflows = m->overflows;
    sc->below_one_warned = (int32_t)m->below_one_warned;
  }
  return 0;
}

/* ---- logging -------------------------------------------------------------------------- */

static int json_num(char *buf, size_t cap, double v, const char *fmt) {
  if (!isfinite(v)) return snprintf(buf, cap, "null");
  return snprintf(buf, cap, fmt, v);
}

static int json_str(char *buf, size_t cap, const char *s) {
  size_t k = 0;
  if (k < cap) buf[k] = '"';
  k++;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    char tmp[8];
    const char *out = tmp;
    if (*c == '"') out = "\\\"";
    else if (*c == '\\') out = "\\\\";
    else if (*c < 0x20) snprintf(tmp, sizeof tmp, "\\u%04x", *c);
    else tmp[0] = (char)*c, tmp[1] = 0;
    for (const char *o = out; *o; o++, k++)
      if (k < cap) buf[k] = *o;
  }
  if (k < cap) buf[k] = '"';
  k++;
  if (k < cap) buf[k] = 0;
  else if (cap) buf[cap - 1] = 0;
  return (int)k;
}

int apx_step_json(const ApxStepRecord *r, char *buf, size_t cap) {
  char loss[48], scale[48], gn[48], lr[48], name[600];
  json_num(loss, sizeof loss, r->loss, "%.9g");
  json_num(scale, sizeof scale, r->loss_scale, "%.9g");
  json_num(gn, sizeof gn, r->grad_norm, "%.9g");
  json_num(lr, sizeof lr, r->lr, "%.8g");
  if (r->overflow_at) json_str(name, sizeof name, r->overflow_at);
  else snprintf(name, sizeof name, "null");
  char ov[48] = "", why[760] = "", per[1024] = "";
  if (r->n_losses > 1) {
    /* several losses: "losses": {"A": 0.5, "B": 2}, "loss_scales": {"A": 65536, "B": 32768} */
    size_t k = 0;
    for (int part = 0; part < 2; part++) {
      k += (size_t)snprintf(per + k, k < sizeof per ? sizeof per - k : 0, ", \"%s\": {",
                            part ? "loss_scales" : "losses");
      for (int32_t i = 0; i < r->n_losses && k < sizeof per; i++) {
        char nm[300], v[48];
        json_str(nm, sizeof nm, r->loss_names[i] ? r->loss_names[i] : "?");
        json_num(v, sizeof v, part ? r->loss_scales[i] : r->losses[i], "%.9g");
        k += (size_t)snprintf(per + k, sizeof per - k, "%s%s: %s", i ? ", " : "", nm, v);
      }
      if (k < sizeof per) k += (size_t)snprintf(per + k, sizeof per - k, "}");
    }
    if (k >= sizeof per) per[0] = 0; /* names too long for the row: left out */
  }
  if (r->overlap_kernels >= 0) snprintf(ov, sizeof ov, ", \"overlap_kernels\": %" PRId64, r->overlap_kernels);
  /* a null loss (or a skipped step) always says why */
  const char *reason = r->reason ? r->reason : !isfinite(r->loss) ? "non-finite loss" : NULL;
  if (reason) {
    memcpy(why, ", \"reason\": ", 12);
    json_str(why + 12, sizeof why - 12, reason);
  }
  return snprintf(buf, cap,
                  "{\"step\": %" PRId64 ", \"loss\": %s, \"loss_scale\": %s, \"skipped\": %s, "
                  "\"overflow_at\": %s, \"grad_norm\": %s, \"lr\": %s, \"ms\": %.3f%s%s%s}",
                  r->step, loss, scale, r->skipped ? "true" : "false", name, gn, lr, r->ms, per, ov, why);
}

/* ---- the log -------------------------------------------------------------------------- */

/* The --log writer: one write per line, every write checked; a line that could not be
 * written whole is cut off again (best effort), so the file never ends mid-line. */
typedef struct Log {
  int fd;
  const char *path;
  uint64_t bytes; /* written so far (regular files: where the next line starts) */
} Log;

static int log_fail(Log *l, ApxDiag *d) {
  int e = errno;
  if (ftruncate(l->fd, (off_t)l->bytes)) { /* not a regular file (a pipe, /dev/full): nothing to cut */
  }
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write the log: %s", l->path, strerror(e));
}

static int log_write(Log *l, const char *buf, size_t n, ApxDiag *d) {
  if (apx_write_all(l->fd, buf, n)) return log_fail(l, d);
  l->bytes += n;
  return 0;
}

/* --tensorboard: the scalars of a step, the values of its --log row (runtime/tensorboard.h);
 * several losses add loss/<name> and loss_scale/<name> for each. */
static int tb_write_step(ApxTbWriter *tb, const ApxStepRecord *r, int64_t skipped_so_far, ApxDiag *d) {
  ApxTbScalar s[6 + 2 * APX_TRAIN_MAX_LOSSES] = {
      {"loss", r->loss},     {"loss_scale", r->loss_scale}, {"lr", r->lr},
      {"grad_norm", r->grad_norm}, {"ms_per_step", r->ms},  {"skipped_steps", (double)skipped_so_far}};
  char tags[2 * APX_TRAIN_MAX_LOSSES][300];
  int n = 6;
  for (int32_t i = 0; r->n_losses > 1 && i < r->n_losses && i < APX_TRAIN_MAX_LOSSES; i++)
    for (int k = 0; k < 2; k++, n++) {
      snprintf(tags[n - 6], sizeof tags[0], "%s/%s", k ? "loss_scale" : "loss", r->loss_names[i]);
      s[n] = (ApxTbScalar){tags[n - 6], k ? r->loss_scales[i] : r->losses[i]};
    }
  return apx_tb_write_scalars(tb, r->step, s, n, d);
}

/* On resume: keep the log's records of steps <= step (a killed run may have logged more).
 * A log that cannot be opened is bad usage (exit code 2), found before training; a write that
 * fails (a full disk, /dev/full) is a runtime failure (exit code 1) naming the file. */
static int open_log(Log *l, const char *path, int64_t keep_upto, int resumed, ApxDiag *d) {
  l->fd = -1;
  l->path = path;
  l->bytes = 0;
  char *kept = NULL;
  size_t klen = 0;
  if (resumed) {
    uint64_t size;
    const char *why;
    int rfd = apx_open_regular(path, 0, &size, &why); /* only a regular file is read back */
    FILE *f = rfd >= 0 ? fdopen(rfd, "r") : NULL;
    if (rfd >= 0 && !f) close(rfd);
    if (f) {
      char *line = NULL;
      size_t cap = 0, kcap = 0;
      ssize_t n;
      while ((n = getline(&line, &cap, f)) > 0) {
        long long s = -1;
        if (sscanf(line, "{\"step\": %lld", &s) != 1 || s > keep_upto || line[n - 1] != '\n') continue;
        if (klen + (size_t)n + 1 > kcap) {
          kcap = (klen + (size_t)n + 1) * 2;
          char *nk = realloc(kept, kcap);
          if (!nk) break;
          kept = nk;
        }
        memcpy(kept + klen, line, (size_t)n);
        klen += (size_t)n;
      }
      free(line);
      fclose(f);
    }
  }
  l->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (l->fd < 0) {
    free(kept);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write the log: %s", path, strerror(errno));
  }
  int rc = klen ? log_write(l, kept, klen, d) : 0;
  free(kept);
  return rc;
}

static int log_close(Log *l, ApxDiag *d) {
  if (l->fd < 0) return 0;
  int rc = close(l->fd);
  l->fd = -1;
  return rc && errno != EINTR ? log_fail(l, d) : 0;
}

/* ---- outputs over inputs --------------------------------------------------------------- */

/* Refuses an output path (--log, --export-onnx, the checkpoint files of --checkpoint-dir)
 * that names an input of the run (the plan, a --data file, the checkpoint being resumed) or
 * another output: by device and inode where the file exists, by canonical path otherwise
 * (fileio.h). Before anything is written. Returns 0 or -1 (code 2). */
static int check_outputs(const ApxTrainer *t, const ApxPlan *plan, const ApxTrainConfig *cfg,
                         const char *resumed, ApxDiag *d) {
  const struct {
    const char *flag, *path;
  } outs[] = {{"--log", cfg->log_path}, {"--export-onnx", cfg->export_onnx}};
  enum { N_OUTS = 2 };
  int32_t n_in = 2 + t->ds.n_inputs;
  for (int o = 0; o < N_OUTS; o++) {
    const char *op = outs[o].path;
    if (!op) continue;
    for (int32_t i = 0; i < n_in; i++) {
      const char *ip = i == 0 ? plan->path : i == 1 ? resumed : t->ds.paths[i - 2];
      if (!ip || !apx_same_file(op, ip)) continue;
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s %s: refusing to overwrite %s %s (give the output "
                            "its own path)", outs[o].flag, op,
                            i == 0 ? "the plan" : i == 1 ? "the checkpoint being resumed" : "the --data file", ip);
    }
    for (int j = 0; j < o; j++)
      if (outs[j].path && apx_same_file(op, outs[j].path))
        return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s %s and %s %s are the same file: one output would "
                              "replace the other (give each its own path)", outs[j].flag, outs[j].path,
                              outs[o].flag, op);
    if (cfg->ckpt_dir && apx_checkpoint_owns_name(cfg->ckpt_dir, op))
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s %s: refusing to write over a checkpoint file of "
                            "--checkpoint-dir %s (give the output its own path)", outs[o].flag, op,
                            cfg->ckpt_dir);
  }
  /* an input named like the checkpoints this run writes would be replaced by one */
  for (int32_t i = 0; cfg->ckpt_dir && i < n_in; i++) {
    const char *ip = i == 0 ? plan->path : i == 1 ? NULL : t->ds.paths[i - 2];
    if (ip && apx_checkpoint_owns_name(cfg->ckpt_dir, ip))
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s is named like a checkpoint of --checkpoint-dir "
                            "%s, which this run may write over it (move it or choose another folder)", ip,
                            i == 0 ? "the plan" : "this --data file", cfg->ckpt_dir);
  }
  return 0;
}

/* ---- the command ---------------------------------------------------------------------- */

/* What this run did, for the summary. */
typedef struct RunStats {
  int64_t first_step, n;     /* n steps from first_step + 1 */
  double first_loss, last_loss, last_scale, total_ms;
  int64_t skipped;
  int64_t by_cause[4];       /* skipped steps by ApxStepCause */
} RunStats;

/* "overflow" / "1 gradient overflow, 3 non-finite input" (the skipped steps by cause). */
static const char *skipped_text(const RunStats *rs, char *buf, size_t cap) {
  static const char *const names[] = {"?", "gradient overflow", "non-finite input", "non-finite loss"};
  if (rs->by_cause[APX_CAUSE_DATA] == 0 && rs->by_cause[APX_CAUSE_LOSS] == 0) {
    snprintf(buf, cap, "overflow");
    return buf;
  }
  size_t k = 0;
  buf[0] = 0;
  for (int c = 1; c < 4; c++)
    if (rs->by_cause[c] && k < cap)
      k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64 " %s", k ? ", " : "", rs->by_cause[c], names[c]);
  return buf;
}

/* Several losses: prefix, then "A 65536, B 1024" (each one's scale for the next step). */
static const char *scales_text(const ApxTrainer *t, const char *prefix, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "%s", prefix);
  for (int32_t i = 0; i < t->n_losses && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%s %g", i ? ", " : "", t->losses[i].name,
                          i ? t->losses[i].scaler.scale : t->scaler.scale);
  return buf;
}

/* The summary line: the last step's loss and loss scale (as its progress line and log row
 * have them; the scale the next step would use follows when the last step changed it). */
static void print_summary(FILE *out, const ApxTrainer *t, const ApxTrainConfig *cfg, const RunStats *rs,
                          const char *exported) {
  char why[160], scale[600];
  snprintf(scale, sizeof scale, " %g", rs->last_scale);
  if (t->scaler.scale != rs->last_scale)
    snprintf(scale + strlen(scale), sizeof scale - strlen(scale), " (now %g)", t->scaler.scale);
  if (t->n_losses > 1) scales_text(t, "s ", scale, sizeof scale); /* several: each one's next scale */
  fprintf(out, "apexrun: trained steps %" PRId64 "..%" PRId64 " of %" PRId64 " in %.2f s (%.2f ms/step): "
          "loss %.6f -> %.6f, loss scale%s, %" PRId64 " skipped (%s)%s%s\n", rs->first_step + 1,
          rs->first_step + rs->n, cfg->steps, rs->total_ms / 1e3, rs->total_ms / (double)rs->n, rs->first_loss,
          rs->last_loss, scale, rs->skipped, skipped_text(rs, why, sizeof why), exported ? ", exported " : "",
          exported ? exported : "");
}

/* apexrun: warning: data/x.npy: 3 of 2048 samples hold NaN or Inf ... (rank 0, at start). */
static void warn_nonfinite_data(const ApxTrainer *t) {
  const ApxDataset *ds = &t->ds;
  for (int32_t i = 0; i < ds->n_inputs && ds->n_nonfinite > 0; i++) {
    const ApxDataNonFinite *nf = &ds->nonfinite[i];
    if (nf->samples == 0) continue;
    const char *what = isnan(nf->first_value) ? "nan" : nf->first_value > 0 ? "inf" : "-inf";
    if (nf->conv_samples == nf->samples)
      fprintf(stderr, "apexrun: warning: %s: %" PRId64 " of %" PRId64 " samples hold values beyond the range of "
              "%s, the plan input '%s''s type (first: sample %" PRId64 " element %" PRId64 ", %g becomes %s); "
              "steps on them are reported as non-finite input\n", ds->paths[i], nf->samples, ds->n_samples,
              apx_dtype_name(ds->arrays[i].dtype), t->plan->bufs[t->plan->inputs[i]].name, nf->first_sample,
              nf->first_element, nf->first_file_value, what);
    else
      fprintf(stderr, "apexrun: warning: %s: %" PRId64 " of %" PRId64 " samples hold NaN or Inf (first: sample %"
              PRId64 " element %" PRId64 " is %s); steps on them are reported as non-finite input\n",
              ds->paths[i], nf->samples, ds->n_samples, nf->first_sample, nf->first_element, what);
  }
}

static int dir_exists(const char *dir) {
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

int apx_train_run(const ApxPlan *plan, const ApxTrainConfig *cfg_in) {
  ApxTrainConfig cfg = *cfg_in;
  FILE *out = cfg.out ? cfg.out : stdout;
  int lead = cfg.rank == 0; /* only rank 0 prints, logs and checkpoints */
  ApxDiag d;
  apx_diag_init(&d);
  ApxTrainer t;
  memset(&t, 0, sizeof t);
  Log log = {-1, NULL, 0};
  char *resumed_path = NULL;
  ApxTbWriter *tb = NULL; /* --tensorboard */
  int rc = 0;
  ApxProgressMeter meter; /* rank 0's progress line (progress.h) */
  apx_progress_init(&meter, out, APX_PROGRESS_FORM_NONE, 0, cfg.steps, 0, 1, 0);
  int stopped = 0;         /* the signal every rank agreed to stop on (stop.h), 0 */
  /* --export-onnx: a destination that cannot be written fails now, not after the training */
  if (lead && cfg.export_onnx && apx_export_onnx_check(plan, cfg.export_onnx, &d)) goto done;
  if (apx_trainer_init(&t, plan, &cfg, &d)) goto done;
  if (lead && t.scale_clamped)
    fprintf(stderr, "apexrun: warning: the plan's initial loss scale %g is outside its range [%g, %g]: "
            "training starts at %g (the initial scale is clamped, as in Apex)\n",
            t.scaler.cfg.init_scale, t.scaler.cfg.min_scale, t.scaler.cfg.max_scale, t.scaler.scale);
  /* a warmup longer than the run's --steps (the schedule's length when the plan has no
   * --total-steps) is legitimate for a short trial run, but the lr never reaches its base */
  if (lead && plan->opts.total_steps <= 0 && !(t.hp_given & APX_HP_TOTAL) && cfg.steps > 0 &&
      t.lr.warmup > t.lr.total)
    fprintf(stderr, "apexrun: warning: the lr warmup (%" PRId64 " steps) is longer than the lr schedule "
            "(--steps %" PRId64 "; no --total-steps): the lr never reaches its base %g\n",
            t.lr.warmup, t.lr.total, t.lr.base);
  if (lead) warn_nonfinite_data(&t);

  int resumed = 0;
  if (cfg.resume) {
    int64_t s;
    int found = apx_checkpoint_latest(cfg.ckpt_dir, &resumed_path, &s, &d);
    if (found < 0) goto done;
    if (found == 0 && cfg.resume != APX_RESUME_AUTO) {
      /* a mistyped folder must not silently train from scratch */
      apx_diag_error(&d, APX_EXIT_BAD_INPUT, "%s: --resume: no checkpoint to resume from (looked for "
                     "%s/ckpt-*.apxckpt%s); check --checkpoint-dir, or use --resume=auto to start from "
                     "step 0 when there is none", cfg.ckpt_dir, cfg.ckpt_dir,
                     dir_exists(cfg.ckpt_dir) ? "" : ": the folder does not exist");
      goto done;
    }
    if (found == 0) {
      if (lead) fprintf(stderr, "apexrun: no checkpoint in %s (--resume=auto): starting from step 0\n",
                        cfg.ckpt_dir);
    } else {
      if (lead && check_outputs(&t, plan, &cfg, resumed_path, &d)) goto done; /* before reading it */
      int lrc = apx_trainer_load(&t, resumed_path, &d);
      if (!lrc && lead && !cfg.quiet) {
        /* the run-time settings the checkpoint's run was given, which this one continues with */
        char adopted[400] = "";
        size_t k = 0;
        ApxTrainState now;
        apx_trainer_state(&t, &now);
        for (uint32_t bit = 1; bit & APX_HP_ALL; bit <<= 1) {
          if (!(t.hp_adopted & bit) || k >= sizeof adopted) continue;
          char one[96];
          hparam_text(bit, &now, one, sizeof one);
          k += (size_t)snprintf(adopted + k, sizeof adopted - k, "%s%s", k ? " " : "; with its run's ", one);
        }
        fprintf(out, "apexrun: resumed from %s (step %" PRId64 ", loss scale %g%s)\n", resumed_path, t.step,
                t.scaler.scale, adopted);
      }
      if (lrc) goto done;
      resumed = 1;
    }
  }
  /* outputs over inputs or over each other: refused before anything is written */
  if (lead && check_outputs(&t, plan, &cfg, resumed_path, &d)) goto done;
  /* --checkpoint-dir: created if missing and probed for writing before any step runs, when a
   * checkpoint will be written (a resume that has nothing left to train writes none, so a
   * read-only folder is fine then) */
  if (lead && cfg.ckpt_dir && t.step < cfg.steps && apx_checkpoint_dir_check(cfg.ckpt_dir, &d))
    goto done;
  if (cfg.log_path && lead && open_log(&log, cfg.log_path, t.step, resumed, &d)) goto done;
  if (cfg.tensorboard_dir && lead && apx_tb_init(&tb, cfg.tensorboard_dir, &d)) goto done;
  /* every rank starts from identical weights (same plan, same checkpoint) */
  if (apx_dp_check_replicas(&t.dp, &t.ex, t.step, t.scaler.scale, 1, &d)) goto done;

  RunStats rs;
  memset(&rs, 0, sizeof rs);
  rs.first_step = t.step;
  rs.first_loss = rs.last_loss = rs.last_scale = NAN;
  int64_t last_saved = resumed ? t.step : -1;
  char line[2048];
  /* the updating line only on a terminal of our own: under mpirun the ranks' stdout
   * is a pseudo-terminal of mpirun's, which forwards it into whatever mpirun writes to */
  int terminal = isatty(fileno(out)) && !apx_coll_launched_by_mpi();
  ApxProgressForm form = !lead || cfg.quiet || cfg.progress == APX_PROGRESS_OFF ? APX_PROGRESS_FORM_NONE
                         : cfg.progress_every > 0 ? APX_PROGRESS_FORM_LINES
                         : cfg.progress == APX_PROGRESS_ON || terminal ? APX_PROGRESS_FORM_TTY
                                                                       : APX_PROGRESS_FORM_LINES;
  double samples_per_step = (double)t.ds.batch * (double)(cfg.world > 1 ? cfg.world : 1) * (double)t.accumulate;
  apx_progress_init(&meter, out, form, cfg.progress_every, cfg.steps, t.step, samples_per_step, now_ms());
  /* SIGINT / SIGTERM from here on: finish the step, checkpoint, say where to resume (stop.h) */
  apx_stop_install();
  while (t.step < cfg.steps) {
    ApxStepRecord r;
    t.dp.stop = (float)apx_stop_requested(); /* K ranks: agreed with found_inf (dp.h) */
    if (apx_trainer_step(&t, &r, &d)) goto done;
    int stop_sig = t.dp.world > 1 ? (int)t.dp.stop : apx_stop_requested();
    if (isnan(rs.first_loss) && rs.n == 0) rs.first_loss = r.loss;
    rs.n++;
    rs.last_loss = r.loss;
    rs.last_scale = r.loss_scale;
    rs.total_ms += r.ms;
    rs.skipped += r.skipped;
    if (r.skipped) rs.by_cause[r.cause]++;
    if (log.fd >= 0) {
      int n = apx_step_json(&r, line, sizeof line - 1);
      if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
      line[n] = '\n';
      if (log_write(&log, line, (size_t)n + 1, &d)) goto done;
    }
    if (tb && tb_write_step(tb, &r, rs.skipped, &d)) goto done;
    ApxProgressValues pv = {r.step, cfg.steps, r.loss, r.loss_scale, r.lr, -1, rs.skipped, -1};
    apx_progress_step(&meter, &pv, now_ms(), r.skipped);
    int ev = r.scaler_events;
    if (lead && r.reason && !cfg.quiet) {
      apx_progress_break(&meter);
      char after[96] = "";
      if (r.skipped && t.scaler.cfg.dynamic)
        snprintf(after, sizeof after, ", scale%s now %g", r.overflow_loss >= 0 ? " of that loss" : "",
                 apx_trainer_scaler(&t, r.overflow_loss)->scale);
      fprintf(stderr, "apexrun: step %" PRId64 ": %s: %s%s\n", r.step, r.reason,
              r.skipped ? "step skipped" : "its gradients are finite: the step was taken", after);
    }
    if (lead && (ev & (APX_SCALER_WARN_BELOW_ONE | APX_SCALER_WARN_RUN))) {
      apx_progress_break(&meter);
      if (ev & APX_SCALER_WARN_RUN)
        fprintf(stderr, "apexrun: warning: %d overflowing steps in a row (loss scale now %g): the "
                "gradients are not finite at any scale; check the loss and the data\n",
                APX_SCALER_COLLAPSE_RUN, apx_trainer_scaler(&t, r.overflow_loss)->scale);
      if (ev & APX_SCALER_WARN_BELOW_ONE)
        fprintf(stderr, "apexrun: warning: loss scale collapsed below 1 (%g) at step %" PRId64 "\n",
                apx_trainer_scaler(&t, r.overflow_loss)->scale, r.step);
    }
    if (!stop_sig && t.dp.check_every > 0 && t.step % t.dp.check_every == 0 && t.step < cfg.steps &&
        apx_dp_check_replicas(&t.dp, &t.ex, t.step, t.scaler.scale, 1, &d))
      goto done;
    if (lead && cfg.ckpt_dir && cfg.ckpt_every > 0 && t.step % cfg.ckpt_every == 0) {
      if (apx_trainer_save(&t, NULL, &d)) goto done;
      last_saved = t.step;
    }
    if (stop_sig && t.step < cfg.steps) {
      stopped = stop_sig;
      break;
    }
  }
  apx_progress_break(&meter);
  if (apx_dp_check_replicas(&t.dp, &t.ex, t.step, t.scaler.scale, 0, &d)) goto done; /* summary */
  char *saved = NULL;
  if (lead && cfg.ckpt_dir && last_saved != t.step && t.step > 0) {
    if (apx_trainer_save(&t, &saved, &d)) goto done;
  } else if (lead && cfg.ckpt_dir && t.step > 0) {
    apx_checkpoint_path(cfg.ckpt_dir, t.step, &saved);
  }
  if (stopped) {
    /* asked to stop (every rank after the same step): what was trained is saved, not exported */
    if (lead) {
      if (rs.n > 0) print_summary(out, &t, &cfg, &rs, NULL);
      fflush(out);
      if (saved)
        fprintf(stderr, "apexrun: stopped by %s after step %" PRId64 " of %" PRId64 ": checkpoint %s written; "
                "to continue, run the same command with --resume%s\n", apx_stop_signal_name(stopped), t.step,
                cfg.steps, saved, cfg.export_onnx ? " (the model was not exported)" : "");
      else
        fprintf(stderr, "apexrun: stopped by %s after step %" PRId64 " of %" PRId64 ": nothing saved (no "
                "--checkpoint-dir)%s\n", apx_stop_signal_name(stopped), t.step, cfg.steps,
                cfg.export_onnx ? "; the model was not exported" : "");
    }
    free(saved);
    if (t.dp.world > 1) apx_coll_mark_agreed_exit(cfg.coll);
    rc = 128 + stopped;
    goto done;
  }
  free(saved);
  /* every step of this run was skipped: nothing was learned. A failure (DESIGN.md 9) when the
   * scale cannot recover: static, collapsed (below 1 or at the --min-loss-scale floor), or
   * APX_SCALER_COLLAPSE_RUN overflows in a row; and when the data made some of them
   * non-finite (no scale helps there). A short run during the scale's normal warm-up (2^16
   * halving towards what the model needs) only warns and carries on. Every rank decides the
   * same (found_inf and the data are agreed). The log and the checkpoint are written (they
   * say so); a failed model is not exported. */
  int64_t n_run = rs.n;
  int all_overflowed = n_run > 0 && rs.skipped == n_run;
  const ApxScaler *sc = &t.scaler;
  int collapsed = rs.by_cause[APX_CAUSE_DATA] > 0;
  for (int32_t i = 0; i < (t.n_losses > 1 ? t.n_losses : 1); i++) { /* any loss's scaler */
    const ApxScaler *si = apx_trainer_scaler(&t, i);
    int c = !si->cfg.dynamic || si->scale < 1 || (si->cfg.min_scale > 0 && si->scale <= si->cfg.min_scale) ||
            si->overflow_run >= APX_SCALER_COLLAPSE_RUN;
    if (c && !collapsed) sc = si;
    collapsed |= c;
  }
  if (all_overflowed && !collapsed) {
    if (lead) {
      char now[600];
      if (t.n_losses > 1) scales_text(&t, "", now, sizeof now);
      else snprintf(now, sizeof now, "%g", sc->scale);
      fprintf(stderr, "apexrun: warning: all %" PRId64 " steps of this run overflowed while the loss scale%s "
              "settle%s (now %s); nothing was updated\n", n_run, t.n_losses > 1 ? "s" : "",
              t.n_losses > 1 ? "" : "s", now);
    }
    all_overflowed = 0;
  }
  int exported = cfg.export_onnx && !all_overflowed;
  if (lead && exported) {
    if (apx_export_onnx(plan, &t.ex, cfg.export_onnx, &d)) goto done;
  }
  if (lead) {
    if (n_run > 0)
      print_summary(out, &t, &cfg, &rs, exported ? cfg.export_onnx : NULL);
    else
      fprintf(out, "apexrun: nothing to train: at step %" PRId64 " of %" PRId64 "%s%s\n", t.step,
              cfg.steps, cfg.export_onnx ? ", exported " : "", cfg.export_onnx ? cfg.export_onnx : "");
  }
  if (all_overflowed) {
    fflush(out);
    /* every rank got here (found_inf is agreed): wait until rank 0 has written and printed */
    if (t.dp.world > 1 && apx_coll_barrier(cfg.coll, "all steps overflowed", &d)) goto done;
    if (!lead) {
      rc = APX_EXIT_RUNTIME;
      goto done;
    }
    char scale_txt[96];
    if (sc->cfg.dynamic)
      snprintf(scale_txt, sizeof scale_txt, "loss scale fell to %g", sc->scale);
    else
      snprintf(scale_txt, sizeof scale_txt, "static loss scale %g", sc->scale);
    if (rs.by_cause[APX_CAUSE_OVERFLOW] == n_run)
      apx_diag_error(&d, APX_EXIT_RUNTIME, "apexrun: all %" PRId64 " steps overflowed; %s; the model did "
                     "not train%s", n_run, scale_txt, cfg.export_onnx ? " (not exported)" : "");
    else
      apx_diag_error(&d, APX_EXIT_RUNTIME, "apexrun: all %" PRId64 " steps were skipped (%s); %s; the model "
                     "did not train%s", n_run, skipped_text(&rs, line, sizeof line), scale_txt,
                     cfg.export_onnx ? " (not exported)" : "");
  }
done:
  apx_progress_break(&meter);
  log_close(&log, &d);
  apx_tb_close(tb);
  if (d.code) {
    fprintf(stderr, "%s\n", d.msg);
    rc = d.code;
  }
  free(resumed_path);
  apx_trainer_free(&t);
  /* a signal after the last step changes nothing: the run is complete */
  apx_stop_uninstall();
  return rc;
}
