/* pipeline.c - the compiler reads as this table: load, then each pass in order. */
#include "compiler/pipeline.h"

#include <fnmatch.h>
#include <string.h>

#include "compiler/bind_inputs.h"
#include "compiler/emit_onnx.h"
#include "compiler/explain.h"
#include "compiler/onnx_load.h"
#include "compiler/pass_timer.h"
#include "compiler/policy_file.h"
#include "passes/autodiff.h"
#include "passes/bucketing.h"
#include "passes/cast_cleanup.h"
#include "passes/cast_insert.h"
#include "passes/fold_constants.h"
#include "passes/fuse_bn_relu.h"
#include "passes/fuse_casts.h"
#include "passes/fuse_conv.h"
#include "passes/fuse_dense.h"
#include "passes/fuse_layernorm.h"
#include "passes/fuse_softmax.h"
#include "passes/fuse_xentropy.h"
#include "passes/infer_shapes.h"
#include "passes/master_weights.h"
#include "passes/memplan.h"
#include "passes/optimizer.h"
#include "passes/sync_bn.h"
#include "passes/overflow_check.h"
#include "passes/precision.h"
#include "passes/split_sequences.h"

/* The pass table (STYLE.md 3): the whole compiler, in order. Each entry is a function in
 * passes/<name>.c; passes that do not apply (training passes with --inference) return
 * unchanged. */
static const ApxPassInfo passes[] = {
    {"fold_constants", pass_fold_constants, "every node on constants evaluated by the CPU kernels"},
    {"split_sequences", pass_split_sequences, "SplitToSequence + SequenceAt -> Split outputs"},
    {"infer_shapes", pass_infer_shapes, "static dtypes and shapes of every value"},
    {"autodiff", pass_autodiff, "backward graph from the loss (training)"},
    {"optimizer", pass_optimizer, "loss scaling, unscale + inf check, optimizer update"},
    {"overflow_check", pass_overflow_check, "constants out of half range, risky patterns"},
    {"precision", pass_precision, "per-node precision decisions with their reasons"},
    {"cast_insert", pass_cast_insert, "casts where dtypes and decisions differ"},
    {"cast_cleanup", pass_cast_cleanup, "no round trips, one cast per value and type"},
    {"sync_bn", pass_sync_bn, "--sync-bn: BatchNorm statistics over all ranks"},
    {"master_weights", pass_master_weights, "optimizer updates fp32 masters, refreshes half"},
    /* fusion (DESIGN.md 10): forward patterns and the backward nodes derived from them */
    {"fuse_xentropy", pass_fuse_xentropy, "SoftmaxCrossEntropyLoss -> FusedXentropy"},
    {"fuse_softmax", pass_fuse_softmax, "scale + mask + Softmax -> FusedSoftmax"},
    {"fuse_layernorm", pass_fuse_layernorm, "hand-written LayerNorm -> LayerNormalization"},
    {"fuse_dense", pass_fuse_dense, "MatMul/Gemm + bias (+ Relu/Gelu) -> FusedDense"},
    {"fuse_bn_relu", pass_fuse_bn_relu, "BatchNormalization + Relu -> BatchNormRelu"},
    {"fuse_conv", pass_fuse_conv, "Conv (+ bias) + Relu -> ConvBiasRelu"},
    {"fuse_casts", pass_fuse_casts, "narrowing Casts folded into fused producers"},
    {"bucketing", pass_bucketing, "gradient buckets in readiness order -> Allreduce nodes"},
    {"memplan", pass_memplan, "liveness and arena offsets"},
    {NULL, NULL, NULL},
};

const ApxPassInfo *apx_pipeline_passes(int *count) {
  int n = 0;
  while (passes[n].name) n++;
  *count = n;
  return passes;
}

static int list_matches(const ApxNameList *l, const char *name) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->items[i], name) == 0 || strcmp(l->items[i], "all") == 0) return 1;
  return 0;
}

/* The inspection point: after this pass (run or disabled) the driver's inspect function sees
 * the graph that --explain and --emit-onnx describe. */
static const char *const inspect_after = "cast_cleanup";

/* The inspection point, timed as its own stage for --time-passes. */
static int run_inspect(ApxGraph *g, const ApxOptions *o, ApxInspectFn inspect, ApxDiag *d) {
  ApxStageClock clock;
  apx_stage_begin(&clock, o);
  if (inspect(g, o, d)) return -1;
  apx_stage_end(&clock, "inspect");
  return 0;
}

int apx_inspect_write(const ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  if (o->explain && apx_explain_emit(g, o, d)) return -1;
  if (o->emit_onnx) {
    ApxEmitOnnxInfo info;
    if (apx_emit_onnx_file(g, o->emit_onnx, &info, d)) return -1;
    if (!o->quiet) {
      char raised[64] = "";
      if (info.opset != info.model_opset)
        snprintf(raised, sizeof raised, " (raised from %lld for bfloat16)", (long long)info.model_opset);
      fprintf(stderr, "wrote %s: %d nodes (%d Casts inserted), %d initializers, ai.onnx opset %lld%s, %zu bytes",
              o->emit_onnx, info.nodes, info.casts_inserted, info.initializers, (long long)info.opset, raised,
              info.bytes);
      if (info.widened)
        fprintf(stderr, "; %d bf16 node(s) written as fp32 compute (no bfloat16 form; see --explain)", info.widened);
      fputc('\n', stderr);
    }
  }
  return 0;
}

