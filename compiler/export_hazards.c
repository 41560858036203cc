/* export_hazards.c - warnings about what exporters do to a model (contract in
 * export_hazards.h; DESIGN.md 2). Three independent scans of the loaded graph, each printing
 * at most APX_HAZARD_MAX_LINES lines and then a count: constant-like parameters (by the role
 * their consumer gives them, then by fp16 range), parameters shared across layers, and
 * BatchNormalization nodes that are not in training mode. */
#include "compiler/export_hazards.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "passes/precision_rules.h"

/* Element i of a float value, as double. */
static double float_at(const ApxValue *v, int64_t i) {
  switch (v->dtype) {
    case APX_DT_F32: return ((const float *)v->data)[i];
    case APX_DT_F64: return ((const double *)v->data)[i];
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)v->data)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)v->data)[i]);
    default: return 0;
  }
}

static int is_float_param(const ApxValue *val) {
  return val->kind == APX_VAL_PARAM && val->data && apx_dtype_is_float(val->dtype);
}

/* ---- constant-like parameters -------------------------------------------------------- */

typedef enum Role {
  ROLE_NONE = 0,
  ROLE_EXPONENT, /* Pow input 1 */
  ROLE_SCALE,    /* scalar in Mul, or scalar divisor (not epsilon-like) */
  ROLE_EPSILON,  /* scalar added (0 < |x| <= 1e-5) or divided by (0 < |x| <= 1e-3) */
  ROLE_MASK,     /* added (Add/Sub) or selected (Where X/Y) and holding a value <= -1e4 */
} Role;

#define MASK_LIMIT (-1e4)

typedef struct RoleOf {
  Role role;
  int node;  /* first node giving it the role */
  int count; /* nodes giving it that role */
  double x;  /* scalar value, or the mask's most negative value */
} RoleOf;

/* 1 if the other operand of Add node n (the scalar is input j) is produced by MatMul, Gemm
 * or Conv: the scalar is then a bias (a Linear(d, 1) head exported as MatMul + Add), not an
 * epsilon. */
static int adds_to_linear_output(const ApxGraph *g, const ApxNode *n, int j) {
  if (n->n_in != 2) return 0;
  int other = n->in[1 - j];
  if (other < 0 || g->vals[other].producer < 0) return 0;
  ApxOp op = g->nodes[g->vals[other].producer].op;
  return op == APX_OP_MatMul || op == APX_OP_Gemm || op == APX_OP_Conv;
}

static double min_of(const ApxValue *val) {
  int64_t numel = apx_value_numel(val);
  double m = 0;
  for (int64_t i = 0; i < numel; i++) {
    double x = float_at(val, i);
    if (i == 0 || x < m) m = x;
  }
  return m;
}

/* The role node n gives its input j (a float parameter); *x its value when scalar. */
static Role role_at(const ApxGraph *g, const ApxNode *n, int j, double *x, double *mask_min) {
  const ApxValue *val = &g->vals[n->in[j]];
  int scalar = apx_value_numel(val) == 1;
  *x = scalar ? float_at(val, 0) : 0;
  double ax = *x < 0 ? -*x : *x;
  if (n->op == APX_OP_Pow && j == 1) return ROLE_EXPONENT;
  if (scalar && n->op == APX_OP_Div && j == 1) return ax > 0 && ax <= 1e-3 ? ROLE_EPSILON : ROLE_SCALE;
  if (scalar && n->op == APX_OP_Mul) return ROLE_SCALE;
  if (scalar && n->op == APX_OP_Add && ax > 0 && ax <= 1e-5 && !adds_to_linear_output(g, n, j))
    return ROLE_EPSILON;
  if (n->op == APX_OP_Add || n->op == APX_OP_Sub || (n->op == APX_OP_Where && j >= 1)) {
    if (*mask_min != *mask_min) *mask_min = min_of(val); /* NaN: not computed yet */
    if (*mask_min <= MASK_LIMIT) {
      *x = *mask_min;
      return ROLE_MASK;
    }
  }
  return ROLE_NONE;
}

static void describe(const ApxGraph *g, const RoleOf *r, int scalar, char *why, size_t cap) {
  const ApxNode *n = &g->nodes[r->node];
  char more[48] = "";
  if (r->count > 1) snprintf(more, sizeof more, " and %d more node%s", r->count - 1,
                             r->count > 2 ? "s" : "");
  switch (r->role) {
    case ROLE_EXPONENT:
      if (scalar)
        snprintf(why, cap, "a scalar exponent (%g) of node '%s' (Pow)%s", r->x, n->name, more);
      else
        snprintf(why, cap, "the exponent of node '%s' (Pow)%s", n->name, more);
      break;
    case ROLE_SCALE:
      snprintf(why, cap, "a scalar scale (%g) of node '%s' (%s)%s", r->x, n->name,
               apx_op_name(n->op), more);
      break;
    case ROLE_EPSILON:
      snprintf(why, cap, "an epsilon-like scalar (%g) in node '%s' (%s)%s", r->x, n->name,
               apx_op_name(n->op), more);
      break;
    case ROLE_MASK:
      snprintf(why, cap, "an additive mask (it holds %g) in node '%s' (%s)%s", r->x, n->name,
               apx_op_name(n->op), more);
      break;
    default: why[0] = '\0';
  }
}

