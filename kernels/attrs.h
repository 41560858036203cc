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

#define APX_ATTRS_ABI 2

typedef struct ApxAttrNone {
  int32_t unused;
} ApxAttrNone;

/* Gradient ops without attributes (passes/grad_rules_*.c build them exactly so). All are
 * elementwise over dY's shape; the saved tensor has dY's shape unless said otherwise.
 *   ReluGrad(dY, Y) -> dX = dY * (Y > 0)             (Y: the forward output)
 *   SigmoidGrad(dY, Y) -> dX = dY * Y * (1 - Y)      (Y: the forward output)
 *   TanhGrad(dY, Y) -> dX = dY * (1 - Y * Y)         (Y: the forward output)
 *   ErfGrad(dY, X) -> dX = dY * 2/sqrt(pi) * exp(-X * X)
 *   SqrtGrad(dY, Y) -> dX = dY / (2 * Y)             (Y: the forward output)
 *   PowGrad(dY, A, B) -> dA?, dB?   A and B float (autodiff casts an integer exponent to
 *     A's type) and broadcast to dY's shape (numpy); both outputs
 *     have dY's full shape (the rule reduces them to A's / B's shape with ReduceSumTo);
 *     an output is absent (-1, data NULL) when not needed:
 *       dA = dY * B * A^(B - 1)
 *       dB = dY * A^B * log(A), and 0 where A == 0 and B >= 0 (PyTorch's convention)
 * Exp, Log, Neg, Add, Sub, Mul, Div, Where, Cast, Expand and the shape ops use plain ops
 * (Mul, Div, Neg, ReduceSumTo, Reshape, Transpose, Split, Concat, Expand, Where, Cast). */

