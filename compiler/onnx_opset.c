/* onnx_opset.c - the opset --emit-onnx writes for bfloat16 (contract in onnx_opset.h). */
#include "compiler/onnx_opset.h"

#include <stdio.h>
#include <string.h>

/* ---- facts of ai.onnx's schemas ---------------------------------------------------------- */

/* Ops whose schema admits tensor(bfloat16) later than opset 13 (every other op the emitter
 * writes has it from 13 in all its float slots), or never (0). slot -1: the op's float
 * inputs and outputs in general; slot K >= 0: input K, whose type constraint gains bfloat16
 * at another opset (Pow's exponent, Dropout's ratio). */
static const struct {
  ApxOp op;
  int slot;
  int64_t since;
} bf16_late[] = {
    {APX_OP_BatchNormalization, -1, 14}, {APX_OP_Pow, 1, 15},           {APX_OP_LeakyRelu, -1, 16},
    {APX_OP_Where, -1, 16},              {APX_OP_LayerNormalization, -1, 17},
    {APX_OP_Gelu, -1, 20},               {APX_OP_ConstantOfShape, -1, 20},
    {APX_OP_Conv, -1, 22},               {APX_OP_MaxPool, -1, 22},      {APX_OP_AveragePool, -1, 22},
    {APX_OP_GlobalAveragePool, -1, 22},  {APX_OP_NegativeLogLikelihoodLoss, -1, 22},
    {APX_OP_Dropout, 1, 22},             {APX_OP_Range, -1, 0},
    {APX_OP_HardSigmoid, -1, 22},        {APX_OP_HardSwish, -1, 22},    {APX_OP_Softplus, -1, 22},
    {APX_OP_IsInf, -1, 20},              {APX_OP_LessOrEqual, -1, 16},  {APX_OP_GreaterOrEqual, -1, 16},
    {APX_OP_CastLike, -1, 15},           {APX_OP_Trilu, -1, 14},        {APX_OP_RandomUniformLike, -1, 22},
    {APX_OP_SplitToSequence, -1, 0},     {APX_OP_SequenceAt, -1, 0},
    {APX_OP_ConvTranspose, -1, 22},
    {APX_OP_Einsum, -1, 0},              {APX_OP_Resize, 1, 0},         {APX_OP_Resize, 2, 0},
};

/* Opsets at which a node written in the older form becomes invalid, and when that applies. */
typedef enum FormWhen { WHEN_ALWAYS, WHEN_NO_INPUT, WHEN_ATTR } FormWhen;
static const struct {
  ApxOp op;
  int64_t opset;
  FormWhen when;
  int input;        /* WHEN_NO_INPUT: the slot whose absence breaks the form */
  const char *attr; /* WHEN_ATTR: the attribute whose presence breaks it */
  const char *what; /* for messages */
} form_changes[] = {
    {APX_OP_BatchNormalization, 14, WHEN_ALWAYS, 0, NULL, "its outputs change"},
    {APX_OP_Split, 18, WHEN_NO_INPUT, 1, NULL, "without a split input it needs num_outputs"},
    {APX_OP_ReduceMean, 18, WHEN_ATTR, 0, "axes", "its axes attribute becomes an input"},
    {APX_OP_ReduceMax, 18, WHEN_ATTR, 0, "axes", "its axes attribute becomes an input"},
    {APX_OP_Resize, 11, WHEN_ALWAYS, 0, NULL, "its inputs change (roi before scales)"},
};

int64_t apx_onnx_bf16_since(ApxOp op, int slot) {
  int64_t since = 13;
  for (size_t i = 0; i < sizeof bf16_late / sizeof bf16_late[0]; i++) {
    if (bf16_late[i].op != op) continue;
    if (bf16_late[i].slot == slot && slot >= 0) return bf16_late[i].since;
    if (bf16_late[i].slot < 0) since = bf16_late[i].since;
  }
  return since;
}

static int has_attr(const ApxNode *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].name && !strcmp(n->attrs[i].name, name)) return 1;
  return 0;
}

/* The form change that breaks node between (from, to], or -1. */
static int breaking_change(const ApxGraph *g, int node, int64_t from, int64_t to) {
  const ApxNode *n = &g->nodes[node];
  for (int i = 0; i < (int)(sizeof form_changes / sizeof form_changes[0]); i++) {
    if (form_changes[i].op != n->op || form_changes[i].opset <= from || form_changes[i].opset > to) continue;
    int applies = form_changes[i].when == WHEN_ALWAYS ||
                  (form_changes[i].when == WHEN_NO_INPUT &&
                   !(form_changes[i].input < n->n_in && n->in[form_changes[i].input] >= 0)) ||
                  (form_changes[i].when == WHEN_ATTR && has_attr(n, form_changes[i].attr));
    if (applies) return i;
  }
  return -1;
}

int64_t apx_onnx_form_breaks(const ApxGraph *g, int node, int64_t from, int64_t to) {
  int i = breaking_change(g, node, from, to);
  return i < 0 ? 0 : form_changes[i].opset;
}

