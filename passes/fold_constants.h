/* fold_constants.h - compile-time folding of shape subgraphs and constants (DESIGN.md 2, 4).
 *
 * First, a float initializer (APX_VAL_PARAM) used only as a static input (ops.def
 * STATIC_INPUTS: Dropout's ratio, ...) or as an input of a compile-time op becomes
 * APX_VAL_CONST: it is an operand, never a trained weight.
 * Then pass_fold_constants walks g->order; for every live node it runs apx_node_canonicalize and
 * apx_node_infer (ir/infer.h), then folds it when
 *   - it is Shape: always (from the input's static shape, data or not);
 *   - it is another compile-time op (ops.def FOLD: Constant, ConstantOfShape, Equal,
 *     Range): always; an input that is not a constant is the error
 *     "compile-time only op: its inputs are not constant (input K 'name')";
 *   - every present input is APX_VAL_CONST with data and the op is a cheap shape-subgraph
 *     op: data movement (Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
 *     Split, Slice, Gather, Expand, Where, Cast) of any dtype, or Add/Sub/Mul/Div/Neg on
 *     integer tensors; each output at most APX_FOLD_MAX_ELEMS elements. PARAMs are never
 *     folded (they are trained), nor float arithmetic.
 * Folding evaluates the node on the CPU (apx_cpu_run, kernels/cpu; Shape, Constant,
 * ConstantOfShape and the copy-only ops Identity/Reshape/Flatten/Squeeze/Unsqueeze are
 * evaluated here directly; a compile-time output over APX_FOLD_MAX_BYTES is an error),
 * turns its outputs into APX_VAL_CONST values with data in
 * g->arena and producer -1, and marks the node APX_NODEF_DEAD. A folded value keeps its
 * name, so graph outputs and later nodes see the constant. Dead-code elimination is not
 * done here (nodes whose outputs nobody uses stay).
 * Returns APX_PASS_CHANGED when something folded (g->order is then stale: the pipeline
 * re-sorts), APX_PASS_UNCHANGED otherwise, APX_PASS_ERROR with the message in d. */
#ifndef APX_FOLD_CONSTANTS_H
#define APX_FOLD_CONSTANTS_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_FOLD_MAX_ELEMS (1 << 20)
/* A compile-time op whose output would exceed this is an error (bad or hostile model). */
#define APX_FOLD_MAX_BYTES ((int64_t)1 << 30)

int pass_fold_constants(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
