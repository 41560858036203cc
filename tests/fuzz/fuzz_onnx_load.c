/* fuzz_onnx_load.c - libFuzzer target for the ONNX loader (built by scripts/fuzz_loader.sh,
 * outside Bazel, with -fsanitize=fuzzer,address,undefined).
 *
 * Each input is loaded as a model into a fresh graph. Invariants checked besides "no crash,
 * no leak, no out-of-bounds access": a rejected input has one error line that starts with the
 * file name (or, for a report of several unsupported ops, several such lines) and exit code
 * 1 or 2; an accepted one passes apx_graph_verify. External data
 * resolves against a scratch folder holding one 64-byte file, w.bin, so that path is fuzzed
 * too without touching anything else. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/onnx_load.h"

static char g_base[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *env = getenv("APEXC_FUZZ_EXT_DIR"); /* set by fuzz_loader.sh */
  if (env && *env && strlen(env) < sizeof g_base) {
    snprintf(g_base, sizeof g_base, "%s", env);
  } else {
    snprintf(g_base, sizeof g_base, "/tmp/apexc-fuzz-ext.XXXXXX");
    if (!mkdtemp(g_base)) abort();
  }
  char path[128];
  snprintf(path, sizeof path, "%s/w.bin", g_base);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  for (int i = 0; i < 64; i++) fputc(i, f);
  fclose(f);
  return 0;
}

/* Every line of the report starts with "fuzz.onnx: " (the last may be "..." when it filled
 * the buffer). */
static int report_ok(const char *msg) {
  for (const char *line = msg;;) {
    const char *nl = strchr(line, '\n');
    if (strncmp(line, "fuzz.onnx: ", 11) != 0 && !(line != msg && strcmp(line, "...") == 0))
      return 0;
    if (!nl) return 1;
    line = nl + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  apx_graph_init(&g, "fuzz.onnx");
  apx_diag_init(&d);
  d.quiet = 1;
  apx_options_init(&o);
  o.opset_min = 1; /* the widest accepted range reaches the most code */
  o.ir_version_min = 3;
  o.n_dims = 1;
  o.dim_names[0] = "N";
  o.dim_values[0] = 4;
  int rc = apx_onnx_load_memory(&g, data, size, g_base, &o, &d);
  if (rc == 0) {
    ApxDiag vd;
    apx_diag_init(&vd);
    if (apx_graph_verify(&g, &vd) != 0) {
      fprintf(stderr, "loaded graph fails the verifier: %s\n", vd.msg);
      abort();
    }
    if (g.n_outputs < 1 || g.loss < 0 || g.n_order != g.n_nodes) abort();
  } else {
    if (rc != -1 || (d.code != APX_EXIT_BAD_INPUT && d.code != APX_EXIT_RUNTIME) ||
        !report_ok(d.msg)) {
      fprintf(stderr, "bad error report: rc %d code %d msg '%s'\n", rc, d.code, d.msg);
      abort();
    }
  }
  apx_graph_free(&g);
  return 0;
}
