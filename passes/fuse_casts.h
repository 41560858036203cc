/* fuse_casts.h - Casts folded into the kernels next to them (DESIGN.md 10).
 *
 * Most Casts disappear inside the other fusion passes, which give fused kernels the
 * storage types of their region's boundary (fuse_common.h): FusedXentropy(Grad) read half
 * scores and write half dScores, BatchNormRelu(Grad) read and write half X/Y/dX with fp32
 * statistics, FusedSoftmax reads half scores and an fp32 mask, LayerNormalization writes
 * the pattern's output type. pass_fuse_casts runs after them and folds what is left where
 * it is exact: an inserted narrowing Cast (fp32 -> fp16/bf16, fp64 -> fp32 ...) whose input
 * is output 0 of a pass-created kernel that computes in fp32 and can round its output to
 * any float type on store, and that nothing else reads: the producer writes the Cast's
 * output directly (one rounding of the same fp32 value either way). Kernels that take
 * mixed storage types this way (ir/infer_nn.c keeps a preset output dtype for them):
 *   LayerNormalization (Y), LayerNormGrad (dX), FusedSoftmax (Y), FusedSoftmaxGrad (dX),
 *   FusedXentropyGrad (dScores), BatchNormRelu (Y), BatchNormReluGrad (dX).
 * (Every CPU kernel reads any float input type -- dispatch converts to fp32 -- but ONNX
 * ops keep ONNX's typing rules in the IR, so only these are folded.) Widening Casts are
 * not folded into producers (that would skip a rounding the unfused graph does) and Casts
 * of graph outputs stay. Each fold is a record in the fusion report ("Cast into
 * producer"); a candidate whose value is read elsewhere is recorded as "consumers".
 * Returns unchanged with o->no_fuse. */
#ifndef APX_PASS_FUSE_CASTS_H
#define APX_PASS_FUSE_CASTS_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_casts(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
