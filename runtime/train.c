/* train.c - the training loop (train.h). */
#include "runtime/train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/attrs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/export_onnx.h"
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

/* The plan's training kernels: exactly one LossScaleSeed, UnscaleCheck and OptimizerStep. */
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
  if (n_seed > 1 || n_unscale > 1 || n_opt > 1)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: not supported yet: %d losses with their own loss scalers (one "
                          "LossScaleSeed per plan)", plan_name(p), n_seed > 1 ? n_seed : n_unscale);
  if (n_opt == 0 || n_unscale == 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: the plan has no optimizer step (no trainable parameter reaches the "
                          "loss), nothing to train", plan_name(p));
  const ApxPlanKernel *ks = &p->kernels[seed], *ku = &p->kernels[unscale], *ko = &p->kernels[opt];
  const ApxAttrOptimizer *oa = ko->attrs;
  t->scale_buf = ks->n_in > 1 ? ks->in[1] : -1;
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
  ApxScalerConfig sc = {po->loss_scale_mode == 1, po->loss_scale, po->min_loss_scale,
                        po->max_loss_scale, po->scale_window, po->hysteresis};
  apx_scaler_init(&t->scaler, &sc);
  t->sampler_seed = cfg->seed_set ? cfg->seed : po->seed;

  ApxExecConfig ec = cfg->exec;
  if (cfg->seed_set) { /* --seed 0 is a seed like any other */
    ec.seed = cfg->seed;
    ec.seed_set = 1;
  }
  if (apx_exec_init(&t->ex, plan, &ec, d)) return -1;
  t->have_ex = 1;
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
  if (apx_dp_init(&t->dp, cfg->coll, &t->ex, plan, t->ds.n_samples, t->ds.batch, cfg->check_replicas, d))
    return -1;
  t->idx = calloc((size_t)t->ds.batch, sizeof *t->idx);
  t->host = calloc((size_t)t->ds.n_inputs, sizeof *t->host);
  t->loss_host = calloc(1, (size_t)plan->bufs[plan->loss].bytes + 8);
  if (!t->idx || !t->host || !t->loss_host) return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
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
  free(t->idx);
  free(t->loss_host);
  free(t->param_names);
  memset(t, 0, sizeof *t);
}

static int write_f32(ApxTrainer *t, int32_t buf, double v, ApxDiag *d) {
  float f = (float)v;
  return apx_exec_write(&t->ex, buf, &f, 4, d);
}

int apx_trainer_step(ApxTrainer *t, ApxStepRecord *rec, ApxDiag *d) {
  const ApxPlan *p = t->plan;
  memset(rec, 0, sizeof *rec);
  double t0 = now_ms();
  int64_t overlapped0 = t->ex.overlapped_total;
  double lr = apx_lr_at(&t->lr, t->step);
  double scale = t->scaler.scale;
  if (write_f32(t, t->lr_buf, lr, d) || write_f32(t, t->scale_buf, scale, d)) return -1;
  double loss_sum = 0;
  for (int32_t j = 0; j < t->accumulate; j++) {
    int64_t k = t->step * t->accumulate + j;
    if (apx_sampler_batch(&t->sampler, k, t->idx, d)) return -1;
    for (int32_t i = 0; i < t->ds.n_inputs; i++) {
      apx_dataset_gather(&t->ds, i, t->idx, t->ds.batch, t->host[i]);
      if (apx_exec_write(&t->ex, p->inputs[i], t->host[i], (size_t)p->bufs[p->inputs[i]].bytes, d))
        return -1;
    }
    apx_exec_set_step(&t->ex, k);
    if (apx_exec_run(&t->ex, APX_SEC_FORWARD, d)) return -1;
    const ApxPlanBuffer *lb = &p->bufs[t->loss_buf];
    if (apx_exec_read(&t->ex, t->loss_buf, t->loss_host, (size_t)lb->bytes, d)) return -1;
    double l = 0;
    apx_cpu_convert(t->loss_host, lb->dtype, &l, APX_DT_F64, 1);
    loss_sum += l;
    if (apx_exec_run(&t->ex, APX_SEC_BACKWARD, d)) return -1;
  }
  if (apx_dp_run_optimizer(&t->dp, &t->ex, d)) return -1; /* found_inf agreed over ranks */
  float found_inf = 0, norm_sq = 0;
  int32_t first_bad = -1;
  if (apx_exec_read(&t->ex, t->found_inf_buf, &found_inf, 4, d) ||
      apx_exec_read(&t->ex, t->first_bad_buf, &first_bad, 4, d) ||
      apx_exec_read(&t->ex, t->norm_sq_buf, &norm_sq, 4, d))
    return -1;
  int overflow = found_inf != 0.0f;
  rec->scaler_events = apx_scaler_update(&t->scaler, overflow);
  t->step++;
  rec->step = t->step;
  rec->loss = loss_sum / t->accumulate;
  rec->loss_scale = scale;
  rec->skipped = overflow;
  rec->overflow_at = overflow && first_bad >= 0 && first_bad < t->n_params ? t->param_names[first_bad] : NULL;
  rec->grad_norm = overflow ? NAN : sqrt((double)norm_sq);
  rec->lr = (double)(float)lr;
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
  st->lr_total = t->lr.total;
  st->lr_warmup = t->lr.warmup;
}

