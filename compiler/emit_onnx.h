/* emit_onnx.h - --emit-onnx FILE: the mixed-precision forward graph as ONNX (DESIGN.md 7).
 *
 * Writes the live FORWARD-section nodes of g (in g->order) as one ModelProto through
 * protobuf-c: ai.onnx opset g->opset, raised where bfloat16 needs it (compiler/onnx_opset.h:
 * Conv, pooling ... admit bfloat16 only from opset 22; a bf16 node whose op has no bf16 form
 * at the highest opset the written graph allows is written as fp32 compute between Casts),
 * ir_version 8 (9 for opset 19-20, 10 for opset >= 21, the lowest that admits the opset), so
 * onnx.checker (full_check, strict type inference) accepts it and onnxruntime runs it.
 * Meant to run after the precision passes (Cast nodes inserted, initializer dtypes changed)
 * and before fusion.
 *
 *  - doc_string of every node (Netron shows it): "apexc: DECISION (REASON)", its note, and
 *    for a node written as fp32 compute the reason; inserted Casts say so. The model's
 *    doc_string names the source model and any opset raise.
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

/* What was written, for the CLI's one-line summary. */
typedef struct ApxEmitOnnxInfo {
  int64_t opset, model_opset; /* written ai.onnx opset; the model's */
  int32_t nodes;              /* NodeProtos written (widening Casts included) */
  int32_t casts_inserted;     /* of those, Casts apexc's precision passes inserted */
  int32_t initializers;
  int32_t widened;            /* bf16 nodes written as fp32 compute */
  size_t bytes;               /* the serialized model */
} ApxEmitOnnxInfo;

/* As apx_emit_onnx; fills *info (may be NULL) on success. */
int apx_emit_onnx_file(const ApxGraph *g, const char *path, ApxEmitOnnxInfo *info, ApxDiag *d);

/* As apx_emit_onnx, into a malloc'ed buffer (*buf, *len; the caller frees *buf). */
int apx_emit_onnx_memory(const ApxGraph *g, void **buf, size_t *len, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
