/* fusion.h - what the fusion passes (passes/fuse_*.c, DESIGN.md 10) did and why, and the
 * kernel count and memory traffic of a plan before and after them.
 *
 * Every fusion candidate a pass looks at leaves one record on the graph (g->fusion, in the
 * arena): the pattern, the forward nodes it matched, and either the fused nodes that
 * replaced them or why it was not fused (ApxFusionWhy: dtype, shape, other consumers of an
 * intermediate, legality of the fused kernel, backward nodes not in the expected form).
 * The first fusion pass to run also records the traffic of the graph before fusion, so the
 * report compares before and after (with --no-fuse both are the same graph).
 *
 * Traffic (apx_graph_traffic) is an estimate from ir/cost.h over the live nodes that
 * launch a kernel (g->order need not be current): every node except the SHAPEONLY views (Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity alias their input; the executor skips them). Bytes are the node's
 * runtime inputs read plus outputs written at their dtypes, per training step (forward +
 * backward + optimizer, one micro-batch). */
#ifndef APX_FUSION_H
#define APX_FUSION_H

#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxFusionWhy {
  APX_FUSE_APPLIED = 0,
  APX_FUSE_NOT_DTYPE,     /* the nodes run in different types the fused kernel cannot mix */
  APX_FUSE_NOT_SHAPE,     /* a shape the fused kernel does not take */
  APX_FUSE_NOT_CONSUMERS, /* an intermediate value has consumers outside the pattern */
  APX_FUSE_NOT_LEGALITY,  /* the fused op cannot express it (bias not broadcastable,
                             activation not supported, mask needs a gradient ...) */
  APX_FUSE_NOT_BACKWARD,  /* the backward nodes are not in the form the fusion replaces */
  APX_FUSE_WHY_COUNT
} ApxFusionWhy;

/* "applied", "dtype", "shape", "consumers", "legality", "backward" */
const char *apx_fusion_why_name(ApxFusionWhy w);

typedef struct ApxFusionRecord {
  const char *pass;     /* "fuse_dense" */
  const char *pattern;  /* "MatMul+Add+Relu" */
  const char *fused_op; /* "FusedDense" */
  const char *nodes;    /* forward nodes matched, "fc1, relu1" (casts between them excluded) */
  const char *fused;    /* "fc1/FusedDense, fc1/FusedDenseGrad" when applied, else NULL */
  ApxFusionWhy why;
  const char *detail;   /* one line: why not fused, or a remark on an applied fusion */
  int32_t n_fwd, n_bwd; /* nodes replaced: forward (casts included), backward */
} ApxFusionRecord;

/* Kernels and bytes moved per training step, by section (forward, backward, optimizer). */
typedef struct ApxTraffic {
  int32_t kernels[3];
  int64_t bytes[3];   /* read + written */
  int32_t unknown;    /* nodes whose bytes are unknown (shape not known; not counted) */
} ApxTraffic;

typedef struct ApxFusionLog {
  ApxFusionRecord *recs;
  int32_t n, cap;
  int32_t disabled;   /* a fusion pass saw --no-fuse */
  ApxTraffic before;  /* the graph when the first fusion pass started */
  ApxTraffic after;   /* the graph when the last fusion pass ended (later passes, such as
                         bucketing's Allreduce nodes, are not part of the comparison) */
  int32_t have_after;
  int32_t after_nodes, after_vals; /* the graph's size when `after` was taken */
  int32_t before_nodes, before_vals; /* and when `before` was */
  int32_t no_traffic; /* 1: before and after are not counted (ApxOptions.fusion_traffic 0) */
} ApxFusionLog;

/* The graph's log, created (and the traffic before fusion recorded) on first use; NULL
 * when out of memory. Every fusion pass calls it first, --no-fuse or not. */
ApxFusionLog *apx_fusion_log(ApxGraph *g);
/* As apx_fusion_log; a log it creates counts traffic only when count_traffic is 1 (passes
 * give ApxOptions.fusion_traffic): without, apx_fusion_log_after does nothing and
 * apx_fusion_log_current is 0, so no pass walks the graph for figures no one reads. */
ApxFusionLog *apx_fusion_log_start(ApxGraph *g, int count_traffic);
/* Records the traffic after fusion (every fusion pass calls it when it ends). changed = 0:
 * the pass left the graph as it was, so a traffic already recorded for a graph of the same
 * size stands (fusion passes run one after another: the last one to change the graph set
 * it) and is not computed again. */
void apx_fusion_log_after(ApxGraph *g, int changed);
/* Appends a copy of r (strings copied into the arena). Returns 0 or -1 (out of memory). */
int apx_fusion_record(ApxGraph *g, const ApxFusionRecord *r);

void apx_graph_traffic(const ApxGraph *g, ApxTraffic *t);
/* Node id's share of apx_graph_traffic (nothing for a dead or shape-only node), added to t
 * times sign (+1, or -1 to take it out). */
void apx_traffic_count_node(const ApxGraph *g, int id, ApxTraffic *t, int sign);
/* t += d, field by field. */
void apx_traffic_add(ApxTraffic *t, const ApxTraffic *d);
/* For a fusion pass that keeps the traffic up to date itself (passes/fuse_common.c): 1 when
 * the log's latest traffic (`after`, or `before` while no pass has ended) is that of the
 * graph as it is now (same rule as apx_fusion_log_after: fusion passes run one after
 * another); apx_fusion_log_after_delta then records that traffic plus delta (the nodes the
 * pass killed or rewired counted out, the ones it added or rewired counted in) as `after`,
 * exactly what apx_fusion_log_after would compute by walking the whole graph. */
int apx_fusion_log_current(const ApxGraph *g);
void apx_fusion_log_after_delta(ApxGraph *g, const ApxTraffic *delta);
static inline int32_t apx_traffic_kernels(const ApxTraffic *t) {
  return t->kernels[0] + t->kernels[1] + t->kernels[2];
}
static inline int64_t apx_traffic_bytes(const ApxTraffic *t) {
  return t->bytes[0] + t->bytes[1] + t->bytes[2];
}

/* The fusion report (--fusion-report; also the "fusion" section of --explain text):
 * each fusion applied (pattern, nodes replaced, fused nodes), each candidate not fused
 * with its reason, the multi-tensor optimizer kernels (OptimizerStep, UnscaleCheck), and
 * kernels / bytes per step before -> after fusion, then the line
 *   "  summary: kernels K0 -> K1, bytes B0 -> B1 per step" (scripts/bench_fusion.sh). */
void apx_fusion_report_write(const ApxGraph *g, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
