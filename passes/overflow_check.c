/* overflow_check.c - constant range checks, interval propagation for risky patterns and
 * tensor-core alignment notes over the forward graph (see overflow_check.h). */
#include "passes/overflow_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "passes/precision_rules.h"

typedef struct Iv {
  double lo, hi;
} Iv;

static const Iv UNBOUNDED = {-INFINITY, INFINITY};

static int iv_bounded(Iv a) { return isfinite(a.lo) && isfinite(a.hi); }
static double iv_mag(Iv a) { return fmax(fabs(a.lo), fabs(a.hi)); }
static Iv iv_make(double lo, double hi) {
  Iv r = {lo, hi};
  if (lo != lo || hi != hi || lo > hi) return UNBOUNDED;
  return r;
}

static Iv iv_mul(Iv a, Iv b) {
  double p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < 4; i++) {
    if (p[i] != p[i]) return UNBOUNDED; /* 0 * inf */
    lo = fmin(lo, p[i]);
    hi = fmax(hi, p[i]);
  }
  return iv_make(lo, hi);
}

static Iv iv_square(Iv a) {
  double l2 = a.lo * a.lo, h2 = a.hi * a.hi;
  if (a.lo <= 0 && a.hi >= 0) return iv_make(0, fmax(l2, h2));
  return iv_make(fmin(l2, h2), fmax(l2, h2));
}

typedef struct Ctx {
  ApxGraph *g;
  ApxDType half;
  int patterns; /* interval-based rules on (fp16) */
  Iv *iv;       /* per value */
} Ctx;

/* fp32 data: min and max through order-preserving integer keys of the bit patterns (one
 * branch-free pass the compiler vectorizes; parameters of large models are scanned here).
 * 0 when a NaN is there or when the min or max is a zero (the exact loop below then decides
 * which zero, as fmin/fmax do), else 1 with *lo, *hi. */
__attribute__((optimize("tree-vectorize"))) static int f32_min_max(const float *x, int64_t n,
                                                                  float *lo, float *hi) {
  uint32_t kmin = UINT32_MAX, kmax = 0, nan = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    nan |= (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* unsigned order = float order */
    kmin = k < kmin ? k : kmin;
    kmax = k > kmax ? k : kmax;
  }
  if (nan) return 0;
  uint32_t ul = (kmin & 0x80000000u) ? (kmin & 0x7fffffffu) : ~kmin;
  uint32_t uh = (kmax & 0x80000000u) ? (kmax & 0x7fffffffu) : ~kmax;
  memcpy(lo, &ul, 4);
  memcpy(hi, &uh, 4);
  return *lo != 0.0f && *hi != 0.0f;
}

/* Interval of constant data: [min, max] (NaN anywhere: unbounded). */
/* Pad's constant (attrs.h: the element's bytes in the data's dtype) as a double; 0 for
 * non-float data. */
static double pad_value(const ApxAttrPad *p, ApxDType dt) {
  const void *b = &p->value;
  switch (dt) {
    case APX_DT_F32: { float f; memcpy(&f, b, sizeof f); return f; }
    case APX_DT_F64: { double x; memcpy(&x, b, sizeof x); return x; }
    case APX_DT_F16: { uint16_t h; memcpy(&h, b, sizeof h); return apx_f16_to_f32(h); }
    case APX_DT_BF16: { uint16_t h; memcpy(&h, b, sizeof h); return apx_bf16_to_f32(h); }
    default: return 0;
  }
}

