/* shape.h - host-side shape planning for the CUDA kernels: broadcasting, reduction groups,
 * batched matrix products, slices, gathers, convolution and pooling geometry.
 *
 * Plain C (compiled by gcc, no CUDA), so the index arithmetic every CUDA kernel relies on is
 * tested on machines without a GPU (shape_test.cc). The rules are the CPU reference's
 * (kernels/cpu): numpy broadcasting right-aligned, reductions over a set of axes, MatMul's
 * numpy semantics with broadcast batch dims. Every planner returns 0, or -1 with a one-line
 * reason in err (kernels report it as APX_STATUS_BAD_INPUT). */
#ifndef APX_CUDA_SHAPE_H
#define APX_CUDA_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attrs.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_CU_BCAST_MAX_IN 4

/* Output dims (collapsed: size-1 dims dropped, neighbours contiguous in every input merged)
 * and, per input, element strides (0 along broadcast dims). Input k's element for output
 * flat index i is sum_d ((i / prod(dims[d+1..])) % dims[d]) * strides[k][d]. */
typedef struct ApxCuBcast {
  int32_t rank;
  int32_t n_in;
  int64_t dims[APX_MAX_RANK];
  int64_t strides[APX_CU_BCAST_MAX_IN][APX_MAX_RANK];
  int64_t numel;
} ApxCuBcast;

/* ins[0..n_in) broadcast to out_dims[out_rank]; -1 with *bad = the first input that does not
 * broadcast. */
int apx_cu_bcast_init(ApxCuBcast *b, int32_t out_rank, const int64_t *out_dims, int32_t n_in,
                      const int32_t *in_ranks, const int64_t (*in_dims)[APX_MAX_RANK], int *bad);
int apx_cu_bcast_init_t(ApxCuBcast *b, const ApxTensor *out, const ApxTensor *const *ins,
                        int32_t n_in, int *bad);
/* 1 when input k is read contiguously (its element for output i is element i). */
int apx_cu_bcast_is_contig(const ApxCuBcast *b, int k);
/* Offsets into each input of output element i (the reference the device code follows). */
void apx_cu_bcast_offsets(const ApxCuBcast *b, int64_t i, int64_t *off);

/* A sum over the axes in mask of x (dims[rank]), as groups: kept dims kd/ks (row-major
 * order of the output) and reduced dims rd/rs (row-major order of the reduced indices),
 * both with element strides into x. Output o, reduced index r read
 *   x[off(o; kd, ks) + off(r; rd, rs)],  off(i; d, s) = sum_g ((i / prod(d[g+1..])) % d[g]) s[g].
 * inner_reduced: the innermost non-trivial group is reduced (rows contiguous along r);
 * else outputs are contiguous along o. empty: some dim is 0 (sums are 0 when ny > 0). */
typedef struct ApxCuReduce {
  int32_t nk, nr;
  int64_t kd[APX_MAX_RANK], ks[APX_MAX_RANK];
  int64_t rd[APX_MAX_RANK], rs[APX_MAX_RANK];
  int64_t ny, nred;
  int32_t inner_reduced;
  int32_t empty;
} ApxCuReduce;

void apx_cu_reduce_plan(ApxCuReduce *p, const int64_t *dims, int32_t rank, uint32_t mask);
/* Offset of group index i over dims d / strides s (n groups). */
int64_t apx_cu_group_offset(int64_t i, const int64_t *d, const int64_t *s, int32_t n);
/* Mask of the axes of `from` that broadcasting reduces to `to` (ReduceSumTo); -1 when `to`
 * does not broadcast to `from`. */
int64_t apx_cu_sum_to_mask(const ApxTensor *from, const ApxTensor *to);
/* ReduceSum / ReduceMean axes -> mask (all axes for none unless noop_with_empty_axes). */
int apx_cu_reduce_mask(const ApxAttrReduce *a, int32_t rank, uint32_t *mask, char *err,
                       size_t cap);

/* Batched product Y = alpha op(A) @ op(B) (MatMul / FusedMatMul numpy semantics): M, N, K,
 * and the broadcast of the batch dims (units: whole matrices; inputs A, B, Y). reduce: Y
 * has fewer batches than the broadcast (FusedMatMul gradients summing batches). */
typedef struct ApxCuMatMul {
  int64_t M, N, K;
  int32_t ta, tb;
  ApxCuBcast bc;
  int32_t reduce;
  int64_t y_batches;
} ApxCuMatMul;

