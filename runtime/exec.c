/* exec.c - plan execution on a backend (exec.h). */
#include "runtime/exec.h"
#include "runtime/backend_registry.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/validate.h"

void apx_exec_config_init(ApxExecConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->device = "cpu";
}

static int be_error(ApxExec *ex, ApxDiag *d, ApxStatus st, const char *what) {
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: %s backend: %s: %s: %s", ex->plan->path,
                        ex->be->iface.name, what, apx_status_name(st),
                        ex->be->err[0] ? ex->be->err : "no detail");
}

static void shape_str(const ApxTensor *t, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "%s [", apx_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", t->dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Format 2 derived buffers (plan.h init_from): the source's bytes converted on the host in
 * chunks, each uploaded and waited for before its staging is reused. */
static ApxStatus upload_derived(ApxExec *ex, const ApxPlanBuffer *b, const ApxPlanBuffer *src,
                                uint8_t **stage, size_t *cap) {
  ApxBackend *be = ex->be;
  size_t ss = apx_dtype_size(src->dtype), ds = apx_dtype_size(b->dtype);
  int64_t n = b->bytes / (int64_t)ds, chunk = ((int64_t)16 << 20) / (int64_t)ds;
  if (!*stage) {
    *cap = (size_t)(n < chunk ? n : chunk) * ds + 1;
    if (!(*stage = malloc(*cap))) return APX_STATUS_OOM;
  }
  chunk = (int64_t)(*cap / ds);
  ApxStatus st = APX_STATUS_OK;
  for (int64_t off = 0; off < n && st == APX_STATUS_OK; off += chunk) {
    int64_t m = n - off < chunk ? n - off : chunk;
    st = apx_cpu_convert((const uint8_t *)src->data + (size_t)off * ss, src->dtype, *stage,
                         b->dtype, m);
    if (st == APX_STATUS_OK)
      st = be->iface.copy_h2d(be, ex->q, (uint8_t *)ex->persistent.base + b->offset + (size_t)off * ds,
                              *stage, (size_t)m * ds);
    if (st == APX_STATUS_OK) st = be->iface.queue_sync(be, ex->q);
  }
  return st;
}

int apx_exec_reset_persistent(ApxExec *ex, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  ApxBackend *be = ex->be;
  ApxStatus st = be->iface.memset(be, ex->q, ex->persistent.base, 0, ex->persistent.size);
  for (int32_t i = 0; i < p->n_bufs && st == APX_STATUS_OK; i++) {
    const ApxPlanBuffer *b = &p->bufs[i];
    if (!b->data_len || !b->data) continue;
    st = be->iface.copy_h2d(be, ex->q, (uint8_t *)ex->persistent.base + b->offset, b->data,
                            (size_t)b->data_len);
  }
  ex->n_syncs++;
  if (st == APX_STATUS_OK) st = be->iface.queue_sync(be, ex->q);
  uint8_t *stage = NULL;
  size_t cap = 0;
  for (int32_t i = 0; i < p->n_bufs && st == APX_STATUS_OK; i++)
    if (p->bufs[i].init_from >= 0 && p->bufs[p->bufs[i].init_from].data)
      st = upload_derived(ex, &p->bufs[i], &p->bufs[p->bufs[i].init_from], &stage, &cap);
  free(stage);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "uploading initial data");
}

/* The type a kernel runs in, for the backend's supports query: its first present output's
 * dtype, else its first present input's (as apx_cpu_supports / apx_cuda_supports define T). */
static ApxDType kernel_type(const ApxPlan *p, const ApxPlanKernel *kn) {
  for (int32_t i = 0; i < kn->n_out; i++)
    if (kn->out[i] >= 0) return p->bufs[kn->out[i]].dtype;
  for (int32_t i = 0; i < kn->n_in; i++)
    if (kn->in[i] >= 0) return p->bufs[kn->in[i]].dtype;
  return APX_DT_UNDEFINED;
}

/* Refuses, before any allocation, a plan with kernels the backend cannot run, naming each
 * missing op once ("Conv, Add (int64)"). Allreduce kernels belong to the collective layer. */
