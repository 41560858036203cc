/* fold_constants.c - constant evaluation at compile time: every node whose inputs are all
 * constants runs on the CPU reference kernels (apx_cpu_run) and becomes constants; the
 * compile-time only ops always do (contract in fold_constants.h). */
#include "passes/fold_constants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "kernels/cpu/cpu_kernels.h"

typedef enum FoldNeed {
  FOLD_MAY,  /* foldable: stays a runtime node when it cannot (cap, no kernel) */
  FOLD_MUST, /* compile-time only op: folding it is the only way it runs */
} FoldNeed;

typedef struct Folder {
  ApxGraph *g;
  ApxDiag *d;
  double cap_mb;        /* --fold-max-mb as given (for messages) */
  int64_t cap;          /* in bytes: what folding may create */
  int64_t used;         /* bytes folded so far */
  int32_t n_capped;     /* foldable nodes left to run time by the cap */
  int first_capped;     /* the first of them, -1 */
  ApxTensor *ins, *outs; /* call scratch, sized for the widest node (+1: ConstantOfShape's value) */
  int width;             /* their length */
  ApxCpuCtx ctx;
} Folder;

/* Stands in for the bytes of a tensor the kernel does not read: Shape's input (its dims are
 * what counts), an empty constant, an output asked about before it is allocated. */
static const uint64_t placeholder = 0;

/* 1 when every present input is a constant with its bytes. */
static int inputs_const(const ApxGraph *g, int node, int *bad) {
  const ApxNode *n = &g->nodes[node];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0) continue;
    const ApxValue *x = &g->vals[v];
    if (x->kind != APX_VAL_CONST || (!x->data && apx_value_numel(x) != 0)) {
      *bad = k;
      return 0;
    }
  }
  return 1;
}

/* Value of the typed attribute field `name` (BOOL) of node, -1 when the op's struct has none. */
static int attr_bool(const ApxGraph *g, int node, const char *name) {
  const ApxNode *n = &g->nodes[node];
  const ApxAttrDesc *ad = apx_op_attrs(n->op);
  if (!n->typed) return -1;
  for (int i = 0; i < ad->n_fields; i++)
    if (ad->fields[i].kind == APX_FIELD_BOOL && !strcmp(ad->fields[i].name, name))
      return *(const int32_t *)((const char *)n->typed + ad->fields[i].offset) != 0;
  return -1;
}

/* 1 when a node on constants may be evaluated now: it reads something and produces
 * something, it is deterministic (RANDOM ops only where training_mode = 0), it updates no
 * state (training_mode = 1: BatchNorm's running statistics; MULTITENSOR: training-step
 * updates in place). */
static int foldable(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  uint32_t flags = apx_op_info(n->op)->flags;
  if (flags & APX_OPF_MULTITENSOR) return 0;
  int has_in = 0, has_out = 0;
  for (int k = 0; k < n->n_in; k++) has_in |= n->in[k] >= 0;
  for (int k = 0; k < n->n_out; k++) has_out |= n->out[k] >= 0;
  if (!has_in || !has_out) return 0;
  int tm = attr_bool(g, node, "training_mode");
  if (flags & APX_OPF_RANDOM) return tm == 0;
  return tm != 1;
}

static ApxTensor tensor_of(const ApxValue *v, const void *data) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)data;
  t.dtype = v->dtype;
  t.rank = v->rank < 0 ? 0 : v->rank;
  for (int i = 0; i < t.rank; i++) t.dims[i] = v->dims[i];
  return t;
}

static int oom(Folder *F, int node) {
  apx_node_error(F->d, F->g, node, "out of memory folding constants");
  F->d->code = APX_EXIT_RUNTIME;
  return -1;
}

/* Constant: the attribute is the tensor (bookkeeping, no kernel). */
static int fold_constant_node(Folder *F, int node) {
  ApxGraph *g = F->g;
  int y = g->nodes[node].out[0];
  ApxTensorConst t;
  if (apx_constant_node_value(g, node, &t, F->d)) return -1;
  int64_t bytes = apx_value_bytes(&g->vals[y]);
  void *p = apx_arena_alloc(&g->arena, bytes > 0 ? (size_t)bytes : 1);
  if (!p) return oom(F, node);
  if (bytes > 0) memcpy(p, t.data, (size_t)bytes);
  g->vals[y].data = p;
  return 1;
}

/* Grows the call scratch to hold w tensors (the pass sizes it for the widest node up front;
 * this only runs when canonicalization widened one). Returns 0 or -1. */
static int ensure_width(Folder *F, int node, int w) {
  if (w <= F->width) return 0;
  ApxTensor *ins = realloc(F->ins, (size_t)w * sizeof *ins);
  if (ins) F->ins = ins;
  ApxTensor *outs = ins ? realloc(F->outs, (size_t)w * sizeof *outs) : NULL;
  if (outs) F->outs = outs;
  if (!ins || !outs) return oom(F, node);
  F->width = w;
  return 0;
}

