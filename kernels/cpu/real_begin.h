/* real_begin.h - opens one instantiation of a kernel family's math template (*_real.inc).
 * Define APX_REAL_F64 as 0 (float: fp32/fp16/bf16 tensors) or 1 (double: fp64 tensors),
 * include this, include the template, then include real_end.h. Templates write
 *   real_t            the math type
 *   acc_t             the type sums accumulate in (double for both; sum_real.inc)
 *   RF(name)          name##_f32 / name##_f64 (functions of this instance)
 *   R_EXP(x) ...      libm functions of the type
 *   RC(x)             a constant of the type
 *   R_DT              the ApxDType of the type
 *   R_GEMM            cblas_sgemm / cblas_dgemm */
#ifndef APX_REAL_F64
#error "define APX_REAL_F64 (0 or 1) before including real_begin.h"
#endif

#include <math.h>

#if APX_REAL_F64
#define real_t double
#define acc_t double
#define RF(name) name##_f64
#define RC(x) ((double)(x))
#define R_EXP exp
#define R_LOG log
#define R_SQRT sqrt
#define R_TANH tanh
#define R_POW pow
#define R_FABS fabs
#define R_ISNAN isnan
#define R_INF ((double)INFINITY)
#define R_DT APX_DT_F64
#define R_GEMM cblas_dgemm
#else
#define real_t float
#define acc_t double
#define RF(name) name##_f32
#define RC(x) ((float)(x))
#define R_EXP expf
#define R_LOG logf
#define R_SQRT sqrtf
#define R_TANH tanhf
#define R_POW powf
#define R_FABS fabsf
#define R_ISNAN isnan
#define R_INF INFINITY
#define R_DT APX_DT_F32
#define R_GEMM cblas_sgemm
#endif
