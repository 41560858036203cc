/* autodiff.c - pass_autodiff: reverse-mode differentiation from the loss, loss-scale seed,
 * state binding (BatchNorm running statistics), gradient accumulators. See autodiff.h. */
#include "passes/autodiff.h"

#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "ir/loss_list.h"
#include "passes/grad_rules.h"

/* Gradient contributions waiting to be summed, one list per forward value. */
typedef struct Contrib {
  int value; /* contribution (a gradient value) */
  int from;  /* forward node whose rule made it */
  int next;  /* next entry of the same list, -1 */
} Contrib;

typedef struct AD {
  ApxGraph *g;
  const ApxOptions *o;
  ApxDiag *d;
  int nv0;       /* values that existed before the pass: the ones that can get gradients */
  int n0;        /* nodes that existed before the pass (never changed by it) */
  int *reach;    /* [nv0] a trainable parameter reaching the value, -1 */
  int *head;     /* [nv0] first Contrib, -1 */
  int *tail;     /* [nv0] last Contrib (valid when head >= 0) */
  int *count;    /* [nv0] number of Contribs */
  Contrib *pool;
  int n_pool, cap_pool;
} AD;

static int oom(AD *a) { return apx_diag_error(a->d, APX_EXIT_RUNTIME, "%s: out of memory", a->g->file); }

int apx_value_is_trainable(const ApxGraph *g, const ApxOptions *o, int v) {
  const ApxValue *val = &g->vals[v];
  return val->kind == APX_VAL_PARAM && apx_dtype_is_float(val->dtype) &&
         !(val->flags & APX_VALF_FROZEN) && !(o && apx_name_list_has(&o->frozen, val->name));
}

static int add_contrib(AD *a, int v, int grad, int from) {
  if (a->n_pool == a->cap_pool) {
    int nc = a->cap_pool ? a->cap_pool * 2 : 256;
    Contrib *p = realloc(a->pool, (size_t)nc * sizeof *p);
    if (!p) return oom(a);
    a->pool = p;
    a->cap_pool = nc;
  }
  /* append at the tail so sums follow the forward order of the consumers */
  Contrib *e = &a->pool[a->n_pool];
  e->value = grad;
  e->from = from;
  e->next = -1;
  if (a->head[v] < 0)
    a->head[v] = a->n_pool;
  else
    a->pool[a->tail[v]].next = a->n_pool;
  a->tail[v] = a->n_pool;
  a->n_pool++;
  a->count[v]++;
  a->g->vals[grad].flags |= APX_VALF_GRAD;
  return 0;
}

/* A fresh unique name "<prefix><name>" (the plain one when free). */
static const char *fresh_name(ApxGraph *g, const char *prefix, const char *name) {
  const char *n = apx_arena_printf(&g->arena, "%s%s", prefix, name);
  if (!n) return NULL;
  return apx_graph_free_name(g, n);
}

/* Adds a node in `section` with typed attributes copied from attrs and infers it. */
static int make_node(AD *a, ApxOp op, const char *name, const void *attrs, int n_in,
                     const int *in, int n_out, const int *out, ApxSection section, int origin) {
  ApxGraph *g = a->g;
  int id = apx_graph_add_node(g, a->d, op, name, n_in, in, n_out, out);
  if (id < 0) return -1;
  g->nodes[id].section = section;
  g->nodes[id].origin = origin;
  if (attrs) memcpy(g->nodes[id].typed, attrs, apx_op_info(op)->attrs_size);
  if (apx_node_infer(g, id, a->d)) return -1;
  return id;
}

/* The total gradient of forward value v: its single contribution, or the Add / Sum of
 * all of them (named grad/<v>). *out = -1 when none reached v. */
static int gradient_of(AD *a, int v, int *out) {
  ApxGraph *g = a->g;
  *out = -1;
  int n = a->count[v];
  if (n == 0) return 0;
  if (n == 1) {
    *out = a->pool[a->head[v]].value;
    return 0;
  }
  int *in = malloc((size_t)n * sizeof *in);
  if (!in) return oom(a);
  int k = 0;
  for (int e = a->head[v]; e >= 0; e = a->pool[e].next) in[k++] = a->pool[e].value;
  int origin = g->vals[v].producer >= 0 ? g->vals[v].producer : a->pool[a->head[v]].from;
  const char *vn = fresh_name(g, "grad/", g->vals[v].name);
  int sum = vn ? apx_graph_add_value(g, a->d, vn, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL) : oom(a);
  const char *nn = sum < 0 ? NULL : apx_arena_printf(&g->arena, "%s/grad/accumulate", g->vals[v].name);
  int rc = -1;
  if (nn && make_node(a, n == 2 ? APX_OP_Add : APX_OP_Sum, nn, NULL, n, in, 1, &sum,
                      APX_SEC_BACKWARD, origin) >= 0) {
    g->vals[sum].flags |= APX_VALF_GRAD;
    *out = sum;
    rc = 0;
  }
  free(in);
  return rc;
}

