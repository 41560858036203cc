/* attrs.h - typed attribute structs, one per op family (ops.def names which one).
 *
 * Plain structs without pointers: the compiler fills them from ONNX attributes and from
 * constant inputs (opset >= 13 moved axes/shapes into inputs; ops.def STATIC_INPUTS), the
 * plan stores them as bytes, and every backend reads the same fields. Layout changes bump
 * APX_ATTRS_ABI. Shape-defining values that the output shape already carries (Reshape
 * target, Expand shape, Split sizes) are not repeated here. */
#ifndef APX_ATTRS_H
#define APX_ATTRS_H

#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_ATTRS_ABI 1

typedef struct ApxAttrNone {
  int32_t unused;
} ApxAttrNone;

/* Gemm: Y = alpha * op(A) @ op(B) + beta * C */
typedef struct ApxAttrGemm {
  float alpha, beta;
  int32_t trans_a, trans_b;
} ApxAttrGemm;

/* LeakyRelu, LeakyReluGrad(dY, X) -> dX */
typedef struct ApxAttrLeakyRelu {
  float alpha;
} ApxAttrLeakyRelu;

/* Gelu, GeluGrad(dY, X) -> dX */
typedef enum ApxGeluApprox { APX_GELU_NONE = 0, APX_GELU_TANH = 1 } ApxGeluApprox;
typedef struct ApxAttrGelu {
  int32_t approximate; /* ApxGeluApprox */
} ApxAttrGelu;

/* Softmax, LogSoftmax, Flatten, Concat, Gather: axis normalized to [0, rank).
 * SoftmaxGrad(dY, Y) -> dX; LogSoftmaxGrad(dY, Y) -> dX;
 * GatherGrad(dY, Indices) -> dData (scatter-add into zeros of the output's shape). */
typedef struct ApxAttrAxis {
  int64_t axis;
} ApxAttrAxis;

/* LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?   (Mean/InvStdDev: fp32 when
 * stash_type = 1, shape X.shape[:axis] + [1]*(rank-axis)).
 * LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> dX, dScale, dB */
typedef struct ApxAttrLayerNorm {
  int64_t axis; /* normalized to [0, rank) */
  float epsilon;
  int32_t stash_type; /* ApxDType of Mean/InvStdDev; ONNX default 1 (fp32) */
} ApxAttrLayerNorm;

/* BatchNormalization(X, scale, B, input_mean, input_var) -> Y, running_mean?, running_var?
 *   training_mode = 1: normalizes with batch statistics; outputs 1 and 2 are the updated
 *   running statistics (bound back to inputs 3 and 4 after each step). In training mode
 *   apexc adds outputs 3 and 4: saved batch mean and saved inverse std (fp32), for the
 *   gradient.
 * BatchNormGrad(dY, X, scale, saved_mean, saved_invstd) -> dX, dscale, dB
 * BatchNormRelu: BatchNormalization followed by Relu (same inputs and outputs). */
typedef struct ApxAttrBatchNorm {
  float epsilon;
  float momentum;
  int32_t training_mode;
} ApxAttrBatchNorm;

/* Dropout(data, ratio?, training_mode?) -> output, mask?   ratio and training_mode are read
 * from constant inputs (or opset < 12 attributes). In training mode the mask comes from the
 * counter-based Philox stream: element i of the node's draw at step s uses counter
 * (seed, node_id, s, i). DropoutGrad(dY, mask) -> dX = dY * mask / (1 - ratio). */
typedef struct ApxAttrDropout {
  float ratio;
  int32_t training_mode;
  int32_t has_seed;
  int64_t seed;
  int64_t rng_stream; /* per-node stream id assigned by the compiler */
} ApxAttrDropout;

/* Conv(X, W, B?) -> Y, 2-D (N, C, H, W) only in v1; ConvBiasRelu: same plus Relu.
 * ConvGrad(dY, X, W) -> dX?, dW?, dB?   (outputs present when needed)
 * pads: [top, left, bottom, right] after auto_pad resolution. */
typedef struct ApxAttrConv {
  int64_t kernel[2];
  int64_t strides[2];
  int64_t pads[4];
  int64_t dilations[2];
  int64_t group;
} ApxAttrConv;

/* MaxPool(X) -> Y, Indices?; AveragePool(X) -> Y, 2-D in v1.
 * MaxPoolGrad(dY, X) -> dX (routes to the first max, as the forward's argmax);
 * AveragePoolGrad(dY) -> dX (output shape from the node's output value). */
typedef struct ApxAttrPool {
  int64_t kernel[2];
  int64_t strides[2];
  int64_t pads[4];
  int64_t dilations[2];
  int32_t ceil_mode;
  int32_t count_include_pad;
  int32_t storage_order;
} ApxAttrPool;

