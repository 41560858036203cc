/* compare.c - the v1.1 comparison, logic and selection ops (attrs.def, after
 * ApxAttrHardSigmoid): Less, LessOrEqual, Greater, GreaterOrEqual, Not, And, Or, IsNaN,
 * IsInf, Min, Max (variadic), Clip and Mod with numpy broadcasting, and the gradients
 * ClipGrad and MinMaxGrad.
 *
 * The forward ops are raw kernels: they see every tensor in its own type (all integer
 * widths, bool, fp16 / bf16, fp32, fp64; compare_type.inc is instantiated once per type)
 * instead of the math types, so they are exact everywhere: comparisons of fp16 / bf16 load
 * both sides to fp32 (exact), selections (Min, Max, Clip) copy the chosen element's bits,
 * integer remainders are integer arithmetic in the tensor's type (uint64 included), and
 * fmod is exact in floating point. The constant folder runs these same kernels.
 * The gradients are math kernels (compare_real.inc, float / double). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/half.h"

#define CK_SINT 0
#define CK_UINT 1
#define CK_FLOAT 2
#define CK_F16 3
#define CK_BF16 4

#define CT float
#define CN f32
#define CK CK_FLOAT
#include "kernels/cpu/compare_type.inc"
#define CT double
#define CN f64
#define CK CK_FLOAT
#include "kernels/cpu/compare_type.inc"
#define CT uint16_t
#define CN f16
#define CK CK_F16
#include "kernels/cpu/compare_type.inc"
#define CT uint16_t
#define CN bf16
#define CK CK_BF16
#include "kernels/cpu/compare_type.inc"
#define CT int8_t
#define CN i8
#define CK CK_SINT
#include "kernels/cpu/compare_type.inc"
#define CT int16_t
#define CN i16
#define CK CK_SINT
#include "kernels/cpu/compare_type.inc"
#define CT int32_t
#define CN i32
#define CK CK_SINT
#include "kernels/cpu/compare_type.inc"
#define CT int64_t
#define CN i64
#define CK CK_SINT
#include "kernels/cpu/compare_type.inc"
#define CT uint8_t
#define CN u8
#define CK CK_UINT
#include "kernels/cpu/compare_type.inc"
#define CT uint16_t
#define CN u16
#define CK CK_UINT
#include "kernels/cpu/compare_type.inc"
#define CT uint32_t
#define CN u32
#define CK CK_UINT
#include "kernels/cpu/compare_type.inc"
#define CT uint64_t
#define CN u64
#define CK CK_UINT
#include "kernels/cpu/compare_type.inc"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/compare_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/compare_real.inc"
#include "kernels/cpu/real_end.h"

/* Runs STMT with T and SFX bound to each numeric dtype's storage type and name suffix
 * (compare_type.inc's instances); other dtypes fall to the default. */
#define NUMERIC_SWITCH(dt, STMT, DEFAULT)                                            \
  switch (dt) {                                                                      \
    case APX_DT_F32: STMT(float, f32); break;                                        \
    case APX_DT_F64: STMT(double, f64); break;                                       \
    case APX_DT_F16: STMT(uint16_t, f16); break;                                     \
    case APX_DT_BF16: STMT(uint16_t, bf16); break;                                   \
    case APX_DT_I8: STMT(int8_t, i8); break;                                         \
    case APX_DT_I16: STMT(int16_t, i16); break;                                      \
    case APX_DT_I32: STMT(int32_t, i32); break;                                      \
    case APX_DT_I64: STMT(int64_t, i64); break;                                      \
    case APX_DT_U8: STMT(uint8_t, u8); break;                                        \
    case APX_DT_U16: STMT(uint16_t, u16); break;                                     \
    case APX_DT_U32: STMT(uint32_t, u32); break;                                     \
    case APX_DT_U64: STMT(uint64_t, u64); break;                                     \
    default: DEFAULT;                                                                \
  }

static ApxStatus type_error(ApxCpuCtx *ctx, const char *what, ApxDType t) {
  return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: %s of type %s", what,
                      apx_dtype_name(t));
}

static ApxStatus bcast2(ApxCpuCtx *ctx, ApxBcast *bc, const ApxTensor *out, const ApxTensor *a,
                        const ApxTensor *b) {
  const ApxTensor *pair[2] = {a, b};
  return apx_shape_status(apx_bcast_plan(bc, out, pair, 2, ctx->err, sizeof ctx->err));
}

/* Less, LessOrEqual, Greater, GreaterOrEqual (A, B) -> bool */
APX_CPU_KERNEL(apx_cpu_compare) {
  ApxStatus s; /* types, shapes: kernels/validate.c */
  ApxDType dt = ins[0].dtype;
  ApxBcast bc;
  if ((s = bcast2(ctx, &bc, &outs[0], &ins[0], &ins[1]))) return s;
  int nt = apx_cpu_threads(ctx);
  uint8_t *o = outs[0].data;
#define RUN(T, SFX) compare_##SFX(op, &bc, ins[0].data, ins[1].data, o, nt)
  NUMERIC_SWITCH(dt, RUN, return type_error(ctx, "input", dt))
#undef RUN
  return APX_STATUS_OK;
}

