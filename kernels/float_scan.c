/* float_scan.c - fp32 magnitude scan by bit pattern (float_scan.h). */
#include "kernels/float_scan.h"

#include <string.h>

#define ABS_MASK 0x7fffffff
#define INF_BITS 0x7f800000

/* Magnitude bits as a signed lane (they fit in 31 bits, so signed compares order them; SSE2
 * has only signed 32-bit compares); NaN patterns become 0 (skipped). */
static int32_t mag(int32_t u) {
  u &= ABS_MASK;
  return u > INF_BITS ? 0 : u;
}

ApxF32Scan apx_f32_scan(const float *x, int64_t n, float limit) {
  int32_t lim;
  memcpy(&lim, &limit, 4);
  lim &= ABS_MASK; /* a NaN limit is above every pattern mag() gives: nothing is over */
  int32_t big = 0, over = 0;
  int64_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
  typedef int32_t v4 __attribute__((vector_size(16)));
  enum { LANES = 4, ACC = 4 }; /* four accumulators keep the max chains independent */
  const v4 absm = {ABS_MASK, ABS_MASK, ABS_MASK, ABS_MASK};
  const v4 inf = {INF_BITS, INF_BITS, INF_BITS, INF_BITS};
  const v4 vl = {lim, lim, lim, lim};
  v4 vmax[ACC], vover[ACC];
  for (int a = 0; a < ACC; a++) vmax[a] = vover[a] = (v4){0, 0, 0, 0};
  for (; i + LANES * ACC <= n; i += LANES * ACC)
    for (int a = 0; a < ACC; a++) {
      v4 u;
      memcpy(&u, x + i + a * LANES, sizeof u);
      u &= absm;
      u &= ~(u > inf);       /* NaN -> 0 (a compare gives -1 where true) */
      vover[a] |= u > vl;
      v4 gt = u > vmax[a];
      vmax[a] = (u & gt) | (vmax[a] & ~gt);
    }
  for (int a = 0; a < ACC; a++)
    for (int k = 0; k < LANES; k++) {
      over |= vover[a][k];
      if (vmax[a][k] > big) big = vmax[a][k];
    }
#endif
  for (; i < n; i++) {
    int32_t u;
    memcpy(&u, &x[i], 4);
    u = mag(u);
    over |= u > lim;
    if (u > big) big = u;
  }
  return (ApxF32Scan){(uint32_t)big, over != 0};
}