static int check_supported(const ApxPlan *p, ApxBackend *be, ApxDiag *d) {
  if (!be->iface.supports) return 0;
  char list[1024] = "";
  size_t k = 0;
  uint8_t seen[APX_OP_COUNT] = {0};
  int missing = 0;
  for (int32_t i = 0; i < p->n_kernels; i++) {
    const ApxPlanKernel *kn = &p->kernels[i];
    if (kn->op == APX_OP_Allreduce || (int)kn->op <= 0 || kn->op >= APX_OP_COUNT) continue;
    ApxDType t = kernel_type(p, kn);
    if (t == APX_DT_UNDEFINED || be->iface.supports(be, kn->op, t) || seen[kn->op]) continue;
    seen[kn->op] = 1;
    missing++;
    int typed = be->iface.supports(be, kn->op, APX_DT_F32);
    if (k < sizeof list)
      k += (size_t)snprintf(list + k, sizeof list - k, typed ? "%s%s (%s)" : "%s%s", k ? ", " : "",
                            apx_op_name(kn->op), apx_dtype_short(t));
  }
  if (!missing) return 0;
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet on %s: %s", p->path,
                        be->iface.name, list);
}

/* The tensors an Allreduce kernel's reduction writes: its outputs (its inputs in plans
 * without outputs). */
static const ApxTensor *reduced_views(const ApxExec *ex, int32_t k, int32_t *n) {
  const ApxPlanKernel *kn = &ex->plan->kernels[k];
  const ApxTensor *args = ex->args + ex->arg_off[k];
  if (kn->n_out == 0) {
    *n = kn->n_in;
    return args;
  }
  *n = kn->n_in < kn->n_out ? kn->n_in : kn->n_out;
  return args + kn->n_in;
}

static int views_overlap(const ApxTensor *a, const ApxTensor *b) {
  if (!a->data || !b->data) return 0;
  uintptr_t a0 = (uintptr_t)a->data, a1 = a0 + apx_tensor_bytes(a);
  uintptr_t b0 = (uintptr_t)b->data, b1 = b0 + apx_tensor_bytes(b);
  return a0 < b1 && b0 < a1 && a1 > a0 && b1 > b0;
}

/* For every kernel k, the earlier Allreduce kernels whose reduced tensors share bytes with
 * one of k's inputs or outputs (by address, so buffers the memory plan placed over each
 * other count too): k must complete them first when they are still in flight. */
static int build_wait_lists(ApxExec *ex) {
  const ApxPlan *p = ex->plan;
  int32_t n_ar = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) n_ar += p->kernels[k].op == APX_OP_Allreduce;
  ex->wait_off = calloc((size_t)p->n_kernels + 1, sizeof *ex->wait_off);
  ex->req = calloc((size_t)p->n_kernels + 1, sizeof *ex->req);
  ex->inflight = calloc((size_t)p->n_kernels + 1, sizeof *ex->inflight);
  if (!ex->wait_off || !ex->req || !ex->inflight) return -1;
  if (n_ar == 0) return 0;
  int32_t *ar = calloc((size_t)n_ar, sizeof *ar);
  uintptr_t *lo = calloc((size_t)n_ar, sizeof *lo), *hi = calloc((size_t)n_ar, sizeof *hi);
  int32_t cap = 64, n_ids = 0;
  ex->wait_ids = malloc((size_t)cap * sizeof *ex->wait_ids);
  int rc = -1;
  if (!ar || !lo || !hi || !ex->wait_ids) goto out;
  n_ar = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    if (p->kernels[k].op != APX_OP_Allreduce) continue;
    int32_t n;
    const ApxTensor *t = reduced_views(ex, k, &n);
    lo[n_ar] = UINTPTR_MAX, hi[n_ar] = 0;
    for (int32_t i = 0; i < n; i++) {
      if (!t[i].data) continue;
      uintptr_t a = (uintptr_t)t[i].data, b = a + apx_tensor_bytes(&t[i]);
      if (a < lo[n_ar]) lo[n_ar] = a;
      if (b > hi[n_ar]) hi[n_ar] = b;
    }
    ar[n_ar++] = k;
  }
  for (int32_t k = 0; k < p->n_kernels; k++) {
    ex->wait_off[k] = n_ids;
    const ApxPlanKernel *kn = &p->kernels[k];
    const ApxTensor *args = ex->args + ex->arg_off[k];
    for (int32_t j = 0; j < n_ar && ar[j] < k; j++) {
      int hit = 0;
      int32_t n;
      const ApxTensor *t = reduced_views(ex, ar[j], &n);
      for (int32_t a = 0; a < kn->n_in + kn->n_out && !hit; a++) {
        if (!args[a].data) continue;
        uintptr_t a0 = (uintptr_t)args[a].data, a1 = a0 + apx_tensor_bytes(&args[a]);
        if (a1 <= lo[j] || a0 >= hi[j]) continue;
        for (int32_t i = 0; i < n && !hit; i++) hit = views_overlap(&args[a], &t[i]);
      }
      if (!hit) continue;
      if (n_ids == cap) {
        int32_t *nw = realloc(ex->wait_ids, (size_t)cap * 2 * sizeof *nw);
        if (!nw) goto out;
        ex->wait_ids = nw;
        cap *= 2;
      }
      ex->wait_ids[n_ids++] = ar[j];
    }
  }
  ex->wait_off[p->n_kernels] = n_ids;
  rc = 0;
