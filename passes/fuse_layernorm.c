/* fuse_layernorm.c - pass_fuse_layernorm: the hand-written LayerNorm pattern ->
 * LayerNormalization, its backward -> LayerNormGrad (see fuse_layernorm.h). */
#include "passes/fuse_layernorm.h"

#include <math.h>
#include <string.h>

#include "passes/fuse_common.h"

/* 1 when v is base or base through inserted Casts (adding those to f). */
static int reaches(const ApxGraph *g, FzFusion *f, int v, int base) {
  for (int hops = 0; hops < 8 && v >= 0; hops++) {
    if (v == base) return 1;
    int p = g->vals[v].producer;
    if (!fz_is_cast(g, p)) return 0;
    fz_add(f, p);
    v = g->nodes[p].in[0];
  }
  return 0;
}

static int is_op(const ApxGraph *g, int n, ApxOp op) { return fz_live(g, n) && g->nodes[n].op == op; }

/* ReduceMean over trailing axes [axis, rank) with keepdims: *axis. */
static int mean_over_tail(const ApxGraph *g, int n, int32_t rank, int64_t *axis) {
  if (!is_op(g, n, APX_OP_ReduceMean)) return 0;
  const ApxAttrReduce *a = g->nodes[n].typed;
  if (!a->keepdims || a->n_axes < 1) return 0;
  for (int i = 0; i < a->n_axes; i++)
    if (a->axes[i] != rank - a->n_axes + i) return 0;
  *axis = a->axes[0];
  return 1;
}

/* The operand of binary node n that is not (a Cast chain of) base, -1 if none is base. */
static int other_than(const ApxGraph *g, FzFusion *f, int n, int base) {
  const ApxNode *nd = &g->nodes[n];
  if (nd->n_in != 2) return -1;
  FzFusion t = *f;
  if (reaches(g, &t, nd->in[0], base)) {
    *f = t;
    return nd->in[1];
  }
  t = *f;
  if (reaches(g, &t, nd->in[1], base)) {
    *f = t;
    return nd->in[0];
  }
  return -1;
}

/* v's shape, leading 1s stripped, equals dims[axis..rank) of x */
static int per_feature(const ApxGraph *g, int v, int x, int64_t axis) {
  const ApxValue *p = &g->vals[v], *xv = &g->vals[x];
  int k = 0;
  while (k < p->rank && p->dims[k] == 1 && p->rank - k > xv->rank - axis) k++;
  if (p->rank - k != xv->rank - axis) return 0;
  for (int i = 0; i < p->rank - k; i++)
    if (p->dims[k + i] != xv->dims[axis + i]) return 0;
  return 1;
}

