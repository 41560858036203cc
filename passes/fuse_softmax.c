/* fuse_softmax.c - pass_fuse_softmax: scale + mask + Softmax -> FusedSoftmax, the backward
 * -> FusedSoftmaxGrad (see fuse_softmax.h). */
#include "passes/fuse_softmax.h"

#include <math.h>
#include <string.h>

#include "passes/fuse_common.h"

/* Mul(x, c) / Mul(c, x) / Div(x, c) with c a scalar constant: *x_out = x, *scale. */
static int scale_node(const ApxGraph *g, int n, int *x_out, double *scale) {
  if (!fz_live(g, n) || g->nodes[n].n_in != 2) return 0;
  const ApxNode *nd = &g->nodes[n];
  double c;
  if (nd->op == APX_OP_Mul) {
    if (fz_scalar(g, nd->in[1], &c)) *x_out = nd->in[0], *scale = c;
    else if (fz_scalar(g, nd->in[0], &c)) *x_out = nd->in[1], *scale = c;
    else return 0;
    return 1;
  }
  if (nd->op == APX_OP_Div && fz_scalar(g, nd->in[1], &c) && c != 0.0) {
    *x_out = nd->in[0], *scale = 1.0 / c;
    return 1;
  }
  return 0;
}

static int try_softmax(FzCtx *c, int sm) {
  const ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[sm];
  FzFusion f;
  memset(&f, 0, sizeof f);
  fz_add(&f, sm);
  int x = n->in[0], y = n->out[0];
  if (x < 0 || y < 0) return 0;
  /* what feeds the Softmax: Add(scores, mask) and/or a scale */
  int pv = -1, p = fz_prev(c, &f, x, &pv);
  int mask = -1, scores = -1, add = -1;
  double scale = 1.0;
  int sx = -1, scaled = 0;
  if (p >= 0 && g->nodes[p].op == APX_OP_Add && g->nodes[p].n_in == 2) {
    add = p;
    fz_add(&f, add);
    /* the scores operand is the one produced by a scale node (through Casts), else the
     * one that is not a constant */
    for (int k = 0; k < 2 && scores < 0; k++) {
      FzFusion t = f;
      int qv, q = fz_prev(c, &t, g->nodes[add].in[k], &qv);
      if (q >= 0 && scale_node(g, q, &sx, &scale)) {
        scaled = 1;
        scores = g->nodes[add].in[k], mask = g->nodes[add].in[1 - k];
        f = t;
        fz_add(&f, q);
      }
    }
    if (scores < 0) {
      int a0 = g->nodes[add].in[0], a1 = g->nodes[add].in[1];
      int c0 = g->vals[a0].kind == APX_VAL_CONST, c1 = g->vals[a1].kind == APX_VAL_CONST;
      if (c0 == c1) return 0; /* two data operands: a plain sum, not a mask */
      scores = c1 ? a0 : a1, mask = c1 ? a1 : a0, sx = scores;
    }
  } else if (p >= 0 && scale_node(g, p, &sx, &scale)) {
    scaled = 1;
    fz_add(&f, p);
  } else {
    return 0; /* a plain Softmax: nothing to fuse */
  }
  char pat[64];
  snprintf(pat, sizeof pat, "%s%sSoftmax", scaled ? "Scale+" : "", add >= 0 ? "Mask+" : "");
  f.pattern = pat;
  const ApxAttrAxis *ax = n->typed;
  const ApxValue *xv = &g->vals[x];
  if (ax->axis != xv->rank - 1)
    return fz_reject(c, &f, APX_OP_FusedSoftmax, APX_FUSE_NOT_LEGALITY,
                     "softmax axis %lld is not the last axis (FusedSoftmax normalizes rows)", (long long)ax->axis);
  if (!isfinite(scale) || (float)scale == 0.0f)
    return fz_reject(c, &f, APX_OP_FusedSoftmax, APX_FUSE_NOT_LEGALITY, "scale %g is not a finite nonzero float", scale);
  ApxAttrFusedSoftmax at = {.scale = (float)scale, .has_mask = mask >= 0};
  f.prec = FZ_PREC_WIDEST;
  f.op = APX_OP_FusedSoftmax;
  f.attrs = &at;
  f.n_in = mask >= 0 ? 2 : 1;
  f.in[0] = sx, f.in[1] = mask;
  f.n_out = 1;
  f.out[0] = y;
  f.mixed_out = 1; /* Y and dS keep the types the graph had (O1: S fp16, Y fp32) */
  f.grad_op = APX_OP_FusedSoftmaxGrad;
  f.grad_attrs = &at;
  f.grad_n_in = 2;
  f.grad_in[0] = FZ_DY, f.grad_in[1] = FZ_FOUT(0);
  f.grad_n_out = 1;
  f.grad_of[0] = 0;
  return fz_apply(c, &f);
}

static int is_softmax(const ApxGraph *g, int node) { return fz_fwd_op(g, node, APX_OP_Softmax); }

int pass_fuse_softmax(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_softmax", is_softmax, try_softmax);
}
