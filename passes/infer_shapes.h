/* infer_shapes.h - static shape and dtype inference over the whole graph (DESIGN.md 4).
 *
 * pass_infer_shapes walks g->order (re-sorted after fold_constants) and runs
 * apx_node_canonicalize + apx_node_infer (ir/infer.h) on every live node, so every
 * value a live node uses or produces ends with a known dtype and a full static shape
 * (APX_VALF_SHAPE_KNOWN), and so does every graph output. Errors are the inference errors
 * (shape mismatches, unbound symbolic dims: "pass --dim NAME=V", value_info conflicts) or
 * "value 'x': graph output has no known shape". Returns APX_PASS_CHANGED when some value's
 * dtype or shape was filled in or completed, APX_PASS_UNCHANGED when everything was
 * already inferred (a second run), APX_PASS_ERROR with the message in d. */
#ifndef APX_INFER_SHAPES_H
#define APX_INFER_SHAPES_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_infer_shapes(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