/* ---- preparation: loss check, state, parameters ------------------------------------ */

static int check_loss(ApxGraph *g, int loss, ApxDiag *d) {
  if (loss < 0 || loss >= g->n_vals)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: no loss: training needs a scalar float loss (the first graph "
                          "output, or --loss NAME)", g->file);
  const ApxValue *l = &g->vals[loss];
  if (!apx_dtype_is_float(l->dtype))
    return apx_value_error(d, g, loss, "the loss must be a float scalar, got %s",
                           apx_dtype_name(l->dtype));
  if (apx_value_numel(l) != 1) {
    char buf[128];
    return apx_value_error(d, g, loss,
                           "the loss must be a scalar (one element), got shape %s (use "
                           "--loss NAME to pick another output)",
                           apx_value_shape_str(l, buf, sizeof buf));
  }
  return 0;
}

/* Makes forward output `slot` of node exist (see gr_forward_output). */
static int ensure_output(AD *a, int node, int slot, const char *what) {
  GradCtx c = {.g = a->g, .d = a->d, .o = a->o, .node = node};
  return gr_forward_output(&c, slot, what);
}

/* BatchNorm running statistics become STATE; loss class weights constants; Dropout
 * streams; training-mode BatchNorm gets its running-statistics outputs. */
static int classify_state(AD *a) {
  ApxGraph *g = a->g;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    ApxOp op = g->nodes[id].op;
    if (op == APX_OP_BatchNormalization) {
      int training = APX_NODE_ATTRS(g, id, ApxAttrBatchNorm)->training_mode;
      for (int s = 3; s <= 4 && s < g->nodes[id].n_in; s++) {
        int v = g->nodes[id].in[s];
        if (v < 0) continue;
        ApxValue *val = &g->vals[v];
        if (val->kind == APX_VAL_PARAM || (training && val->kind == APX_VAL_CONST))
          val->kind = APX_VAL_STATE;
        else if (training && val->kind != APX_VAL_STATE)
          return apx_node_error(a->d, g, id,
                                "not supported yet: training-mode running %s input '%s' is "
                                "computed by the graph; it must be an initializer",
                                s == 3 ? "mean" : "var", val->name);
      }
      if (training && (ensure_output(a, id, 1, "running_mean") < 0 ||
                       ensure_output(a, id, 2, "running_var") < 0))
        return -1;
    } else if (op == APX_OP_SoftmaxCrossEntropyLoss || op == APX_OP_NegativeLogLikelihoodLoss) {
      int v = g->nodes[id].n_in > 2 ? g->nodes[id].in[2] : -1;
      if (v >= 0 && g->vals[v].kind == APX_VAL_PARAM) g->vals[v].kind = APX_VAL_CONST;
    } else if (op == APX_OP_Dropout) {
      APX_NODE_ATTRS(g, id, ApxAttrDropout)->rng_stream = id;
    }
  }
  return 0;
}

/* reach[v]: a trainable parameter with a float path to v (-1 if none). */
static void compute_reach(AD *a) {
  ApxGraph *g = a->g;
  for (int v = 0; v < a->nv0; v++) a->reach[v] = apx_value_is_trainable(g, a->o, v) ? v : -1;
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    uint32_t stat = apx_op_info(n->op)->static_inputs;
    int r = -1;
    for (int i = 0; i < n->n_in && r < 0; i++)
      if (n->in[i] >= 0 && !(stat & (1u << i))) r = a->reach[n->in[i]];
    if (r < 0) continue;
    for (int o = 0; o < n->n_out; o++)
      if (n->out[o] >= 0 && n->out[o] < a->nv0 && apx_dtype_is_float(g->vals[n->out[o]].dtype))
        a->reach[n->out[o]] = r;
  }
}

