/* policy.c - the --policy decisions as data: init/free, decision names, and binding node
 * entries to a graph's nodes by name (see policy.h). */
#include "passes/policy.h"

#include <stdlib.h>
#include <string.h>

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
