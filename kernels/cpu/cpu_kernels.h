/* cpu_kernels.h - the CPU reference kernels (the numerical oracle, STYLE.md 1).
 *
 * One entry point runs any op of the op table on CPU tensors. The caller (runtime CPU
 * backend, compile-time constant folding, tests) provides inputs and outputs with dtype and
 * shape set and output bytes allocated; the shapes are those the compiler inferred, and
 * kernels check them (a mismatch is APX_STATUS_BAD_INPUT with the shapes in ctx->err).
 *
 * Precision semantics (DESIGN.md 12):
 *   - fp32/fp16/bf16 tensors: math in fp32. fp16/bf16 inputs are loaded to fp32, every
 *     output is computed in fp32 and rounded to nearest-even once on store (fp16 overflow
 *     gives +-inf exactly where the GPU's __float2half_rn does). Internal intermediates of
 *     one op (softmax max/sum, norm statistics, products) stay fp32.
 *   - matrix products (MatMul, Gemm, FusedMatMul, Conv, FusedDense) accumulate in fp32
 *     (OpenBLAS sgemm on fp32 copies of half operands).
 *   - fp64 tensors: math in double (gradient checks). A call mixing float types computes in
 *     fp64 if any float tensor is fp64, else fp32, and rounds each output once.
 *   - integer tensors: int64 math with ONNX semantics (Div truncates, overflow wraps; integer
 *     division by zero is an error); narrower types convert to int64 and wrap back.
 *     Data-movement ops work on every dtype by element size.
 * Threads: OpenMP with ctx->n_threads; every output element is computed by one thread in a
 * fixed order, so results are bit-identical for any thread count. OpenBLAS is set to one
 * thread (openblas_set_num_threads(1), process-wide) and products are split into fixed
 * tiles instead, because OpenBLAS's own threading changes results with the thread count.
 * Absent tensors: data == NULL. An absent output still carries its dims where the op needs
 * them (Split sizes). */
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

/* Runs op with its typed attributes (attrs.h struct named in ops.def; may be NULL only for
 * ops with ApxAttrNone). ins[i].data == NULL marks an absent optional input; static inputs
 * (ops.def STATIC_INPUTS) may be passed or absent: kernels read attrs instead. Inputs and
 * outputs follow attrs.h's conventions; AssignState and OptimizerStep update their input
 * buffers in place. Output 0 may alias input 0 for APX_OPF_INPLACE ops. Ops without a
 * kernel (tier 2, listed-only, Allreduce, Constant) return APX_STATUS_UNSUPPORTED
 * ("<Op>: not supported yet on the CPU backend").
 * Returns APX_STATUS_OK, or a status with a one-line reason "<Op>: <what>" in ctx->err.
 * Reentrant: concurrent calls with separate contexts are safe. */
ApxStatus apx_cpu_run(ApxCpuCtx *ctx, ApxOp op, const void *attrs, const ApxTensor *ins,
                      int n_in, ApxTensor *outs, int n_out);

/* 1 if apx_cpu_run implements op for dtype dt (the precision pass's backend query,
 * STYLE.md 5): dt is the op's type T, the type of its float data (the output's for most
 * ops, the inputs' for Equal; any type for data movement, Cast, Shape, ConstantOfShape). */
int apx_cpu_supports(ApxOp op, ApxDType dt);

/* 1 if apx_cpu_run has a kernel for this call: apx_cpu_supports for the op's type T taken
 * from the tensors as apx_cpu_run takes it (present tensors: data != NULL; the data itself
 * is not read, so a caller may ask before allocating outputs). Constant folding asks this
 * of every node on constants (passes/fold_constants.h). */
int apx_cpu_supports_call(ApxOp op, const ApxTensor *ins, int n_in, const ApxTensor *outs,
                          int n_out);

/* OpenBLAS built with DYNAMIC_ARCH (Debian 0.3.21) does not recognize CPUs newer than itself
 * (e.g. Sapphire/Emerald Rapids) and falls back to generic SSE3 kernels: sgemm about 8x
 * slower. The core type can only be chosen before the library loads, through the
 * environment. Returns the OPENBLAS_CORETYPE value a program should set (and re-exec with)
 * for this CPU ("SkylakeX" with AVX-512, "Haswell" with AVX2), or NULL when OpenBLAS already
 * uses a fitting core or OPENBLAS_CORETYPE is set. */
const char *apx_cpu_blas_coretype_hint(void);

/* Call first thing in main() of a program that runs these kernels (apexrun, benchmarks).
 * Libraries read some settings from the environment only when they load, so this sets them
 * and re-executes the program once (execv of /proc/self/exe with the same argv; the pid,
 * arguments and the rest of the environment stay; the process name is restored):
 *   OPENBLAS_CORETYPE     when apx_cpu_blas_coretype_hint() names a core (fast sgemm), with
 *                         OPENBLAS_NUM_THREADS=1 unless set (the kernels run OpenBLAS
 *                         single-threaded anyway: no idle pool threads);
 *   OMP_WAIT_POLICY       PASSIVE, when neither it nor GOMP_SPINCOUNT is set: libgomp's
 *                         default lets idle team threads spin ~4 ms after every parallel
 *                         region, which on a loaded machine takes the CPU from the serial
 *                         work in between (docs/cpu_kernels.md "Threads").
 * A variable the user set is left alone. Returns (doing nothing) when there is nothing to
 * set, when APX_NO_REEXEC is set (opt-out), in the re-executed process (marked by
 * APX_CPU_REEXEC in the environment, which it removes: no loops), when /proc/self/exe is not
 * the file argv[0] names (valgrind, qemu, ld.so PROGRAM), or when the exec fails (the program
 * then runs as it would have). Not thread-safe: call before any thread starts. */
void apx_cpu_reexec_tuned(char **argv);

/* Bulk conversions (F16C where the CPU has it, portable fallback otherwise); bit-identical
 * to the scalar functions in half.h on every input, NaNs included. */
void apx_cpu_f16_to_f32(const uint16_t *src, float *dst, int64_t n);
void apx_cpu_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
void apx_cpu_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);
void apx_cpu_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
/* Any supported dtype to any other (Cast semantics): every conversion to a float type rounds
 * once to nearest even (fp64 and 64-bit integers reach fp16/bf16 without double rounding);
 * float -> integer truncates toward zero, NaN gives 0, values beyond int64 saturate, then
 * the int64 value wraps to narrower types (numpy astype for in-range values); -> bool is
 * != 0 (NaN is true). Returns APX_STATUS_UNSUPPORTED for STRING / unknown types. */
ApxStatus apx_cpu_convert(const void *src, ApxDType st, void *dst, ApxDType dt, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
