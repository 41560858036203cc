/* fuse_xentropy.h - SoftmaxCrossEntropyLoss -> FusedXentropy (DESIGN.md 10; apex's
 * xentropy): no materialized probabilities in backward.
 *
 * pass_fuse_xentropy replaces each forward SoftmaxCrossEntropyLoss(scores, labels) and its
 * SoftmaxCrossEntropyLossGrad (fuse_common.h) with
 *   F = FusedXentropy(scores, labels) -> loss, saved   (saved: fp32 per-row logsumexp, the
 *       row max included, labels' shape: N x d1.. floats instead of the N x C log_prob)
 *   G = FusedXentropyGrad(dLoss, scores, labels, saved) -> dScores (softmax recomputed as
 *       exp(scores - saved)).
 * Reduction and ignore_index carry over. When the scores are an inserted fp16/bf16 -> fp32
 * Cast, F and G read the half scores directly (the loss stays fp32, dScores is written in
 * the half type, which absorbs the Cast the unfused gradient needed): the Cast node goes
 * away unless something else reads it (a graph output). The loss keeps its fp32 decision
 * (loss rule). Not fused: class weights (legality), a log_prob output read elsewhere
 * (consumers). Returns unchanged with o->no_fuse. */
#ifndef APX_PASS_FUSE_XENTROPY_H
#define APX_PASS_FUSE_XENTROPY_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_fuse_xentropy(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