/* ---- the seed ----------------------------------------------------------------------- */

/* The fp32 [1] value `name` (kind STATE: the runtime's scaler writes it; CONST: fixed) at v. */
static int scalar_value(AD *a, const char *name, ApxValueKind kind, float v) {
  ApxGraph *g = a->g;
  int s = apx_graph_find_value(g, name);
  if (s >= 0) return s;
  int64_t one = 1;
  s = apx_graph_add_value(g, a->d, name, kind, APX_DT_F32, 1, &one);
  if (s < 0) return -1;
  float *p = apx_arena_alloc(&g->arena, sizeof(float));
  if (!p) return oom(a);
  *p = v;
  g->vals[s].data = p;
  return s;
}

/* The loss scale of loss i of n: apx_loss_scale for one loss, apx_loss_scale/<loss> each
 * for several. */
static int loss_scale_value(AD *a, int loss, int n_losses) {
  float init = a->o->loss_scale > 0 ? a->o->loss_scale : 1.0f;
  if (n_losses == 1) return scalar_value(a, APX_LOSS_SCALE_NAME, APX_VAL_STATE, init);
  const char *name = apx_arena_printf(&a->g->arena, "%s/%s", APX_LOSS_SCALE_NAME, a->g->vals[loss].name);
  return name ? scalar_value(a, name, APX_VAL_STATE, init) : oom(a);
}

static int seed(AD *a, int loss, int n_losses) {
  ApxGraph *g = a->g;
  int scale = loss_scale_value(a, loss, n_losses);
  if (scale < 0) return -1;
  ApxValue lv = g->vals[loss];
  ApxDType dt = lv.dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
  const char *vn = fresh_name(g, "grad/", lv.name);
  int sv = vn ? apx_graph_add_value(g, a->d, vn, APX_VAL_ACTIVATION, dt, lv.rank, lv.dims) : oom(a);
  if (sv < 0) return -1;
  ApxAttrLossScaleSeed at = {.multiplier = a->o->accumulate > 1 ? 1.0f / (float)a->o->accumulate : 1.0f};
  int in[2] = {loss, scale};
  const char *sn = n_losses == 1 ? "apx_loss_scale_seed"
                                 : apx_arena_printf(&g->arena, "apx_loss_scale_seed/%s", lv.name);
  const char *cn = sn ? apx_arena_printf(&g->arena, "%s/cast", sn) : NULL;
  if (!cn) return oom(a);
  if (make_node(a, APX_OP_LossScaleSeed, sn, &at, 2, in, 1, &sv, APX_SEC_BACKWARD, lv.producer) < 0)
    return -1;
  if (dt != lv.dtype) { /* a half loss: the gradient enters the graph in its type */
    ApxAttrCast c = {.to = (int32_t)lv.dtype, .saturate = 1};
    int cv = apx_graph_add_value(g, a->d, NULL, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL);
    if (cv < 0 || make_node(a, APX_OP_Cast, cn, &c, 1, &sv, 1, &cv,
                            APX_SEC_BACKWARD, lv.producer) < 0)
      return -1;
    sv = cv;
  }
  return add_contrib(a, loss, sv, lv.producer);
}

/* ---- the reverse sweep -------------------------------------------------------------- */

static int same_type_and_shape(const ApxValue *x, const ApxValue *y) {
  if (x->dtype != y->dtype || x->rank != y->rank) return 0;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] != y->dims[i]) return 0;
  return 1;
}

