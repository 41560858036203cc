/* exec.c - plan execution on a backend (exec.h). */
#include "runtime/exec.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

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
  if (st == APX_STATUS_OK) st = be->iface.queue_sync(be, ex->q);
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
  if (!ex->views || !ex->args || !ex->arg_off || !ex->skip) {
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
    if (ex->q) be->iface.queue_destroy(be, ex->q);
    apx_backend_free(be);
  }
  free(ex->views);
  free(ex->args);
  free(ex->arg_off);
  free(ex->skip);
  memset(ex, 0, sizeof *ex);
}

const ApxTensor *apx_exec_view(const ApxExec *ex, int32_t buf) {
  return buf >= 0 && buf < ex->plan->n_bufs ? &ex->views[buf] : NULL;
}

void apx_exec_set_step(ApxExec *ex, int64_t step) { ex->step = step; }

static int check_buf(ApxExec *ex, int32_t buf, size_t bytes, ApxDiag *d) {
  if (buf < 0 || buf >= ex->plan->n_bufs)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: no buffer %d", ex->plan->path, buf);
  if ((int64_t)bytes != ex->plan->bufs[buf].bytes)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: buffer '%s' holds %" PRId64 " bytes, not %zu",
                          ex->plan->path, ex->plan->bufs[buf].name, ex->plan->bufs[buf].bytes, bytes);
  return 0;
}

int apx_exec_write(ApxExec *ex, int32_t buf, const void *host, size_t bytes, ApxDiag *d) {
  if (check_buf(ex, buf, bytes, d)) return -1;
  ApxBackend *be = ex->be;
  ApxStatus st = be->iface.copy_h2d(be, ex->q, ex->views[buf].data, host, bytes);
  if (st == APX_STATUS_OK) st = be->iface.queue_sync(be, ex->q);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "copying to the device");
}

int apx_exec_read(ApxExec *ex, int32_t buf, void *host, size_t bytes, ApxDiag *d) {
  if (check_buf(ex, buf, bytes, d)) return -1;
  ApxBackend *be = ex->be;
  ApxStatus st = be->iface.copy_d2h(be, ex->q, host, ex->views[buf].data, bytes);
  if (st == APX_STATUS_OK) st = be->iface.queue_sync(be, ex->q);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "copying from the device");
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

/* Allreduce(m_0..m_k) -> r_0..r_k, one gradient bucket (passes/bucketing.h): r_i takes m_i's
 * bytes where the memory plan reduced in place, else m_i is copied to r_i first; then the
 * outputs are reduced over the ranks by the collective slot. A single process needs no
 * communication. The kernel is launched where the plan put it, right after its last
 * member's producer: on a backend with asynchronous queues it overlaps the rest of backward. */
static ApxStatus run_allreduce(ApxExec *ex, const ApxPlanKernel *kn, ApxTensor *args) {
  ApxBackend *be = ex->be;
  ApxTensor *ins = args, *outs = args + kn->n_in;
  int32_t n = kn->n_in < kn->n_out ? kn->n_in : kn->n_out;
  for (int32_t i = 0; i < n; i++) {
    if (!ins[i].data || !outs[i].data || ins[i].data == outs[i].data) continue;
    ApxStatus st = be->iface.copy_d2d(be, ex->q, outs[i].data, ins[i].data, apx_tensor_bytes(&ins[i]));
    if (st != APX_STATUS_OK) return st;
  }
  if (be->world <= 1) return APX_STATUS_OK;
  ApxTensor *t = kn->n_out > 0 ? outs : ins; /* plans without outputs reduce their inputs */
  if (kn->n_out == 0) n = kn->n_in;
  if (be->iface.allreduce_bucket) return be->iface.allreduce_bucket(be, ex->q, t, n, kn->attrs);
  if (!be->iface.allreduce)
    return apx_backend_fail(be, APX_STATUS_UNSUPPORTED,
                            "not supported yet: %d ranks but no collective layer", be->world);
  return be->iface.allreduce(be, ex->q, t, n, APX_REDUCE_SUM);
}

int apx_exec_run_range(ApxExec *ex, int32_t begin, int32_t end, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  ApxBackend *be = ex->be;
  if (begin < 0 || end > p->n_kernels || begin > end)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: kernel range [%d, %d) out of range", p->path,
                          begin, end);
  ex->n_launched = 0;
  for (int32_t k = begin; k < end; k++) {
    if (ex->skip[k]) continue;
    const ApxPlanKernel *kn = &p->kernels[k];
    ApxTensor *args = ex->args + ex->arg_off[k];
    ApxKernelCall call = {kn->op, kn->attrs, args, kn->n_in, args + kn->n_in, kn->n_out, ex->step,
                          kn->node};
    be->err[0] = 0;
    ApxStatus st = kn->op == APX_OP_Allreduce ? run_allreduce(ex, kn, args)
                                              : be->iface.launch(be, ex->q, &call);
    if (st != APX_STATUS_OK)
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: kernel %d node '%s' (%s): %s: %s", p->path, k,
                            kn->node, apx_op_name(kn->op), apx_status_name(st),
                            be->err[0] ? be->err : "no detail");
    ex->n_launched++;
  }
  ApxStatus st = be->iface.queue_sync(be, ex->q);
  return st == APX_STATUS_OK ? 0 : be_error(ex, d, st, "running kernels");
}

int apx_exec_run(ApxExec *ex, ApxSection sec, ApxDiag *d) {
  if ((int)sec < 0 || (int)sec > 2)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: no section %d", ex->plan->path, (int)sec);
  return apx_exec_run_range(ex, ex->plan->sec_begin[sec], ex->plan->sec_end[sec], d);
}
