/* emit_onnx_tool.c - test driver for the onnxruntime cross-check (tests/ort): compiles a
 * model with apexc's own option parsing and pipeline, then writes the forward graph with
 * apx_emit_onnx, the way `apexc MODEL --emit-onnx FILE` does.
 *
 *   emit_onnx_tool MODEL.onnx --emit-onnx OUT.onnx [apexc options: -O1, --half=bf16,
 *                  --inference, --allow-old-opset ...]
 *   emit_onnx_tool --list-passes      prints the pipeline's pass names, one per line
 *
 * The model is written by the pipeline's inspection function (apx_inspect_write, after
 * cast insertion and before fusion), as apexc does; only when the pipeline wrote nothing
 * (a disabled inspection point) does the tool emit after the whole compile. Exit codes as
 * apexc: 0, 1 runtime, 2 bad input. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compiler/cli.h"
#include "ir/diag.h"
#include "compiler/emit_onnx.h"
#include "ir/ir.h"
#include "compiler/pipeline.h"

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--list-passes")) {
    int n = 0;
    const ApxPassInfo *p = apx_pipeline_passes(&n);
    for (int i = 0; i < n; i++) printf("%s\n", p[i].name);
    return 0;
  }
  ApxOptions o;
  ApxCliArgs a;
  char err[1024];
  if (apx_cli_parse(argc, argv, &o, &a, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return APX_EXIT_BAD_INPUT;
  }
  if (a.action != APX_CLI_COMPILE || !o.emit_onnx) {
    fprintf(stderr, "emit_onnx_tool: usage: emit_onnx_tool MODEL.onnx --emit-onnx OUT.onnx [apexc options]\n");
    return APX_EXIT_BAD_INPUT;
  }
  o.quiet = 1;
  unlink(o.emit_onnx);
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  ApxGraph g;
  /* as apexc: the model is written at the pipeline's inspection point (before fusion) */
  int rc = apx_compile_file_inspected(&g, &o, apx_inspect_write, &d);
  if (rc == 0 && access(o.emit_onnx, F_OK) != 0) rc = apx_emit_onnx(&g, o.emit_onnx, &d);
  if (rc) fprintf(stderr, "%s\n", d.msg);
  int code = rc ? d.code : 0;
  apx_graph_free(&g);
  return code;
}