static int backprop_node(AD *a, int id) {
  ApxGraph *g = a->g;
  int n_out = g->nodes[id].n_out, n_in = g->nodes[id].n_in;
  int cap_out = n_out + 8; /* rules may add forward outputs (gr_forward_output) */
  int *dy = malloc((size_t)cap_out * sizeof *dy);
  int *dx = malloc(((size_t)n_in + 1) * sizeof *dx);
  uint8_t *need = calloc((size_t)n_in + 1, 1);
  int rc = -1;
  if (!dy || !dx || !need) {
    oom(a);
    goto out;
  }
  int any_dy = 0, any_need = 0, param = -1;
  uint32_t stat = apx_op_info(g->nodes[id].op)->static_inputs;
  for (int i = 0; i < n_in; i++) {
    dx[i] = -1;
    int v = g->nodes[id].in[i];
    need[i] = v >= 0 && v < a->nv0 && !(stat & (1u << i)) && a->reach[v] >= 0;
    if (need[i] && param < 0) param = a->reach[v];
    any_need |= need[i];
  }
  for (int k = 0; k < cap_out; k++) {
    dy[k] = -1;
    int v = k < n_out ? g->nodes[id].out[k] : -1;
    if (any_need && v >= 0 && v < a->nv0 && gradient_of(a, v, &dy[k])) goto out;
    any_dy |= dy[k] >= 0;
  }
  if (!any_dy || !any_need) {
    rc = 0;
    goto out;
  }
  GradRuleFn rule = apx_grad_rule(g->nodes[id].op);
  if (!rule) {
    apx_node_error(a->d, g, id, "no gradient rule, needed for the gradient of parameter '%s'",
                   g->vals[param].name);
    goto out;
  }
  GradCtx c = {.g = g, .d = a->d, .o = a->o, .node = id, .dy = dy, .need = need, .dx = dx};
  if (rule(&c)) goto out;
  for (int i = 0; i < n_in; i++) {
    if (dx[i] < 0) continue;
    int v = g->nodes[id].in[i];
    if (!need[i] || !same_type_and_shape(&g->vals[dx[i]], &g->vals[v])) {
      char want[128], got[128];
      apx_node_error(a->d, g, id,
                     "internal error: gradient rule gave input %d '%s' a %s%s gradient, "
                     "expected %s%s", i, g->vals[v].name, apx_dtype_short(g->vals[dx[i]].dtype),
                     apx_value_shape_str(&g->vals[dx[i]], got, sizeof got),
                     apx_dtype_short(g->vals[v].dtype),
                     apx_value_shape_str(&g->vals[v], want, sizeof want));
      a->d->code = APX_EXIT_RUNTIME;
      goto out;
    }
    if (add_contrib(a, v, dx[i], id)) goto out;
  }
  rc = 0;
out:
  free(dy);
  free(dx);
  free(need);
  return rc;
}

/* ---- parameters' gradients ---------------------------------------------------------- */

/* Gives parameter p's single-contribution gradient the name grad/<p>: the producing
 * backward node's output is replaced by a value of that name (the old value, created by
 * this pass and used nowhere, is left without producer). */
static int name_param_grad(AD *a, int p, int gv, const uint8_t *used) {
  ApxGraph *g = a->g;
  int prod = g->vals[gv].producer;
  if (gv < a->nv0 || prod < 0 || used[gv] || g->nodes[prod].section != APX_SEC_BACKWARD) return gv;
  const char *name = fresh_name(g, "grad/", g->vals[p].name);
  if (!name) return oom(a);
  ApxValue old = g->vals[gv];
  int nv = apx_graph_add_value(g, a->d, name, APX_VAL_ACTIVATION, old.dtype, old.rank, old.dims);
  if (nv < 0) return -1;
  ApxNode *n = &g->nodes[prod];
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] == gv) n->out[k] = nv;
  g->vals[nv].producer = prod;
  g->vals[nv].flags = old.flags;
  g->vals[gv].producer = -1;
  return nv;
}

static int finish_params(AD *a) {
  ApxGraph *g = a->g;
  /* values consumed by live nodes or claimed as another value's contribution */
  uint8_t *used = calloc((size_t)g->n_vals + 1, 1);
  if (!used) return oom(a);
  for (int i = 0; i < g->n_nodes; i++) {
    const ApxNode *n = &g->nodes[i];
    if (n->flags & APX_NODEF_DEAD) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) used[n->in[k]] = 1;
  }
  /* a value listed twice (two parameters, or a parameter and another value) stays */
  uint8_t *listed = calloc((size_t)g->n_vals + 1, 1);
  if (!listed) {
    free(used);
    return oom(a);
  }
  for (int e = 0; e < a->n_pool; e++) {
    int v = a->pool[e].value;
    if (listed[v]) used[v] = 1;
    listed[v] = 1;
  }
  free(listed);
  for (int v = 0; v < g->n_outputs; v++) used[g->outputs[v]] = 1;
  int rc = 0;
  for (int p = 0; p < a->nv0 && rc == 0; p++) {
    if (!apx_value_is_trainable(g, a->o, p)) continue;
    int gv;
    if ((rc = gradient_of(a, p, &gv))) break;
    if (gv < 0) {
      apx_diag_warn(a->d, "%s: parameter '%s' does not reach the loss; it is not trained",
                    g->file, g->vals[p].name);
      continue;
    }
    if (a->count[p] == 1 && (gv = name_param_grad(a, p, gv, used)) < 0) {
      rc = -1;
      break;
    }
    g->vals[p].grad = gv;
    g->vals[gv].flags |= APX_VALF_GRAD;
    g->vals[gv].origin = p;
  }
  free(used);
  return rc;
}

