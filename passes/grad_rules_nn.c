/* grad_rules_nn.c - gradient rules of the dense, normalization, convolution, pooling,
 * dropout, softmax and loss ops. Ops whose backward needs values the forward can produce
 * (LayerNorm Mean/InvStdDev, BatchNorm saved statistics, Dropout mask, SoftmaxCrossEntropy
 * log_prob) get those outputs added to the forward node when the model left them absent. */
#include "passes/grad_rules.h"

#include <string.h>

static int fused_matmul(GradCtx *c, int a, int b, int trans_a, int trans_b, float alpha) {
  ApxAttrFusedMatMul at = {.trans_a = trans_a, .trans_b = trans_b, .alpha = alpha};
  int in[2] = {a, b};
  return gr_op(c, APX_OP_FusedMatMul, &at, 2, in);
}

/* Y = alpha op(A) op(B) + beta C (2-D) */
GRAD_RULE(Gemm) {
  const ApxAttrGemm at = *(const ApxAttrGemm *)gr_attrs(c);
  int a = gr_in(c, 0), b = gr_in(c, 1), dy = c->dy[0];
  int ta = at.trans_a != 0, tb = at.trans_b != 0;
  if (gr_need(c, 0)) {
    /* ta = 0: dA = alpha dY op(B)^T;  ta = 1: dA = alpha op(B) dY^T */
    c->dx[0] = ta ? fused_matmul(c, b, dy, tb, 1, at.alpha) : fused_matmul(c, dy, b, 0, !tb, at.alpha);
    if (c->dx[0] < 0) return -1;
  }
  if (gr_need(c, 1)) {
    /* tb = 0: dB = alpha op(A)^T dY;  tb = 1: dB = alpha dY^T op(A) */
    c->dx[1] = tb ? fused_matmul(c, dy, a, 1, ta, at.alpha) : fused_matmul(c, a, dy, !ta, 0, at.alpha);
    if (c->dx[1] < 0) return -1;
  }
  if (gr_need(c, 2)) {
    int t = dy;
    if (at.beta != 1.0f) {
      int beta = gr_scalar(c, at.beta, gr_val(c, dy)->dtype);
      if (beta < 0 || (t = gr_op2(c, APX_OP_Mul, dy, beta)) < 0) return -1;
    }
    if ((c->dx[2] = gr_sum_to(c, t, gr_in(c, 2))) < 0) return -1;
  }
  return 0;
}

/* Y = A @ B, numpy matmul: batched with broadcast batch dims; a 1-D A is a row [1, K]
 * (the 1 dropped from Y), a 1-D B a column [K, 1]. The gradients are computed on the 2-D+
 * views and summed over broadcast batch dims back to each operand's shape. */
GRAD_RULE(MatMul) {
  int a = gr_in(c, 0), b = gr_in(c, 1), dy = c->dy[0];
  ApxValue va = *gr_val(c, a), vb = *gr_val(c, b), vy = *gr_val(c, dy);
  int64_t a2[APX_MAX_RANK], b2[APX_MAX_RANK], y2[APX_MAX_RANK];
  int32_t ra = va.rank, rb = vb.rank, ry = vy.rank;
  if (ra == 1) {
    a2[0] = 1, a2[1] = va.dims[0], ra = 2;
  } else {
    memcpy(a2, va.dims, sizeof a2);
  }
  if (rb == 1) {
    b2[0] = vb.dims[0], b2[1] = 1, rb = 2;
  } else {
    memcpy(b2, vb.dims, sizeof b2);
  }
  /* Y's 2-D+ view: put back the dims a 1-D operand dropped */
  memcpy(y2, vy.dims, sizeof y2);
  if (va.rank == 1) {
    for (int i = ry; i > ry - (vb.rank == 1 ? 0 : 1); i--) y2[i] = y2[i - 1];
    y2[ry - (vb.rank == 1 ? 0 : 1)] = 1;
    ry++;
  }
  if (vb.rank == 1) y2[ry++] = 1;
  int dy2 = gr_reshape_shape(c, dy, ry, y2);
  if (dy2 < 0) return -1;
  if (gr_need(c, 0)) {
    int b_2 = gr_reshape_shape(c, b, rb, b2);
    int t = b_2 < 0 ? -1 : fused_matmul(c, dy2, b_2, 0, 1, 1.0f); /* dY B^T */
    t = gr_sum_to_shape(c, t, ra, a2);
    if ((c->dx[0] = gr_reshape(c, t, a)) < 0) return -1;
  }
  if (gr_need(c, 1)) {
    int a_2 = gr_reshape_shape(c, a, ra, a2);
    int t = a_2 < 0 ? -1 : fused_matmul(c, a_2, dy2, 1, 0, 1.0f); /* A^T dY */
    t = gr_sum_to_shape(c, t, rb, b2);
    if ((c->dx[1] = gr_reshape(c, t, b)) < 0) return -1;
  }
  return 0;
}

static int saved_grad(GradCtx *c, ApxOp op, int saved) {
  if (!gr_need(c, 0)) return 0;
  int in[2] = {c->dy[0], saved};
  return (c->dx[0] = gr_op(c, op, gr_attrs(c), 2, in)) < 0 ? -1 : 0;
}