out:
  free(ar);
  free(lo);
  free(hi);
  return rc;
}

/* Hands every kernel, as it will be launched, to the backend's prepare slot (cuda: the
 * cuBLASLt products are made now, not in step 1). */
static int prepare_kernels(ApxExec *ex, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  ApxBackend *be = ex->be;
  if (!be->iface.prepare || p->n_kernels == 0) return 0;
  ApxKernelCall *calls = calloc((size_t)p->n_kernels, sizeof *calls);
  if (!calls) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", p->path);
  int32_t n = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const ApxPlanKernel *kn = &p->kernels[k];
    if (ex->skip[k] || kn->op == APX_OP_Allreduce) continue;
    ApxTensor *args = ex->args + ex->arg_off[k];
    calls[n++] = (ApxKernelCall){kn->op, ex->attrs[k], args, kn->n_in, args + kn->n_in, kn->n_out, 0, kn->node};
  }
  be->err[0] = 0;
  ApxStatus st = be->iface.prepare(be, calls, n);
  free(calls);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "preparing the kernels");
}

int apx_exec_init(ApxExec *ex, const ApxPlan *plan, const ApxExecConfig *cfg, ApxDiag *d) {
  memset(ex, 0, sizeof *ex);
  ex->plan = plan;
  ApxExecConfig dflt;
  if (!cfg) {
    apx_exec_config_init(&dflt);
    cfg = &dflt;
  }
  ApxBackendConfig bc = {cfg->device_index, cfg->n_threads, cfg->seed_set || cfg->seed ? cfg->seed : plan->opts.seed};
  char err[512];
  ApxStatus st = apx_backend_create(cfg->device ? cfg->device : "cpu", &bc, &ex->be, err, sizeof err);
  if (st != APX_STATUS_OK)
    return apx_diag_error(d, st == APX_STATUS_BAD_INPUT ? APX_EXIT_BAD_INPUT : APX_EXIT_RUNTIME,
                          "%s: %s", plan->path, err);
  ApxBackend *be = ex->be;
  if (check_supported(plan, be, d)) {
    apx_exec_free(ex);
    return -1;
  }
  if ((st = be->iface.queue_create(be, &ex->q)) != APX_STATUS_OK) {
    int rc = be_error(ex, d, st, "creating a queue");
    apx_exec_free(ex);
    return rc;
  }
  if ((st = be->iface.buffer_alloc(be, (size_t)plan->mem.arena_bytes, &ex->arena)) != APX_STATUS_OK ||
      (st = be->iface.buffer_alloc(be, (size_t)plan->mem.persistent_bytes, &ex->persistent)) !=
          APX_STATUS_OK) {
    int rc = be_error(ex, d, st, "allocating the arena and persistent buffers");
    apx_exec_free(ex);
    return rc;
  }

  /* views of every buffer, then each kernel's argument list */
  int64_t n_args = 0;
  for (int32_t k = 0; k < plan->n_kernels; k++) n_args += plan->kernels[k].n_in + plan->kernels[k].n_out;
  ex->views = calloc((size_t)plan->n_bufs + 1, sizeof *ex->views);
  ex->args = calloc((size_t)n_args + 1, sizeof *ex->args);
  ex->arg_off = calloc((size_t)plan->n_kernels + 1, sizeof *ex->arg_off);
  ex->skip = calloc((size_t)plan->n_kernels + 1, 1);
  ex->attrs = calloc((size_t)plan->n_kernels + 1, sizeof *ex->attrs);
  if (!ex->views || !ex->args || !ex->arg_off || !ex->skip || !ex->attrs) {
    apx_exec_free(ex);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", plan->path);
  }
  for (int32_t i = 0; i < plan->n_bufs; i++) {
    const ApxPlanBuffer *b = &plan->bufs[i];
    ApxTensor *t = &ex->views[i];
    uint8_t *base = b->region == APX_MEM_ARENA ? ex->arena.base : ex->persistent.base;
    t->data = base + b->offset;
    t->dtype = b->dtype;
    t->rank = b->rank;
    memcpy(t->dims, b->dims, sizeof t->dims);
  }
  int64_t off = 0;
  for (int32_t k = 0; k < plan->n_kernels; k++) {
    const ApxPlanKernel *kn = &plan->kernels[k];
    ex->attrs[k] = kn->attrs;
    ex->arg_off[k] = off;
    for (int32_t i = 0; i < kn->n_in + kn->n_out; i++) {
      int32_t id = i < kn->n_in ? kn->in[i] : kn->out[i - kn->n_in];
      if (id >= 0) ex->args[off + i] = ex->views[id];
    }
    off += kn->n_in + kn->n_out;
    if ((apx_op_info(kn->op)->flags & APX_OPF_SHAPEONLY) && kn->n_in >= 1 && kn->n_out == 1 &&
        kn->in[0] >= 0 && kn->out[0] >= 0 &&
        ex->views[kn->in[0]].data == ex->views[kn->out[0]].data)
      ex->skip[k] = 1;
  }
  ex->no_overlap = cfg->no_overlap;
  if (prepare_kernels(ex, d)) {
    apx_exec_free(ex);
    return -1;
  }
  if (build_wait_lists(ex)) {
    apx_exec_free(ex);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", plan->path);
  }
  if (apx_exec_reset_persistent(ex, d)) {
    apx_exec_free(ex);
    return -1;
  }
  return 0;
}