int apx_compile_graph(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return apx_compile_graph_inspected(g, o, NULL, d);
}

int apx_compile_graph_inspected(ApxGraph *g, const ApxOptions *o, ApxInspectFn inspect, ApxDiag *d) {
  /* unknown pass names in --disable-pass / --dump-after are usage errors; --dump-after also
   * takes "load" and "all" */
  const ApxNameList *lists[2] = {&o->disable_pass, &o->dump_after};
  const char *flags[2] = {"--disable-pass", "--dump-after"};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < lists[l]->n; i++) {
      int found = l == 1 && (!strcmp(lists[l]->items[i], "all") || !strcmp(lists[l]->items[i], "load"));
      for (int p = 0; passes[p].name; p++) found |= !strcmp(passes[p].name, lists[l]->items[i]);
      if (!found)
        return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s=%s: no such pass (see apexc --help)",
                              flags[l], lists[l]->items[i]);
      if (l == 0 && !strcmp(lists[l]->items[i], "memplan"))
        return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                              "--disable-pass=memplan: every plan needs its memory plan");
    }
  if (list_matches(&o->dump_after, "load")) apx_graph_dump(g, stderr);
  for (int p = 0; passes[p].name; p++) {
    if (apx_name_list_has(&o->disable_pass, passes[p].name)) {
      if (inspect && !strcmp(passes[p].name, inspect_after) && run_inspect(g, o, inspect, d)) return -1;
      continue;
    }
    ApxStageClock clock; /* --time-passes: the pass and the re-sort it caused */
    apx_stage_begin(&clock, o);
    int rc = passes[p].fn(g, o, d);
    if (rc < 0) return -1;
    if (rc == APX_PASS_CHANGED && apx_graph_toposort(g, d)) return -1;
    apx_stage_end(&clock, passes[p].name);
    if (o->verify_each_pass && apx_graph_verify(g, d)) {
      char msg[sizeof d->msg];
      memcpy(msg, d->msg, sizeof msg);
      d->code = 0;
      return apx_diag_error(d, APX_EXIT_RUNTIME, "internal error after pass %s: %s",
                            passes[p].name, msg);
    }
    if (list_matches(&o->dump_after, passes[p].name)) {
      fprintf(stderr, "--- after %s ---\n", passes[p].name);
      apx_graph_dump(g, stderr);
    }
    if (inspect && !strcmp(passes[p].name, inspect_after) && run_inspect(g, o, inspect, d)) return -1;
  }
  return 0;
}

int apx_compile_file(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return apx_compile_file_inspected(g, o, NULL, d);
}

int apx_compile_file_inspected(ApxGraph *g, const ApxOptions *o, ApxInspectFn inspect, ApxDiag *d) {
  apx_graph_init(g, o->model_path);
  /* the driver reads --policy; pass_precision gets its decisions as data */
  ApxOptions with_policy = *o;
  ApxPolicy policy;
  apx_policy_init(&policy);
  int rc = 0;
  if (o->policy_path && !o->policy) {
    rc = apx_policy_load_file(&policy, o->policy_path, d);
    with_policy.policy = &policy;
  }
  ApxStageClock clock;
  apx_stage_begin(&clock, o);
  if (rc == 0) rc = apx_onnx_load_file(g, o->model_path, o, d);
  if (rc == 0) apx_stage_end(&clock, "load");
  /* inputs bound to data (apexrun infer): constants before folding (bind_inputs.h) */
  if (rc == 0 && o->n_bind > 0) rc = apx_bind_inputs(g, o->bind, o->n_bind, d);
  if (rc == 0 && o->verify_each_pass) rc = apx_graph_verify(g, d);
  if (rc == 0) rc = apx_compile_graph_inspected(g, &with_policy, inspect, d);
  apx_policy_free(&policy);
  return rc;
}

static const char *section_name(ApxSection s) {
  return s == APX_SEC_FORWARD ? "fwd" : s == APX_SEC_BACKWARD ? "bwd" : "opt";
}

static void dump_value(const ApxGraph *g, int v, FILE *f) {
  if (v < 0) {
    fputs("-", f);
    return;
  }
  char shape[128];
  const ApxValue *val = &g->vals[v];
  fprintf(f, "%s:%s%s", val->name, apx_dtype_short(val->dtype),
          apx_value_shape_str(val, shape, sizeof shape));
}

void apx_graph_dump(const ApxGraph *g, FILE *f) {
  fprintf(f, "graph %s (%d nodes live, %d values, opset %lld)\n", g->name ? g->name : "?",
          g->n_order, g->n_vals, (long long)g->opset);
  for (int i = 0; i < g->n_inputs; i++) {
    fputs("  input ", f);
    dump_value(g, g->inputs[i], f);
    fputc('\n', f);
  }
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    fprintf(f, "  [%s] %s = %s(", section_name(n->section), n->name, apx_op_name(n->op));
    for (int i = 0; i < n->n_in; i++) {
      if (i) fputs(", ", f);
      dump_value(g, n->in[i], f);
    }
    fputs(") -> ", f);
    for (int i = 0; i < n->n_out; i++) {
      if (i) fputs(", ", f);
      dump_value(g, n->out[i], f);
    }
    if (n->compute != APX_DT_UNDEFINED) fprintf(f, "  @%s", apx_dtype_short(n->compute));
    fputc('\n', f);
  }
  for (int i = 0; i < g->n_outputs; i++) {
    fputs("  output ", f);
    dump_value(g, g->outputs[i], f);
    fputc('\n', f);
  }
}
