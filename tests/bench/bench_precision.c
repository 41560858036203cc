/* bench_precision.c - times the precision passes (overflow_check, precision, cast_insert,
 * cast_cleanup) on a generated graph of about 100k nodes, the way the pipeline runs them
 * (toposort after a changing pass), plus --explain=json to /dev/null.
 *
 *   bench_precision [BLOCKS] [O-level 0..3]     default 5000 blocks (100k nodes), O1 and O2
 *
 * A block is a transformer-like forward chain of 10 nodes (MatMul, bias Add, Gelu, Mul by
 * a scalar, Add of an additive mask (a -1e9 mask in every 10th block, so the overflow rule
 * fires), Softmax, residual Add, LayerNormalization, Reshape, Relu) with one backward node
 * per forward node (origin set), so half the graph is backward. Prints one line per pass
 * and the total; exits 1 if a pass fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/explain.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "passes/cast_cleanup.h"
#include "passes/cast_insert.h"
#include "passes/overflow_check.h"
#include "passes/precision.h"

enum { B = 8, D = 32 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int val(ApxGraph *g, ApxDiag *d, ApxValueKind k, int rank, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return apx_graph_add_value(g, d, NULL, k, APX_DT_F32, rank, dims);
}

static int constant(ApxGraph *g, ApxDiag *d, ApxValueKind k, int rank, int64_t d0, int64_t d1, float fill,
                    float alt) {
  int v = val(g, d, k, rank, d0, d1);
  if (v < 0) return -1;
  int64_t n = apx_value_numel(&g->vals[v]);
  float *p = apx_arena_alloc_raw(&g->arena, (size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = (i % 2) ? alt : fill * (float)((i % 7) + 1) / 7.0f;
  g->vals[v].data = p;
  return v;
}

static int node(ApxGraph *g, ApxDiag *d, ApxOp op, int n_in, const int *in, int out, ApxSection s, int origin) {
  int id = apx_graph_add_node(g, d, op, NULL, n_in, in, 1, &out);
  if (id < 0) return -1;
  g->nodes[id].section = s;
  g->nodes[id].origin = origin;
  return id;
}

static int build(ApxGraph *g, ApxDiag *d, int blocks) {
  int x = val(g, d, APX_VAL_INPUT, 2, B, D);
  g->inputs = apx_arena_alloc(&g->arena, sizeof(int));
  g->inputs[0] = x;
  g->n_inputs = 1;
  int half = constant(g, d, APX_VAL_CONST, 0, 0, 0, 0.5f, 0.5f);
  int mask_ok = constant(g, d, APX_VAL_CONST, 2, B, D, 0.0f, -30.0f);
  int mask_bad = constant(g, d, APX_VAL_CONST, 2, B, D, 0.0f, -1e9f);
  int shape = apx_graph_add_value(g, d, NULL, APX_VAL_CONST, APX_DT_I64, 1, (int64_t[]){2});
  int64_t *sd = apx_arena_alloc(&g->arena, 2 * sizeof(int64_t));
  sd[0] = B;
  sd[1] = D;
  g->vals[shape].data = sd;
  int *fwd = malloc(sizeof(int) * (size_t)blocks * 10);
  int *fout = malloc(sizeof(int) * (size_t)blocks * 10);
  int *fin = malloc(sizeof(int) * (size_t)blocks * 10);
  if (!fwd || !fout || !fin) return -1;
  int cur = x, nf = 0;
  for (int b = 0; b < blocks; b++) {
    int w = constant(g, d, APX_VAL_PARAM, 2, D, D, 0.02f, -0.01f);
    int bias = constant(g, d, APX_VAL_PARAM, 1, D, 0, 0.0f, 0.01f);
    int gam = constant(g, d, APX_VAL_PARAM, 1, D, 0, 1.0f, 1.0f);
    int bet = constant(g, d, APX_VAL_PARAM, 1, D, 0, 0.0f, 0.0f);
    int mask = (b % 10 == 9) ? mask_bad : mask_ok;
    struct {
      ApxOp op;
      int a, c;
    } steps[10] = {
        {APX_OP_MatMul, -2, w},   {APX_OP_Add, -2, bias},         {APX_OP_Gelu, -2, -1},
        {APX_OP_Mul, -2, half},   {APX_OP_Add, -2, mask},         {APX_OP_Softmax, -2, -1},
        {APX_OP_Add, -2, cur},    {APX_OP_LayerNormalization, -2, gam}, {APX_OP_Reshape, -2, shape},
        {APX_OP_Relu, -2, -1},
    };
    (void)bet;
    int prev = cur;
    for (int s = 0; s < 10; s++) {
      int out = val(g, d, APX_VAL_ACTIVATION, 2, B, D);
      int in[3] = {prev, steps[s].c, bet};
      int n_in = steps[s].c < 0 ? 1 : steps[s].op == APX_OP_LayerNormalization ? 3 : 2;
      int id = node(g, d, steps[s].op, n_in, in, out, APX_SEC_FORWARD, -1);
      if (id < 0) return -1;
      if (steps[s].op == APX_OP_Softmax) APX_NODE_ATTRS(g, id, ApxAttrAxis)->axis = 1;
      if (steps[s].op == APX_OP_LayerNormalization) {
        APX_NODE_ATTRS(g, id, ApxAttrLayerNorm)->axis = 1;
        APX_NODE_ATTRS(g, id, ApxAttrLayerNorm)->epsilon = 1e-5f;
        APX_NODE_ATTRS(g, id, ApxAttrLayerNorm)->stash_type = 1;
      }
      fwd[nf] = id;
      fin[nf] = prev;
      fout[nf++] = out;
      prev = out;
    }
    cur = prev;
  }
  /* loss-free backward chain: one node per forward node, in reverse */
  int dy = val(g, d, APX_VAL_INPUT, 2, B, D);
  for (int i = nf - 1; i >= 0; i--) {
    int out = val(g, d, APX_VAL_ACTIVATION, 2, B, D);
    ApxOp fop = g->nodes[fwd[i]].op;
    ApxOp op = fop == APX_OP_MatMul ? APX_OP_FusedMatMul
               : fop == APX_OP_Softmax ? APX_OP_SoftmaxGrad
               : fop == APX_OP_Gelu ? APX_OP_GeluGrad
               : fop == APX_OP_Relu ? APX_OP_ReluGrad
                                    : APX_OP_Identity;
    int in[2] = {dy, op == APX_OP_FusedMatMul ? g->nodes[fwd[i]].in[1] : op == APX_OP_GeluGrad ? fin[i] : fout[i]};
    int id = node(g, d, op, op == APX_OP_Identity ? 1 : 2, in, out, APX_SEC_BACKWARD, fwd[i]);
    if (id < 0) return -1;
    if (op == APX_OP_FusedMatMul) {
      APX_NODE_ATTRS(g, id, ApxAttrFusedMatMul)->trans_b = 1;
      APX_NODE_ATTRS(g, id, ApxAttrFusedMatMul)->alpha = 1.0f;
    }
    dy = out;
  }
  g->outputs = apx_arena_alloc(&g->arena, 2 * sizeof(int));
  g->outputs[0] = cur;
  g->outputs[1] = dy;
  g->n_outputs = 2;
  g->vals[cur].flags |= APX_VALF_GRAPH_OUTPUT;
  g->vals[dy].flags |= APX_VALF_GRAPH_OUTPUT;
  free(fwd);
  free(fout);
  free(fin);
  return apx_graph_toposort(g, d);
}

