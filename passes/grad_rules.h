/* grad_rules.h - gradient rules of the v1 ops (private to //passes:autodiff).
 *
 * One rule per op, named by the op table (ops.def GRAD column), found in one table indexed
 * by op (grad_rules.c, generated); the rules themselves live by op family in
 * grad_rules_elementwise.c, grad_rules_nn.c and grad_rules_shape.c.
 *
 * A rule receives the forward node, the gradient of each of its outputs (dy[k], -1 when no
 * gradient reaches output k) and which inputs need a gradient (need[k]: float inputs on a
 * path from a trainable parameter). It emits backward nodes through the helpers below
 * (section BACKWARD, origin = the forward node, outputs inferred by apx_node_infer) and
 * stores in dx[k] the gradient contribution for input k: a value with exactly input k's
 * dtype and shape (autodiff checks this), or -1. Rules never hold ApxNode / ApxValue
 * pointers across helper calls: adding nodes and values may move the arrays. */
#ifndef APX_GRAD_RULES_H
#define APX_GRAD_RULES_H

#include <stdint.h>

#include "ir/ir.h"
#include "ir/options.h"

typedef struct GradCtx {
  ApxGraph *g;
  ApxDiag *d;
  const ApxOptions *o;
  int node;            /* forward node */
  const int *dy;       /* [n_out] gradient of output k, -1 when none */
  const uint8_t *need; /* [n_in] 1 when input k needs a gradient */
  int *dx;             /* [n_in] out: contribution for input k, -1 */
  int n_made;          /* backward nodes made for this forward node (for names) */
} GradCtx;

typedef int (*GradRuleFn)(GradCtx *c); /* 0 or -1 (error in c->d) */

/* The rule for op, NULL when the op has none. */
GradRuleFn apx_grad_rule(ApxOp op);

/* ---- rules: one per op with APX_GRAD(Rule) in ops.def, defined in the family files
 * (grad_rules_elementwise.c, grad_rules_nn.c, grad_rules_shape.c) as GRAD_RULE(Rule). */
#define GRAD_RULE(Name) int apx_grad_##Name(GradCtx *c)
#define IO(a, b, c, d)
#define APX_GRAD(rule) GRAD_RULE(rule);
#define APX_NOGRAD
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) GRAD
#include "kernels/ops.def"
#undef APX_OP
#undef APX_GRAD
#undef APX_NOGRAD
#undef IO

/* ---- access to the forward node (by id: safe across helper calls) ------------------- */
static inline int gr_in(const GradCtx *c, int k) {
  const ApxNode *n = &c->g->nodes[c->node];
  return k < n->n_in ? n->in[k] : -1;
}
static inline int gr_out(const GradCtx *c, int k) {
  const ApxNode *n = &c->g->nodes[c->node];
  return k < n->n_out ? n->out[k] : -1;
}
static inline int gr_n_in(const GradCtx *c) { return c->g->nodes[c->node].n_in; }
static inline int gr_n_out(const GradCtx *c) { return c->g->nodes[c->node].n_out; }
static inline int gr_need(const GradCtx *c, int k) { return k < gr_n_in(c) && c->need[k]; }
static inline const void *gr_attrs(const GradCtx *c) { return c->g->nodes[c->node].typed; }
static inline const ApxValue *gr_val(const GradCtx *c, int v) { return &c->g->vals[v]; }

/* ---- helpers: each returns a value id, or -1 with an error in c->d ------------------ */

/* New activation value (dtype/shape may be UNDEFINED / rank -1 for apx_node_infer to fill). */
int gr_new_value(GradCtx *c, ApxDType dt, int32_t rank, const int64_t *dims);
/* New backward node op(in) -> out with typed attributes copied from attrs (NULL: zeroed),
 * section BACKWARD, origin c->node; runs apx_node_infer. Returns the node id or -1. */
int gr_node(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in, int n_out,
            const int *out);
/* One-output node; the output's dtype and shape come from apx_node_infer. */
int gr_op(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in);
/* One-output node whose output is pre-shaped like value `like` with dtype dt (ops whose
 * output shape is not a function of their inputs: ReduceSumTo, SliceGrad, ...). */
int gr_op_like(GradCtx *c, ApxOp op, const void *attrs, int n_in, const int *in, int like,
               ApxDType dt);
static inline int gr_op1(GradCtx *c, ApxOp op, int a) { return gr_op(c, op, NULL, 1, &a); }
static inline int gr_op2(GradCtx *c, ApxOp op, int a, int b) {
  int in[2] = {a, b};
  return gr_op(c, op, NULL, 2, in);
}
/* v summed over broadcast dims down to shape (rank, dims) (ReduceSumTo), or v itself when
 * the shapes are equal. */
int gr_sum_to_shape(GradCtx *c, int v, int32_t rank, const int64_t *dims);
static inline int gr_sum_to(GradCtx *c, int v, int like) {
  return gr_sum_to_shape(c, v, c->g->vals[like].rank, c->g->vals[like].dims);
}
/* v reshaped to (rank, dims) (Reshape without a shape input), or v when already so. */
int gr_reshape_shape(GradCtx *c, int v, int32_t rank, const int64_t *dims);
static inline int gr_reshape(GradCtx *c, int v, int like) {
  return gr_reshape_shape(c, v, c->g->vals[like].rank, c->g->vals[like].dims);
}
/* Rank-0 CONST holding x in dtype dt (a float type). */
int gr_scalar(GradCtx *c, double x, ApxDType dt);
/* CONST of zeros with like's dtype and shape. */
int gr_zeros(GradCtx *c, int like);
/* Makes sure forward output `slot` exists (adding a new value named <node>_<what> and
 * re-inferring the forward node), e.g. LayerNormalization's Mean. Returns its value id. */
int gr_forward_output(GradCtx *c, int slot, const char *what);
/* Error for an output gradient the rule cannot propagate (exit code 2). */
int gr_unsupported(GradCtx *c, const char *what);

#endif
