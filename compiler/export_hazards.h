/* export_hazards.h - compile-time warnings about what PyTorch exporters do to a model
 * (DESIGN.md 2), run by the ONNX loader in training compiles, one line each:
 *
 *  - a trained initializer that looks like a constant: a Pow exponent, a scalar scale (Mul,
 *    Div), an additive mask (Add/Sub/Where with values <= -1e4), an epsilon-like scalar, or
 *    values outside fp16 range when -O2/-O3 casts the model to fp16 (suggests --frozen);
 *  - a trained initializer shared by nodes of unrelated layers (it trains tied);
 *  - BatchNormalization without training_mode=1.
 * The last two only without apexc.trainable.
 *
 * With the apexc.trainable list only listed names are parameters, so the constant-like
 * warnings concern listed names only; sharing and BatchNorm modes are not reported: the list
 * comes from model.named_parameters() (a tensor used twice is PyTorch's own tying) and the
 * helper exports each BatchNorm in its module's mode (eval() for a frozen one). */
#ifndef APX_EXPORT_HAZARDS_H
#define APX_EXPORT_HAZARDS_H

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxTrainableSource {
  APX_TRAINABLE_ALL_FLOATS = 0, /* no apexc.trainable: every float initializer not --frozen */
  APX_TRAINABLE_LISTED,         /* metadata_props apexc.trainable */
} ApxTrainableSource;

/* At most this many lines per kind of warning, then one line counting the rest. */
#define APX_HAZARD_MAX_LINES 5

/* Loaded, toposorted g. Prints warnings to d; never fails. Changes nothing in g but the
 * memo of weights found inside fp16 range (apx_const_range_check_memo). */
void apx_warn_export_hazards(ApxGraph *g, const ApxOptions *o, ApxTrainableSource src,
                             ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
