/* fold_constants.h - constant evaluation at compile time (DESIGN.md 2, 4; docs/folding.md).
 *
 * First, a float initializer (APX_VAL_PARAM) used only as a static input (ops.def
 * STATIC_INPUTS: Dropout's ratio, ...) or as an input of a compile-time op becomes
 * APX_VAL_CONST: it is an operand, never a trained weight.
 * Then pass_fold_constants walks g->order; for every live node it runs apx_node_canonicalize and
 * apx_node_infer (ir/infer.h), then evaluates it at compile time when
 *   - it is a compile-time only op (ops.def FOLD: Shape, Constant, ConstantOfShape, Equal,
 *     Range): always. Shape folds from its input's static shape, data or not; for the others
 *     an input that is not a constant is the error
 *     "compile-time only op: its inputs are not constant (input K 'name' ...)";
 *   - or, after canonicalization (which may rewrite the node: CastLike becomes a Cast of
 *     its input 0), every present input is APX_VAL_CONST with data (nothing from a data input, a
 *     trainable parameter or runtime state upstream: PARAM, INPUT and STATE values never
 *     are constants; a frozen initializer, --frozen or absent from apexc.trainable, is), the
 *     node has at least one present input and output, and the CPU reference kernels run the
 *     call (apx_cpu_supports_call: the op has a kernel for these dtypes). That is generic
 *     over the op table: every op with a CPU kernel folds, whatever its family and dtype.
 *     Never folded: APX_OPF_RANDOM ops (Dropout, ...) unless their typed attributes have a
 *     training_mode field that is 0 (inference-mode Dropout is the identity); ops whose
 *     typed attributes have training_mode = 1 (training BatchNormalization updates its
 *     running statistics); MULTITENSOR ops (in-place training-step updates).
 * Evaluation is apx_cpu_run (kernels/cpu) on the node's typed attributes, with the CPU's
 * precision semantics (fp16/bf16 loaded to fp32, rounded once on store; integers as int64):
 * a folded value is bit-identical to what the CPU backend computes for that node at run
 * time. Only Constant (its attribute is the tensor) and ConstantOfShape's `value` attribute
 * (passed to the kernel as its one-element input 1) are read here. n_threads is 1.
 * A folded node's outputs become APX_VAL_CONST values with data in g->arena and producer
 * -1; the node is marked APX_NODEF_DEAD. A folded value keeps its name, so graph outputs and
 * later nodes see the constant. Dead-code elimination is not done here (nodes whose outputs
 * nobody uses stay; constants nobody uses are not in the plan).
 *
 * The cap: every folded tensor's bytes (intermediates included; Constant nodes, which are
 * the model's own data, excepted) are charged against o->fold_max_mb (--fold-max-mb,
 * default APX_FOLD_MAX_MB_DEFAULT MiB). A node that is not compile-time only and whose
 * outputs would take the total past the cap is not folded: it stays a runtime node, its
 * note (--explain) says why, and one warning names the count and the first such node.
 * Compile-time only ops always fold (no backend runs them), are charged too, and an output
 * over APX_FOLD_MAX_BYTES is an error (bad or hostile model).
 * Errors: a kernel failure other than "not supported yet" on constant inputs (an index out
 * of range, integer division by zero) is the error "cannot be evaluated on its constant
 * inputs: <kernel message>" (exit 2): the same call would fail at run time. A kernel's "not
 * supported yet" leaves a foldable node to run at run time (and is the error for a
 * compile-time only op).
 * Returns APX_PASS_CHANGED when something folded (g->order is then stale: the pipeline
 * re-sorts), APX_PASS_UNCHANGED otherwise, APX_PASS_ERROR with the message in d. */
#ifndef APX_FOLD_CONSTANTS_H
#define APX_FOLD_CONSTANTS_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compile-time op whose output would exceed this is an error (bad or hostile model). */
#define APX_FOLD_MAX_BYTES ((int64_t)1 << 30)

int pass_fold_constants(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