/* The kernel call of node on its inputs' bytes into F->ins / F->outs (outputs not yet
 * allocated: placeholder data). Returns the input count passed, -1 on error. */
static int build_call(Folder *F, int node) {
  ApxGraph *g = F->g;
  const ApxNode *n = &g->nodes[node];
  int n_in = n->n_in;
  if (ensure_width(F, node, (n->n_in + 1 > n->n_out ? n->n_in + 1 : n->n_out)) < 0) return -1;
  for (int k = 0; k < n->n_in; k++) {
    memset(&F->ins[k], 0, sizeof F->ins[k]);
    if (n->in[k] < 0) continue;
    const ApxValue *v = &g->vals[n->in[k]];
    F->ins[k] = tensor_of(v, v->data ? v->data : &placeholder);
  }
  if (n->op == APX_OP_ConstantOfShape) { /* its `value` attribute is the kernel's input 1 */
    ApxDType dt;
    const void *elem;
    if (apx_constant_of_shape_value(g, node, &dt, &elem, F->d)) return -1;
    memset(&F->ins[1], 0, sizeof F->ins[1]);
    F->ins[1].data = (void *)elem;
    F->ins[1].dtype = dt;
    n_in = 2;
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&F->outs[k], 0, sizeof F->outs[k]);
    if (n->out[k] >= 0) F->outs[k] = tensor_of(&g->vals[n->out[k]], &placeholder);
  }
  return n_in;
}

/* Records that node stays a runtime node because of the cap (its note says so). */
static void cap_reached(Folder *F, int node, int64_t bytes) {
  ApxGraph *g = F->g;
  char note[200];
  snprintf(note, sizeof note,
           "not folded: its constant outputs (%lld bytes) would take folded constants past "
           "--fold-max-mb=%g (%lld bytes folded already)",
           (long long)bytes, F->cap_mb, (long long)F->used);
  g->nodes[node].note = apx_arena_strdup(&g->arena, note);
  g->nodes[node].flags |= APX_NODEF_NOTE_KEPT;
  if (F->n_capped++ == 0) F->first_capped = node;
}

/* Evaluates node into constants. Returns 1 (folded), 0 (left to run time: only FOLD_MAY),
 * -1 (error in F->d). */
static int fold_node(Folder *F, int node, FoldNeed need) {
  ApxGraph *g = F->g;
  ApxDiag *d = F->d;
  const ApxNode *n = &g->nodes[node];
  int64_t bytes = 0;
  for (int k = 0; k < n->n_out; k++) {
    if (n->out[k] < 0) continue;
    const ApxValue *y = &g->vals[n->out[k]];
    int64_t b = apx_value_bytes(y);
    if (b >= 0 && b <= APX_FOLD_MAX_BYTES) {
      bytes += b;
      continue;
    }
    if (need == FOLD_MAY) return 0;
    if (b < 0)
      return apx_node_error(d, g, node, "compile-time constant output %d '%s' has no known size",
                            k, y->name);
    return apx_node_error(d, g, node, "compile-time constant output %d '%s' would take %lld "
                          "bytes (at most %lld are folded)", k, y->name, (long long)b,
                          (long long)APX_FOLD_MAX_BYTES);
  }
  if (n->op == APX_OP_Constant) {
    if (fold_constant_node(F, node) < 0) return -1;
  } else {
    if (need == FOLD_MAY && bytes > F->cap - F->used) {
      cap_reached(F, node, bytes);
      return 0;
    }
    int n_in = build_call(F, node);
    if (n_in < 0) return -1;
    if (!apx_cpu_supports_call(n->op, F->ins, n_in, F->outs, n->n_out)) {
      if (need == FOLD_MAY) return 0;
      return apx_node_error(d, g, node, "not supported yet: compile-time only op has no CPU "
                            "kernel for these types");
    }
    for (int k = 0; k < n->n_out; k++) {
      if (n->out[k] < 0) continue;
      int64_t b = apx_value_bytes(&g->vals[n->out[k]]);
      F->outs[k].data = apx_arena_alloc(&g->arena, b > 0 ? (size_t)b : 1);
      if (!F->outs[k].data) return oom(F, node);
    }
    ApxStatus st = apx_cpu_run(&F->ctx, n->op, n->typed, F->ins, n_in, F->outs, n->n_out);
    if (st == APX_STATUS_UNSUPPORTED && need == FOLD_MAY) return 0;
    if (st != APX_STATUS_OK) {
      apx_node_error(d, g, node, "%s on its constant inputs: %s",
                     need == FOLD_MUST ? "compile-time only op could not be evaluated"
                                       : "cannot be evaluated",
                     F->ctx.err[0] ? F->ctx.err : apx_status_name(st));
      if (st == APX_STATUS_OOM) d->code = APX_EXIT_RUNTIME;
      return -1;
    }
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) g->vals[n->out[k]].data = F->outs[k].data;
    F->used += bytes;
  }
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v < 0) continue;
    g->vals[v].kind = APX_VAL_CONST;
    g->vals[v].producer = -1;
  }
  g->nodes[node].flags |= APX_NODEF_DEAD;
  return 1;
}