void apx_exec_free(ApxExec *ex) {
  if (ex->be) {
    ApxBackend *be = ex->be;
    if (ex->arena.base) be->iface.buffer_free(be, &ex->arena);
    if (ex->persistent.base) be->iface.buffer_free(be, &ex->persistent);
    if (ex->readback.base) be->iface.buffer_free(be, &ex->readback);
    if (ex->graph && be->iface.graph_free) be->iface.graph_free(be, ex->graph);
    if (ex->q) be->iface.queue_destroy(be, ex->q);
    apx_backend_free(be);
  }
  free(ex->views);
  free(ex->args);
  free(ex->arg_off);
  free(ex->skip);
  free(ex->attrs);
  /* requests still in flight after a failed run cannot be cancelled (MPI forbids it for
   * nonblocking collectives); the job is ending: their staging stays with the collective */
  free(ex->wait_off);
  free(ex->wait_ids);
  free(ex->req);
  free(ex->inflight);
  memset(ex, 0, sizeof *ex);
}

const ApxTensor *apx_exec_view(const ApxExec *ex, int32_t buf) {
  return buf >= 0 && buf < ex->plan->n_bufs ? &ex->views[buf] : NULL;
}

/* Host copies and synchronizations cannot be recorded into a graph (the staging ring is
 * filled at call time; a sync would end the capture). */
static int refuse_capturing(ApxExec *ex, const char *what, ApxDiag *d) {
  if (!ex->capturing) return 0;
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: %s during graph capture (it belongs before or after the "
                        "graph launch)", ex->plan->path, what);
}

void apx_exec_set_step(ApxExec *ex, int64_t step) { ex->step = step; }

int apx_exec_write_step(ApxExec *ex, ApxDiag *d) {
  ApxBackend *be = ex->be;
  if (!be->iface.step_write || ex->step == ex->step_dev) return 0;
  if (refuse_capturing(ex, "a new step", d)) return -1;
  be->err[0] = 0;
  ApxStatus st = be->iface.step_write(be, ex->q, ex->step);
  if (st != APX_STATUS_OK) return be_error(ex, d, st, "writing the step");
  ex->step_dev = ex->step;
  return 0;
}

void apx_exec_set_attrs(ApxExec *ex, int32_t k, const void *attrs) {
  if (k < 0 || k >= ex->plan->n_kernels) return;
  ex->attrs[k] = attrs ? attrs : ex->plan->kernels[k].attrs;
}