static Iv const_interval(const ApxValue *v) {
  if (!v->data) return UNBOUNDED;
  int64_t n = apx_value_numel(v);
  if (n <= 0) return UNBOUNDED;
  float flo, fhi;
  if (v->dtype == APX_DT_F32 && f32_min_max(v->data, n, &flo, &fhi)) return iv_make(flo, fhi);
  double lo = INFINITY, hi = -INFINITY;
  float tmp;
  for (int64_t i = 0; i < n; i++) {
    double x;
    switch (v->dtype) {
      case APX_DT_F32: x = ((const float *)v->data)[i]; break;
      case APX_DT_F64: x = ((const double *)v->data)[i]; break;
      case APX_DT_F16:
      case APX_DT_BF16:
        if (apx_convert_floats((const uint16_t *)v->data + i, v->dtype, &tmp, APX_DT_F32, 1))
          return UNBOUNDED;
        x = tmp;
        break;
      case APX_DT_I64: x = (double)((const int64_t *)v->data)[i]; break;
      case APX_DT_I32: x = ((const int32_t *)v->data)[i]; break;
      default: return UNBOUNDED;
    }
    if (x != x) return UNBOUNDED;
    lo = fmin(lo, x);
    hi = fmax(hi, x);
  }
  return iv_make(lo, hi);
}

/* Scalar value of a constant with exactly one element, NaN otherwise. */
static double const_scalar(const ApxGraph *g, int v) {
  if (v < 0) return NAN;
  const ApxValue *val = &g->vals[v];
  if (val->producer >= 0 || !val->data || apx_value_numel(val) != 1) return NAN;
  Iv r = const_interval(val);
  return r.lo == r.hi ? r.lo : NAN;
}

static Iv in_iv(const Ctx *c, const ApxNode *n, int k) {
  return (k < n->n_in && n->in[k] >= 0) ? c->iv[n->in[k]] : UNBOUNDED;
}

/* HardSwish x min(max(x + 3, 0), 6) / 6 at a point (its limits at +-inf) */
static double hardswish_at(double x) {
  if (x <= -3) return 0;
  if (x >= 3) return x;
  return x * (x + 3) / 6;
}

static double softplus_at(double x) { return x > 30 ? x : log1p(exp(x)); }

