/* exec.h - the executor: runs a plan on a backend (DESIGN.md 12).
 *
 *   apx_exec_init      plan -> backend -> arena + persistent buffers -> initial data uploaded
 *   apx_exec_set_input data inputs (host tensors, dtype and shape checked); they keep
 *                      their values across runs until set again
 *   apx_exec_run       the kernels of one section in plan order (FORWARD, BACKWARD,
 *                      OPTIMIZER), or apx_exec_run_range for any kernel range
 *   apx_exec_read      any buffer back to the host (outputs, the loss, found_inf ...)
 *   apx_exec_write     any buffer from the host (loss scale, learning rate, checkpoints)
 *
 * A training step (issue 5) is: set inputs, run FORWARD and BACKWARD, read UnscaleCheck's
 * found_inf, run OPTIMIZER (the kernel skips the update itself when found_inf is set), update
 * the loss-scale and lr STATE buffers with apx_exec_write, apx_exec_set_step. Checkpoints read
 * and write the persistent buffers (PARAM and STATE kinds) by buffer id.
 *
 * The executor keeps pointers into the plan: the plan must outlive it. Kernel failures are
 * reported as "<plan>: kernel K node '<name>' (<Op>): <status>: <reason>" with exit code 1. */
#ifndef APX_EXEC_H
#define APX_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "ir/diag.h"
#include "runtime/backend.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxExecConfig {
  const char *device;  /* backend name; NULL: "cpu" */
  int32_t device_index;
  int32_t n_threads;   /* <= 0: library default */
  uint64_t seed;       /* Dropout's Philox key; 0: the plan's seed option ... */
  int32_t seed_set;    /* ... unless seed_set: then seed is the key, 0 included */
  int32_t no_overlap;  /* 1: every gradient bucket's allreduce completes inside its kernel
                          (apexrun --no-overlap); 0: it overlaps the following kernels */
} ApxExecConfig;

typedef struct ApxExec {
  const ApxPlan *plan;
  ApxBackend *be;
  ApxQueue *q;
  ApxDevBuffer arena, persistent;
  ApxTensor *views;       /* [n_bufs] device views of every buffer */
  ApxTensor *args;        /* per-kernel input then output views, kernel k at arg_off[k] */
  int64_t *arg_off;       /* [n_kernels] */
  uint8_t *skip;          /* [n_kernels] 1: a SHAPEONLY kernel whose output is its input */
  const void **attrs;     /* [n_kernels] the attributes each kernel runs with: the plan's,
                             or the caller's (apx_exec_set_attrs) */
  int64_t step;
  int32_t n_launched;     /* kernels launched by the last run (tests, profiling) */
  /* overlapped gradient buckets (DESIGN.md 11), used when the backend has the
   * allreduce_bucket_start/request_test/request_wait slots and world > 1 */
  int32_t no_overlap;     /* ApxExecConfig.no_overlap */
  int32_t *wait_off;      /* [n_kernels + 1] kernel k must first complete the Allreduce */
  int32_t *wait_ids;      /*   kernels wait_ids[wait_off[k] .. wait_off[k + 1]) if in flight */
  ApxCollRequest **req;   /* [n_kernels] the request of Allreduce kernel k while in flight */
  int32_t *inflight;      /* [n_kernels] Allreduce kernels in flight, in start order */
  int32_t n_inflight;
  int32_t n_overlapped;   /* kernels the last run launched while a bucket was in flight */
  int64_t overlapped_total; /* the same over every run since init */
  int64_t n_syncs;        /* host synchronizations of the queue since init (queue_sync calls
                             made by the executor; tests count them per training step) */
  ApxDevBuffer readback;  /* apx_exec_readback_*: n_readback 8-byte slots on the device */
  int32_t n_readback;
  /* device-side step (backends with step_write) and graph capture (exec_graph.c) */
  int64_t step_dev;       /* the step last queued into the backend's device-side counter */
  int32_t capturing;      /* between apx_exec_capture_begin and _end */
  ApxDevGraph *graph;     /* the captured range, instantiated (apx_exec_graph_launch) */
} ApxExec;

void apx_exec_config_init(ApxExecConfig *cfg);

/* Returns 0 or -1 (error in d: exit 2 for an unknown device, 1 for a backend failure). */
int apx_exec_init(ApxExec *ex, const ApxPlan *plan, const ApxExecConfig *cfg, ApxDiag *d);
void apx_exec_free(ApxExec *ex);

/* Data input i (plan->inputs order) from a host tensor of the same shape. A float tensor of
 * another float dtype is converted (an fp32 test input feeding an fp16 plan input); anything
 * else that differs is an error naming the input (exit 2). */
int apx_exec_set_input(ApxExec *ex, int32_t i, const ApxTensor *host, ApxDiag *d);