static int check_buf(ApxExec *ex, int32_t buf, size_t bytes, ApxDiag *d) {
  if (buf < 0 || buf >= ex->plan->n_bufs)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: no buffer %d", ex->plan->path, buf);
  if ((int64_t)bytes != ex->plan->bufs[buf].bytes)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: buffer '%s' holds %" PRId64 " bytes, not %zu",
                          ex->plan->path, ex->plan->bufs[buf].name, ex->plan->bufs[buf].bytes, bytes);
  return 0;
}

int apx_exec_write_async(ApxExec *ex, int32_t buf, const void *host, size_t bytes, ApxDiag *d) {
  if (refuse_capturing(ex, "a host-to-device copy", d)) return -1;
  if (check_buf(ex, buf, bytes, d)) return -1;
  ApxBackend *be = ex->be;
  ApxStatus st = be->iface.copy_h2d(be, ex->q, ex->views[buf].data, host, bytes);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "copying to the device");
}

int apx_exec_write(ApxExec *ex, int32_t buf, const void *host, size_t bytes, ApxDiag *d) {
  if (apx_exec_write_async(ex, buf, host, bytes, d)) return -1;
  ex->n_syncs++;
  ApxStatus st = ex->be->iface.queue_sync(ex->be, ex->q);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "copying to the device");
}

int apx_exec_read(ApxExec *ex, int32_t buf, void *host, size_t bytes, ApxDiag *d) {
  if (refuse_capturing(ex, "a device-to-host copy", d)) return -1;
  if (check_buf(ex, buf, bytes, d)) return -1;
  ApxBackend *be = ex->be;
  ApxStatus st = be->iface.copy_d2h(be, ex->q, host, ex->views[buf].data, bytes);
  ex->n_syncs++;
  if (st == APX_STATUS_OK) st = be->iface.queue_sync(be, ex->q);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "copying from the device");
}

int apx_exec_readback_init(ApxExec *ex, int32_t n_slots, ApxDiag *d) {
  ApxBackend *be = ex->be;
  if (ex->readback.base) be->iface.buffer_free(be, &ex->readback);
  ex->n_readback = 0;
  if (n_slots <= 0) return 0;
  ApxStatus st = be->iface.buffer_alloc(be, (size_t)n_slots * 8, &ex->readback);
  if (st != APX_STATUS_OK) return be_error(ex, d, st, "allocating the readback buffer");
  ex->n_readback = n_slots;
  return 0;
}

int apx_exec_readback_stage(ApxExec *ex, int32_t slot, int32_t buf, ApxDiag *d) {
  if (slot < 0 || slot >= ex->n_readback || buf < 0 || buf >= ex->plan->n_bufs ||
      ex->plan->bufs[buf].bytes > 8)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: readback slot %d of %d for buffer %d", ex->plan->path,
                          slot, ex->n_readback, buf);
  ApxBackend *be = ex->be;
  ApxStatus st = be->iface.copy_d2d(be, ex->q, (uint8_t *)ex->readback.base + (size_t)slot * 8,
                                    ex->views[buf].data, (size_t)ex->plan->bufs[buf].bytes);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "staging a scalar for readback");
}

int apx_exec_readback_fetch(ApxExec *ex, int32_t n, void *host, ApxDiag *d) {
  if (n < 0 || n > ex->n_readback)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: readback of %d slots, %d reserved", ex->plan->path, n,
                          ex->n_readback);
  if (refuse_capturing(ex, "the readback", d)) return -1;
  ApxBackend *be = ex->be;
  ApxStatus st = n ? be->iface.copy_d2h(be, ex->q, host, ex->readback.base, (size_t)n * 8) : APX_STATUS_OK;
  if (st != APX_STATUS_OK) return be_error(ex, d, st, "copying from the device");
  return apx_exec_sync(ex, d);
}

