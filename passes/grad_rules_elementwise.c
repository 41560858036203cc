/* grad_rules_elementwise.c - gradient rules of the elementwise ops (numpy broadcasting:
 * a broadcast input's gradient is summed back to its shape with ReduceSumTo). */
#include "passes/grad_rules.h"

/* dx[k] = gradient v summed to input k's shape. */
static int give(GradCtx *c, int k, int v) {
  if (v < 0) return -1;
  c->dx[k] = gr_sum_to(c, v, gr_in(c, k));
  return c->dx[k] < 0 ? -1 : 0;
}

GRAD_RULE(Add) {
  for (int k = 0; k < 2; k++)
    if (gr_need(c, k) && give(c, k, c->dy[0])) return -1;
  return 0;
}

GRAD_RULE(Sub) {
  if (gr_need(c, 0) && give(c, 0, c->dy[0])) return -1;
  if (gr_need(c, 1)) {
    int s = gr_sum_to(c, c->dy[0], gr_in(c, 1));
    if (s < 0 || (c->dx[1] = gr_op1(c, APX_OP_Neg, s)) < 0) return -1;
  }
  return 0;
}

GRAD_RULE(Mul) {
  /* d(a*b)/da = b, d(a*b)/db = a */
  for (int k = 0; k < 2; k++)
    if (gr_need(c, k) && give(c, k, gr_op2(c, APX_OP_Mul, c->dy[0], gr_in(c, 1 - k)))) return -1;
  return 0;
}

GRAD_RULE(Div) {
  /* y = a / b: da = dy / b; db = -dy * a / b^2 = -(dy * y) / b */
  int b = gr_in(c, 1), y = gr_out(c, 0), dy = c->dy[0];
  if (gr_need(c, 0) && give(c, 0, gr_op2(c, APX_OP_Div, dy, b))) return -1;
  if (gr_need(c, 1)) {
    int t = gr_op2(c, APX_OP_Mul, dy, y);
    if (t < 0) return -1;
    t = gr_op2(c, APX_OP_Div, t, b);
    if (t < 0) return -1;
    t = gr_sum_to(c, t, b);
    if (t < 0 || (c->dx[1] = gr_op1(c, APX_OP_Neg, t)) < 0) return -1;
  }
  return 0;
}

GRAD_RULE(Neg) {
  if (gr_need(c, 0)) return (c->dx[0] = gr_op1(c, APX_OP_Neg, c->dy[0])) < 0 ? -1 : 0;
  return 0;
}

GRAD_RULE(Identity) {
  c->dx[0] = gr_need(c, 0) ? c->dy[0] : -1;
  return 0;
}

/* opGrad(dy, saved) -> dx with the forward node's attributes (or none). */
static int unary_grad(GradCtx *c, ApxOp grad_op, int saved, int copy_attrs) {
  if (!gr_need(c, 0)) return 0;
  int in[2] = {c->dy[0], saved};
  c->dx[0] = gr_op(c, grad_op, copy_attrs ? gr_attrs(c) : NULL, 2, in);
  return c->dx[0] < 0 ? -1 : 0;
}

GRAD_RULE(Relu) { return unary_grad(c, APX_OP_ReluGrad, gr_out(c, 0), 0); }
GRAD_RULE(LeakyRelu) { return unary_grad(c, APX_OP_LeakyReluGrad, gr_in(c, 0), 1); }
GRAD_RULE(Sigmoid) { return unary_grad(c, APX_OP_SigmoidGrad, gr_out(c, 0), 0); }
GRAD_RULE(Tanh) { return unary_grad(c, APX_OP_TanhGrad, gr_out(c, 0), 0); }
GRAD_RULE(Gelu) { return unary_grad(c, APX_OP_GeluGrad, gr_in(c, 0), 1); }
GRAD_RULE(Erf) { return unary_grad(c, APX_OP_ErfGrad, gr_in(c, 0), 0); }
GRAD_RULE(Sqrt) { return unary_grad(c, APX_OP_SqrtGrad, gr_out(c, 0), 0); }
GRAD_RULE(HardSigmoid) { return unary_grad(c, APX_OP_HardSigmoidGrad, gr_in(c, 0), 1); }

GRAD_RULE(Exp) {
  /* y = exp(x): dx = dy * y */
  if (!gr_need(c, 0)) return 0;
  return (c->dx[0] = gr_op2(c, APX_OP_Mul, c->dy[0], gr_out(c, 0))) < 0 ? -1 : 0;
}

GRAD_RULE(Log) {
  /* y = log(x): dx = dy / x */
  if (!gr_need(c, 0)) return 0;
  return (c->dx[0] = gr_op2(c, APX_OP_Div, c->dy[0], gr_in(c, 0))) < 0 ? -1 : 0;
}

GRAD_RULE(Pow) {
  /* PowGrad(dy, a, b) -> da?, db? in dy's shape (attrs.h), then reduced to a's / b's; an
   * integer exponent is cast to a's type first (PowGrad takes float tensors). */
  int dy = c->dy[0];
  int out[2] = {-1, -1};
  for (int k = 0; k < 2; k++) {
    if (!gr_need(c, k)) continue;
    ApxValue shape = *gr_val(c, dy); /* a copy: adding values may move the array */
    out[k] = gr_new_value(c, shape.dtype, shape.rank, shape.dims);
    if (out[k] < 0) return -1;
  }
  int in[3] = {dy, gr_in(c, 0), gr_in(c, 1)};
  if (!apx_dtype_is_float(gr_val(c, in[2])->dtype)) { /* x ** 3: the exponent as a float */
    ApxAttrCast at = {.to = (int32_t)gr_val(c, in[1])->dtype, .saturate = 1};
    if ((in[2] = gr_op(c, APX_OP_Cast, &at, 1, &in[2])) < 0) return -1;
  }
  if (gr_node(c, APX_OP_PowGrad, NULL, 3, in, 2, out) < 0) return -1;
  for (int k = 0; k < 2; k++)
    if (out[k] >= 0 && give(c, k, out[k])) return -1;
  return 0;
}

