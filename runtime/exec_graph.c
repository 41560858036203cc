/* exec_graph.c - CUDA Graph capture of kernel ranges through the backend's capture slots
 * (exec.h apx_exec_capture_begin / _end / apx_exec_graph_launch). The executor only brackets
 * what the caller queues; what may be queued while capturing is held by exec.c (host copies
 * and synchronizations are refused) and the backend (a launch must read the device-side
 * step, backend.h step_write). */
#include <stdlib.h>

#include "runtime/exec.h"

int apx_exec_can_capture(const ApxExec *ex) {
  const ApxBackendI *b = &ex->be->iface;
  return b->capture_begin && b->capture_end && b->graph_launch && b->graph_free && b->step_write;
}

static int be_fail(ApxExec *ex, ApxDiag *d, ApxStatus st, const char *what) {
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: %s backend: %s: %s: %s", ex->plan->path, ex->be->iface.name,
                        what, apx_status_name(st), ex->be->err[0] ? ex->be->err : "no detail");
}

int apx_exec_capture_begin(ApxExec *ex, ApxDiag *d) {
  if (!apx_exec_can_capture(ex))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet: graph capture on the %s backend",
                          ex->plan->path, ex->be->iface.name);
  if (ex->capturing) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: a graph capture is in progress", ex->plan->path);
  if (apx_exec_write_step(ex, d)) return -1; /* recorded launches read the counter, not a value */
  ApxBackend *be = ex->be;
  be->err[0] = 0;
  ApxStatus st = be->iface.capture_begin(be, ex->q);
  if (st != APX_STATUS_OK) return be_fail(ex, d, st, "starting the graph capture");
  ex->capturing = 1;
  return 0;
}

int apx_exec_capture_end(ApxExec *ex, ApxDiag *d) {
  if (!ex->capturing) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: no graph capture in progress", ex->plan->path);
  ApxBackend *be = ex->be;
  ex->capturing = 0;
  ApxDevGraph *g = NULL;
  be->err[0] = 0;
  ApxStatus st = be->iface.capture_end(be, ex->q, &g);
  if (st != APX_STATUS_OK) return be_fail(ex, d, st, "capturing the step as a CUDA Graph");
  if (ex->graph) be->iface.graph_free(be, ex->graph);
  ex->graph = g;
  return 0;
}

int apx_exec_graph_launch(ApxExec *ex, ApxDiag *d) {
  if (!ex->graph) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: no captured graph to launch", ex->plan->path);
  if (ex->capturing) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: graph launch during capture", ex->plan->path);
  if (apx_exec_write_step(ex, d)) return -1;
  ApxBackend *be = ex->be;
  be->err[0] = 0;
  ApxStatus st = be->iface.graph_launch(be, ex->q, ex->graph);
  return st == APX_STATUS_OK ? 0 : be_fail(ex, d, st, "launching the captured step");
}
