/* precision_rules.c - reason names, settings, input/output roles, half ranges and the
 * constant range check + clamp shared by the precision passes, --explain and --policy. */
#include "passes/precision_rules.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
#include "kernels/float_scan.h"

/* ---- reasons ------------------------------------------------------------------------ */

static const struct {
  const char *id, *what;
} reasons[APX_REASON_COUNT] = {
    [APX_REASON_UNDECIDED] = {"undecided", "no decision yet"},
    [APX_REASON_NODE_OVERRIDE] = {"node-override", "--fp32-nodes pattern matches the node name"},
    [APX_REASON_POLICY_NODE] = {"policy-node", "--policy file entry for this node"},
    [APX_REASON_OP_OVERRIDE] = {"op-override", "--half-ops / --fp32-ops / --promote-ops names the op"},
    [APX_REASON_POLICY_OP] = {"policy-op", "--policy file entry for this op"},
    [APX_REASON_OVERFLOW_CONST] = {"overflow-constant",
                                   "a constant input is outside the half type's range"},
    [APX_REASON_OVERFLOW_PATTERN] = {"overflow-pattern",
                                     "interval analysis found a pattern that can overflow in half"},
    [APX_REASON_BN_FP32] = {"batchnorm-fp32", "keep_batchnorm_fp32: BatchNormalization in fp32"},
    [APX_REASON_LIST_HALF] = {"list-half", "O1 allow list: runs in the half type"},
    [APX_REASON_LIST_FP32] = {"list-fp32", "O1 deny list: runs in fp32"},
    [APX_REASON_LIST_PROMOTE] = {"list-promote", "O1 promote list: widest float input type"},
    [APX_REASON_DEFAULT_FP32] = {"default-fp32", "O0: everything in fp32"},
    [APX_REASON_DEFAULT_INPUTS] = {"default-inputs", "O1, on no list: the type of its inputs"},
    [APX_REASON_DEFAULT_HALF] = {"default-half", "O2/O3: float ops in the half type"},
    [APX_REASON_INTEGER] = {"integer", "integer/bool data keeps its type"},
    [APX_REASON_CAST] = {"cast", "a Cast from the model runs in its target type"},
    [APX_REASON_INHERITED] = {"inherited", "backward node: its forward node's decision"},
    [APX_REASON_BACKWARD_WIDEST] = {"backward-widest",
                                    "backward node without forward origin: widest input type"},
    [APX_REASON_LOSS] = {"loss", "loss ops stay fp32"},
    [APX_REASON_OPTIMIZER] = {"optimizer", "optimizer and loss-scaling math stays fp32"},
    [APX_REASON_CAST_INSERTED] = {"cast-inserted", "Cast added to match a consumer's precision"},
};

const char *apx_reason_id(int r) {
  return (r >= 0 && r < APX_REASON_COUNT) ? reasons[r].id : "?";
}

const char *apx_reason_what(int r) {
  return (r >= 0 && r < APX_REASON_COUNT) ? reasons[r].what : "?";
}

int apx_reason_from_id(const char *id) {
  for (int r = 0; id && r < APX_REASON_COUNT; r++)
    if (strcmp(reasons[r].id, id) == 0) return r;
  return APX_REASON_UNDECIDED;
}

/* ---- settings ----------------------------------------------------------------------- */

ApxPrecSettings apx_prec_settings(const ApxOptions *o) {
  ApxPrecSettings s;
  s.level = o->opt_level;
  s.half = o->half == APX_DT_BF16 ? APX_DT_BF16 : APX_DT_F16;
  s.lists = o->patch_lists == APX_TRI_UNSET ? o->opt_level == APX_O1 : o->patch_lists == APX_TRI_ON;
  s.keep_bn_fp32 = o->keep_batchnorm_fp32 == APX_TRI_UNSET ? o->opt_level == APX_O2
                                                           : o->keep_batchnorm_fp32 == APX_TRI_ON;
  s.master_weights = o->master_weights == APX_TRI_UNSET ? o->opt_level == APX_O2
                                                        : o->master_weights == APX_TRI_ON;
  if (o->cast_model_type != APX_DT_UNDEFINED)
    s.model_half = apx_dtype_is_half(o->cast_model_type);
  else
    s.model_half = o->opt_level >= APX_O2;
  return s;
}

/* ---- roles -------------------------------------------------------------------------- */

static int is_bn(ApxOp op) {
  return op == APX_OP_BatchNormalization || op == APX_OP_BatchNormRelu;
}

int apx_prec_is_fixed_node(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  if (n->op == APX_OP_Cast) return 0;
  return n->section == APX_SEC_OPTIMIZER || apx_op_info(n->op)->prec == APX_PREC_FIXED;
}