typedef struct Lines {
  int shown, more;
} Lines;

static void const_like(const ApxGraph *g, ApxDiag *d, Lines *c, int v, const char *why) {
  const ApxValue *val = &g->vals[v];
  if (c->shown++ < APX_HAZARD_MAX_LINES)
    apx_diag_warn(d, "%s: initializer '%s' looks like a constant, not a weight: %s; it will "
                  "be trained (add --frozen %s if it is a constant)", g->file, val->name, why,
                  val->name);
  else
    c->more++;
}

/* Trained float initializers that look like constants, one line each: first by the role
 * their first consumer gives them (exponent, scalar scale, epsilon, additive mask; the node
 * and how many more nodes use it so), then values outside fp16 range when the opt level casts
 * the model to fp16 (-O2/-O3). */
static void warn_constant_like(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  RoleOf *r = calloc((size_t)g->n_vals + 1, sizeof *r);
  double *mask_min = malloc(((size_t)g->n_vals + 1) * sizeof *mask_min);
  int *first = malloc(((size_t)g->n_vals + 1) * sizeof *first); /* values in report order */
  if (!r || !mask_min || !first) goto done;
  for (int v = 0; v < g->n_vals; v++) mask_min[v] = NAN;
  int n_first = 0;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    for (int j = 0; j < n->n_in; j++) {
      int v = n->in[j];
      if (v < 0 || !is_float_param(&g->vals[v])) continue;
      int dup = 0;
      for (int i = 0; i < j; i++) dup |= n->in[i] == v;
      if (dup) continue;
      double x;
      Role role = role_at(g, n, j, &x, &mask_min[v]);
      if (role == ROLE_NONE) continue;
      if (r[v].role == ROLE_NONE) {
        r[v] = (RoleOf){role, id, 1, x};
        first[n_first++] = v;
      } else if (r[v].role == role) {
        r[v].count++;
      }
    }
  }
  Lines c = {0, 0};
  char why[600];
  for (int i = 0; i < n_first; i++) {
    int v = first[i];
    describe(g, &r[v], apx_value_numel(&g->vals[v]) == 1, why, sizeof why);
    if (r[v].role == ROLE_EXPONENT)
      strncat(why, " (its gradient is NaN wherever the base is negative)",
              sizeof why - strlen(why) - 1);
    const_like(g, d, &c, v, why);
  }
  if (o->opt_level >= APX_O2 && o->half == APX_DT_F16) { /* the model is cast */
    for (int v = 0; v < g->n_vals; v++) {
      if (r[v].role != ROLE_NONE || !is_float_param(&g->vals[v])) continue;
      int64_t numel = apx_value_numel(&g->vals[v]);
      /* fp32 (nearly every weight): one vector pass says whether any element is out of
       * range (remembered in g: pass_overflow_check asks the same of every weight); the loop
       * below then finds the first one */
      if (g->vals[v].dtype == APX_DT_F32) {
        ApxConstRange cr;
        apx_const_range_check_memo(g, v, APX_DT_F16, &cr);
        if (cr.issue != APX_RANGE_OVERFLOW && cr.issue != APX_RANGE_INF) continue;
      }
      for (int64_t i = 0; i < numel; i++) {
        double x = float_at(&g->vals[v], i);
        if (x == x && !(x >= -65504.0 && x <= 65504.0)) {
          snprintf(why, sizeof why, "it holds %g, outside fp16 range, and -O%d casts the model "
                   "to fp16", x, (int)o->opt_level);
          const_like(g, d, &c, v, why);
          break;
        }
      }
    }
  }
  if (c.more)
    apx_diag_warn(d, "%s: and %d more initializers that look like constants (--frozen A,B "
                  "keeps them constant)", g->file, c.more);
done:
  free(r);
  free(mask_min);
  free(first);
}

/* ---- shared parameters ----------------------------------------------------------------- */

/* Input j of n reads only the shape or type of its tensor, or is BatchNorm running
 * statistics (state, not trained). */
static int not_trained_slot(const ApxNode *n, int j) {
  if (n->op == APX_OP_BatchNormalization && j >= 3) return 1;
  const char *t = n->op_type ? n->op_type : apx_op_name(n->op);
  if (strcmp(t, "Shape") == 0 || strcmp(t, "Size") == 0) return 1;
  if (strcmp(t, "CastLike") == 0) return j == 1;
  size_t len = strlen(t); /* RandomUniformLike, RandomNormalLike, EyeLike */
  return j == 0 && len > 4 && strcmp(t + len - 4, "Like") == 0;
}

