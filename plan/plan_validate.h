/* plan_validate.h - what makes a plan safe to run, checked at load: a plan file is an input
 * like any other, and a crafted one with a valid checksum must not reach memory it does not
 * own (issue 16). apx_plan_validate (plan.h) checks the format and every reference (ids, data
 * ranges, arena ranges in bounds, bytes = shape x dtype); on top of that, for every kernel:
 *
 *   contract  its inputs and outputs (dtype, shape, presence) against the op's contract:
 *             kernels/validate.h, the same check the CPU and CUDA backends make per call,
 *             from the op table, not per-kernel code (Allreduce's input/output pairs equal in
 *             dtype and shape included);
 *   producers every buffer it reads is loaded (a data input listed in the plan, a parameter,
 *             constant or state) or written by an earlier kernel of the step; the plan's
 *             outputs and loss likewise (a dropped kernel is refused, never run on garbage);
 *   aliasing  no output shares bytes with another output or with an input, except where the
 *             op allows it, and then only over the identical range and dtype: output 0 over
 *             input 0 for INPLACE / SHAPEONLY ops (ops.def), u_i over g_i for UnscaleCheck,
 *             r_i over t_i for Allreduce, with no other input over that range for the last
 *             two (multi-tensor kernels would read overwritten bytes).
 *
 * Kept apart from plan.c's format so a change of the file format does not touch it: it reads
 * only the in-memory ApxPlan. */
#ifndef APX_PLAN_VALIDATE_H
#define APX_PLAN_VALIDATE_H

#include "ir/diag.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks every kernel of p (after apx_plan_validate passed). Returns 0, or -1 with
 * "<path>: invalid plan: kernel K ('node' Op): <what is wrong>" in d (exit code 2). */
int apx_plan_check_kernels(const ApxPlan *p, ApxDiag *d);

/* The same checks in memory made beforehand, by the thread that calls
 * apx_plan_check_scratch_new (NULL when out of memory: the checks then fail with "out of
 * memory"): apx_plan_write runs them on a thread of their own, whose first allocations of
 * megabytes (an OptimizerStep of 266k arguments takes 21 MB of views) would be fresh pages;
 * made by the writing thread, they come from memory its allocator already holds. */
typedef struct ApxPlanCheckScratch ApxPlanCheckScratch;
ApxPlanCheckScratch *apx_plan_check_scratch_new(const ApxPlan *p);
void apx_plan_check_scratch_free(ApxPlanCheckScratch *s);
int apx_plan_check_kernels_in(const ApxPlan *p, ApxPlanCheckScratch *s, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