/* --accumulate K: grad/<p>/sum = gradacc/<p> + grad/<p>; AssignState(sum, gradacc). */
static int make_accumulators(AD *a) {
  ApxGraph *g = a->g;
  int nv = g->n_vals;
  for (int p = 0; p < nv; p++) {
    if (g->vals[p].kind != APX_VAL_PARAM || g->vals[p].grad < 0) continue;
    ApxValue pv = g->vals[p];
    int gp = pv.grad;
    ApxDType dt = pv.dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
    const char *an = fresh_name(g, "gradacc/", pv.name);
    int acc = an ? apx_graph_add_value(g, a->d, an, APX_VAL_STATE, dt, pv.rank, pv.dims) : oom(a);
    if (acc < 0) return -1;
    if (apx_value_bytes(&g->vals[acc]) < 0) return oom(a); /* starts at zero: no data */
    g->vals[acc].flags |= APX_VALF_GRAD;
    g->vals[acc].origin = p;
    const char *sn = fresh_name(g, g->vals[gp].name, "/sum");
    int sum = sn ? apx_graph_add_value(g, a->d, sn, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL) : oom(a);
    if (sum < 0) return -1;
    int in[2] = {acc, gp};
    const char *nn = apx_arena_printf(&g->arena, "%s/grad/accumulate_micro_batch", pv.name);
    if (make_node(a, APX_OP_Add, nn, NULL, 2, in, 1, &sum, APX_SEC_BACKWARD, -1) < 0) return -1;
    int as[2] = {sum, acc};
    nn = apx_arena_printf(&g->arena, "%s/grad/store_accumulator", pv.name);
    if (make_node(a, APX_OP_AssignState, nn, NULL, 2, as, 0, NULL, APX_SEC_BACKWARD, -1) < 0)
      return -1;
    g->vals[sum].flags |= APX_VALF_GRAD;
    g->vals[sum].origin = p;
    g->vals[p].grad = sum;
  }
  return 0;
}

/* ---- several losses (--loss A,B), each with its own scaler -------------------------- */

/* One reverse sweep from `loss` (its own seed and scale); grads[p] = p's gradient from this
 * loss, -1 where it does not reach p. */
static int sweep_loss(AD *a, const int *order, int n_order, int loss, int n_losses, int *grads) {
  for (int v = 0; v < a->nv0; v++) a->head[v] = -1, a->count[v] = 0;
  a->n_pool = 0;
  if (seed(a, loss, n_losses)) return -1;
  for (int k = n_order - 1; k >= 0; k--)
    if (backprop_node(a, order[k])) return -1;
  for (int p = 0; p < a->nv0; p++) {
    grads[p] = -1;
    if (apx_value_is_trainable(a->g, a->o, p) && gradient_of(a, p, &grads[p])) return -1;
  }
  return 0;
}

/* An fp32 [1] (int32 for first_bad) output of a per-loss UnscaleCheck. */
static int check_output(AD *a, const char *what, const char *loss, ApxDType dt) {
  int64_t one = 1;
  const char *n = fresh_name(a->g, what, loss);
  return n ? apx_graph_add_value(a->g, a->d, n, APX_VAL_ACTIVATION, dt, 1, &one) : oom(a);
}

/* UnscaleCheck(apx_loss_scale/<loss>, its gradients) -> found_inf, first_bad, norm_sq,
 * grad/<p>/<loss>/unscaled (OPTIMIZER section, value-id order); unscaled[p] = that value. */