int apx_trainer_save(ApxTrainer *t, char **path_out, ApxDiag *d) {
  ApxTrainState st;
  apx_trainer_state(t, &st);
  return apx_checkpoint_write(t->cfg.ckpt_dir, &st, &t->ex, path_out, d);
}

/* Refuses a checkpoint whose run settings differ from this run's (before any upload). */
static int check_settings(void *ctx, const ApxTrainState *st, const char *path, ApxDiag *d) {
  const ApxTrainer *t = ctx;
  ApxTrainState mine_st;
  apx_trainer_state(t, &mine_st);
  const ApxTrainState *mine = &mine_st;
  /* the lr schedule's length only matters when the lr decays over it (lr_schedule.h);
   * lr_total 0 / lr_warmup -1: a version 1 checkpoint, which did not record them */
  int decays = t->lr.schedule != APX_LR_CONSTANT;
  char msg[320];
  if (st->sampler_seed != mine->sampler_seed)
    snprintf(msg, sizeof msg, "data seed %" PRIu64 ", this run %" PRIu64 " (--seed)",
             st->sampler_seed, mine->sampler_seed);
  else if (st->order != mine->order)
    snprintf(msg, sizeof msg, "%s batches, this run %s (--no-shuffle)",
             st->order == APX_ORDER_FILE ? "file-order" : "shuffled",
             mine->order == APX_ORDER_FILE ? "file-order" : "shuffled");
  else if (st->world != mine->world)
    snprintf(msg, sizeof msg, "%" PRId64 " ranks, this run %" PRId64 " (not supported yet: "
             "resuming on another number of ranks)", st->world, mine->world);
  else if (st->accumulate != mine->accumulate || st->batches != st->step * st->accumulate)
    snprintf(msg, sizeof msg, "accumulation %" PRId64 ", the plan %" PRId64, st->accumulate,
             mine->accumulate);
  else if (st->dropout_seed != mine->dropout_seed)
    snprintf(msg, sizeof msg, "Dropout seed %" PRIu64 ", this run %" PRIu64 " (--seed)",
             st->dropout_seed, mine->dropout_seed);
  else if (st->lr_warmup >= 0 && st->lr_warmup != mine->lr_warmup)
    snprintf(msg, sizeof msg, "%" PRId64 " lr warmup steps, this run %" PRId64, st->lr_warmup,
             mine->lr_warmup);
  else if (decays && st->lr_total > 0 && st->lr_total != mine->lr_total) {
    /* its own message: "the same settings" would be resuming at the checkpoint's length */
    const char *sn = apx_lr_schedule_name(t->lr.schedule);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: the checkpoint's %s lr schedule runs over %" PRId64 " steps, this run "
                          "asks for %" PRId64 " (--steps sets the length when the plan has no "
                          "--total-steps); to train longer with a %s schedule, compile with "
                          "--total-steps (a new plan; start over), or resume with --steps %" PRId64,
                          path, sn, st->lr_total, mine->lr_total, sn, st->lr_total);
  } else if (st->step < 0 || !(st->scale > 0) || !isfinite(st->scale))
    snprintf(msg, sizeof msg, "an invalid state (step %" PRId64 ", loss scale %g)", st->step, st->scale);
  else
    return 0;
  return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                        "%s: the checkpoint was trained with %s; resume with the same settings",
                        path, msg);
}