static int run_level(int blocks, ApxOptLevel level) {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  apx_graph_init(&g, "bench.onnx");
  apx_diag_init(&d);
  d.quiet = 1;
  apx_options_init(&o);
  o.opt_level = level;
  char err[256];
  if (apx_options_apply_preset(&o, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  double t0 = now();
  if (build(&g, &d, blocks)) {
    fprintf(stderr, "build failed: %s\n", d.msg);
    return 1;
  }
  double t_build = now() - t0;
  printf("O%d: %d nodes (%d forward blocks), %d values; graph built in %.3f s\n", (int)level, g.n_order,
         blocks, g.n_vals, t_build);
  struct {
    const char *name;
    ApxPassFn fn;
  } passes[] = {{"overflow_check", pass_overflow_check},
                {"precision", pass_precision},
                {"cast_insert", pass_cast_insert},
                {"cast_cleanup", pass_cast_cleanup}};
  double total = 0, total_sort = 0;
  for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
    double a = now();
    int rc = passes[p].fn(&g, &o, &d);
    double b = now();
    if (rc < 0) {
      fprintf(stderr, "%s failed: %s\n", passes[p].name, d.msg);
      return 1;
    }
    double s = 0;
    if (rc == APX_PASS_CHANGED) {
      if (apx_graph_toposort(&g, &d)) {
        fprintf(stderr, "toposort failed: %s\n", d.msg);
        return 1;
      }
      s = now() - b;
    }
    printf("  %-15s %7.3f s  (+ toposort %.3f s)\n", passes[p].name, b - a, s);
    total += b - a;
    total_sort += s;
  }
  if (apx_graph_verify(&g, &d)) {
    fprintf(stderr, "verify failed: %s\n", d.msg);
    return 1;
  }
  FILE *null = fopen("/dev/null", "w");
  double a = now();
  if (null) apx_explain_write(&g, &o, APX_EXPLAIN_JSON, null, &d);
  double t_explain = now() - a;
  if (null) fclose(null);
  ApxPrecisionSummary sm;
  apx_explain_summarize(&g, &sm);
  printf("  precision passes total %.3f s (with toposorts %.3f s); explain=json %.3f s\n", total,
         total + total_sort, t_explain);
  printf("  decisions: %d half, %d fp32, %d other; casts inserted %d, folded %d, live after cleanup %d; "
         "%d warnings\n",
         sm.n_half, sm.n_fp32, sm.n_other, sm.casts_inserted, sm.casts_folded, sm.casts_after_cleanup,
         d.n_warnings);
  apx_graph_free(&g);
  return 0;
}

int main(int argc, char **argv) {
  int blocks = argc > 1 ? atoi(argv[1]) : 5000;
  if (blocks < 1) blocks = 1;
  if (argc > 2) return run_level(blocks, (ApxOptLevel)atoi(argv[2]));
  return run_level(blocks, APX_O1) || run_level(blocks, APX_O2);
}
