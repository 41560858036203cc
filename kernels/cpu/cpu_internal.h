/* cpu_internal.h - shared helpers of the CPU kernel families (not part of the public API).
 *
 * Kernel functions all have the ApxCpuKernel signature. dispatch.c maps ops to them and,
 * for "math" kernels, normalizes dtypes first (see dispatch.c): every float tensor arrives
 * as the op's math type (F32, or F64 when any float tensor of the call is F64), every
 * non-bool integer tensor as I64, bool as bool. Half tensors are thus loaded to fp32
 * before the kernel runs and rounded (RNE) once after it. "raw" kernels (data movement)
 * see the tensors as given and work by element size. */
#ifndef APX_CPU_INTERNAL_H
#define APX_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/shape.h"

typedef ApxStatus (*ApxCpuKernel)(ApxCpuCtx *ctx, ApxOp op, const void *attrs,
                                  const ApxTensor *ins, int n_in, ApxTensor *outs, int n_out);

/* ---- errors, threads, shapes ------------------------------------------------------ */

/* Writes the detail to ctx->err and returns st (dispatch prefixes the op name). */
ApxStatus apx_cpu_fail(ApxCpuCtx *ctx, ApxStatus st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* OpenMP thread count for ctx (ctx->n_threads, or the OpenMP default when <= 0). */
int apx_cpu_threads(const ApxCpuCtx *ctx);
/* Sets OpenBLAS's thread count (only when it changes). */
void apx_cpu_blas_threads(int nt);

/* Elements per OpenMP work chunk for elementwise loops (and the fixed chunk of chunked sums). */
#define APX_CPU_CHUNK 16384
/* Least work (elements a loop reads and writes, roughly) for which a loop runs as an OpenMP
 * parallel region: below it (~50 us of simple work) waking the team and joining it (tens of
 * microseconds with sleeping threads in a VM; docs/cpu_kernels.md "Threads") outweigh the
 * work. Only the threading depends on it, never the bits. */
#define APX_CPU_PAR_WORK (1 << 17)

/* Functions whose loops are worth wider vectors than the baseline x86-64 build (SSE2): gcc
 * clones them for AVX-512 and AVX2 (target_clones; the dynamic loader picks one for the CPU
 * once). Every clone does the same arithmetic in the same order (no FMA contraction:
 * -ffp-contract=off), so the bits do not depend on the CPU. No OpenMP inside (call them from
 * the parallel loops). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define APX_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define APX_VEC_CLONES
#endif

#define APX_PRAGMA(x) _Pragma(#x)
/* Parallel-for over an independent loop; `nt` must be an int variable in scope. Each
 * iteration writes only its own outputs, so results do not depend on the thread count. */
#define APX_OMP_FOR(cond) APX_PRAGMA(omp parallel for num_threads(nt) schedule(static) if (cond))

/* Dims helpers (apx_dims_prod, apx_dims_strides, apx_same_dims, apx_dims_str) and the shape
 * planning shared with the CUDA kernels (broadcasting, reductions, products, geometry) are
 * kernels/shape.h's; kernels pass ctx->err to a planner and return apx_shape_status(rc). */

/* [*lo, *hi): the o in [0, n) with o * s + off in [0, len) (s >= 1; lo == hi when none).
 * Convolution and pooling split output rows into these (no bounds checks) and the border. */
static inline void apx_cpu_inside(int64_t len, int64_t n, int64_t s, int64_t off, int64_t *lo,
                                  int64_t *hi) {
  int64_t a, b;
  if (s == 1) { /* the common case, without divisions */
    a = off >= 0 ? 0 : -off;
    b = len - off > 0 ? len - off : 0;
  } else {
    a = off >= 0 ? 0 : (-off + s - 1) / s;
    b = len - 1 - off >= 0 ? (len - 1 - off) / s + 1 : 0;
  }
  if (b > n) b = n;
  *lo = a < b ? a : b;
  *hi = b;
}

/* Present (data != NULL) input/output i. */
static inline int apx_cpu_has(const ApxTensor *t, int n, int i) {
  return i < n && t[i].data != NULL;
}

/* Required inputs and outputs are present: kernels/validate.h checked every call. */

/* Integer element i of an index tensor (any integer dtype, bool as 0/1). */
int64_t apx_cpu_index_at(const ApxTensor *t, int64_t i);

/* ---- numpy multidirectional broadcasting (ApxBcast: kernels/shape.h) ----------------- */

/* Innermost strides (0 or 1) of input k. */
static inline int64_t apx_bcast_istride(const ApxBcast *b, int k) {
  return b->rank ? b->strides[k][b->rank - 1] : 0;
}

/* Runs the statements in ... over the output of bc in segments (runs along the innermost
 * dim), chunked over OpenMP threads (`nt` in scope). Inside: seg_i (flat output index of the
 * segment start), seg_len, seg_off[k] (offset into input k at seg_i); along a segment input
 * k advances by apx_bcast_istride(bc, k) (0 or 1). */
#define APX_BCAST_SEGMENTS(bc, ...)                                                       \
  do {                                                                                    \
    const ApxBcast *bc_ = (bc);                                                           \
    int64_t n_ = bc_->numel, nchunk_ = (n_ + APX_CPU_CHUNK - 1) / APX_CPU_CHUNK;          \
    APX_OMP_FOR(n_ > APX_CPU_PAR_WORK && nchunk_ > 1)                                     \
    for (int64_t c_ = 0; c_ < nchunk_; c_++) {                                            \
      int64_t seg_i = c_ * APX_CPU_CHUNK;                                                 \
      int64_t end_ = seg_i + APX_CPU_CHUNK < n_ ? seg_i + APX_CPU_CHUNK : n_;             \
      while (seg_i < end_) {                                                              \
        int64_t seg_off[APX_BCAST_MAX_IN];                                                \
        apx_bcast_offsets(bc_, seg_i, seg_off);                                           \
        int64_t seg_len = bc_->inner - seg_i % bc_->inner;                                \
        if (seg_len > end_ - seg_i) seg_len = end_ - seg_i;                               \
        __VA_ARGS__;                                                                      \
        seg_i += seg_len;                                                                 \
      }                                                                                   \
    }                                                                                     \
  } while (0)

/* One segment of a binary elementwise op: po[j] = EXPR(x = pa[j * sa], y = pb[j * sb]) for
 * j < len, specialized on the strides (0 or 1) so the loops vectorize. */
#define APX_BIN_SEGMENT(TA, TB, pa, pb, po, sa, sb, len, EXPR)                            \
  do {                                                                                    \
    if ((sa) && (sb)) {                                                                   \
      for (int64_t j_ = 0; j_ < (len); j_++) {                                            \
        TA x = (pa)[j_];                                                                  \
        TB y = (pb)[j_];                                                                  \
        (po)[j_] = (EXPR);                                                                \
      }                                                                                   \
    } else if (sa) {                                                                      \
      TB y = (pb)[0];                                                                     \
      for (int64_t j_ = 0; j_ < (len); j_++) {                                            \
        TA x = (pa)[j_];                                                                  \
        (po)[j_] = (EXPR);                                                                \
      }                                                                                   \
    } else if (sb) {                                                                      \
      TA x = (pa)[0];                                                                     \
      for (int64_t j_ = 0; j_ < (len); j_++) {                                            \
        TB y = (pb)[j_];                                                                  \
        (po)[j_] = (EXPR);                                                                \
      }                                                                                   \
    } else {                                                                              \
      TA x = (pa)[0];                                                                     \
      TB y = (pb)[0];                                                                     \
      for (int64_t j_ = 0; j_ < (len); j_++) (po)[j_] = (EXPR);                           \
    }                                                                                     \
  } while (0)

/* ---- strided copies (Transpose, Slice, SliceGrad, Expand) -------------------------- */

/* Copies a dims[rank] block of esz-byte elements: element idx goes from
 * src + sum(idx * src_strides) to dst + sum(idx * dst_strides) (strides in elements, may
 * be negative or 0 for src). */
void apx_cpu_strided_copy(void *dst, const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides, const int64_t *dims, int rank, size_t esz,
                          int nt);

/* Copies src into dst broadcasting src to dst's shape (Expand); same element size.
 * Returns -1 if src does not broadcast to dst. */
int apx_cpu_broadcast_copy(const ApxTensor *src, ApxTensor *dst, int nt);

/* ---- reductions shared between families (reduce.c) -------------------------------- */

/* Sums x (dims[rank]) over the axes with reduce_mask bit set into y (the kept dims, in
 * order). Each output sums its inputs in row-major order of the reduced indices (fixed, thread
 * independent). */
void apx_cpu_reduce_sum_f32(const float *x, const int64_t *dims, int rank, uint32_t reduce_mask,
                            float *y, int nt);
void apx_cpu_reduce_sum_f64(const double *x, const int64_t *dims, int rank,
                            uint32_t reduce_mask, double *y, int nt);

/* ---- conversions (convert.c) ------------------------------------------------------- */

/* apx_cpu_convert with nt OpenMP threads. */
ApxStatus apx_cpu_convert_nt(const void *src, ApxDType st, void *dst, ApxDType dt, int64_t n,
                             int nt);
/* Portable and F16C implementations of the bulk conversions (tests compare them). The F16C
 * ones must only be called when apx_cpu_has_f16c() is 1. */
int apx_cpu_has_f16c(void);
void apx_cpu_f16_to_f32_portable(const uint16_t *src, float *dst, int64_t n);
void apx_cpu_f32_to_f16_portable(const float *src, uint16_t *dst, int64_t n);
void apx_cpu_f16_to_f32_f16c(const uint16_t *src, float *dst, int64_t n);
void apx_cpu_f32_to_f16_f16c(const float *src, uint16_t *dst, int64_t n);
/* Correctly rounded (single rounding, RNE) double -> fp16 / bf16. */
uint16_t apx_cpu_f64_to_f16(double d);
uint16_t apx_cpu_f64_to_bf16(double d);

/* ---- vec_math.c: y[i] = f(x[i]) for math worth AVX-512 / AVX2 clones (y may be x) ---- */

void apx_cpu_vec_gelu_f32(const float *x, float *y, int64_t n); /* erf form */
void apx_cpu_vec_gelu_f64(const double *x, double *y, int64_t n);
void apx_cpu_vec_erf_f32(const float *x, float *y, int64_t n);
void apx_cpu_vec_erf_f64(const double *x, double *y, int64_t n);

/* ---- kernel families ---------------------------------------------------------------- */

#define APX_CPU_KERNEL(name)                                                                \
  ApxStatus name(ApxCpuCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins, int n_in, \
                 ApxTensor *outs, int n_out)

/* convert.c */
APX_CPU_KERNEL(apx_cpu_cast);
/* elementwise.c */
APX_CPU_KERNEL(apx_cpu_unary);
APX_CPU_KERNEL(apx_cpu_unary_grad);
APX_CPU_KERNEL(apx_cpu_binary);
APX_CPU_KERNEL(apx_cpu_sum);
APX_CPU_KERNEL(apx_cpu_pow_grad);
/* matmul.c */
APX_CPU_KERNEL(apx_cpu_gemm);
APX_CPU_KERNEL(apx_cpu_matmul);
/* conv.c */
APX_CPU_KERNEL(apx_cpu_conv);
APX_CPU_KERNEL(apx_cpu_conv_grad);
APX_CPU_KERNEL(apx_cpu_conv_bias_relu_grad);
APX_CPU_KERNEL(apx_cpu_conv_transpose);
APX_CPU_KERNEL(apx_cpu_conv_transpose_grad);
/* pool.c */
APX_CPU_KERNEL(apx_cpu_pool);
APX_CPU_KERNEL(apx_cpu_pool_grad);
APX_CPU_KERNEL(apx_cpu_global_avg_pool);
APX_CPU_KERNEL(apx_cpu_global_avg_pool_grad);
/* norm.c */
APX_CPU_KERNEL(apx_cpu_layer_norm);
APX_CPU_KERNEL(apx_cpu_layer_norm_grad);
APX_CPU_KERNEL(apx_cpu_batch_norm);
APX_CPU_KERNEL(apx_cpu_batch_norm_grad);
APX_CPU_KERNEL(apx_cpu_batch_norm_relu_grad);
/* dY * (Y > 0) in a malloc'ed buffer of dY's math type (norm.c; NULL when out of memory) */
void *apx_cpu_relu_mask_grad(const ApxTensor *dy, const ApxTensor *y, int nt);
/* softmax.c */
APX_CPU_KERNEL(apx_cpu_softmax);
APX_CPU_KERNEL(apx_cpu_softmax_grad);
/* loss.c */
APX_CPU_KERNEL(apx_cpu_loss);
APX_CPU_KERNEL(apx_cpu_loss_grad); /* also FusedXentropy, FusedXentropyGrad */
/* reduce.c */
APX_CPU_KERNEL(apx_cpu_reduce);
APX_CPU_KERNEL(apx_cpu_reduce_sum_to);
/* dropout.c */
APX_CPU_KERNEL(apx_cpu_dropout);
APX_CPU_KERNEL(apx_cpu_dropout_grad);
/* shape_ops.c (raw unless noted) */
APX_CPU_KERNEL(apx_cpu_copy);
APX_CPU_KERNEL(apx_cpu_transpose);
APX_CPU_KERNEL(apx_cpu_concat);
APX_CPU_KERNEL(apx_cpu_split);
APX_CPU_KERNEL(apx_cpu_slice);
APX_CPU_KERNEL(apx_cpu_slice_grad);
APX_CPU_KERNEL(apx_cpu_gather);
APX_CPU_KERNEL(apx_cpu_gather_grad); /* math */
APX_CPU_KERNEL(apx_cpu_expand);
APX_CPU_KERNEL(apx_cpu_where);
APX_CPU_KERNEL(apx_cpu_shape);
APX_CPU_KERNEL(apx_cpu_constant_of_shape);
APX_CPU_KERNEL(apx_cpu_range); /* math */
/* v1.1 data movement and indexing: indexing.c (raw unless noted), reduce.c, dropout.c */
APX_CPU_KERNEL(apx_cpu_pad);
APX_CPU_KERNEL(apx_cpu_pad_grad); /* math */
APX_CPU_KERNEL(apx_cpu_tile);
APX_CPU_KERNEL(apx_cpu_trilu);
APX_CPU_KERNEL(apx_cpu_gather_elements);
APX_CPU_KERNEL(apx_cpu_gather_elements_grad); /* math */
APX_CPU_KERNEL(apx_cpu_gather_nd);
APX_CPU_KERNEL(apx_cpu_gather_nd_grad); /* math */
APX_CPU_KERNEL(apx_cpu_reduce_max);      /* math (reduce.c) */
APX_CPU_KERNEL(apx_cpu_reduce_max_grad); /* math (reduce.c) */
APX_CPU_KERNEL(apx_cpu_random_uniform_like); /* raw (dropout.c) */
/* v1.1 resampling and contraction: resample.c (math) */
APX_CPU_KERNEL(apx_cpu_resize);
APX_CPU_KERNEL(apx_cpu_resize_grad);
APX_CPU_KERNEL(apx_cpu_einsum);
/* training.c */
APX_CPU_KERNEL(apx_cpu_loss_scale_seed);
APX_CPU_KERNEL(apx_cpu_assign_state);  /* raw: writes input 1 */
APX_CPU_KERNEL(apx_cpu_unscale_check);
APX_CPU_KERNEL(apx_cpu_optimizer_step); /* raw: updates its inputs */
/* fused.c */
APX_CPU_KERNEL(apx_cpu_fused_dense);
APX_CPU_KERNEL(apx_cpu_fused_dense_grad);
APX_CPU_KERNEL(apx_cpu_fused_softmax);
APX_CPU_KERNEL(apx_cpu_fused_softmax_grad);
/* compare.c (raw unless noted) */
APX_CPU_KERNEL(apx_cpu_compare);     /* Less, LessOrEqual, Greater, GreaterOrEqual */
APX_CPU_KERNEL(apx_cpu_logic);       /* Not, And, Or */
APX_CPU_KERNEL(apx_cpu_isclass);     /* IsNaN, IsInf */
APX_CPU_KERNEL(apx_cpu_minmax);      /* Min, Max */
APX_CPU_KERNEL(apx_cpu_clip);
APX_CPU_KERNEL(apx_cpu_mod);
APX_CPU_KERNEL(apx_cpu_clip_grad);   /* math */
APX_CPU_KERNEL(apx_cpu_minmax_grad); /* math */

#endif
