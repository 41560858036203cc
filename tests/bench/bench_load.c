/* bench_load.c - times the front of the compiler on a large model (issue 2): ONNX load
 * (protobuf-c unpack + IR), apx_graph_verify, pass_fold_constants and pass_infer_shapes,
 * (each followed by a toposort when it changed the graph, as in the pipeline), run R times on
 * a fresh load; prints the median seconds per phase and of the total, and
 * the process's peak RSS (getrusage ru_maxrss: the high-water mark over all runs, so that of
 * one run plus the binary). Target for 100k nodes (tests/bench/make_big_graph.py): total
 * under 1 s.
 *
 *   bench_load MODEL.onnx [RUNS]      default 5 runs; exit 1 if any phase fails */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ir/diag.h"
#include "ir/ir.h"
#include "compiler/onnx_load.h"
#include "ir/options.h"
#include "kernels/cpu/cpu_kernels.h"
#include "passes/fold_constants.h"
#include "passes/infer_shapes.h"

enum { PHASES = 4, MAX_RUNS = 101 };
static const char *phase_names[PHASES] = {"load", "verify", "fold_constants", "infer_shapes"};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* As the pipeline does (compiler/pipeline.c): a changing pass is followed by a toposort. */
static int run_pass(ApxGraph *g, int rc, ApxDiag *d) {
  if (rc < 0) return -1;
  return rc > 0 && apx_graph_toposort(g, d) ? -1 : 0;
}

int main(int argc, char **argv) {
  apx_cpu_reexec_tuned(argv); /* constant folding runs CPU kernels: OpenBLAS's fast core */
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: bench_load MODEL.onnx [RUNS]\n");
    return 2;
  }
  int runs = argc == 3 ? atoi(argv[2]) : 5;
  if (runs < 1 || runs > MAX_RUNS) {
    fprintf(stderr, "bench_load: RUNS must be 1..%d\n", MAX_RUNS);
    return 2;
  }
  ApxOptions o;
  apx_options_init(&o);
  o.model_path = argv[1];
  o.quiet = 1;
  static double t[PHASES + 1][MAX_RUNS];
  int32_t n_nodes = 0, n_vals = 0, n_loaded = 0;
  for (int r = 0; r < runs; r++) {
    ApxDiag d;
    apx_diag_init(&d);
    d.quiet = 1;
    ApxGraph g;
    apx_graph_init(&g, argv[1]);
    double t0 = now();
    int rc = apx_onnx_load_file(&g, argv[1], &o, &d);
    double t1 = now();
    n_loaded = g.n_order;
    if (!rc) rc = apx_graph_verify(&g, &d);
    double t2 = now();
    if (!rc) rc = run_pass(&g, pass_fold_constants(&g, &o, &d), &d);
    double t3 = now();
    if (!rc) rc = run_pass(&g, pass_infer_shapes(&g, &o, &d), &d);
    double t4 = now();
    if (rc) {
      fprintf(stderr, "bench_load: %s\n", d.msg);
      apx_graph_free(&g);
      return 1;
    }
    n_nodes = g.n_order;
    n_vals = g.n_vals;
    t[0][r] = t1 - t0;
    t[1][r] = t2 - t1;
    t[2][r] = t3 - t2;
    t[3][r] = t4 - t3;
    t[PHASES][r] = t4 - t0;
    apx_graph_free(&g);
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("%s: %d nodes loaded (Constant nodes become values), %d live after folding, %d values; "
         "median of %d runs:\n", argv[1], n_loaded, n_nodes, n_vals, runs);
  for (int p = 0; p < PHASES; p++) printf("  %-15s %8.3f s\n", phase_names[p], median(t[p], runs));
  double total = median(t[PHASES], runs);
  printf("  %-15s %8.3f s (target < 1 s: %s)\n", "total", total, total < 1.0 ? "met" : "NOT met");
  printf("  peak RSS        %8.1f MiB\n", (double)ru.ru_maxrss / 1024.0);
  return 0;
}
