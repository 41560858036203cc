/* ew_math.h - elementwise formulas shared by the CPU reference and the CUDA kernels
 * (STYLE.md 11): static inline, host+device, instantiated once per math type from
 * ew_math.inc, so there is one source of each formula:
 *   apx_<name>_f32(float ...)   used for fp32, fp16 and bf16 tensors (math in fp32)
 *   apx_<name>_f64(double ...)  used for fp64 tensors (gradient checks)
 * Forward:  relu, leaky_relu, sigmoid, erf, gelu (erf form), gelu_tanh (tanh approximation)
 * Backward: relu_grad(dy, x or y: same sign), leaky_relu_grad(dy, x, alpha), sigmoid_grad(dy, y),
 *           tanh_grad(dy, y), gelu_grad(dy, x), gelu_tanh_grad(dy, x), erf_grad(dy, x),
 *           sqrt_grad(dy, y)   (x: the forward input, y: the forward output)
 * Ops of kind EW_UNARY / EW_UNARY_GRAD (ops.def): apx_ew_<ID>(x, attrs) and
 *           apx_ew_<ID>(dy, t, attrs), the function the generated kernels call. */
#ifndef APX_EW_MATH_H
#define APX_EW_MATH_H

#include <math.h>

#include "kernels/attrs.h"
#include "kernels/half.h" /* APX_HD */

#ifdef __cplusplus
extern "C" {
#endif

/* erf of an fp32 value, evaluated in double and rounded once: |x| < 1: x P(x^2), else
 * Q((|x| - 2.46) / 1.46) up to 3.92 and 1 beyond, with the sign of x (coefficients:
 * scripts/fit_erf.py). Max error 0.51 ulp over a dense sweep of fp32 (kernels/cpu/erf_test;
 * glibc's erff: 0.97). Both polynomials are computed for every input and the result is a
 * select, so a loop over it vectorizes (the CPU kernels are built with -fno-trapping-math)
 * instead of calling libm per element; NaN propagates, erf(+-inf) = +-1, erf(-0) = -0.
 * The float instance below uses it (Gelu, its gradient, Erf), on the CPU and on the GPU. */
static inline APX_HD float apx_erf_poly_f32(float xf) {
  double x = xf, a = fabs(x), u = x * x, t = (a - 2.46) * (1.0 / 1.46);
  double p = -9.6735908117507825e-6;
  p = p * u + 0.00011268253894199437;
  p = p * u + -0.00084843965506018934;
  p = p * u + 0.0052210534125376749;
  p = p * u + -0.026865438310515114;
  p = p * u + 0.11283782622062184;
  p = p * u + -0.37612638475991322;
  p = p * u + 1.1283791670623609;
  double q = -3.5903603282332193e-6;
  q = q * t + -0.00010715507170678409;
  q = q * t + 0.00023320332277954129;
  q = q * t + 0.00041481748926430513;
  q = q * t + -0.0016492033375669346;
  q = q * t + 0.00098466130452764714;
  q = q * t + 0.0033567642980892528;
  q = q * t + -0.0085706919784722349;
  q = q * t + 0.0073383788370291258;
  q = q * t + 0.0063068929724439479;
  q = q * t + -0.028445290869154227;
  q = q * t + 0.045146578369064858;
  q = q * t + -0.04504755659646351;
  q = q * t + 0.030596281018923952;
  q = q * t + -0.013928969840606488;
  q = q * t + 0.003878204232780478;
  q = q * t + 0.99949664628272491;
  double small = x * p, big = copysign(a >= 3.92 ? 1.0 : q, x);
  return (float)(a < 1.0 ? small : big);
}

#define APX_EW_T float
#define APX_EW_F(name) name##_f32
#define APX_EW_C(x) x##f
#define APX_EW_EXP expf
#define APX_EW_TANH tanhf
#define APX_EW_ERF apx_erf_poly_f32
#define APX_EW_SQRT sqrtf
#define APX_EW_LOG logf
#define APX_EW_LOG1P log1pf
#include "kernels/ew_math.inc"
#undef APX_EW_T
#undef APX_EW_F
#undef APX_EW_C
#undef APX_EW_EXP
#undef APX_EW_TANH
#undef APX_EW_ERF
#undef APX_EW_SQRT
#undef APX_EW_LOG
#undef APX_EW_LOG1P

#define APX_EW_T double
#define APX_EW_F(name) name##_f64
#define APX_EW_C(x) x
#define APX_EW_EXP exp
#define APX_EW_TANH tanh
#define APX_EW_ERF erf
#define APX_EW_SQRT sqrt
#define APX_EW_LOG log
#define APX_EW_LOG1P log1p
#include "kernels/ew_math.inc"
#undef APX_EW_T
#undef APX_EW_F
#undef APX_EW_C
#undef APX_EW_EXP
#undef APX_EW_TANH
#undef APX_EW_ERF
#undef APX_EW_SQRT
#undef APX_EW_LOG
#undef APX_EW_LOG1P

#ifdef __cplusplus
}
#endif
#endif
