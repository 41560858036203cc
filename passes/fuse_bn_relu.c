/* fuse_bn_relu.c - pass_fuse_bn_relu: BatchNormalization + Relu -> BatchNormRelu, the
 * backward -> BatchNormReluGrad (see fuse_bn_relu.h). */
#include "passes/fuse_bn_relu.h"

#include <string.h>

#include "passes/fuse_common.h"

static int try_bn_relu(FzCtx *c, int bn) {
  const ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[bn];
  if (n->n_in != 5 || n->in[0] < 0 || n->out[0] < 0) return 0;
  FzFusion f;
  memset(&f, 0, sizeof f);
  f.pattern = "BatchNormalization+Relu";
  fz_add(&f, bn);
  int r = fz_next(c, &f, n->out[0]);
  if (r < 0) { /* several readers: a Relu among them is a candidate all the same (fz_apply
                  says why it does not fuse) */
    int us[8], nu = fz_fwd_users(c, n->out[0], us, 8);
    for (int i = 0; i < nu && i < 8 && r < 0; i++)
      if (g->nodes[us[i]].op == APX_OP_Relu) r = us[i];
  }
  if (!fz_live(g, r) || g->nodes[r].op != APX_OP_Relu) return 0;
  fz_add(&f, r);
  ApxAttrBatchNorm at = *(const ApxAttrBatchNorm *)n->typed;
  int y = g->nodes[r].out[0];
  f.prec = FZ_PREC_WIDEST;
  f.op = APX_OP_BatchNormRelu;
  f.attrs = &at;
  f.n_in = 5;
  /* cuDNN-style: X and Y in the type the Relu had, statistics and parameters in theirs */
  int xs = fz_source(g, n->in[0]);
  f.in[0] = g->vals[xs].dtype == g->vals[y].dtype ? xs : n->in[0];
  for (int k = 1; k < 5; k++) f.in[k] = n->in[k];
  f.n_out = n->n_out;
  f.out[0] = y;
  for (int k = 1; k < n->n_out; k++) f.out[k] = n->out[k] >= 0 ? n->out[k] : FZ_ABSENT;
  f.mixed_out = 1; /* dX in the type the graph had: fuse_casts folds a narrowing Cast after it */
  if (at.training_mode && n->n_out >= 5 && n->out[3] >= 0 && n->out[4] >= 0) {
    f.grad_op = APX_OP_BatchNormReluGrad;
    f.grad_attrs = &at;
    f.grad_n_in = 6;
    f.grad_in[0] = FZ_DY, f.grad_in[1] = FZ_FOUT(0), f.grad_in[2] = f.in[0], f.grad_in[3] = n->in[1],
    f.grad_in[4] = FZ_FOUT(3), f.grad_in[5] = FZ_FOUT(4);
    f.grad_n_out = 3;
    f.grad_of[0] = 0, f.grad_of[1] = 1, f.grad_of[2] = 2;
  } else {
    f.grad_op = APX_OP_INVALID;
    f.grad_missing = at.training_mode
                         ? "BatchNormalization has no saved statistics for a fused gradient"
                         : "inference-mode BatchNormalization: its gradient is plain ops, "
                           "BatchNormReluGrad takes batch statistics";
  }
  return fz_apply(c, &f);
}

static int is_batch_norm(const ApxGraph *g, int node) { return fz_fwd_op(g, node, APX_OP_BatchNormalization); }

int pass_fuse_bn_relu(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_bn_relu", is_batch_norm, try_bn_relu);
}