/* Output-0 interval of node n from its inputs' intervals. */
static Iv node_interval(const Ctx *c, int id) {
  const ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  Iv a = in_iv(c, n, 0), b = in_iv(c, n, 1);
  switch (n->op) {
    case APX_OP_Relu: return iv_make(fmax(a.lo, 0), fmax(a.hi, 0));
    case APX_OP_LeakyRelu: {
      double al = APX_NODE_ATTRS(g, id, ApxAttrLeakyRelu)->alpha;
      if (al < 0) return UNBOUNDED;
      double lo = a.lo < 0 ? al * a.lo : a.lo, hi = a.hi < 0 ? al * a.hi : a.hi;
      return iv_make(lo, hi);
    }
    case APX_OP_Sigmoid:
    case APX_OP_Softmax:
    case APX_OP_FusedSoftmax: return iv_make(0, 1);
    case APX_OP_Tanh:
    case APX_OP_Erf: return iv_make(-1, 1);
    case APX_OP_LogSoftmax: return iv_make(-INFINITY, 0);
    case APX_OP_Gelu: return iv_make(a.lo >= 0 ? 0 : -0.17, fmax(a.hi, 0));
    case APX_OP_Neg: return iv_make(-a.hi, -a.lo);
    case APX_OP_Exp: return iv_make(exp(a.lo), exp(a.hi));
    case APX_OP_Log: return iv_make(a.lo > 0 ? log(a.lo) : -INFINITY, a.hi > 0 ? log(a.hi) : -INFINITY);
    case APX_OP_Sqrt: return iv_make(sqrt(fmax(a.lo, 0)), sqrt(fmax(a.hi, 0)));
    case APX_OP_Add: return iv_make(a.lo + b.lo, a.hi + b.hi);
    case APX_OP_Sub: return iv_make(a.lo - b.hi, a.hi - b.lo);
    case APX_OP_Mul:
      if (n->n_in >= 2 && n->in[0] == n->in[1]) return iv_square(a);
      return iv_mul(a, b);
    case APX_OP_Div:
      if (b.lo > 0 || b.hi < 0) return iv_mul(a, iv_make(fmin(1 / b.lo, 1 / b.hi), fmax(1 / b.lo, 1 / b.hi)));
      return UNBOUNDED;
    case APX_OP_Pow: {
      double e = const_scalar(g, n->n_in > 1 ? n->in[1] : -1);
      if (e == 2.0) return iv_square(a);
      if (e == 1.0) return a;
      if (e > 0 && a.lo >= 0 && a.hi <= 1) return iv_make(0, 1);
      return UNBOUNDED;
    }
    case APX_OP_Dropout: {
      double r = APX_NODE_ATTRS(g, id, ApxAttrDropout)->ratio;
      double s = r < 1 ? 1 / (1 - r) : INFINITY;
      return iv_make(fmin(a.lo * s, 0), fmax(a.hi * s, 0));
    }
    case APX_OP_Reshape: case APX_OP_Flatten: case APX_OP_Squeeze: case APX_OP_Unsqueeze:
    case APX_OP_Identity: case APX_OP_Transpose: case APX_OP_Expand: case APX_OP_Slice:
    case APX_OP_Split: case APX_OP_Gather: case APX_OP_MaxPool: case APX_OP_AveragePool:
    case APX_OP_GlobalAveragePool: case APX_OP_ReduceMean: case APX_OP_Cast:
      return a;
    case APX_OP_Concat: {
      Iv r = {INFINITY, -INFINITY};
      for (int k = 0; k < n->n_in; k++) {
        Iv x = in_iv(c, n, k);
        r.lo = fmin(r.lo, x.lo);
        r.hi = fmax(r.hi, x.hi);
      }
      return iv_make(r.lo, r.hi);
    }
    case APX_OP_Where: {
      Iv x = in_iv(c, n, 1), y = in_iv(c, n, 2);
      return iv_make(fmin(x.lo, y.lo), fmax(x.hi, y.hi));
    }
    /* v1.1 elementwise ops (attrs.def, after ApxAttrHardSigmoid) */
    case APX_OP_HardSigmoid: return iv_make(0, 1);
    case APX_OP_HardSwish: { /* decreasing on [-3, -1.5] (minimum -3/8), increasing after */
      double l = hardswish_at(a.lo), h = hardswish_at(a.hi);
      return iv_make(a.lo <= -1.5 && a.hi >= -1.5 ? -0.375 : fmin(l, h), fmax(l, h));
    }
    case APX_OP_Softplus: return iv_make(softplus_at(a.lo), softplus_at(a.hi));
    case APX_OP_Clip: { /* min(max(x, lo), hi); an absent bound does not bound */
      Iv l = n->n_in > 1 && n->in[1] >= 0 ? b : iv_make(-INFINITY, -INFINITY);
      Iv h = n->n_in > 2 && n->in[2] >= 0 ? in_iv(c, n, 2) : iv_make(INFINITY, INFINITY);
      return iv_make(fmin(fmax(a.lo, l.lo), h.lo), fmin(fmax(a.hi, l.hi), h.hi));
    }
    case APX_OP_Max: case APX_OP_Min: {
      Iv r = a;
      for (int k = 1; k < n->n_in; k++) {
        Iv x = in_iv(c, n, k);
        r = n->op == APX_OP_Max ? iv_make(fmax(r.lo, x.lo), fmax(r.hi, x.hi))
                                : iv_make(fmin(r.lo, x.lo), fmin(r.hi, x.hi));
      }
      return r;
    }
    case APX_OP_Mod: { /* |r| < |b|; fmod: |r| <= |a| with a's sign, else b's sign */
      int fm = APX_NODE_ATTRS(g, id, ApxAttrMod)->fmod;
      double m = fm ? fmin(iv_mag(a), iv_mag(b)) : iv_mag(b);
      Iv s = fm ? a : b;
      return iv_make(s.lo >= 0 ? 0 : -m, s.hi <= 0 ? 0 : m);
    }
    /* v1.1 data movement: the input's values, zeros (Trilu) or the pad value */
    case APX_OP_Tile: case APX_OP_GatherElements: case APX_OP_GatherND: case APX_OP_ReduceMax:
      return a;
    case APX_OP_Trilu: return iv_make(fmin(a.lo, 0), fmax(a.hi, 0));
    case APX_OP_Pad: {
      const ApxAttrPad *p = APX_NODE_ATTRS(g, id, ApxAttrPad);
      if (p->mode != APX_PAD_CONSTANT) return a;
      double v = pad_value(p, g->vals[n->out[0]].dtype);
      return iv_make(fmin(a.lo, v), fmax(a.hi, v));
    }
    case APX_OP_RandomUniformLike: {
      const ApxAttrRandomUniform *r = APX_NODE_ATTRS(g, id, ApxAttrRandomUniform);
      return iv_make(fmin(r->low, r->high), fmax(r->low, r->high));
    }
    default: return UNBOUNDED;
  }
}

