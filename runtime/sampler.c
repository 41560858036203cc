/* sampler.c - batch sample indices (sampler.h). */
#include "runtime/sampler.h"

#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

typedef struct Xoshiro {
  uint64_t s[4];
} Xoshiro;

static uint64_t xoshiro_next(Xoshiro *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

/* Uniform in [0, bound) without bias (Lemire's multiply-and-reject). */
static uint64_t bounded(Xoshiro *r, uint64_t bound) {
  unsigned __int128 m = (unsigned __int128)xoshiro_next(r) * bound;
  uint64_t lo = (uint64_t)m;
  if (lo < bound) {
    uint64_t thresh = (0 - bound) % bound;
    while (lo < thresh) {
      m = (unsigned __int128)xoshiro_next(r) * bound;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

void apx_sampler_permutation(uint64_t seed, int64_t e, int64_t n, int64_t *out) {
  uint64_t x = seed ^ ((uint64_t)e * 0xd1b54a32d192ed03ull);
  Xoshiro r;
  for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
  for (int64_t i = 0; i < n; i++) out[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)bounded(&r, (uint64_t)i + 1);
    int64_t t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
}

int apx_sampler_init(ApxSampler *s, const ApxSamplerConfig *cfg, ApxDiag *d) {
  memset(s, 0, sizeof *s);
  s->perm_epoch = -1;
  if (cfg->n_samples < 1 || cfg->batch < 1 || cfg->world < 1 || cfg->rank < 0 ||
      cfg->rank >= cfg->world)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "sampler: bad configuration (%lld samples, batch %lld, rank %d of %d)",
                          (long long)cfg->n_samples, (long long)cfg->batch, cfg->rank, cfg->world);
  s->cfg = *cfg;
  if (cfg->order == APX_ORDER_SHUFFLE) {
    s->perm = malloc((size_t)cfg->n_samples * sizeof *s->perm);
    if (!s->perm) return apx_diag_error(d, APX_EXIT_RUNTIME, "sampler: out of memory");
  }
  return 0;
}

void apx_sampler_free(ApxSampler *s) {
  free(s->perm);
  memset(s, 0, sizeof *s);
}

void apx_sampler_position(const ApxSampler *s, int64_t k, int64_t *epoch, int64_t *pos) {
  const ApxSamplerConfig *c = &s->cfg;
  /* k * world * batch may exceed int64 only after ~10^18 samples */
  unsigned __int128 p = (unsigned __int128)(uint64_t)k * (uint64_t)c->world * (uint64_t)c->batch;
  *epoch = (int64_t)(p / (uint64_t)c->n_samples);
  *pos = (int64_t)(p % (uint64_t)c->n_samples);
}

int apx_sampler_batch(ApxSampler *s, int64_t k, int64_t *out, ApxDiag *d) {
  const ApxSamplerConfig *c = &s->cfg;
  int64_t e, pos;
  apx_sampler_position(s, k, &e, &pos);
  /* skip the lower ranks' slices */
  unsigned __int128 q = (unsigned __int128)(uint64_t)pos + (uint64_t)c->rank * (uint64_t)c->batch;
  e += (int64_t)(q / (uint64_t)c->n_samples);
  pos = (int64_t)(q % (uint64_t)c->n_samples);
  for (int64_t j = 0; j < c->batch; j++) {
    if (c->order == APX_ORDER_FILE) {
      out[j] = pos;
    } else {
      if (s->perm_epoch != e) {
        apx_sampler_permutation(c->seed, e, c->n_samples, s->perm);
        s->perm_epoch = e;
      }
      out[j] = s->perm[pos];
    }
    if (++pos == c->n_samples) {
      pos = 0;
      e++;
    }
  }
  (void)d;
  return 0;
}