ApxInputRole apx_prec_input_role(const ApxGraph *g, int node, int slot) {
  const ApxNode *n = &g->nodes[node];
  const ApxOpInfo *info = apx_op_info(n->op);
  if (slot < 32 && (info->static_inputs >> slot) & 1u) return APX_IN_STATIC;
  if (n->op == APX_OP_Cast || apx_prec_is_fixed_node(g, node)) return APX_IN_KEEP;
  /* cuDNN semantics: scale, bias, mean and var are fp32 whatever x's type is */
  if (is_bn(n->op) && slot >= 1) return APX_IN_KEEP;
  if (n->op == APX_OP_BatchNormGrad && slot >= 2) return APX_IN_KEEP;  /* scale, saved stats */
  if (n->op == APX_OP_LayerNormGrad && slot >= 3) return APX_IN_KEEP;  /* Mean, InvStdDev */
  return APX_IN_DATA;
}

int apx_prec_output_follows(const ApxGraph *g, int node, int slot) {
  const ApxNode *n = &g->nodes[node];
  if (n->op == APX_OP_Cast || apx_prec_is_fixed_node(g, node)) return 0;
  if (is_bn(n->op) || n->op == APX_OP_LayerNormalization) return slot == 0;
  if (n->op == APX_OP_BatchNormGrad) return slot == 0;  /* dscale, dB match fp32 scale, B */
  return 1;
}

int apx_prec_is_float_node(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  for (int o = 0; o < n->n_out; o++)
    if (n->out[o] >= 0 && apx_dtype_is_float(g->vals[n->out[o]].dtype)) return 1;
  return 0;
}

int apx_prec_is_loss_node(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  if (n->op == APX_OP_SoftmaxCrossEntropyLoss || n->op == APX_OP_NegativeLogLikelihoodLoss ||
      n->op == APX_OP_FusedXentropy)
    return 1;
  for (int o = 0; o < n->n_out; o++) {
    int v = n->out[o];
    if (v >= 0 && ((g->vals[v].flags & APX_VALF_LOSS) || v == g->loss)) return 1;
  }
  return 0;
}

int apx_prec_is_inserted_cast(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  return n->op == APX_OP_Cast && n->reason == APX_REASON_CAST_INSERTED;
}

ApxDType apx_dtype_widest(ApxDType a, ApxDType b) {
  if (a == APX_DT_UNDEFINED) return b;
  if (b == APX_DT_UNDEFINED || a == b) return a;
  if (a == APX_DT_F64 || b == APX_DT_F64) return APX_DT_F64;
  if (a == APX_DT_F32 || b == APX_DT_F32) return APX_DT_F32;
  if (apx_dtype_is_half(a) && apx_dtype_is_half(b)) return APX_DT_F32; /* fp16 with bf16 */
  return apx_dtype_is_float(a) ? a : b;
}

/* ---- ranges ------------------------------------------------------------------------- */

double apx_half_max(ApxDType t) {
  if (t == APX_DT_F16) return APX_F16_MAX;
  if (t == APX_DT_BF16) return APX_BF16_MAX;
  return 3.4028234663852886e+38;
}

double apx_half_min_normal(ApxDType t) {
  if (t == APX_DT_F16) return APX_F16_MIN_NORMAL;
  if (t == APX_DT_BF16) return APX_BF16_MIN_NORMAL;
  return 1.1754943508222875e-38;
}

static double load_elem(const void *data, ApxDType t, int64_t i) {
  switch (t) {
    case APX_DT_F32: return ((const float *)data)[i];
    case APX_DT_F64: return ((const double *)data)[i];
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)data)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return 0.0;
  }
}

/* fp32 data: 1 when the check below finds nothing (no finite-or-inf magnitude above mx, and
 * the largest nonzero magnitude is 0 or at least mn: tiny values are an issue only when every
 * nonzero value is tiny), from the bit patterns in one vector pass (kernels/float_scan.h; a
 * 163M-parameter model's weights are checked several times per compile). mx, mn: fp32 values
 * of the half type's max and min normal. */
static int f32_in_range(const float *x, int64_t n, float mx, float mn) {
  uint32_t mnb;
  memcpy(&mnb, &mn, 4);
  ApxF32Scan s = apx_f32_scan(x, n, mx);
  return !s.over && (s.max_abs_bits == 0 || s.max_abs_bits >= mnb);
}

