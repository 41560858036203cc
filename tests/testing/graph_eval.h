/* graph_eval.h - a test-only graph evaluator: runs the live nodes of a graph in g->order
 * through the CPU reference kernels (apx_cpu_run) on host buffers it owns.
 *
 * Every value gets a buffer of its dtype and static shape: PARAM, CONST and STATE values
 * start as a copy of their data, the rest zeroed. Static inputs are passed like other
 * inputs (kernels read the typed attributes). Effects of nodes without outputs
 * (AssignState, OptimizerStep) and in-place updates land in the evaluator's buffers, never
 * in the graph. Allreduce (gradient buckets) is one process's reduction: output i = input
 * i. Use: apx_eval_init after the passes, set inputs with apx_eval_buf, run
 * sections, read buffers. Gradient checks run FORWARD again after changing a parameter's
 * buffer; Dropout masks repeat because the Philox key (ctx.seed) and ctx.step stay fixed. */
#ifndef APX_TESTING_GRAPH_EVAL_H
#define APX_TESTING_GRAPH_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "kernels/cpu/cpu_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_EVAL_FORWARD (1u << APX_SEC_FORWARD)
#define APX_EVAL_BACKWARD (1u << APX_SEC_BACKWARD)
#define APX_EVAL_OPTIMIZER (1u << APX_SEC_OPTIMIZER)
#define APX_EVAL_ALL (APX_EVAL_FORWARD | APX_EVAL_BACKWARD | APX_EVAL_OPTIMIZER)

typedef struct ApxEval {
  const ApxGraph *g;
  int32_t n_vals;
  void **buf;      /* [n_vals] host bytes, NULL for values without a static size */
  size_t *bytes;   /* [n_vals] */
  ApxCpuCtx ctx;   /* seed / step / threads for the kernels */
  char err[1024];  /* "node 'name' (Op): <kernel message>" after a failed run */
} ApxEval;

/* Allocates buffers for every value of g. Returns 0 or -1 (message in e->err). */
int apx_eval_init(ApxEval *e, const ApxGraph *g);
void apx_eval_free(ApxEval *e);
/* Buffer of value v (NULL when it has none). */
void *apx_eval_buf(ApxEval *e, int v);
/* Runs the live nodes of g->order whose section is in mask (APX_EVAL_*).
 * Returns 0 or -1 (message in e->err). */
int apx_eval_run(ApxEval *e, unsigned mask);
/* Element i of value v as a double (any float or integer dtype). */
double apx_eval_get(ApxEval *e, int v, int64_t i);
/* Sets element i of value v from a double. */
void apx_eval_set(ApxEval *e, int v, int64_t i, double x);

#ifdef __cplusplus
}
#endif
#endif