GRAD_RULE(Softmax) { return saved_grad(c, APX_OP_SoftmaxGrad, gr_out(c, 0)); }
GRAD_RULE(LogSoftmax) { return saved_grad(c, APX_OP_LogSoftmaxGrad, gr_out(c, 0)); }

/* Grad op with `n_grads` outputs shaped like the forward inputs 0..n_grads-1, each present
 * only when that input needs a gradient; dx[k] = output k. */
static int multi_grad(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in,
                      int n_grads) {
  int out[4] = {-1, -1, -1, -1};
  for (int k = 0; k < n_grads; k++) {
    int x = gr_in(c, k);
    if (x < 0 || !gr_need(c, k)) continue;
    ApxValue shape = *gr_val(c, x);
    if ((out[k] = gr_new_value(c, shape.dtype, shape.rank, shape.dims)) < 0) return -1;
  }
  if (gr_node(c, op, attrs, n_in, in, n_grads, out) < 0) return -1;
  for (int k = 0; k < n_grads; k++) c->dx[k] = out[k];
  return 0;
}

/* LayerNormalization(X, Scale, B?) -> Y, Mean, InvStdDev */
GRAD_RULE(LayerNormalization) {
  if ((gr_n_out(c) > 1 && c->dy[1] >= 0) || (gr_n_out(c) > 2 && c->dy[2] >= 0))
    return gr_unsupported(c, "through LayerNormalization's Mean/InvStdDev outputs");
  int mean = gr_forward_output(c, 1, "mean");
  int inv = mean < 0 ? -1 : gr_forward_output(c, 2, "inv_std_dev");
  if (inv < 0) return -1;
  int in[5] = {c->dy[0], gr_in(c, 0), gr_in(c, 1), mean, inv};
  return multi_grad(c, APX_OP_LayerNormGrad, gr_attrs(c), 5, in, 3);
}

/* Inference-mode BatchNormalization inside a training graph: y = (x - mean) * k + B with
 * k = scale / sqrt(var + eps) per channel (axis 1), mean/var constant:
 *   dx = dy * k;  dscale = sum(dy * (x - mean) / sqrt(var + eps));  dB = sum(dy) */
static int batchnorm_inference_grad(GradCtx *c) {
  const ApxAttrBatchNorm at = *(const ApxAttrBatchNorm *)gr_attrs(c);
  int x = gr_in(c, 0), scale = gr_in(c, 1), mean = gr_in(c, 3), var = gr_in(c, 4);
  int dy = c->dy[0];
  ApxValue vx = *gr_val(c, x);
  /* per-channel values viewed as [C, 1, ..., 1] to broadcast against [N, C, ...] */
  int64_t cdims[APX_MAX_RANK];
  int32_t crank = vx.rank - 1;
  for (int i = 0; i < crank; i++) cdims[i] = i == 0 ? vx.dims[1] : 1;
  int eps = gr_scalar(c, at.epsilon, gr_val(c, var)->dtype);
  int sd = eps < 0 ? -1 : gr_op2(c, APX_OP_Add, var, eps);
  if (sd < 0 || (sd = gr_op1(c, APX_OP_Sqrt, sd)) < 0) return -1;
  if (gr_need(c, 0)) {
    int k = gr_op2(c, APX_OP_Div, scale, sd);
    if (k < 0 || (k = gr_reshape_shape(c, k, crank, cdims)) < 0) return -1;
    if ((c->dx[0] = gr_op2(c, APX_OP_Mul, dy, k)) < 0) return -1;
  }
  if (gr_need(c, 1)) {
    int m = gr_reshape_shape(c, mean, crank, cdims);
    int s = m < 0 ? -1 : gr_reshape_shape(c, sd, crank, cdims);
    int t = s < 0 ? -1 : gr_op2(c, APX_OP_Sub, x, m);
    if (t < 0 || (t = gr_op2(c, APX_OP_Div, t, s)) < 0 || (t = gr_op2(c, APX_OP_Mul, dy, t)) < 0)
      return -1;
    t = gr_sum_to_shape(c, t, crank, cdims);
    if ((c->dx[1] = gr_reshape(c, t, scale)) < 0) return -1;
  }
  if (gr_need(c, 2)) {
    int t = gr_sum_to_shape(c, dy, crank, cdims);
    if ((c->dx[2] = gr_reshape(c, t, gr_in(c, 2))) < 0) return -1;
  }
  return 0;
}

/* BatchNormalization(X, scale, B, mean, var) -> Y, running_mean, running_var,
 * saved_mean, saved_invstd (outputs 3, 4 added by apexc in training mode) */