/* Elements reduced into one output element by a ReduceSum/ReduceMean node; -1 unknown. */
static int64_t reduce_count(const ApxGraph *g, int id) {
  const ApxNode *n = &g->nodes[id];
  if (n->n_in < 1 || n->in[0] < 0) return -1;
  const ApxValue *x = &g->vals[n->in[0]];
  if (apx_value_numel(x) < 0) return -1;
  const ApxAttrReduce *r = APX_NODE_ATTRS(g, id, ApxAttrReduce);
  if (r->n_axes == 0) return r->noop_with_empty_axes ? 1 : apx_value_numel(x);
  int64_t cnt = 1;
  for (int i = 0; i < r->n_axes; i++) {
    int64_t ax = r->axes[i];
    if (ax < 0) ax += x->rank;
    if (ax < 0 || ax >= x->rank) return -1;
    cnt *= x->dims[ax];
  }
  return cnt;
}

/* Records a finding on node id (pattern findings override constant ones: not clampable). */
static void flag(ApxGraph *g, int id, int reason, const char *detail) {
  ApxNode *n = &g->nodes[id];
  if (n->reason == APX_REASON_OVERFLOW_PATTERN && reason == APX_REASON_OVERFLOW_CONST) return;
  if (n->reason == APX_REASON_OVERFLOW_CONST && reason == APX_REASON_OVERFLOW_CONST) return;
  n->compute = APX_DT_F32;
  n->reason = reason;
  n->reason_detail = detail;
}

static void add_note(ApxGraph *g, int id, const char *text) {
  ApxNode *n = &g->nodes[id];
  n->note = n->note ? apx_arena_printf(&g->arena, "%s; %s", n->note, text) : text;
}

/* Constant inputs outside the half range. */
static void check_constants(Ctx *c, int id, signed char *checked, ApxConstRange *ranges) {
  ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || apx_prec_input_role(g, id, k) != APX_IN_DATA) continue;
    const ApxValue *val = &g->vals[v];
    if (val->producer >= 0 || !val->data) continue;
    if (val->kind != APX_VAL_CONST && val->kind != APX_VAL_PARAM) continue;
    if (!checked[v]) {
      apx_const_range_check_memo(g, v, c->half, &ranges[v]);
      checked[v] = 1;
    }
    if (ranges[v].issue == APX_RANGE_OK) continue;
    const char *what = apx_const_range_text(&g->arena, &ranges[v], c->half);
    const char *detail = apx_arena_printf(&g->arena, "overflow: %s '%s' %s",
                                          val->kind == APX_VAL_PARAM ? "initializer" : "constant",
                                          val->name, what);
    flag(g, id, APX_REASON_OVERFLOW_CONST, detail);
    return;
  }
}

