/* float_scan.h - one pass over fp32 data by bit pattern: the largest magnitude and whether
 * any element is above a limit, NaN elements skipped. For the compile-time range checks of
 * large weights (passes/precision_rules.c, compiler/export_hazards.c): a 163M-parameter
 * model's weights are scanned several times per compile, so the pass runs four fp32 lanes
 * at a time (GCC/Clang vector extensions, plain SSE2 on x86-64) with independent
 * accumulators, instead of one element and one branch at a time.
 *
 * For non-NaN fp32 values |x| orders exactly like its bit pattern with the sign bit
 * cleared (inf above every finite value, NaN patterns above inf). */
#ifndef APX_FLOAT_SCAN_H
#define APX_FLOAT_SCAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxF32Scan {
  uint32_t max_abs_bits; /* largest |x| bit pattern over the non-NaN elements, 0 when none */
  int over;              /* 1 when some non-NaN |x| is above the limit (inf above any finite) */
} ApxF32Scan;

/* Scans x[0..n) against limit (its magnitude is used). n <= 0 scans nothing. */
ApxF32Scan apx_f32_scan(const float *x, int64_t n, float limit);

#ifdef __cplusplus
}
#endif
#endif
