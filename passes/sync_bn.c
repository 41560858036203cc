/* sync_bn.c - BatchNorm statistics and their gradient reduced over all ranks (sync_bn.h). */
#include "passes/sync_bn.h"

#include <stdio.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/precision_rules.h"

typedef struct Ctx {
  ApxGraph *g;
  ApxDiag *d;
  int bn;             /* the BatchNormalization node */
  const char *name;   /* its name */
  ApxDType T;
  ApxSection sec;
  int32_t reason;
  const char *detail;
} Ctx;

static int oom(Ctx *c) {
  return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory in --sync-bn", c->g->file);
}

static const char *fresh(Ctx *c, const char *hint) {
  const char *n = apx_arena_printf(&c->g->arena, "%s/syncbn/%s", c->name, hint);
  if (n && apx_graph_find_value(c->g, n) >= 0) n = apx_graph_unique_name(c->g, n);
  return n;
}

static int new_value(Ctx *c, const char *hint, ApxValueKind kind, ApxDType dt, int32_t rank, const int64_t *dims) {
  const char *n = fresh(c, hint);
  return n ? apx_graph_add_value(c->g, c->d, n, kind, dt, rank, dims) : oom(c);
}

/* A constant T [1]. */
static int scalar(Ctx *c, const char *hint, double v) {
  int64_t one = 1;
  int id = new_value(c, hint, APX_VAL_CONST, c->T, 1, &one);
  if (id < 0) return -1;
  void *p = apx_arena_alloc(&c->g->arena, 8);
  if (!p) return oom(c);
  if (c->T == APX_DT_F64) *(double *)p = v;
  else *(float *)p = (float)v;
  c->g->vals[id].data = p;
  return id;
}

/* Node op(in...) -> out (a new value, preset to rank/dims when rank >= 0, or the existing
 * value `out`), decided like the BatchNorm. Returns the output value or -1. */
static int node(Ctx *c, ApxOp op, const char *hint, int n_in, const int *in, int out, int32_t rank,
                const int64_t *dims, int n_out_extra, int *outs_extra) {
  if (out < 0) {
    out = new_value(c, hint, APX_VAL_ACTIVATION, rank >= 0 ? c->T : APX_DT_UNDEFINED, rank >= 0 ? rank : -1,
                    rank >= 0 ? dims : NULL);
    if (out < 0) return -1;
  }
  int outs[8] = {out};
  for (int k = 0; k < n_out_extra; k++) outs[1 + k] = outs_extra[k];
  const char *nn = apx_arena_printf(&c->g->arena, "%s/syncbn/%s", c->name, hint);
  if (!nn) return oom(c);
  int id = apx_graph_add_node(c->g, c->d, op, nn, n_in, in, 1 + n_out_extra, outs);
  if (id < 0) return -1;
  ApxNode *n = &c->g->nodes[id];
  n->section = c->sec;
  n->origin = c->bn;
  n->compute = c->T;
  n->reason = c->reason;
  n->reason_detail = c->detail;
  if (op == APX_OP_Allreduce) {
    ApxAttrAllreduce *a = n->typed;
    a->bucket = -1; /* statistics, not a gradient bucket */
    a->fp32 = 0;
    a->predivide = 1.0f;
    a->average = 0;
  }
  if (apx_node_infer(c->g, id, c->d)) return -1;
  return out;
}

#define OP1(op, hint, a) node(c, APX_OP_##op, hint, 1, (int[]){a}, -1, -1, NULL, 0, NULL)
#define OP2(op, hint, a, b) node(c, APX_OP_##op, hint, 2, (int[]){a, b}, -1, -1, NULL, 0, NULL)

/* Cast(v -> to) into `out` (a new value when out < 0), decided with the BatchNorm (section,
 * origin); returns the value or -1. */
