/* fuse_casts.c - pass_fuse_casts: a narrowing Cast folded into the kernel that produces its
 * input (see fuse_casts.h). */
#include "passes/fuse_casts.h"

#include <stdio.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/precision_rules.h"
#include "passes/fuse_common.h"

/* Kernels that compute in fp32 and can round output 0 to another float type on store
 * (their inference keeps a preset float output dtype for pass-created nodes). */
static int writes_any_float(ApxOp op) {
  switch (op) {
    case APX_OP_LayerNormalization: case APX_OP_LayerNormGrad: case APX_OP_FusedSoftmax:
    case APX_OP_FusedSoftmaxGrad: case APX_OP_FusedXentropyGrad: case APX_OP_BatchNormRelu:
    case APX_OP_BatchNormReluGrad:
      return 1;
    default: return 0;
  }
}

static int rank_of(ApxDType t) { return t == APX_DT_F64 ? 3 : t == APX_DT_F32 ? 2 : apx_dtype_is_half(t) ? 1 : 0; }

/* An inserted Cast that narrows (one rounding from fp32 math either way, so the numbers are
 * the same) the first output of a pass-made kernel that can round on store: the candidates,
 * judged without the fusion index (a graph with none builds none) */
static int is_foldable_cast(const ApxGraph *g, int cast) {
  if (!fz_is_cast(g, cast)) return 0;
  const ApxNode *cn = &g->nodes[cast];
  int v = cn->in[0], y = cn->out[0], p = g->vals[v].producer;
  if (rank_of(g->vals[y].dtype) >= rank_of(g->vals[v].dtype)) return 0;
  return fz_live(g, p) && g->nodes[p].onnx_index < 0 && g->nodes[p].n_out >= 1 && g->nodes[p].out[0] == v &&
         writes_any_float(g->nodes[p].op);
}

static int try_cast(FzCtx *c, int cast) {
  ApxGraph *g = c->g;
  const ApxNode *cn = &g->nodes[cast];
  int v = cn->in[0], y = cn->out[0], p = g->vals[v].producer;
  FzFusion f;
  memset(&f, 0, sizeof f);
  f.pattern = "Cast into producer";
  fz_add(&f, p);
  fz_add(&f, cast);
  int us[2];
  if ((g->vals[v].flags & (APX_VALF_GRAPH_OUTPUT | APX_VALF_LOSS)) || fz_users(c, v, us, 2) != 1)
    return fz_reject(c, &f, g->nodes[p].op, APX_FUSE_NOT_CONSUMERS,
                     "'%s' is also read in %s: the producer must keep writing it", g->vals[v].name,
                     apx_dtype_short(g->vals[v].dtype));
  if (g->nodes[cast].section != g->nodes[p].section)
    return fz_reject(c, &f, g->nodes[p].op, APX_FUSE_NOT_LEGALITY, "Cast in another section than '%s'",
                     g->nodes[p].name);
  /* trial: the producer writes the Cast's output (the fusion log's traffic: both nodes out
   * now, the producer back in once it writes y; see FzCtx.traffic_delta) */
  ApxTraffic out = {0};
  fz_traffic_node(c, p, &out, -1);
  fz_traffic_node(c, cast, &out, -1);
  ApxNode *pn = &g->nodes[p];
  pn->out[0] = y;
  g->vals[y].producer = p;
  if (apx_node_infer(g, p, c->d)) {
    char why[sizeof c->d->msg];
    snprintf(why, sizeof why, "%s", c->d->msg);
    c->d->code = 0;
    c->d->msg[0] = '\0';
    pn = &g->nodes[p];
    pn->out[0] = v;
    g->vals[y].producer = cast;
    return fz_reject(c, &f, g->nodes[p].op, APX_FUSE_NOT_DTYPE, "%s", why);
  }
  g->vals[v].producer = -1;
  g->nodes[cast].flags |= APX_NODEF_DEAD;
  fz_traffic_node(c, p, &out, 1);
  fz_traffic_add(c, &out);
  char fused[512];
  snprintf(fused, sizeof fused, "%s writes '%s' (%s)", g->nodes[p].name, g->vals[y].name,
           apx_dtype_short(g->vals[y].dtype));
  ApxFusionRecord r = {.pass = c->pass, .pattern = f.pattern, .fused_op = apx_op_name(g->nodes[p].op),
                       .fused = fused, .why = APX_FUSE_APPLIED};
  char nodes[512];
  snprintf(nodes, sizeof nodes, "%s, %s", g->nodes[p].name, g->nodes[cast].name);
  r.nodes = nodes;
  *(g->nodes[cast].section == APX_SEC_FORWARD ? &r.n_fwd : &r.n_bwd) = 1;
  if (apx_fusion_record(g, &r)) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  c->changed = 1;
  return 1;
}

int pass_fuse_casts(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_casts", is_foldable_cast, try_cast);
}
