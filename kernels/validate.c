/* validate.c - a kernel's arguments against its op's contract (validate.h), one function per
 * op family in the order of attrs.h's contracts. The messages are the CPU reference's (the
 * tests and users know them); checks the kernels never made (a bool where a kernel reads
 * floats, scalars without an element) are what the plan fuzzer found missing. */
#include "kernels/validate.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/resample_plan.h"
#include "kernels/shape.h"

/* ---- messages ------------------------------------------------------------------------- */

typedef struct V {
  char *err;
  size_t cap;
} V;

static ApxStatus vfail(V *v, ApxStatus st, const char *fmt, va_list ap) {
  if (v->err && v->cap) vsnprintf(v->err, v->cap, fmt, ap);
  return st;
}

static ApxStatus bad(V *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ApxStatus bad(V *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ApxStatus st = vfail(v, APX_STATUS_BAD_INPUT, fmt, ap);
  va_end(ap);
  return st;
}

static ApxStatus unsup(V *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ApxStatus unsup(V *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ApxStatus st = vfail(v, APX_STATUS_UNSUPPORTED, fmt, ap);
  va_end(ap);
  return st;
}

/* The result of a kernels/shape.h planner, whose reason is already in v->err. */
static ApxStatus planned(int rc) { return apx_shape_status(rc); }

#define TRY(expr)                            \
  do {                                       \
    ApxStatus try_st_ = (expr);              \
    if (try_st_ != APX_STATUS_OK) return try_st_; \
  } while (0)

/* ---- tensors -------------------------------------------------------------------------- */

/* dtype kinds: math kernels see every float tensor in one float type and every integer in
 * int64 (kernels/cpu/dispatch.c), so tensors of one kind agree. */
typedef enum Kind { KIND_NONE = 0, KIND_FLOAT, KIND_INT, KIND_BOOL } Kind;

static Kind kind_of(ApxDType dt) {
  if (apx_dtype_is_float(dt)) return KIND_FLOAT;
  if (dt == APX_DT_BOOL) return KIND_BOOL;
  if (apx_dtype_is_int(dt)) return KIND_INT;
  return KIND_NONE;
}

static const char *kind_name(Kind k) {
  switch (k) {
    case KIND_FLOAT: return "a float type";
    case KIND_INT: return "an integer type";
    case KIND_BOOL: return "bool";
    case KIND_NONE: break;
  }
  return "?";
}

static int same_kind(const ApxTensor *a, const ApxTensor *b) {
  return kind_of(a->dtype) == kind_of(b->dtype);
}
static int is_float(const ApxTensor *t) { return kind_of(t->dtype) == KIND_FLOAT; }
static int is_int(const ApxTensor *t) { return kind_of(t->dtype) == KIND_INT; }

static int has(const ApxTensor *t, int n, int i) { return i >= 0 && i < n && t[i].data != NULL; }
static const ApxTensor *opt(const ApxTensor *t, int n, int i) { return has(t, n, i) ? &t[i] : NULL; }
static int64_t numel(const ApxTensor *t) { return apx_tensor_numel(t); }
static const char *dt_name(const ApxTensor *t) { return apx_dtype_name(t->dtype); }

static ApxStatus need_in(V *v, const ApxTensor *ins, int n_in, int i) {
  return has(ins, n_in, i) ? APX_STATUS_OK : bad(v, "input %d missing", i);
}
static ApxStatus need_out(V *v, const ApxTensor *outs, int n_out, int i) {
  return has(outs, n_out, i) ? APX_STATUS_OK : bad(v, "output %d missing", i);
}

/* Every present tensor a math kernel reads or writes as real numbers is of a float type
 * (a bool read as floats would be read past its end); skip_* mark the slots that are not
 * (labels, indices, masks, tensors whose data is never read). */
static ApxStatus all_float(V *v, const ApxTensor *ins, int n_in, const ApxTensor *outs, int n_out,
                           uint32_t skip_in, uint32_t skip_out) {
  for (int i = 0; i < n_in; i++)
    if (has(ins, n_in, i) && !(i < 32 && (skip_in >> i & 1u)) && !is_float(&ins[i]))
      return bad(v, "input %d has type %s, expected a float type", i, dt_name(&ins[i]));
  for (int i = 0; i < n_out; i++)
    if (has(outs, n_out, i) && !(i < 32 && (skip_out >> i & 1u)) && !is_float(&outs[i]))
      return bad(v, "output %d has type %s, expected a float type", i, dt_name(&outs[i]));
  return APX_STATUS_OK;
}

/* t (when present) has n elements and ref's kind. */
static ApxStatus need_numel(V *v, const ApxTensor *t, int64_t n, const char *what,
                            const ApxTensor *ref) {
  if (!t || !t->data) return APX_STATUS_OK;
  if (numel(t) != n)
    return bad(v, "%s has %lld elements, expected %lld", what, (long long)numel(t), (long long)n);
  if (!same_kind(t, ref))
    return bad(v, "%s has type %s, expected %s", what, dt_name(t), kind_name(kind_of(ref->dtype)));
  return APX_STATUS_OK;
}

/* t has ref's kind (math ops). */
static ApxStatus need_kind(V *v, const ApxTensor *t, const ApxTensor *ref, const char *what) {
  if (!t || !t->data || same_kind(t, ref)) return APX_STATUS_OK;
  return bad(v, "%s has type %s, expected %s", what, dt_name(t), kind_name(kind_of(ref->dtype)));
}

/* a and b have one dtype (data movement: the bytes are copied). */
static ApxStatus same_dtype(V *v, const ApxTensor *a, const ApxTensor *b, const char *what) {
  if (a->dtype == b->dtype) return APX_STATUS_OK;
  return bad(v, "%s: types differ (%s, %s)", what, dt_name(a), dt_name(b));
}

/* x broadcasts to y (numpy, right-aligned). */
static int broadcasts(const ApxTensor *x, const ApxTensor *y) {
  return apx_broadcasts_to(x->rank, x->dims, y->rank, y->dims);
}

/* ---- arity ---------------------------------------------------------------------------- */

/* Arity: the op table's (ops.def IO: at most max_in inputs and max_out outputs, the first
 * min_in inputs and min_out outputs present; static shape operands count and are passed
 * absent). The exceptions below say where a kernel call differs from the ONNX node: gradient
 * ops whose outputs are each present only when needed, variadic multi-tensor ops whose
 * contracts count their arguments, LossScaleSeed (its loss input only orders it), and
 * ConstantOfShape (the folder passes its value as input 1). */
typedef struct Arity {
  uint8_t set;
  int8_t max_in, max_out; /* -1: any number */
  uint8_t req_in, req_out;
} Arity;

#define AR(mi, mo, ri, ro) {1, mi, mo, ri, ro}
static const Arity k_arity_exceptions[APX_OP_COUNT] = {
    [APX_OP_Concat] = AR(-1, 1, 0x0, 0x1),
    [APX_OP_Split] = AR(2, -1, 0x1, 0x0),
    [APX_OP_ConstantOfShape] = AR(2, 1, 0x0, 0x1),
    [APX_OP_Sum] = AR(-1, 1, 0x0, 0x1),
    [APX_OP_PowGrad] = AR(3, 2, 0x7, 0x0),
    [APX_OP_LayerNormGrad] = AR(5, 3, 0x1f, 0x0),
    [APX_OP_BatchNormGrad] = AR(5, 3, 0x1f, 0x0),
    [APX_OP_ConvGrad] = AR(3, 3, 0x7, 0x0),
    [APX_OP_ConvTransposeGrad] = AR(3, 3, 0x7, 0x0),
    [APX_OP_LossScaleSeed] = AR(2, 1, 0x2, 0x1),
    [APX_OP_UnscaleCheck] = AR(-1, -1, 0x1, 0x0),
    [APX_OP_OptimizerStep] = AR(-1, 0, 0x0, 0x0),
    [APX_OP_Allreduce] = AR(-1, -1, 0x0, 0x0),
    [APX_OP_FusedDenseGrad] = AR(4, 3, 0x7, 0x0),
    [APX_OP_BatchNormReluGrad] = AR(6, 3, 0x3f, 0x0),
    [APX_OP_ConvBiasReluGrad] = AR(4, 3, 0xf, 0x0),
    [APX_OP_ClipGrad] = AR(4, 3, 0x3, 0x0),
    [APX_OP_MinMaxGrad] = AR(-1, -1, 0x7, 0x0),
};
#undef AR

static unsigned prefix_mask(int n) { return n <= 0 ? 0u : n >= 8 ? 0xffu : (1u << n) - 1u; }

static ApxStatus check_arity(V *v, ApxOp op, const ApxTensor *ins, int n_in,
                             const ApxTensor *outs, int n_out) {
  const ApxOpInfo *info = apx_op_info(op);
  /* static operands (ops.def STATIC_INPUTS) are read into the attributes: passed absent */
  Arity table = {1, info->max_in, info->max_out,
                 (uint8_t)(prefix_mask(info->min_in) & ~info->static_inputs),
                 (uint8_t)prefix_mask(info->min_out)};
  const Arity *a = k_arity_exceptions[op].set ? &k_arity_exceptions[op] : &table;
  if (a->max_in >= 0 && n_in > a->max_in)
    return bad(v, "%d inputs, the op takes at most %d", n_in, a->max_in);
  if (a->max_out >= 0 && n_out > a->max_out)
    return bad(v, "%d outputs, the op takes at most %d", n_out, a->max_out);
  for (int i = 0; i < 8; i++)
    if (a->req_in >> i & 1u) TRY(need_in(v, ins, n_in, i));
  for (int i = 0; i < 8; i++)
    if (a->req_out >> i & 1u) TRY(need_out(v, outs, n_out, i));
  return APX_STATUS_OK;
}

/* ---- contracts ------------------------------------------------------------------------ */

#define CONTRACT(name)                                                                  \
  static ApxStatus name(V *v, ApxOp op, const void *attrs, const ApxTensor *ins, int n_in, \
                        const ApxTensor *outs, int n_out)
typedef ApxStatus (*Contract)(V *v, ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                              const ApxTensor *outs, int n_out);

/* -- elementwise -- */

/* Neg ... Log: output 0 has input 0's element count and kind (may alias it). */
CONTRACT(c_unary) {
  if (numel(&outs[0]) != numel(&ins[0]) || !same_kind(&ins[0], &outs[0]))
    return bad(v, "output shape/dtype differs from input");
  return APX_STATUS_OK;
}

/* XGrad(dY, T) -> dX, one element count. */
CONTRACT(c_unary_grad) {
  int64_t n = numel(&outs[0]);
  if (numel(&ins[0]) != n || numel(&ins[1]) != n)
    return bad(v, "dY, input 1 and dX must have one shape");
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* Add, Sub, Mul, Div, Pow, Equal (A, B) -> C, broadcast. */
CONTRACT(c_binary) {
  const ApxTensor *a = &ins[0], *b = &ins[1], *o = &outs[0];
  const ApxTensor *pair[2] = {a, b};
  ApxBcast bc;
  TRY(planned(apx_bcast_plan(&bc, o, pair, 2, v->err, v->cap)));
  if (op == APX_OP_Equal) {
    if (!same_kind(a, b))
      return bad(v, "inputs have different types %s and %s", dt_name(a), dt_name(b));
    if (o->dtype != APX_DT_BOOL) return unsup(v, "not supported yet: output of type %s", dt_name(o));
    return APX_STATUS_OK;
  }
  if (op == APX_OP_Pow && !same_kind(a, b)) { /* a float base with an integer exponent, or back */
    if (!same_kind(o, a)) return unsup(v, "not supported yet: output of type %s", dt_name(o));
    if (!(is_float(a) && is_int(b)) && !(is_int(a) && is_float(b)))
      return unsup(v, "not supported yet: Pow of %s by %s", dt_name(a), dt_name(b));
    return APX_STATUS_OK;
  }
  if (!same_kind(a, b) || !same_kind(o, a))
    return bad(v, "types differ: %s, %s -> %s", dt_name(a), dt_name(b), dt_name(o));
  return APX_STATUS_OK;
}

/* Sum(X1, ..., Xn) -> ((X1 + X2) + X3) + ..., each broadcast to the output. */
CONTRACT(c_sum) {
  const ApxTensor *o = &outs[0];
  char a[96], b[96];
  if (n_in < 1) return bad(v, "no inputs");
  for (int k = 0; k < n_in; k++) {
    TRY(need_in(v, ins, n_in, k));
    if (!same_kind(&ins[k], o))
      return bad(v, "input %d type %s, output %s", k, dt_name(&ins[k]), dt_name(o));
  }
  for (int k = 0; k < n_in; k++)
    if (!broadcasts(&ins[k], o))
      return n_in == 1 ? bad(v, "input 0 does not broadcast to the output")
                       : bad(v, "input %d shape %s does not broadcast to %s", k,
                             apx_dims_str(&ins[k], a, sizeof a), apx_dims_str(o, b, sizeof b));
  /* o = in[0] + in[1], then o += in[k]: an input over the output is only safe as in[0] */
  for (int k = 1; k < n_in; k++)
    if (ins[k].data == o->data) return bad(v, "input %d aliases the output", k);
  return APX_STATUS_OK;
}

/* PowGrad(dY, A, B) -> dA?, dB?, A and B broadcast to dY, each output summed to its shape. */
CONTRACT(c_pow_grad) {
  const ApxTensor *dy = &ins[0];
  if (!is_float(dy) || !same_kind(&ins[1], dy) || !same_kind(&ins[2], dy))
    return unsup(v, "not supported yet: PowGrad with %s exponent", dt_name(&ins[2]));
  const ApxTensor *tri[3] = {dy, &ins[1], &ins[2]};
  ApxBcast bc;
  TRY(planned(apx_bcast_plan(&bc, dy, tri, 3, v->err, v->cap)));
  for (int k = 0; k < 2; k++) {
    if (!has(outs, n_out, k)) continue;
    if (!same_kind(&outs[k], dy))
      return unsup(v, "not supported yet: output of type %s", dt_name(&outs[k]));
    if (apx_sum_to_mask(dy, &outs[k]) < 0)
      return bad(v, "output %d shape does not broadcast to dY", k);
  }
  return APX_STATUS_OK;
}

/* -- comparisons, logic, Min/Max, Clip, Mod (v1.1; kernels/cpu/compare.c, cuda/compare.cu) -- */

/* Every present input of input 0's type. */
static ApxStatus same_input_types(V *v, const ApxTensor *ins, int n_in) {
  for (int k = 1; k < n_in; k++)
    if (has(ins, n_in, k) && ins[k].dtype != ins[0].dtype)
      return bad(v, "input %d has type %s, input 0 %s", k, dt_name(&ins[k]), dt_name(&ins[0]));
  return APX_STATUS_OK;
}

static ApxStatus out_type(V *v, const ApxTensor *o, ApxDType want) {
  if (o->dtype == want) return APX_STATUS_OK;
  return bad(v, "output has type %s, expected %s", dt_name(o), apx_dtype_name(want));
}

static ApxStatus bcast_pair(V *v, const ApxTensor *o, const ApxTensor *a, const ApxTensor *b) {
  const ApxTensor *pair[2] = {a, b};
  ApxBcast bc;
  return planned(apx_bcast_plan(&bc, o, pair, 2, v->err, v->cap));
}

/* Less, LessOrEqual, Greater, GreaterOrEqual, And, Or (A, B) -> bool, broadcast; And/Or of
 * bool inputs. */
CONTRACT(c_compare) {
  TRY(same_input_types(v, ins, n_in));
  TRY(out_type(v, &outs[0], APX_DT_BOOL));
  if ((op == APX_OP_And || op == APX_OP_Or) && ins[0].dtype != APX_DT_BOOL)
    return unsup(v, "not supported yet: input of type %s", dt_name(&ins[0]));
  return bcast_pair(v, &outs[0], &ins[0], &ins[1]);
}

/* Not(X) (bool X), IsNaN(X), IsInf(X) -> bool of X's shape. */
CONTRACT(c_bool_unary) {
  TRY(out_type(v, &outs[0], APX_DT_BOOL));
  if (numel(&outs[0]) != numel(&ins[0])) return bad(v, "output shape differs from the input's");
  if (op == APX_OP_Not && ins[0].dtype != APX_DT_BOOL)
    return unsup(v, "not supported yet: input of type %s", dt_name(&ins[0]));
  return APX_STATUS_OK;
}

/* Min / Max (X_0, ..., X_{n-1}) -> Y of their type, each input broadcast to Y; Y is written
 * from the first pair on, so only input 0 may share its bytes. */
CONTRACT(c_minmax) {
  (void)op, (void)attrs;
  if (n_in < 1) return bad(v, "no inputs");
  for (int k = 0; k < n_in; k++) TRY(need_in(v, ins, n_in, k));
  TRY(same_input_types(v, ins, n_in));
  TRY(out_type(v, &outs[0], ins[0].dtype));
  for (int k = 0; k < n_in; k++)
    if (!broadcasts(&ins[k], &outs[0])) return bad(v, "input %d does not broadcast to the output", k);
  for (int k = 1; k < n_in; k++)
    if (ins[k].data == outs[0].data) return bad(v, "input %d aliases the output", k);
  return APX_STATUS_OK;
}

/* The optional bounds ins[first], ins[first + 1] of Clip / ClipGrad: one element of type dt. */
static ApxStatus clip_bounds(V *v, const ApxTensor *ins, int n_in, int first, ApxDType dt) {
  for (int k = first; k < first + 2; k++)
    if (has(ins, n_in, k) && (ins[k].dtype != dt || numel(&ins[k]) != 1))
      return bad(v, "input %d must be one %s element", k, apx_dtype_name(dt));
  return APX_STATUS_OK;
}

/* Clip(X, min?, max?) -> Y of X's shape and type. */
CONTRACT(c_clip) {
  (void)op, (void)attrs;
  TRY(out_type(v, &outs[0], ins[0].dtype));
  if (numel(&outs[0]) != numel(&ins[0])) return bad(v, "output shape differs from the input's");
  return clip_bounds(v, ins, n_in, 1, ins[0].dtype);
}

/* Mod(A, B) -> C, broadcast, one type; fmod = 0 (Python's sign rule) is integer only. */
CONTRACT(c_mod) {
  (void)op;
  TRY(same_input_types(v, ins, n_in));
  TRY(out_type(v, &outs[0], ins[0].dtype));
  if (is_float(&ins[0]) && !((const ApxAttrMod *)attrs)->fmod)
    return bad(v, "fmod = 0 needs integer inputs, got %s", dt_name(&ins[0]));
  return bcast_pair(v, &outs[0], &ins[0], &ins[1]);
}

/* ClipGrad(dY, X, min?, max?) -> dX?, dMin?, dMax?, each of dY's shape and type; dMin/dMax
 * need their bound. */
CONTRACT(c_clip_grad) {
  (void)op, (void)attrs;
  const ApxTensor *dy = &ins[0];
  int64_t n = numel(dy);
  if (numel(&ins[1]) != n || ins[1].dtype != dy->dtype)
    return bad(v, "dY and X must have one shape and type");
  TRY(clip_bounds(v, ins, n_in, 2, dy->dtype));
  for (int k = 0; k < 3; k++) {
    if (!has(outs, n_out, k)) continue;
    if (outs[k].dtype != dy->dtype || numel(&outs[k]) != n)
      return bad(v, "output %d must have dY's shape and type", k);
    if (k > 0 && !has(ins, n_in, k + 1)) return bad(v, "output %d needs input %d", k, k + 1);
  }
  return APX_STATUS_OK;
}

/* MinMaxGrad(dY, Y, X_0 .. X_{n-1}) -> dX_0? .. dX_{n-1}?, one float type, each of dY's
 * shape. */
CONTRACT(c_minmax_grad) {
  (void)op, (void)attrs;
  if (n_in < 3 || n_out != n_in - 2)
    return bad(v, "%d inputs and %d outputs (want n + 2 and n)", n_in, n_out);
  for (int k = 0; k < n_in; k++) TRY(need_in(v, ins, n_in, k));
  TRY(same_input_types(v, ins, n_in));
  const ApxTensor *dy = &ins[0];
  int64_t n = numel(dy);
  if (numel(&ins[1]) != n) return bad(v, "Y must have dY's shape");
  for (int k = 0; k < n_out; k++)
    if (has(outs, n_out, k) && (outs[k].dtype != dy->dtype || numel(&outs[k]) != n))
      return bad(v, "output %d must have dY's shape and type", k);
  return APX_STATUS_OK;
}

/* RandomUniformLike(input?) -> output: the input, when given, has the output's element count
 * (its values are never read). */
CONTRACT(c_random_uniform_like) {
  (void)op;
  const ApxAttrRandomUniform *a = attrs;
  if (a->has_seed && !(a->seed > -9.2e18f && a->seed < 9.2e18f))
    return bad(v, "seed %g is not an integer in int64's range", (double)a->seed);
  if (has(ins, n_in, 0) && numel(&ins[0]) != numel(&outs[0]))
    return bad(v, "output has %lld elements, input %lld", (long long)numel(&outs[0]),
               (long long)numel(&ins[0]));
  return APX_STATUS_OK;
}

/* -- matrix products -- */

static ApxStatus need_float(V *v, const ApxTensor *t, const char *what) {
  if (is_float(t)) return APX_STATUS_OK;
  return bad(v, "%s has type %s, expected %s", what, dt_name(t), kind_name(KIND_FLOAT));
}

/* Gemm(A, B, C?) -> Y = alpha op(A) op(B) + beta C, 2-D, C broadcast to (M, N). */
CONTRACT(c_gemm) {
  const ApxAttrGemm *g = attrs;
  const ApxTensor *A = &ins[0], *B = &ins[1], *Y = &outs[0];
  if (!is_float(Y)) return unsup(v, "not supported yet: type %s", dt_name(Y));
  TRY(need_float(v, A, "A"));
  TRY(need_float(v, B, "B"));
  if (A->rank != 2 || B->rank != 2 || Y->rank != 2)
    return bad(v, "A, B and Y must be 2-D (ranks %d, %d, %d)", A->rank, B->rank, Y->rank);
  int64_t M = g->trans_a ? A->dims[1] : A->dims[0], K = g->trans_a ? A->dims[0] : A->dims[1];
  int64_t Kb = g->trans_b ? B->dims[1] : B->dims[0], N = g->trans_b ? B->dims[0] : B->dims[1];
  if (K != Kb || Y->dims[0] != M || Y->dims[1] != N)
    return bad(v, "shapes do not match: op(A) (%lld, %lld), op(B) (%lld, %lld), Y (%lld, %lld)",
               (long long)M, (long long)K, (long long)Kb, (long long)N, (long long)Y->dims[0],
               (long long)Y->dims[1]);
  const ApxTensor *C = g->beta != 0 ? opt(ins, n_in, 2) : NULL;
  if (C) {
    TRY(need_float(v, C, "C"));
    if (!broadcasts(C, Y)) return bad(v, "C does not broadcast to (M, N)");
  }
  return APX_STATUS_OK;
}

/* MatMul(A, B) -> Y; FusedMatMul(A, B) -> alpha op(A) @ op(B) (numpy batching). */
CONTRACT(c_matmul) {
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  if (op == APX_OP_FusedMatMul) {
    const ApxAttrFusedMatMul *f = attrs;
    p.ta = f->trans_a;
    p.tb = f->trans_b;
  }
  if (!is_float(&outs[0])) return unsup(v, "not supported yet: type %s", dt_name(&outs[0]));
  TRY(need_float(v, &ins[0], "A"));
  TRY(need_float(v, &ins[1], "B"));
  return planned(apx_matmul_plan(&p, &ins[0], &ins[1], &outs[0], v->err, v->cap));
}

/* X (..., K), W (K, N) or (N, K), Y (..., N): rows M. */
static ApxStatus dense_shape(V *v, const ApxAttrFusedDense *a, const ApxTensor *x,
                             const ApxTensor *w, const ApxTensor *y, int64_t *M, int64_t *N,
                             int64_t *K) {
  char sx[96], sw[96], sy[96];
  int ok = x->rank >= 1 && w->rank == 2 && y->rank == x->rank;
  if (ok) {
    *K = x->dims[x->rank - 1];
    *N = a->trans_w ? w->dims[0] : w->dims[1];
    *M = numel(x) / (*K ? *K : 1);
    ok = (a->trans_w ? w->dims[1] : w->dims[0]) == *K && y->dims[y->rank - 1] == *N;
    for (int d = 0; ok && d + 1 < x->rank; d++) ok = x->dims[d] == y->dims[d];
  }
  if (!ok)
    return bad(v, "shapes do not match: X %s, W %s, Y %s", apx_dims_str(x, sx, sizeof sx),
               apx_dims_str(w, sw, sizeof sw), apx_dims_str(y, sy, sizeof sy));
  if (*M > 0x7fffffff || *N > 0x7fffffff || *K > 0x7fffffff)
    return unsup(v, "not supported yet: dims beyond 2^31");
  return APX_STATUS_OK;
}

static ApxStatus check_activation(V *v, int32_t act) {
  if (act < APX_ACT_NONE || act > APX_ACT_GELU_TANH) return bad(v, "unknown activation %d", act);
  return APX_STATUS_OK;
}

/* FusedDense(X, W, B?) -> Y, Aux? */
CONTRACT(c_fused_dense) {
  const ApxAttrFusedDense *a = attrs;
  int64_t M = 0, N = 0, K = 0;
  TRY(dense_shape(v, a, &ins[0], &ins[1], &outs[0], &M, &N, &K));
  TRY(check_activation(v, a->activation));
  const ApxTensor *b = opt(ins, n_in, 2), *aux = opt(outs, n_out, 1);
  if ((b && numel(b) != N) || (aux && numel(aux) != M * N))
    return bad(v, "B must be (N), Aux Y's shape");
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* FusedDenseGrad(dY, X, W, T?) -> dX?, dW?, dB?   (T required unless activation NONE) */
CONTRACT(c_fused_dense_grad) {
  const ApxAttrFusedDense *a = attrs;
  if (a->activation != APX_ACT_NONE) TRY(need_in(v, ins, n_in, 3));
  TRY(check_activation(v, a->activation));
  int64_t M = 0, N = 0, K = 0;
  TRY(dense_shape(v, a, &ins[1], &ins[2], &ins[0], &M, &N, &K));
  const ApxTensor *dx = opt(outs, n_out, 0), *dw = opt(outs, n_out, 1), *db = opt(outs, n_out, 2);
  if ((dx && numel(dx) != M * K) || (dw && numel(dw) != N * K) || (db && numel(db) != N) ||
      (a->activation != APX_ACT_NONE && numel(&ins[3]) != M * N))
    return bad(v, "dX / dW / dB / T do not match X / W / (N) / Y");
  return all_float(v, ins, n_in, outs, n_out, a->activation == APX_ACT_NONE ? 0x8u : 0u, 0);
}

/* -- softmax -- */

/* axis in [0, rank) (a scalar is one line of length 1). */
static ApxStatus check_axis(V *v, const ApxTensor *t, int64_t axis, int scalar_ok) {
  if (scalar_ok && t->rank == 0) return APX_STATUS_OK;
  if (axis < 0 || axis >= t->rank)
    return bad(v, "axis %lld out of range for rank %d", (long long)axis, t->rank);
  return APX_STATUS_OK;
}

CONTRACT(c_softmax) {
  if (!apx_same_dims(&ins[0], &outs[0]) || !same_kind(&ins[0], &outs[0]))
    return bad(v, "output shape/type differs from input");
  return check_axis(v, &ins[0], ((const ApxAttrAxis *)attrs)->axis, 1);
}

CONTRACT(c_softmax_grad) {
  if (!apx_same_dims(&ins[0], &ins[1]) || !apx_same_dims(&ins[0], &outs[0]))
    return bad(v, "dY, Y and dX must have one shape");
  TRY(check_axis(v, &ins[0], ((const ApxAttrAxis *)attrs)->axis, 1));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* FusedSoftmax(X, Mask?) -> softmax(X * scale + Mask) along the last axis */
CONTRACT(c_fused_softmax) {
  const ApxAttrFusedSoftmax *a = attrs;
  const ApxTensor *x = &ins[0], *mask = a->has_mask ? opt(ins, n_in, 1) : NULL;
  if (a->has_mask && !mask) return bad(v, "input 1 (Mask) missing");
  if (!apx_same_dims(x, &outs[0]) || x->rank < 1) return bad(v, "Y must have X's shape (rank >= 1)");
  if (mask && !broadcasts(mask, x)) return bad(v, "Mask does not broadcast to X");
  return all_float(v, ins, n_in, outs, n_out, mask ? 0u : 0x2u, 0);
}

CONTRACT(c_fused_softmax_grad) {
  if (!apx_same_dims(&ins[0], &ins[1]) || !apx_same_dims(&ins[0], &outs[0]) || ins[0].rank < 1)
    return bad(v, "dY, Y and dX must have one shape");
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* -- normalization -- */

/* x normalized over dims [axis, rank): rows x D. */
static ApxStatus ln_shape(V *v, const ApxTensor *x, int64_t axis, int64_t *rows, int64_t *D) {
  TRY(check_axis(v, x, axis, 0));
  *rows = apx_dims_prod(x->dims, 0, (int32_t)axis);
  *D = apx_dims_prod(x->dims, (int32_t)axis, x->rank);
  return APX_STATUS_OK;
}

/* LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev? */
CONTRACT(c_layer_norm) {
  const ApxTensor *x = &ins[0];
  int64_t rows = 0, D = 0;
  TRY(ln_shape(v, x, ((const ApxAttrLayerNorm *)attrs)->axis, &rows, &D));
  TRY(need_numel(v, &ins[1], D, "Scale", x));
  TRY(need_numel(v, opt(ins, n_in, 2), D, "B", x));
  TRY(need_numel(v, &outs[0], rows * D, "Y", x));
  TRY(need_numel(v, opt(outs, n_out, 1), rows, "Mean", x));
  TRY(need_numel(v, opt(outs, n_out, 2), rows, "InvStdDev", x));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> dX?, dScale?, dB? */
CONTRACT(c_layer_norm_grad) {
  const ApxTensor *x = &ins[1];
  int64_t rows = 0, D = 0;
  TRY(ln_shape(v, x, ((const ApxAttrLayerNorm *)attrs)->axis, &rows, &D));
  TRY(need_numel(v, &ins[0], rows * D, "dY", x));
  TRY(need_numel(v, &ins[2], D, "Scale", x));
  TRY(need_numel(v, &ins[3], rows, "Mean", x));
  TRY(need_numel(v, &ins[4], rows, "InvStdDev", x));
  TRY(need_numel(v, opt(outs, n_out, 0), rows * D, "dX", x));
  TRY(need_numel(v, opt(outs, n_out, 1), D, "dScale", x));
  TRY(need_numel(v, opt(outs, n_out, 2), D, "dB", x));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* X (N, C, spatial...): N, C and the spatial size. */
static ApxStatus bn_shape(V *v, const ApxTensor *x, int64_t *N, int64_t *C, int64_t *S) {
  if (x->rank < 2) return bad(v, "X must have rank >= 2, got %d", x->rank);
  *N = x->dims[0];
  *C = x->dims[1];
  *S = apx_dims_prod(x->dims, 2, x->rank);
  return APX_STATUS_OK;
}

/* BatchNormalization, BatchNormRelu (X, scale, B, mean, var) -> Y, running_mean?,
 * running_var?, saved_mean?, saved_inv_std? */
CONTRACT(c_batch_norm) {
  const ApxTensor *x = &ins[0];
  int64_t N = 0, C = 0, S = 0;
  TRY(bn_shape(v, x, &N, &C, &S));
  static const char *const names[4] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; i++) TRY(need_numel(v, &ins[i], C, names[i - 1], x));
  static const char *const onames[5] = {"Y", "running_mean", "running_var", "saved_mean",
                                        "saved_inv_std"};
  for (int i = 0; i < 5; i++)
    TRY(need_numel(v, opt(outs, n_out, i), i ? C : N * C * S, onames[i], x));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* BatchNormGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX?, dscale?, dB? */
static ApxStatus bn_grad(V *v, const ApxAttrBatchNorm *a, const ApxTensor *ins,
                         const ApxTensor *outs, int n_out) {
  const ApxTensor *x = &ins[1];
  int64_t N = 0, C = 0, S = 0;
  TRY(bn_shape(v, x, &N, &C, &S));
  TRY(need_numel(v, &ins[0], N * C * S, "dY", x));
  TRY(need_numel(v, &ins[2], C, "scale", x));
  TRY(need_numel(v, &ins[3], C, "mean", x));
  TRY(need_numel(v, &ins[4], C, a->training_mode ? "saved_inv_std" : "var", x));
  TRY(need_numel(v, opt(outs, n_out, 0), N * C * S, "dX", x));
  TRY(need_numel(v, opt(outs, n_out, 1), C, "dscale", x));
  TRY(need_numel(v, opt(outs, n_out, 2), C, "dB", x));
  return all_float(v, ins, 5, outs, n_out, 0, 0);
}

CONTRACT(c_batch_norm_grad) { return bn_grad(v, attrs, ins, outs, n_out); }

/* dY * (Y > 0) first (the Relu of the fused forward): dY and Y of one shape and kind. */
static ApxStatus relu_pair(V *v, const ApxTensor *dy, const ApxTensor *y) {
  if (!apx_same_dims(dy, y) || !same_kind(dy, y)) return bad(v, "dY and Y must have one shape and type");
  return APX_STATUS_OK;
}

/* BatchNormReluGrad(dY, Y, X, scale, saved_mean, saved_inv_std) -> dX?, dscale?, dB? */
CONTRACT(c_batch_norm_relu_grad) {
  TRY(relu_pair(v, &ins[0], &ins[1]));
  ApxTensor rest[5] = {ins[0], ins[2], ins[3], ins[4], ins[5]};
  TRY(bn_grad(v, attrs, rest, outs, n_out));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* Dropout(data, ratio?, training_mode?) -> output, mask? */
CONTRACT(c_dropout) {
  const ApxAttrDropout *a = attrs;
  int64_t n = numel(&ins[0]);
  if (numel(&outs[0]) != n || !same_kind(&outs[0], &ins[0]))
    return bad(v, "output shape/type differs from input");
  const ApxTensor *mask = opt(outs, n_out, 1);
  if (mask && (mask->dtype != APX_DT_BOOL || numel(mask) != n))
    return bad(v, "mask must be bool of the input's shape");
  if (!(a->ratio >= 0.0f && a->ratio <= 1.0f)) return bad(v, "ratio %g outside [0, 1]", (double)a->ratio);
  return all_float(v, ins, 1, outs, n_out, 0, 0x2u);
}

/* DropoutGrad(dY, mask) -> dX */
CONTRACT(c_dropout_grad) {
  int64_t n = numel(&ins[0]);
  if (numel(&outs[0]) != n || numel(&ins[1]) != n || ins[1].dtype != APX_DT_BOOL ||
      !same_kind(&outs[0], &ins[0]))
    return bad(v, "dY, bool mask and dX must have one shape");
  return all_float(v, ins, n_in, outs, n_out, 0x2u, 0);
}

/* -- convolution and pooling -- */

/* The geometry of a convolution-family op and its output channel count (ConvTranspose and
 * its gradient: the adjoint convolution's, whose input channels are the output's). */
static ApxStatus conv_family_geom(V *v, ApxOp op, const void *attrs, const ApxTensor *x,
                                  const ApxTensor *w, const ApxTensor *y, ApxConvGeom *g,
                                  int64_t *out_channels) {
  int transpose = op == APX_OP_ConvTranspose || op == APX_OP_ConvTransposeGrad;
  TRY(planned(transpose ? apx_conv_transpose_geom(attrs, x, w, y, g, v->err, v->cap)
                        : apx_conv_geom(attrs, x, w, y, g, v->err, v->cap)));
  *out_channels = transpose ? g->C : g->M;
  return APX_STATUS_OK;
}

/* Conv, ConvBiasRelu, ConvTranspose (X, W, B?) -> Y */
CONTRACT(c_conv) {
  ApxConvGeom g;
  int64_t m;
  const ApxTensor *y = &outs[0], *b = opt(ins, n_in, 2);
  TRY(conv_family_geom(v, op, attrs, &ins[0], &ins[1], y, &g, &m));
  TRY(need_kind(v, &ins[0], y, "X"));
  TRY(need_kind(v, &ins[1], y, "W"));
  TRY(need_kind(v, b, y, "B"));
  if (b && numel(b) != m) return bad(v, "B must have M = %lld elements", (long long)m);
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* ConvGrad, ConvTransposeGrad (dY, X, W) -> dX?, dW?, dB? */
static ApxStatus conv_grad(V *v, ApxOp op, const void *a, const ApxTensor *ins, const ApxTensor *outs,
                           int n_out) {
  ApxConvGeom g;
  int64_t m;
  const ApxTensor *dy = &ins[0];
  TRY(conv_family_geom(v, op, a, &ins[1], &ins[2], dy, &g, &m));
  TRY(need_kind(v, &ins[1], dy, "X"));
  TRY(need_kind(v, &ins[2], dy, "W"));
  const ApxTensor *dx = opt(outs, n_out, 0), *dw = opt(outs, n_out, 1), *db = opt(outs, n_out, 2);
  if ((dx && (!apx_same_dims(dx, &ins[1]) || !same_kind(dx, dy))) ||
      (dw && (!apx_same_dims(dw, &ins[2]) || !same_kind(dw, dy))) ||
      (db && (numel(db) != m || !same_kind(db, dy))))
    return bad(v, "dX / dW / dB must match X / W / (M)");
  return all_float(v, ins, 3, outs, n_out, 0, 0);
}

CONTRACT(c_conv_grad) { return conv_grad(v, op, attrs, ins, outs, n_out); }

/* ConvBiasReluGrad(dY, Y, X, W) -> dX?, dW?, dB? */
CONTRACT(c_conv_relu_grad) {
  TRY(relu_pair(v, &ins[0], &ins[1]));
  ApxTensor rest[3] = {ins[0], ins[2], ins[3]};
  TRY(conv_grad(v, APX_OP_ConvGrad, attrs, rest, outs, n_out));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

static ApxStatus same_kind_pair(V *v, const ApxTensor *a, const ApxTensor *b) {
  if (same_kind(a, b)) return APX_STATUS_OK;
  return bad(v, "types differ: %s and %s", dt_name(a), dt_name(b));
}

/* MaxPool(X) -> Y, Indices?; AveragePool(X) -> Y */
CONTRACT(c_pool) {
  ApxPoolGeom g;
  TRY(planned(apx_pool_geom(attrs, &ins[0], &outs[0], &g, v->err, v->cap)));
  TRY(same_kind_pair(v, &ins[0], &outs[0]));
  const ApxTensor *idx = op == APX_OP_MaxPool ? opt(outs, n_out, 1) : NULL;
  if (idx && (!is_int(idx) || !apx_same_dims(&outs[0], idx)))
    return bad(v, "Indices must be int64 of Y's shape");
  return APX_STATUS_OK;
}

/* MaxPoolGrad(dY, X) -> dX; AveragePoolGrad(dY) -> dX */
CONTRACT(c_pool_grad) {
  ApxPoolGeom g;
  TRY(planned(apx_pool_geom(attrs, &outs[0], &ins[0], &g, v->err, v->cap)));
  TRY(same_kind_pair(v, &ins[0], &outs[0]));
  if (op == APX_OP_MaxPoolGrad && (!apx_same_dims(&ins[1], &outs[0]) || !same_kind(&ins[1], &outs[0])))
    return bad(v, "X and dX must have one shape and type");
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* x (N, C, spatial...), y N * C elements. */
static ApxStatus gap_shape(V *v, const ApxTensor *x, const ApxTensor *y) {
  if (x->rank < 3 || !same_kind(x, y)) return bad(v, "X must be (N, C, spatial...) of Y's type");
  if (numel(y) != x->dims[0] * x->dims[1]) return bad(v, "Y must have N * C elements");
  return APX_STATUS_OK;
}

CONTRACT(c_gap) {
  TRY(gap_shape(v, &ins[0], &outs[0]));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

CONTRACT(c_gap_grad) {
  TRY(gap_shape(v, &outs[0], &ins[0]));
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* -- reductions -- */

/* y: x summed over the axes in mask. */
static ApxStatus sum_shape(V *v, const ApxTensor *x, uint32_t mask, const ApxTensor *y) {
  int64_t ny = 1;
  for (int d = 0; d < x->rank; d++)
    if (!(mask >> d & 1u)) ny *= x->dims[d];
  if (numel(y) != ny)
    return bad(v, "output has %lld elements, expected %lld", (long long)numel(y), (long long)ny);
  if (!same_kind(y, x)) return bad(v, "output type %s, input %s", dt_name(y), dt_name(x));
  return APX_STATUS_OK;
}

/* ReduceSum / ReduceMean (data, axes?) -> reduced */
CONTRACT(c_reduce) {
  uint32_t mask = 0;
  TRY(planned(apx_reduce_mask(attrs, ins[0].rank, &mask, v->err, v->cap)));
  return sum_shape(v, &ins[0], mask, &outs[0]);
}

/* ReduceSumTo(X, Like?) -> Y: X summed down to Y's shape (Like only names it). */
CONTRACT(c_reduce_sum_to) {
  char a[96], b[96];
  const ApxTensor *like = opt(ins, n_in, 1);
  if (like && !apx_same_dims(like, &outs[0]) && numel(like) != numel(&outs[0]))
    return bad(v, "output shape %s differs from Like %s", apx_dims_str(&outs[0], a, sizeof a),
               apx_dims_str(like, b, sizeof b));
  int64_t mask = apx_sum_to_mask(&ins[0], &outs[0]);
  if (mask < 0)
    return bad(v, "output shape %s does not broadcast to %s", apx_dims_str(&outs[0], a, sizeof a),
               apx_dims_str(&ins[0], b, sizeof b));
  TRY(sum_shape(v, &ins[0], (uint32_t)mask, &outs[0]));
  return all_float(v, ins, n_in, outs, n_out, 0x2u, 0);
}

/* -- data movement (exact dtypes: bytes are copied) -- */

static ApxStatus io1(V *v, const ApxTensor *ins, const ApxTensor *outs) {
  return same_dtype(v, &ins[0], &outs[0], "input and output");
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the same bytes. */
CONTRACT(c_copy) {
  TRY(io1(v, ins, outs));
  if (numel(&ins[0]) != numel(&outs[0]))
    return bad(v, "output has %lld elements, input %lld", (long long)numel(&outs[0]),
               (long long)numel(&ins[0]));
  return APX_STATUS_OK;
}

CONTRACT(c_transpose) {
  int64_t ss[APX_MAX_RANK];
  TRY(io1(v, ins, outs));
  return planned(apx_transpose_plan(attrs, &ins[0], &outs[0], ss, v->err, v->cap));
}

CONTRACT(c_concat) {
  int64_t outer, inner;
  if (n_in < 1) return bad(v, "no inputs");
  return planned(apx_concat_plan(((const ApxAttrAxis *)attrs)->axis, &outs[0], ins, n_in, 0,
                                 &outer, &inner, v->err, v->cap));
}

CONTRACT(c_split) {
  int64_t outer, inner;
  if (n_out < 1) return bad(v, "no outputs");
  return planned(apx_concat_plan(((const ApxAttrSplit *)attrs)->axis, &ins[0], outs, n_out, 1,
                                 &outer, &inner, v->err, v->cap));
}

/* Slice(data) -> part; SliceGrad(dY) -> dX (zeros with dY at the slice) */
CONTRACT(c_slice) {
  int64_t base, st[APX_MAX_RANK];
  TRY(io1(v, ins, outs));
  int grad = op == APX_OP_SliceGrad;
  return planned(apx_slice_view(attrs, grad ? &outs[0] : &ins[0], grad ? &ins[0] : &outs[0], &base,
                                st, v->err, v->cap));
}

/* Gather(data, indices) -> out (index values: the kernels') */
CONTRACT(c_gather) {
  int64_t outer, A, inner;
  TRY(io1(v, ins, outs));
  return planned(apx_gather_shape(((const ApxAttrAxis *)attrs)->axis, &ins[0], &ins[1], &outs[0],
                                  &outer, &A, &inner, v->err, v->cap));
}

/* GatherGrad(dY, Indices) -> dData (a math op: dY and dData of one kind) */
CONTRACT(c_gather_grad) {
  int64_t outer, A, inner;
  if (!same_kind(&ins[0], &outs[0]))
    return bad(v, "input and output: types differ (%s, %s)", dt_name(&ins[0]), dt_name(&outs[0]));
  TRY(planned(apx_gather_shape(((const ApxAttrAxis *)attrs)->axis, &outs[0], &ins[1], &ins[0],
                               &outer, &A, &inner, v->err, v->cap)));
  return all_float(v, ins, n_in, outs, n_out, 0x2u, 0);
}

/* Expand(input, shape) -> input broadcast to the output's shape */
CONTRACT(c_expand) {
  char a[96], b[96];
  TRY(io1(v, ins, outs));
  if (!broadcasts(&ins[0], &outs[0]))
    return bad(v, "input %s does not broadcast to %s", apx_dims_str(&ins[0], a, sizeof a),
               apx_dims_str(&outs[0], b, sizeof b));
  return APX_STATUS_OK;
}

/* Where(condition, X, Y) -> condition ? X : Y, broadcast */
CONTRACT(c_where) {
  TRY(same_dtype(v, &ins[1], &outs[0], "X and output"));
  TRY(same_dtype(v, &ins[2], &outs[0], "Y and output"));
  if (ins[0].dtype != APX_DT_BOOL) return bad(v, "condition must be bool, got %s", dt_name(&ins[0]));
  const ApxTensor *tri[3] = {&ins[0], &ins[1], &ins[2]};
  ApxBcast bc;
  return planned(apx_bcast_plan(&bc, &outs[0], tri, 3, v->err, v->cap));
}

/* Cast(input) -> output of type attrs->to */
CONTRACT(c_cast) {
  if (numel(&ins[0]) != numel(&outs[0]))
    return bad(v, "output has %lld elements, input %lld", (long long)numel(&outs[0]),
               (long long)numel(&ins[0]));
  const ApxAttrCast *a = attrs;
  if (a && a->to != (int32_t)outs[0].dtype)
    return bad(v, "attribute to=%d but output dtype is %s", a->to, dt_name(&outs[0]));
  return APX_STATUS_OK;
}

/* -- compile-time folding (the CPU runs these for the constant folder) -- */

/* Shape(data) -> int64 dims[start:end] */
CONTRACT(c_shape) {
  const ApxAttrShape *a = attrs;
  int64_t first, n;
  apx_shape_slice(a->start, a->end, ins[0].rank, &first, &n);
  if (outs[0].dtype != APX_DT_I64 || numel(&outs[0]) != n)
    return bad(v, "output must be int64 with %lld elements", (long long)n);
  return APX_STATUS_OK;
}

/* ConstantOfShape(shape?, value?) -> output filled with value (one element) */
CONTRACT(c_constant_of_shape) {
  if (has(ins, n_in, 1) && numel(&ins[1]) != 1) return bad(v, "value must have one element");
  return APX_STATUS_OK;
}

/* Range(start, limit, delta) -> output: three scalars of the output's kind */
CONTRACT(c_range) {
  for (int i = 0; i < 3; i++)
    if (!same_kind(&ins[i], &outs[0]) || numel(&ins[i]) != 1)
      return bad(v, "input %d must be a scalar of type %s", i, dt_name(&outs[0]));
  return APX_STATUS_OK;
}

/* -- losses -- */

static ApxStatus check_reduction(V *v, const ApxAttrLoss *a) {
  if (a->reduction < APX_RED_MEAN || a->reduction > APX_RED_NONE)
    return bad(v, "bad reduction %d", a->reduction);
  return APX_STATUS_OK;
}

/* x (N, C, D...), labels (N, D...) of an integer type, weights (C) of x's kind: lines nl. */
static ApxStatus loss_shape(V *v, const ApxTensor *x, const ApxTensor *labels, const ApxTensor *w,
                            int64_t *nl, int64_t *C) {
  int64_t N, inner;
  TRY(planned(apx_loss_shape(x, labels, &N, C, &inner, v->err, v->cap)));
  if (!is_int(labels)) return bad(v, "labels must be integers, got %s", dt_name(labels));
  if (w && (numel(w) != *C || !same_kind(w, x)))
    return bad(v, "weights must be (C) = (%lld) of type %s", (long long)*C, dt_name(x));
  *nl = N * inner;
  return APX_STATUS_OK;
}

/* SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob?;
 * NegativeLogLikelihoodLoss(input, target, weight?) -> loss; FusedXentropy(scores, labels)
 * -> loss, saved? */
CONTRACT(c_loss) {
  const ApxAttrLoss *a = attrs;
  TRY(check_reduction(v, a));
  int fused = op == APX_OP_FusedXentropy, sce = fused || op == APX_OP_SoftmaxCrossEntropyLoss;
  const ApxTensor *x = &ins[0], *w = fused ? NULL : opt(ins, n_in, 2);
  int64_t nl = 0, C = 0;
  TRY(loss_shape(v, x, &ins[1], w, &nl, &C));
  const ApxTensor *lp = sce && !fused ? opt(outs, n_out, 1) : NULL;
  const ApxTensor *saved = fused ? opt(outs, n_out, 1) : NULL;
  if (saved && (numel(saved) != nl || !same_kind(saved, x)))
    return bad(v, "saved must have the labels' shape");
  if (numel(&outs[0]) != (a->reduction == APX_RED_NONE ? nl : 1) || !same_kind(&outs[0], x))
    return bad(v, "loss output shape/type does not match");
  if (lp && (!apx_same_dims(lp, x) || !same_kind(lp, x)))
    return bad(v, "log_prob must have the scores' shape");
  return all_float(v, ins, n_in, outs, n_out, 0x2u, 0);
}

/* SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?) -> dScores;
 * NegativeLogLikelihoodLossGrad(dLoss, target, weight?) -> dInput;
 * FusedXentropyGrad(dLoss, scores, labels, saved) -> dScores */
CONTRACT(c_loss_grad) {
  const ApxAttrLoss *a = attrs;
  TRY(check_reduction(v, a));
  int fused = op == APX_OP_FusedXentropyGrad;
  int sce = fused || op == APX_OP_SoftmaxCrossEntropyLossGrad;
  int li = sce ? 2 : 1; /* labels input */
  const ApxTensor *dx = &outs[0], *w = fused ? NULL : opt(ins, n_in, li + 1);
  int64_t nl = 0, C = 0;
  TRY(loss_shape(v, dx, &ins[li], w, &nl, &C));
  if (sce && (!apx_same_dims(&ins[1], dx) || !same_kind(&ins[1], dx)))
    return bad(v, "%s must have dScores' shape", fused ? "scores" : "log_prob");
  if (fused && (numel(&ins[3]) != nl || !same_kind(&ins[3], dx)))
    return bad(v, "saved must have the labels' shape");
  if (numel(&ins[0]) != (a->reduction == APX_RED_NONE ? nl : 1) || !same_kind(&ins[0], dx))
    return bad(v, "dLoss shape/type does not match");
  return all_float(v, ins, n_in, outs, n_out, 1u << li, 0);
}

/* -- training step -- */

/* LossScaleSeed(loss, loss_scale) -> dLoss (the loss is only an ordering dependency) */
CONTRACT(c_loss_scale_seed) {
  if (numel(&ins[1]) < 1 || !same_kind(&ins[1], &outs[0])) return bad(v, "loss_scale must be a float [1]");
  return all_float(v, ins, n_in, outs, n_out, 0x1u, 0);
}

/* AssignState(src, dst): dst's shape or one element */
CONTRACT(c_assign_state) {
  int64_t ns = numel(&ins[0]), nd = numel(&ins[1]);
  if (ns != nd && ns != 1) return bad(v, "src has %lld elements, dst %lld", (long long)ns, (long long)nd);
  return APX_STATUS_OK;
}

/* UnscaleCheck(loss_scale, g_0 .. g_{n-1}) -> found_inf, first_bad, norm_sq, u_0 .. u_{n-1} */
CONTRACT(c_unscale_check) {
  int n = n_in - 1;
  if (n < 0 || n_out != 3 + n) return bad(v, "%d gradients need %d outputs, got %d", n, 3 + n, n_out);
  for (int k = 0; k < 3; k++) TRY(need_out(v, outs, n_out, k));
  if (numel(&ins[0]) < 1 || numel(&outs[0]) < 1 || numel(&outs[1]) < 1 || numel(&outs[2]) < 1)
    return bad(v, "loss_scale, found_inf, first_bad and norm_sq must have an element each");
  for (int i = 0; i < n; i++) {
    TRY(need_in(v, ins, n_in, 1 + i));
    const ApxTensor *g = &ins[1 + i], *u = opt(outs, n_out, 3 + i);
    if (!same_kind(g, &ins[0]) || (u && (!same_kind(u, g) || numel(u) != numel(g))))
      return bad(v, "u_%d must have g_%d's shape", i, i);
  }
  return all_float(v, ins, n_in, outs, n_out, 0, 0x2u);
}

/* OptimizerStep(found_inf, norm_sq, lr, step, P[n], G[n], S_1[n] .. S_k[n], H[n]?) */
CONTRACT(c_optimizer_step) {
  const ApxAttrOptimizer *a = attrs;
  if (a->kind < APX_OPTIM_SGD || a->kind > APX_OPTIM_LAMB)
    return bad(v, "unknown optimizer kind %d", a->kind);
  int n = a->n_params, k = apx_optimizer_state_groups(a);
  int64_t want = apx_optimizer_n_inputs(a);
  if (n < 0 || n_in != want)
    return bad(v, "%d parameters need %lld inputs, got %d", n, (long long)want, n_in);
  for (int i = 0; i < 4; i++) TRY(need_in(v, ins, n_in, i));
  for (int i = 0; i < 4; i++)
    if (numel(&ins[i]) < 1) return bad(v, "found_inf, norm_sq, lr and step must have an element each");
  int groups = 2 + k + (a->master_weights != 0);
  for (int i = 0; i < n; i++) {
    TRY(need_in(v, ins, n_in, 4 + i));
    TRY(need_in(v, ins, n_in, 4 + n + i));
    int64_t ne = numel(&ins[4 + i]);
    for (int j = 1; j < groups; j++) {
      const ApxTensor *t = &ins[4 + j * n + i];
      int half_copy = j == 2 + k; /* H_i: absent when P_i is the model parameter itself */
      if ((!t->data && !half_copy) || (t->data && numel(t) != ne))
        return bad(v, "parameter %d: tensors differ in size", i);
    }
    for (int j = 0; j < groups; j++) {
      const ApxTensor *t = &ins[4 + j * n + i];
      if (t->data && !is_float(t))
        return bad(v, "parameter %d: input %d has type %s, expected a float type", i, 4 + j * n + i,
                   dt_name(t));
    }
  }
  return APX_STATUS_OK;
}

/* Allreduce(t_0..t_{n-1}) -> r_0..r_{n-1} (or in place, no outputs): r_i mirrors t_i */
CONTRACT(c_allreduce) {
  if (n_out != 0 && n_out != n_in)
    return bad(v, "%d inputs need %d outputs (or none), got %d", n_in, n_in, n_out);
  for (int i = 0; i < n_in; i++) {
    TRY(need_in(v, ins, n_in, i));
    if (n_out == 0) continue;
    TRY(need_out(v, outs, n_out, i));
    if (outs[i].dtype != ins[i].dtype || !apx_same_dims(&outs[i], &ins[i]))
      return bad(v, "output %d does not mirror input %d (dtype and shape)", i, i);
  }
  return all_float(v, ins, n_in, outs, n_out, 0, 0);
}

/* -- v1.1 resampling and contraction (resample_plan.h) -- */

/* Resize(X, [roi, scales, sizes: static, never read]) -> Y; ResizeGrad(dY) -> dX: X / dX and Y /
 * dY of one float type and rank, as the typed scales say. */
CONTRACT(c_resize) {
  ApxResizePlan p;
  TRY(io1(v, ins, outs));
  if (op == APX_OP_ResizeGrad) return planned(apx_resize_plan(attrs, &outs[0], &ins[0], &p, v->err, v->cap));
  return planned(apx_resize_plan(attrs, &ins[0], &outs[0], &p, v->err, v->cap));
}

/* Einsum(A, B?) -> Y: the terms match the ranks, every label one size. */
CONTRACT(c_einsum) {
  ApxEinsumPlan p;
  TRY(need_in(v, ins, n_in, 0));
  TRY(need_out(v, outs, n_out, 0));
  if (n_in > 2) return bad(v, "%d operands (one or two)", n_in);
  return planned(apx_einsum_plan(attrs, &ins[0], opt(ins, n_in, 1), &outs[0], &p, v->err, v->cap));
}

static Contract contract_of(ApxOp op) {
  switch (op) {
    case APX_OP_Neg: case APX_OP_Relu: case APX_OP_LeakyRelu: case APX_OP_Sigmoid:
    case APX_OP_Tanh: case APX_OP_Gelu: case APX_OP_Erf: case APX_OP_Sqrt: case APX_OP_Exp:
    case APX_OP_Log:
      return c_unary;
    case APX_OP_ReluGrad: case APX_OP_LeakyReluGrad: case APX_OP_SigmoidGrad:
    case APX_OP_TanhGrad: case APX_OP_GeluGrad: case APX_OP_ErfGrad: case APX_OP_SqrtGrad:
      return c_unary_grad;
    case APX_OP_Add: case APX_OP_Sub: case APX_OP_Mul: case APX_OP_Div: case APX_OP_Pow:
    case APX_OP_Equal:
      return c_binary;
    case APX_OP_Sum: return c_sum;
    case APX_OP_PowGrad: return c_pow_grad;
    case APX_OP_Gemm: return c_gemm;
    case APX_OP_MatMul: case APX_OP_FusedMatMul: return c_matmul;
    case APX_OP_FusedDense: return c_fused_dense;
    case APX_OP_FusedDenseGrad: return c_fused_dense_grad;
    case APX_OP_Softmax: case APX_OP_LogSoftmax: return c_softmax;
    case APX_OP_SoftmaxGrad: case APX_OP_LogSoftmaxGrad: return c_softmax_grad;
    case APX_OP_FusedSoftmax: return c_fused_softmax;
    case APX_OP_FusedSoftmaxGrad: return c_fused_softmax_grad;
    case APX_OP_LayerNormalization: return c_layer_norm;
    case APX_OP_LayerNormGrad: return c_layer_norm_grad;
    case APX_OP_BatchNormalization: case APX_OP_BatchNormRelu: return c_batch_norm;
    case APX_OP_BatchNormGrad: return c_batch_norm_grad;
    case APX_OP_BatchNormReluGrad: return c_batch_norm_relu_grad;
    case APX_OP_Dropout: return c_dropout;
    case APX_OP_DropoutGrad: return c_dropout_grad;
    case APX_OP_Conv: case APX_OP_ConvBiasRelu: case APX_OP_ConvTranspose: return c_conv;
    case APX_OP_ConvGrad: case APX_OP_ConvTransposeGrad: return c_conv_grad;
    case APX_OP_ConvBiasReluGrad: return c_conv_relu_grad;
    case APX_OP_MaxPool: case APX_OP_AveragePool: return c_pool;
    case APX_OP_MaxPoolGrad: case APX_OP_AveragePoolGrad: return c_pool_grad;
    case APX_OP_GlobalAveragePool: return c_gap;
    case APX_OP_GlobalAveragePoolGrad: return c_gap_grad;
    case APX_OP_ReduceSum: case APX_OP_ReduceMean: return c_reduce;
    case APX_OP_ReduceSumTo: return c_reduce_sum_to;
    case APX_OP_Flatten: case APX_OP_Reshape: case APX_OP_Squeeze: case APX_OP_Unsqueeze:
    case APX_OP_Identity:
      return c_copy;
    case APX_OP_Transpose: return c_transpose;
    case APX_OP_Concat: return c_concat;
    case APX_OP_Split: return c_split;
    case APX_OP_Slice: case APX_OP_SliceGrad: return c_slice;
    case APX_OP_Gather: return c_gather;
    case APX_OP_GatherGrad: return c_gather_grad;
    case APX_OP_Expand: return c_expand;
    case APX_OP_Where: return c_where;
    case APX_OP_Cast: return c_cast;
    case APX_OP_Shape: return c_shape;
    case APX_OP_ConstantOfShape: return c_constant_of_shape;
    case APX_OP_Range: return c_range;
    case APX_OP_SoftmaxCrossEntropyLoss: case APX_OP_NegativeLogLikelihoodLoss:
    case APX_OP_FusedXentropy:
      return c_loss;
    case APX_OP_SoftmaxCrossEntropyLossGrad: case APX_OP_NegativeLogLikelihoodLossGrad:
    case APX_OP_FusedXentropyGrad:
      return c_loss_grad;
    case APX_OP_LossScaleSeed: return c_loss_scale_seed;
    case APX_OP_AssignState: return c_assign_state;
    case APX_OP_UnscaleCheck: return c_unscale_check;
    case APX_OP_OptimizerStep: return c_optimizer_step;
    case APX_OP_Allreduce: return c_allreduce;
    case APX_OP_Less: case APX_OP_LessOrEqual: case APX_OP_Greater: case APX_OP_GreaterOrEqual:
    case APX_OP_And: case APX_OP_Or:
      return c_compare;
    case APX_OP_Not: case APX_OP_IsNaN: case APX_OP_IsInf: return c_bool_unary;
    case APX_OP_Min: case APX_OP_Max: return c_minmax;
    case APX_OP_Clip: return c_clip;
    case APX_OP_Mod: return c_mod;
    case APX_OP_ClipGrad: return c_clip_grad;
    case APX_OP_MinMaxGrad: return c_minmax_grad;
    case APX_OP_RandomUniformLike: return c_random_uniform_like;
    case APX_OP_Resize: case APX_OP_ResizeGrad: return c_resize;
    case APX_OP_Einsum: return c_einsum;
    default: break;
  }
  /* every op generated from a formula (ops.def KIND), those added since included */
  switch (apx_op_info(op)->kind) {
    case APX_KIND_EW_UNARY: return c_unary;
    case APX_KIND_EW_UNARY_GRAD: return c_unary_grad;
    default: return NULL;
  }
}

/* ---- entry points --------------------------------------------------------------------- */

ApxStatus apx_kernel_check_op(ApxOp op, char *err, size_t cap) {
  V v = {err, cap};
  if ((int)op <= APX_OP_INVALID || op >= APX_OP_COUNT) return bad(&v, "invalid op %d", (int)op);
  return APX_STATUS_OK;
}

static ApxStatus check_tensor(V *v, const ApxTensor *t, const char *what, int i) {
  if (!t->data) return APX_STATUS_OK;
  if (t->rank < 0 || t->rank > APX_MAX_RANK)
    return bad(v, "%s %d: rank %d out of range", what, i, t->rank);
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] < 0) return bad(v, "%s %d: negative dim %lld", what, i, (long long)t->dims[d]);
    if (t->dims[d] && n > INT64_MAX / 8 / t->dims[d]) return bad(v, "%s %d: size overflows", what, i);
    n *= t->dims[d];
  }
  if (apx_dtype_size(t->dtype) == 0)
    return unsup(v, "%s %d: dtype %s not supported", what, i, dt_name(t));
  return APX_STATUS_OK;
}

ApxStatus apx_kernel_check_args(ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                                const ApxTensor *outs, int n_out, char *err, size_t cap) {
  V v = {err, cap};
  if (n_in < 0 || n_out < 0 || (n_in && !ins) || (n_out && !outs))
    return bad(&v, "bad input/output counts");
  const ApxOpInfo *info = apx_op_info(op);
  if (!attrs && strcmp(info->attrs_type, "ApxAttrNone") != 0)
    return bad(&v, "missing attributes (%s)", info->attrs_type);
  for (int i = 0; i < n_in; i++) TRY(check_tensor(&v, &ins[i], "input", i));
  for (int i = 0; i < n_out; i++) TRY(check_tensor(&v, &outs[i], "output", i));
  return APX_STATUS_OK;
}

ApxStatus apx_kernel_check_contract(ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                                    const ApxTensor *outs, int n_out, char *err, size_t cap) {
  V v = {err, cap};
  TRY(apx_kernel_check_op(op, err, cap));
  /* every op that has a kernel somewhere: its arity; then its contract where written */
  if (apx_op_info(op)->flags & (APX_OPF_V1 | APX_OPF_FOLD | APX_OPF_INTERNAL))
    TRY(check_arity(&v, op, ins, n_in, outs, n_out));
  Contract c = contract_of(op);
  return c ? c(&v, op, attrs, ins, n_in, outs, n_out) : APX_STATUS_OK;
}

ApxStatus apx_kernel_validate(ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                              const ApxTensor *outs, int n_out, char *err, size_t cap) {
  TRY(apx_kernel_check_op(op, err, cap));
  TRY(apx_kernel_check_args(op, attrs, ins, n_in, outs, n_out, err, cap));
  return apx_kernel_check_contract(op, attrs, ins, n_in, outs, n_out, err, cap);
}

void apx_kernel_error_prefix(ApxOp op, char *err, size_t cap) {
  if (!err || !cap) return;
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", err);
  snprintf(err, cap, "%s: %s", apx_op_name(op), detail[0] ? detail : "failed");
}
