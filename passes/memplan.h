/* memplan.h - static memory plan over the schedule (DESIGN.md 12).
 *
 * pass_memplan assigns every runtime tensor a region and an offset (ApxValue.mem_region,
 * mem_offset, mem_alias) for the schedule g->order as it stands (it never reorders):
 *  - runtime values: inputs and outputs of live nodes (static shape operands excluded,
 *    ops.def STATIC_INPUTS), graph inputs, graph outputs and the loss;
 *  - PARAM, CONST and STATE values go to the persistent region, laid out in value order
 *    and never reused;
 *  - activations (gradients included) and data inputs go to the arena. A SHAPEONLY op's
 *    output aliases input 0 (same bytes, any region); an INPLACE op's output 0 takes input
 *    0's bytes when input 0's alias class dies at that node, lives in the arena, is not a
 *    data input, graph output or loss, and has the same dtype and element count;
 *    UnscaleCheck's u_i takes g_i's bytes under the same conditions (attrs.h allows it),
 *    and so does Allreduce's output i over input i (a bucket is reduced in place; where
 *    the conditions fail the executor copies input i to output i first);
 *  - each alias class lives over the closed interval [first definition, last use] of the
 *    schedule (data inputs over the whole schedule, so they survive between runs; graph
 *    outputs and the loss to past the end), so an op's inputs and outputs never share bytes
 *    unless aliased on purpose;
 *  - classes are packed in the arena by several greedy orders (TFLite's greedy by size and
 *    by breadth, by size x lifetime, by start; best and first fit) plus deterministic
 *    randomized size orders, keeping the smallest arena (stopping at the lower bound).
 *    Each placement asks passes/memplan_index.h (O(log) per gap walked, not O(placed)). On
 *    graphs of 4096 classes or more, an order after the first that walks more than 4 gaps
 *    per class is abandoned (a counted, deterministic bound: every order stays near-linear);
 *    the first (greedy by size, best fit) always completes. On such graphs the search also
 *    stops at an arena within 1/1024 of the lower bound (apx_memplan_close_enough): the
 *    other orders could save at most that and each costs as much as the first.
 *    Offsets and sizes are multiples of APX_MEMPLAN_ALIGN.
 * Summary in g: arena_bytes, peak_live_bytes (lower bound: the most bytes of classes live
 * at one schedule step, sizes rounded to the alignment), no_reuse_bytes (every arena value
 * that is not a SHAPEONLY view in its own slot), persistent_bytes.
 *
 * With o->memplan_background (apexc, when it writes a plan) the packing runs on a thread of its
 * own and the pass returns at once: regions, aliases, persistent offsets, peak_live_bytes,
 * no_reuse_bytes and persistent_bytes are set, while arena_bytes and every arena value's
 * mem_offset stay -1 until apx_graph_settle (ir.h) joins the packing and fills them in; the
 * packing reads and writes only its own arrays, so the graph may be read meanwhile (not
 * changed). Without it the pass finishes the plan itself. Either way the plan is the same.
 *
 * Errors: a runtime value without known shape or dtype (exit code 2). The pass changes
 * annotations only and returns APX_PASS_UNCHANGED (g->order must not be re-sorted after
 * it, or the plan no longer matches the schedule). */
#ifndef APX_MEMPLAN_H
#define APX_MEMPLAN_H

#include "ir/pass.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_MEMPLAN_ALIGN 64

int pass_memplan(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

/* The packing's stopping rule: 1 when an arena of `arena` bytes for `n_classes` classes ends
 * the search, the lower bound being `lower`: at the bound, or, with 4096 classes or more,
 * at most lower / 1024 above it (0.1%). */
int apx_memplan_close_enough(int32_t n_classes, int64_t arena, int64_t lower);


#ifdef __cplusplus
}
#endif
#endif
