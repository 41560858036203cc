/* split_sequences.h - SplitToSequence + SequenceAt into Split outputs (DESIGN.md 3; the
 * dynamo exporter writes torch.split this way, e.g. GPT-2's q/k/v split).
 *
 * apexc has no sequence values. The loader reads SplitToSequence and SequenceAt like other
 * ops and inference treats the sequence as its pieces joined along the axis (attrs.h
 * ApxAttrSplitToSequence), refusing any other use of a sequence ("not supported yet: the
 * sequence 'S' is used by node ..."). pass_split_sequences runs right after fold_constants,
 * when every shape is known, and rewrites each live SplitToSequence(x, split?) whose uses are
 * all SequenceAt(seq, position) into one Split(x, sizes) (axis and sizes as an ONNX Split:
 * the sizes an int64 constant input, or the `split` attribute before opset 13) with one
 * output per piece:
 *   - the first SequenceAt of a piece takes that Split output as its own value (same name,
 *     shape and consumers), the other SequenceAt of the same piece become Identity of it;
 *   - with keepdims = 0 and no split (pieces drop the axis), each SequenceAt output is a
 *     Reshape (pass-created, no shape input) of the piece;
 *   - pieces nobody reads get fresh values.
 * The SplitToSequence and SequenceAt nodes are marked dead; the new nodes are canonicalized
 * and inferred, with origin = the SplitToSequence node. Split's gradient (Concat) then
 * serves training. Returns APX_PASS_CHANGED when it rewrote something. */
#ifndef APX_SPLIT_SEQUENCES_H
#define APX_SPLIT_SEQUENCES_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_split_sequences(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
