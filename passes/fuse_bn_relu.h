/* fuse_bn_relu.h - BatchNormalization + Relu -> BatchNormRelu (DESIGN.md 10; cuDNN's
 * BN + activation), the backward (ReluGrad + BatchNormGrad) -> BatchNormReluGrad.
 *
 * pass_fuse_bn_relu matches a forward BatchNormalization whose output 0 is read only by a
 * Relu (inserted Casts between them allowed) and replaces both and their backward
 * (fuse_common.h) with
 *   F = BatchNormRelu(X, scale, B, mean, var) -> Y (the Relu's output), running mean/var,
 *       saved mean / inv std (the BN's outputs, still bound to the state by AssignState)
 *   G = BatchNormReluGrad(dY, Y, X, scale, saved_mean, saved_invstd) -> dX, dscale, dB
 * Precision FZ_PREC_WIDEST: at O2 keep_batchnorm_fp32 gives BN fp32 and the Relu fp16; the
 * fused node is fp32 (BN retention) and, like cuDNN's half batch norm, reads X (an inserted
 * fp16 -> fp32 Cast is skipped) and writes Y in fp16 while statistics and parameters stay
 * fp32: the Casts around the BN and its gradient go away. Not fused: BN output read
 * elsewhere (consumers); inference-mode BN inside a training graph (legality: its gradient
 * is plain ops); a Relu in another type than the BN's input where both are half
 * (dtype). Returns unchanged with o->no_fuse. */
#ifndef APX_PASS_FUSE_BN_RELU_H
#define APX_PASS_FUSE_BN_RELU_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_bn_relu(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
