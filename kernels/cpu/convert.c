/* convert.c - dtype conversions: bulk fp16/bf16 <-> fp32 (F16C where the CPU has it, a
 * portable loop over half.h's scalar functions otherwise; identical bits either way), any
 * dtype to any other (Cast), correctly rounded fp64/int -> half.
 *
 * Rounding: every conversion to a float type rounds once, to nearest even. Wide sources
 * (fp64, 64-bit ints) reach fp16/bf16 through an fp32 value rounded to odd, which has enough
 * extra bits that the final RNE rounding equals direct rounding (no double rounding).
 * Float -> integer truncates toward zero; NaN gives 0; values beyond int64 saturate, then
 * the int64 value wraps to narrower types (numpy's astype for in-range values); -> bool is
 * x != 0 (NaN is true). */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/validate.h"
#include "kernels/half.h"

/* ---- fp16 / bf16 bulk --------------------------------------------------------------- */

void apx_cpu_f16_to_f32_portable(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = apx_f16_to_f32(src[i]);
}

void apx_cpu_f32_to_f16_portable(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = apx_f32_to_f16(src[i]);
}

/* NaN inputs take the scalar path so the bits match half.h (the hardware keeps payloads
 * and quiets signalling NaNs; half.h maps every NaN to one quiet pattern per sign). */
__attribute__((target("avx,f16c"))) void apx_cpu_f16_to_f32_f16c(const uint16_t *src,
                                                                 float *dst, int64_t n) {
  int64_t i = 0;
  const __m128i abs_mask = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), inf);
    if (_mm_movemask_epi8(nan)) {
      for (int j = 0; j < 8; j++) dst[i + j] = apx_f16_to_f32(src[i + j]);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; i++) dst[i] = apx_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) void apx_cpu_f32_to_f16_f16c(const float *src,
                                                                 uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {
      for (int j = 0; j < 8; j++) dst[i + j] = apx_f32_to_f16(src[i + j]);
      continue;
    }
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  for (; i < n; i++) dst[i] = apx_f32_to_f16(src[i]);
}

int apx_cpu_has_f16c(void) {
  static int has = -1;
  int h;
#pragma omp atomic read
  h = has;
  if (h < 0) {
    __builtin_cpu_init();
    h = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#pragma omp atomic write
    has = h;
  }
  return h;
}

void apx_cpu_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  if (apx_cpu_has_f16c())
    apx_cpu_f16_to_f32_f16c(src, dst, n);
  else
    apx_cpu_f16_to_f32_portable(src, dst, n);
}

void apx_cpu_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
  if (apx_cpu_has_f16c())
    apx_cpu_f32_to_f16_f16c(src, dst, n);
  else
    apx_cpu_f32_to_f16_portable(src, dst, n);
}

void apx_cpu_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = apx_bf16_to_f32(src[i]);
}

void apx_cpu_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = apx_f32_to_bf16(src[i]);
}

/* ---- correctly rounded wide -> half ----------------------------------------------- */

/* d rounded to fp32 "to odd": truncated toward zero, low bit set when inexact. */
static float f64_to_f32_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  return apx_bits_f32(apx_f32_bits(f) | 1u);
}

/* |v| (u) and sign to fp32 rounded to odd. */
static float u64_to_f32_odd(uint64_t u, int neg) {
  float f;
  if (u < (1ull << 24)) {
    f = (float)u;
  } else {
    int s = 64 - __builtin_clzll(u) - 24;
    uint64_t m = (u >> s) | ((u & ((1ull << s) - 1)) != 0);
    f = ldexpf((float)m, s);
  }
  return neg ? -f : f;
}

uint16_t apx_cpu_f64_to_f16(double d) { return apx_f32_to_f16(f64_to_f32_odd(d)); }
uint16_t apx_cpu_f64_to_bf16(double d) { return apx_f32_to_bf16(f64_to_f32_odd(d)); }

/* ---- any -> any -------------------------------------------------------------------- */

#define CONV_BLOCK 1024

static int is_float_dt(ApxDType t) { return apx_dtype_is_float(t); }

