/* pass.h - the pass interface (STYLE.md 3, XLA StatusOr<bool>).
 *
 * A pass is a function over the IR in its own file under passes/:
 *     int pass_<name>(ApxGraph *g, const ApxOptions *o, ApxDiag *d);
 * returning <0 error (message in d), 0 unchanged, 1 changed, 2 changed without changing the
 * live nodes or the edges between them (decisions, attributes, value types; inputs that no
 * node produces swapped for others that no node produces), so that g->order is still the
 * one apx_graph_toposort would give. A pass that adds or kills nodes or rewires an edge
 * leaves g->order stale; the pipeline re-sorts after a pass that returned 1. A pass that only
 * appended nodes returns apx_graph_order_append (ir.h): 2 when the new nodes could simply be
 * put after the old order (autodiff, optimizer), else 1. */
#ifndef APX_PASS_H
#define APX_PASS_H

#include "ir/diag.h"
#include "ir/ir.h"
#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { APX_PASS_ERROR = -1, APX_PASS_UNCHANGED = 0, APX_PASS_CHANGED = 1, APX_PASS_CHANGED_KEEPS_ORDER = 2 };

typedef int (*ApxPassFn)(ApxGraph *g, const ApxOptions *o, ApxDiag *d);

typedef struct ApxPassInfo {
  const char *name;
  ApxPassFn fn;
  const char *what; /* one line for --help-passes */
} ApxPassInfo;

#ifdef __cplusplus
}
#endif
#endif
