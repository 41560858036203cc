/* philox.h - counter-based Philox 4x32-10 RNG (Salmon et al., SC'11), shared by every
 * backend so Dropout and RandomUniformLike draw the same stream on CPU and GPU (DESIGN.md 2).
 *
 * Exact mapping used by Dropout (the contract every backend implements):
 *   key     k = { lo32(seed), hi32(seed) }     seed = attrs->seed when attrs->has_seed,
 *                                              else the run's seed (ApxCpuCtx.seed)
 *   counter c = { lo32(b), hi32(b), lo32(step), lo32(rng_stream) }
 *             where b = i / 4 is the block of element i (flat row-major index of the
 *             node's data tensor), step the training step, rng_stream the node's stream id
 *   word    w = philox4x32_10(c, k)[i % 4]
 *   uniform u = (float)(w >> 8) * 2^-24           exactly representable, in [0, 1)
 *   keep      = u >= ratio                        (fp32 comparison)
 *   output    = keep ? x * (1 / (1 - ratio)) : 0  (the scale computed in the math type)
 * Steps and stream ids wrap at 2^32; a tensor may have up to 2^66 elements.
 *
 * The block function matches Random123's philox4x32_10 (checked against its known-answer
 * vectors in the tests). */
#ifndef APX_PHILOX_H
#define APX_PHILOX_H

#include <stdint.h>

#include "kernels/half.h" /* APX_HD */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxPhilox4 {
  uint32_t v[4];
} ApxPhilox4;

#define APX_PHILOX_M0 0xD2511F53u
#define APX_PHILOX_M1 0xCD9E8D57u
#define APX_PHILOX_W0 0x9E3779B9u
#define APX_PHILOX_W1 0xBB67AE85u

/* One Philox 4x32 round. */
static inline APX_HD ApxPhilox4 apx_philox_round(ApxPhilox4 c, uint32_t k0, uint32_t k1) {
  uint64_t p0 = (uint64_t)APX_PHILOX_M0 * c.v[0];
  uint64_t p1 = (uint64_t)APX_PHILOX_M1 * c.v[2];
  ApxPhilox4 r;
  r.v[0] = (uint32_t)(p1 >> 32) ^ c.v[1] ^ k0;
  r.v[1] = (uint32_t)p1;
  r.v[2] = (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1;
  r.v[3] = (uint32_t)p0;
  return r;
}

/* Philox 4x32 with 10 rounds: four random words for counter c under key (k0, k1). */
static inline APX_HD ApxPhilox4 apx_philox4x32_10(ApxPhilox4 c, uint32_t k0, uint32_t k1) {
  for (int i = 0; i < 9; i++) {
    c = apx_philox_round(c, k0, k1);
    k0 += APX_PHILOX_W0;
    k1 += APX_PHILOX_W1;
  }
  return apx_philox_round(c, k0, k1);
}

/* The four words of block b of a node's draw at `step` (mapping above). */
static inline APX_HD ApxPhilox4 apx_philox_block(uint64_t seed, uint64_t rng_stream, int64_t step,
                                                 uint64_t b) {
  ApxPhilox4 c;
  c.v[0] = (uint32_t)b;
  c.v[1] = (uint32_t)(b >> 32);
  c.v[2] = (uint32_t)(uint64_t)step;
  c.v[3] = (uint32_t)rng_stream;
  return apx_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in [0, 1) from one word: 24 high bits, exact in fp32. */
static inline APX_HD float apx_philox_uniform(uint32_t w) {
  return (float)(w >> 8) * 5.9604644775390625e-08f; /* 2^-24 */
}

/* Dropout keep decision for element i (mapping above). */
static inline APX_HD int apx_dropout_keep(uint64_t seed, uint64_t rng_stream, int64_t step,
                                          uint64_t i, float ratio) {
  ApxPhilox4 r = apx_philox_block(seed, rng_stream, step, i >> 2);
  return apx_philox_uniform(r.v[i & 3u]) >= ratio;
}

/* RandomUniformLike (attrs.h ApxAttrRandomUniform): element i of a node's draw,
 * low + (high - low) * u with u the uniform of element i under the Dropout mapping above, in
 * fp32 (the _f64 form in double from the same u, for fp64 outputs). */
static inline APX_HD float apx_random_uniform_f32(uint64_t seed, uint64_t rng_stream, int64_t step,
                                                  uint64_t i, float low, float high) {
  ApxPhilox4 r = apx_philox_block(seed, rng_stream, step, i >> 2);
  return low + (high - low) * apx_philox_uniform(r.v[i & 3u]);
}
static inline APX_HD double apx_random_uniform_f64(uint64_t seed, uint64_t rng_stream, int64_t step,
                                                   uint64_t i, double low, double high) {
  ApxPhilox4 r = apx_philox_block(seed, rng_stream, step, i >> 2);
  return low + (high - low) * (double)apx_philox_uniform(r.v[i & 3u]);
}

/* The key of a RandomUniformLike node: its seed attribute truncated to an integer when it
 * has one, else the run's seed. kernels/validate.c refuses a seed outside int64's range (NaN
 * included); such a seed gives key 0 here rather than an undefined conversion. */
static inline APX_HD uint64_t apx_random_key(int32_t has_seed, float seed, uint64_t run_seed) {
  if (!has_seed) return run_seed;
  if (!(seed > -9.2e18f && seed < 9.2e18f)) return 0;
  return (uint64_t)(int64_t)seed;
}

#ifdef __cplusplus
}
#endif
#endif