/* Float types widen to double exactly. */
static void load_f64(const void *src, ApxDType st, int64_t off, double *buf, int64_t n) {
  switch (st) {
    case APX_DT_F32:
      for (int64_t i = 0; i < n; i++) buf[i] = ((const float *)src)[off + i];
      break;
    case APX_DT_F64: memcpy(buf, (const double *)src + off, (size_t)n * sizeof(double)); break;
    case APX_DT_F16:
      for (int64_t i = 0; i < n; i++) buf[i] = apx_f16_to_f32(((const uint16_t *)src)[off + i]);
      break;
    case APX_DT_BF16:
      for (int64_t i = 0; i < n; i++) buf[i] = apx_bf16_to_f32(((const uint16_t *)src)[off + i]);
      break;
    default: break;
  }
}

/* Integer types and bool as int64 (uint64 keeps its bit pattern). */
static void load_i64(const void *src, ApxDType st, int64_t off, int64_t *buf, int64_t n) {
#define LOADI(T)                                                                 \
  for (int64_t i = 0; i < n; i++) buf[i] = (int64_t)((const T *)src)[off + i]; \
  break
  switch (st) {
    case APX_DT_I64: LOADI(int64_t);
    case APX_DT_I32: LOADI(int32_t);
    case APX_DT_I16: LOADI(int16_t);
    case APX_DT_I8: LOADI(int8_t);
    case APX_DT_U8: LOADI(uint8_t);
    case APX_DT_U16: LOADI(uint16_t);
    case APX_DT_U32: LOADI(uint32_t);
    case APX_DT_U64: LOADI(uint64_t);
    case APX_DT_BOOL:
      for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)src)[off + i] != 0;
      break;
    default: break;
  }
#undef LOADI
}

