/* infer_elementwise.c - elementwise ops and their gradients: numpy broadcasting, dtype
 * rules (Equal and the v1.1 comparisons / logic ops / IsNaN / IsInf -> bool, Cast -> to,
 * Pow keeps the base's type), Cast attributes, CastLike rewritten into a Cast, Clip's
 * scalar bounds, Mod's fmod rule; the inference of the generated kinds EW_UNARY and
 * EW_UNARY_GRAD (ops.def). */
#include <math.h>
#include <string.h>

#include "ir/infer_util.h"

/* ---- canonicalization --------------------------------------------------------------- */

static int canon_cast(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrCast *a = APX_NODE_ATTRS(g, node, ApxAttrCast);
  int64_t to, sat;
  const char *ot = g->nodes[node].op_type;
  if (ot && strcmp(ot, "CastLike") == 0) return 0; /* canon_castlike filled it */
  if (!apx_node_attr(g, node, "to")) return apx_node_error(d, g, node, "attribute 'to' is required");
  if (infer_attr_int(g, node, "to", 0, &to, d)) return -1;
  if (infer_attr_int(g, node, "saturate", 1, &sat, d)) return -1;
  if (to == APX_DT_STRING)
    return apx_node_error(d, g, node, "not supported yet: string tensors (attribute 'to' = %lld)",
                          (long long)to);
  if (to < 0 || to > 64 || !apx_dtype_is_supported((int32_t)to))
    return apx_node_error(d, g, node, "not supported yet: attribute 'to' = %lld (dtype %s)",
                          (long long)to, apx_dtype_name((ApxDType)to));
  a->to = (int32_t)to;
  a->saturate = sat != 0;
  return 0;
}

/* CastLike(X, Like) becomes Cast(X) to Like's dtype: the typed struct is Cast's, input 1 is
 * dropped (its data is never needed) and op_type stays "CastLike" for messages (canon_cast
 * leaves such a node as it is, so canonicalizing again changes nothing). */
static int canon_castlike(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrCast *a = APX_NODE_ATTRS(g, node, ApxAttrCast);
  const ApxValue *like = infer_in(g, node, 1);
  int64_t sat;
  if (infer_attr_int(g, node, "saturate", 1, &sat, d)) return -1;
  if (!apx_dtype_is_supported(like->dtype))
    return infer_in_error(d, g, node, "input 1 '%s': not supported yet: CastLike to %s",
                          like->name, apx_dtype_name(like->dtype));
  a->to = (int32_t)like->dtype;
  a->saturate = sat != 0;
  ApxNode *n = infer_node(g, node);
  if (!n->op_type) n->op_type = "CastLike";
  n->op = APX_OP_Cast;
  n->n_in = 1;
  return 0;
}

/* Clip reads its bounds from inputs (opset 11+); the older attribute form is refused. */
static int canon_clip(ApxGraph *g, int node, ApxDiag *d) {
  if ((g->opset > 0 && g->opset < 11) || apx_node_attr(g, node, "min") ||
      apx_node_attr(g, node, "max"))
    return apx_node_error(d, g, node, "not supported yet: Clip with 'min'/'max' attributes "
                          "(opset %lld; apexc reads the opset 11+ form, bounds as inputs): "
                          "re-export with opset 11 or newer", (long long)g->opset);
  return 0;
}

/* ---- inference ---------------------------------------------------------------------- */