/* Reshape: target shape is the output value's shape; allowzero kept for the record. */
typedef struct ApxAttrReshape {
  int32_t allowzero;
} ApxAttrReshape;

/* Transpose: perm[rank] */
typedef struct ApxAttrTranspose {
  int32_t rank;
  int64_t perm[APX_MAX_RANK];
} ApxAttrTranspose;

/* Squeeze / Unsqueeze: axes normalized and sorted (Squeeze with no axes: every 1-dim). */
typedef struct ApxAttrAxes {
  int32_t n_axes;
  int64_t axes[APX_MAX_RANK];
} ApxAttrAxes;

/* Split: sizes are the outputs' dims along axis. */
typedef struct ApxAttrSplit {
  int64_t axis;
} ApxAttrSplit;

/* Slice: one entry per input dimension (full rank), normalized: an untouched dim has
 * start 0, step 1. Output dims come from the output value.
 * SliceGrad(dY) -> dX: zeros of the forward input's shape with dY scattered back. */
typedef struct ApxAttrSlice {
  int32_t rank;
  int64_t starts[APX_MAX_RANK];
  int64_t steps[APX_MAX_RANK];
} ApxAttrSlice;

/* ReduceSum / ReduceMean: axes normalized and sorted; n_axes = 0 with
 * noop_with_empty_axes = 0 means all axes. */
typedef struct ApxAttrReduce {
  int32_t n_axes;
  int64_t axes[APX_MAX_RANK];
  int32_t keepdims;
  int32_t noop_with_empty_axes;
} ApxAttrReduce;

/* Cast: target type */
typedef struct ApxAttrCast {
  int32_t to; /* ApxDType */
  int32_t saturate;
} ApxAttrCast;

/* Shape (folded): start/end slice of the shape (opset 15) */
typedef struct ApxAttrShape {
  int64_t start, end; /* end = INT64_MAX when absent */
} ApxAttrShape;

/* SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob?
 * NegativeLogLikelihoodLoss(input, target, weight?) -> loss
 * SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?) -> dScores
 * NegativeLogLikelihoodLossGrad(dLoss, target, weight?) -> dInput (shape of the forward input)
 * FusedXentropy(scores, labels) -> loss, (saved row max + logsumexp) ;
 * FusedXentropyGrad(dLoss, scores, labels, saved) -> dScores */
typedef enum ApxReduction { APX_RED_MEAN = 0, APX_RED_SUM = 1, APX_RED_NONE = 2 } ApxReduction;
typedef struct ApxAttrLoss {
  int32_t reduction; /* ApxReduction */
  int32_t has_ignore_index;
  int64_t ignore_index;
} ApxAttrLoss;

/* FusedMatMul(A, B) -> alpha * op(A) @ op(B), batched with broadcast like MatMul; op()
 * transposes the last two dims when the flag is set. Used by MatMul/Gemm gradients. */
typedef struct ApxAttrFusedMatMul {
  int32_t trans_a, trans_b;
  float alpha;
} ApxAttrFusedMatMul;

/* FusedDense(X, W, B?) -> Y = act(X @ op(W) + B); X (M, K) or batched (..., K).
 * FusedDenseGrad(dY, X, W, Y) -> dX, dW, dB */
typedef enum ApxActivation { APX_ACT_NONE = 0, APX_ACT_RELU = 1, APX_ACT_GELU = 2, APX_ACT_GELU_TANH = 3 } ApxActivation;
typedef struct ApxAttrFusedDense {
  int32_t trans_w;
  int32_t activation; /* ApxActivation */
  float alpha, beta;
} ApxAttrFusedDense;

/* FusedSoftmax(X, Mask?) -> softmax(X * scale + Mask) along the last axis.
 * FusedSoftmaxGrad(dY, Y) -> dX (times scale) */
typedef struct ApxAttrFusedSoftmax {
  float scale;
  int32_t has_mask;
} ApxAttrFusedSoftmax;

/* OptimizerStep(params..., grads..., state...) multi-tensor update, in place. */
typedef enum ApxOptimizerKind { APX_OPTIM_SGD = 0, APX_OPTIM_ADAMW = 1, APX_OPTIM_LAMB = 2 } ApxOptimizerKind;
typedef struct ApxAttrOptimizer {
  int32_t kind; /* ApxOptimizerKind */
  int32_t n_params;
  float lr, momentum, beta1, beta2, eps, weight_decay, dampening;
  int32_t nesterov;
  int32_t master_weights; /* 1: params are fp32 masters with half copies refreshed */
} ApxAttrOptimizer;

/* Allreduce(tensors...) -> same tensors, in place, one bucket. */
typedef struct ApxAttrAllreduce {
  int32_t bucket;
  int32_t fp32;       /* allreduce in fp32 */
  float predivide;    /* gradient predivide factor */
  int32_t average;
} ApxAttrAllreduce;

#ifdef __cplusplus
}
#endif
#endif
