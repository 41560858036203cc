/* fuse_softmax.h - scale + mask + Softmax -> FusedSoftmax (DESIGN.md 10; apex's scaled
 * masked softmax), the backward -> FusedSoftmaxGrad.
 *
 * pass_fuse_softmax matches, over the last axis (inserted Casts between the nodes allowed):
 *   Softmax(Add(Mul(S, c) | Mul(c, S) | Div(S, c), Mask))   scale c (1/c for Div)
 *   Softmax(Add(S, Mask))                                   Mask a constant, scale 1
 *   Softmax(Mul(S, c) | Div(S, c))                          no mask
 * with c a scalar constant, and replaces them and their backward (SoftmaxGrad, the scale's
 * Mul/Div gradient; fuse_common.h) with
 *   F = FusedSoftmax(S, Mask?) -> Y = softmax(S * scale + Mask)
 *   G = FusedSoftmaxGrad(dY, Y) -> dS = scale * SoftmaxGrad(dY, Y).
 * Precision FZ_PREC_WIDEST: in the example transformer at O2 the mask Add stays fp32 (the
 * -1e9 mask is outside fp16's range: overflow rule) while the Mul and Softmax run in fp16;
 * the fused node takes the fp32 decision and its reason, reads S in fp16 and the mask in
 * fp32 and writes Y in fp16 (the kernel computes in fp32), so no Cast is left.
 * Not fused: another axis (legality), a mask that needs a gradient (legality: the fused
 * gradient has none), intermediates read elsewhere (consumers). A plain Softmax is not a
 * candidate. Returns unchanged with o->no_fuse. */
#ifndef APX_PASS_FUSE_SOFTMAX_H
#define APX_PASS_FUSE_SOFTMAX_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_softmax(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
