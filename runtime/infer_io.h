/* infer_io.h - the data of `apexrun infer` (DESIGN.md 13): an input folder read in either
 * format, the plan's inputs fed from it, its outputs written in the same format.
 *
 * Formats (one per folder; a folder holding both is refused):
 *   pb   input_0.pb, input_1.pb ... (ONNX TensorProto test data: K-th data input of the
 *        model, graph.input without initializers, in order) -> output_0.pb, output_1.pb ...
 *   npy  NAME.npy per data input, by graph input name (as training's --data) -> one
 *        NAME.npy per graph output (characters other than letters, digits, '.', '-', '_'
 *        in NAME written as '_'); bfloat16 has no numpy type: such an output is an error.
 * The inputs are kept as bindings (compiler/bind_inputs.h): compiling an ONNX model with
 * them binds the inputs that must be compile-time constants (Reshape's shape, Slice's
 * starts ...) before folding; the others are fed to the plan by name. */
#ifndef APX_INFER_IO_H
#define APX_INFER_IO_H

#include "compiler/bind_inputs.h"
#include "ir/arena.h"
#include "ir/diag.h"
#include "plan/plan.h"
#include "runtime/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxInferFormat { APX_INFER_PB = 1, APX_INFER_NPY = 2 } ApxInferFormat;

typedef struct ApxInferData {
  const char *dir;
  ApxInferFormat format; /* an empty folder reads as pb with no files */
  int32_t n;
  ApxInputBinding *b; /* pb: by index (name filled in by a compile), npy: by name */
  ApxArena arena;     /* names, paths and tensor data */
} ApxInferData;

/* Reads dir in its format. Returns 0, or -1 with a one-line error naming the folder or
 * file (exit 2) in d. Free with apx_infer_data_free in both cases. */
int apx_infer_data_read(const char *dir, ApxInferData *in, ApxDiag *d);
void apx_infer_data_free(ApxInferData *in);
const char *apx_infer_format_name(ApxInferFormat f); /* "input_K.pb" or "NAME.npy" */

/* Feeds every data input of the plan: by name when the bindings have names (npy, or pb
 * bindings a compile resolved), else pb file K to plan input K. Data for no input of the
 * plan, or an input without data, is an error naming the file or input. Returns 0 or -1. */
int apx_infer_set_inputs(ApxExec *ex, const ApxPlan *plan, const ApxInferData *in, ApxDiag *d);

/* The output folder: created if missing, a non-folder refused (before running). 0 or -1. */
int apx_infer_output_dir(const char *dir, ApxDiag *d);

/* Reads every graph output of the plan and writes it into dir (created if missing) in
 * format f. Returns 0 or -1. */
/* Refuses (exit code 2) an output file that would be the model or one of the input files
 * (same inode, or the same canonical path). */
int apx_infer_check_outputs(const ApxPlan *plan, const char *dir, ApxInferFormat f, const char *model,
                            const ApxInferData *in, ApxDiag *d);
int apx_infer_write_outputs(ApxExec *ex, const ApxPlan *plan, const char *dir, ApxInferFormat f, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
