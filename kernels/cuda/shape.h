/* shape.h - host-side planning only the CUDA kernels need, on top of the planning every
 * backend shares (kernels/shape.h: broadcasting, reduction groups, batched products, slices,
 * gathers, transposes, convolution and pooling geometry): strided-batched GEMM calls of a
 * batched product, multi-tensor launches, the CUDA kernels' index types.
 *
 * Plain C (compiled by gcc, no CUDA), so the index arithmetic every CUDA kernel relies on is
 * tested on machines without a GPU (shape_test.cc). Checking functions return 0, or -1 with
 * a one-line reason in err (kernels report it as APX_STATUS_BAD_INPUT). */
#ifndef APX_CUDA_SHAPE_H
#define APX_CUDA_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/shape.h"

#ifdef __cplusplus
extern "C" {
#endif

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
int64_t apx_cu_matmul_n_calls(const ApxMatMulPlan *p, int32_t *folded);
void apx_cu_matmul_call(const ApxMatMulPlan *p, int64_t c, int32_t folded, ApxCuGemmCall *out);
/* A reducing plan whose A and B hold every batch contiguously, ta = 1, tb = 0 and Y one
 * matrix is one product with K * batches (stacked along K): 1 and the call, else 0. */
int apx_cu_matmul_stacked(const ApxMatMulPlan *p, ApxCuGemmCall *out);

/* Gather (apx_gather_shape) for the CUDA kernels, which read int32 and int64 indices only:
 * other index types are refused ("not supported yet on cuda"; an axis out of range is
 * reported first). */
int apx_cu_gather_shape(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                        const ApxTensor *out, int64_t *outer, int64_t *A, int64_t *inner,
                        char *err, size_t cap);

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
