/* lt_plan.h - the cuBLASLt products a plan's kernels issue, derived on the host from each
 * kernel's op, attributes and device tensor views (plain C, no CUDA: tested on CPU).
 *
 * matmul.cu caches cuBLASLt's descriptors and heuristic result per distinct product: its
 * shape, transposes, types, batch strides, epilogue and the alignment of each operand
 * (ApxLtKey). The cuda backend fills that cache when a plan is loaded (apx_cuda_lt_prefill
 * over apx_lt_plan_products), so the first training step makes no heuristic query either.
 * What is derived here mirrors matmul.cu's first attempt for each op:
 *   Gemm            one product; the BIAS epilogue for a bias row with beta 1
 *   MatMul, FusedMatMul  one product per strided-batched call (kernels/cuda/shape.h), the
 *                   stacked product of a batch-summing gradient, or one fp32 product per
 *                   batch accumulated into a temporary
 *   FusedDense      the epilogue product (BIAS, RELU, RELU_BIAS, GELU*), or the fp32 product
 *                   into a temporary where no epilogue computes the op
 *   FusedDenseGrad  dX's and dW's products (g = dY, or a temporary for an activation)
 * Temporaries (stream-ordered allocations) are taken as 256-byte aligned. A product not
 * derived here (cuBLASLt refused the first attempt and a fallback ran, a batch split into
 * single products) still gets its entry at its first call, as before. */
#ifndef APX_CUDA_LT_PLAN_H
#define APX_CUDA_LT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxLtEpi {
  APX_LT_EPI_DEFAULT = 0,
  APX_LT_EPI_BIAS,
  APX_LT_EPI_RELU,
  APX_LT_EPI_RELU_BIAS,
  APX_LT_EPI_GELU,
  APX_LT_EPI_GELU_BIAS,
  APX_LT_EPI_GELU_AUX,
  APX_LT_EPI_GELU_AUX_BIAS,
} ApxLtEpi;

/* What identifies a product for the cache (row-major D = op(A) op(B), as matmul.cu's LtCall). */
typedef struct ApxLtKey {
  int32_t ta, tb;           /* transposes of A and B */
  int32_t ab, cd;           /* ApxDType of A/B and of C/D */
  int32_t epi;              /* ApxLtEpi */
  int32_t has_bias, has_aux, pad;
  int64_t M, N, K, batch, sa, sb, sd, aux_ld; /* aux_ld 0 without aux */
  uint32_t al[4];           /* alignment in bytes (power of two, at most 256) of cuBLASLt's
                               A (our B), B (our A), C and D */
} ApxLtKey;

typedef struct ApxLtProduct {
  ApxLtKey key;
  const void *bias;         /* the epilogue's device pointers (descriptor attributes) */
  void *aux;
} ApxLtProduct;

/* One kernel as the executor launches it. */
typedef struct ApxLtCallView {
  ApxOp op;
  const void *attrs;
  const ApxTensor *ins;
  int32_t n_in;
  const ApxTensor *outs;
  int32_t n_out;
} ApxLtCallView;

/* The largest power of two, at most 256, dividing address p (cuBLASLt's alignment hints). */
uint32_t apx_lt_align(const void *p);

/* The products one kernel issues first (see the file comment) into out[0 .. cap); returns how
 * many it issues (more than cap: only cap written), 0 for an op without cuBLASLt products or
 * operands the entry would refuse (types, empty shapes). */
int64_t apx_lt_products_of(const ApxLtCallView *k, ApxLtProduct *out, int64_t cap);

/* The distinct products of n kernels, first occurrence order, in *out (malloc'd, caller frees;
 * NULL when there are none); returns their count, or -1 when out of memory. */
int64_t apx_lt_plan_products(const ApxLtCallView *k, int32_t n, ApxLtProduct **out);

#ifdef __cplusplus
}
#endif
#endif
