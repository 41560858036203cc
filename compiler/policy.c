/* policy.c - reads --policy files (the --explain=json schema) and binds node entries to a
 * graph's nodes by name (see policy.h). */
#include "compiler/policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/json.h"
#include "runtime/fileio.h"

void apx_policy_init(ApxPolicy *p) {
  memset(p, 0, sizeof *p);
  apx_arena_init(&p->arena);
}

void apx_policy_free(ApxPolicy *p) {
  apx_arena_free(&p->arena);
  memset(p, 0, sizeof *p);
}

int apx_policy_parse_decision(const char *s, ApxPolicyKind *kind, ApxDType *dtype) {
  *kind = APX_POLICY_DTYPE;
  *dtype = APX_DT_UNDEFINED;
  if (!s) return -1;
  if (!strcmp(s, "half")) {
    *kind = APX_POLICY_HALF;
    return 0;
  }
  if (!strcmp(s, "promote")) {
    *kind = APX_POLICY_PROMOTE;
    return 0;
  }
  static const ApxDType all[] = {APX_DT_F32, APX_DT_F16, APX_DT_BF16, APX_DT_F64, APX_DT_U8,
                                 APX_DT_I8, APX_DT_U16, APX_DT_I16, APX_DT_I32, APX_DT_I64,
                                 APX_DT_BOOL, APX_DT_U32, APX_DT_U64};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(s, apx_dtype_short(all[i])) || !strcmp(s, apx_dtype_name(all[i]))) {
      *dtype = all[i];
      return 0;
    }
  return -1;
}

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
  /* a bounded read (runtime/fileio.h): a FIFO, device or folder is refused at open */
  uint8_t *buf;
  size_t len;
  if (apx_read_file_bounded(path, "policy", MAX_POLICY_BYTES, "a policy file may have", &buf, &len, d))
    return -1;
  int rc = apx_policy_parse(p, path, (const char *)buf, len, d);
  free(buf);
  return rc;
}

static uint32_t hash_str(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

int apx_policy_bind(const ApxPolicy *p, const ApxGraph *g, int *node_entry, ApxDiag *d) {
  for (int i = 0; i < g->n_nodes; i++) node_entry[i] = -1;
  if (p->n_nodes == 0) return 0;
  uint32_t cap = 16;
  while (cap < (uint32_t)p->n_nodes * 2) cap *= 2;
  int *slots = malloc(cap * sizeof *slots);
  char *used = calloc((size_t)p->n_nodes, 1);
  if (!slots || !used) {
    free(slots);
    free(used);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", p->path);
  }
  for (uint32_t i = 0; i < cap; i++) slots[i] = -1;
  int rc = 0;
  for (int e = 0; e < p->n_nodes && rc == 0; e++) {
    uint32_t h = hash_str(p->nodes[e].name) & (cap - 1);
    while (slots[h] >= 0) {
      if (!strcmp(p->nodes[slots[h]].name, p->nodes[e].name)) {
        rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: line %d: node '%s' listed twice", p->path,
                            p->nodes[e].line, p->nodes[e].name);
        break;
      }
      h = (h + 1) & (cap - 1);
    }
    slots[h] = e;
  }
  for (int k = 0; k < g->n_order && rc == 0; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    if (!n->name) continue;
    uint32_t h = hash_str(n->name) & (cap - 1);
    while (slots[h] >= 0 && strcmp(p->nodes[slots[h]].name, n->name)) h = (h + 1) & (cap - 1);
    int e = slots[h];
    if (e < 0) continue;
    const char *op = p->nodes[e].op;
    if (op && strcmp(op, apx_op_name(n->op)) != 0)
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: line %d: node '%s' is a %s in %s, the policy says %s", p->path,
                          p->nodes[e].line, n->name, apx_op_name(n->op), g->file, op);
    node_entry[id] = e;
    used[e] = 1;
  }
  if (rc == 0) {
    int n_unknown = 0;
    char msg[700];
    size_t len = 0;
    for (int e = 0; e < p->n_nodes; e++) {
      if (used[e]) continue;
      if (n_unknown < 5 && len < sizeof msg)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s'%s'", n_unknown ? ", " : "",
                                p->nodes[e].name);
      n_unknown++;
    }
    if (n_unknown > 5 && len < sizeof msg)
      snprintf(msg + len, sizeof msg - len, " and %d more", n_unknown - 5);
    if (n_unknown)
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: unknown node%s %s (not in %s)", p->path,
                          n_unknown > 1 ? "s" : "", msg, g->file);
  }
  free(slots);
  free(used);
  return rc;
}
