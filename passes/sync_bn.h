/* sync_bn.h - --sync-bn: BatchNorm statistics over the combined batch of all data-parallel
 * ranks (DESIGN.md 11; Apex/PyTorch SyncBatchNorm).
 *
 * pass_sync_bn runs on the training graph after the precision passes (so the decomposition
 * keeps BatchNorm's decided type, fp32 at O2 with keep_batchnorm_fp32) and before fusion
 * (which would turn BatchNormalization + Relu into BatchNormRelu); nothing happens without
 * o->sync_bn. Each training-mode BatchNormalization(X, scale, B, mean, var) of compute type
 * T (fp32 or fp64), X of shape (N, C, d...), statistics shape S = (1, C, 1...), becomes plain
 * ops of type T (two-pass statistics, exactly as the BatchNorm kernel computes them, but
 * over all ranks):
 *
 *   s1 = ReduceSumTo(X) -> S;  n = constant [1] = N * prod(d) (this rank's count)
 *   Allreduce(s1, n) -> S1, CNT                           (sums over the ranks)
 *   mean = S1 / CNT;  xc = X - mean
 *   Allreduce(ReduceSumTo(xc * xc)) -> S2;  var = S2 / CNT (biased, as BatchNormalization)
 *   invstd = 1 / Sqrt(var + epsilon);  xhat = xc * invstd
 *   Y = xhat * Reshape(scale, S) + Reshape(B, S)                        (BN output 0)
 *   running_mean' = mean_in * momentum + Reshape(mean, C) * (1 - momentum)   (output 1)
 *   running_var'  = var_in  * momentum + Reshape(var, C)  * (1 - momentum)   (output 2)
 *     (with unbiased_running_var, PyTorch's: S2 / (CNT - 1) in place of var, when this
 *     rank has more than one value per channel)
 *
 * and its BatchNormGrad(dY, X, scale, saved_mean, saved_invstd) -> dX?, dscale?, dB?
 * (BACKWARD) becomes
 *
 *   db = ReduceSumTo(dY) -> S;  dsx = ReduceSumTo(dY * xhat) -> S
 *   dB = Reshape(db, C);  dscale = Reshape(dsx, C)     (this rank's sums: the gradient
 *                                                       buckets average them over ranks)
 *   Allreduce(db, dsx) -> SDY, SDYX
 *   dX = (dY - SDY / CNT - xhat * SDYX / CNT) * (Reshape(scale, S) * invstd)
 *
 * which is the gradient of the combined batch's loss up to the factor K that every rank's
 * gradients carry before the buckets divide by K. The statistics Allreduce nodes carry
 * ApxAttrAllreduce.bucket = -1 and average = 0 (plain sums; not gradient buckets: neither
 * pass_bucketing nor the plan's bucket list counts them). With one process they are the
 * identity and the result equals BatchNormalization's up to rounding. The rewritten nodes
 * keep the BatchNorm's decision (compute T, origin the BatchNorm node) and produce the
 * BatchNorm's own output values, so its consumers (Relu, the AssignState running-statistic
 * updates) are unchanged.
 *
 * A BatchNorm in half precision (O1/O3 without --keep-batchnorm-fp32: X, Y, dY, dX in
 * fp16/bf16, scale, bias and statistics fp32 as cuDNN and Apex SyncBatchNorm keep them) is
 * rewritten the same way with T = fp32 between Cast(X -> fp32) and Cast(Y -> half) in the
 * forward, Cast(dY -> fp32) and Cast(dX -> half) in the backward: every sum and statistic
 * is computed and allreduced in fp32, and only Y and dX are rounded to half, once.
 *
 * Not supported yet (error, exit code 2, naming the node): parameters or running
 * statistics of another type than fp32/fp64 T, an input of another type than the
 * BatchNorm's. Inference-mode BatchNorm is left alone. */
#ifndef APX_SYNC_BN_H
#define APX_SYNC_BN_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_sync_bn(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