/* Same dtype (in mask) on every present input, output 0 = broadcast shape. */
static int infer_broadcast_same(ApxGraph *g, int node, unsigned mask, ApxDType out_dt,
                                ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  int first = -1;
  IShape s;
  memset(&s, 0, sizeof s);
  for (int k = 0; k < n->n_in; k++) {
    const ApxValue *v = infer_in(g, node, k);
    if (!v) continue;
    if (infer_check_dtype(g, node, k, mask, d)) return -1;
    if (first < 0) {
      first = k;
      s = infer_shape_of(v);
      continue;
    }
    if (infer_same_dtype(g, node, first, k, d)) return -1;
    int slots[2] = {first, k};
    IShape t;
    if (n->n_in == 2) {
      if (infer_broadcast_inputs(g, node, slots, 2, &t, d)) return -1;
      s = t;
    } else if (apx_broadcast_shape(s.rank, s.dims, v->rank, v->dims, &s.rank, s.dims)) {
      char a[256], b[256];
      apx_value_shape_str(v, b, sizeof b);
      infer_dims_str(s.rank, s.dims, a, sizeof a);
      return infer_in_error(d, g, node, "input %d: shape %s does not broadcast with %s "
                            "(inputs 0..%d)", k, b, a, k - 1);
    }
  }
  if (first < 0) return apx_node_error(d, g, node, "has no inputs");
  ApxDType dt = out_dt != APX_DT_UNDEFINED ? out_dt : infer_in(g, node, first)->dtype;
  return infer_set_out_shape(g, node, 0, dt, &s, d);
}

static int infer_arith(ApxGraph *g, int node, ApxDiag *d) {
  return infer_broadcast_same(g, node, INFER_DT_NUMERIC, APX_DT_UNDEFINED, d);
}

static int infer_equal(ApxGraph *g, int node, ApxDiag *d) {
  return infer_broadcast_same(g, node, INFER_DT_ANY, APX_DT_BOOL, d);
}

static int infer_sum(ApxGraph *g, int node, ApxDiag *d) {
  return infer_broadcast_same(g, node, INFER_DT_NUMERIC, APX_DT_UNDEFINED, d);
}

static int unary(ApxGraph *g, int node, unsigned mask, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, mask, d)) return -1;
  return infer_set_out_like(g, node, 0, 0, d);
}

int infer_ew_unary(ApxGraph *g, int node, ApxDiag *d) {
  return unary(g, node, INFER_DT_FLOAT, d);
}

static int infer_unary_signed(ApxGraph *g, int node, ApxDiag *d) {
  return unary(g, node, INFER_DT_FLOAT | INFER_DT_SINT, d);
}

static int infer_pow(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT | INFER_DT_INDEX, d)) return -1;
  if (infer_check_dtype(g, node, 1, INFER_DT_NUMERIC, d)) return -1;
  static const int slots[2] = {0, 1};
  IShape s;
  if (infer_broadcast_inputs(g, node, slots, 2, &s, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &s, d);
}

static int infer_where(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_BOOL, d)) return -1;
  if (infer_check_dtype(g, node, 1, INFER_DT_ANY, d)) return -1;
  if (infer_same_dtype(g, node, 1, 2, d)) return -1;
  static const int slots[3] = {0, 1, 2};
  IShape s;
  if (infer_broadcast_inputs(g, node, slots, 3, &s, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 1)->dtype, &s, d);
}

static int infer_cast(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrCast *a = APX_NODE_ATTRS(g, node, ApxAttrCast);
  if (!apx_dtype_is_supported(a->to))
    return apx_node_error(d, g, node, "typed attribute 'to' = %d is not a supported dtype", a->to);
  if (infer_check_dtype(g, node, 0, INFER_DT_ANY, d)) return -1;
  IShape s = infer_shape_of(infer_in(g, node, 0));
  return infer_set_out_shape(g, node, 0, (ApxDType)a->to, &s, d);
}

/* ---- v1.1: comparison, logic and selection ops (attrs.def, after ApxAttrHardSigmoid) -- */

static int infer_minmax(ApxGraph *g, int node, ApxDiag *d) {
  return infer_broadcast_same(g, node, INFER_DT_NUMERIC, APX_DT_UNDEFINED, d);
}

static int infer_compare(ApxGraph *g, int node, ApxDiag *d) {
  return infer_broadcast_same(g, node, INFER_DT_NUMERIC, APX_DT_BOOL, d);
}

static int infer_logic(ApxGraph *g, int node, ApxDiag *d) {
  return infer_broadcast_same(g, node, INFER_DT_BOOL, APX_DT_BOOL, d);
}