int apx_cu_matmul_plan(ApxCuMatMul *p, const ApxTensor *A, const ApxTensor *B,
                       const ApxTensor *Y, char *err, size_t cap);

/* One strided-batched GEMM call of a plan (row-major operands). */
typedef struct ApxCuGemmCall {
  int64_t a_off, b_off, y_off;          /* element offsets of the first matrices */
  int64_t batch;                        /* matrices in the call */
  int64_t a_stride, b_stride, y_stride; /* element strides between them (0: shared) */
  int64_t M;                            /* rows of this call (M * batches when folded) */
  int64_t K;                            /* inner dim (K * batches when stacked) */
} ApxCuGemmCall;

/* Splits a non-reducing plan into strided-batched calls: *n_calls calls, call c via
 * apx_cu_matmul_call. A plan whose B is shared by all batches and whose A and Y are
 * contiguous folds into one call with M * batches rows. */
int64_t apx_cu_matmul_n_calls(const ApxCuMatMul *p, int32_t *folded);
void apx_cu_matmul_call(const ApxCuMatMul *p, int64_t c, int32_t folded, ApxCuGemmCall *out);
/* A reducing plan whose A and B hold every batch contiguously, ta = 1, tb = 0 and Y one
 * matrix is one product with K * batches (stacked along K): 1 and the call, else 0. */
int apx_cu_matmul_stacked(const ApxCuMatMul *p, ApxCuGemmCall *out);

/* Slice view: base element offset into `full` and per-dim element strides for `part`
 * (Slice: part = output; SliceGrad: part = dY). */
int apx_cu_slice_view(const ApxAttrSlice *a, const ApxTensor *full, const ApxTensor *part,
                      int64_t *base, int64_t *strides, char *err, size_t cap);

/* Gather: data (outer, A, inner), indices (any shape), out (outer, I..., inner). */
int apx_cu_gather_shape(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                        const ApxTensor *out, int64_t *outer, int64_t *A, int64_t *inner,
                        char *err, size_t cap);

/* Transpose: output dims and source strides (per output dim). */
int apx_cu_transpose_plan(const ApxAttrTranspose *a, const ApxTensor *x, const ApxTensor *y,
                          int64_t *src_strides, char *err, size_t cap);

/* 2-D convolution geometry (Conv, ConvGrad): x (N, C, H, W), w (M, C / G, kh, kw), y (N, M, OH, OW). */
typedef struct ApxCuConv {
  int64_t N, C, H, W, M, OH, OW, G;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
} ApxCuConv;
int apx_cu_conv_geom(const ApxAttrConv *a, const ApxTensor *x, const ApxTensor *w,
                     const ApxTensor *y, ApxCuConv *g, char *err, size_t cap);

/* 2-D pooling geometry (floor / ceil mode output sizes as the CPU reference). */
typedef struct ApxCuPool {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int32_t storage_order, count_include_pad;
} ApxCuPool;
int apx_cu_pool_geom(const ApxAttrPool *a, const ApxTensor *x, const ApxTensor *y, ApxCuPool *g,
                     char *err, size_t cap);

/* "[2,3,4]" into buf; returns buf. */
const char *apx_cu_dims_str(const ApxTensor *t, char *buf, size_t cap);
int apx_cu_same_dims(const ApxTensor *a, const ApxTensor *b);
int64_t apx_cu_prod(const int64_t *dims, int32_t from, int32_t to);

/* Multi-tensor launches (UnscaleCheck, OptimizerStep; apex multi_tensor_apply): tensors
 * are cut into chunks of `chunk` elements; launch l covers tensors [first, first + count)
 * and its chunks, at most max_tensors tensors and max_chunks chunks per launch. A chunk
 * is identified by (tensor, chunk index within it). */
typedef struct ApxCuMtLaunch {
  int32_t first, count;  /* tensors */
  int64_t chunk0;        /* global index of the launch's first chunk */
  int64_t n_chunks;
} ApxCuMtLaunch;
/* Fills out[] (capacity cap) and returns the number of launches (> cap: call again with
 * more room); sizes[i] elements in tensor i. Chunks are numbered globally in tensor order,
 * so per-chunk partial results sum in a fixed order. */
int64_t apx_cu_mt_plan(const int64_t *sizes, int32_t n, int64_t chunk, int32_t max_tensors,
                       int64_t max_chunks, ApxCuMtLaunch *out, int64_t cap);
/* Total chunks of n tensors. */
int64_t apx_cu_mt_total_chunks(const int64_t *sizes, int32_t n, int64_t chunk);

#ifdef __cplusplus
}
#endif
#endif
