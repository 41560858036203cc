/* dp.c - data-parallel hooks of the training loop (dp.h). */
#include "runtime/dp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/fileio.h"
#include "runtime/checkpoint.h"
#include "runtime/sampler.h"

static const char *plan_name(const ApxPlan *p) { return p->path ? p->path : "<plan>"; }

/* Persistent buffers that BatchNorm kernels read as running statistics (inputs 3, 4). */
static void mark_bn_running_stats(const ApxPlan *p, uint8_t *bn) {
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const ApxPlanKernel *kn = &p->kernels[k];
    if (kn->op != APX_OP_BatchNormalization && kn->op != APX_OP_BatchNormRelu) continue;
    for (int32_t i = 3; i < 5 && i < kn->n_in; i++)
      if (kn->in[i] >= 0) bn[kn->in[i]] = 1;
  }
}

int apx_dp_init(ApxDp *dp, ApxColl *coll, ApxExec *ex, const ApxPlan *p, int64_t check_every,
                ApxDiag *d) {
  memset(dp, 0, sizeof *dp);
  dp->coll = coll;
  dp->rank = apx_coll_rank(coll);
  dp->world = apx_coll_world(coll);
  dp->split = -1;
  dp->found_inf_buf = -1;
  dp->check_every = check_every;
  for (int32_t k = p->sec_begin[APX_SEC_OPTIMIZER]; k < p->sec_end[APX_SEC_OPTIMIZER]; k++)
    if (p->kernels[k].op == APX_OP_UnscaleCheck && p->kernels[k].n_out > 0) {
      dp->split = k + 1;
      dp->found_inf_buf = p->kernels[k].out[0];
      break;
    }
  dp->checked = calloc((size_t)p->n_bufs + 1, 1);
  uint8_t *bn = calloc((size_t)p->n_bufs + 1, 1);
  if (!dp->checked || !bn) {
    free(bn);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  }
  if (!p->opts.sync_bn) mark_bn_running_stats(p, bn);
  for (int32_t b = 0; b < p->n_bufs; b++)
    if (apx_checkpoint_saves(&p->bufs[b]) && !bn[b]) dp->checked[b] = 1, dp->n_checked++;
  free(bn);
  /* one process (any backend, cuda included): nothing to reduce, no collective slots */
  if (!coll || dp->world <= 1) return 0;
  if (apx_coll_attach(coll, ex->be, d)) return -1;

  int32_t n_grad_buckets = 0;
  for (int32_t i = 0; i < p->n_buckets; i++) n_grad_buckets += p->buckets[i].id >= 0;
  if (n_grad_buckets == 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: the plan has no gradient buckets, so %d ranks cannot average their "
                          "gradients (recompile it without --disable-pass=bucketing)",
                          plan_name(p), (int)dp->world);
  if (dp->split < 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the plan has no UnscaleCheck in its optimizer section",
                          plan_name(p));
  return 0;
}

/* ---- start-up agreement ------------------------------------------------------------------ */

/* The fields of the exchanged record, in the order they are compared (the first difference
 * is the one reported). */
enum {
  F_PLAN, F_SAMPLES, F_BATCH, F_NINPUTS, F_DATA, F_STEPS, F_SEED, F_ORDER, F_ACCUM, F_CHECK,
  F_CKPT, F_CKPT_EVERY, F_RESUME, F_EXPORT, F_LOG, F_LR, F_WD, F_CLIP, F_SCHED, F_WARMUP, F_TOTAL,
  F_HP_GIVEN, N_FIELDS
};

/* The run-time hyperparameter flags in the order of the APX_HP_* bits (train.h). */
static const char *const hp_flags[] = {"--lr", "--weight-decay", "--lr-schedule", "--warmup-steps",
                                       "--total-steps", "--clip-grad-norm"};

