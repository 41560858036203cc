/* fuse_dense.h - MatMul/Gemm + bias (+ Relu/Gelu) -> FusedDense (DESIGN.md 10; cuBLASLt
 * epilogue on CUDA), with the backward nodes -> one FusedDenseGrad (dX, dW, dB).
 *
 * pass_fuse_dense looks at every forward MatMul and Gemm (fuse_common.h describes how
 * forward and backward nodes are replaced):
 *   Gemm(X, W, C?) [-> act]            alpha, beta, transB carried over; C must be a
 *                                      per-column bias ([N] or [1, N]); transA = 1 is not
 *                                      fused (FusedDense takes X as (M, K))
 *   MatMul(X, W) -> Add(., b) [-> act] W 2-D, b [N] (leading 1s allowed), X (..., K)
 *   MatMul(X, W) -> act                without bias
 *   act: Relu; Gelu (approximate none or tanh); the Erf form exporters write,
 *        x * 0.5 * (1 + Erf(x / sqrt 2)) (Div by sqrt 2 or Mul by 1/sqrt 2, either order
 *        of the two final Muls). Sigmoid / Tanh / LeakyRelu are recorded as not supported
 *        and the product + bias fused without them.
 * F = FusedDense(X, W, B?) -> Y (the last matched node's output), Aux (the pre-activation,
 * GELUs only); G = FusedDenseGrad(dY, X, W, T) -> dX, dW, dB with T = Y (Relu), Aux
 * (GELUs), absent (no activation). All matched nodes must have one compute type
 * (FZ_PREC_AGREE): at O1 a half MatMul with an fp32 bias Add (promote list, fp32
 * parameter) is "dtype". When the activation cannot be fused (its input has other
 * consumers, ...) the product + bias is fused without it and both records are kept.
 * A MatMul followed by an Add that is not a bias (a residual) is recorded as "legality".
 * Returns unchanged with o->no_fuse. */
#ifndef APX_PASS_FUSE_DENSE_H
#define APX_PASS_FUSE_DENSE_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_dense(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
