/* bind_inputs.h - binding a loaded model's graph inputs to given tensors before it is
 * compiled (DESIGN.md 13 `apexrun infer`; the ONNX node-test harness uses the same rule).
 *
 * The rule (apx_input_must_be_constant): a graph input must be a compile-time constant when
 * it feeds a static-input slot of the op table (ops.def STATIC_INPUTS: Reshape's shape,
 * Slice's starts/ends/axes/steps, Squeeze/Unsqueeze axes, Split's split, Expand's shape,
 * ReduceSum/ReduceMean axes, Dropout's ratio and training_mode ...) or any input of a
 * compile-time op other than Shape (Range, Equal, ConstantOfShape: they are folded, never
 * run). Such an input, when bound, becomes an APX_VAL_CONST holding the given data, exactly
 * as if the exporter had written it as a constant; fold_constants then folds it.
 * Every other bound input stays a runtime data input: its dtype must match the data's, its
 * static dimensions must equal the data's, and unknown or symbolic ones take the data's (an
 * input no node reads takes the data's shape unchecked).
 * ONNX 1.12's test data stores bfloat16 tensors as uint16 bit patterns: uint16 data for a
 * bfloat16 input is taken as bfloat16 with the same bits.
 *
 * The bindings reach the compiler through ApxOptions.bind (apx_compile_file applies them right
 * after loading, before any pass). */
#ifndef APX_BIND_INPUTS_H
#define APX_BIND_INPUTS_H

#include "ir/diag.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxInputBinding {
  const char *name;  /* graph input name; NULL: by index (filled in by apx_bind_inputs) */
  int32_t index;     /* with name NULL: the index among the model's data inputs (g->inputs
                        as loaded: graph.input without initializers, in order) */
  const char *file;  /* where the data came from, for messages (may be NULL) */
  ApxTensorConst t;  /* the data; copied into the graph's arena when bound as a constant */
  int32_t constant;  /* out: 1 when bound as a compile-time constant */
} ApxInputBinding;

/* 1 when graph input (or any value) v must be a compile-time constant under the rule. */
int apx_input_must_be_constant(const ApxGraph *g, int v);

/* The dtype data stored as `file` stands for when the graph declares `declared`. */
ApxDType apx_bind_data_dtype(ApxDType file, ApxDType declared);

/* Applies the bindings to a freshly loaded g: resolves index bindings to names, turns the
 * inputs that must be constants into constants (removed from g->inputs, which keeps the
 * other inputs in order), checks and completes the others' dtype and shape. Returns 0, or
 * -1 with a one-line error naming the file and input (exit code 2) in d. */
int apx_bind_inputs(ApxGraph *g, ApxInputBinding *b, int n, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
