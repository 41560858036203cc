/* fuse_dense.c - pass_fuse_dense: MatMul/Gemm + bias Add (+ Relu / Gelu) -> FusedDense, and
 * their backward nodes -> FusedDenseGrad (see fuse_dense.h). */
#include "passes/fuse_dense.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse_common.h"

typedef struct Dense {
  int mm;              /* MatMul / Gemm node */
  int x, w, b;         /* X, W, bias (-1 none) */
  int y;               /* the product's output */
  ApxAttrFusedDense at;
  int bias_node;       /* Add node of MatMul + Add, -1 */
  int pre;             /* value before the activation */
  FzFusion bias_casts; /* Casts between the product and the bias Add */
  int act;             /* ApxActivation found, -1 unsupported */
  const char *act_name;
  FzFusion act_nodes;  /* activation nodes (and Casts) */
  int act_out;
} Dense;

/* v's shape is a per-column bias of width n: [n] with any leading 1s */
static int bias_like(const ApxGraph *g, int v, int64_t n) {
  const ApxValue *b = &g->vals[v];
  if (b->rank < 1 || b->dims[b->rank - 1] != n) return 0;
  for (int i = 0; i + 1 < b->rank; i++)
    if (b->dims[i] != 1) return 0;
  return 1;
}

static int scalar_is(const ApxGraph *g, int v, double want, double tol) {
  double x;
  return fz_scalar(g, v, &x) && fabs(x - want) <= tol;
}

/* The other operand of binary node n when one of them is v, -1 otherwise. */
static int other_operand(const ApxGraph *g, int n, int v) {
  const ApxNode *nd = &g->nodes[n];
  if (nd->n_in != 2) return -1;
  return nd->in[0] == v ? nd->in[1] : nd->in[1] == v ? nd->in[0] : -1;
}

static int is_op(const ApxGraph *g, int n, ApxOp op) { return fz_live(g, n) && g->nodes[n].op == op; }

/* Erf form of GELU as exporters write it, on pre-activation z:
 *   t = Add(Erf(Div(z, sqrt 2) | Mul(z, 1/sqrt 2)), 1);  y = Mul(Mul(z, t), 0.5) or
 *   y = Mul(Mul(z, 0.5), t)
 * Returns y's value id with the nodes added to f, or -1. */
static int match_gelu_erf(FzCtx *c, FzFusion *f, int z) {
  const ApxGraph *g = c->g;
  int us[3];
  if (fz_fwd_users(c, z, us, 3) != 2) return -1;
  for (int pick = 0; pick < 2; pick++) {
    int dv = us[pick], m = us[1 - pick];
    int k = other_operand(g, dv, z);
    if (k < 0 || g->nodes[dv].in[0] != z) continue;
    if (!((is_op(g, dv, APX_OP_Div) && scalar_is(g, k, sqrt(2.0), 2e-3)) ||
          (is_op(g, dv, APX_OP_Mul) && scalar_is(g, k, sqrt(0.5), 1e-3))))
      continue;
    FzFusion t = *f;
    fz_add(&t, dv);
    int e = fz_next(c, &t, g->nodes[dv].out[0]);
    if (!is_op(g, e, APX_OP_Erf)) continue;
    fz_add(&t, e);
    int a = fz_next(c, &t, g->nodes[e].out[0]);
    if (!is_op(g, a, APX_OP_Add) || g->nodes[a].n_in != 2 ||
        !(scalar_is(g, g->nodes[a].in[0], 1.0, 1e-6) || scalar_is(g, g->nodes[a].in[1], 1.0, 1e-6)))
      continue;
    fz_add(&t, a);
    int tv = g->nodes[a].out[0];
    if (!is_op(g, m, APX_OP_Mul)) continue;
    int mo = other_operand(g, m, z);
    fz_add(&t, m);
    int m2 = fz_next(c, &t, g->nodes[m].out[0]);
    if (!is_op(g, m2, APX_OP_Mul)) continue;
    int m2o = other_operand(g, m2, g->nodes[m].out[0]);
    if (mo == tv) { /* z * t * 0.5 */
      if (!scalar_is(g, m2o, 0.5, 1e-6)) continue;
    } else if (scalar_is(g, mo, 0.5, 1e-6)) { /* z * 0.5 * t */
      if (m2o != tv) continue;
    } else {
      continue;
    }
    /* t must feed only the Mul that uses it */
    int tu[2];
    if (fz_fwd_users(c, tv, tu, 2) != 1) continue;
    fz_add(&t, m2);
    *f = t;
    return g->nodes[m2].out[0];
  }
  return -1;
}

