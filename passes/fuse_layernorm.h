/* fuse_layernorm.h - the hand-written LayerNorm -> LayerNormalization (DESIGN.md 10).
 *
 * pass_fuse_layernorm matches what exporters write for a LayerNorm without the ONNX op
 * (examples/transformer/make_example.py), inserted Casts between the nodes allowed:
 *   mean = ReduceMean(x, trailing axes [a, rank), keepdims); d = Sub(x, mean)
 *   var = ReduceMean(Pow(d, 2) | Mul(d, d), same axes); std = Sqrt(Add(var, eps))
 *   y = Div(d, std) [-> Mul(., gamma)] [-> Add(., beta)]    gamma, beta per feature
 * and replaces it and the backward autodiff derived from it (about 20 nodes; fuse_common.h)
 * with
 *   F = LayerNormalization(x, gamma, beta?) (axis a, epsilon = eps as the graph holds it,
 *       stash fp32) -> y, Mean, InvStdDev
 *   G = LayerNormGrad(dy, x, gamma, Mean, InvStdDev) -> dx, dgamma, dbeta
 * Without a gamma Mul, gamma is a constant of ones. x's gradient contributions (from the
 * Sub and from the first ReduceMean) are summed downstream with x's other consumers' (a
 * residual): G's dx takes their place in that sum.
 * Precision FZ_PREC_WIDEST: the pattern's decisions carry over. At O2 the overflow rule
 * keeps Pow/ReduceMean/Add-eps fp32 (squares overflow fp16, eps 1e-12 underflows it):
 * the fused node is fp32 with that reason, reads x and writes y in fp16 and computes the
 * statistics in fp32 -- exactly what the rule asked for, without its Casts. Not fused:
 * intermediates read elsewhere (consumers), an epsilon that is not a float >= 0. A ReduceMean
 * that does not start the pattern is not a candidate. Returns unchanged with o->no_fuse. */
#ifndef APX_PASS_FUSE_LAYERNORM_H
#define APX_PASS_FUSE_LAYERNORM_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_layernorm(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
