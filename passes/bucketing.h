/* bucketing.h - gradient buckets planned at compile time (DESIGN.md 11).
 *
 * pass_bucketing runs on training graphs after master_weights and the fusion passes and
 * before memplan. The parameter gradients are the inputs 1.. of the UnscaleCheck node
 * (passes/optimizer.h). The pass
 *
 *  - orders them by readiness: the position of each gradient's producer in the backward
 *    schedule (g->order); ties (one node producing several gradients) keep UnscaleCheck's
 *    order;
 *  - with o->allreduce_fp32 converts each half (fp16/bf16) gradient first:
 *    Cast(g, to=fp32) -> "<g>/fp32", which becomes the bucket member (UnscaleCheck then
 *    reads fp32 gradients, without a round trip back to half);
 *  - groups the members into buckets, one dtype per bucket: walking the members in
 *    readiness order, each dtype keeps one open bucket; a member joins its dtype's open
 *    bucket unless that would take it over the cap, in which case the bucket closes and a
 *    new one opens. The cap is o->first_bucket_mb MiB for the first bucket of each dtype
 *    (so communication starts early) and o->bucket_mb MiB after; a member larger than the
 *    cap gets a bucket of its own;
 *  - numbers the buckets in the order they become ready (their last member's producer);
 *  - turns each bucket into one node
 *        Allreduce(m_0 .. m_k) -> r_0 .. r_k       (attrs.h ApxAttrAllreduce)
 *    named "apx_allreduce/bucket<N>", attrs {bucket = N, fp32 = o->allreduce_fp32,
 *    predivide = o->grad_predivide, average = 1}, compute = the bucket's dtype, flag
 *    APX_NODEF_EAGER so toposort schedules it right after its last member's producer (the
 *    runtime launches it there, overlapping the rest of backward). r_j is named
 *    "<m_j>/allreduced", flag GRAD, origin = m_j's origin (the parameter). Every consumer
 *    of m_j that runs after the Allreduce reads r_j instead: UnscaleCheck reads the reduced
 *    gradients. memplan lets r_j take m_j's bytes (the bucket is reduced in place).
 *
 * Section: BACKWARD. With gradient accumulation (o->accumulate > 1) the backward section
 * runs once per micro-batch and the gradients are reduced once per optimizer step, so the
 * Allreduce nodes (and casts) go to the start of the OPTIMIZER section instead (no
 * overlap); the accumulator updates in BACKWARD keep reading the unreduced sums.
 *
 * Runtime meaning (runtime/exec.h, runtime/collective.h): with one process an Allreduce is
 * the identity; with K ranks r_j = post * sum over ranks (pre * m_j) with
 * pre = 1 / predivide and post = predivide / K (averaging). Every gradient UnscaleCheck
 * reads comes out of an Allreduce, so a non-finite gradient on any rank makes every rank's
 * UnscaleCheck see it.
 *
 * Graphs without an UnscaleCheck (inference) and graphs that already hold gradient-bucket
 * Allreduce nodes are unchanged. Allreduce nodes with bucket = -1 (BatchNorm statistics,
 * passes/sync_bn.h) are not buckets: the pass and apx_buckets_collect leave them out. */
#ifndef APX_BUCKETING_H
#define APX_BUCKETING_H

#include <stdio.h>

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

int pass_bucketing(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* The buckets of a compiled graph, for --explain and --bucket-report: one entry per
 * Allreduce node in g->order. Kernel indices are positions in g->order (= plan kernel
 * indices, compiler/emit_plan.h). The report written from them: compiler/explain.h. */
typedef struct ApxBucketInfo {
  int node;           /* the Allreduce node */
  int32_t id;         /* ApxAttrAllreduce.bucket */
  ApxDType dtype;
  int32_t n_members;
  int64_t bytes;
  int32_t ready_at;   /* kernel index of the last member's producer */
  int32_t launch_at;  /* kernel index of the Allreduce itself */
  int32_t overlap;    /* kernels of its section after it: work the allreduce can overlap */
} ApxBucketInfo;

/* Fills up to cap entries of out; returns the number of Allreduce nodes (may exceed cap). */
int apx_buckets_collect(const ApxGraph *g, ApxBucketInfo *out, int cap);


#ifdef __cplusplus
}
#endif
#endif
