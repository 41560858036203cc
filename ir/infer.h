/* infer.h - attribute canonicalization and static shape + dtype inference (DESIGN.md 2-4).
 *
 * Two steps per node, run in topological order so that every input's dtype and shape are
 * already known (the fold_constants and infer_shapes passes walk g->order doing both):
 *
 *   apx_node_canonicalize  generic ONNX attributes (ApxAttr) + constant static inputs
 *                          (ops.def STATIC_INPUTS) -> the op's typed struct (attrs.h)
 *   apx_node_infer         inputs + typed struct -> output values' dtype and shape
 *
 * Both return 0, or -1 with one line in d (exit code 2):
 *   model.onnx: node 'Gemm_12' (Gemm) input 1: expected [64,128], got [65,128]
 * and both are idempotent: running them again on an inferred node changes nothing.
 *
 * Conventions (other passes rely on these):
 *  - Opset: older attribute forms are read according to g->opset (7..21): Split `split`,
 *    Squeeze/Unsqueeze/ReduceSum `axes` attributes before 13, ReduceMean `axes` before 18,
 *    Slice starts/ends/axes attributes before 10, Dropout `ratio` attribute before 12
 *    (then training_mode = 0), BatchNormalization training = "more than one output" before
 *    14 (`spatial` = 0 rejected), Softmax/LogSoftmax axis default 1 before 13 where only
 *    the last axis is accepted (the old 2-D coercion equals the new semantics there; any
 *    other axis is "not supported yet").
 *  - Normalized attributes: axes in [0, rank) (Flatten [0, rank]), sorted where attrs.h
 *    says so; Squeeze without axes lists every size-1 dim; Conv/Pool auto_pad resolved into
 *    explicit pads [top, left, bottom, right]; defaults filled (Gemm alpha/beta 1,
 *    LeakyRelu alpha 0.01, LayerNorm axis -1 eps 1e-5 stash fp32, BatchNorm eps 1e-5
 *    momentum 0.9, Dropout ratio 0.5, Cast saturate 1, Shape end INT64_MAX ...).
 *    Canonicalization reads input shapes (to normalize axes and resolve auto_pad), so it
 *    too needs the inputs inferred first.
 *  - Static inputs must be APX_VAL_CONST values with data; otherwise
 *    "input 1 'shape' must be a compile-time constant (...)". They stay wired to the node.
 *  - Nodes created by passes: for APX_OPF_INTERNAL ops canonicalization does nothing (the
 *    creating pass fills the typed struct, usually copied from the forward node). A pass
 *    that creates an ONNX op may attach generic attributes and canonicalize, or fill the
 *    typed struct itself and call only apx_node_infer. Canonicalization keeps fields that
 *    do not come from ONNX (Dropout rng_stream).
 *  - Shapes the creating pass sets (pass-created nodes only, onnx_index < 0): Reshape and
 *    Expand without input 1 take output 0's shape (checked: element count / broadcast);
 *    Split without split sizes takes the outputs' sizes along axis when every output is
 *    shaped (they must sum to the input's dim), else splits evenly; Slice without starts
 *    takes output 0's shape. Nodes loaded from a model always follow ONNX.
 *  - Ops whose output shape is not a function of their inputs need output 0 shaped by the
 *    creating pass (its dtype is inferred): ReduceSumTo without input 1, AveragePoolGrad,
 *    GlobalAveragePoolGrad, SliceGrad, GatherGrad, NegativeLogLikelihoodLossGrad (attrs.h
 *    says so next to each). apx_node_infer checks that shape against the inputs.
 *  - ReduceSumTo(X, Like?) -> Y: Y = X summed over broadcast dims down to shape S, where
 *    S = Like's shape when input 1 is present (its data is never read) and otherwise the
 *    shape already set on Y. S must broadcast to X's shape; Y has X's dtype.
 *  - Outputs that already carry a dtype or shape (value_info, declared graph outputs, an
 *    earlier run) must agree with the inferred ones: a conflict is an error naming the
 *    value; unknown (-1) dims there are filled in.
 *  - Every present input needs a known dtype and static shape: an unbound symbolic dim is
 *    "input 0 'x': dimension 0 ('batch') is not bound: pass --dim batch=V".
 *  - Output dtypes follow ONNX: Shape int64, Equal bool, Cast `to`, MaxPool Indices int64,
 *    Dropout mask bool (the input's type before opset 10), SoftmaxCrossEntropyLoss
 *    log_prob the scores' type, LayerNorm Mean/InvStdDev stash_type, BatchNorm running
 *    stats the mean/var inputs' type and the saved mean / inv-std outputs 3, 4 fp32 [C].
 *  - Unsupported ops (tier 2, list-only, unknown) fail canonicalization with
 *    "not supported yet: <Op>". */
#ifndef APX_INFER_H
#define APX_INFER_H

#include "ir/diag.h"
#include "ir/ir.h"
#include "kernels/shape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills g->nodes[node].typed (struct named in ops.def) from the node's generic attributes
 * and constant static inputs, validating them. Returns 0 or -1 (error in d). */
int apx_node_canonicalize(ApxGraph *g, int node, ApxDiag *d);

/* Sets dtype and shape of every present output of node from its inputs and typed
 * attributes (canonicalize first), checking input dtypes and shapes. Returns 0 or -1. */
int apx_node_infer(ApxGraph *g, int node, ApxDiag *d);

/* Compile-time values for the fold_constants pass:
 * the tensor a Constant node holds (attribute value / value_float(s) / value_int(s)); t's
 * data points into the attribute (arena). Returns 0 or -1. */
int apx_constant_node_value(const ApxGraph *g, int node, ApxTensorConst *t, ApxDiag *d);
/* ConstantOfShape's fill element: dtype (default float32) and a pointer to one element. */
int apx_constant_of_shape_value(const ApxGraph *g, int node, ApxDType *dt, const void **elem,
                                ApxDiag *d);

/* The pieces of canonicalized SplitToSequence node `node` (attrs.h): their sizes along its
 * axis into sizes[0 .. *n) (at most cap), *squeeze = 1 when each piece drops the axis
 * (keepdims = 0 without split). Returns 0 or -1 (error in d). */
int apx_split_to_sequence_pieces(const ApxGraph *g, int node, int64_t *sizes, int cap, int *n,
                                 int *squeeze, ApxDiag *d);

/* 1 when apx_node_infer has a rule for op (every V1, FOLD and INTERNAL op). */
int apx_infer_has_rule(ApxOp op);

/* Broadcasting (apx_broadcast_shape, apx_broadcasts_to) and the conv / pooling window size
 * (apx_window_out) are kernels/shape.h's: inference and the kernels apply one rule. */

#ifdef __cplusplus
}
#endif
#endif
