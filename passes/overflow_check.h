/* overflow_check.h - static overflow analysis before precision decisions (DESIGN.md 8).
 *
 * pass_overflow_check finds, for the forward graph and the chosen half type (o->half):
 *
 *  1. Constant range: a CONST or PARAM input with data, in a data slot of a float node
 *     (static operands and BN scale/bias/mean/var excluded: they are never cast), that
 *     holds an element outside the half type's finite range (|x| > max, or +-inf: -1e9
 *     masks, 1e30 sentinels), or whose nonzero elements are all below the half type's
 *     smallest normal (epsilons such as 1e-12). Reason APX_REASON_OVERFLOW_CONST.
 *  2. Patterns, by interval propagation over the forward graph (value ranges from constant
 *     data; Sigmoid/Softmax in [0,1], Tanh/Erf in [-1,1], LogSoftmax <= 0, Relu >= 0,
 *     interval arithmetic for Add/Sub/Mul/Div/Neg/Exp/Log/Sqrt/Pow(x,2), pass-through for
 *     shape and data-movement ops; anything else, graph inputs and parameters unbounded).
 *     Reason APX_REASON_OVERFLOW_PATTERN:
 *       - hand-written variance: ReduceMean/ReduceSum of Pow(x, 2) or Mul(x, x) whose
 *         squares can exceed the half max (both the square and the reduction are flagged);
 *       - large sums: ReduceSum over N elements whose sum bound N * M exceeds the half
 *         max, M the input's largest magnitude; for an input of unknown range M is taken as
 *         1 (unit-scale activations), so N > 65504 trips it in fp16 (ReduceMean is bounded
 *         by M: its kernels sum in fp32/double and store only the mean in half);
 *       - Exp without max subtraction: Exp whose input can exceed ln(half max) (11.09 in
 *         fp16), i.e. every Exp whose input is not known bounded (Exp of LogSoftmax or of a
 *         bounded value passes).
 *     bf16 has fp32's exponent range: a value that overflows bf16 overflows fp32 too, so
 *     with --half=bf16 the pattern rules never fire; the constant checks use bf16's range.
 *  3. Tensor-core alignment notes (advisory, never change a decision): MatMul, Gemm and
 *     Conv whose M, N, K (Conv: input channels per group, output channels) are not
 *     multiples of 8 get ApxNode.note. Skipped at O0 without --half-ops.
 *
 * Findings are recorded on the node: compute = F32, reason = one of the two overflow
 * reasons, reason_detail = "overflow: ..." naming the constant and value or the pattern.
 * pass_precision (which must run next) applies them with their precedence: an override
 * beats them; when the rules below them would give fp32 anyway the node keeps that reason
 * and the finding goes to the note; otherwise the node stays fp32 with a warning, or with
 * --clamp-constants a constant finding is clamped (passes/precision_rules.h has the
 * rule) and the node runs in half. Returns APX_PASS_UNCHANGED (annotations only). */
#ifndef APX_PASS_OVERFLOW_CHECK_H
#define APX_PASS_OVERFLOW_CHECK_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_overflow_check(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