static int64_t f64_to_i64_sat(double d) {
  if (d != d) return 0;
  d = trunc(d);
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

static uint64_t f64_to_u64(double d) {
  if (d != d) return 0;
  d = trunc(d);
  if (d >= 18446744073709551616.0) return UINT64_MAX;
  if (d >= 9223372036854775808.0) return (uint64_t)d;
  return (uint64_t)f64_to_i64_sat(d);
}

#define STORE_INT(T, EXPR)                                   \
  for (int64_t i = 0; i < n; i++) ((T *)dst)[off + i] = (T)(EXPR); \
  break

static void store_from_f64(const double *buf, void *dst, ApxDType dt, int64_t off, int64_t n) {
  switch (dt) {
    case APX_DT_F64: memcpy((double *)dst + off, buf, (size_t)n * sizeof(double)); break;
    case APX_DT_F32: STORE_INT(float, buf[i]);
    case APX_DT_F16: STORE_INT(uint16_t, apx_cpu_f64_to_f16(buf[i]));
    case APX_DT_BF16: STORE_INT(uint16_t, apx_cpu_f64_to_bf16(buf[i]));
    case APX_DT_BOOL: STORE_INT(uint8_t, buf[i] != 0);
    case APX_DT_U64: STORE_INT(uint64_t, f64_to_u64(buf[i]));
    case APX_DT_I64: STORE_INT(int64_t, f64_to_i64_sat(buf[i]));
    case APX_DT_I32: STORE_INT(int32_t, (uint32_t)f64_to_i64_sat(buf[i]));
    case APX_DT_U32: STORE_INT(uint32_t, f64_to_i64_sat(buf[i]));
    case APX_DT_I16: STORE_INT(int16_t, (uint16_t)f64_to_i64_sat(buf[i]));
    case APX_DT_U16: STORE_INT(uint16_t, f64_to_i64_sat(buf[i]));
    case APX_DT_I8: STORE_INT(int8_t, (uint8_t)f64_to_i64_sat(buf[i]));
    case APX_DT_U8: STORE_INT(uint8_t, f64_to_i64_sat(buf[i]));
    default: break;
  }
}

static void store_from_i64(const int64_t *buf, int src_u64, void *dst, ApxDType dt, int64_t off,
                           int64_t n) {
  switch (dt) {
    case APX_DT_F64:
      if (src_u64) {
        STORE_INT(double, (uint64_t)buf[i]);
      }
      STORE_INT(double, buf[i]);
    case APX_DT_F32:
      if (src_u64) {
        STORE_INT(float, (uint64_t)buf[i]);
      }
      STORE_INT(float, buf[i]);
    case APX_DT_F16:
    case APX_DT_BF16:
      for (int64_t i = 0; i < n; i++) {
        int neg = !src_u64 && buf[i] < 0;
        uint64_t u = neg ? 0 - (uint64_t)buf[i] : (uint64_t)buf[i];
        float f = u64_to_f32_odd(u, neg);
        ((uint16_t *)dst)[off + i] = dt == APX_DT_F16 ? apx_f32_to_f16(f) : apx_f32_to_bf16(f);
      }
      break;
    case APX_DT_BOOL: STORE_INT(uint8_t, buf[i] != 0);
    case APX_DT_I64: STORE_INT(int64_t, buf[i]);
    case APX_DT_U64: STORE_INT(uint64_t, buf[i]);
    case APX_DT_I32: STORE_INT(int32_t, (uint32_t)buf[i]);
    case APX_DT_U32: STORE_INT(uint32_t, buf[i]);
    case APX_DT_I16: STORE_INT(int16_t, (uint16_t)buf[i]);
    case APX_DT_U16: STORE_INT(uint16_t, buf[i]);
    case APX_DT_I8: STORE_INT(int8_t, (uint8_t)buf[i]);
    case APX_DT_U8: STORE_INT(uint8_t, buf[i]);
    default: break;
  }
}
#undef STORE_INT

ApxStatus apx_cpu_convert_nt(const void *src, ApxDType st, void *dst, ApxDType dt, int64_t n,
                             int nt) {
  size_t ss = apx_dtype_size(st), ds = apx_dtype_size(dt);
  if (ss == 0 || ds == 0 || st == APX_DT_STRING || dt == APX_DT_STRING)
    return APX_STATUS_UNSUPPORTED;
  if (n <= 0) return APX_STATUS_OK;
  if (st == dt) {
    memmove(dst, src, (size_t)n * ss);
    return APX_STATUS_OK;
  }
  int64_t nblk = (n + CONV_BLOCK - 1) / CONV_BLOCK;
  int fast = (st == APX_DT_F32 && (dt == APX_DT_F16 || dt == APX_DT_BF16)) ||
             (dt == APX_DT_F32 && (st == APX_DT_F16 || st == APX_DT_BF16));
  APX_OMP_FOR(n > APX_CPU_PAR_WORK)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t off = b * CONV_BLOCK, len = n - off < CONV_BLOCK ? n - off : CONV_BLOCK;
    if (fast) {
      if (st == APX_DT_F16)
        apx_cpu_f16_to_f32((const uint16_t *)src + off, (float *)dst + off, len);
      else if (st == APX_DT_BF16)
        apx_cpu_bf16_to_f32((const uint16_t *)src + off, (float *)dst + off, len);
      else if (dt == APX_DT_F16)
        apx_cpu_f32_to_f16((const float *)src + off, (uint16_t *)dst + off, len);
      else
        apx_cpu_f32_to_bf16((const float *)src + off, (uint16_t *)dst + off, len);
    } else if (is_float_dt(st)) {
      double buf[CONV_BLOCK];
      load_f64(src, st, off, buf, len);
      store_from_f64(buf, dst, dt, off, len);
    } else {
      int64_t buf[CONV_BLOCK];
      load_i64(src, st, off, buf, len);
      store_from_i64(buf, st == APX_DT_U64, dst, dt, off, len);
    }
  }
  return APX_STATUS_OK;
}

ApxStatus apx_cpu_convert(const void *src, ApxDType st, void *dst, ApxDType dt, int64_t n) {
  return apx_cpu_convert_nt(src, st, dst, dt, n, 1);
}

/* Cast(input) -> output of type attrs->to (the output tensor's dtype). */
APX_CPU_KERNEL(apx_cpu_cast) {
  ApxStatus s;
  int64_t n = apx_tensor_numel(&ins[0]);
  int nt = apx_cpu_threads(ctx);
  s = apx_cpu_convert_nt(ins[0].data, ins[0].dtype, outs[0].data, outs[0].dtype, n, nt);
  if (s) return apx_cpu_fail(ctx, s, APX_MSG_CONVERT, apx_dtype_name(ins[0].dtype),
                             apx_dtype_name(outs[0].dtype));
  return APX_STATUS_OK;
}
