/* onnx_load.h - ONNX ModelProto -> IR (protobuf-c, C generated at build time from the
 * system's onnx.proto; DESIGN.md 2).
 *
 * What the loader produces in g (initialized by the caller with apx_graph_init):
 *  - g->ir_version, g->opset (ai.onnx); checks ir_version 7..10 (warns above 10, rejects
 *    below o->ir_version_min), ai.onnx opset o->opset_min..21 (defaults 7 and 13), no
 *    other domains, no control flow.
 *  - one value per graph input, initializer and node output. Initializers become
 *    APX_VAL_PARAM (float types, trainable unless --frozen) or APX_VAL_CONST, with data
 *    decoded to host little-endian bytes from raw_data, typed fields or external data
 *    (location relative to the model's folder; a path escaping it is rejected). Graph inputs
 *    without an initializer are APX_VAL_INPUT (g->inputs, in order) with dtype and shape from
 *    their type; symbolic dims are bound by --dim NAME=V or stay -1 with dim_params set.
 *  - Constant nodes become APX_VAL_CONST values (no node).
 *  - one node per other NodeProto with generic attributes (typed attributes are filled by
 *    canonicalization in ir/infer.h); empty input/output names are -1.
 *  - value_info types/shapes recorded on the values they name.
 *  - graph outputs flagged; g->loss = --loss NAME or the first output.
 *  - g->order topologically sorted (a cycle is an error).
 *  - trainable parameters: when metadata_props holds APX_TRAINABLE_KEY (a JSON array of
 *    initializer names, written by scripts/apexc_torch.py), exactly the listed float
 *    initializers are APX_VAL_PARAM and every other float initializer is APX_VAL_CONST with
 *    APX_VALF_FROZEN; a listed name that is not a float initializer is an error; --frozen
 *    still removes names. Without the key every float initializer not --frozen is a PARAM.
 *  - in training compiles, the warnings of compiler/export_hazards.h.
 * Unknown, tier-2 and list-only ops are errors reported all at once: one line per op type
 * with its node count and first node (`m.onnx: node 'n' (Trilu): unknown op ... (first of 2
 * nodes)`), exit code 2. Undefined inputs, bad tensors and the like are errors: one line
 * naming the file, the node (name and op) and the problem, exit code 2. */
#ifndef APX_ONNX_LOAD_H
#define APX_ONNX_LOAD_H

#include <stddef.h>

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The metadata_props key listing the trainable initializers (DESIGN.md 2). */
#define APX_TRAINABLE_KEY "apexc.trainable"

/* o may be NULL (no --dim, --loss, --frozen). Returns 0 or -1 (error in d). */
int apx_onnx_load_file(ApxGraph *g, const char *path, const ApxOptions *o, ApxDiag *d);
/* base_dir: folder external data locations are relative to (NULL: external data refused). */
int apx_onnx_load_memory(ApxGraph *g, const void *buf, size_t len, const char *base_dir,
                         const ApxOptions *o, ApxDiag *d);

/* Reads a serialized TensorProto (ONNX test data input_K.pb / output_K.pb). The payload
 * and name are allocated in arena. Returns 0 or -1. */
int apx_onnx_read_tensor_file(const char *path, ApxArena *arena, ApxTensorConst *out,
                              const char **name, ApxDiag *d);
/* Writes t as a TensorProto with raw_data (name may be NULL). Returns 0 or -1. */
int apx_onnx_write_tensor_file(const char *path, const char *name, const ApxTensor *t,
                               ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
