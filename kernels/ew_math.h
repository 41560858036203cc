/* ew_math.h - elementwise formulas shared by the CPU reference and the CUDA kernels
 * (STYLE.md 11): static inline, host+device, instantiated once per math type from
 * ew_math.inc, so there is one source of each formula:
 *   apx_<name>_f32(float ...)   used for fp32, fp16 and bf16 tensors (math in fp32)
 *   apx_<name>_f64(double ...)  used for fp64 tensors (gradient checks)
 * Forward:  relu, leaky_relu, sigmoid, gelu (erf form), gelu_tanh (tanh approximation)
 * Backward: relu_grad(dy, x or y: same sign), leaky_relu_grad(dy, x, alpha), sigmoid_grad(dy, y),
 *           tanh_grad(dy, y), gelu_grad(dy, x), gelu_tanh_grad(dy, x), erf_grad(dy, x),
 *           sqrt_grad(dy, y)   (x: the forward input, y: the forward output) */
#ifndef APX_EW_MATH_H
#define APX_EW_MATH_H

#include <math.h>

#include "kernels/half.h" /* APX_HD */

#ifdef __cplusplus
extern "C" {
#endif

#define APX_EW_T float
#define APX_EW_F(name) name##_f32
#define APX_EW_C(x) x##f
#define APX_EW_EXP expf
#define APX_EW_TANH tanhf
#define APX_EW_ERF erff
#include "kernels/ew_math.inc"
#undef APX_EW_T
#undef APX_EW_F
#undef APX_EW_C
#undef APX_EW_EXP
#undef APX_EW_TANH
#undef APX_EW_ERF

#define APX_EW_T double
#define APX_EW_F(name) name##_f64
#define APX_EW_C(x) x
#define APX_EW_EXP exp
#define APX_EW_TANH tanh
#define APX_EW_ERF erf
#include "kernels/ew_math.inc"
#undef APX_EW_T
#undef APX_EW_F
#undef APX_EW_C
#undef APX_EW_EXP
#undef APX_EW_TANH
#undef APX_EW_ERF

#ifdef __cplusplus
}
#endif
#endif