/* 1 when nodes a and b belong to different layers: their names differ before the last '/'
 * (exporters name nodes by module scope, "/model/h.0/ln_1/LayerNormalization"); names
 * without a scope are each their own layer. */
static int other_layer(const ApxNode *a, const ApxNode *b) {
  const char *sa = strrchr(a->name, '/'), *sb = strrchr(b->name, '/');
  if (!sa || !sb) return strcmp(a->name, b->name) != 0;
  size_t la = (size_t)(sa - a->name), lb = (size_t)(sb - b->name);
  return la != lb || strncmp(a->name, b->name, la) != 0;
}

static void warn_shared(const ApxGraph *g, ApxDiag *d) {
  int *first = malloc(((size_t)g->n_vals + 1) * sizeof *first);
  int *other = malloc(((size_t)g->n_vals + 1) * sizeof *other);
  int *count = calloc((size_t)g->n_vals + 1, sizeof *count);
  int *shared = malloc(((size_t)g->n_vals + 1) * sizeof *shared); /* in report order */
  int n_shared = 0;
  if (!first || !other || !count || !shared) goto done;
  for (int v = 0; v < g->n_vals; v++) first[v] = other[v] = -1;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    for (int j = 0; j < n->n_in; j++) {
      int v = n->in[j];
      if (v < 0 || !is_float_param(&g->vals[v]) || not_trained_slot(n, j)) continue;
      int dup = 0;
      for (int i = 0; i < j; i++) dup |= n->in[i] == v;
      if (dup) continue;
      count[v]++;
      if (first[v] < 0) first[v] = id;
      else if (other[v] < 0 && other_layer(&g->nodes[first[v]], n)) {
        other[v] = id;
        shared[n_shared++] = v;
      }
    }
  }
  Lines c = {0, 0};
  for (int i = 0; i < n_shared; i++) { /* in the order of each one's second layer */
    int v = shared[i];
    if (c.shown++ >= APX_HAZARD_MAX_LINES) {
      c.more++;
      continue;
    }
    const ApxNode *a = &g->nodes[first[v]], *b = &g->nodes[other[v]];
    char all[48] = "";
    if (count[v] > 2) snprintf(all, sizeof all, "; %d nodes in all", count[v]);
    apx_diag_warn(d, "%s: initializer '%s' is used by unrelated layers (node '%s' (%s) and "
                  "node '%s' (%s)%s): it is trained as one tensor, tied. Right when the model "
                  "ties them (an embedding and its output projection); wrong when an exporter "
                  "merged equal initializers (torch.onnx.export(dynamo=True)'s optimizer does): "
                  "export with scripts/apexc_torch.py, which keeps parameters 1:1",
                  g->file, g->vals[v].name, a->name, apx_op_name(a->op), b->name,
                  apx_op_name(b->op), all);
  }
  if (c.more)
    apx_diag_warn(d, "%s: and %d more initializers used by unrelated layers", g->file, c.more);
done:
  free(first);
  free(other);
  free(count);
  free(shared);
}

/* ---- BatchNormalization not in training mode ----------------------------------------- */

static int bn_training(const ApxGraph *g, int id) {
  const ApxNode *n = &g->nodes[id];
  if (g->opset > 0 && g->opset < 14) { /* before opset 14 the optional outputs marked it */
    for (int o = 1; o < n->n_out; o++)
      if (n->out[o] >= 0) return 1;
    return 0;
  }
  const ApxAttr *a = apx_node_attr(g, id, "training_mode");
  return a && a->type == APX_ATTR_INT && a->i == 1;
}

static void warn_batchnorm(const ApxGraph *g, ApxDiag *d) {
  int count = 0;
  char names[400] = "";
  size_t len = 0;
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    if (g->nodes[id].op != APX_OP_BatchNormalization || bn_training(g, id)) continue;
    if (count < 3 && len < sizeof names)
      len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", count ? ", " : "",
                              g->nodes[id].name);
    else if (count == 3 && len < sizeof names)
      len += (size_t)snprintf(names + len, sizeof names - len, ", ...");
    count++;
  }
  if (!count) return;
  apx_diag_warn(d, "%s: %d BatchNormalization node%s without training_mode=1 (%s): this training "
                "compile normalizes %s with the running statistics (inference mode) and never "
                "updates them, where PyTorch's train() uses batch statistics; export in training "
                "mode (the README recipe, or scripts/apexc_torch.py, which also fixes the dynamo "
                "exporter's BatchNorm), or ignore this if they are frozen on purpose",
                g->file, count, count == 1 ? "" : "s", names, count == 1 ? "it" : "them");
}

void apx_warn_export_hazards(ApxGraph *g, const ApxOptions *o, ApxTrainableSource src,
                             ApxDiag *d) {
  warn_constant_like(g, o, d);
  if (src == APX_TRAINABLE_ALL_FLOATS) {
    warn_shared(g, d);
    warn_batchnorm(g, d);
  }
}
