/* sampler.h - which samples make each batch (DESIGN.md 13: --data, --no-shuffle, mpirun).
 *
 * The data is a stream of epochs; epoch e visits all n samples once, in file order
 * (--no-shuffle) or in a permutation drawn from (seed, e). Position p of the stream is
 * sample order_e[p mod n] with e = p / n. Global batch k (one micro-batch: each optimizer
 * step with --accumulate K consumes K consecutive batches) covers stream positions
 * [k W B, (k+1) W B) for W ranks with per-rank batch B; rank r takes the slice
 * [k W B + r B, k W B + (r+1) B). So batches wrap across epoch boundaries, one process
 * with batch W B sees exactly the samples W ranks see together, and the whole sampler state
 * is the batch counter k (plus seed and shuffle flag).
 *
 * The permutation: Fisher-Yates driven by xoshiro256** seeded through splitmix64 from
 * (seed, epoch); integer-only, so every platform draws the same order. */
#ifndef APX_SAMPLER_H
#define APX_SAMPLER_H

#include <stdint.h>

#include "ir/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxSampleOrder { APX_ORDER_SHUFFLE = 0, APX_ORDER_FILE = 1 } ApxSampleOrder;

typedef struct ApxSamplerConfig {
  int64_t n_samples;   /* >= 1 */
  int64_t batch;       /* per-rank batch B >= 1 */
  int32_t rank, world; /* 0 / 1 for one process */
  uint64_t seed;
  ApxSampleOrder order;
} ApxSamplerConfig;

typedef struct ApxSampler {
  ApxSamplerConfig cfg;
  int64_t *perm;       /* order of perm_epoch (shuffle only) */
  int64_t perm_epoch;  /* -1: none yet */
} ApxSampler;

/* Returns 0 or -1 (bad configuration: code 2; out of memory: 1). */
int apx_sampler_init(ApxSampler *s, const ApxSamplerConfig *cfg, ApxDiag *d);
void apx_sampler_free(ApxSampler *s);

/* This rank's sample indices of global batch k (k >= 0): out[0 .. batch-1]. Returns 0 or -1
 * (out of memory). */
int apx_sampler_batch(ApxSampler *s, int64_t k, int64_t *out, ApxDiag *d);

/* Where global batch k starts in the stream: epoch and position inside that epoch's order. */
void apx_sampler_position(const ApxSampler *s, int64_t k, int64_t *epoch, int64_t *pos);

/* The permutation of epoch e (n entries) for seed, as the sampler draws it. */
void apx_sampler_permutation(uint64_t seed, int64_t e, int64_t n, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
