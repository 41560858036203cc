/* policy_file.h - reads --policy FILE.json: precision decisions read back from the
 * --explain=json schema (docs/explain-schema.md) into an ApxPolicy (passes/policy.h), which
 * the driver hands to passes/precision.c in ApxOptions.policy.
 *
 * Read from the file:
 *   "nodes": [{"name": N, "decision": D, "op": OP?}, ...]   node entries (every other
 *            member of an --explain=json row is ignored). They become node overrides,
 *            the highest-precedence rule, for forward float nodes; for backward, loss,
 *            optimizer, Cast and integer nodes (whose precision is fixed by their role) an
 *            entry that disagrees with the fixed decision is ignored with a warning.
 *   "ops":   [{"op": OP, "decision": D}, ...]              op entries, like --half-ops /
 *            --fp32-ops / --promote-ops (below the command-line flags).
 * D is "fp16", "bf16", "fp32", "fp64", "half" (the run's --half type), "promote" (op
 * entries only: widest float input), or for integer nodes their type ("i64", "bool", ...);
 * a node entry's null decision (an undecided row) only checks the name.
 * A "schema" member, when present, must be "apexc-explain/1". Unknown node names, unknown
 * op names, a node entry whose "op" differs from the model's node, duplicate entries and
 * malformed entries are errors naming them: "<policy>: unknown node 'a', 'b' (not in
 * model.onnx)". */
#ifndef APX_POLICY_FILE_H
#define APX_POLICY_FILE_H

#include <stddef.h>

#include "ir/diag.h"
#include "passes/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_EXPLAIN_SCHEMA "apexc-explain/1"

/* Reads and parses path into p (apx_policy_init done by the caller). Returns 0, or -1 with
 * "<path>: ..." in d (exit code 2). Bounded: the file is read once, whole. */
int apx_policy_load_file(ApxPolicy *p, const char *path, ApxDiag *d);
/* Parses a policy held in memory; path is used in messages. */
int apx_policy_parse(ApxPolicy *p, const char *path, const char *text, size_t len, ApxDiag *d);

#ifdef __cplusplus
}
#endif
#endif