static int infer_not(ApxGraph *g, int node, ApxDiag *d) {
  return unary(g, node, INFER_DT_BOOL, d);
}

/* IsNaN, IsInf: float X -> bool of X's shape */
static int infer_isclass(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  IShape s = infer_shape_of(infer_in(g, node, 0));
  return infer_set_out_shape(g, node, 0, APX_DT_BOOL, &s, d);
}

static int infer_mod(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_broadcast_same(g, node, INFER_DT_NUMERIC, APX_DT_UNDEFINED, d)) return -1;
  const ApxValue *a = infer_in(g, node, 0);
  if (apx_dtype_is_float(a->dtype) && !APX_NODE_ATTRS(g, node, ApxAttrMod)->fmod)
    return apx_node_error(d, g, node, "attribute 'fmod' = 0 with %s inputs: ONNX Mod needs "
                          "fmod = 1 for floating-point types", apx_dtype_name(a->dtype));
  return 0;
}

/* Bounds at slots first .. first + 1 (absent allowed): one element of input 0's dtype. */
static int check_bounds(ApxGraph *g, int node, int first, ApxDiag *d) {
  for (int k = first; k < first + 2; k++) {
    const ApxValue *b = infer_in(g, node, k);
    if (!b) continue;
    if (infer_same_dtype(g, node, 0, k, d)) return -1;
    if (apx_value_numel(b) != 1) {
      char sh[128];
      return infer_in_error(d, g, node, "input %d '%s': a bound must be a scalar, got shape %s",
                            k, b->name, apx_value_shape_str(b, sh, sizeof sh));
    }
  }
  return 0;
}

/* Clip(X, min?, max?) -> Y like X */
static int infer_clip(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_NUMERIC, d)) return -1;
  if (check_bounds(g, node, 1, d)) return -1;
  return infer_set_out_like(g, node, 0, 0, d);
}

/* ClipGrad(dY, X, min?, max?) -> dX?, dMin?, dMax?: all three of dY's dtype and shape; dMin /
 * dMax need their bound. */
static int infer_clip_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *dy = infer_in(g, node, 0);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (infer_same_dtype(g, node, 0, 1, d)) return -1;
  if (infer_check_shape(g, node, 1, dy->rank, dy->dims, d)) return -1;
  if (check_bounds(g, node, 2, d)) return -1;
  for (int o = 0; o < g->nodes[node].n_out; o++) {
    if (o > 0 && infer_out(g, node, o) && !infer_in(g, node, o + 1))
      return apx_node_error(d, g, node, "output %d needs input %d (its bound)", o, o + 1);
    dy = infer_in(g, node, 0);
    if (infer_set_out(g, node, o, dy->dtype, dy->rank, dy->dims, d)) return -1;
  }
  return 0;
}

/* MinMaxGrad(dY, Y, X_0 .. X_{n-1}) -> dX_0? .. dX_{n-1}?: dY float, Y of dY's shape, each
 * X_k of dY's dtype broadcasting to dY's shape; outputs of dY's dtype and shape. */
static int infer_minmax_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  if (n->n_out != n->n_in - 2)
    return apx_node_error(d, g, node, "has %d inputs and %d outputs: expected n + 2 and n",
                          n->n_in, n->n_out);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  IShape s = infer_shape_of(infer_in(g, node, 0));
  if (infer_check_shape(g, node, 1, s.rank, s.dims, d)) return -1;
  for (int k = 1; k < n->n_in; k++) {
    if (!infer_in(g, node, k)) return infer_in_error(d, g, node, "input %d is required", k);
    if (infer_same_dtype(g, node, 0, k, d)) return -1;
    IShape x = infer_shape_of(infer_in(g, node, k));
    if (!infer_broadcasts_to(&x, &s)) return infer_err_expected(g, node, k, s.rank, s.dims, d);
  }
  for (int o = 0; o < n->n_out; o++)
    if (infer_set_out_shape(g, node, o, infer_in(g, node, 0)->dtype, &s, d)) return -1;
  return 0;
}