int apx_onnx_opset_table(ApxOp *ops, int64_t *bf16_since, const char **changes, int cap) {
  static char text[APX_OP_COUNT][96];
  int k = 0;
  for (int op = 1; op < APX_OP_COUNT; op++) {
    const ApxOpInfo *in = apx_op_info((ApxOp)op);
    if (!(in->flags & (APX_OPF_V1 | APX_OPF_FOLD)) || (in->flags & APX_OPF_INTERNAL)) continue;
    if (k < cap && ops) {
      char *t = text[op];
      t[0] = 0;
      for (size_t i = 0; i < sizeof bf16_late / sizeof bf16_late[0]; i++)
        if (bf16_late[i].op == (ApxOp)op && bf16_late[i].slot >= 0) {
          size_t l = strlen(t);
          snprintf(t + l, sizeof text[op] - l, "%sinput%d=%lld", l ? " " : "", bf16_late[i].slot,
                   (long long)bf16_late[i].since);
        }
      for (size_t i = 0; i < sizeof form_changes / sizeof form_changes[0]; i++) {
        if (form_changes[i].op != (ApxOp)op) continue;
        size_t l = strlen(t);
        if (form_changes[i].when == WHEN_ALWAYS)
          snprintf(t + l, sizeof text[op] - l, "%s%lld:always", l ? " " : "", (long long)form_changes[i].opset);
        else if (form_changes[i].when == WHEN_NO_INPUT)
          snprintf(t + l, sizeof text[op] - l, "%s%lld:no-input-%d", l ? " " : "",
                   (long long)form_changes[i].opset, form_changes[i].input);
        else
          snprintf(t + l, sizeof text[op] - l, "%s%lld:attr-%s", l ? " " : "",
                   (long long)form_changes[i].opset, form_changes[i].attr);
      }
      ops[k] = (ApxOp)op;
      bf16_since[k] = apx_onnx_bf16_since((ApxOp)op, -1);
      changes[k] = t;
    }
    k++;
  }
  return k;
}

/* ---- the plan for one graph --------------------------------------------------------------- */

/* The opset the node's bfloat16 slots need: -1 when it touches no bf16 value, 0 when some
 * slot admits bf16 at no opset. */
static int64_t bf16_need(const ApxGraph *g, const ApxNode *n) {
  int64_t need = -1;
  for (int i = 0; i < n->n_in + n->n_out; i++) {
    int v = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
    if (v < 0 || g->vals[v].dtype != APX_DT_BF16) continue;
    int64_t s = apx_onnx_bf16_since(n->op, i < n->n_in ? i : -1);
    if (s == 0) return 0;
    if (s > need) need = s;
  }
  return need;
}

static int is_written(const ApxNode *n) {
  return !(n->flags & APX_NODEF_DEAD) && n->section == APX_SEC_FORWARD;
}

int apx_onnx_opset_plan(const ApxGraph *g, ApxArena *a, ApxOnnxOpsetPlan *p) {
  memset(p, 0, sizeof *p);
  p->opset = g->opset;
  p->widen = apx_arena_alloc(a, (size_t)g->n_nodes + 1);
  p->why = apx_arena_alloc(a, ((size_t)g->n_nodes + 1) * sizeof *p->why);
  if (!p->widen || !p->why) return -1;
  /* the highest opset every written node's form stays valid at */
  int64_t cap = APX_ONNX_MAX_OPSET > g->opset ? APX_ONNX_MAX_OPSET : g->opset;
  int capped_by = -1;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    if (!is_written(&g->nodes[id])) continue;
    int64_t b = apx_onnx_form_breaks(g, id, g->opset, cap);
    if (b && b - 1 < cap) {
      cap = b - 1;
      capped_by = id;
    }
  }
  if (g->opset < 13) return 0; /* bfloat16 needs 13: the emitter refuses such a graph */
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    if (!is_written(n) || n->op == APX_OP_Cast) continue;
    int64_t need = bf16_need(g, n);
    if (need < 0) continue;
    if (need && need <= cap) {
      if (need > p->opset) p->opset = need;
      continue;
    }
    p->widen[id] = 1;
    p->n_widened++;
    const char *op = apx_op_name(n->op);
    if (!need)
      p->why[id] = apx_arena_printf(a, "--emit-onnx: ONNX %s admits bfloat16 at no opset up to %d; written "
                                       "as fp32 compute between Casts there", op, APX_ONNX_MAX_OPSET);
    else if (capped_by >= 0)
      p->why[id] = apx_arena_printf(
          a, "--emit-onnx: ONNX %s admits bfloat16 from opset %lld, but the model's %s '%s' is valid only "
             "up to opset %lld (%s); written as fp32 compute between Casts there",
          op, (long long)need, apx_op_name(g->nodes[capped_by].op), g->nodes[capped_by].name, (long long)cap,
          form_changes[breaking_change(g, capped_by, g->opset, cap + 1)].what);
    else
      p->why[id] = apx_arena_printf(a, "--emit-onnx: ONNX %s admits bfloat16 from opset %lld, past the %d the "
                                       "emitter writes; written as fp32 compute between Casts there",
                                    op, (long long)need, APX_ONNX_MAX_OPSET);
    if (!p->why[id]) return -1;
  }
  return 0;
}