/* A float initializer (PARAM) whose every use is a static-input slot or an input of a
 * compile-time op is an operand, not a weight (an exporter's Dropout ratio, Range bounds):
 * it becomes CONST so that it is read as a constant and never trained. */
static int params_to_consts(ApxGraph *g, ApxDiag *d) {
  /* one walk over the live nodes' inputs, a mark per value (no use lists): USED, and
   * AS_WEIGHT for a use that is neither a static slot nor a compile-time op's input */
  enum { USED = 1, AS_WEIGHT = 2 };
  uint8_t *mark = calloc((size_t)g->n_vals + 1, 1);
  if (!mark) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory marking the parameters' uses", g->file);
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ApxNode *n = &g->nodes[i];
    if (n->flags & APX_NODEF_DEAD) continue;
    const ApxOpInfo *info = apx_op_info(n->op);
    int fold_input = (info->flags & APX_OPF_FOLD) && n->op != APX_OP_Shape;
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0 || v >= g->n_vals) continue;
      int operand = fold_input || (k < 32 && ((info->static_inputs >> k) & 1));
      mark[v] |= (uint8_t)(USED | (operand ? 0 : AS_WEIGHT));
    }
  }
  int changed = 0;
  for (int v = 0; v < g->n_vals; v++) {
    ApxValue *val = &g->vals[v];
    if (val->kind != APX_VAL_PARAM || (val->flags & APX_VALF_GRAPH_OUTPUT) || mark[v] != USED)
      continue;
    val->kind = APX_VAL_CONST;
    changed = 1;
  }
  free(mark);
  return changed;
}

static int run(Folder *F, int *changed) {
  ApxGraph *g = F->g;
  ApxDiag *d = F->d;
  for (int k = 0; k < g->n_order; k++) {
    int node = g->order[k];
    const ApxNode *n = &g->nodes[node];
    if (n->flags & APX_NODEF_DEAD) continue;
    int must = (apx_op_info(n->op)->flags & APX_OPF_FOLD) != 0;
    int bad = -1;
    if (must && n->op != APX_OP_Shape && !inputs_const(g, node, &bad)) {
      const ApxValue *x = &g->vals[n->in[bad]];
      return apx_node_error(d, g, node, "compile-time only op: its inputs are not constant "
                            "(input %d '%s' %s)", bad, x->name,
                            x->kind == APX_VAL_INPUT ? "is a graph input"
                            : x->kind == APX_VAL_PARAM ? "is a trainable parameter"
                            : x->producer >= 0 ? "is computed at run time"
                            : "has no data");
    }
    if (apx_node_canonicalize(g, node, d) || apx_node_infer(g, node, d)) return -1;
    /* after canonicalization, which may rewrite the node (CastLike becomes a Cast) */
    if (!must && (!inputs_const(g, node, &bad) || !foldable(g, node))) continue;
    int r = fold_node(F, node, must ? FOLD_MUST : FOLD_MAY);
    if (r < 0) return -1;
    *changed |= r;
  }
  return 0;
}

int pass_fold_constants(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  int changed = params_to_consts(g, d);
  if (changed < 0) return APX_PASS_ERROR;
  Folder F;
  memset(&F, 0, sizeof F);
  F.g = g;
  F.d = d;
  double mb = o ? o->fold_max_mb : APX_FOLD_MAX_MB_DEFAULT;
  F.cap_mb = mb;
  F.cap = mb > 0 ? (mb * 1048576.0 < 9e18 ? (int64_t)(mb * 1048576.0) : INT64_MAX) : 0;
  F.first_capped = -1;
  apx_cpu_ctx_init(&F.ctx);
  F.ctx.n_threads = 1;
  int width = 2;
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    if (n->n_in + 1 > width) width = n->n_in + 1;
    if (n->n_out > width) width = n->n_out;
  }
  F.ins = calloc((size_t)width, sizeof *F.ins);
  F.outs = calloc((size_t)width, sizeof *F.outs);
  F.width = width;
  int rc = 0;
  if (!F.ins || !F.outs)
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory folding constants", g->file);
  else
    rc = run(&F, &changed);
  free(F.ins);
  free(F.outs);
  if (rc < 0) return APX_PASS_ERROR;
  if (F.n_capped) {
    const ApxNode *n = &g->nodes[F.first_capped];
    apx_diag_warn(d, "%s: %d node%s on constants left to run at run time: folded constants "
                  "reached --fold-max-mb=%g (first: node '%s' (%s))", g->file, F.n_capped,
                  F.n_capped == 1 ? "" : "s", mb, n->name, apx_op_name(n->op));
  }
  return changed ? APX_PASS_CHANGED : APX_PASS_UNCHANGED;
}