static void check_patterns(Ctx *c, int id) {
  ApxGraph *g = c->g;
  const ApxNode *n = &g->nodes[id];
  const double mx = apx_half_max(c->half);
  const char *hn = apx_dtype_short(c->half);
  if (n->op == APX_OP_Exp) {
    Iv a = in_iv(c, n, 0);
    if (a.hi > log(mx))
      flag(g, id, APX_REASON_OVERFLOW_PATTERN,
           isfinite(a.hi)
               ? apx_arena_printf(&g->arena, "overflow: Exp of values up to %g overflows %s above %.4g "
                                  "(subtract the max first)", a.hi, hn, log(mx))
               : apx_arena_printf(&g->arena, "overflow: Exp without max subtraction: input "
                                  "unbounded, %s overflows above %.4g", hn, log(mx)));
    return;
  }
  if (n->op != APX_OP_ReduceMean && n->op != APX_OP_ReduceSum) return;
  Iv a = in_iv(c, n, 0);
  int x = n->n_in > 0 ? n->in[0] : -1;
  int p = x >= 0 ? g->vals[x].producer : -1;
  if (p >= 0 && !(g->nodes[p].flags & APX_NODEF_DEAD)) {
    const ApxNode *pn = &g->nodes[p];
    int square = (pn->op == APX_OP_Pow && pn->n_in > 1 && const_scalar(g, pn->in[1]) == 2.0) ||
                 (pn->op == APX_OP_Mul && pn->n_in > 1 && pn->in[0] == pn->in[1]);
    if (square && pn->in[0] >= 0) {
      Iv base = c->iv[pn->in[0]];
      double sq = iv_mag(base) * iv_mag(base);
      if (!(sq <= mx)) {
        const char *pat = apx_arena_printf(
            &g->arena, "overflow: %s of squares (hand-written LayerNorm variance): squares "
            "overflow %s above |x| = %.4g", apx_op_name(n->op), hn, sqrt(mx));
        flag(g, id, APX_REASON_OVERFLOW_PATTERN, pat);
        flag(g, p, APX_REASON_OVERFLOW_PATTERN,
             apx_arena_printf(&g->arena, "overflow: %s feeds %s '%s' (hand-written LayerNorm "
                              "variance): squares overflow %s above |x| = %.4g",
                              apx_op_name(pn->op), apx_op_name(n->op), n->name, hn, sqrt(mx)));
        return;
      }
    }
  }
  /* A mean is bounded by its input's magnitude: the kernels accumulate in double (CPU,
   * kernels/cpu/reduce.c) or fp32 (CUDA, kernels/cuda/reduce.cu) and only the mean is stored
   * in half, so the count-based sum rule below is ReduceSum's alone. */
  if (n->op == APX_OP_ReduceMean) return;
  int64_t cnt = reduce_count(g, id);
  if (cnt <= 1) return;
  double m = iv_bounded(a) ? iv_mag(a) : 1.0;
  if ((double)cnt * m > mx)
    flag(g, id, APX_REASON_OVERFLOW_PATTERN,
         apx_arena_printf(&g->arena, "overflow: %s over %lld elements of magnitude up to %g%s "
                          "can exceed %s max %g", apx_op_name(n->op), (long long)cnt, m,
                          iv_bounded(a) ? "" : " (unknown range, taken as unit scale)", hn, mx));
}