/* One field's difference between rank r (value o) and rank 0 (value z), as text. */
static void describe(const ApxPlan *p, int f, int32_t r, uint64_t o, uint64_t z, char *buf, size_t cap) {
  static const char *const resume_txt[] = {"no --resume", "--resume", "--resume=auto"};
  const char *flag = NULL;
  switch (f) {
    case F_PLAN:
      snprintf(buf, cap, "%s: rank %d runs a plan with hash %016" PRIx64 ", rank 0 one with hash %016" PRIx64
               ": every rank needs the same plan file", plan_name(p), (int)r, o, z);
      return;
    case F_SAMPLES:
    case F_BATCH:
    case F_NINPUTS:
      snprintf(buf, cap, "--data: rank %d sees %s %" PRIu64 ", rank 0 %" PRIu64 ": every rank needs the same data",
               (int)r, f == F_SAMPLES ? "a sample count of" : f == F_BATCH ? "a batch size of" : "a number of files of",
               o, z);
      return;
    case F_STEPS: flag = "--steps"; break;
    case F_SEED: flag = "--seed (the data order and Dropout seed)"; break;
    case F_ACCUM: flag = "the accumulation (apexc --accumulate)"; break;
    case F_CHECK: flag = "--check-replicas"; break;
    case F_CKPT_EVERY: flag = "--checkpoint-every"; break;
    case F_LR:
    case F_WD:
    case F_CLIP:
      snprintf(buf, cap, "%s: rank %d has %g, rank 0 has %g: every rank needs the same settings (the same "
               "apexrun arguments)", f == F_LR ? "--lr" : f == F_WD ? "--weight-decay" : "--clip-grad-norm",
               (int)r, apx_bits_f64(o), apx_bits_f64(z));
      return;
    case F_SCHED: {
      static const char *const names[] = {"constant", "cosine", "linear"};
      snprintf(buf, cap, "--lr-schedule: rank %d has %s, rank 0 has %s: every rank needs the same settings (the "
               "same apexrun arguments)", (int)r, o < 3 ? names[o] : "?", z < 3 ? names[z] : "?");
      return;
    }
    case F_WARMUP: flag = "--warmup-steps"; break;
    case F_TOTAL: flag = "the lr schedule's length (--total-steps)"; break;
    case F_HP_GIVEN: {
      uint64_t x = o ^ z;
      int b = 0;
      while (b < 5 && !(x >> b & 1)) b++;
      snprintf(buf, cap, "%s is given to rank %d but not to rank %d (with the same value: a resume continues "
               "with the checkpoint's value where it is not given): every rank needs the same settings (the "
               "same apexrun arguments)", hp_flags[b], (int)((o >> b & 1) ? r : 0), (int)((o >> b & 1) ? 0 : r));
      return;
    }
    case F_ORDER:
      snprintf(buf, cap, "--no-shuffle: rank %d reads batches %s, rank 0 %s: every rank needs the same "
               "settings (the same apexrun arguments)", (int)r,
               o == APX_ORDER_FILE ? "in file order (--no-shuffle)" : "shuffled",
               z == APX_ORDER_FILE ? "in file order (--no-shuffle)" : "shuffled");
      return;
    case F_RESUME:
      snprintf(buf, cap, "--resume: rank %d has %s, rank 0 has %s: every rank needs the same settings (the "
               "same apexrun arguments)", (int)r, resume_txt[o < 3 ? o : 0], resume_txt[z < 3 ? z : 0]);
      return;
    case F_CKPT:
    case F_EXPORT:
    case F_LOG: {
      const char *name = f == F_CKPT ? "--checkpoint-dir" : f == F_EXPORT ? "--export-onnx" : "--log";
      if (o) /* rank r has it, rank 0 (the one that writes) does not */
        snprintf(buf, cap, "%s is given to rank %d but not to rank 0: only rank 0 writes %s, so every "
                 "rank needs the same settings (the same apexrun arguments)", name, (int)r,
                 f == F_CKPT ? "checkpoints" : f == F_EXPORT ? "the exported model" : "the log");
      else
        snprintf(buf, cap, "%s is given to rank 0 but not to rank %d: every rank needs the same settings "
                 "(the same apexrun arguments)", name, (int)r);
      return;
    }
    default: flag = "?";
  }
  snprintf(buf, cap, "%s: rank %d has %" PRIu64 ", rank 0 has %" PRIu64 ": every rank needs the same settings "
           "(the same apexrun arguments)", flag, (int)r, o, z);
}

