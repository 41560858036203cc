/* fuse_xentropy.c - pass_fuse_xentropy: SoftmaxCrossEntropyLoss -> FusedXentropy, its
 * gradient -> FusedXentropyGrad (see fuse_xentropy.h). */
#include "passes/fuse_xentropy.h"

#include <string.h>

#include "passes/fuse_common.h"

static int try_xentropy(FzCtx *c, int id) {
  const ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  FzFusion f;
  memset(&f, 0, sizeof f);
  f.pattern = "SoftmaxCrossEntropyLoss";
  fz_add(&f, id);
  if (n->n_in > 2 && n->in[2] >= 0)
    return fz_reject(c, &f, APX_OP_FusedXentropy, APX_FUSE_NOT_LEGALITY,
                     "class weights '%s': FusedXentropy has no weights input", g->vals[n->in[2]].name);
  int scores = n->in[0], labels = n->in[1];
  if (scores < 0 || labels < 0 || n->out[0] < 0) return 0;
  ApxAttrLoss at = *(const ApxAttrLoss *)n->typed;
  f.prec = FZ_PREC_WIDEST;
  f.op = APX_OP_FusedXentropy;
  f.attrs = &at;
  /* the kernel reads half scores directly (the loss stays fp32) */
  f.n_in = 2;
  f.in[0] = fz_source(g, scores), f.in[1] = labels;
  f.n_out = 2;
  f.out[0] = n->out[0], f.out[1] = FZ_NEW;
  f.mixed_out = 1; /* dX in the type the graph had: fuse_casts folds a narrowing Cast after it */
  f.grad_op = APX_OP_FusedXentropyGrad;
  f.grad_attrs = &at;
  f.grad_n_in = 4;
  f.grad_in[0] = FZ_DY, f.grad_in[1] = f.in[0], f.grad_in[2] = labels, f.grad_in[3] = FZ_FOUT(1);
  f.grad_n_out = 1;
  f.grad_of[0] = 0;
  return fz_apply(c, &f);
}

static int is_sce_loss(const ApxGraph *g, int node) { return fz_fwd_op(g, node, APX_OP_SoftmaxCrossEntropyLoss); }

int pass_fuse_xentropy(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_xentropy", is_sce_loss, try_xentropy);
}