int apx_trainer_load(ApxTrainer *t, const char *path, ApxDiag *d) {
  ApxTrainState st;
  if (apx_checkpoint_read(path, &st, &t->ex, check_settings, t, d)) return -1;
  t->step = st.step;
  t->scaler.scale = st.scale;
  t->scaler.clean = st.scale_clean;
  t->scaler.hysteresis_left = (int32_t)st.scale_hysteresis_left;
  t->scaler.overflow_run = st.scale_overflow_run;
  t->scaler.n_overflows = st.scale_overflows;
  t->scaler.below_one_warned = (int32_t)st.scale_below_one_warned;
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
  char ov[48] = "";
  if (r->overlap_kernels >= 0) snprintf(ov, sizeof ov, ", \"overlap_kernels\": %" PRId64, r->overlap_kernels);
  return snprintf(buf, cap,
                  "{\"step\": %" PRId64 ", \"loss\": %s, \"loss_scale\": %s, \"skipped\": %s, "
                  "\"overflow_at\": %s, \"grad_norm\": %s, \"lr\": %s, \"ms\": %.3f%s}",
                  r->step, loss, scale, r->skipped ? "true" : "false", name, gn, lr, r->ms, ov);
}

/* --tensorboard: the scalars of a step, the values of its --log row (runtime/tensorboard.h).
 * One loss and one scaler per plan (several losses are not supported yet). */
static int tb_write_step(ApxTbWriter *tb, const ApxStepRecord *r, int64_t skipped_so_far, ApxDiag *d) {
  const ApxTbScalar s[] = {{"loss", r->loss},           {"loss_scale", r->loss_scale},
                           {"lr", r->lr},               {"grad_norm", r->grad_norm},
                           {"ms_per_step", r->ms},      {"skipped_steps", (double)skipped_so_far}};
  return apx_tb_write_scalars(tb, r->step, s, (int)(sizeof s / sizeof s[0]), d);
}

/* On resume: keep the log's records of steps <= step (a killed run may have logged more).
 * A log that cannot be written is bad usage (exit code 2), found before training. */
