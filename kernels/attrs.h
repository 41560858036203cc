/* attrs.h - typed attribute structs, one per op family (ops.def names which one), expanded
 * from attrs.def, where each struct is written once with its fields described and the
 * contract of every op that uses it (inputs, outputs, formulas) beside it.
 *
 * Plain structs without pointers: the compiler fills them from ONNX attributes and from
 * constant inputs (opset >= 13 moved axes/shapes into inputs; ops.def STATIC_INPUTS), the
 * plan stores them as bytes, and every backend reads the same fields. Layout changes bump
 * APX_ATTRS_ABI. */
#ifndef APX_ATTRS_H
#define APX_ATTRS_H

#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_ATTRS_ABI 4

/* Values of the APX_ENUM fields (attrs.def lists their names in the same order). */
typedef enum ApxGeluApprox { APX_GELU_NONE = 0, APX_GELU_TANH = 1 } ApxGeluApprox;
typedef enum ApxReduction { APX_RED_MEAN = 0, APX_RED_SUM = 1, APX_RED_NONE = 2 } ApxReduction;
typedef enum ApxActivation { APX_ACT_NONE = 0, APX_ACT_RELU = 1, APX_ACT_GELU = 2, APX_ACT_GELU_TANH = 3 } ApxActivation;
typedef enum ApxOptimizerKind { APX_OPTIM_SGD = 0, APX_OPTIM_ADAMW = 1, APX_OPTIM_LAMB = 2 } ApxOptimizerKind;
typedef enum ApxPadMode { APX_PAD_CONSTANT = 0, APX_PAD_REFLECT = 1, APX_PAD_EDGE = 2 } ApxPadMode;

/* The structs (field kinds: attrs.def). */
#define APX_F32(f, onnx, def) float f;
#define APX_I32(f, onnx, def) int32_t f;
#define APX_I64(f, onnx, def) int64_t f;
#define APX_BOOL(f, onnx, def) int32_t f;
#define APX_ENUM(f, onnx, def, names) int32_t f;
#define APX_DTYPE(f, onnx, def) int32_t f;
#define APX_COUNT(f) int32_t f;
#define APX_I64S(f, n, onnx) int64_t f[n];
#define APX_I64V(f, max, onnx) int64_t f[max];
#define APX_F64V(f, max) double f[max];
#define APX_LABELV(f, max) int64_t f[max];
#define APX_ATTRS(Name, FIELDS) typedef struct Name { FIELDS } Name;
#include "kernels/attrs.def"
#undef APX_ATTRS
#undef APX_F32
#undef APX_I32
#undef APX_I64
#undef APX_BOOL
#undef APX_ENUM
#undef APX_DTYPE
#undef APX_COUNT
#undef APX_I64S
#undef APX_I64V
#undef APX_F64V
#undef APX_LABELV

/* k, OptimizerStep's state groups S_1 .. S_k per parameter (0 for an unknown kind). */
static inline int apx_optimizer_state_groups(const ApxAttrOptimizer *a) {
  switch (a->kind) {
    case APX_OPTIM_SGD: return a->momentum != 0.0f ? 1 : 0;
    case APX_OPTIM_ADAMW:
    case APX_OPTIM_LAMB: return 2;
  }
  return 0;
}

/* OptimizerStep's input count, n_in = 4 + n * (2 + k + master_weights) (in int64: a crafted
 * n_params cannot overflow it). */
static inline int64_t apx_optimizer_n_inputs(const ApxAttrOptimizer *a) {
  return 4 + (int64_t)a->n_params * (2 + apx_optimizer_state_groups(a) + (a->master_weights != 0));
}


/* Input layout of OptimizerStep (the kernel ABI in attrs.def): the fixed inputs before the
 * per-parameter groups. */
enum {
  APX_OPTIM_IN_FOUND_INF = 0,
  APX_OPTIM_IN_NORM_SQ = 1,
  APX_OPTIM_IN_LR = 2,
  APX_OPTIM_IN_STEP = 3,
  APX_OPTIM_IN_FIRST_GROUP = 4,
};
/* Outputs of UnscaleCheck before the unscaled gradients. */
enum {
  APX_UNSCALE_OUT_FOUND_INF = 0,
  APX_UNSCALE_OUT_FIRST_BAD = 1,
  APX_UNSCALE_OUT_NORM_SQ = 2,
  APX_UNSCALE_OUT_FIRST_GRAD = 3,
};

#ifdef __cplusplus
}
#endif
#endif