int apx_exec_set_input(ApxExec *ex, int32_t i, const ApxTensor *host, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  if (i < 0 || i >= p->n_inputs)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the plan has %d data inputs, not %d",
                          p->path, p->n_inputs, i + 1);
  int32_t id = p->inputs[i];
  const ApxTensor *want = &ex->views[id];
  int same_shape = host->rank == want->rank;
  for (int k = 0; same_shape && k < want->rank; k++) same_shape = host->dims[k] == want->dims[k];
  int convertible = apx_dtype_is_float(host->dtype) && apx_dtype_is_float(want->dtype);
  if (!same_shape || (host->dtype != want->dtype && !convertible)) {
    char a[160], b[160];
    shape_str(want, a, sizeof a);
    shape_str(host, b, sizeof b);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: input %d ('%s'): expected %s, got %s",
                          p->path, i, p->bufs[id].name, a, b);
  }
  if (host->dtype == want->dtype) return apx_exec_write(ex, id, host->data, apx_tensor_bytes(host), d);
  size_t bytes = apx_tensor_bytes(want);
  void *tmp = malloc(bytes ? bytes : 1);
  if (!tmp) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", p->path);
  ApxStatus st = apx_cpu_convert(host->data, host->dtype, tmp, want->dtype, apx_tensor_numel(host));
  int rc = st == APX_STATUS_OK
               ? apx_exec_write(ex, id, tmp, bytes, d)
               : apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: input %d ('%s'): cannot convert %s to %s",
                                p->path, i, p->bufs[id].name, apx_dtype_name(host->dtype),
                                apx_dtype_name(want->dtype));
  free(tmp);
  return rc;
}

/* 1 when this run overlaps buckets: a collective layer with the non-blocking slots, more
 * than one rank, and no --no-overlap. */
static int overlapping(const ApxExec *ex) {
  const ApxBackend *be = ex->be;
  return !ex->no_overlap && be->world > 1 && be->iface.allreduce_bucket_start && be->iface.request_test &&
         be->iface.request_wait;
}

/* Allreduce(m_0..m_k) -> r_0..r_k, one gradient bucket (passes/bucketing.h). A single
 * process needs no communication: r_i takes m_i's bytes (nothing to do where the memory plan
 * reduced in place). With K ranks and overlap the collective layer stages m_i and starts the
 * reduction (kernel k's request goes in flight; complete_bucket writes r_i); otherwise r_i =
 * m_i and the blocking slot reduces r_i in place. The kernel is launched where the plan put
 * it, right after its last member's producer, so the reduction overlaps the rest of
 * backward. */
static ApxStatus run_allreduce(ApxExec *ex, int32_t k, const ApxPlanKernel *kn, ApxTensor *args) {
  ApxBackend *be = ex->be;
  ApxTensor *ins = args, *outs = args + kn->n_in;
  int32_t n = kn->n_in < kn->n_out ? kn->n_in : kn->n_out;
  /* r_i mirrors m_i (the plan validator proved it for loaded plans; plans built in memory
   * are held to it here before a byte is copied or reduced) */
  char why[256];
  if (apx_kernel_validate(kn->op, kn->attrs, ins, kn->n_in, outs, kn->n_out, why, sizeof why))
    return apx_backend_fail(be, APX_STATUS_BAD_INPUT, "%s", why);
  if (be->world > 1 && overlapping(ex)) {
    const ApxTensor *t = kn->n_out > 0 ? outs : ins; /* plans without outputs reduce their inputs */
    if (kn->n_out == 0) n = kn->n_in;
    ApxCollRequest *req = NULL;
    ApxStatus st = be->iface.allreduce_bucket_start(be, ex->q, ins, t, n, kn->attrs, &req);
    if (st != APX_STATUS_OK) return st;
    ex->req[k] = req;
    ex->inflight[ex->n_inflight++] = k;
    return APX_STATUS_OK;
  }
  for (int32_t i = 0; i < n; i++) {
    if (!ins[i].data || !outs[i].data || ins[i].data == outs[i].data) continue;
    ApxStatus st = be->iface.copy_d2d(be, ex->q, outs[i].data, ins[i].data, apx_tensor_bytes(&ins[i]));
    if (st != APX_STATUS_OK) return st;
  }
  if (be->world <= 1) return APX_STATUS_OK;
  ApxTensor *t = kn->n_out > 0 ? outs : ins;
  if (kn->n_out == 0) n = kn->n_in;
  if (be->iface.allreduce_bucket) return be->iface.allreduce_bucket(be, ex->q, t, n, kn->attrs);
  if (!be->iface.allreduce)
    return apx_backend_fail(be, APX_STATUS_UNSUPPORTED,
                            "not supported yet: %d ranks but no collective layer", be->world);
  return be->iface.allreduce(be, ex->q, t, n, APX_REDUCE_SUM);
}

