/* elementwise.c - unary and binary elementwise ops with numpy broadcasting: Add, Sub, Mul,
 * Div, Pow, Equal, Sum (variadic), Neg, Relu, LeakyRelu, Sigmoid, Tanh, Gelu, Erf, Sqrt, Exp,
 * Log, their gradients (ReluGrad ... SqrtGrad, PowGrad), and the int64 paths of the
 * arithmetic ops (ONNX semantics: Div truncates, overflow wraps).
 * Formulas shared with CUDA live in kernels/ew_math.h. */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ew_math.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/elementwise_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/elementwise_real.inc"
#include "kernels/cpu/real_end.h"

static int is_real(ApxDType t) { return t == APX_DT_F32 || t == APX_DT_F64; }

static ApxStatus dtype_error(ApxCpuCtx *ctx, const char *what, ApxDType t) {
  return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: %s of type %s", what,
                      apx_dtype_name(t));
}

/* ---- int64 paths --------------------------------------------------------------------- */

/* b^e in int64 with wraparound; negative exponents give the truncated 1 / b^|e| (0 for
 * |b| > 1, and 0 for b == 0). */
static int64_t ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)b;
  while (e) {
    if (e & 1) r *= x;
    x *= x;
    e >>= 1;
  }
  return (int64_t)r;
}

static int64_t idiv(int64_t a, int64_t b) {
  if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps */
  return a / b;
}

static void binary_i64(ApxOp op, const ApxBcast *bc, const int64_t *a, const int64_t *b,
                       int64_t *o, int nt) {
  int64_t sa = apx_bcast_istride(bc, 0), sb = apx_bcast_istride(bc, 1);
#define IBIN(EXPR)                                                                         \
  APX_BCAST_SEGMENTS(bc, APX_BIN_SEGMENT(int64_t, int64_t, a + seg_off[0], b + seg_off[1], \
                                         o + seg_i, sa, sb, seg_len, EXPR));               \
  break
  switch (op) {
    case APX_OP_Add: IBIN((int64_t)((uint64_t)x + (uint64_t)y));
    case APX_OP_Sub: IBIN((int64_t)((uint64_t)x - (uint64_t)y));
    case APX_OP_Mul: IBIN((int64_t)((uint64_t)x * (uint64_t)y));
    case APX_OP_Div: IBIN(idiv(x, y));
    case APX_OP_Pow: IBIN(ipow(x, y));
    default: break;
  }
#undef IBIN
}

/* ---- kernels --------------------------------------------------------------------------- */

/* Unary op: output 0 has input 0's shape (may alias it). */
APX_CPU_KERNEL(apx_cpu_unary) {
  int64_t n = apx_tensor_numel(&ins[0]);
  int nt = apx_cpu_threads(ctx);
  switch (ins[0].dtype) {
    case APX_DT_F32: unary_f32(op, attrs, ins[0].data, outs[0].data, n, nt); break;
    case APX_DT_F64: unary_f64(op, attrs, ins[0].data, outs[0].data, n, nt); break;
    case APX_DT_I64:
      if (op != APX_OP_Neg) return dtype_error(ctx, "integer input", ins[0].dtype);
      {
        const int64_t *x = ins[0].data;
        int64_t *y = outs[0].data;
        APX_OMP_FOR(n > APX_CPU_PAR_WORK)
        for (int64_t i = 0; i < n; i++) y[i] = (int64_t)(0 - (uint64_t)x[i]);
      }
      break;
    default: return dtype_error(ctx, "input", ins[0].dtype);
  }
  return APX_STATUS_OK;
}

/* XGrad(dY, T) -> dX, all of one shape (T: see ew_math.h). */
APX_CPU_KERNEL(apx_cpu_unary_grad) {
  int64_t n = apx_tensor_numel(&outs[0]);
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    unary_grad_f64(op, attrs, ins[0].data, ins[1].data, outs[0].data, n, nt);
  else
    unary_grad_f32(op, attrs, ins[0].data, ins[1].data, outs[0].data, n, nt);
  return APX_STATUS_OK;
}

