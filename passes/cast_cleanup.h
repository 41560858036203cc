/* cast_cleanup.h - removes redundant casts after pass_cast_insert (DESIGN.md 6, 7).
 *
 * pass_cast_cleanup walks the Cast nodes in g->order, resolving each one's input through
 * the substitutions made so far, and:
 *  - chains: Cast(Cast_ins(z)) where Cast_ins was inserted by cast_insert, or is a
 *    lossless widening (fp16/bf16 -> fp32/fp64, fp32 -> fp64), reads z directly; so an
 *    fp32 -> half -> fp32 round trip becomes a no-op (the consumer gets the original value,
 *    without the half rounding nobody asked for). A narrowing Cast written in the model is
 *    kept (the model asked for that rounding);
 *  - no-op casts (input already of the target type) are removed: users read the input;
 *  - casts of constants are folded into a converted constant (no Cast node);
 *  - duplicate casts (same input, same target type) are merged into the first;
 *  - inserted Casts left without users are removed.
 * A Cast whose output is a graph output or the loss keeps its node (the output name must
 * stay), but its input is still resolved. Users of a removed Cast's output read the
 * replacement everywhere (any section). The number of live Cast nodes before and after
 * goes to g->casts.before_cleanup / .after_cleanup; folded constants add to
 * g->casts.folded. Returns APX_PASS_CHANGED when a node was removed or rewired. */
#ifndef APX_PASS_CAST_CLEANUP_H
#define APX_PASS_CAST_CLEANUP_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_cast_cleanup(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
