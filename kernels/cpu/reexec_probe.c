/* reexec_probe.c - test helper for apx_cpu_reexec_tuned (reexec_test.cc): appends one line
 * per start of main to the file argv[1] (pid, OpenBLAS core, OPENBLAS_CORETYPE, whether the
 * re-exec mark is still set, the argument count), then calls apx_cpu_reexec_tuned. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  FILE *f = fopen(argv[1], "a");
  if (!f) return 1;
  const char *ct = getenv("OPENBLAS_CORETYPE");
  fprintf(f, "pid=%ld core=%s env=%s argc=%d\n", (long)getpid(), openblas_get_corename(),
          ct ? ct : "-", argc);
  fclose(f);
  apx_cpu_reexec_tuned(argv);
  /* only the final process gets here */
  f = fopen(argv[1], "a");
  if (!f) return 1;
  fprintf(f, "done mark=%s\n", getenv("APX_CPU_REEXEC") ? "set" : "unset");
  fclose(f);
  return 0;
}
