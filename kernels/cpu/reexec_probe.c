/* reexec_probe.c - test helper for apx_cpu_reexec_tuned (reexec_test.cc): appends one line
 * per start of main to the file argv[1] (pid, OpenBLAS core, OPENBLAS_CORETYPE,
 * OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY, the argument count), then calls
 * apx_cpu_reexec_tuned, and in the
 * process that goes on, whether the re-exec mark is still set and the process name. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  FILE *f = fopen(argv[1], "a");
  if (!f) return 1;
  const char *ct = getenv("OPENBLAS_CORETYPE"), *nt = getenv("OPENBLAS_NUM_THREADS"),
             *sc = getenv("OMP_WAIT_POLICY");
  fprintf(f, "pid=%ld core=%s env=%s threads=%s wait=%s argc=%d\n", (long)getpid(),
          openblas_get_corename(), ct ? ct : "-", nt ? nt : "-", sc ? sc : "-", argc);
  fclose(f);
  apx_cpu_reexec_tuned(argv);
  /* only the final process gets here */
  f = fopen(argv[1], "a");
  if (!f) return 1;
  char name[32] = "";
  FILE *c = fopen("/proc/self/comm", "r");
  if (c) {
    if (!fgets(name, sizeof name, c)) name[0] = '\0';
    name[strcspn(name, "\n")] = '\0';
    fclose(c);
  }
  fprintf(f, "done mark=%s comm=%s\n", getenv("APX_CPU_REEXEC") ? "set" : "unset", name);
  fclose(f);
  return 0;
}
