/* fuse_conv.c - pass_fuse_conv: Conv (+ bias) + Relu -> ConvBiasRelu, the backward ->
 * ConvBiasReluGrad (see fuse_conv.h). */
#include "passes/fuse_conv.h"

#include <string.h>

#include "passes/fuse_common.h"

static int try_conv(FzCtx *c, int cv) {
  const ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[cv];
  if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0) return 0;
  FzFusion f;
  memset(&f, 0, sizeof f);
  int has_b = n->n_in > 2 && n->in[2] >= 0;
  f.pattern = has_b ? "Conv(bias)+Relu" : "Conv+Relu";
  fz_add(&f, cv);
  int r = fz_next(c, &f, n->out[0]);
  if (r < 0) { /* several readers: a Relu among them is a candidate all the same (fz_apply
                  says why it does not fuse) */
    int us[8], nu = fz_fwd_users(c, n->out[0], us, 8);
    for (int i = 0; i < nu && i < 8 && r < 0; i++)
      if (g->nodes[us[i]].op == APX_OP_Relu) r = us[i];
  }
  if (!fz_live(g, r) || g->nodes[r].op != APX_OP_Relu) return 0;
  fz_add(&f, r);
  ApxAttrConv at = *(const ApxAttrConv *)n->typed;
  f.prec = FZ_PREC_AGREE;
  f.op = APX_OP_ConvBiasRelu;
  f.attrs = &at;
  f.n_in = has_b ? 3 : 2;
  for (int k = 0; k < f.n_in; k++) f.in[k] = n->in[k];
  f.n_out = 1;
  f.out[0] = g->nodes[r].out[0];
  f.grad_op = APX_OP_ConvBiasReluGrad;
  f.grad_attrs = &at;
  f.grad_n_in = 4;
  f.grad_in[0] = FZ_DY, f.grad_in[1] = FZ_FOUT(0), f.grad_in[2] = n->in[0], f.grad_in[3] = n->in[1];
  f.grad_n_out = 3;
  f.grad_of[0] = 0, f.grad_of[1] = 1, f.grad_of[2] = has_b ? 2 : -1;
  return fz_apply(c, &f);
}

static int is_conv(const ApxGraph *g, int node) { return fz_fwd_op(g, node, APX_OP_Conv); }

int pass_fuse_conv(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_conv", is_conv, try_conv);
}
