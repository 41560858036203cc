/* bcast.cuh - numpy broadcasting of up to 3 inputs as a kernel argument (the device side of
 * kernels/shape.h's ApxBcast), shared by the elementwise kernel files (elementwise.cu,
 * compare.cu). Not part of the public API. */
#ifndef APX_CUDA_BCAST_CUH
#define APX_CUDA_BCAST_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/shape.h"

/* Broadcast geometry of up to 3 inputs as a kernel argument (ApxBcast). */
struct BcastArgs {
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
  int64_t st[3][APX_MAX_RANK];
};

static inline BcastArgs bcast_args(const ApxBcast *b) {
  BcastArgs a;
  a.rank = b->rank;
  for (int d = 0; d < APX_MAX_RANK; d++) {
    a.dims[d] = b->dims[d];
    for (int k = 0; k < 3; k++) a.st[k][d] = k < b->n_in ? b->strides[k][d] : 0;
  }
  return a;
}

static __device__ __forceinline__ void bcast_off(const BcastArgs &g, int64_t i, int64_t *o0,
                                                 int64_t *o1, int64_t *o2) {
  int64_t a = 0, b = 0, c = 0;
  for (int d = g.rank - 1; d >= 0; d--) {
    int64_t id = i % g.dims[d];
    i /= g.dims[d];
    a += id * g.st[0][d];
    b += id * g.st[1][d];
    c += id * g.st[2][d];
  }
  *o0 = a;
  *o1 = b;
  if (o2) *o2 = c;
}

#endif
