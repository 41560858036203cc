/* explain.h - --explain: every node's precision decision and the rule that made it, then a
 * summary (DESIGN.md 7). Run after pass_cast_cleanup and before fusion, so the rows are
 * the model's nodes (plus autodiff's and the optimizer's) and --policy can read the JSON
 * back by node name.
 *
 * One row per live node, forward section first, then backward, then optimizer, each in
 * g->order; the Casts cast_insert added are not rows of their own: they show in the "casts"
 * column of the nodes that read them. Row fields: name, op, input dtypes (as wired, after
 * casts), output dtype(s), decision (ApxNode.compute), reason (the rule and list that
 * fired: ApxNode.reason_detail), casts feeding the node (Cast nodes, per-step half copies
 * of parameters, constants folded to another type, graph outputs cast back), and the
 * node's note (tensor-core alignment, clamped constants, overflow findings that did not
 * change the decision).
 *
 * Text format: aligned columns with a header per section and "note:" lines under rows.
 * JSON format: the schema in docs/explain-schema.md ("apexc-explain/1"), one node object
 * per line. Dot format: Graphviz (apx_explain_write_dot).
 * The text fits 120 columns (ir/text.h): one table per section with the columns node, op,
 * types (input dtypes -> output dtypes, runs compacted as "fp16x3"), decision and reason;
 * a node name wider than its column takes a line of its own, types and reasons wrap inside
 * their columns, and "casts:" / "note:" lines follow the row. The header states the opt
 * level, the half type and the loss scaling (apx_explain_precision_line). The summary (both formats): share of FLOPs in half precision (ir/cost.h
 * estimates over the rows), casts inserted and live Cast nodes before/after cleanup,
 * activation bytes at fp32 vs mixed, decision counts. */
#ifndef APX_EXPLAIN_H
#define APX_EXPLAIN_H

#include <stdint.h>
#include <stdio.h>

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxExplainFormat {
  APX_EXPLAIN_TEXT = 1,
  APX_EXPLAIN_JSON = 2,
  APX_EXPLAIN_DOT = 3, /* Graphviz (compiler/explain_dot.c) */
} ApxExplainFormat;

typedef struct ApxPrecisionSummary {
  int32_t rows[3];          /* rows per section: forward, backward, optimizer */
  int32_t n_half, n_fp32, n_other; /* rows by decision (other: fp64, integer, undecided) */
  int64_t flops_total;      /* over rows whose cost is known */
  int64_t flops_half;       /* of those, rows decided in fp16/bf16 */
  int32_t flops_unknown;    /* rows whose cost is unknown (shape not known) */
  int32_t casts_inserted;   /* g->casts.inserted */
  int32_t casts_folded;     /* g->casts.folded */
  int32_t casts_before_cleanup, casts_after_cleanup;
  int32_t casts_live;       /* live Cast nodes now (model casts included) */
  int64_t act_bytes_fp32;   /* activations if every float one were fp32 (added casts excluded) */
  int64_t act_bytes_mixed;  /* activations at their current dtypes (added casts included) */
  int32_t notes;            /* rows with a note */
} ApxPrecisionSummary;

/* How g's training-mode BatchNormalization nodes update their running variance
 * (kernels/attrs.def ApxAttrBatchNorm.unbiased_running_var): NULL when g has none, else a
 * one-line description naming the choice and where it came from (--bn-running-var or the
 * model's producer_name), written into buf (cap bytes). For the compile summary and
 * --explain ("batchnorm running_var: ..."). */
const char *apx_explain_bn_running_var(const ApxGraph *g, const ApxOptions *o, char *buf, size_t cap);

/* Fills s from g (decided and cast). */
void apx_explain_summarize(const ApxGraph *g, ApxPrecisionSummary *s);

/* Writes the explanation of g to f. o supplies the header (opt level, half type, lists).
 * Returns 0, or -1 with an error in d (write error on f). */
int apx_explain_write(const ApxGraph *g, const ApxOptions *o, ApxExplainFormat fmt, FILE *f, ApxDiag *d);

/* The loss scaling the options give, for headers and summaries: "dynamic, initial scale
 * 65536, growth interval 2000 steps", "static, scale 1", or "none (inference)". */
void apx_explain_loss_scaling(const ApxOptions *o, char *buf, size_t cap);
/* "-O2  half=fp16  loss scaling: ..." (the explain header's second line; apexc's summary). */
void apx_explain_precision_line(const ApxOptions *o, char *buf, size_t cap);

/* --explain=dot: the graph as Graphviz, nodes filled by their decision, inserted Casts
 * marked, the reason as each node's tooltip (explain_dot.c). Returns 0. */
int apx_explain_write_dot(const ApxGraph *g, const ApxOptions *o, FILE *f);

/* Convenience for the CLI: o->explain (1 text, 2 json, 3 dot) to o->explain_path or stdout. */
int apx_explain_emit(const ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* The "fusion" section of the text explanation (passes/fusion.h's report), appended to
 * o->explain_path or written to stdout after compilation, since fusion runs after the
 * rows are written. Does nothing unless o->explain is text. Returns 0 or -1 (d). */
int apx_explain_fusion_emit(const ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* The "gradient buckets" section of the text explanation (passes/bucketing.h's report:
 * members, bytes, the kernel index at which each bucket is ready), appended like the fusion
 * section after compilation. Does nothing unless o->explain is text. Returns 0 or -1 (d). */
int apx_explain_buckets_emit(const ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* --bucket-report and the buckets section: the bucket table (passes/bucketing.h
 * apx_buckets_collect) written as text (one line per bucket, then its members) or JSON
 * ("apexc-buckets/1": {"buckets": [{id, dtype, bytes, ready_at, launch_at, overlap,
 * members: [{gradient, param, bytes}]}], "summary": {...}}). json: 0 text, 1 JSON. */
void apx_buckets_report_write(const ApxGraph *g, const ApxOptions *o, int json, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
