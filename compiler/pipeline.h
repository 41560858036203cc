/* pipeline.h - the whole compiler as one static table of passes (QBE main.c style).
 *
 *   load -> fold_constants -> infer_shapes -> [training graph] -> precision -> cast
 *   insertion/cleanup -> fusion -> bucketing -> memory plan
 *
 * apx_compile_file() loads the model and runs every pass in order (the driver's inspect
 * function, when given, at the inspection point); with
 * o->verify_each_pass it runs apx_graph_verify() after each (tests do), honours
 * --disable-pass=NAME and --dump-after=NAME (dump to stderr). The result is a graph ready
 * for emit_plan (compiler/emit_plan.h). */
#ifndef APX_PIPELINE_H
#define APX_PIPELINE_H

#include <stdio.h>

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Loads o->model_path into g (apx_graph_init is done here), applies o->bind (graph inputs
 * bound to data, compiler/bind_inputs.h) and runs the pipeline.
 * Returns 0 or -1 (error in d). The caller frees g with apx_graph_free in both cases. */
int apx_compile_file(ApxGraph *g, const ApxOptions *o, ApxDiag *d);
/* Runs the pipeline on an already loaded graph. */
int apx_compile_graph(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* The inspection point: called once after the precision passes (cast_cleanup) and before
 * sync_bn, master weights and fusion, so --explain rows and --emit-onnx nodes are the
 * model's own (DESIGN.md 7). The pass table itself does no I/O: the driver passes this.
 * Returns 0 or -1 (error in d), which stops the compile. */
typedef int (*ApxInspectFn)(const ApxGraph *g, const ApxOptions *o, ApxDiag *d);
int apx_compile_file_inspected(ApxGraph *g, const ApxOptions *o, ApxInspectFn inspect, ApxDiag *d);
int apx_compile_graph_inspected(ApxGraph *g, const ApxOptions *o, ApxInspectFn inspect, ApxDiag *d);
/* The CLI's inspection: the --explain rows (o->explain, to o->explain_path or stdout) and
 * the --emit-onnx model (o->emit_onnx). */
int apx_inspect_write(const ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* The pass table, for --help and tests. */
const ApxPassInfo *apx_pipeline_passes(int *count);

/* Human-readable dump of the graph (one line per node: name, op, inputs/outputs with
 * dtype and shape, section, precision). */
void apx_graph_dump(const ApxGraph *g, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