static int unscale_loss(AD *a, int loss, const int *grads, int *unscaled) {
  ApxGraph *g = a->g;
  const char *ln = g->vals[loss].name;
  int n = 0;
  for (int p = 0; p < a->nv0; p++) n += grads[p] >= 0;
  int *in = malloc(((size_t)n + 1) * sizeof *in), *out = malloc(((size_t)n + 3) * sizeof *out);
  int rc = -1;
  if (!in || !out) {
    oom(a);
    goto done;
  }
  const char *sn = apx_arena_printf(&g->arena, "%s/%s", APX_LOSS_SCALE_NAME, ln);
  if (!sn || (in[0] = apx_graph_find_value(g, sn)) < 0) goto done;
  out[APX_UNSCALE_OUT_FOUND_INF] = check_output(a, "apx_found_inf/", ln, APX_DT_F32);
  out[APX_UNSCALE_OUT_FIRST_BAD] = check_output(a, "apx_first_bad_grad/", ln, APX_DT_I32);
  out[APX_UNSCALE_OUT_NORM_SQ] = check_output(a, "apx_grad_norm_sq/", ln, APX_DT_F32);
  if (out[0] < 0 || out[1] < 0 || out[2] < 0) goto done;
  int k = 0;
  for (int p = 0; p < a->nv0; p++) {
    unscaled[p] = -1;
    if (grads[p] < 0) continue;
    const ApxValue gv = g->vals[grads[p]];
    const char *un = apx_arena_printf(&g->arena, "grad/%s/%s/unscaled", g->vals[p].name, ln);
    un = un ? fresh_name(g, "", un) : NULL;
    ApxDType dt = gv.dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
    int u = un ? apx_graph_add_value(g, a->d, un, APX_VAL_ACTIVATION, dt, gv.rank, gv.dims) : oom(a);
    if (u < 0) goto done;
    g->vals[u].flags |= APX_VALF_GRAD;
    g->vals[u].origin = p;
    g->vals[grads[p]].flags |= APX_VALF_GRAD;
    g->vals[grads[p]].origin = p;
    in[1 + k] = grads[p];
    out[APX_UNSCALE_OUT_FIRST_GRAD + k] = u;
    unscaled[p] = u;
    k++;
  }
  const char *nn = apx_arena_printf(&g->arena, "apx_unscale_check/%s", ln);
  if (!nn) {
    oom(a);
    goto done;
  }
  if (make_node(a, APX_OP_UnscaleCheck, nn, NULL, 1 + n, in, 3 + n, out, APX_SEC_OPTIMIZER, -1) < 0) goto done;
  rc = 0;
done:
  free(in);
  free(out);
  return rc;
}

/* Every loss's backward sweep, then each loss's gradients unscaled by its own scale (so each
 * scaler sees only its own overflow), then grad/<p> = the sum of p's unscaled gradients
 * (OPTIMIZER section). The optimizer pass's UnscaleCheck then reads apx_loss_scale, here
 * the constant 1: it checks the sum (a non-finite contribution makes it non-finite) and
 * computes the norm that clipping uses. */
static int several_losses(AD *a, const int *order, int n_order, const int *losses, int n_losses) {
  ApxGraph *g = a->g;
  size_t per = (size_t)a->nv0 + 1;
  int *grads = malloc(per * (size_t)n_losses * sizeof *grads);
  int *unscaled = malloc(per * (size_t)n_losses * sizeof *unscaled);
  int *terms = malloc(((size_t)n_losses + 1) * sizeof *terms);
  int rc = -1;
  if (!grads || !unscaled || !terms) {
    oom(a);
    goto done;
  }
  for (int i = 0; i < n_losses; i++)
    if (sweep_loss(a, order, n_order, losses[i], n_losses, grads + per * (size_t)i)) goto done;
  for (int i = 0; i < n_losses; i++)
    if (unscale_loss(a, losses[i], grads + per * (size_t)i, unscaled + per * (size_t)i)) goto done;
  if (scalar_value(a, APX_LOSS_SCALE_NAME, APX_VAL_CONST, 1.0f) < 0) goto done;
  for (int p = 0; p < a->nv0; p++) {
    if (!apx_value_is_trainable(g, a->o, p)) continue;
    int n = 0;
    for (int i = 0; i < n_losses; i++)
      if (unscaled[per * (size_t)i + (size_t)p] >= 0) terms[n++] = unscaled[per * (size_t)i + (size_t)p];
    if (n == 0) {
      apx_diag_warn(a->d, "%s: parameter '%s' reaches none of the losses; it is not trained", g->file,
                    g->vals[p].name);
      continue;
    }
    int sum = terms[0];
    if (n > 1) {
      const char *vn = fresh_name(g, "grad/", g->vals[p].name);
      const char *nn = apx_arena_printf(&g->arena, "%s/grad/sum_losses", g->vals[p].name);
      sum = vn && nn ? apx_graph_add_value(g, a->d, vn, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, NULL) : oom(a);
      if (sum < 0 || make_node(a, n == 2 ? APX_OP_Add : APX_OP_Sum, nn, NULL, n, terms, 1, &sum,
                               APX_SEC_OPTIMIZER, -1) < 0)
        goto done;
    }
    g->vals[p].grad = sum;
    g->vals[sum].flags |= APX_VALF_GRAD;
    g->vals[sum].origin = p;
  }
  rc = 0;
done:
  free(grads);
  free(unscaled);
  free(terms);
  return rc;
}

