/* index_plan.h - the index arithmetic of the v1.1 data-movement and indexing ops (Pad,
 * Tile, Trilu, GatherElements, GatherND and their gradients), shared by the CPU reference
 * (kernels/cpu/indexing.c) and the CUDA kernels (kernels/cuda/indexing.cu) so the two cannot
 * drift apart (STYLE.md pitfalls):
 *   - per-element maps as static inline host+device functions (APX_HD): which input
 *     coordinate a Pad output coordinate reads, and the output coordinates that read one
 *     input coordinate (PadGrad's preimages, in increasing order);
 *   - host-side planners that check a kernel's tensors against its attributes and return
 *     0, APX_SHAPE_BAD or APX_SHAPE_UNSUPPORTED (kernels/shape.h) with a one-line reason.
 * Index values (GatherElements, GatherND) are not read by the planners; kernels check them. */
#ifndef APX_KERNELS_INDEX_PLAN_H
#define APX_KERNELS_INDEX_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attrs.h"
#include "kernels/half.h" /* APX_HD */
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Pad ----------------------------------------------------------------------------- */

/* Input coordinate read by output coordinate o along one dim (n input elements, b elements
 * of begin padding, negative = cropped), or -1 where constant mode writes the value. Edge
 * clamps; reflect mirrors without repeating the edge (period 2 (n - 1); n == 1 repeats the
 * element). n == 0 outside constant mode is refused by apx_pad_plan. */
static inline APX_HD int64_t apx_pad_src(int32_t mode, int64_t o, int64_t n, int64_t b) {
  int64_t j = o - b;
  if (j >= 0 && j < n) return j;
  if (mode == APX_PAD_CONSTANT || n <= 0) return -1;
  if (mode == APX_PAD_EDGE || n == 1) return j < 0 ? 0 : n - 1;
  int64_t p = 2 * (n - 1);
  j %= p;
  if (j < 0) j += p;
  return j < n ? j : p - j;
}

/* Smallest t >= lo with t = r (mod p), p > 0 (r any). */
static inline APX_HD int64_t apx_pad_next_congruent(int64_t lo, int64_t r, int64_t p) {
  int64_t d = (r - lo) % p;
  if (d < 0) d += p;
  return lo + d;
}

/* PadGrad: the smallest output coordinate o > prev (prev = -1 for the first) of an output dim
 * of `out` elements that reads input coordinate i (apx_pad_src(mode, o, n, b) == i), or -1
 * when there is none. Increasing in o, so a caller walking them sums in output order. */
static inline APX_HD int64_t apx_pad_next_pre(int32_t mode, int64_t i, int64_t n, int64_t b,
                                             int64_t out, int64_t prev) {
  int64_t lo = prev + 1, o;
  if (lo >= out) return -1;
  if (mode == APX_PAD_CONSTANT || (mode == APX_PAD_EDGE && n > 1 && i > 0 && i < n - 1)) {
    o = i + b;
    return o >= lo && o < out ? o : -1;
  }
  if (mode == APX_PAD_EDGE || n == 1) { /* an interval of output coordinates */
    int64_t first = i == 0 ? 0 : i + b, last = i == n - 1 ? out - 1 : i + b;
    o = lo > first ? lo : first;
    return o <= last && o < out ? o : -1;
  }
  /* reflect, n > 1: o - b = i or p - i (mod p) */
  int64_t p = 2 * (n - 1);
  o = apx_pad_next_congruent(lo, b + i, p);
  if (i > 0 && i < n - 1) {
    int64_t o2 = apx_pad_next_congruent(lo, b + p - i, p);
    if (o2 < o) o = o2;
  }
  return o < out ? o : -1;
}

/* Pad / PadGrad: x (the unpadded tensor) and y (the padded one) of one dtype, y's dims
 * = x's + begins + ends; edge and reflect need a non-empty input dim wherever the output
 * dim is not empty. */
int apx_pad_plan(const ApxAttrPad *a, const ApxTensor *x, const ApxTensor *y, char *err,
                 size_t cap);

/* ---- Tile, Trilu --------------------------------------------------------------------- */

/* Tile: y's dims = x's dims * repeats (one dtype). */
int apx_tile_plan(const ApxAttrTile *a, const ApxTensor *x, const ApxTensor *y, char *err,
                  size_t cap);

/* Trilu: x and y of one shape and dtype, rank >= 2: batch (the leading dims' product), rows,
 * cols (the last two). */
int apx_trilu_plan(const ApxTensor *x, const ApxTensor *y, int64_t *batch, int64_t *rows,
                   int64_t *cols, char *err, size_t cap);

/* Trilu's kept range of row i: columns [*lo, *hi) (j - i >= k above, j - i <= k below). */
static inline APX_HD void apx_trilu_row(int32_t upper, int64_t k, int64_t i, int64_t cols,
                                        int64_t *lo, int64_t *hi) {
  int64_t a = upper ? i + k : 0, e = upper ? cols : i + k + 1;
  if (a < 0) a = 0;
  if (a > cols) a = cols;
  if (e > cols) e = cols;
  if (e < a) e = a;
  *lo = a;
  *hi = e;
}

/* ---- GatherElements ------------------------------------------------------------------- */

/* data, indices (int32 / int64) and out (indices' dims, data's dtype) of one rank; every dim
 * of indices but axis at most data's. */
int apx_gather_elements_plan(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                             const ApxTensor *out, char *err, size_t cap);

/* ---- GatherND ------------------------------------------------------------------------- */

/* data viewed as (batches, data.dims[b .. b + m), slice), indices as (batches, n, m), out /
 * dY as (batches, n, slice). An index tuple t picks data element offset
 * batch * batch_stride + sum_k t_k * strides[k] (after negative entries are normalized
 * against dims[k]) and the `slice` elements after it. */
typedef struct ApxGatherNDPlan {
  int64_t batches, n, m, slice, batch_stride;
  int64_t dims[APX_MAX_RANK], strides[APX_MAX_RANK];
} ApxGatherNDPlan;

int apx_gather_nd_plan(int64_t batch_dims, const ApxTensor *data, const ApxTensor *idx,
                       const ApxTensor *out, ApxGatherNDPlan *p, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