/* Activation after value pre: fills d->act (ApxActivation or -1 unsupported, -2 none). */
static void find_activation(FzCtx *c, Dense *dn, int pre) {
  const ApxGraph *g = c->g;
  dn->act = -2;
  memset(&dn->act_nodes, 0, sizeof dn->act_nodes);
  int ge = match_gelu_erf(c, &dn->act_nodes, pre);
  if (ge >= 0) {
    dn->act = APX_ACT_GELU, dn->act_name = "Gelu(erf)", dn->act_out = ge;
    return;
  }
  memset(&dn->act_nodes, 0, sizeof dn->act_nodes);
  int n = fz_next(c, &dn->act_nodes, pre);
  if (n < 0) { /* several readers: an activation among them is still a candidate (fz_apply
                  then says why it is not fused) */
    int us[8], nu = fz_fwd_users(c, pre, us, 8);
    for (int i = 0; i < nu && i < 8 && n < 0; i++)
      if (is_op(g, us[i], APX_OP_Relu) || is_op(g, us[i], APX_OP_Gelu)) n = us[i];
    if (n < 0) return;
  }
  const ApxNode *nd = &g->nodes[n];
  dn->act_out = nd->out[0];
  fz_add(&dn->act_nodes, n);
  dn->act_name = apx_op_name(nd->op);
  switch (nd->op) {
    case APX_OP_Relu: dn->act = APX_ACT_RELU; return;
    case APX_OP_Gelu:
      dn->act = ((const ApxAttrGelu *)nd->typed)->approximate == APX_GELU_TANH ? APX_ACT_GELU_TANH : APX_ACT_GELU;
      return;
    case APX_OP_Sigmoid: case APX_OP_Tanh: case APX_OP_LeakyRelu:
      dn->act = -1; /* an activation FusedDense has no epilogue for */
      return;
    default: dn->act = -2; return;
  }
}

/* One attempt: product (+ bias Add) (+ activation). Returns fz_apply's result. */
static int attempt(FzCtx *c, const Dense *dn, int with_act) {
  const ApxGraph *g = c->g;
  FzFusion f;
  memset(&f, 0, sizeof f);
  f.prec = FZ_PREC_AGREE;
  fz_add(&f, dn->mm);
  for (int i = 0; i < dn->bias_casts.n_fwd; i++) fz_add(&f, dn->bias_casts.fwd[i]);
  if (dn->bias_node >= 0) fz_add(&f, dn->bias_node);
  ApxAttrFusedDense at = dn->at;
  at.activation = with_act ? dn->act : APX_ACT_NONE;
  int y = dn->pre;
  if (with_act) {
    for (int i = 0; i < dn->act_nodes.n_fwd; i++) fz_add(&f, dn->act_nodes.fwd[i]);
    y = dn->act_out;
  }
  char pat[96];
  snprintf(pat, sizeof pat, "%s%s%s%s", apx_op_name(g->nodes[dn->mm].op), dn->bias_node >= 0 ? "+Add" : "",
           with_act ? "+" : "", with_act ? dn->act_name : "");
  f.pattern = pat;
  f.op = APX_OP_FusedDense;
  f.attrs = &at;
  f.n_in = dn->b >= 0 ? 3 : 2;
  f.in[0] = dn->x, f.in[1] = dn->w, f.in[2] = dn->b;
  int gelu = at.activation == APX_ACT_GELU || at.activation == APX_ACT_GELU_TANH;
  f.n_out = gelu ? 2 : 1;
  f.out[0] = y, f.out[1] = FZ_NEW;
  f.grad_op = APX_OP_FusedDenseGrad;
  f.grad_attrs = &at;
  f.grad_in[0] = FZ_DY, f.grad_in[1] = dn->x, f.grad_in[2] = dn->w;
  f.grad_n_in = 3;
  if (at.activation == APX_ACT_RELU) f.grad_in[f.grad_n_in++] = FZ_FOUT(0);
  if (gelu) f.grad_in[f.grad_n_in++] = FZ_FOUT(1);
  f.grad_n_out = 3;
  f.grad_of[0] = 0, f.grad_of[1] = 1, f.grad_of[2] = dn->b >= 0 ? 2 : -1;
  return fz_apply(c, &f);
}