GRAD_RULE(BatchNormalization) {
  for (int k = 1; k < gr_n_out(c); k++)
    if (c->dy[k] >= 0) return gr_unsupported(c, "through BatchNormalization's statistics outputs");
  if (gr_need(c, 3) || gr_need(c, 4))
    return gr_unsupported(c, "with respect to BatchNormalization's mean/var inputs");
  if (!((const ApxAttrBatchNorm *)gr_attrs(c))->training_mode) return batchnorm_inference_grad(c);
  int sm = gr_forward_output(c, 3, "saved_mean");
  int si = sm < 0 ? -1 : gr_forward_output(c, 4, "saved_inv_std");
  if (si < 0) return -1;
  int in[5] = {c->dy[0], gr_in(c, 0), gr_in(c, 1), sm, si};
  return multi_grad(c, APX_OP_BatchNormGrad, gr_attrs(c), 5, in, 3);
}

/* Dropout(data, ratio, training_mode) -> output, mask */
GRAD_RULE(Dropout) {
  if (!gr_need(c, 0)) return 0;
  const ApxAttrDropout *at = gr_attrs(c);
  if (!at->training_mode) {
    c->dx[0] = c->dy[0];
    return 0;
  }
  int mask = gr_forward_output(c, 1, "mask");
  if (mask < 0) return -1;
  int in[2] = {c->dy[0], mask};
  return (c->dx[0] = gr_op(c, APX_OP_DropoutGrad, gr_attrs(c), 2, in)) < 0 ? -1 : 0;
}

/* Conv(X, W, B?) -> Y; ConvGrad(dY, X, W) -> dX?, dW?, dB? */
GRAD_RULE(Conv) {
  int in[3] = {c->dy[0], gr_in(c, 0), gr_in(c, 1)};
  return multi_grad(c, APX_OP_ConvGrad, gr_attrs(c), 3, in, 3);
}

/* ConvTranspose(X, W, B?) -> Y; ConvTransposeGrad(dY, X, W) -> dX?, dW?, dB? (dX a Conv of
 * dY with W, dW the adjoint convolution's weight gradient, dB dY's channel sums) */
GRAD_RULE(ConvTranspose) {
  int in[3] = {c->dy[0], gr_in(c, 0), gr_in(c, 1)};
  return multi_grad(c, APX_OP_ConvTransposeGrad, gr_attrs(c), 3, in, 3);
}

GRAD_RULE(MaxPool) {
  if (!gr_need(c, 0)) return 0;
  int in[2] = {c->dy[0], gr_in(c, 0)};
  c->dx[0] = gr_op_like(c, APX_OP_MaxPoolGrad, gr_attrs(c), 2, in, gr_in(c, 0),
                        gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

GRAD_RULE(AveragePool) {
  if (!gr_need(c, 0)) return 0;
  int dy = c->dy[0];
  c->dx[0] = gr_op_like(c, APX_OP_AveragePoolGrad, gr_attrs(c), 1, &dy, gr_in(c, 0),
                        gr_val(c, dy)->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

GRAD_RULE(GlobalAveragePool) {
  if (!gr_need(c, 0)) return 0;
  int dy = c->dy[0];
  c->dx[0] = gr_op_like(c, APX_OP_GlobalAveragePoolGrad, NULL, 1, &dy, gr_in(c, 0),
                        gr_val(c, dy)->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

/* SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob */
GRAD_RULE(SoftmaxCrossEntropyLoss) {
  if (gr_need(c, 2)) return gr_unsupported(c, "with respect to the class weights");
  if (!gr_need(c, 0)) return 0;
  int log_prob = gr_forward_output(c, 1, "log_prob");
  if (log_prob < 0) return -1;
  int ds = -1;
  if (c->dy[0] >= 0) {
    int in[4] = {c->dy[0], log_prob, gr_in(c, 1), gr_in(c, 2)};
    int n_in = gr_n_in(c) > 2 && gr_in(c, 2) >= 0 ? 4 : 3;
    ds = gr_op_like(c, APX_OP_SoftmaxCrossEntropyLossGrad, gr_attrs(c), n_in, in, gr_in(c, 0),
                    gr_val(c, log_prob)->dtype);
    if (ds < 0) return -1;
  }
  if (gr_n_out(c) > 1 && c->dy[1] >= 0) {
    /* log_prob = LogSoftmax(scores, axis 1) is used downstream too */
    ApxAttrAxis ax = {.axis = 1};
    int in[2] = {c->dy[1], log_prob};
    int t = gr_op(c, APX_OP_LogSoftmaxGrad, &ax, 2, in);
    if (t < 0) return -1;
    ds = ds < 0 ? t : gr_op2(c, APX_OP_Add, ds, t);
  }
  c->dx[0] = ds;
  return ds < 0 && c->dy[0] >= 0 ? -1 : 0;
}

/* NegativeLogLikelihoodLoss(input, target, weight?) -> loss */
GRAD_RULE(NegativeLogLikelihoodLoss) {
  if (gr_need(c, 2)) return gr_unsupported(c, "with respect to the class weights");
  if (!gr_need(c, 0)) return 0;
  int in[3] = {c->dy[0], gr_in(c, 1), gr_in(c, 2)};
  int n_in = gr_n_in(c) > 2 && gr_in(c, 2) >= 0 ? 3 : 2;
  c->dx[0] = gr_op_like(c, APX_OP_NegativeLogLikelihoodLossGrad, gr_attrs(c), n_in, in,
                        gr_in(c, 0), gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}