/* BatchNormalization(training_mode=1): AssignState(out1, in3), AssignState(out2, in4). */
static int bind_batchnorm_state(AD *a, const int *order, int n_order) {
  ApxGraph *g = a->g;
  for (int k = 0; k < n_order; k++) {
    int id = order[k];
    if (g->nodes[id].op != APX_OP_BatchNormalization ||
        !APX_NODE_ATTRS(g, id, ApxAttrBatchNorm)->training_mode)
      continue;
    for (int s = 1; s <= 2; s++) {
      int in[2] = {g->nodes[id].out[s], g->nodes[id].in[s + 2]};
      const char *nn = apx_arena_printf(&g->arena, "%s/assign_running_%s", g->nodes[id].name,
                                        s == 1 ? "mean" : "var");
      if (make_node(a, APX_OP_AssignState, nn, NULL, 2, in, 0, NULL, APX_SEC_OPTIMIZER, id) < 0)
        return -1;
    }
  }
  return 0;
}

/* ---- the pass ----------------------------------------------------------------------- */

int pass_autodiff(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  if (!o->training) return APX_PASS_UNCHANGED;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == APX_OP_LossScaleSeed && !(g->nodes[i].flags & APX_NODEF_DEAD))
      return APX_PASS_UNCHANGED;
  int losses[APX_MAX_LOSSES] = {g->loss}, n_losses = 1;
  if (o->loss_name && strchr(o->loss_name, ',')) {
    char why[600];
    if ((n_losses = apx_loss_list_resolve(g, o->loss_name, losses, APX_MAX_LOSSES, why, sizeof why)) < 0)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s", g->file, why), APX_PASS_ERROR;
  }
  for (int i = 0; i < n_losses; i++)
    if (check_loss(g, losses[i], d)) return APX_PASS_ERROR;
  if (n_losses > 1 && o->accumulate > 1)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet: several losses (--loss %s) "
                          "with --accumulate %d", g->file, o->loss_name, (int)o->accumulate), APX_PASS_ERROR;

  AD a = {.g = g, .o = o, .d = d};
  int *order = NULL;
  int rc = APX_PASS_ERROR;
  if (classify_state(&a)) return APX_PASS_ERROR;
  a.nv0 = g->n_vals;
  a.n0 = g->n_nodes;
  a.reach = malloc(((size_t)a.nv0 + 1) * sizeof(int));
  a.head = malloc(((size_t)a.nv0 + 1) * sizeof(int));
  a.tail = malloc(((size_t)a.nv0 + 1) * sizeof(int));
  a.count = calloc((size_t)a.nv0 + 1, sizeof(int));
  order = malloc(((size_t)g->n_order + 1) * sizeof(int));
  if (!a.reach || !a.head || !a.tail || !a.count || !order) {
    oom(&a);
    goto out;
  }
  int n_order = g->n_order;
  memcpy(order, g->order, (size_t)n_order * sizeof(int));
  for (int v = 0; v < a.nv0; v++) a.head[v] = -1;
  compute_reach(&a);

  if (n_losses > 1) {
    if (several_losses(&a, order, n_order, losses, n_losses)) goto out;
  } else {
    if (seed(&a, g->loss, 1)) goto out;
    for (int k = n_order - 1; k >= 0; k--)
      if (backprop_node(&a, order[k])) goto out;
    if (finish_params(&a)) goto out;
  }
  if (o->accumulate > 1 && make_accumulators(&a)) goto out;
  if (bind_batchnorm_state(&a, order, n_order)) goto out;
  /* only nodes appended, old ones untouched: the order extends when the new ones allow */
  rc = apx_graph_order_append(g, a.n0, d);
out:
  free(a.reach);
  free(a.head);
  free(a.tail);
  free(a.count);
  free(a.pool);
  free(order);
  return rc;
}
