/* emit_plan.h - compiled graph -> plan (plan/plan.h), the last step of apexc.
 *
 * The graph must have been through pass_memplan (passes/memplan.h) on its final schedule:
 * every runtime value has a region and offset. The plan then holds
 *  - one buffer per runtime value (value-id order), with its region/offset, alias (the
 *    value whose bytes it shares) and origin; PARAM/CONST/STATE values that own their bytes
 *    carry their initial data (persistent buffers without data start at zero: optimizer
 *    state), except half parameters whose fp32 master converts to exactly their bytes:
 *    those are derived from the master at load (plan.h init_from, format 2);
 *  - one kernel per node of g->order, with its typed attributes; static inputs (ops.def
 *    STATIC_INPUTS) and absent optionals are -1;
 *  - a precision decision per node whose compute type is decided (rule code from
 *    ApxNode.reason with its apx_reason_id name, detail, and the Casts added for it:
 *    pass-made Cast nodes whose origin is the node);
 *  - a gradient bucket per Allreduce node (members = its inputs, ready after the last
 *    member's producer);
 *  - the options the runtime needs, data inputs, outputs, loss, memory summary, and the
 *    model's name, size and CRC32C (when its file is readable).
 * Buffer data pointers point into g: keep g alive while the plan is used or written. */
#ifndef APX_EMIT_PLAN_H
#define APX_EMIT_PLAN_H

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* plan must be freshly apx_plan_init()ed; o may be NULL (defaults). Returns 0 or -1 with the
 * error in d (a node or value named). The plan is validated and indexed for lookups
 * (apx_plan_find_buffer). The graph is read only, except
 * that a memory packing still running for it (ApxOptions.memplan_background) is settled
 * (apx_graph_settle) once the parts of the plan that need no arena offset are built. */
int apx_plan_from_graph(ApxGraph *g, const ApxOptions *o, ApxPlan *plan, ApxDiag *d);

/* apx_plan_from_graph + apx_plan_write (atomic) to path. The plan is not indexed (nothing
 * looks it up; the embedded model's strip finds its buffers through the graph's names). */
int apx_emit_plan_file(ApxGraph *g, const ApxOptions *o, const char *path, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