/* Not(X), And(A, B), Or(A, B): bool -> bool (any nonzero byte is true) */
APX_CPU_KERNEL(apx_cpu_logic) {
  ApxStatus s; /* bool inputs and output, shapes: kernels/validate.c */
  int nt = apx_cpu_threads(ctx);
  const uint8_t *a = ins[0].data;
  uint8_t *o = outs[0].data;
  if (op == APX_OP_Not) {
    int64_t n = apx_tensor_numel(&outs[0]);
    APX_OMP_FOR(n > APX_CPU_PAR_WORK)
    for (int64_t i = 0; i < n; i++) o[i] = a[i] == 0;
    return APX_STATUS_OK;
  }
  ApxBcast bc;
  if ((s = bcast2(ctx, &bc, &outs[0], &ins[0], &ins[1]))) return s;
  const uint8_t *b = ins[1].data;
  int64_t sa = apx_bcast_istride(&bc, 0), sb = apx_bcast_istride(&bc, 1);
  if (op == APX_OP_And)
    APX_BCAST_SEGMENTS(&bc, APX_BIN_SEGMENT(uint8_t, uint8_t, a + seg_off[0], b + seg_off[1],
                                            o + seg_i, sa, sb, seg_len,
                                            (uint8_t)(x != 0 && y != 0)));
  else
    APX_BCAST_SEGMENTS(&bc, APX_BIN_SEGMENT(uint8_t, uint8_t, a + seg_off[0], b + seg_off[1],
                                            o + seg_i, sa, sb, seg_len,
                                            (uint8_t)(x != 0 || y != 0)));
  return APX_STATUS_OK;
}

/* IsNaN(X), IsInf(X) -> bool, float X */
APX_CPU_KERNEL(apx_cpu_isclass) {
  int64_t n = apx_tensor_numel(&ins[0]); /* bool output of X's shape: kernels/validate.c */
  int dn = 1, dp = 1;
  if (op == APX_OP_IsInf) {
    const ApxAttrIsInf *a = attrs;
    dn = a->detect_negative, dp = a->detect_positive;
  }
  int nt = apx_cpu_threads(ctx);
  uint8_t *y = outs[0].data;
  switch (ins[0].dtype) {
    case APX_DT_F32: isclass_f32(op, ins[0].data, y, n, dn, dp, nt); break;
    case APX_DT_F64: isclass_f64(op, ins[0].data, y, n, dn, dp, nt); break;
    case APX_DT_F16: isclass_f16(op, ins[0].data, y, n, dn, dp, nt); break;
    case APX_DT_BF16: isclass_bf16(op, ins[0].data, y, n, dn, dp, nt); break;
    default: return type_error(ctx, "input", ins[0].dtype);
  }
  return APX_STATUS_OK;
}

/* Min / Max (X_0, ..., X_{n-1}) -> Y: Y = f(X_0, X_1), then Y = f(Y, X_k) (the earlier
 * operand wins ties), broadcast; one input: broadcast copy. */
APX_CPU_KERNEL(apx_cpu_minmax) {
  ApxStatus s; /* types, broadcasting, aliasing: kernels/validate.c */
  ApxDType dt = ins[0].dtype;
  ApxTensor *o = &outs[0];
  int nt = apx_cpu_threads(ctx);
  if (n_in == 1) {
    if (apx_cpu_broadcast_copy(&ins[0], o, nt) != 0)
      return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "input 0 does not broadcast to the output");
    return APX_STATUS_OK;
  }
  int is_max = op == APX_OP_Max;
  for (int k = 1; k < n_in; k++) {
    const ApxTensor *a = k == 1 ? &ins[0] : o;
    ApxBcast bc;
    if ((s = bcast2(ctx, &bc, o, a, &ins[k]))) return s;
#define RUN(T, SFX) minmax_##SFX(is_max, &bc, a->data, ins[k].data, o->data, nt)
    NUMERIC_SWITCH(dt, RUN, return type_error(ctx, "input", dt))
#undef RUN
  }
  return APX_STATUS_OK;
}

/* Clip(X, min?, max?) -> Y; the bounds are one-element tensors of X's type */
APX_CPU_KERNEL(apx_cpu_clip) {
  ApxDType dt = ins[0].dtype; /* output and bounds: kernels/validate.c */
  int64_t n = apx_tensor_numel(&ins[0]);
  const void *b[2] = {NULL, NULL};
  for (int k = 1; k < 3; k++)
    if (apx_cpu_has(ins, n_in, k)) b[k - 1] = ins[k].data;
  int nt = apx_cpu_threads(ctx);
#define RUN(T, SFX) clip_##SFX(ins[0].data, b[0], b[1], outs[0].data, n, nt)
  NUMERIC_SWITCH(dt, RUN, return type_error(ctx, "input", dt))
#undef RUN
  return APX_STATUS_OK;
}