static int try_dense(FzCtx *c, int mm) {
  const ApxGraph *g = c->g;
  Dense dn;
  memset(&dn, 0, sizeof dn);
  const ApxNode *n = &g->nodes[mm];
  dn.mm = mm, dn.x = n->in[0], dn.w = n->in[1], dn.b = -1, dn.y = n->out[0], dn.bias_node = -1;
  dn.at.alpha = 1.0f, dn.at.beta = 1.0f;
  if (dn.x < 0 || dn.w < 0 || dn.y < 0 || !apx_dtype_is_float(g->vals[dn.y].dtype)) return 0;
  const ApxValue *w = &g->vals[dn.w], *x = &g->vals[dn.x];
  FzFusion self;
  memset(&self, 0, sizeof self);
  self.pattern = apx_op_name(n->op);
  fz_add(&self, mm);
  int64_t width = g->vals[dn.y].rank > 0 ? g->vals[dn.y].dims[g->vals[dn.y].rank - 1] : -1;
  if (n->op == APX_OP_Gemm) {
    const ApxAttrGemm *ga = n->typed;
    dn.at.alpha = ga->alpha, dn.at.beta = ga->beta, dn.at.trans_w = ga->trans_b;
    dn.b = n->n_in > 2 ? n->in[2] : -1;
    dn.pre = dn.y;
    find_activation(c, &dn, dn.pre);
    if (dn.b < 0 && dn.act == -2) return 0; /* a plain product: nothing to fuse */
    if (ga->trans_a)
      return fz_reject(c, &self, APX_OP_FusedDense, APX_FUSE_NOT_LEGALITY,
                       "transA = 1: FusedDense takes X as (M, K)");
    if (dn.b >= 0 && !bias_like(g, dn.b, width)) {
      char s[64];
      return fz_reject(c, &self, APX_OP_FusedDense, APX_FUSE_NOT_LEGALITY,
                       "bias C %s is not broadcastable as a per-column bias of width %lld",
                       apx_value_shape_str(&g->vals[dn.b], s, sizeof s), (long long)width);
    }
  } else {
    /* MatMul: look for the bias Add */
    int a = fz_next(c, &dn.bias_casts, dn.y);
    if (a < 0) { /* several readers: a bias Add among them is a candidate all the same */
      int us[8], nu = fz_fwd_users(c, dn.y, us, 8);
      for (int i = 0; i < nu && i < 8 && a < 0; i++)
        if (is_op(g, us[i], APX_OP_Add) && other_operand(g, us[i], dn.y) >= 0 &&
            bias_like(g, other_operand(g, us[i], dn.y), width))
          a = us[i];
    }
    int chain = dn.bias_casts.n_fwd ? g->nodes[dn.bias_casts.fwd[dn.bias_casts.n_fwd - 1]].out[0] : dn.y;
    if (is_op(g, a, APX_OP_Add)) {
      int other = other_operand(g, a, chain);
      if (other >= 0 && bias_like(g, other, width)) {
        dn.b = other, dn.bias_node = a, dn.pre = g->nodes[a].out[0];
      }
    }
    if (dn.bias_node < 0) {
      memset(&dn.bias_casts, 0, sizeof dn.bias_casts);
      dn.pre = dn.y;
    }
    find_activation(c, &dn, dn.pre);
    if (dn.bias_node < 0 && dn.act == -2) {
      /* an Add that is not a bias (residual, broadcast over rows) is noted, the rest skipped */
      if (is_op(g, a, APX_OP_Add) && other_operand(g, a, chain) >= 0) {
        char s[64];
        FzFusion t = self;
        fz_add(&t, a);
        t.pattern = "MatMul+Add";
        return fz_reject(c, &t, APX_OP_FusedDense, APX_FUSE_NOT_LEGALITY,
                         "Add operand '%s' %s is not a per-column bias of width %lld",
                         g->vals[other_operand(g, a, chain)].name,
                         apx_value_shape_str(&g->vals[other_operand(g, a, chain)], s, sizeof s),
                         (long long)width);
      }
      return 0;
    }
    if (w->rank != 2 || x->rank < 1) {
      char s[64];
      return fz_reject(c, &self, APX_OP_FusedDense, APX_FUSE_NOT_SHAPE,
                       "weight '%s' %s is not 2-D (FusedDense takes X (..., K) and W (K, N))",
                       w->name, apx_value_shape_str(w, s, sizeof s));
    }
  }
  if (dn.act == -1) { /* an activation without epilogue: fuse the rest, say why not it */
    FzFusion t = self;
    for (int i = 0; i < dn.bias_casts.n_fwd; i++) fz_add(&t, dn.bias_casts.fwd[i]);
    if (dn.bias_node >= 0) fz_add(&t, dn.bias_node);
    for (int i = 0; i < dn.act_nodes.n_fwd; i++) fz_add(&t, dn.act_nodes.fwd[i]);
    char pat[64];
    snprintf(pat, sizeof pat, "%s%s+%s", apx_op_name(n->op), dn.bias_node >= 0 ? "+Add" : "", dn.act_name);
    t.pattern = pat;
    if (fz_reject(c, &t, APX_OP_FusedDense, APX_FUSE_NOT_LEGALITY,
                  "activation %s is not supported by FusedDense (Relu, Gelu)", dn.act_name))
      return -1;
    if (dn.b < 0) return 0;
    return attempt(c, &dn, 0);
  }
  if (dn.act >= 0) {
    int rc = attempt(c, &dn, 1);
    if (rc != 0 || dn.b < 0) return rc;
    /* without the activation; its record is kept only when that fuses (a failure for a
     * reason the activation did not cause would repeat the first record) */
    int32_t n_rec = g->fusion ? g->fusion->n : 0;
    rc = attempt(c, &dn, 0);
    if (rc == 0 && g->fusion) g->fusion->n = n_rec;
    return rc;
  }
  return attempt(c, &dn, 0);
}

static int is_product(const ApxGraph *g, int node) {
  return fz_fwd_op(g, node, APX_OP_MatMul) || fz_fwd_op(g, node, APX_OP_Gemm);
}

int pass_fuse_dense(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return fz_run(g, o, d, "fuse_dense", is_product, try_dense);
}