void apx_const_range_check(const ApxValue *v, ApxDType t, ApxConstRange *r) {
  memset(r, 0, sizeof *r);
  if (!v->data || !apx_dtype_is_float(v->dtype) || v->dtype == t || !apx_dtype_is_half(t)) return;
  int64_t n = apx_value_numel(v);
  if (n <= 0) return;
  const double mx = apx_half_max(t), mn = apx_half_min_normal(t);
  /* the common case in one fast pass; anything else takes the exact loop */
  if (v->dtype == APX_DT_F32 && f32_in_range(v->data, n, (float)mx, (float)mn)) return;
  double big = 0.0, big_signed = 0.0; /* largest nonzero magnitude */
  int64_t n_tiny = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = load_elem(v->data, v->dtype, i);
    if (x != x) continue; /* NaN */
    double a = fabs(x);
    if (isinf(x) || a > mx) {
      if (r->n_bad == 0) {
        r->issue = isinf(x) ? APX_RANGE_INF : APX_RANGE_OVERFLOW;
        r->value = x;
      }
      r->n_bad++;
      continue;
    }
    if (a > big) {
      big = a;
      big_signed = x;
    }
    if (a != 0.0 && a < mn) n_tiny++;
  }
  if (r->n_bad == 0 && big > 0.0 && big < mn) {
    r->issue = APX_RANGE_UNDERFLOW;
    r->value = big_signed;
    r->n_bad = n_tiny;
  }
}

void apx_const_range_check_memo(ApxGraph *g, int v, ApxDType t, ApxConstRange *r) {
  const ApxValue *val = &g->vals[v];
  if (g->range_ok_type != (int32_t)t) { /* another half type: forget */
    if (g->range_ok) memset(g->range_ok, 0, (size_t)g->range_ok_cap * sizeof *g->range_ok);
    g->range_ok_type = (int32_t)t;
  }
  if (val->data && v < g->range_ok_cap && g->range_ok[v] == val->data) {
    memset(r, 0, sizeof *r);
    return;
  }
  apx_const_range_check(val, t, r);
  if (r->issue != APX_RANGE_OK || !val->data) return;
  if (v >= g->range_ok_cap) { /* remembering is optional: out of memory only forgets */
    int32_t nc = g->n_vals > v ? g->n_vals : v + 1;
    const void **p = realloc(g->range_ok, (size_t)nc * sizeof *p);
    if (!p) return;
    memset(p + g->range_ok_cap, 0, (size_t)(nc - g->range_ok_cap) * sizeof *p);
    g->range_ok = p;
    g->range_ok_cap = nc;
  }
  g->range_ok[v] = val->data;
}

const char *apx_const_range_text(ApxArena *a, const ApxConstRange *r, ApxDType t) {
  const char *tn = apx_dtype_short(t);
  switch (r->issue) {
    case APX_RANGE_OVERFLOW:
      return apx_arena_printf(a, "value %g outside %s range (max %g)", r->value, tn, apx_half_max(t));
    case APX_RANGE_INF:
      return apx_arena_printf(a, "value %s outside %s finite range (max %g)",
                              r->value < 0 ? "-inf" : "inf", tn, apx_half_max(t));
    case APX_RANGE_UNDERFLOW:
      return apx_arena_printf(a, "value %g below %s smallest normal %g", r->value, tn,
                              apx_half_min_normal(t));
    case APX_RANGE_OK: break;
  }
  return "in range";
}

int apx_const_clamped_copy(ApxGraph *g, int v, ApxDType t, ApxDiag *d) {
  ApxValue *src = &g->vals[v];
  ApxDType dt = src->dtype;
  if (dt != APX_DT_F32 && dt != APX_DT_F64)
    return apx_value_error(d, g, v, "internal error: cannot clamp a %s constant", apx_dtype_short(dt));
  const char *hint = apx_arena_printf(&g->arena, "%s_clamped_%s", src->name, apx_dtype_short(t));
  int64_t dims[APX_MAX_RANK];
  int32_t rank = src->rank;
  memcpy(dims, src->dims, sizeof dims);
  int nv = apx_graph_add_value(g, d, apx_graph_unique_name(g, hint), APX_VAL_CONST, dt, rank, dims);
  if (nv < 0) return -1;
  src = &g->vals[v]; /* the array may have moved */
  int64_t n = apx_value_numel(src);
  size_t es = apx_dtype_size(dt);
  void *data = apx_arena_alloc_raw(&g->arena, (size_t)(n > 0 ? n : 1) * es);
  if (!data) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory clamping a constant", g->file);
  const double mx = apx_half_max(t), mn = apx_half_min_normal(t);
  for (int64_t i = 0; i < n; i++) {
    double x = load_elem(src->data, dt, i);
    double a = fabs(x);
    if (x == x && a > mx) x = x < 0 ? -mx : mx;
    else if (x == x && a != 0.0 && a < mn) x = x < 0 ? -mn : mn;
    if (dt == APX_DT_F32) ((float *)data)[i] = (float)x;
    else ((double *)data)[i] = x;
  }
  ApxValue *out = &g->vals[nv];
  out->data = data;
  out->origin = v;
  out->dim_params = src->dim_params;
  return nv;
}

