/* vec_math.c - elementwise loops whose math is worth wider vectors than the baseline x86-64
 * build (SSE2): the erf of Gelu and Erf (ew_math.h apx_erf_poly_f32, two double polynomials
 * per element; with SSE2's two doubles per vector that is no faster than glibc's scalar
 * erff, with AVX-512's eight it is 2-3x faster). gcc clones these functions for AVX-512 and
 * AVX2 (APX_VEC_CLONES, cpu_internal.h; the dynamic loader picks one for the CPU once). Every clone does the
 * same arithmetic in the same order (no FMA contraction: -ffp-contract=off), so the bits do
 * not depend on the CPU. y may be x (in place). */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/ew_math.h"

APX_VEC_CLONES void apx_cpu_vec_gelu_f32(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = apx_gelu_f32(x[i]);
}

APX_VEC_CLONES void apx_cpu_vec_erf_f32(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = apx_erf_f32(x[i]);
}

/* double: libm erf per element (gradient checks), same loops for the templates' sake */
void apx_cpu_vec_gelu_f64(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = apx_gelu_f64(x[i]);
}

void apx_cpu_vec_erf_f64(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = apx_erf_f64(x[i]);
}