static int kernel_error(ApxExec *ex, ApxDiag *d, int32_t k, ApxStatus st) {
  const ApxPlanKernel *kn = &ex->plan->kernels[k];
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: kernel %d node '%s' (%s): %s: %s", ex->plan->path, k,
                        kn->node, apx_op_name(kn->op), apx_status_name(st),
                        ex->be->err[0] ? ex->be->err : "no detail");
}

/* Completes the in-flight bucket of Allreduce kernel k: waits (under the collective
 * deadline) and writes its outputs. */
static int complete_bucket(ApxExec *ex, int32_t k, ApxDiag *d) {
  ApxBackend *be = ex->be;
  ApxCollRequest *req = ex->req[k];
  if (!req) return 0;
  ex->req[k] = NULL;
  int32_t j = 0;
  while (j < ex->n_inflight && ex->inflight[j] != k) j++;
  if (j < ex->n_inflight) {
    memmove(&ex->inflight[j], &ex->inflight[j + 1], (size_t)(ex->n_inflight - j - 1) * sizeof *ex->inflight);
    ex->n_inflight--;
  }
  be->err[0] = 0;
  ApxStatus st = be->iface.request_wait(be, ex->q, req);
  return st == APX_STATUS_OK ? 0 : kernel_error(ex, d, k, st);
}

static int complete_all(ApxExec *ex, ApxDiag *d) {
  while (ex->n_inflight > 0)
    if (complete_bucket(ex, ex->inflight[0], d)) return -1;
  return 0;
}

int apx_exec_sync(ApxExec *ex, ApxDiag *d) {
  if (refuse_capturing(ex, "a host synchronization", d)) return -1;
  ApxBackend *be = ex->be;
  ex->n_syncs++;
  ApxStatus st = be->iface.queue_sync(be, ex->q);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "running kernels");
}

int apx_exec_run_range(ApxExec *ex, int32_t begin, int32_t end, ApxDiag *d) {
  if (apx_exec_queue_range(ex, begin, end, d)) return -1;
  return apx_exec_sync(ex, d);
}

int apx_exec_queue_range(ApxExec *ex, int32_t begin, int32_t end, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  ApxBackend *be = ex->be;
  if (begin < 0 || end > p->n_kernels || begin > end)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: kernel range [%d, %d) out of range", p->path,
                          begin, end);
  ex->n_launched = 0;
  ex->n_overlapped = 0;
  if (complete_all(ex, d)) return -1; /* left over by a failed run */
  if (apx_exec_write_step(ex, d)) return -1;
  for (int32_t k = begin; k < end; k++) {
    if (ex->skip[k]) continue;
    const ApxPlanKernel *kn = &p->kernels[k];
    ApxTensor *args = ex->args + ex->arg_off[k];
    if (ex->n_inflight > 0) {
      /* buckets this kernel reads or writes complete first; the others are polled (oldest
       * first, up to the first one still running) so that MPI progresses them */
      for (int32_t w = ex->wait_off[k]; w < ex->wait_off[k + 1]; w++)
        if (ex->req[ex->wait_ids[w]] && complete_bucket(ex, ex->wait_ids[w], d)) return -1;
      int done = 1;
      for (int32_t i = 0; i < ex->n_inflight && done; i++) {
        int32_t j = ex->inflight[i];
        be->err[0] = 0;
        ApxStatus st = be->iface.request_test(be, ex->req[j], &done);
        if (st != APX_STATUS_OK) return kernel_error(ex, d, j, st);
      }
      if (ex->n_inflight > 0) ex->n_overlapped++;
    }
    ApxKernelCall call = {kn->op, ex->attrs[k], args, kn->n_in, args + kn->n_in, kn->n_out, ex->step,
                          kn->node};
    be->err[0] = 0;
    ApxStatus st = kn->op == APX_OP_Allreduce ? run_allreduce(ex, k, kn, args)
                                              : be->iface.launch(be, ex->q, &call);
    if (st != APX_STATUS_OK) return kernel_error(ex, d, k, st);
    ex->n_launched++;
  }
  ex->overlapped_total += ex->n_overlapped;
  return complete_all(ex, d);
}

int apx_exec_run(ApxExec *ex, ApxSection sec, ApxDiag *d) {
  if ((int)sec < 0 || (int)sec > 2)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: no section %d", ex->plan->path, (int)sec);
  return apx_exec_run_range(ex, ex->plan->sec_begin[sec], ex->plan->sec_end[sec], d);
}
