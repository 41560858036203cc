/* emit_onnx.h - --emit-onnx FILE: the mixed-precision forward graph as ONNX (DESIGN.md 7).
 *
 * Writes the live FORWARD-section nodes of g (in g->order) as one ModelProto through
 * protobuf-c: ai.onnx opset g->opset, ir_version 8 (9 for opset 19-20, 10 for opset >= 21,
 * the lowest that admits the opset), so onnx.checker accepts it and onnxruntime runs it.
 * Meant to run after the precision passes (Cast nodes inserted, initializer dtypes changed)
 * and before fusion.
 *
 *  - nodes: op type, name, inputs and outputs (absent optional ones as ""; apexc's extra
 *    outputs that ONNX does not define, BatchNormalization's saved mean / inverse std, are
 *    dropped), and the generic attributes as loaded. A Cast's target type comes from its
 *    typed attribute (ApxAttrCast.to) whenever set. Nodes created by passes without generic
 *    attributes get the ONNX attributes equivalent to their typed struct.
 *  - initializers: every value a written node reads that no written node produces and that
 *    is not a graph input (parameters, constants, folded static inputs such as Reshape's
 *    shape), as raw_data in the value's current dtype. Contract with the passes: v->data
 *    holds numel elements of v->dtype; a value with no data whose origin has (a cast copy
 *    of a parameter) is written as the origin's data converted to v->dtype (fp32 <-> fp16 /
 *    bf16 round to nearest even, as kernels/half.h).
 *  - graph inputs (g->inputs) and outputs (g->outputs) with their current dtypes and
 *    shapes (symbolic dims as dim_param); value_info for every other written activation
 *    whose dtype is known.
 *
 * Errors (return -1, one line in d): internal ops (fused, gradient, training-step) have no
 * ONNX form: "not supported yet: --emit-onnx of internal op X"; a value read by the forward
 * graph with no data and no producer there; models over 2 GiB (would need external data);
 * the file cannot be written. */
#ifndef APX_EMIT_ONNX_H
#define APX_EMIT_ONNX_H

#include "ir/diag.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns 0, or -1 with the error in d (code 2 for graphs that cannot be expressed, 1 for
 * I/O failures). */
int apx_emit_onnx(const ApxGraph *g, const char *path, ApxDiag *d);

/* As apx_emit_onnx, into a malloc'ed buffer (*buf, *len; the caller frees *buf). */
int apx_emit_onnx_memory(const ApxGraph *g, void **buf, size_t *len, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
