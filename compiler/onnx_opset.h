/* onnx_opset.h - which ai.onnx opset --emit-onnx writes, so that bfloat16 is valid
 * (DESIGN.md 7, issue 13): the facts of ONNX's operator schemas the emitter needs, and the
 * plan made from them for one graph.
 *
 * Facts (onnx_opset.c's table, checked against onnx.defs by //tests/ort:opset_table_check):
 *  - the first ai.onnx opset whose schema of an op admits tensor(bfloat16), per input slot
 *    where slots differ (13 for most ops; Conv, MaxPool, AveragePool, GlobalAveragePool 22;
 *    Gelu 20; Pow's exponent 15 ...; Range never);
 *  - the opsets at which an op's form changes so that a node written in the model's older
 *    form is no longer valid (ReduceMean's axes attribute becomes an input at 18; Split
 *    without its split input needs num_outputs from 18; BatchNormalization's outputs at 14).
 *    Changes that only add optional attributes or inputs, or only widen types, keep the
 *    written form valid and are not listed.
 *
 * The plan (apx_onnx_opset_plan): the written opset is the model's, raised to the highest
 * bf16 need among the written (forward) nodes that touch a bfloat16 value, but never past
 * APX_ONNX_MAX_OPSET nor past an opset at which a written node's form would change. A bf16
 * node whose op needs more (or admits bf16 at no opset) is written as fp32 compute: Casts
 * to fp32 before it and back to bf16 after it, and the reason in its doc_string and in
 * --explain's note. fp16 graphs keep the model's opset. */
#ifndef APX_ONNX_OPSET_H
#define APX_ONNX_OPSET_H

#include <stdint.h>

#include "ir/arena.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_ONNX_MAX_OPSET 22 /* the highest opset the emitter writes */

/* The first opset admitting bfloat16 in input `slot` of op (slot -1: its outputs and float
 * inputs in general); 0: none up to APX_ONNX_MAX_OPSET. */
int64_t apx_onnx_bf16_since(ApxOp op, int slot);

/* The first opset after `from` (exclusive) and up to `to` (inclusive) at which node's
 * written form stops being valid, or 0 when it stays valid through `to`. */
int64_t apx_onnx_form_breaks(const ApxGraph *g, int node, int64_t from, int64_t to);

typedef struct ApxOnnxOpsetPlan {
  int64_t opset;        /* the opset to write */
  int32_t n_widened;    /* forward nodes written as fp32 compute */
  uint8_t *widen;       /* [g->n_nodes]: 1 = written as fp32 compute */
  const char **why;     /* [g->n_nodes]: the reason, for widened nodes */
} ApxOnnxOpsetPlan;

/* Makes the plan for g's live forward nodes; arrays in arena a. Returns 0, -1 when out of
 * memory. */
int apx_onnx_opset_plan(const ApxGraph *g, ApxArena *a, ApxOnnxOpsetPlan *p);

/* The table rows, for the table check: op, bf16_since (slot -1), and the slot exceptions
 * and form changes as space-separated "inputK=OPSET" and "OPSET:WHEN" items (WHEN: always,
 * no-input-K, attr-NAME). Returns the number of
 * rows written into the caller's arrays (at most cap); NULL arrays count only. */
int apx_onnx_opset_table(ApxOp *ops, int64_t *bf16_since, const char **changes, int cap);

#ifdef __cplusplus
}
#endif
#endif