static void note_alignment(ApxGraph *g, int id) {
  const ApxNode *n = &g->nodes[id];
  int64_t m = -1, nn = -1, k = -1;
  const char *kn = "K", *nnm = "N";
  if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0) return;
  const ApxValue *A = &g->vals[n->in[0]], *B = &g->vals[n->in[1]];
  if (n->op == APX_OP_MatMul) {
    if (A->rank < 1 || B->rank < 1) return;
    k = A->dims[A->rank - 1];
    m = A->rank >= 2 ? A->dims[A->rank - 2] : 1;
    nn = B->rank >= 2 ? B->dims[B->rank - 1] : 1;
  } else if (n->op == APX_OP_Gemm) {
    if (A->rank != 2 || B->rank != 2) return;
    const ApxAttrGemm *at = APX_NODE_ATTRS(g, id, ApxAttrGemm);
    m = at->trans_a ? A->dims[1] : A->dims[0];
    k = at->trans_a ? A->dims[0] : A->dims[1];
    nn = at->trans_b ? B->dims[0] : B->dims[1];
  } else if (n->op == APX_OP_Conv) {
    if (A->rank < 2 || B->rank < 2) return;
    int64_t grp = APX_NODE_ATTRS(g, id, ApxAttrConv)->group;
    if (grp < 1) grp = 1;
    k = A->dims[1] >= 0 ? A->dims[1] / grp : -1;
    nn = B->dims[0];
    kn = "C_in/group";
    nnm = "C_out";
  } else {
    return;
  }
  char buf[160];
  size_t len = 0;
  int64_t vals[3] = {m, nn, k};
  const char *names[3] = {"M", nnm, kn};
  for (int i = 0; i < 3; i++)
    if (vals[i] > 1 && vals[i] % 8 != 0 && len < sizeof buf)
      len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s=%lld", len ? ", " : "", names[i],
                              (long long)vals[i]);
  if (!len) return;
  add_note(g, id, apx_arena_printf(&g->arena, "tensor cores: %s not a multiple of 8 (pad for full "
                                   "half-precision speed)", buf));
}

int pass_overflow_check(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  ApxPrecSettings s = apx_prec_settings(o);
  Ctx c = {g, s.half, s.half == APX_DT_F16, NULL};
  int notes = s.level != APX_O0 || o->half_ops.n > 0 || o->policy_path;
  c.iv = malloc(((size_t)g->n_vals + 1) * sizeof *c.iv);
  signed char *checked = calloc((size_t)g->n_vals + 1, 1);
  ApxConstRange *ranges = malloc(((size_t)g->n_vals + 1) * sizeof *ranges);
  if (!c.iv || !checked || !ranges) {
    free(c.iv);
    free(checked);
    free(ranges);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory in overflow_check", g->file);
  }
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *val = &g->vals[v];
    c.iv[v] = (val->kind == APX_VAL_CONST && val->producer < 0) ? const_interval(val) : UNBOUNDED;
  }
  /* Findings are recomputed from scratch: clear earlier ones and the notes (but those of
   * earlier passes: APX_NODEF_NOTE_KEPT). */
  for (int k = 0; k < g->n_order; k++) {
    ApxNode *n = &g->nodes[g->order[k]];
    if (n->section != APX_SEC_FORWARD) continue;
    if (n->reason == APX_REASON_OVERFLOW_CONST || n->reason == APX_REASON_OVERFLOW_PATTERN) {
      n->reason = APX_REASON_UNDECIDED;
      n->reason_detail = NULL;
      n->compute = APX_DT_UNDEFINED;
    }
    if (!(n->flags & APX_NODEF_NOTE_KEPT)) n->note = NULL;
  }
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    ApxNode *n = &g->nodes[id];
    if (n->section != APX_SEC_FORWARD) continue;
    if (n->n_out > 0 && n->out[0] >= 0 && n->op != APX_OP_Cast) {
      Iv r = node_interval(&c, id);
      c.iv[n->out[0]] = r;
      if (n->op == APX_OP_Split)
        for (int o2 = 1; o2 < n->n_out; o2++)
          if (n->out[o2] >= 0) c.iv[n->out[o2]] = r;
    } else if (n->op == APX_OP_Cast && n->n_out > 0 && n->out[0] >= 0) {
      c.iv[n->out[0]] = in_iv(&c, n, 0);
    }
    if (!apx_prec_is_float_node(g, id) || apx_prec_is_fixed_node(g, id) || n->op == APX_OP_Cast)
      continue;
    check_constants(&c, id, checked, ranges);
    if (c.patterns) check_patterns(&c, id);
    if (notes) note_alignment(g, id);
  }
  free(c.iv);
  free(checked);
  free(ranges);
  return APX_PASS_UNCHANGED;
}
