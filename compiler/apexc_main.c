/* apexc_main.c - the apexc command: parse, compile, then print/write what was asked.
 * Exit codes (DESIGN.md 13): 0 success, 1 runtime failure, 2 bad usage or bad input. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/cli.h"
#include "ir/cost.h"
#include "ir/diag.h"
#include "compiler/emit_plan.h"
#include "compiler/pass_timer.h"
#include "compiler/explain.h"
#include "passes/fusion.h"
#include "ir/ir.h"
#include "ir/prefault.h"
#include "compiler/pipeline.h"
#include "kernels/op.h"
#include "passes/bucketing.h"
#include "plan/plan.h"
#include "plan/plan_write.h"

static int list_ops(void) {
  printf("%-30s %-8s %s\n", "op", "O1 list", "support");
  for (int i = 1; i < APX_OP_COUNT; i++) {
    const ApxOpInfo *in = apx_op_info((ApxOp)i);
    const char *support = (in->flags & APX_OPF_V1) ? "v1"
                          : (in->flags & APX_OPF_FOLD) ? "compile-time (folded)"
                          : (in->flags & APX_OPF_TIER2) ? "tier 2 (not supported yet)"
                          : (in->flags & APX_OPF_LISTED) ? "listed only (not supported yet)"
                          : "internal";
    const char *list = in->prec == APX_PREC_HALF ? "half"
                       : in->prec == APX_PREC_FP32 ? "fp32"
                       : in->prec == APX_PREC_PROMOTE ? "promote"
                       : in->prec == APX_PREC_PASS ? "-" : apx_prec_class_name(in->prec);
    printf("%-30s %-8s %s\n", in->name, list, support);
  }
  printf("\nhalf (allow): runs in the half type at O1; fp32 (deny): runs in fp32 at O1;\n"
         "promote: runs in the widest float type of its inputs; -: runs in its inputs' type.\n");
  return 0;
}

static void print_summary(const ApxGraph *g, const ApxOptions *o) {
  int count[APX_OP_COUNT] = {0};
  for (int k = 0; k < g->n_order; k++) count[g->nodes[g->order[k]].op]++;
  int64_t n_params = 0, param_elems = 0, param_bytes = 0;
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *val = &g->vals[v];
    if (val->kind != APX_VAL_PARAM) continue;
    n_params++;
    if (apx_value_numel(val) > 0) param_elems += apx_value_numel(val);
    if (apx_value_bytes(val) > 0) param_bytes += apx_value_bytes(val);
  }
  printf("%s: %d nodes, opset %" PRId64 ", ir_version %" PRId64 ", -O%d\n", g->file, g->n_order,
         g->opset, g->ir_version, (int)o->opt_level);
  char prec[256];
  apx_explain_precision_line(o, prec, sizeof prec);
  printf("precision: %s\n", prec);
  printf("ops:");
  for (int i = 1; i < APX_OP_COUNT; i++)
    if (count[i]) printf(" %s=%d", apx_op_name((ApxOp)i), count[i]);
  printf("\nparameters: %" PRId64 " tensors, %" PRId64 " elements, %" PRId64 " bytes\n", n_params,
         param_elems, param_bytes);
  /* estimated FLOPs per step, by section (ir/cost.h) */
  int64_t flops[3] = {0, 0, 0};
  int unknown = 0;
  for (int k = 0; k < g->n_order; k++) {
    int64_t f = apx_node_flops(g, g->order[k]);
    if (f < 0)
      unknown++;
    else
      flops[g->nodes[g->order[k]].section] += f;
  }
  printf("estimated FLOPs per step: %.4g (forward %.4g, backward %.4g, optimizer %.4g)%s\n",
         (double)(flops[0] + flops[1] + flops[2]), (double)flops[0], (double)flops[1],
         (double)flops[2], unknown ? " (some nodes unknown)" : "");
  if (g->arena_bytes > 0)
    printf("activation arena: %" PRId64 " bytes (lower bound %" PRId64 ", no reuse %" PRId64 ")\n",
           g->arena_bytes, g->peak_live_bytes, g->no_reuse_bytes);
  char bn[320];
  if (apx_explain_bn_running_var(g, o, bn, sizeof bn)) printf("batchnorm running_var: %s\n", bn);
}

static int dump_plan(const char *path) {
  ApxPlan plan;
  ApxDiag d;
  apx_plan_init(&plan);
  apx_diag_init(&d);
  int rc = apx_plan_read(&plan, path, &d);
  if (rc == 0) apx_plan_dump(&plan, stdout);
  else fprintf(stderr, "%s\n", d.msg);
  apx_plan_free(&plan);
  return rc ? (d.code ? d.code : APX_EXIT_BAD_INPUT) : 0;
}

static int run(const ApxOptions *opts, const ApxCliArgs *args);

/* OpenBLAS built with pthreads starts its worker threads as it loads, and they spin in
 * sched_yield ~0.1 s waiting for work: the second core, which the compile's helper threads use,
 * is taken while the model loads. apexc calls BLAS only to fold constants; the workers are
 * stopped as OpenBLAS stops them before a fork (blas_thread_shutdown_, its atfork handler)
 * and come back on its next threaded call. Another BLAS, or one without the symbol: nothing. */
static void stop_blas_workers(void) {
  void (*shutdown)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
  if (shutdown) shutdown();
}

