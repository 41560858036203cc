/* policy.h - the --policy decisions as data (passes/precision.c applies them): node entries
 * and op entries with their decisions, and their binding to a graph's nodes by name. The
 * driver reads the file (compiler/policy_file.h: the --explain=json schema,
 * docs/explain-schema.md) and hands the result to the pass in ApxOptions.policy; the pass
 * does no file I/O.
 *
 * Node entries become node overrides, the highest-precedence rule, for forward float nodes;
 * for backward, loss, optimizer, Cast and integer nodes (whose precision is fixed by their
 * role) an entry that disagrees with the fixed decision is ignored with a warning. Op entries
 * act like --half-ops / --fp32-ops / --promote-ops (below the command-line flags). Binding:
 * unknown node names, a node entry whose "op" differs from the model's node and duplicate
 * entries are errors naming them: "<policy>: unknown node 'a', 'b' (not in model.onnx)". */
#ifndef APX_POLICY_H
#define APX_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "ir/arena.h"
#include "ir/diag.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxPolicyKind {
  APX_POLICY_DTYPE = 0, /* dtype holds the decision */
  APX_POLICY_HALF,      /* "half": the run's half type */
  APX_POLICY_PROMOTE,   /* "promote" (op entries) */
  APX_POLICY_NONE,      /* "decision": null (an undecided --explain row): name checked only */
} ApxPolicyKind;

typedef struct ApxPolicyNode {
  const char *name;
  const char *op;    /* NULL when the entry gives none */
  ApxPolicyKind kind;
  ApxDType dtype;
  int32_t line;
} ApxPolicyNode;

typedef struct ApxPolicyOp {
  ApxOp op;
  ApxPolicyKind kind;
  ApxDType dtype;
  int32_t line;
} ApxPolicyOp;

typedef struct ApxPolicy {
  ApxArena arena;
  const char *path;
  int32_t n_nodes;
  ApxPolicyNode *nodes;
  int32_t n_ops;
  ApxPolicyOp *ops;
} ApxPolicy;

void apx_policy_init(ApxPolicy *p);
void apx_policy_free(ApxPolicy *p);
/* Matches node entries to the live nodes of g by name: node_entry[id] = entry index or -1
 * for every node id (n_nodes ints). Every entry must match at least one node (nodes with
 * the same name all take the entry) and agree with its op when it names one. */
int apx_policy_bind(const ApxPolicy *p, const ApxGraph *g, int *node_entry, ApxDiag *d);
/* Resolves an entry's decision for a run whose half type is half. */
static inline ApxDType apx_policy_dtype(ApxPolicyKind k, ApxDType dt, ApxDType half) {
  return k == APX_POLICY_HALF ? half : k == APX_POLICY_DTYPE ? dt : APX_DT_UNDEFINED;
}
/* Parses a decision string ("fp16", "half", "promote", "i64", ...); -1 if unknown. */
int apx_policy_parse_decision(const char *s, ApxPolicyKind *kind, ApxDType *dtype);

#ifdef __cplusplus
}
#endif
#endif
