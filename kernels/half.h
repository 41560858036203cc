/* half.h - fp16 / bf16 <-> fp32 scalar conversions, shared by CPU and CUDA code.
 *
 * Semantics (DESIGN.md 12): half values are 16-bit patterns; math happens in fp32; a store
 * rounds to nearest-even. fp16 overflow (|x| >= 65520) gives +-inf exactly as the GPU's
 * __float2half_rn does; values below the smallest subnormal round to signed zero; NaN stays
 * NaN (quiet). Marked host+device so the CPU tests exercise the GPU's arithmetic. */
#ifndef APX_HALF_H
#define APX_HALF_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define APX_HD __host__ __device__
#else
#define APX_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define APX_F16_MAX 65504.0f
#define APX_F16_MIN_NORMAL 6.103515625e-05f      /* 2^-14 */
#define APX_F16_MIN_SUBNORMAL 5.9604644775390625e-08f /* 2^-24 */
#define APX_F16_EPS 9.765625e-04f                /* 2^-10 */
#define APX_BF16_MAX 3.3895313892515355e+38f
#define APX_BF16_MIN_NORMAL 1.1754943508222875e-38f
#define APX_BF16_EPS 7.8125e-03f                 /* 2^-7 */

static inline APX_HD uint32_t apx_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

static inline APX_HD float apx_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

static inline APX_HD float apx_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    /* zero or subnormal: mant * 2^-24, exact in fp32 */
    float v = (float)mant * APX_F16_MIN_SUBNORMAL;
    return sign ? -v : v;
  }
  if (exp == 31) return apx_bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf / nan */
  return apx_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline APX_HD uint16_t apx_f32_to_f16(float f) {
  uint32_t u = apx_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  uint16_t out;
  if (a >= 0x47800000u) {            /* >= 65536, inf or nan */
    out = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (a < 0x38800000u) {      /* below 2^-14: fp16 subnormal or zero */
    /* Adding 0.5f aligns the value so the fp32 adder's round-to-nearest-even does the
     * rounding to a multiple of 2^-24; the low bits are then the fp16 mantissa. */
    float shifted = apx_bits_f32(a) + 0.5f;
    out = (uint16_t)(apx_f32_bits(shifted) - 0x3f000000u);
  } else {                           /* normal range; a carry may produce inf (>= 65520) */
    uint32_t odd = (a >> 13) & 1u;
    a += 0xc8000fffu + odd;          /* rebias exponent (-112 << 23) and round */
    out = (uint16_t)(a >> 13);
  }
  return (uint16_t)(out | sign);
}

static inline APX_HD float apx_bf16_to_f32(uint16_t h) { return apx_bits_f32((uint32_t)h << 16); }

static inline APX_HD uint16_t apx_f32_to_bf16(float f) {
  uint32_t u = apx_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet nan */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Round an fp32 value through the half type t16 (1 = fp16, 0 = bf16) and back: what a
 * store to half followed by a load gives. */
static inline APX_HD float apx_round_f16(float f) { return apx_f16_to_f32(apx_f32_to_f16(f)); }
static inline APX_HD float apx_round_bf16(float f) { return apx_bf16_to_f32(apx_f32_to_bf16(f)); }

#ifdef __cplusplus
}
#endif
#endif