/* Elementwise gradient GradOp(dY, T) -> dX: T (X or Y of the forward) has dY's shape and
 * dtype (DropoutGrad: T is the bool mask); dX is shaped like dY. */
int infer_ew_unary_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *dy = infer_in(g, node, 0);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (g->nodes[node].op == APX_OP_DropoutGrad) {
    if (infer_in(g, node, 1) && infer_check_dtype(g, node, 1, INFER_DT_BOOL, d)) return -1;
  } else if (infer_same_dtype(g, node, 0, 1, d)) {
    return -1;
  }
  if (infer_in(g, node, 1) && infer_check_shape(g, node, 1, dy->rank, dy->dims, d)) return -1;
  return infer_set_out_like(g, node, 0, 0, d);
}

/* PowGrad(dY, A, B) -> dA?, dB?: both in dY's shape (the broadcast shape of A and B; the
 * autodiff pass reduces them with ReduceSumTo), dtypes of A and B. */
static int infer_pow_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *dy = infer_in(g, node, 0);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (infer_same_dtype(g, node, 0, 1, d)) return -1;
  if (infer_check_dtype(g, node, 2, INFER_DT_NUMERIC, d)) return -1;
  static const int slots[2] = {1, 2};
  IShape s;
  if (infer_broadcast_inputs(g, node, slots, 2, &s, d)) return -1;
  if (s.rank != dy->rank || memcmp(s.dims, dy->dims, sizeof(int64_t) * (size_t)s.rank) != 0)
    return infer_err_expected(g, node, 0, s.rank, s.dims, d);
  if (infer_set_out_shape(g, node, 0, infer_in(g, node, 1)->dtype, &s, d)) return -1;
  if (infer_out(g, node, 1) && !apx_dtype_is_float(infer_in(g, node, 2)->dtype))
    return apx_node_error(d, g, node, "output 1 (dB) needs a float exponent, got %s",
                          apx_dtype_name(infer_in(g, node, 2)->dtype));
  return infer_set_out_shape(g, node, 1, infer_in(g, node, 2)->dtype, &s, d);
}

#define R(OP, CANON, INFER) {APX_OP_##OP, CANON, INFER}

const InferRule apx_infer_rules_elementwise[] = {
    R(Add, NULL, infer_arith),
    R(Sub, NULL, infer_arith),
    R(Mul, NULL, infer_arith),
    R(Div, NULL, infer_arith),
    R(Neg, NULL, infer_unary_signed),
    R(Relu, NULL, infer_unary_signed),
    R(Pow, NULL, infer_pow),
    R(Where, NULL, infer_where),
    R(Cast, canon_cast, infer_cast),
    R(Equal, NULL, infer_equal),
    R(Sum, NULL, infer_sum),
    R(DropoutGrad, NULL, infer_ew_unary_grad),
    R(PowGrad, NULL, infer_pow_grad),
    /* v1.1 (HardSwish, Softplus and their gradients are of kind EW_UNARY / EW_UNARY_GRAD) */
    R(Clip, canon_clip, infer_clip),
    R(Min, NULL, infer_minmax),
    R(Max, NULL, infer_minmax),
    R(Mod, NULL, infer_mod),
    R(IsNaN, NULL, infer_isclass),
    R(IsInf, NULL, infer_isclass),
    R(Less, NULL, infer_compare),
    R(LessOrEqual, NULL, infer_compare),
    R(Greater, NULL, infer_compare),
    R(GreaterOrEqual, NULL, infer_compare),
    R(Not, NULL, infer_not),
    R(And, NULL, infer_logic),
    R(Or, NULL, infer_logic),
    R(CastLike, canon_castlike, infer_cast),
    R(ClipGrad, NULL, infer_clip_grad),
    R(MinMaxGrad, NULL, infer_minmax_grad),
    {APX_OP_INVALID, NULL, NULL},
};
