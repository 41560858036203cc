/* dp.c - data-parallel hooks of the training loop (dp.h). */
#include "runtime/dp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint.h"

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

int apx_dp_init(ApxDp *dp, ApxColl *coll, ApxExec *ex, const ApxPlan *p, int64_t n_samples,
                int64_t batch, int64_t check_every, ApxDiag *d) {
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
  /* same plan, same data on every rank */
  uint64_t mine[3] = {apx_plan_hash(p), (uint64_t)n_samples, (uint64_t)batch};
  uint64_t *all = calloc((size_t)dp->world * 3 + 1, sizeof *all);
  if (!all) return apx_diag_error(d, APX_EXIT_RUNTIME, "out of memory");
  if (apx_coll_allgather(coll, mine, sizeof mine, all, "plan and data agreement", d)) {
    free(all);
    return -1;
  }
  int rc = 0;
  for (int32_t r = 1; r < dp->world && !rc; r++) {
    const uint64_t *o = all + 3 * r;
    if (o[0] != all[0])
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: rank %d runs a plan with hash %016" PRIx64 ", rank 0 one with hash %016" PRIx64
                          ": every rank needs the same plan file",
                          plan_name(p), (int)r, o[0], all[0]);
    else if (o[1] != all[1] || o[2] != all[2])
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "--data: rank %d sees %" PRIu64 " samples in batches of %" PRIu64
                          ", rank 0 %" PRIu64 " in batches of %" PRIu64 ": every rank needs the same data",
                          (int)r, o[1], o[2], all[1], all[2]);
  }
  free(all);
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
  ApxTensor t = *apx_exec_view(ex, dp->found_inf_buf);
  be->err[0] = 0;
  /* queued on the executor's queue like a kernel (cpu: done on return; NCCL: in stream order
   * before the rest of the section), so no host synchronization is needed here */
  ApxStatus st = be->iface.allreduce ? be->iface.allreduce(be, ex->q, &t, 1, APX_REDUCE_MAX)
                                     : APX_STATUS_UNSUPPORTED;
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