static int cast_to(Ctx *c, int v, ApxDType to, int out) {
  int id = apx_cast_node_add(c->g, v, to, out, c->d);
  if (id < 0) return -1;
  ApxNode *n = &c->g->nodes[id];
  n->section = c->sec;
  n->origin = c->bn;
  n->reason_detail = apx_arena_printf(&c->g->arena, "--sync-bn: half BatchNorm statistics in fp32 (%s -> %s)",
                                      apx_dtype_short(c->g->vals[v].dtype), apx_dtype_short(to));
  return n->out[0];
}

static int unsupported(Ctx *c, const char *what) {
  return apx_node_error(c->d, c->g, c->bn, "not supported yet: --sync-bn with %s", what);
}

/* Rewrites BatchNorm node bn and its BatchNormGrad nodes. */
static int rewrite(ApxGraph *g, ApxDiag *d, int bn) {
  Ctx cx = {g, d, bn, g->nodes[bn].name, g->nodes[bn].compute, APX_SEC_FORWARD, g->nodes[bn].reason,
            "--sync-bn: BatchNorm statistics over all data-parallel ranks"};
  Ctx *c = &cx;
  const ApxNode bnn = g->nodes[bn]; /* copy: the node array grows */
  const ApxAttrBatchNorm at = *(const ApxAttrBatchNorm *)bnn.typed;
  int X = bnn.in[0], scale = bnn.n_in > 1 ? bnn.in[1] : -1, B = bnn.n_in > 2 ? bnn.in[2] : -1;
  int rm = bnn.n_in > 3 ? bnn.in[3] : -1, rv = bnn.n_in > 4 ? bnn.in[4] : -1;
  if (X < 0 || scale < 0 || B < 0 || rm < 0 || rv < 0)
    return apx_node_error(d, g, bn, "--sync-bn: BatchNormalization needs its five inputs");
  const ApxValue xv = g->vals[X];
  if (c->T == APX_DT_UNDEFINED) c->T = xv.dtype;
  /* A half BatchNorm (O1/O3) reads and writes half X, Y, dY, dX; its statistics, scale and
   * bias are fp32 (cuDNN, Apex SyncBatchNorm): the decomposition runs in fp32 between a
   * widening Cast of X (dY) and a narrowing one of Y (dX). */
  const ApxDType io = c->T;
  const int half = io == APX_DT_F16 || io == APX_DT_BF16;
  if (half) c->T = APX_DT_F32;
  if (c->T != APX_DT_F32 && c->T != APX_DT_F64) {
    char what[160];
    snprintf(what, sizeof what, "BatchNorm in %s", apx_dtype_name(c->T));
    return unsupported(c, what);
  }
  const int vals[4] = {scale, B, rm, rv};
  if (xv.dtype != io) return unsupported(c, "an input of another type than the BatchNorm's");
  for (int k = 0; k < 4; k++)
    if (g->vals[vals[k]].dtype != c->T) return unsupported(c, "parameters or running statistics of another type than the BatchNorm's");
  if (xv.rank < 2 || apx_value_numel(&xv) <= 0) return unsupported(c, "an input without a static (N, C, ...) shape");
  const int32_t r = xv.rank;
  const int64_t C = xv.dims[1];
  int64_t S[APX_MAX_RANK], cnt = 1;
  for (int i = 0; i < r; i++) {
    S[i] = i == 1 ? C : 1;
    if (i != 1) cnt *= xv.dims[i];
  }

  /* ---- forward ---- */
  g->nodes[bn].flags |= APX_NODEF_DEAD;
  if (half && (X = cast_to(c, X, c->T, -1)) < 0) return -1;
  int s1 = node(c, APX_OP_ReduceSumTo, "sum", 1, &X, -1, r, S, 0, NULL);
  int n_local = scalar(c, "count", (double)cnt);
  if (s1 < 0 || n_local < 0) return -1;
  int CNT = new_value(c, "count_all", APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL);
  if (CNT < 0) return -1;
  int S1 = node(c, APX_OP_Allreduce, "allreduce_sum", 2, (int[]){s1, n_local}, -1, -1, NULL, 1, &CNT);
  int mean = S1 < 0 ? -1 : OP2(Div, "mean", S1, CNT);
  int xc = mean < 0 ? -1 : OP2(Sub, "centered", X, mean);
  int sq = xc < 0 ? -1 : OP2(Mul, "squared", xc, xc);
  int s2 = sq < 0 ? -1 : node(c, APX_OP_ReduceSumTo, "sum_squares", 1, &sq, -1, r, S, 0, NULL);
  int S2 = s2 < 0 ? -1 : node(c, APX_OP_Allreduce, "allreduce_sum_squares", 1, &s2, -1, -1, NULL, 0, NULL);
  int var = S2 < 0 ? -1 : OP2(Div, "var", S2, CNT);
  int eps = scalar(c, "epsilon", at.epsilon), one = scalar(c, "one", 1.0);
  int ve = var < 0 || eps < 0 ? -1 : OP2(Add, "var_eps", var, eps);
  int sd = ve < 0 ? -1 : OP1(Sqrt, "std", ve);
  int invstd = sd < 0 || one < 0 ? -1 : OP2(Div, "invstd", one, sd);
  int xhat = invstd < 0 ? -1 : OP2(Mul, "xhat", xc, invstd);
  int scale4 = xhat < 0 ? -1 : node(c, APX_OP_Reshape, "scale", 1, &scale, -1, r, S, 0, NULL);
  int b4 = scale4 < 0 ? -1 : node(c, APX_OP_Reshape, "bias", 1, &B, -1, r, S, 0, NULL);
  int ys = b4 < 0 ? -1 : OP2(Mul, "scaled", xhat, scale4);
  if (ys < 0) return -1;
  if (bnn.out[0] >= 0) {
    int y = node(c, APX_OP_Add, "y", 2, (int[]){ys, b4}, half ? -1 : bnn.out[0], -1, NULL, 0, NULL);
    if (y < 0 || (half && cast_to(c, y, io, bnn.out[0]) < 0)) return -1;
  }
  int mom = scalar(c, "momentum", at.momentum), omm = scalar(c, "one_minus_momentum", 1.0 - (double)at.momentum);
  if (mom < 0 || omm < 0) return -1;
  /* PyTorch's running variance (attrs.def ApxAttrBatchNorm.unbiased_running_var): the sum of
   * squares over CNT - 1 (CNT >= 2 when this rank has 2 or more values per channel; with
   * one, the batch variance, as the kernel does) */
  int run_var = var;
  if (at.unbiased_running_var && cnt > 1) {
    int cm1 = OP2(Sub, "count_all_minus_one", CNT, one);
    run_var = cm1 < 0 ? -1 : OP2(Div, "var_unbiased", S2, cm1);
    if (run_var < 0) return -1;
  }
  const int stat[2] = {mean, run_var}, run[2] = {rm, rv};
  const char *hints[2][4] = {{"batch_mean", "running_mean_decayed", "running_mean_batch", "running_mean"},
                             {"batch_var", "running_var_decayed", "running_var_batch", "running_var"}};
  for (int k = 0; k < 2; k++) {
    int out = bnn.n_out > 1 + k ? bnn.out[1 + k] : -1;
    if (out < 0) continue;
    int sc = node(c, APX_OP_Reshape, hints[k][0], 1, &stat[k], -1, 1, &C, 0, NULL);
    int a = OP2(Mul, hints[k][1], run[k], mom);
    int b = sc < 0 ? -1 : OP2(Mul, hints[k][2], sc, omm);
    if (a < 0 || b < 0 || node(c, APX_OP_Add, hints[k][3], 2, (int[]){a, b}, out, -1, NULL, 0, NULL) < 0) return -1;
  }

  /* ---- backward: every BatchNormGrad reading this BatchNorm's saved statistics ---- */
  int saved_mean = bnn.n_out > 3 ? bnn.out[3] : -1;
  if (saved_mean < 0) return 0;
  int n_nodes = g->n_nodes;
  for (int id = 0; id < n_nodes; id++) {
    ApxNode *gn = &g->nodes[id];
    if (gn->flags & APX_NODEF_DEAD) continue;
    int reads = 0;
    for (int k = 0; k < gn->n_in; k++) reads |= gn->in[k] == saved_mean || (bnn.n_out > 4 && gn->in[k] == bnn.out[4]);
    if (!reads) continue;
    if (gn->op != APX_OP_BatchNormGrad)
      return apx_node_error(d, g, id, "not supported yet: --sync-bn when %s reads BatchNorm '%s''s saved statistics",
                            apx_op_name(gn->op), c->name);
    const ApxNode gnn = *gn;
    g->nodes[id].flags |= APX_NODEF_DEAD;
    c->sec = gnn.section;
    c->reason = gnn.reason;
    int dY = gnn.in[0];
    if (g->vals[dY].dtype != io) return unsupported(c, "a gradient of another type than the BatchNorm's");
    if (half && (dY = cast_to(c, dY, c->T, -1)) < 0) return -1;
    int dX = gnn.out[0], dscale = gnn.n_out > 1 ? gnn.out[1] : -1, dB = gnn.n_out > 2 ? gnn.out[2] : -1;
    int db = node(c, APX_OP_ReduceSumTo, "grad_sum", 1, &dY, -1, r, S, 0, NULL);
    int dyx = db < 0 ? -1 : OP2(Mul, "grad_xhat", dY, xhat);
    int dsx = dyx < 0 ? -1 : node(c, APX_OP_ReduceSumTo, "grad_sum_xhat", 1, &dyx, -1, r, S, 0, NULL);
    if (dsx < 0) return -1;
    if (dB >= 0 && node(c, APX_OP_Reshape, "grad_bias", 1, &db, dB, -1, NULL, 0, NULL) < 0) return -1;
    if (dscale >= 0 && node(c, APX_OP_Reshape, "grad_scale", 1, &dsx, dscale, -1, NULL, 0, NULL) < 0) return -1;
    if (dX < 0) continue;
    int SDYX = new_value(c, "grad_sum_xhat_all", APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL);
    if (SDYX < 0) return -1;
    int SDY = node(c, APX_OP_Allreduce, "allreduce_grad_sums", 2, (int[]){db, dsx}, -1, -1, NULL, 1, &SDYX);
    int mdy = SDY < 0 ? -1 : OP2(Div, "grad_mean", SDY, CNT);
    int mdyx = mdy < 0 ? -1 : OP2(Div, "grad_mean_xhat", SDYX, CNT);
    int t1 = mdyx < 0 ? -1 : OP2(Sub, "grad_centered", dY, mdy);
    int t2 = t1 < 0 ? -1 : OP2(Mul, "grad_projection", xhat, mdyx);
    int t3 = t2 < 0 ? -1 : OP2(Sub, "grad_orthogonal", t1, t2);
    int k4 = t3 < 0 ? -1 : OP2(Mul, "grad_gain", scale4, invstd);
    int dx = k4 < 0 ? -1 : node(c, APX_OP_Mul, "grad_x", 2, (int[]){t3, k4}, half ? -1 : dX, -1, NULL, 0, NULL);
    if (dx < 0 || (half && cast_to(c, dx, io, dX) < 0)) return -1;
  }
  return 0;
}

int pass_sync_bn(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  if (!o->sync_bn) return APX_PASS_UNCHANGED;
  int changed = 0, n_nodes = g->n_nodes;
  for (int id = 0; id < n_nodes; id++) {
    const ApxNode *n = &g->nodes[id];
    if ((n->flags & APX_NODEF_DEAD) || n->op != APX_OP_BatchNormalization) continue;
    if (!((const ApxAttrBatchNorm *)n->typed)->training_mode) continue;
    if (rewrite(g, d, id)) return APX_PASS_ERROR;
    changed = 1;
  }
  return changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