int apx_dp_agree(ApxDp *dp, const ApxPlan *p, const ApxDpSettings *s, ApxDiag *d) {
  if (!dp->coll || dp->world <= 1) return 0;
  uint64_t mine[N_FIELDS] = {0};
  mine[F_PLAN] = apx_plan_hash(p);
  mine[F_SAMPLES] = (uint64_t)s->n_samples;
  mine[F_BATCH] = (uint64_t)s->batch;
  mine[F_NINPUTS] = (uint64_t)s->n_inputs;
  mine[F_DATA] = s->data_digest;
  mine[F_STEPS] = (uint64_t)s->steps;
  mine[F_SEED] = s->seed;
  mine[F_ORDER] = (uint64_t)s->order;
  mine[F_ACCUM] = (uint64_t)s->accumulate;
  mine[F_CHECK] = (uint64_t)s->check_replicas;
  mine[F_CKPT] = s->checkpoint_dir != 0;
  mine[F_CKPT_EVERY] = (uint64_t)s->checkpoint_every;
  mine[F_RESUME] = (uint64_t)s->resume;
  mine[F_EXPORT] = s->export_onnx != 0;
  mine[F_LOG] = s->log != 0;
  mine[F_LR] = apx_f64_bits(s->lr);
  mine[F_WD] = apx_f64_bits(s->weight_decay);
  mine[F_CLIP] = apx_f64_bits(s->clip_grad_norm);
  mine[F_SCHED] = (uint64_t)s->lr_schedule;
  mine[F_WARMUP] = (uint64_t)s->warmup;
  mine[F_TOTAL] = (uint64_t)s->total;
  mine[F_HP_GIVEN] = s->hp_given;
  size_t w = (size_t)dp->world;
  uint64_t *all = calloc(w * N_FIELDS, sizeof *all);
  uint64_t *files = calloc(w * (size_t)(s->n_inputs > 0 ? s->n_inputs : 1), sizeof *files);
  int rc = 0;
  if (!all || !files) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  } else if (apx_coll_allgather(dp->coll, mine, sizeof mine, all, "start-up settings agreement", d)) {
    rc = -1;
  } else {
    int bad_f = -1;
    int32_t bad_r = -1;
    for (int f = 0; f < N_FIELDS && bad_f < 0; f++)
      for (int32_t r = 1; r < dp->world; r++)
        if (all[(size_t)r * N_FIELDS + f] != all[f]) {
          bad_f = f, bad_r = r;
          break;
        }
    char msg[700];
    if (bad_f == F_DATA) {
      /* same plan, same file count (compared first): which file differs, in a second exchange
       * every rank takes part in (all of them saw the same difference) */
      if (apx_coll_allgather(dp->coll, s->file_digests, (size_t)s->n_inputs * sizeof *files, files,
                             "start-up data agreement", d)) {
        rc = -1;
      } else {
        int32_t i = 0;
        while (i + 1 < s->n_inputs && files[(size_t)bad_r * s->n_inputs + i] == files[i]) i++;
        snprintf(msg, sizeof msg, "%s: rank %d's file differs from rank 0's (digest of size and contents "
                 "%016" PRIx64 ", rank 0 %016" PRIx64 "): every rank needs the same data",
                 s->file_paths[i], (int)bad_r, files[(size_t)bad_r * s->n_inputs + i], files[i]);
        rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s", msg);
      }
    } else if (bad_f >= 0) {
      describe(p, bad_f, bad_r, all[(size_t)bad_r * N_FIELDS + bad_f], all[bad_f], msg, sizeof msg);
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s", msg);
    }
    /* every rank found the same difference: each prints it and exits 2, no abort needed */
    if (bad_f >= 0 && rc) apx_coll_mark_agreed_exit(dp->coll);
  }
  free(all);
  free(files);
  return rc;
}

void apx_dp_free(ApxDp *dp) {
  free(dp->checked);
  memset(dp, 0, sizeof *dp);
}