/* Pre-shaped outputs (ir/infer.h): the pass that creates these ops sets output 0's
 * shape, which is not a function of the inputs; apx_node_infer fills the dtype and checks
 * the shape against the inputs. (AveragePoolGrad, SliceGrad, GatherGrad and
 * NegativeLogLikelihoodLossGrad too: see their structs.)
 *   ReduceSumTo(X, Like?) -> Y   X summed over broadcast dims down to shape S: Like's shape
 *     when input 1 is present (its data is never read), else Y's preset shape. S must
 *     broadcast to X's shape; Y has X's dtype.
 *   GlobalAveragePoolGrad(dY) -> dX   dX (N, C, H, W) preset (the forward input's shape);
 *     dY is (N, C, 1, 1). */

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
 * GatherGrad(dY, Indices) -> dData (scatter-add into zeros of the output's shape; dData
 * pre-shaped by the creating pass: the forward data's shape). */
typedef struct ApxAttrAxis {
  int64_t axis;
} ApxAttrAxis;

/* LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?   (Mean/InvStdDev: fp32 when
 * stash_type = 1, shape X.shape[:axis] + [1]*(rank-axis)).
 * LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> dX?, dScale?, dB?   (an output is absent,
 * -1 / data NULL, when not needed; Mean/InvStdDev are the forward's outputs 1 and 2, which
 * autodiff adds when the model left them absent) */
typedef struct ApxAttrLayerNorm {
  int64_t axis; /* normalized to [0, rank) */
  float epsilon;
  int32_t stash_type; /* ApxDType of Mean/InvStdDev; ONNX default 1 (fp32) */
} ApxAttrLayerNorm;

/* BatchNormalization(X, scale, B, input_mean, input_var) -> Y, running_mean?, running_var?
 *   training_mode = 1: normalizes with batch statistics; outputs 1 and 2 are the updated
 *   running statistics (bound back to inputs 3 and 4 after each step). In training mode
 *   apexc adds outputs 3 and 4: saved batch mean and saved inverse std (fp32; fp64 when X is fp64), for the
 *   gradient.
 * BatchNormGrad(dY, X, scale, saved_mean, saved_invstd) -> dX?, dscale?, dB?   (training-mode
 *   gradient through the batch statistics; saved_* are the forward's outputs 3 and 4; an
 *   output is absent, -1 / data NULL, when not needed). Inference-mode BatchNormalization
 *   in a training graph is differentiated with plain ops (scale * invstd of the running var).
 * BatchNormRelu: BatchNormalization followed by Relu (same inputs and outputs; output 0 is
 *   the Relu's output).
 * BatchNormReluGrad(dY, Y, X, scale, saved_mean, saved_invstd) -> dX?, dscale?, dB?
 *   BatchNormGrad of dY * (Y > 0), Y = BatchNormRelu's output 0 (training mode; passes/
 *   fuse_bn_relu.c); outputs as BatchNormGrad's. */
typedef struct ApxAttrBatchNorm {
  float epsilon;
  float momentum;
  int32_t training_mode;
} ApxAttrBatchNorm;

/* Dropout(data, ratio?, training_mode?) -> output, mask?   ratio and training_mode are read
 * from constant inputs (or opset < 12 attributes). In training mode the mask comes from the
 * counter-based Philox stream: element i of the node's draw at step s is keyed by the seed
 * (attrs seed when has_seed, else the run's) and counted by (i / 4, s, rng_stream); the
 * exact mapping is in kernels/philox.h. mask is bool. Inference mode: identity, all-true
 * mask. DropoutGrad(dY, mask) -> dX = dY * mask / (1 - ratio) (dY in inference mode). */
typedef struct ApxAttrDropout {
  float ratio;
  int32_t training_mode;
  int32_t has_seed;
  int64_t seed;
  int64_t rng_stream; /* per-node stream id assigned by the compiler */
} ApxAttrDropout;

/* Conv(X, W, B?) -> Y, 2-D (N, C, H, W) only in v1; ConvBiasRelu: same plus Relu.
 * ConvGrad(dY, X, W) -> dX?, dW?, dB?   (outputs present when needed)
 * ConvBiasReluGrad(dY, Y, X, W) -> dX?, dW?, dB?   ConvGrad of dY * (Y > 0), Y =
 *   ConvBiasRelu's output (passes/fuse_conv.c)
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
 * AveragePoolGrad(dY) -> dX (dX pre-shaped by the creating pass: the forward input's shape). */
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
 * SliceGrad(dY) -> dX: zeros of the forward input's shape with dY scattered back (dX
 * pre-shaped by the creating pass). */
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
 * SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?) -> dScores   (log_prob is
 *   the forward's output 1, which autodiff adds when the model left it absent)
 * NegativeLogLikelihoodLossGrad(dLoss, target, weight?) -> dInput (shape of the forward input,
 *   pre-shaped by the creating pass)
 * FusedXentropy(scores, labels) -> loss, saved? (saved: fp32, labels' shape: the row's
 *   logsumexp, row max included);
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

/* FusedDense(X, W, B?) -> Y, Aux?   Y = act(alpha * X @ op(W) + beta * B); X (M, K) or
 *   batched (..., K); W (K, N), or (N, K) with trans_w; B (N); Aux (Y's shape, optional) =
 *   the pre-activation alpha * X @ op(W) + beta * B (the GELU gradients need it).
 * FusedDenseGrad(dY, X, W, T) -> dX?, dW?, dB?   T = Y for APX_ACT_NONE / APX_ACT_RELU, the
 *   forward's Aux for the GELUs (T may be absent for NONE); dX = alpha g @ op(W)^T,
 *   dW = alpha (X^T g, or g^T X with trans_w), dB = beta * column sums of g, g = dY * act'. */
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

/* ---- training step: loss scaling, state, optimizer (passes/autodiff.c, optimizer.c,
 * master_weights.c build these nodes exactly so; DESIGN.md 9). Nodes without outputs
 * (AssignState, OptimizerStep) are effects on STATE/PARAM buffers: passes must keep them.
 *
 * LossScaleSeed(loss, loss_scale) -> dLoss   [section BACKWARD, the first backward node]
 *   every element of dLoss = loss_scale[0] * multiplier. loss_scale is the STATE value
 *   "apx_loss_scale" (fp32 [1]; initial value = the loss-scale option; the runtime's scaler
 *   updates it between steps). dLoss has the loss's shape; fp32 (fp64 when the loss is
 *   fp64). multiplier = 1/K with gradient accumulation over K micro-batches, else 1.
 *   The loss input is only an ordering/shape dependency (its data is never read).
 *
 * AssignState(src, dst) -> (no outputs)   copies src into the STATE buffer dst (same
 *   shape, converting src's dtype to dst's) or, when src has one element, fills dst with
 *   it. It runs where it is scheduled: BatchNormalization running statistics (src = BN
 *   outputs 1/2, dst = BN inputs 3/4) in the OPTIMIZER section once per optimizer step;
 *   gradient accumulators (--accumulate K: acc = acc + g every micro-batch in BACKWARD,
 *   reset to 0 in OPTIMIZER). The runtime runs it on skipped (overflow) steps too.
 *
 * UnscaleCheck(loss_scale, g_0 .. g_{n-1}) -> found_inf, first_bad, norm_sq, u_0 .. u_{n-1}
 *   [section OPTIMIZER; one fused pass over all parameter gradients]
 *   g_i        gradient of parameter i, in OptimizerStep's parameter order (the gradient
 *              value's origin is the parameter), any float type
 *   u_i        g_i / loss_scale[0] in fp32 (fp64 when g_i is fp64), g_i's shape; may be
 *              g_i's own buffer when the dtypes match (the kernel supports u_i == g_i)
 *   found_inf  fp32 [1]: 1 if any element of any g_i or u_i is inf or nan, else 0
 *   first_bad  int32 [1]: smallest i whose g_i or u_i holds a non-finite element, -1 if
 *              none (the runtime reports the parameter: origin of g_i)
 *   norm_sq    fp32 [1]: sum of u_i^2 over all i and elements (accumulated in fp32 or
 *              wider); the global gradient norm is its square root (meaningless when
 *              found_inf is set)
 *
 * OptimizerStep(found_inf, norm_sq, lr, step, P[n], G[n], S_1[n] .. S_k[n], H[n]?)
 *   -> (no outputs)   [section OPTIMIZER; one multi-tensor update of every parameter]
 *   found_inf  UnscaleCheck's output 0: when != 0 the kernel changes nothing (skipped step)
 *   norm_sq    UnscaleCheck's output 2: with max_grad_norm > 0 every G_i is multiplied by
 *              clip = min(1, max_grad_norm / (sqrt(norm_sq) + 1e-6)) (torch clip_grad_norm_)
 *   lr         STATE "apx_lr" fp32 [1]: this step's learning rate, written by the runtime
 *              from the schedule (warmup / cosine / linear) before the optimizer section;
 *              initial value attrs.lr (the base learning rate)
 *   step       STATE "apx_optimizer_step" int64 [1], initially 0; a taken step increments
 *              it first, so t = 1 on the first update
 *   P_i        parameter i, updated in place (the fp32 master when master_weights = 1)
 *   G_i        UnscaleCheck's u_i
 *   S_j        optimizer state: STATE fp32 values of P_i's shape, initially zero; k per kind:
 *              SGD: 1 (momentum buffer) when momentum != 0, else 0; ADAMW, LAMB: 2
 *              (exp_avg, exp_avg_sq)
 *   H_i        only when master_weights = 1: the half model parameter refreshed from P_i
 *              after the update (round to nearest even), or -1 when parameter i has no half
 *              copy (P_i is then the model parameter itself)
 *   n_in = 4 + n * (2 + k + master_weights) with n = attrs.n_params.
 *   With g = clip * G_i, p = P_i, t = step, wd = weight_decay:
 *     SGD (torch.optim.SGD): d = g + wd p; with momentum: buf = d when t == 1, else
 *       buf = momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf;
 *       p -= lr d
 *     ADAMW (torch.optim.AdamW, decoupled): p *= 1 - lr wd; m = b1 m + (1 - b1) g;
 *       v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *     LAMB (apex FusedLAMB: adam_w_mode, bias_correction, grad_averaging): m, v as AdamW;
 *       u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p;
 *       r = ||p|| / ||u|| (L2 over the tensor) when wd != 0 and both norms > 0, else 1;
 *       p -= lr r u
 *   Half parameters without masters (O3) are updated in fp32 math and rounded on store. */
typedef enum ApxOptimizerKind { APX_OPTIM_SGD = 0, APX_OPTIM_ADAMW = 1, APX_OPTIM_LAMB = 2 } ApxOptimizerKind;
typedef struct ApxAttrOptimizer {
  int32_t kind; /* ApxOptimizerKind */
  int32_t n_params;
  float lr, momentum, beta1, beta2, eps, weight_decay, dampening;
  int32_t nesterov;
  int32_t master_weights; /* 1: P are fp32 masters, H the half copies refreshed */
  float max_grad_norm;    /* > 0: clip by global norm (from norm_sq); 0: off */
} ApxAttrOptimizer;

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

/* LossScaleSeed: see above. */
typedef struct ApxAttrLossScaleSeed {
  float multiplier; /* 1/K with --accumulate K, else 1 */
} ApxAttrLossScaleSeed;

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
