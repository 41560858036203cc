/* model_blob.h - the source model apexc embeds in training plans (blob "model.onnx",
 * plan.h), kept small: the bytes of every initializer the plan itself holds are removed,
 * so a plan does not carry its weights twice.
 *
 * An initializer is stripped (its data fields emptied; dims and dtype kept) when the plan
 * has a buffer of the same name that is a PARAM or STATE (export writes the trained value
 * there anyway) or a CONST whose initial bytes are the initializer's exactly (same dtype and
 * element count). Export (export_onnx.h) puts the bytes back from the plan; an initializer
 * with elements but no data is a stripped one. */
#ifndef APX_MODEL_BLOB_H
#define APX_MODEL_BLOB_H

#include <stddef.h>

#include "ir/arena.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *out / *out_len: the model with restorable initializers stripped (allocated in A), or the
 * input itself when it does not parse as ONNX or nothing can be stripped. Returns 0, or -1
 * when out of memory. */
int apx_model_blob_strip(const ApxPlan *p, const void *model, size_t len, ApxArena *A,
                         const void **out, size_t *out_len);

/* How apx_model_blob_strip_by finds initializer name's plan buffer: find(ctx, name) gives
 * its id or -1, the answer apx_plan_find_buffer gives; a caller that knows it without the
 * plan's index (apexc, from its graph's name table) need not build the index. */
typedef struct ApxBlobLookup {
  int32_t (*find)(void *ctx, const char *name);
  void *ctx;
} ApxBlobLookup;

/* apx_model_blob_strip with the lookups of by (NULL: the plan's index). */
int apx_model_blob_strip_by(const ApxPlan *p, const ApxBlobLookup *by, const void *model,
                            size_t len, ApxArena *A, const void **out, size_t *out_len);

/* The plan buffer holding the bytes of stripped-or-trained initializer name: the fp32
 * master of a PARAM when it has one, the PARAM/STATE itself, or a CONST with initial data;
 * -1 when none. */
int32_t apx_model_blob_source(const ApxPlan *p, const char *name);

#ifdef __cplusplus
}
#endif
#endif
