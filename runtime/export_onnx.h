/* export_onnx.h - `apexrun PLAN --export-onnx F`: the trained model back as ONNX for
 * inference (DESIGN.md 1: "get the trained model back").
 *
 * apexc embeds the source model in every training plan (blob "model.onnx", plan.h;
 * without the initializer bytes the plan holds anyway). Export starts from that model, so the user gets their own graph back (names,
 * symbolic dims, opset) with:
 *  - trained weights: each initializer named like a plan PARAM gets the fp32 master when
 *    the plan keeps one (O2), else the parameter itself; BatchNormalization running
 *    statistics (STATE) likewise; each converted to the initializer's own ONNX dtype
 *    (fp32 for fp32 models; half parameters without masters, O3, are widened exactly).
 *    Other initializers (constants) get their bytes back from the plan where apexc
 *    stripped them from the embedded copy (plan/model_blob.h), else keep their own; one
 *    stored as external data is written inline when the plan holds it, else "not
 *    supported yet".
 *  - training-only parts removed: the loss output (every loss, with several: apexc --loss
 *    A,B) and every node, graph input (the labels) and initializer only they needed are
 *    dropped when the model has another output (a model whose only outputs are losses keeps
 *    them); BatchNormalization(training_mode=1) becomes
 *    training_mode=0 without its running-statistics outputs; Dropout loses its
 *    training_mode input (inference: identity); ModelProto.training_info is dropped.
 * The file is written atomically (temp file, fsync, rename). onnxruntime runs it
 * (runtime/export_onnx_test). */
#ifndef APX_EXPORT_ONNX_H
#define APX_EXPORT_ONNX_H

#include "ir/diag.h"
#include "runtime/exec.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the model with ex's current parameters to path. Returns 0 or -1 (code 2 when the
 * plan cannot be exported: no embedded model, unsupported external data; 1 for I/O). */
int apx_export_onnx(const ApxPlan *plan, ApxExec *ex, const char *path, ApxDiag *d);

/* Before training (apexrun checks this first): the plan embeds its model, path is not a
 * folder nor another non-regular file (a device, a FIFO: "<path>: not a regular file
 * (refusing to replace it)"; apx_export_onnx refuses it too), and a file can be created
 * beside it (a temporary file, created and removed). Returns 0 or -1 with
 * "<path>: cannot write: <reason>" (code 2). */
int apx_export_onnx_check(const ApxPlan *plan, const char *path, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