GRAD_RULE(Where) {
  /* y = cond ? a : b: da = cond ? dy : 0, db = cond ? 0 : dy (then reduced) */
  int cond = gr_in(c, 0), dy = c->dy[0];
  if (!gr_need(c, 1) && !gr_need(c, 2)) return 0;
  int zero = gr_scalar(c, 0.0, gr_val(c, dy)->dtype);
  if (zero < 0) return -1;
  if (gr_need(c, 1)) {
    int in[3] = {cond, dy, zero};
    if (give(c, 1, gr_op(c, APX_OP_Where, NULL, 3, in))) return -1;
  }
  if (gr_need(c, 2)) {
    int in[3] = {cond, zero, dy};
    if (give(c, 2, gr_op(c, APX_OP_Where, NULL, 3, in))) return -1;
  }
  return 0;
}

GRAD_RULE(Cast) {
  /* float -> float cast: the gradient is cast back to the input's type */
  if (!gr_need(c, 0)) return 0;
  int x = gr_in(c, 0), dy = c->dy[0];
  if (gr_val(c, x)->dtype == gr_val(c, dy)->dtype) {
    c->dx[0] = dy;
    return 0;
  }
  ApxAttrCast a = {.to = (int32_t)gr_val(c, x)->dtype, .saturate = 1};
  return (c->dx[0] = gr_op(c, APX_OP_Cast, &a, 1, &dy)) < 0 ? -1 : 0;
}

/* ---- v1.1 elementwise ops (contracts: attrs.def, after ApxAttrHardSigmoid) ----------- */

GRAD_RULE(HardSwish) { return unary_grad(c, APX_OP_HardSwishGrad, gr_in(c, 0), 0); }
GRAD_RULE(Softplus) { return unary_grad(c, APX_OP_SoftplusGrad, gr_in(c, 0), 0); }

GRAD_RULE(Clip) {
  /* ClipGrad(dy, x, min?, max?) -> dx?, dmin?, dmax? at dy's shape; the bounds' gradients
   * are summed down to their (scalar) shapes */
  int dy = c->dy[0], out[3] = {-1, -1, -1};
  int n_out = 0;
  for (int k = 0; k < 3; k++) {
    if (!gr_need(c, k)) continue;
    ApxValue shape = *gr_val(c, dy); /* a copy: adding values may move the array */
    if ((out[k] = gr_new_value(c, shape.dtype, shape.rank, shape.dims)) < 0) return -1;
    n_out = k + 1;
  }
  if (!n_out) return 0;
  int in[4] = {dy, gr_in(c, 0), gr_in(c, 1), gr_in(c, 2)};
  int n_in = gr_n_in(c) + 1;
  if (gr_node(c, APX_OP_ClipGrad, NULL, n_in, in, n_out, out) < 0) return -1;
  for (int k = 0; k < 3; k++)
    if (out[k] >= 0 && give(c, k, out[k])) return -1;
  return 0;
}

/* Min and Max: MinMaxGrad(dy, y, x_0 .. x_{n-1}) -> dx_k at dy's shape (ties share the
 * gradient; attrs.def), each summed down to x_k's shape. */
GRAD_RULE(MinMax) {
  int n = gr_n_in(c), dy = c->dy[0];
  int *in = apx_arena_alloc(&c->g->arena, (size_t)(n + 2) * sizeof *in);
  int *out = apx_arena_alloc(&c->g->arena, (size_t)(n + 1) * sizeof *out);
  if (!in || !out) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", c->g->file);
  in[0] = dy;
  in[1] = gr_out(c, 0);
  for (int k = 0; k < n; k++) {
    in[2 + k] = gr_in(c, k);
    out[k] = -1;
    if (!gr_need(c, k)) continue;
    ApxValue shape = *gr_val(c, dy);
    if ((out[k] = gr_new_value(c, shape.dtype, shape.rank, shape.dims)) < 0) return -1;
  }
  if (gr_node(c, APX_OP_MinMaxGrad, NULL, n + 2, in, n, out) < 0) return -1;
  for (int k = 0; k < n; k++)
    if (out[k] >= 0 && give(c, k, out[k])) return -1;
  return 0;
}

GRAD_RULE(Mod) {
  /* c = fmod(a, b) (floats; integers never need a gradient): da = dy,
   * db = -dy * (a - c) / b (= -dy * trunc(a / b), PyTorch's fmod backward) */
  int dy = c->dy[0];
  if (gr_need(c, 0) && give(c, 0, dy)) return -1;
  if (gr_need(c, 1)) {
    int q = gr_op2(c, APX_OP_Sub, gr_in(c, 0), gr_out(c, 0));
    if (q < 0 || (q = gr_op2(c, APX_OP_Div, q, gr_in(c, 1))) < 0) return -1;
    int t = gr_op2(c, APX_OP_Mul, dy, q);
    if (t < 0 || (t = gr_sum_to(c, t, gr_in(c, 1))) < 0) return -1;
    if ((c->dx[1] = gr_op1(c, APX_OP_Neg, t)) < 0) return -1;
  }
  return 0;
}