int apx_dp_run_optimizer(ApxDp *dp, ApxExec *ex, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  if (dp->world <= 1 || dp->split < 0)
    return apx_exec_queue_range(ex, p->sec_begin[APX_SEC_OPTIMIZER], p->sec_end[APX_SEC_OPTIMIZER], d);
  if (apx_exec_queue_range(ex, p->sec_begin[APX_SEC_OPTIMIZER], dp->split, d)) return -1;
  ApxBackend *be = ex->be;
  /* found_inf and the stop request in one reduction (both fp32: one fused MPI call) */
  ApxTensor t[2] = {*apx_exec_view(ex, dp->found_inf_buf), {&dp->stop, APX_DT_F32, 1, {1}}};
  int n = t[0].dtype == APX_DT_F32 ? 2 : 1;
  be->err[0] = 0;
  /* queued on the executor's queue like a kernel (cpu: done on return; NCCL: in stream order
   * before the rest of the section), so no host synchronization is needed here; the caller's
   * one sync per step completes it. The stop flag is a host float: the cpu backend reduces
   * it with found_inf. */
  ApxStatus st = be->iface.allreduce ? be->iface.allreduce(be, ex->q, t, n, APX_REDUCE_MAX)
                                     : APX_STATUS_UNSUPPORTED;
  if (st == APX_STATUS_OK && n == 1) st = be->iface.allreduce(be, ex->q, &t[1], 1, APX_REDUCE_MAX);
  if (st != APX_STATUS_OK)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: agreeing on gradient overflow: %s", plan_name(p),
                          be->err[0] ? be->err : apx_status_name(st));
  return apx_exec_queue_range(ex, dp->split, p->sec_end[APX_SEC_OPTIMIZER], d);
}

int apx_dp_check_replicas(ApxDp *dp, ApxExec *ex, int64_t step, double scale, int quiet, ApxDiag *d) {
  if (!dp->coll || dp->world <= 1) return 0;
  const ApxPlan *p = ex->plan;
  /* per rank: step, scale bits, then one CRC32C per checked buffer */
  int32_t n = 2 + dp->n_checked;
  uint64_t *mine = calloc((size_t)n + 1, sizeof *mine);
  uint64_t *all = calloc((size_t)n * (size_t)dp->world + 1, sizeof *all);
  size_t cap = 0;
  void *host = NULL;
  int rc = -1;
  if (!mine || !all) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
    goto out;
  }
  mine[0] = (uint64_t)step;
  memcpy(&mine[1], &scale, sizeof scale);
  int32_t k = 2;
  for (int32_t b = 0; b < p->n_bufs; b++) {
    if (!dp->checked[b]) continue;
    size_t bytes = (size_t)p->bufs[b].bytes;
    if (bytes > cap) {
      void *nh = realloc(host, bytes);
      if (!nh) {
        apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
        goto out;
      }
      host = nh;
      cap = bytes;
    }
    if (apx_exec_read(ex, b, host, bytes, d)) goto out;
    mine[k++] = apx_crc32c(0, host, bytes);
  }
  if (apx_coll_allgather(dp->coll, mine, (size_t)n * sizeof *mine, all, "replica check", d)) goto out;
  uint64_t total = 0;
  for (int32_t i = 0; i < n; i++) total = total * 1000003u ^ all[i];
  for (int32_t r = 1; r < dp->world; r++) {
    const uint64_t *o = all + (size_t)n * r;
    if (memcmp(o, all, (size_t)n * sizeof *o) == 0) continue;
    const char *what = "?";
    if (o[0] != all[0]) what = "the step counter";
    else if (o[1] != all[1]) what = "the loss scale";
    else
      for (int32_t b = 0, j = 2; b < p->n_bufs; b++) {
        if (!dp->checked[b]) continue;
        if (o[j] != all[j]) {
          what = p->bufs[b].name;
          break;
        }
        j++;
      }
    apx_diag_error(d, APX_EXIT_RUNTIME,
                   "%s: rank %d of %d differs from rank 0 after step %" PRId64 ": '%s' (data-parallel "
                   "replicas must stay identical)",
                   plan_name(p), (int)r, (int)dp->world, step, what);
    goto out;
  }
  if (!quiet && dp->rank == 0)
    printf("apexrun: %d replicas identical after step %" PRId64 " (%d buffers, hash %016" PRIx64 ")\n",
           (int)dp->world, step, (int)dp->n_checked, total);
  rc = 0;
out:
  free(mine);
  free(all);
  free(host);
  return rc;
}