/* Mod(A, B) -> C (ApxAttrMod) */
APX_CPU_KERNEL(apx_cpu_mod) {
  ApxStatus s; /* types, fmod: kernels/validate.c */
  ApxDType dt = ins[0].dtype;
  int fm = ((const ApxAttrMod *)attrs)->fmod;
  ApxBcast bc;
  if ((s = bcast2(ctx, &bc, &outs[0], &ins[0], &ins[1]))) return s;
  int64_t nb = apx_tensor_numel(&ins[1]);
  int zero = 0;
#define ZERO(T, SFX) zero = bc.numel > 0 && any_zero_##SFX(ins[1].data, nb)
  switch (dt) {
    case APX_DT_I8: ZERO(int8_t, i8); break;
    case APX_DT_I16: ZERO(int16_t, i16); break;
    case APX_DT_I32: ZERO(int32_t, i32); break;
    case APX_DT_I64: ZERO(int64_t, i64); break;
    case APX_DT_U8: ZERO(uint8_t, u8); break;
    case APX_DT_U16: ZERO(uint16_t, u16); break;
    case APX_DT_U32: ZERO(uint32_t, u32); break;
    case APX_DT_U64: ZERO(uint64_t, u64); break;
    default: break;
  }
#undef ZERO
  if (zero) return apx_cpu_fail(ctx, APX_STATUS_BAD_INPUT, "integer modulo by zero");
  int nt = apx_cpu_threads(ctx);
#define RUN(T, SFX) mod_##SFX(fm, &bc, ins[0].data, ins[1].data, outs[0].data, nt)
  NUMERIC_SWITCH(dt, RUN, return type_error(ctx, "input", dt))
#undef RUN
  return APX_STATUS_OK;
}

/* ClipGrad(dY, X, min?, max?) -> dX?, dMin?, dMax?, all of dY's shape (math kernel) */
APX_CPU_KERNEL(apx_cpu_clip_grad) {
  const ApxTensor *dy = &ins[0];
  int64_t n = apx_tensor_numel(dy); /* shapes, types, bounds: kernels/validate.c */
  const void *b[2] = {NULL, NULL};
  for (int k = 2; k < 4; k++)
    if (apx_cpu_has(ins, n_in, k)) b[k - 2] = ins[k].data;
  void *g[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++)
    if (apx_cpu_has(outs, n_out, k)) g[k] = outs[k].data;
  int nt = apx_cpu_threads(ctx);
  if (dy->dtype == APX_DT_F64)
    clip_grad_f64(dy->data, ins[1].data, b[0], b[1], g[0], g[1], g[2], n, nt);
  else if (dy->dtype == APX_DT_F32)
    clip_grad_f32(dy->data, ins[1].data, b[0], b[1], g[0], g[1], g[2], n, nt);
  else
    return type_error(ctx, "gradient dY", dy->dtype);
  return APX_STATUS_OK;
}

/* MinMaxGrad(dY, Y, X_0 .. X_{n-1}) -> dX_0? .. dX_{n-1}?, each of dY's shape (math kernel) */
APX_CPU_KERNEL(apx_cpu_minmax_grad) {
  ApxStatus s = APX_STATUS_OK; /* counts, shapes, types: kernels/validate.c */
  ApxDType dt = ins[0].dtype;
  if (dt != APX_DT_F32 && dt != APX_DT_F64) return type_error(ctx, "gradient dY", dt);
  const ApxTensor *dy = &ins[0];
  int64_t n = apx_tensor_numel(dy);
  /* count[i]: how many inputs equal y[i] */
  size_t es = apx_dtype_size(dt);
  void *count = calloc((size_t)(n ? n : 1), es);
  if (!count) return apx_cpu_fail(ctx, APX_STATUS_OOM, "out of memory");
  int nt = apx_cpu_threads(ctx);
  for (int pass = 0; pass < 2 && s == APX_STATUS_OK; pass++)
    for (int k = 0; k < n_out && s == APX_STATUS_OK; k++) {
      if (pass == 1 && !apx_cpu_has(outs, n_out, k)) continue;
      const ApxTensor *tri[3] = {&ins[0], &ins[1], &ins[2 + k]};
      ApxBcast bc;
      s = apx_shape_status(apx_bcast_plan(&bc, dy, tri, 3, ctx->err, sizeof ctx->err));
      if (s) break;
      if (dt == APX_DT_F64)
        minmax_grad_f64(pass, &bc, dy->data, ins[1].data, ins[2 + k].data, count,
                        pass ? outs[k].data : NULL, nt);
      else
        minmax_grad_f32(pass, &bc, dy->data, ins[1].data, ins[2 + k].data, count,
                        pass ? outs[k].data : NULL, nt);
    }
  free(count);
  return s;
}