/* Whole-buffer copies between host memory and buffer `buf` (bytes must equal its size). */
int apx_exec_write(ApxExec *ex, int32_t buf, const void *host, size_t bytes, ApxDiag *d);
int apx_exec_read(ApxExec *ex, int32_t buf, void *host, size_t bytes, ApxDiag *d);
/* Device view of buffer buf (data is a device address). */
const ApxTensor *apx_exec_view(const ApxExec *ex, int32_t buf);

/* Runs the kernels of section sec (an empty section does nothing), then synchronizes. */
int apx_exec_run(ApxExec *ex, ApxSection sec, ApxDiag *d);
/* Queues kernels [begin, end) in order without the final host synchronization (the
 * buckets of this range are complete or queued before it returns): the work finishes by the
 * next apx_exec_sync / readback fetch. Otherwise as apx_exec_run_range. */
int apx_exec_queue_range(ApxExec *ex, int32_t begin, int32_t end, ApxDiag *d);
/* Waits for everything queued (one host synchronization; reports asynchronous failures). */
int apx_exec_sync(ApxExec *ex, ApxDiag *d);
/* apx_exec_write without the synchronization: the backend has read `host` before it returns
 * (backend.h: copy_h2d), so host may change right away. */
int apx_exec_write_async(ApxExec *ex, int32_t buf, const void *host, size_t bytes, ApxDiag *d);
/* Scalar readback (the training step's one synchronization): a device buffer of n_slots
 * 8-byte slots; _stage queues a device-side copy of buffer buf (at most 8 bytes: the loss,
 * found_inf, first_bad, norm_sq) into a slot; _fetch copies slots [0, n) to host (n * 8
 * bytes, the buffers' own encodings) in one transfer and synchronizes once. */
int apx_exec_readback_init(ApxExec *ex, int32_t n_slots, ApxDiag *d);
int apx_exec_readback_stage(ApxExec *ex, int32_t slot, int32_t buf, ApxDiag *d);
int apx_exec_readback_fetch(ApxExec *ex, int32_t n, void *host, ApxDiag *d);
/* Runs kernels [begin, end) in order, then synchronizes. Under data parallelism an
 * Allreduce kernel only starts its bucket's reduction: the kernel stages its inputs and
 * returns; the result is written into its outputs before the first later kernel whose
 * buffers overlap them runs, and at the latest before the run returns, so between runs no
 * reduction is in flight. Between kernels the pending reductions are polled (MPI
 * progresses them while the rest of backward computes). After a failed run with more than
 * one rank, reductions may still be in flight: the only safe continuation is ending the job
 * (apx_coll_abort; apx_coll_finalize aborts too rather than hang). */
int apx_exec_run_range(ApxExec *ex, int32_t begin, int32_t end, ApxDiag *d);
/* The training step number kernels see (Dropout's Philox counter). On a backend with a
 * device-side counter (backend.h step_write) the new value is queued there by the next
 * apx_exec_queue_range, or by apx_exec_write_step. */
void apx_exec_set_step(ApxExec *ex, int64_t step);
/* Queues the step of apx_exec_set_step into the backend's device-side counter now (nothing
 * when it holds it already or the backend has none): before a graph launch or capture. */
int apx_exec_write_step(ApxExec *ex, ApxDiag *d);

/* CUDA Graph capture of a kernel range (exec_graph.c; backends with the capture slots):
 * _begin starts recording the queue (the step is written first), the queue_range /
 * readback_stage calls that follow are recorded instead of run, _end instantiates them as
 * ex->graph (replacing an earlier one), _graph_launch queues one replay (the step written
 * first). Host copies (apx_exec_write*, set_input, readback_fetch) and synchronizations are
 * refused while capturing: they stay outside, before and after the launch. A backend without
 * the slots: exit 2, "not supported yet: graph capture on the <name> backend". */
int apx_exec_capture_begin(ApxExec *ex, ApxDiag *d);
int apx_exec_capture_end(ApxExec *ex, ApxDiag *d);
int apx_exec_graph_launch(ApxExec *ex, ApxDiag *d);
/* 1 when the backend can capture (all four slots). */
int apx_exec_can_capture(const ApxExec *ex);
/* Kernel k runs with `attrs` instead of the plan's attributes from its next launch on:
 * the same struct type (apx_op_info(op)->attrs_size bytes), owned by the caller, which keeps
 * it alive while ex runs (apexrun's run-time --weight-decay / --clip-grad-norm patch the
 * OptimizerStep's copy, train.h). NULL restores the plan's. */
void apx_exec_set_attrs(ApxExec *ex, int32_t k, const void *attrs);
/* Uploads every buffer's initial data again and zeroes persistent buffers without data. */
int apx_exec_reset_persistent(ApxExec *ex, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
