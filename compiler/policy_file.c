/* policy_file.c - reads --policy files (the --explain=json schema) into an ApxPolicy
 * (see policy_file.h; binding to the graph: passes/policy.h). */
#include "compiler/policy_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/json.h"
#include "ir/fileio.h"

static int perr(ApxDiag *d, const char *path, int line, const char *fmt, const char *a,
                const char *b) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
  if (line > 0) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: line %d: %s", path, line, msg);
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s", path, msg);
}

static const char *member_str(const ApxJson *e, const char *key) {
  const ApxJson *m = apx_json_get(e, key);
  return (m && m->type == APX_JSON_STRING) ? m->str : NULL;
}

int apx_policy_parse(ApxPolicy *p, const char *path, const char *text, size_t len, ApxDiag *d) {
  p->path = apx_arena_strdup(&p->arena, path ? path : "<policy>");
  path = p->path;
  char err[256];
  ApxJson *root = apx_json_parse(&p->arena, text, len, err, sizeof err);
  if (!root) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not valid JSON: %s", path, err);
  if (root->type != APX_JSON_OBJECT)
    return perr(d, path, root->line, "expected a JSON object (the --explain=json schema)%s%s", NULL, NULL);
  const ApxJson *schema = apx_json_get(root, "schema");
  if (schema && (schema->type != APX_JSON_STRING || strcmp(schema->str, APX_EXPLAIN_SCHEMA) != 0))
    return perr(d, path, schema->line, "unsupported schema %s (expected \"%s\")",
                schema->type == APX_JSON_STRING ? schema->str : "(not a string)", APX_EXPLAIN_SCHEMA);
  const ApxJson *nodes = apx_json_get(root, "nodes"), *ops = apx_json_get(root, "ops");
  if (!nodes && !ops)
    return perr(d, path, root->line, "no \"nodes\" or \"ops\" member: nothing to apply%s%s", NULL, NULL);
  if (nodes && nodes->type != APX_JSON_ARRAY)
    return perr(d, path, nodes->line, "\"nodes\" must be an array%s%s", NULL, NULL);
  if (ops && ops->type != APX_JSON_ARRAY)
    return perr(d, path, ops->line, "\"ops\" must be an array%s%s", NULL, NULL);

  int32_t nn = nodes ? nodes->n : 0, no = ops ? ops->n : 0;
  p->nodes = apx_arena_alloc(&p->arena, (size_t)(nn ? nn : 1) * sizeof *p->nodes);
  p->ops = apx_arena_alloc(&p->arena, (size_t)(no ? no : 1) * sizeof *p->ops);
  if (!p->nodes || !p->ops) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  for (int i = 0; i < nn; i++) {
    const ApxJson *e = &nodes->items[i];
    if (e->type != APX_JSON_OBJECT)
      return perr(d, path, e->line, "node entries must be objects%s%s", NULL, NULL);
    const char *name = member_str(e, "name"), *dec = member_str(e, "decision");
    const ApxJson *dj = apx_json_get(e, "decision");
    if (!name) return perr(d, path, e->line, "node entry without a \"name\" string%s%s", NULL, NULL);
    ApxPolicyNode *pn = &p->nodes[p->n_nodes];
    if (dj && dj->type == APX_JSON_NULL) {
      pn->kind = APX_POLICY_NONE;
    } else if (!dec) {
      return perr(d, path, e->line, "node '%s': no \"decision\" string%s", name, NULL);
    } else if (apx_policy_parse_decision(dec, &pn->kind, &pn->dtype) || pn->kind == APX_POLICY_PROMOTE)
      return perr(d, path, e->line, "node '%s': unknown decision '%s' (fp16, bf16, fp32, half, or "
                  "an integer type)", name, dec);
    pn->name = name;
    pn->op = member_str(e, "op");
    pn->line = e->line;
    if (pn->op && apx_op_from_name(pn->op) == APX_OP_INVALID)
      return perr(d, path, e->line, "node '%s': unknown op '%s'", name, pn->op);
    p->n_nodes++;
  }
  for (int i = 0; i < no; i++) {
    const ApxJson *e = &ops->items[i];
    if (e->type != APX_JSON_OBJECT)
      return perr(d, path, e->line, "op entries must be objects%s%s", NULL, NULL);
    const char *op = member_str(e, "op"), *dec = member_str(e, "decision");
    if (!op) return perr(d, path, e->line, "op entry without an \"op\" string%s%s", NULL, NULL);
    if (!dec) return perr(d, path, e->line, "op '%s': no \"decision\" string%s", op, NULL);
    ApxPolicyOp *po = &p->ops[p->n_ops];
    po->op = apx_op_from_name(op);
    if (po->op == APX_OP_INVALID) return perr(d, path, e->line, "unknown op '%s'%s", op, NULL);
    if (apx_policy_parse_decision(dec, &po->kind, &po->dtype) ||
        (po->kind == APX_POLICY_DTYPE && !apx_dtype_is_float(po->dtype)))
      return perr(d, path, e->line, "op '%s': unknown decision '%s' (fp16, bf16, fp32, half or "
                  "promote)", op, dec);
    for (int j = 0; j < p->n_ops; j++)
      if (p->ops[j].op == po->op) return perr(d, path, e->line, "op '%s' listed twice%s", op, NULL);
    po->line = e->line;
    p->n_ops++;
  }
  return 0;
}

/* A policy for a model of a million nodes is well under this. */
#define MAX_POLICY_BYTES ((uint64_t)1 << 30)

int apx_policy_load_file(ApxPolicy *p, const char *path, ApxDiag *d) {
  /* a bounded read (ir/fileio.h): a FIFO, device or folder is refused at open */
  uint8_t *buf;
  size_t len;
  if (apx_read_file_bounded(path, "policy", MAX_POLICY_BYTES, "a policy file may have", &buf, &len, d))
    return -1;
  int rc = apx_policy_parse(p, path, (const char *)buf, len, d);
  free(buf);
  return rc;
}