static ApxStatus bcast_setup(ApxCpuCtx *ctx, ApxBcast *bc, const ApxTensor *out,
                             const ApxTensor *const *ins, int n) {
  return apx_shape_status(apx_bcast_plan(bc, out, ins, n, ctx->err, sizeof ctx->err));
}

/* Equal(A, B) -> bool */
static ApxStatus run_equal(ApxCpuCtx *ctx, const ApxBcast *bc, const ApxTensor *a,
                           const ApxTensor *b, ApxTensor *o, int nt) {
  int64_t sa = apx_bcast_istride(bc, 0), sb = apx_bcast_istride(bc, 1);
  uint8_t *po = o->data;
  switch (a->dtype) {
    case APX_DT_F32: equal_f32(bc, a->data, b->data, po, nt); break;
    case APX_DT_F64: equal_f64(bc, a->data, b->data, po, nt); break;
    case APX_DT_I64: {
      const int64_t *pa = a->data, *pb = b->data;
      APX_BCAST_SEGMENTS(bc, APX_BIN_SEGMENT(int64_t, int64_t, pa + seg_off[0], pb + seg_off[1],
                                             po + seg_i, sa, sb, seg_len, (uint8_t)(x == y)));
      break;
    }
    case APX_DT_BOOL: {
      const uint8_t *pa = a->data, *pb = b->data;
      APX_BCAST_SEGMENTS(bc, APX_BIN_SEGMENT(uint8_t, uint8_t, pa + seg_off[0], pb + seg_off[1],
                                             po + seg_i, sa, sb, seg_len,
                                             (uint8_t)((x != 0) == (y != 0))));
      break;
    }
    default: return dtype_error(ctx, "input", a->dtype);
  }
  return APX_STATUS_OK;
}

/* Pow with a float base and an integer exponent: the exponent in the base's type. */
static ApxStatus pow_mixed(ApxCpuCtx *ctx, const ApxBcast *bc, const ApxTensor *a,
                           const ApxTensor *b, ApxTensor *o, int nt) {
  int64_t nb = apx_tensor_numel(b);
  if (is_real(a->dtype) && b->dtype == APX_DT_I64) {
    void *e = malloc((size_t)(nb ? nb : 1) * apx_dtype_size(a->dtype));
    if (!e) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
    apx_cpu_convert_nt(b->data, b->dtype, e, a->dtype, nb, nt);
    if (a->dtype == APX_DT_F64)
      binary_f64(APX_OP_Pow, bc, a->data, e, o->data, nt);
    else
      binary_f32(APX_OP_Pow, bc, a->data, e, o->data, nt);
    free(e);
    return APX_STATUS_OK;
  }
  if (a->dtype == APX_DT_I64 && is_real(b->dtype)) {
    /* integer base, float exponent: pow in double, truncated */
    int64_t sa = apx_bcast_istride(bc, 0), sb = apx_bcast_istride(bc, 1);
    const int64_t *pa = a->data;
    int64_t *po = o->data;
    if (b->dtype == APX_DT_F64) {
      const double *pb = b->data;
      APX_BCAST_SEGMENTS(bc, APX_BIN_SEGMENT(int64_t, double, pa + seg_off[0], pb + seg_off[1],
                                             po + seg_i, sa, sb, seg_len,
                                             (int64_t)pow((double)x, y)));
    } else {
      const float *pb = b->data;
      APX_BCAST_SEGMENTS(bc, APX_BIN_SEGMENT(int64_t, float, pa + seg_off[0], pb + seg_off[1],
                                             po + seg_i, sa, sb, seg_len,
                                             (int64_t)pow((double)x, (double)y)));
    }
    return APX_STATUS_OK;
  }
  return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: Pow of %s by %s",
                      apx_dtype_name(a->dtype), apx_dtype_name(b->dtype));
}

