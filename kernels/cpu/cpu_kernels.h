/* cpu_kernels.h - the CPU reference kernels (the numerical oracle, STYLE.md 1).
 *
 * One entry point runs any op of the op table on CPU tensors. The caller (runtime CPU
 * backend, compile-time constant folding, tests) provides inputs and outputs with dtype and
 * shape set and output bytes allocated; the shapes are those the compiler inferred.
 *
 * Precision semantics (DESIGN.md 12): float32 math for fp32/fp16/bf16 tensors, fp16/bf16
 * loaded to fp32 and rounded to nearest-even on store (overflow gives inf), matrix products
 * accumulate in fp32; fp64 tensors are computed in double (gradient checks); integer
 * tensors through int64/double paths where the op is defined on them. */
#ifndef APX_CPU_KERNELS_H
#define APX_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxCpuCtx {
  int32_t n_threads;   /* OpenMP threads; <= 0: library default */
  uint64_t seed;       /* Philox key for Dropout */
  int64_t step;        /* training step: part of the Philox counter */
  char err[512];       /* detail for a non-OK status */
} ApxCpuCtx;

void apx_cpu_ctx_init(ApxCpuCtx *ctx);

/* Runs op with its typed attributes (attrs.h struct named in ops.def; may be NULL for ops
 * with ApxAttrNone). ins[i].data == NULL marks an absent optional input; static inputs
 * (ops.def STATIC_INPUTS) may be passed or absent: kernels read attrs instead.
 * Returns APX_STATUS_OK, or a status with a one-line reason in ctx->err. */
ApxStatus apx_cpu_run(ApxCpuCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins,
                      int n_in, ApxTensor *outs, int n_out);

/* 1 if apx_cpu_run implements op for output dtype dt (the precision pass's backend query,
 * STYLE.md 5). */
int apx_cpu_supports(ApxOp op, ApxDType dt);

/* Bulk conversions (F16C where the CPU has it, portable fallback otherwise); identical
 * results to the scalar functions in half.h. */
void apx_cpu_f16_to_f32(const uint16_t *src, float *dst, int64_t n);
void apx_cpu_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
void apx_cpu_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);
void apx_cpu_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
/* Any supported dtype to any other (Cast semantics: float->int truncates toward zero,
 * ->bool is != 0, half rounding RNE). */
ApxStatus apx_cpu_convert(const void *src, ApxDType st, void *dst, ApxDType dt, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