int apx_convert_floats(const void *src, ApxDType from, void *dst, ApxDType to, int64_t n) {
  const ApxDType ok[4] = {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16};
  int f = 0, t = 0;
  for (int i = 0; i < 4; i++) {
    f |= from == ok[i];
    t |= to == ok[i];
  }
  if (!f || !t) return -1;
  /* fp32 <-> fp16/bf16: the CPU kernels' converters (F16C where the CPU has it), the same
   * bits as the loop below (half.h rounding, every NaN to one quiet pattern per sign) */
  if (from == APX_DT_F32 && to == APX_DT_F16) return apx_cpu_f32_to_f16(src, dst, n), 0;
  if (from == APX_DT_F32 && to == APX_DT_BF16) return apx_cpu_f32_to_bf16(src, dst, n), 0;
  if (from == APX_DT_F16 && to == APX_DT_F32) return apx_cpu_f16_to_f32(src, dst, n), 0;
  if (from == APX_DT_BF16 && to == APX_DT_F32) return apx_cpu_bf16_to_f32(src, dst, n), 0;
  for (int64_t i = 0; i < n; i++) {
    double x = load_elem(src, from, i);
    switch (to) {
      case APX_DT_F32: ((float *)dst)[i] = (float)x; break;
      case APX_DT_F64: ((double *)dst)[i] = x; break;
      case APX_DT_F16: ((uint16_t *)dst)[i] = apx_f32_to_f16((float)x); break;
      case APX_DT_BF16: ((uint16_t *)dst)[i] = apx_f32_to_bf16((float)x); break;
      default: return -1;
    }
  }
  return 0;
}

int apx_glob_match(const char *pattern, const char *name) {
  return pattern && name && fnmatch(pattern, name, 0) == 0;
}

int apx_value_add_like(ApxGraph *g, int v, ApxValueKind kind, ApxDType to, ApxDiag *d) {
  const ApxValue *src = &g->vals[v];
  const char *hint = apx_arena_printf(&g->arena, "%s_%s", src->name, apx_dtype_short(to));
  const char *name = hint ? apx_graph_unique_name(g, hint) : NULL;
  if (!name) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  int64_t dims[APX_MAX_RANK];
  memcpy(dims, src->dims, sizeof dims);
  int nv = apx_graph_add_value(g, d, name, kind, to, g->vals[v].rank, dims);
  if (nv < 0) return -1;
  g->vals[nv].dim_params = g->vals[v].dim_params;
  return nv;
}

int apx_const_converted_copy(ApxGraph *g, int v, ApxDType to, ApxDiag *d) {
  if (!g->vals[v].data)
    return apx_value_error(d, g, v, "internal error: converting a constant without data");
  int nv = apx_value_add_like(g, v, APX_VAL_CONST, to, d);
  if (nv < 0) return -1;
  const ApxValue *src = &g->vals[v];
  int64_t n = apx_value_numel(src);
  if (n < 0) n = 0;
  void *data = apx_arena_alloc_raw(&g->arena, (size_t)(n ? n : 1) * apx_dtype_size(to));
  if (!data) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory converting a constant", g->file);
  if (apx_convert_floats(src->data, src->dtype, data, to, n))
    return apx_value_error(d, g, v, "internal error: cannot convert %s data to %s",
                           apx_dtype_short(src->dtype), apx_dtype_short(to));
  g->vals[nv].data = data;
  g->vals[nv].origin = v;
  return nv;
}

int apx_cast_node_add(ApxGraph *g, int v, ApxDType to, int out, ApxDiag *d) {
  int nv = out >= 0 ? out : apx_value_add_like(g, v, APX_VAL_ACTIVATION, to, d);
  if (nv < 0) return -1;
  g->vals[nv].dtype = to;
  if (out < 0) g->vals[nv].origin = v;
  const char *name = apx_arena_printf(&g->arena, "Cast_%s", g->vals[nv].name);
  int ins[1] = {v}, outs[1] = {nv};
  int id = apx_graph_add_node(g, d, APX_OP_Cast, name, 1, ins, 1, outs);
  if (id < 0) return -1;
  ApxNode *n = &g->nodes[id];
  ApxAttrCast *a = (ApxAttrCast *)n->typed;
  a->to = (int32_t)to;
  a->saturate = 1;
  ApxAttr *attr = apx_arena_alloc(&g->arena, sizeof *attr);
  if (!attr) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", g->file);
  attr->name = "to";
  attr->type = APX_ATTR_INT;
  attr->i = (int64_t)to;
  n->attrs = attr;
  n->n_attrs = 1;
  n->compute = to;
  n->reason = APX_REASON_CAST_INSERTED;
  n->reason_detail = apx_arena_printf(&g->arena, "cast: %s -> %s", apx_dtype_short(g->vals[v].dtype),
                                      apx_dtype_short(to));
  return id;
}