/* Add, Sub, Mul, Div, Pow, Equal (A, B) -> C with broadcasting. */
APX_CPU_KERNEL(apx_cpu_binary) {
  ApxStatus s;
  const ApxTensor *a = &ins[0], *b = &ins[1];
  ApxTensor *o = &outs[0];
  const ApxTensor *pair[2] = {a, b};
  ApxBcast bc;
  if ((s = bcast_setup(ctx, &bc, o, pair, 2))) return s;
  int nt = apx_cpu_threads(ctx);
  if (op == APX_OP_Equal) return run_equal(ctx, &bc, a, b, o, nt);
  if (op == APX_OP_Pow && a->dtype != b->dtype) return pow_mixed(ctx, &bc, a, b, o, nt);
  switch (a->dtype) {
    case APX_DT_F32: binary_f32(op, &bc, a->data, b->data, o->data, nt); break;
    case APX_DT_F64: binary_f64(op, &bc, a->data, b->data, o->data, nt); break;
    case APX_DT_I64:
      if (op == APX_OP_Div) {
        const int64_t *pb = b->data;
        int64_t nb = apx_tensor_numel(b);
        for (int64_t i = 0; i < nb && bc.numel > 0; i++)
          if (pb[i] == 0) return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "integer division by zero");
      }
      binary_i64(op, &bc, a->data, b->data, o->data, nt);
      break;
    default: return dtype_error(ctx, "input", a->dtype);
  }
  return APX_STATUS_OK;
}

/* Sum(X1, ..., Xn) -> ((X1 + X2) + X3) + ... with broadcasting (fixed order). */
APX_CPU_KERNEL(apx_cpu_sum) {
  ApxStatus s;
  ApxTensor *o = &outs[0];
  int nt = apx_cpu_threads(ctx);
  if (!is_real(o->dtype) && o->dtype != APX_DT_I64) return dtype_error(ctx, "output", o->dtype);
  if (n_in == 1) {
    apx_cpu_broadcast_copy(&ins[0], o, nt);
    return APX_STATUS_OK;
  }
  /* o = in[0] + in[1], then o += in[k] (validate.h: no in[k > 0] over the output) */
  for (int k = 1; k < n_in; k++) {
    const ApxTensor *pair[2] = {k == 1 ? &ins[0] : o, &ins[k]};
    ApxBcast bc;
    if ((s = bcast_setup(ctx, &bc, o, pair, 2))) return s;
    switch (o->dtype) {
      case APX_DT_F32: binary_f32(APX_OP_Add, &bc, pair[0]->data, ins[k].data, o->data, nt); break;
      case APX_DT_F64: binary_f64(APX_OP_Add, &bc, pair[0]->data, ins[k].data, o->data, nt); break;
      default: binary_i64(APX_OP_Add, &bc, pair[0]->data, ins[k].data, o->data, nt); break;
    }
  }
  return APX_STATUS_OK;
}

/* PowGrad(dY, A, B) -> dA?, dB?, each summed down to its output's shape (A's / B's). */
APX_CPU_KERNEL(apx_cpu_pow_grad) {
  ApxStatus s;
  const ApxTensor *dy = &ins[0];
  const ApxTensor *tri[3] = {dy, &ins[1], &ins[2]};
  ApxBcast bc;
  if ((s = bcast_setup(ctx, &bc, dy, tri, 3))) return s;
  int nt = apx_cpu_threads(ctx);
  size_t es = apx_dtype_size(dy->dtype);
  int64_t n = apx_tensor_numel(dy);
  void *full[2] = {NULL, NULL};
  int64_t mask[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    if (!apx_cpu_has(outs, n_out, k)) continue;
    mask[k] = apx_sum_to_mask(dy, &outs[k]);
    full[k] = mask[k] ? malloc((size_t)(n ? n : 1) * es) : outs[k].data;
    if (!full[k]) {
      if (k == 1 && mask[0]) free(full[0]);
      return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
    }
  }
  if (dy->dtype == APX_DT_F64)
    pow_grad_f64(&bc, dy->data, ins[1].data, ins[2].data, full[0], full[1], nt);
  else
    pow_grad_f32(&bc, dy->data, ins[1].data, ins[2].data, full[0], full[1], nt);
  for (int k = 0; k < 2; k++) {
    if (!full[k] || !mask[k]) continue;
    if (dy->dtype == APX_DT_F64)
      apx_cpu_reduce_sum_f64(full[k], dy->dims, dy->rank, (uint32_t)mask[k], outs[k].data, nt);
    else
      apx_cpu_reduce_sum_f32(full[k], dy->dims, dy->rank, (uint32_t)mask[k], outs[k].data, nt);
    free(full[k]);
  }
  return APX_STATUS_OK;
}