static int try_layernorm(FzCtx *c, int m1) {
  ApxGraph *g = c->g;
  FzFusion f;
  memset(&f, 0, sizeof f);
  f.pattern = "LayerNorm(hand-written)";
  fz_add(&f, m1);
  int x = g->nodes[m1].in[0], mean = g->nodes[m1].out[0];
  int64_t axis;
  if (x < 0 || mean < 0 || !mean_over_tail(g, m1, g->vals[x].rank, &axis)) return 0;
  /* Sub(x, mean) */
  int s = fz_next(c, &f, mean);
  if (!is_op(g, s, APX_OP_Sub) || g->nodes[s].n_in != 2 || fz_source(g, g->nodes[s].in[0]) != fz_source(g, x) ||
      !reaches(g, &f, g->nodes[s].in[1], mean))
    return 0;
  fz_add(&f, s);
  int d = g->nodes[s].out[0];
  /* d feeds Pow(d, 2) (or Mul(d, d)) and Div(d, .), through Casts */
  int us[4], nu = fz_fwd_users(c, d, us, 4), pw = -1, dv = -1;
  for (int i = 0; i < nu && i < 4; i++) {
    FzFusion t = f;
    int u = us[i];
    if (fz_is_cast(g, u)) {
      fz_add(&t, u);
      u = fz_next(c, &t, g->nodes[u].out[0]);
    }
    double e;
    if (pw < 0 && is_op(g, u, APX_OP_Pow) && fz_scalar(g, g->nodes[u].in[1], &e) && e == 2.0) {
      pw = u, f = t;
    } else if (pw < 0 && is_op(g, u, APX_OP_Mul) && g->nodes[u].in[0] == g->nodes[u].in[1]) {
      pw = u, f = t;
    } else if (dv < 0 && is_op(g, u, APX_OP_Div) && reaches(g, &t, g->nodes[u].in[0], d)) {
      dv = u, f = t;
    }
  }
  if (pw < 0 || dv < 0) return 0;
  fz_add(&f, pw);
  int64_t axis2;
  int m2 = fz_next(c, &f, g->nodes[pw].out[0]);
  if (!mean_over_tail(g, m2, g->vals[x].rank, &axis2) || axis2 != axis) return 0;
  fz_add(&f, m2);
  int ad = fz_next(c, &f, g->nodes[m2].out[0]);
  if (!is_op(g, ad, APX_OP_Add)) return 0;
  int epsv = other_than(g, &f, ad, g->nodes[m2].out[0]);
  double eps;
  if (epsv < 0 || !fz_scalar(g, epsv, &eps)) return 0;
  fz_add(&f, ad);
  int sq = fz_next(c, &f, g->nodes[ad].out[0]);
  if (!is_op(g, sq, APX_OP_Sqrt)) return 0;
  fz_add(&f, sq);
  if (!reaches(g, &f, g->nodes[dv].in[1], g->nodes[sq].out[0])) return 0;
  fz_add(&f, dv);
  int y = g->nodes[dv].out[0], gamma = -1, beta = -1;
  /* optional Mul(., gamma) then Add(., beta), per-feature operands */
  FzFusion t = f;
  int mg = fz_next(c, &t, y);
  if (is_op(g, mg, APX_OP_Mul)) {
    int o = other_than(g, &t, mg, y);
    if (o >= 0 && per_feature(g, o, x, axis)) {
      gamma = o, f = t, y = g->nodes[mg].out[0];
      fz_add(&f, mg);
    }
  }
  t = f;
  int ab = fz_next(c, &t, y);
  if (is_op(g, ab, APX_OP_Add)) {
    int o = other_than(g, &t, ab, y);
    if (o >= 0 && per_feature(g, o, x, axis)) {
      beta = o, f = t, y = g->nodes[ab].out[0];
      fz_add(&f, ab);
    }
  }
  int xs = fz_source(g, x);
  if (g->vals[xs].dtype != g->vals[y].dtype) xs = x;
  if ((float)eps < 0.0f || !isfinite((float)eps))
    return fz_reject(c, &f, APX_OP_LayerNormalization, APX_FUSE_NOT_LEGALITY,
                     "epsilon %g is not a finite float >= 0", eps);
  if (gamma < 0) { /* LayerNormalization needs a Scale: ones */
    const ApxValue *xv = &g->vals[xs];
    int64_t dims[APX_MAX_RANK], n = 1;
    int r = 0;
    for (int i = (int)axis; i < xv->rank; i++) dims[r++] = xv->dims[i], n *= xv->dims[i];
    ApxDType dt = xv->dtype;
    if (dt != APX_DT_F32 && dt != APX_DT_F64 && !apx_dtype_is_half(dt)) return 0;
    const char *name = apx_graph_unique_name(g, "layernorm_ones");
    gamma = name ? apx_graph_add_value(g, c->d, name, APX_VAL_CONST, dt, r, dims) : -1;
    size_t es = apx_dtype_size(dt);
    void *data = gamma >= 0 ? apx_arena_alloc(&g->arena, (size_t)n * es + 1) : NULL;
    if (!data) return gamma < 0 ? -1 : apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
    for (int64_t i = 0; i < n; i++) {
      if (dt == APX_DT_F32) ((float *)data)[i] = 1.0f;
      else if (dt == APX_DT_F64) ((double *)data)[i] = 1.0;
      else ((uint16_t *)data)[i] = dt == APX_DT_F16 ? 0x3c00 : 0x3f80;
    }
    g->vals[gamma].data = data;
  }
  ApxAttrLayerNorm at = {.axis = axis, .epsilon = (float)eps, .stash_type = APX_DT_F32};
  f.prec = FZ_PREC_WIDEST;
  f.op = APX_OP_LayerNormalization;
  f.attrs = &at;
  f.n_in = beta >= 0 ? 3 : 2;
  f.in[0] = xs, f.in[1] = gamma, f.in[2] = beta;
  f.n_out = 3;
  f.out[0] = y, f.out[1] = FZ_NEW, f.out[2] = FZ_NEW;
  f.mixed_out = 1; /* dX in the type the graph had: fuse_casts folds a narrowing Cast after it */
  f.grad_op = APX_OP_LayerNormGrad;
  f.grad_attrs = &at;
  f.grad_n_in = 5;
  f.grad_in[0] = FZ_DY, f.grad_in[1] = xs, f.grad_in[2] = gamma, f.grad_in[3] = FZ_FOUT(1),
  f.grad_in[4] = FZ_FOUT(2);
  f.grad_n_out = 3;
  f.grad_of[0] = 0, f.grad_of[1] = 1, f.grad_of[2] = beta >= 0 ? 2 : -1;
  return fz_apply(c, &f);
}

/* A forward ReduceMean that can start the pattern (over trailing axes, kept): a graph whose
 * only ReduceMean is a loss's (keepdims 0, all axes) builds no fusion index for it */
static int is_reduce_mean(const ApxGraph *g, int node) {
  if (!fz_fwd_op(g, node, APX_OP_ReduceMean)) return 0;
  int x = g->nodes[node].n_in > 0 ? g->nodes[node].in[0] : -1;
  int64_t axis;
  return x >= 0 && mean_over_tail(g, node, g->vals[x].rank, &axis);
}

int pass_fuse_layernorm(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_layernorm", is_reduce_mean, try_layernorm);
}