int main(int argc, char **argv) {
#ifdef __GLIBC__
  /* One compile allocates and frees many graph-sized arrays (use lists, orders, planner
   * indexes) pass after pass. glibc serves each of them from a fresh mmap and returns it on
   * free, so every pass paid page faults for zeroed pages again (12% of a 100k-node compile):
   * keep them in the heap instead. apexc is one short run; the memory goes back at exit. */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, -1);
  /* the heap grows in steps of 64 MiB, which ir/prefault.h's helper maps in on the other core
   * before the compile writes them (page faults were ~15% of the main thread) */
  mallopt(M_TOP_PAD, 64 << 20);
#endif
  apx_prefault_start();
  stop_blas_workers();
  ApxOptions o;
  ApxCliArgs a;
  char err[1024];
  int code;
  if (apx_cli_parse(argc, argv, &o, &a, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    code = APX_EXIT_BAD_INPUT;
  } else if (apx_cli_check_outputs(&o, &a, err, sizeof err)) {
    fprintf(stderr, "%s\n", err); /* before compiling: an output that cannot be written */
    code = APX_EXIT_BAD_INPUT;
  } else {
    if (a.warning[0] && !o.quiet) fprintf(stderr, "%s\n", a.warning);
    code = run(&o, &a);
  }
  apx_cli_args_free(&a);
  /* what went to stdout (summary, reports, --explain, --dump-plan, --help) was written: a full
   * disk or a closed pipe is a failure, not a silent loss */
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "apexc: cannot write to stdout: %s\n", strerror(errno ? errno : EIO));
    if (code == 0) code = APX_EXIT_RUNTIME;
  }
  return code;
}

/* The prepared plan file's first size hint (the model's size, capped) and cap; 0: none. */
static uint64_t prepared_hint, prepared_most;

/* apx_inspect_write, then a better hint for the prepared plan file: the model's bytes plus
 * 64 per value of the graph as the passes left it (a plan's metadata is about that much per
 * buffer: 82.2 MB estimated, 82.3 MB written for the 100k-node chain; 652.4 / 652.5 MB for
 * GPT-2), so that the plan is written into zeroed pages, not fresh ones. */
static int inspect_and_prepare(const ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  if (apx_inspect_write(g, o, d)) return -1;
  if (prepared_hint) {
    uint64_t more = prepared_hint + 64 * (uint64_t)g->n_vals;
    apx_plan_prepare_more(more < prepared_most ? more : prepared_most);
  }
  return 0;
}

static int run(const ApxOptions *opts, const ApxCliArgs *args) {
  ApxOptions o = *opts;
  const ApxCliArgs a = *args;
  switch (a.action) {
    case APX_CLI_HELP: fputs(apx_cli_usage(), stdout); return 0;
    case APX_CLI_VERSION: printf("apexc %s\n", APX_VERSION); return 0;
    case APX_CLI_LIST_OPS: return list_ops();
    case APX_CLI_DUMP_PLAN: return dump_plan(a.dump_plan_path);
    case APX_CLI_COMPILE: break;
  }
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = o.quiet;
  ApxGraph g;
  /* the plan file's pages are made while the compile runs (plan/plan_write.h); the model's
   * size is the hint (a plan holds its weights once and a little more), at most 2 GiB (on a
   * disk, zeros the kernel began writing back before the plan overwrote them would cost more
   * than they save) */
  struct stat st;
  if (a.write_plan && o.model_path && o.output_path && stat(o.model_path, &st) == 0 &&
      S_ISREG(st.st_mode)) {
    uint64_t hint = (uint64_t)st.st_size, most = (uint64_t)2 << 30;
    prepared_hint = hint < most ? hint : most;
    prepared_most = most;
    apx_plan_prepare_output(o.output_path, prepared_hint);
  }
  int rc = apx_compile_file_inspected(&g, &o, inspect_and_prepare, &d);
  /* fusion happens after --explain's rows are written: its section is appended */
  if (rc == 0 && o.explain == 1) rc = apx_explain_fusion_emit(&g, &o, &d);
  if (rc == 0 && o.explain == 1) rc = apx_explain_buckets_emit(&g, &o, &d);
  if (rc == 0 && o.fusion_report) apx_fusion_report_write(&g, stdout);
  if (rc == 0 && a.bucket_report) apx_buckets_report_write(&g, &o, a.bucket_report == 2, stdout);
  /* the summary names the arena's size: when a plan is written, the packing runs beside
   * building it (o.memplan_background), so the summary comes after */
  if (rc == 0 && a.summary && !a.write_plan) print_summary(&g, &o);
  fflush(stdout); /* the summary and reports before anything later on stderr, when piped */
  if (rc == 0 && a.write_plan) {
    /* the CLI sets output_path (-o, or MODEL.apx next to the model) whenever it writes */
    rc = apx_emit_plan_file(&g, &o, o.output_path, &d);
    if (rc == 0 && a.summary) print_summary(&g, &o);
    fflush(stdout);
    if (rc == 0 && !o.quiet) fprintf(stderr, "wrote %s\n", o.output_path);
  }
  apx_plan_cancel_output(); /* (a compile that failed: its prepared file goes) */
  if (rc == 0) apx_stage_total(); /* --time-passes */
  if (rc) fprintf(stderr, "%s\n", d.msg);
  int code = rc ? d.code : 0;
  apx_graph_free(&g);
  return code;
}