static FILE *open_log(const char *path, int64_t keep_upto, int resumed, ApxDiag *d) {
  if (resumed) {
    FILE *f = fopen(path, "r");
    if (f) {
      char *line = NULL, *kept = NULL;
      size_t cap = 0, klen = 0, kcap = 0;
      ssize_t n;
      while ((n = getline(&line, &cap, f)) > 0) {
        long long s = -1;
        if (sscanf(line, "{\"step\": %lld", &s) != 1 || s > keep_upto) continue;
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
      FILE *w = fopen(path, "w");
      if (w && klen) fwrite(kept, 1, klen, w);
      free(kept);
      if (!w) apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write the log: %s", path, strerror(errno));
      return w;
    }
  }
  FILE *w = fopen(path, "w");
  if (!w) apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write the log: %s", path, strerror(errno));
  return w;
}

/* ---- the command ---------------------------------------------------------------------- */

int apx_train_run(const ApxPlan *plan, const ApxTrainConfig *cfg_in) {
  ApxTrainConfig cfg = *cfg_in;
  FILE *out = cfg.out ? cfg.out : stdout;
  int lead = cfg.rank == 0; /* only rank 0 prints, logs and checkpoints */
  int progress = lead && !cfg.quiet &&
                 (cfg.progress == APX_PROGRESS_ON ||
                  (cfg.progress == APX_PROGRESS_AUTO && isatty(fileno(out))));
  ApxDiag d;
  apx_diag_init(&d);
  ApxTrainer t;
  memset(&t, 0, sizeof t);
  FILE *log = NULL;
  ApxTbWriter *tb = NULL; /* --tensorboard */
  int rc = 0, pending = 0; /* pending: a progress line without its newline */
  /* --export-onnx: a destination that cannot be written fails now, not after the training */
  if (lead && cfg.export_onnx && apx_export_onnx_check(plan, cfg.export_onnx, &d)) goto done;
  if (apx_trainer_init(&t, plan, &cfg, &d)) goto done;
  /* a warmup longer than the run's --steps (the schedule's length when the plan has no
   * --total-steps) is legitimate for a short trial run, but the lr never reaches its base */
  if (lead && plan->opts.total_steps <= 0 && cfg.steps > 0 && t.lr.warmup > t.lr.total)
    fprintf(stderr, "apexrun: warning: the lr warmup (%" PRId64 " steps) is longer than the lr schedule "
            "(--steps %" PRId64 "; the plan has no --total-steps): the lr never reaches its base %g\n",
            t.lr.warmup, t.lr.total, t.lr.base);

  int resumed = 0;
  if (cfg.resume) {
    char *path = NULL;
    int64_t s;
    int found = apx_checkpoint_latest(cfg.ckpt_dir, &path, &s, &d);
    if (found < 0) goto done;
    if (found == 0) {
      if (lead) fprintf(stderr, "apexrun: no checkpoint in %s: starting from step 0\n", cfg.ckpt_dir);
    } else {
      int lrc = apx_trainer_load(&t, path, &d);
      if (!lrc && lead && !cfg.quiet)
        fprintf(out, "apexrun: resumed from %s (step %" PRId64 ", loss scale %g)\n", path, t.step,
                t.scaler.scale);
      free(path);
      if (lrc) goto done;
      resumed = 1;
    }
  }
  /* --checkpoint-dir: created if missing and probed for writing before any step runs, when a
   * checkpoint will be written (a resume that has nothing left to train writes none, so a
   * read-only folder is fine then) */
  if (lead && cfg.ckpt_dir && t.step < cfg.steps && apx_checkpoint_dir_check(cfg.ckpt_dir, &d))
    goto done;
  if (cfg.log_path && lead && !(log = open_log(cfg.log_path, t.step, resumed, &d))) goto done;
  if (cfg.tensorboard_dir && lead && apx_tb_init(&tb, cfg.tensorboard_dir, &d)) goto done;
  /* every rank starts from identical weights (same plan, same checkpoint) */
  if (apx_dp_check_replicas(&t.dp, &t.ex, t.step, t.scaler.scale, 1, &d)) goto done;

  int64_t first_step = t.step;
  double first_loss = NAN, last_loss = NAN, total_ms = 0, last_print = -1e9;
  int64_t skipped = 0, last_saved = resumed ? t.step : -1;
  char line[1024];
  while (t.step < cfg.steps) {
    ApxStepRecord r;
    if (apx_trainer_step(&t, &r, &d)) goto done;
    if (isnan(first_loss)) first_loss = r.loss;
    last_loss = r.loss;
    total_ms += r.ms;
    skipped += r.skipped;
    if (log) {
      apx_step_json(&r, line, sizeof line);
      fprintf(log, "%s\n", line);
      fflush(log);
    }
    if (tb && tb_write_step(tb, &r, skipped, &d)) goto done;
    /* on a terminal at most ~20 lines a second (fast models take well under a ms a step) */
    if (progress && (now_ms() - last_print >= 50 || t.step == cfg.steps || r.skipped)) {
      fprintf(out, "\rstep %" PRId64 "/%" PRId64 "  loss %10.6f  scale %-9g %8.1f ms", r.step,
              cfg.steps, r.loss, r.loss_scale, r.ms);
      fflush(out);
      pending = 1;
      last_print = now_ms();
    }
    int ev = r.scaler_events;
    if (lead && (r.skipped && !cfg.quiet)) {
      if (pending) fputc('\n', out), fflush(out), pending = 0;
      fprintf(stderr, "apexrun: step %" PRId64 ": gradient overflow in '%s' at loss scale %g: step "
              "skipped, scale now %g\n", r.step, r.overflow_at ? r.overflow_at : "?", r.loss_scale,
              t.scaler.scale);
    }
    if (lead && (ev & (APX_SCALER_WARN_BELOW_ONE | APX_SCALER_WARN_RUN))) {
      if (pending) fputc('\n', out), fflush(out), pending = 0;
      if (ev & APX_SCALER_WARN_RUN)
        fprintf(stderr, "apexrun: warning: %d overflowing steps in a row (loss scale now %g): the "
                "gradients are not finite at any scale; check the loss and the data\n",
                APX_SCALER_COLLAPSE_RUN, t.scaler.scale);
      if (ev & APX_SCALER_WARN_BELOW_ONE)
        fprintf(stderr, "apexrun: warning: loss scale collapsed below 1 (%g) at step %" PRId64 "\n",
                t.scaler.scale, r.step);
    }
    if (t.dp.check_every > 0 && t.step % t.dp.check_every == 0 && t.step < cfg.steps &&
        apx_dp_check_replicas(&t.dp, &t.ex, t.step, t.scaler.scale, 1, &d))
      goto done;
    if (lead && cfg.ckpt_dir && cfg.ckpt_every > 0 && t.step % cfg.ckpt_every == 0) {
      if (apx_trainer_save(&t, NULL, &d)) goto done;
      last_saved = t.step;
    }
  }
  if (pending) fputc('\n', out), pending = 0;
  if (apx_dp_check_replicas(&t.dp, &t.ex, t.step, t.scaler.scale, 0, &d)) goto done; /* summary */
  if (lead && cfg.ckpt_dir && last_saved != t.step && t.step > 0) {
    if (apx_trainer_save(&t, NULL, &d)) goto done;
  }
  /* every step of this run overflowed: nothing was learned. A failure (DESIGN.md 9) only when
   * the scale cannot recover: static, collapsed (below 1 or at the --min-loss-scale floor), or
   * APX_SCALER_COLLAPSE_RUN overflows in a row. A short run during the scale's normal warm-up
   * (2^16 halving towards what the model needs) only warns and carries on. The log and the
   * checkpoint are written (they say so); a failed model is not exported. */
  int64_t n_run = t.step - first_step;
  int all_overflowed = n_run > 0 && skipped == n_run;
  const ApxScaler *sc = &t.scaler;
  int collapsed = !sc->cfg.dynamic || sc->scale < 1 ||
                  (sc->cfg.min_scale > 0 && sc->scale <= sc->cfg.min_scale) ||
                  sc->overflow_run >= APX_SCALER_COLLAPSE_RUN;
  if (all_overflowed && !collapsed) {
    if (lead)
      fprintf(stderr, "apexrun: warning: all %" PRId64 " steps of this run overflowed while the loss scale "
              "settles (now %g); nothing was updated\n", n_run, sc->scale);
    all_overflowed = 0;
  }
  int exported = cfg.export_onnx && !all_overflowed;
  if (lead && exported) {
    if (apx_export_onnx(plan, &t.ex, cfg.export_onnx, &d)) goto done;
  }
  if (lead) {
    int64_t n = n_run;
    if (n > 0)
      fprintf(out, "apexrun: trained steps %" PRId64 "..%" PRId64 " of %" PRId64 " in %.2f s (%.2f ms/step): "
              "loss %.6f -> %.6f, loss scale %g, %" PRId64 " skipped (overflow)%s%s\n",
              first_step + 1, t.step, cfg.steps, total_ms / 1e3, total_ms / (double)n, first_loss,
              last_loss, t.scaler.scale, skipped, exported ? ", exported " : "",
              exported ? cfg.export_onnx : "");
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
    if (t.scaler.cfg.dynamic)
      snprintf(scale_txt, sizeof scale_txt, "loss scale fell to %g", t.scaler.scale);
    else
      snprintf(scale_txt, sizeof scale_txt, "static loss scale %g", t.scaler.scale);
    apx_diag_error(&d, APX_EXIT_RUNTIME, "apexrun: all %" PRId64 " steps overflowed; %s; the model did "
                   "not train%s", n_run, scale_txt, cfg.export_onnx ? " (not exported)" : "");
  }
done:
  if (pending) fputc('\n', out);
  if (log) fclose(log);
  apx_tb_close(tb);
  if (d.code) {
    fprintf(stderr, "%s\n", d.msg);
    rc = d.code;
  }
  apx_trainer_free(&t);
  return rc;
}
