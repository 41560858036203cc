/* fuse_conv.h - Conv (with its bias) + Relu -> ConvBiasRelu (DESIGN.md 10; cuDNN's fused
 * conv + bias + activation), the backward (ReluGrad + ConvGrad) -> ConvBiasReluGrad.
 *
 * pass_fuse_conv matches a forward Conv(X, W, B?) whose output is read only by a Relu and
 * replaces both and their backward (fuse_common.h) with
 *   F = ConvBiasRelu(X, W, B?) -> Y (the Relu's output)
 *   G = ConvBiasReluGrad(dY, Y, X, W) -> dX, dW, dB
 * Both nodes must have one compute type (FZ_PREC_AGREE). A Conv followed by
 * BatchNormalization is left to pass_fuse_bn_relu (the BN + Relu part). Not fused: the
 * Conv output read elsewhere (consumers), different decisions (dtype). Returns unchanged
 * with o->no_fuse. */
#ifndef APX_PASS_FUSE_CONV_H
#define APX_PASS_FUSE_CONV_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_conv(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
