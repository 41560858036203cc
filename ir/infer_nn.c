/* infer_nn.c - neural-network ops and their gradients: Gemm/MatMul (and fused dense),
 * softmax family, LayerNorm, BatchNorm, Dropout, 1-D and 2-D Conv, ConvTranspose and pooling
 * (auto_pad resolved into explicit pads), the two losses and the fused cross-entropy. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/infer_util.h"

static int same_dims(const IShape *a, const IShape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static int check_input_shape(const ApxGraph *g, int node, int slot, const IShape *s, ApxDiag *d) {
  return infer_check_shape(g, node, slot, s->rank, s->dims, d);
}

/* ---- Gemm, MatMul, FusedMatMul, FusedDense ------------------------------------------ */

#define MATMUL_TYPES (INFER_DT_FLOAT | INFER_DT_INDEX | INFER_DT_UINT)

static int infer_gemm(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrGemm *a = APX_NODE_ATTRS(g, node, ApxAttrGemm);
  if (infer_check_dtype(g, node, 0, MATMUL_TYPES, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  if (infer_check_rank(g, node, 0, 2, 2, d) || infer_check_rank(g, node, 1, 2, 2, d)) return -1;
  const ApxValue *A = infer_in(g, node, 0), *B = infer_in(g, node, 1);
  int64_t m = a->trans_a ? A->dims[1] : A->dims[0], k = a->trans_a ? A->dims[0] : A->dims[1];
  int64_t kb = a->trans_b ? B->dims[1] : B->dims[0], n = a->trans_b ? B->dims[0] : B->dims[1];
  if (k != kb) {
    int64_t want[2] = {a->trans_b ? n : k, a->trans_b ? k : n};
    return infer_err_expected(g, node, 1, 2, want, d);
  }
  IShape out = {2, {m, n}};
  const ApxValue *C = infer_in(g, node, 2);
  if (C) {
    IShape cs = infer_shape_of(C);
    if (!infer_broadcasts_to(&cs, &out)) {
      char a1[128], b1[128];
      apx_value_shape_str(C, a1, sizeof a1);
      infer_dims_str(2, out.dims, b1, sizeof b1);
      return infer_in_error(d, g, node, "input 2: shape %s does not broadcast to the output %s", a1, b1);
    }
  }
  return infer_set_out_shape(g, node, 0, A->dtype, &out, d);
}

/* Batched matmul with numpy broadcasting; ta/tb transpose the last two dims. */
static int matmul_shape(ApxGraph *g, int node, int ta, int tb, IShape *out, ApxDiag *d) {
  const ApxValue *A = infer_in(g, node, 0), *B = infer_in(g, node, 1);
  if (infer_check_rank(g, node, 0, 1, APX_MAX_RANK, d) || infer_check_rank(g, node, 1, 1, APX_MAX_RANK, d))
    return -1;
  IShape a = infer_shape_of(A), b = infer_shape_of(B);
  int a1 = a.rank == 1, b1 = b.rank == 1;
  if (a1) { a.rank = 2; a.dims[1] = a.dims[0]; a.dims[0] = 1; ta = 0; }
  if (b1) { b.rank = 2; b.dims[1] = 1; tb = 0; }
  int64_t m = ta ? a.dims[a.rank - 1] : a.dims[a.rank - 2];
  int64_t k = ta ? a.dims[a.rank - 2] : a.dims[a.rank - 1];
  int64_t kb = tb ? b.dims[b.rank - 1] : b.dims[b.rank - 2];
  int64_t n = tb ? b.dims[b.rank - 2] : b.dims[b.rank - 1];
  if (k != kb) {
    IShape want = infer_shape_of(B);
    if (b1)
      want.dims[0] = k;
    else
      want.dims[want.rank - (tb ? 1 : 2)] = k;
    return infer_err_expected(g, node, 1, want.rank, want.dims, d);
  }
  IShape batch;
  if (apx_broadcast_shape(a.rank - 2, a.dims, b.rank - 2, b.dims, &batch.rank, batch.dims)) {
    char s1[128], s2[128];
    apx_value_shape_str(A, s1, sizeof s1);
    apx_value_shape_str(B, s2, sizeof s2);
    return infer_in_error(d, g, node, "input 1: batch dims of %s do not broadcast with input 0's %s", s2, s1);
  }
  if (batch.rank + 2 > APX_MAX_RANK) return apx_node_error(d, g, node, "output rank too large");
  *out = batch;
  if (!a1) out->dims[out->rank++] = m;
  if (!b1) out->dims[out->rank++] = n;
  return 0;
}

static int infer_matmul(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, MATMUL_TYPES, d) || infer_same_dtype(g, node, 0, 1, d)) return -1;
  IShape s;
  if (matmul_shape(g, node, 0, 0, &s, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &s, d);
}

static int infer_fused_matmul(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrFusedMatMul *a = APX_NODE_ATTRS(g, node, ApxAttrFusedMatMul);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d)) return -1;
  IShape s;
  if (matmul_shape(g, node, a->trans_a, a->trans_b, &s, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &s, d);
}

/* FusedDense(X (..., K), W (K, N) | (N, K) with trans_w, B? [N]) -> Y (..., N), Aux? (Y's
 * dtype and shape: the pre-activation) */
static int dense_shape(ApxGraph *g, int node, int x_slot, int w_slot, IShape *y, int64_t *n_out,
                       ApxDiag *d) {
  const ApxAttrFusedDense *a = APX_NODE_ATTRS(g, node, ApxAttrFusedDense);
  if (infer_check_rank(g, node, x_slot, 1, APX_MAX_RANK, d) || infer_check_rank(g, node, w_slot, 2, 2, d))
    return -1;
  const ApxValue *X = infer_in(g, node, x_slot), *W = infer_in(g, node, w_slot);
  int64_t k = X->dims[X->rank - 1];
  int64_t kw = a->trans_w ? W->dims[1] : W->dims[0], n = a->trans_w ? W->dims[0] : W->dims[1];
  if (k != kw) {
    int64_t want[2] = {a->trans_w ? n : k, a->trans_w ? k : n};
    return infer_err_expected(g, node, w_slot, 2, want, d);
  }
  *y = infer_shape_of(X);
  y->dims[y->rank - 1] = n;
  *n_out = n;
  return 0;
}

static int infer_fused_dense(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  IShape y;
  int64_t n;
  if (dense_shape(g, node, 0, 1, &y, &n, d)) return -1;
  const ApxValue *B = infer_in(g, node, 2);
  if (B) {
    IShape bs = infer_shape_of(B);
    if (!infer_broadcasts_to(&bs, &y)) return infer_err_expected(g, node, 2, 1, &n, d);
  }
  if (infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &y, d)) return -1;
  return infer_set_out_shape(g, node, 1, infer_in(g, node, 0)->dtype, &y, d);
}

/* FusedDenseGrad(dY, X, W, Y?) -> dX?, dW?, dB? */
static int infer_fused_dense_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  IShape y;
  int64_t n;
  if (dense_shape(g, node, 1, 2, &y, &n, d)) return -1;
  if (check_input_shape(g, node, 0, &y, d)) return -1;
  if (infer_in(g, node, 3) && check_input_shape(g, node, 3, &y, d)) return -1;
  if (infer_set_out_like(g, node, 0, 1, d) || infer_set_out_like(g, node, 1, 2, d)) return -1;
  return infer_set_out(g, node, 2, infer_in(g, node, 0)->dtype, 1, &n, d);
}

/* ---- softmax family ----------------------------------------------------------------- */

static int canon_softmax(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  const ApxValue *x = infer_in(g, node, 0);
  int old = g->opset > 0 && g->opset < 13;
  int64_t axis;
  if (infer_attr_int(g, node, "axis", old ? 1 : -1, &axis, d)) return -1;
  if (infer_norm_axis(g, node, "attribute 'axis'", axis, x->rank, 0, &a->axis, d)) return -1;
  if (old) {
    /* Before opset 13 the input was coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])]:
     * the same as the new semantics only when the trailing dims are one axis. */
    int64_t trailing = 1;
    for (int i = (int)a->axis + 1; i < x->rank; i++) trailing *= x->dims[i];
    if (trailing != 1)
      return apx_node_error(d, g, node, "not supported yet: %s with axis %" PRId64 " before "
                            "opset 13 (2-D coercion over dims %" PRId64 "..%d); re-export with "
                            "opset >= 13", g->nodes[node].op_type, axis, a->axis, x->rank - 1);
  }
  return 0;
}

static int infer_softmax(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  const ApxValue *x = infer_in(g, node, 0);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (a->axis < 0 || a->axis >= x->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x->rank);
  return infer_set_out_like(g, node, 0, 0, d);
}

/* Output dtype of kernels that write their float output in any float type (compute in
 * fp32, round once on store): for nodes a pass created (passes/fuse_*.c write the type the
 * graph had before fusion, or fold a narrowing Cast into the producer), a float dtype
 * already set on the output; else dflt. Nodes loaded from a model always follow ONNX. */
static ApxDType preset_float_or(const ApxGraph *g, int node, int slot, ApxDType dflt) {
  const ApxNode *n = &g->nodes[node];
  if (n->onnx_index >= 0 || slot >= n->n_out || n->out[slot] < 0 || !apx_dtype_is_float(dflt)) return dflt;
  ApxDType t = g->vals[n->out[slot]].dtype;
  return apx_dtype_is_float(t) ? t : dflt;
}

/* infer_set_out_like with preset_float_or's dtype rule. */
static int set_out_like_mixed(ApxGraph *g, int node, int slot, int in_slot, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, in_slot);
  if (!x) return infer_in_error(d, g, node, "input %d is required", in_slot);
  IShape s = infer_shape_of(x);
  return infer_set_out_shape(g, node, slot, preset_float_or(g, node, slot, x->dtype), &s, d);
}

/* SoftmaxGrad / LogSoftmaxGrad (dY, Y) -> dX; FusedSoftmaxGrad (dY, Y) -> dX (dX in dY's
 * dtype, or another float dtype already set on it) */
static int infer_softmax_grad(ApxGraph *g, int node, ApxDiag *d) {
  int fused = g->nodes[node].op == APX_OP_FusedSoftmaxGrad;
  if (!fused && infer_softmax(g, node, d)) return -1;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d)) return -1;
  IShape s = infer_shape_of(infer_in(g, node, 0));
  if (check_input_shape(g, node, 1, &s, d)) return -1;
  if (fused) return infer_set_out_shape(g, node, 0, preset_float_or(g, node, 0, infer_in(g, node, 0)->dtype), &s, d);
  return infer_set_out_like(g, node, 0, 0, d);
}

/* FusedSoftmax(X, Mask?) -> softmax(X * scale + Mask) over the last axis; Y in X's dtype,
 * or another float dtype already set on it (the kernel reads and writes both types) */
static int infer_fused_softmax(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_check_rank(g, node, 0, 1, APX_MAX_RANK, d))
    return -1;
  const ApxValue *m = infer_in(g, node, 1);
  if (m) {
    if (infer_check_dtype(g, node, 1, INFER_DT_FLOAT | INFER_DT_BOOL, d)) return -1;
    IShape ms = infer_shape_of(m), xs = infer_shape_of(infer_in(g, node, 0));
    if (!infer_broadcasts_to(&ms, &xs)) {
      char s1[128], s2[128];
      apx_value_shape_str(m, s1, sizeof s1);
      infer_dims_str(xs.rank, xs.dims, s2, sizeof s2);
      return infer_in_error(d, g, node, "input 1: mask shape %s does not broadcast to %s", s1, s2);
    }
  }
  IShape xs = infer_shape_of(infer_in(g, node, 0));
  return infer_set_out_shape(g, node, 0, preset_float_or(g, node, 0, infer_in(g, node, 0)->dtype), &xs, d);
}

/* ---- LayerNormalization ------------------------------------------------------------- */

static int canon_layer_norm(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrLayerNorm *a = APX_NODE_ATTRS(g, node, ApxAttrLayerNorm);
  const ApxValue *x = infer_in(g, node, 0);
  int64_t axis, stash;
  if (infer_attr_int(g, node, "axis", -1, &axis, d)) return -1;
  if (infer_norm_axis(g, node, "attribute 'axis'", axis, x->rank, 0, &a->axis, d)) return -1;
  if (infer_attr_float(g, node, "epsilon", 1e-5f, &a->epsilon, d)) return -1;
  if (!(a->epsilon >= 0.0f) || !isfinite(a->epsilon))
    return apx_node_error(d, g, node, "attribute 'epsilon' = %g must be finite and >= 0", a->epsilon);
  if (infer_attr_int(g, node, "stash_type", APX_DT_F32, &stash, d)) return -1;
  if (stash < 0 || stash > 64 || !apx_dtype_is_float((ApxDType)stash))
    return apx_node_error(d, g, node, "attribute 'stash_type' = %" PRId64 " (expected a float type)", stash);
  a->stash_type = (int32_t)stash;
  return 0;
}

/* Shape without leading 1s (LayerNorm scale may carry them). */
static IShape strip_ones(IShape s) {
  int k = 0;
  while (k < s.rank && s.dims[k] == 1) k++;
  IShape r = {s.rank - k, {0}};
  for (int i = k; i < s.rank; i++) r.dims[i - k] = s.dims[i];
  return r;
}

static int check_ln_param(const ApxGraph *g, int node, int slot, const IShape *norm, ApxDiag *d) {
  const ApxValue *p = infer_in(g, node, slot);
  if (!p) return 0;
  IShape a = strip_ones(infer_shape_of(p)), b = strip_ones(*norm);
  if (!same_dims(&a, &b)) return infer_err_expected(g, node, slot, norm->rank, norm->dims, d);
  return 0;
}

static int ln_shapes(const ApxGraph *g, int node, int x_slot, IShape *norm, IShape *stats) {
  const ApxAttrLayerNorm *a = APX_NODE_ATTRS(g, node, ApxAttrLayerNorm);
  IShape x = infer_shape_of(infer_in(g, node, x_slot));
  norm->rank = x.rank - (int32_t)a->axis;
  for (int i = 0; i < norm->rank; i++) norm->dims[i] = x.dims[a->axis + i];
  *stats = x;
  for (int i = (int)a->axis; i < x.rank; i++) stats->dims[i] = 1;
  return 0;
}

static int infer_layer_norm(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrLayerNorm *a = APX_NODE_ATTRS(g, node, ApxAttrLayerNorm);
  const ApxValue *x = infer_in(g, node, 0);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  if (a->axis < 0 || a->axis >= x->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x->rank);
  IShape norm, stats;
  ln_shapes(g, node, 0, &norm, &stats);
  if (check_ln_param(g, node, 1, &norm, d) || check_ln_param(g, node, 2, &norm, d)) return -1;
  if (set_out_like_mixed(g, node, 0, 0, d)) return -1;
  if (infer_set_out_shape(g, node, 1, (ApxDType)a->stash_type, &stats, d)) return -1;
  return infer_set_out_shape(g, node, 2, (ApxDType)a->stash_type, &stats, d);
}

/* LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> dX, dScale?, dB? */
static int infer_layer_norm_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrLayerNorm *a = APX_NODE_ATTRS(g, node, ApxAttrLayerNorm);
  const ApxValue *x = infer_in(g, node, 1);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_check_dtype(g, node, 2, INFER_DT_FLOAT, d) || infer_check_dtype(g, node, 3, INFER_DT_FLOAT, d) ||
      infer_same_dtype(g, node, 3, 4, d))
    return -1;
  if (a->axis < 0 || a->axis >= x->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x->rank);
  IShape xs = infer_shape_of(x), norm, stats;
  ln_shapes(g, node, 1, &norm, &stats);
  if (check_input_shape(g, node, 0, &xs, d) || check_ln_param(g, node, 2, &norm, d) ||
      check_input_shape(g, node, 3, &stats, d) || check_input_shape(g, node, 4, &stats, d))
    return -1;
  if (set_out_like_mixed(g, node, 0, 1, d) || infer_set_out_like(g, node, 1, 2, d)) return -1;
  return infer_set_out_like(g, node, 2, 2, d);
}

/* ---- BatchNormalization ------------------------------------------------------------- */

static int canon_batch_norm(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrBatchNorm *a = APX_NODE_ATTRS(g, node, ApxAttrBatchNorm);
  const ApxNode *n = &g->nodes[node];
  int64_t tm = 0, spatial;
  if (infer_attr_float(g, node, "epsilon", 1e-5f, &a->epsilon, d)) return -1;
  if (infer_attr_float(g, node, "momentum", 0.9f, &a->momentum, d)) return -1;
  if (!(a->epsilon >= 0.0f) || !isfinite(a->epsilon))
    return apx_node_error(d, g, node, "attribute 'epsilon' = %g must be finite and >= 0", a->epsilon);
  if (!(a->momentum >= 0.0f && a->momentum <= 1.0f))
    return apx_node_error(d, g, node, "attribute 'momentum' = %g must be in [0, 1]", a->momentum);
  if (infer_attr_int(g, node, "spatial", 1, &spatial, d)) return -1;
  if (spatial != 1)
    return apx_node_error(d, g, node, "not supported yet: attribute 'spatial' = %" PRId64
                          " (per-activation statistics, opset < 9)", spatial);
  if (g->opset >= 14 || g->opset <= 0) {
    if (infer_attr_int(g, node, "training_mode", 0, &tm, d)) return -1;
    if (tm != 0 && tm != 1)
      return apx_node_error(d, g, node, "attribute 'training_mode' = %" PRId64 " (expected 0 or 1)", tm);
  } else {
    /* before opset 14 the optional outputs marked training */
    for (int o = 1; o < n->n_out; o++) tm |= n->out[o] >= 0;
  }
  a->training_mode = (int32_t)tm;
  a->unbiased_running_var = g->bn_unbiased_running_var != 0; /* the model's (the loader's) */
  return 0;
}

static int infer_batch_norm(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrBatchNorm *a = APX_NODE_ATTRS(g, node, ApxAttrBatchNorm);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_check_rank(g, node, 0, 2, APX_MAX_RANK, d))
    return -1;
  int64_t c = infer_in(g, node, 0)->dims[1];
  for (int k = 1; k < 5; k++)
    if (infer_check_dtype(g, node, k, INFER_DT_FLOAT, d) || infer_check_shape(g, node, k, 1, &c, d)) return -1;
  if (infer_same_dtype(g, node, 1, 2, d) || infer_same_dtype(g, node, 3, 4, d)) return -1;
  if (!a->training_mode && (infer_out(g, node, 1) || infer_out(g, node, 2)))
    return apx_node_error(d, g, node, "outputs 1 and 2 (running statistics) exist only with "
                          "training_mode = 1");
  if (g->nodes[node].op == APX_OP_BatchNormRelu ? set_out_like_mixed(g, node, 0, 0, d)
                                                : infer_set_out_like(g, node, 0, 0, d))
    return -1;
  ApxDType st = infer_in(g, node, 3)->dtype;
  if (infer_set_out(g, node, 1, st, 1, &c, d) || infer_set_out(g, node, 2, st, 1, &c, d)) return -1;
  /* apexc's saved batch mean / inverse std for the gradient (attrs.h): fp32, or fp64 for an
   * fp64 X (gradient checks in fp64 need the statistics at full precision) */
  ApxDType sv = infer_in(g, node, 0)->dtype == APX_DT_F64 ? APX_DT_F64 : APX_DT_F32;
  if (infer_set_out(g, node, 3, sv, 1, &c, d)) return -1;
  return infer_set_out(g, node, 4, sv, 1, &c, d);
}

/* BatchNormGrad(dY, X, scale, saved_mean, saved_invstd) -> dX, dscale?, dB? */
static int infer_batch_norm_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_check_rank(g, node, 1, 2, APX_MAX_RANK, d))
    return -1;
  IShape xs = infer_shape_of(infer_in(g, node, 1));
  int64_t c = xs.dims[1];
  if (check_input_shape(g, node, 0, &xs, d)) return -1;
  for (int k = 2; k < 5; k++)
    if (infer_check_dtype(g, node, k, INFER_DT_FLOAT, d) || infer_check_shape(g, node, k, 1, &c, d)) return -1;
  if (infer_set_out_like(g, node, 0, 1, d) || infer_set_out_like(g, node, 1, 2, d)) return -1;
  return infer_set_out_like(g, node, 2, 2, d);
}

/* BatchNormReluGrad(dY, Y, X, scale, saved_mean, saved_invstd) -> dX, dscale?, dB?: as
 * BatchNormGrad with the Relu output Y (dY's dtype and shape) in slot 1. */
static int infer_batch_norm_relu_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d) || infer_check_rank(g, node, 2, 2, APX_MAX_RANK, d))
    return -1;
  IShape xs = infer_shape_of(infer_in(g, node, 2));
  int64_t c = xs.dims[1];
  if (check_input_shape(g, node, 0, &xs, d) || check_input_shape(g, node, 1, &xs, d)) return -1;
  for (int k = 3; k < 6; k++)
    if (infer_check_dtype(g, node, k, INFER_DT_FLOAT, d) || infer_check_shape(g, node, k, 1, &c, d)) return -1;
  if (set_out_like_mixed(g, node, 0, 2, d) || infer_set_out_like(g, node, 1, 3, d)) return -1;
  return infer_set_out_like(g, node, 2, 3, d);
}

/* ---- Dropout ------------------------------------------------------------------------ */

static int canon_dropout(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrDropout *a = APX_NODE_ATTRS(g, node, ApxAttrDropout);
  float ratio = 0.5f;
  double r = 0.5, tm = 0.0;
  int64_t seed;
  if (g->opset > 0 && g->opset < 12) {
    if (infer_attr_float(g, node, "ratio", 0.5f, &ratio, d)) return -1;
    r = ratio;
  } else {
    if (apx_node_attr(g, node, "ratio") && infer_attr_float(g, node, "ratio", 0.5f, &ratio, d)) return -1;
    r = ratio;
    if (infer_static_scalar(g, node, 1, "ratio", &r, d) < 0) return -1;
    if (infer_static_scalar(g, node, 2, "training_mode", &tm, d) < 0) return -1;
  }
  if (!(r >= 0.0 && r < 1.0))
    return apx_node_error(d, g, node, "ratio = %g must be in [0, 1)", r);
  a->ratio = (float)r;
  a->training_mode = tm != 0.0;
  a->has_seed = apx_node_attr(g, node, "seed") != NULL;
  if (infer_attr_int(g, node, "seed", 0, &seed, d)) return -1;
  a->seed = seed;
  /* rng_stream is assigned by the compiler later and kept here */
  return 0;
}

static int infer_dropout(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (infer_in(g, node, 1) && infer_check_dtype(g, node, 1, INFER_DT_FLOAT, d)) return -1;
  if (infer_in(g, node, 2) && infer_check_dtype(g, node, 2, INFER_DT_BOOL, d)) return -1;
  if (infer_set_out_like(g, node, 0, 0, d)) return -1;
  const ApxValue *x = infer_in(g, node, 0);
  ApxDType mask_dt = (g->opset > 0 && g->opset < 10) ? x->dtype : APX_DT_BOOL;
  return infer_set_out(g, node, 1, mask_dt, x->rank, x->dims, d);
}

/* ---- Conv and pooling (1-D, 2-D and 3-D) ------------------------------------------------- */

typedef struct Window {
  int64_t kernel[3], strides[3], pads[6], dilations[3];
  int32_t ceil_mode;
} Window;

/* The window of typed attributes (ApxAttrConv / ApxAttrPool fields). */
static Window window_of(const int64_t *kernel, const int64_t *strides, const int64_t *pads,
                        const int64_t *dilations, int32_t ceil_mode) {
  Window w;
  memset(&w, 0, sizeof w);
  memcpy(w.kernel, kernel, sizeof w.kernel);
  memcpy(w.strides, strides, sizeof w.strides);
  memcpy(w.pads, pads, sizeof w.pads);
  memcpy(w.dilations, dilations, sizeof w.dilations);
  w.ceil_mode = ceil_mode;
  return w;
}

/* Stores a canonical window into typed attributes (ApxAttrConv / ApxAttrPool fields). */
static void window_to_attrs(const Window *w, int64_t *kernel, int64_t *strides, int64_t *pads,
                            int64_t *dilations) {
  memcpy(kernel, w->kernel, sizeof w->kernel);
  memcpy(strides, w->strides, sizeof w->strides);
  memcpy(pads, w->pads, sizeof w->pads);
  memcpy(dilations, w->dilations, sizeof w->dilations);
}

/* Input 0 of a window op: rank 5 (3-D), 4 (2-D) or 3 (1-D); more spatial dims are valid
 * ONNX that apexc does not run yet. */
static int check_spatial_rank(const ApxGraph *g, int node, const char *what, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  if (x->rank > 5)
    return apx_node_error(d, g, node, "not supported yet: %d-D %s (input 0 '%s' has rank %d; "
                          "supported: 1-D, 2-D and 3-D)", x->rank - 2, what, x->name, x->rank);
  return infer_check_rank(g, node, 0, 3, 5, d);
}

/* 2-D and 1-D windows run as 3-D ones with unit leading dims: X (N, C, H, W) is read as
 * (N, C, 1, H, W), (N, C, L) as (N, C, 1, 1, L), and the typed attributes hold three spatial
 * entries, the leading ones unit (kernel, strides and dilations 1, pads 0; kernels/shape.h
 * reads operands so). The (D, H, W) volume of a window operand of rank 3, 4 or 5: */
static void plane_of(const ApxValue *v, int64_t dhw[3]) {
  int ns = v->rank - 2;
  for (int i = 0; i < 3; i++) dhw[i] = i < 3 - ns ? 1 : v->dims[v->rank - 3 + i];
}

/* (n, c, volume) in X's rank (the volume's last rank - 2 entries). */
static IShape window_shape(const ApxValue *X, int64_t n, int64_t c, const int64_t dhw[3]) {
  IShape s;
  memset(&s, 0, sizeof s);
  s.rank = X->rank;
  s.dims[0] = n;
  s.dims[1] = c;
  for (int i = 2; i < X->rank; i++) s.dims[i] = dhw[i + 3 - X->rank];
  return s;
}

/* W (w_slot) of X's rank (3, 4 or 5). */
static int check_weight_rank(ApxGraph *g, int node, int x_slot, int w_slot, ApxDiag *d) {
  int r = infer_in(g, node, x_slot)->rank;
  if (infer_check_rank(g, node, x_slot, 3, 5, d)) return -1;
  return infer_check_rank(g, node, w_slot, r, r, d);
}

/* strides, dilations, pads and auto_pad -> explicit pads for the spatial dims (2-D and 1-D:
 * the last entries, the leading ones unit). */
static int canon_window(ApxGraph *g, int node, Window *w, int has_dilations, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  int ns = x->rank - 2, off = 3 - ns;
  int64_t buf[8], in[3];
  plane_of(x, in);
  int n;
  static const char *const names[2] = {"strides", "dilations"};
  int64_t *dst[2] = {w->strides, w->dilations};
  for (int t = 0; t < 2; t++) {
    dst[t][0] = dst[t][1] = dst[t][2] = 1;
    if (t == 1 && !has_dilations) continue;
    int got = infer_attr_ints(g, node, names[t], buf, 8, &n, d);
    if (got < 0) return -1;
    if (!got) continue;
    if (n != ns)
      return apx_node_error(d, g, node, "attribute '%s' has %d values, expected %d", names[t], n, ns);
    for (int i = 0; i < ns; i++) {
      if (buf[i] < 1)
        return apx_node_error(d, g, node, "attribute '%s' = %" PRId64 " must be >= 1", names[t], buf[i]);
      dst[t][off + i] = buf[i];
    }
  }
  const char *auto_pad;
  if (infer_attr_string(g, node, "auto_pad", "NOTSET", &auto_pad, d)) return -1;
  int got = infer_attr_ints(g, node, "pads", buf, 8, &n, d);
  if (got < 0) return -1;
  memset(w->pads, 0, sizeof w->pads);
  if (got) {
    if (n != 2 * ns)
      return apx_node_error(d, g, node, "attribute 'pads' has %d values, expected %d", n, 2 * ns);
    for (int i = 0; i < 2 * ns; i++) {
      if (buf[i] < 0)
        return apx_node_error(d, g, node, "attribute 'pads' = %" PRId64 " must be >= 0", buf[i]);
      w->pads[(i < ns ? 0 : 3) + off + i % ns] = buf[i];
    }
  }
  int same_upper = strcmp(auto_pad, "SAME_UPPER") == 0, same_lower = strcmp(auto_pad, "SAME_LOWER") == 0;
  int valid = strcmp(auto_pad, "VALID") == 0;
  if (!same_upper && !same_lower && !valid && strcmp(auto_pad, "NOTSET") != 0 && auto_pad[0])
    return apx_node_error(d, g, node, "attribute 'auto_pad' = '%s' (expected NOTSET, SAME_UPPER, "
                          "SAME_LOWER or VALID)", auto_pad);
  if (same_upper || same_lower || valid) {
    for (int i = 0; i < 6; i++)
      if (w->pads[i])
        return apx_node_error(d, g, node, "attribute 'pads' cannot be used with auto_pad = '%s'", auto_pad);
    w->ceil_mode = 0; /* auto_pad fixes the output size */
  }
  if (same_upper || same_lower) {
    for (int i = off; i < 3; i++) {
      int64_t s = w->strides[i];
      int64_t ek = (w->kernel[i] - 1) * w->dilations[i] + 1;
      int64_t out = (in[i] + s - 1) / s;
      int64_t total = (out - 1) * s + ek - in[i];
      if (total < 0) total = 0;
      int64_t small = total / 2, big = total - small;
      w->pads[i] = same_upper ? small : big;
      w->pads[i + 3] = same_upper ? big : small;
    }
  }
  return 0;
}

/* Output spatial size; -1 with an error when the window does not fit (ns spatial dims: the
 * last ns entries; the dim number in the error counts from the first of them). */
static int window_out(const ApxGraph *g, int node, const Window *w, const int64_t *in, int ns,
                      int64_t *out, ApxDiag *d) {
  for (int i = 0; i < 3; i++) {
    int64_t o = apx_window_out(in[i], w->kernel[i], w->strides[i], w->dilations[i], w->pads[i],
                               w->pads[i + 3], w->ceil_mode ? APX_WINDOW_CEIL : APX_WINDOW_FLOOR);
    if (o < 0)
      return apx_node_error(d, g, node, "kernel extent %" PRId64 " is larger than the padded "
                            "input size %" PRId64 " (spatial dim %d)",
                            (w->kernel[i] - 1) * w->dilations[i] + 1,
                            in[i] + w->pads[i] + w->pads[i + 3], i - (3 - ns));
    out[i] = o;
  }
  return 0;
}

/* kernel_shape, when given, must be W's spatial dims (kernel: W's volume). */
static int check_kernel_shape(ApxGraph *g, int node, const ApxValue *W, const int64_t kernel[3],
                              ApxDiag *d) {
  int64_t ks[8];
  int ns = W->rank - 2, n, got = infer_attr_ints(g, node, "kernel_shape", ks, 8, &n, d);
  if (got < 0) return -1;
  int same = got && n == ns;
  for (int i = 0; same && i < ns; i++) same = ks[i] == kernel[3 - ns + i];
  if (got && !same) {
    char dims[96];
    int len = 0;
    for (int i = 3 - ns; i < 3; i++)
      len += snprintf(dims + len, sizeof dims - (size_t)len, "%s%" PRId64, i > 3 - ns ? "," : "", kernel[i]);
    return apx_node_error(d, g, node, "attribute 'kernel_shape' does not match the weight's spatial "
                          "dims [%s]", dims);
  }
  return 0;
}

static int canon_conv(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrConv *a = APX_NODE_ATTRS(g, node, ApxAttrConv);
  if (check_spatial_rank(g, node, "Conv", d) || check_weight_rank(g, node, 0, 1, d)) return -1;
  const ApxValue *W = infer_in(g, node, 1);
  Window w;
  memset(&w, 0, sizeof w);
  plane_of(W, w.kernel);
  if (check_kernel_shape(g, node, W, w.kernel, d)) return -1;
  if (canon_window(g, node, &w, 1, d)) return -1;
  int64_t group;
  if (infer_attr_int(g, node, "group", 1, &group, d)) return -1;
  if (group < 1) return apx_node_error(d, g, node, "attribute 'group' = %" PRId64 " must be >= 1", group);
  window_to_attrs(&w, a->kernel, a->strides, a->pads, a->dilations);
  a->group = group;
  return 0;
}

static int conv_transpose_shape(ApxGraph *g, int node, int x_slot, int w_slot, IShape *y, ApxDiag *d);

/* Conv output shape from X (x_slot) and W (w_slot); checks channels and group (ConvTranspose
 * and its gradient: conv_transpose_shape). */
static int conv_shape(ApxGraph *g, int node, int x_slot, int w_slot, IShape *y, ApxDiag *d) {
  ApxOp op = g->nodes[node].op;
  if (op == APX_OP_ConvTranspose || op == APX_OP_ConvTransposeGrad)
    return conv_transpose_shape(g, node, x_slot, w_slot, y, d);
  const ApxAttrConv *a = APX_NODE_ATTRS(g, node, ApxAttrConv);
  if (check_weight_rank(g, node, x_slot, w_slot, d)) return -1;
  const ApxValue *X = infer_in(g, node, x_slot), *W = infer_in(g, node, w_slot);
  int64_t c = X->dims[1], m = W->dims[0], k[3], in[3];
  plane_of(W, k);
  plane_of(X, in);
  if (a->group < 1 || c % a->group != 0 || m % a->group != 0)
    return apx_node_error(d, g, node, "group = %" PRId64 " must divide the input channels %" PRId64
                          " and the output channels %" PRId64, a->group, c, m);
  if (W->dims[1] * a->group != c || k[0] != a->kernel[0] || k[1] != a->kernel[1] ||
      k[2] != a->kernel[2]) {
    IShape want = window_shape(W, m, c / a->group, a->kernel);
    return infer_err_expected(g, node, w_slot, want.rank, want.dims, d);
  }
  Window w = window_of(a->kernel, a->strides, a->pads, a->dilations, 0);
  int64_t o[3];
  if (window_out(g, node, &w, in, X->rank - 2, o, d)) return -1;
  *y = window_shape(X, X->dims[0], m, o);
  return 0;
}

static int infer_conv(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  IShape y;
  if (conv_shape(g, node, 0, 1, &y, d)) return -1;
  if (infer_in(g, node, 2) && infer_check_shape(g, node, 2, 1, &y.dims[1], d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &y, d);
}

/* ConvGrad, ConvTransposeGrad (dY, X, W) -> dX?, dW?, dB? */
static int infer_conv_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  IShape y;
  if (conv_shape(g, node, 1, 2, &y, d)) return -1;
  if (check_input_shape(g, node, 0, &y, d)) return -1;
  if (infer_set_out_like(g, node, 0, 1, d) || infer_set_out_like(g, node, 1, 2, d)) return -1;
  return infer_set_out(g, node, 2, infer_in(g, node, 0)->dtype, 1, &y.dims[1], d);
}

/* ConvBiasReluGrad(dY, Y, X, W) -> dX?, dW?, dB?: as ConvGrad with the Relu output Y (dY's
 * dtype and shape) in slot 1. */
static int infer_conv_relu_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d) || infer_same_dtype(g, node, 0, 3, d))
    return -1;
  IShape y;
  if (conv_shape(g, node, 2, 3, &y, d)) return -1;
  if (check_input_shape(g, node, 0, &y, d) || check_input_shape(g, node, 1, &y, d)) return -1;
  if (infer_set_out_like(g, node, 0, 2, d) || infer_set_out_like(g, node, 1, 3, d)) return -1;
  return infer_set_out(g, node, 2, infer_in(g, node, 0)->dtype, 1, &y.dims[1], d);
}

/* ---- ConvTranspose (1-D, 2-D and 3-D) ---------------------------------------------------- */

/* Integer-list attribute `name` of ns (1, 2 or 3) values >= lo into the last ns entries of
 * out[3] (def when absent; the leading entries of a 2-D or 1-D window stay def). */
static int attr_pair(ApxGraph *g, int node, const char *name, int ns, int64_t def, int64_t lo,
                     int64_t *out, ApxDiag *d) {
  int64_t buf[8];
  int n, got = infer_attr_ints(g, node, name, buf, 8, &n, d);
  if (got < 0) return -1;
  out[0] = out[1] = out[2] = def;
  if (!got) return 0;
  if (n != ns) return apx_node_error(d, g, node, "attribute '%s' has %d values, expected %d", name, n, ns);
  for (int i = 0; i < ns; i++) {
    if (buf[i] < lo)
      return apx_node_error(d, g, node, "attribute '%s' = %" PRId64 " must be >= %" PRId64, name,
                            buf[i], lo);
    out[3 - ns + i] = buf[i];
  }
  return 0;
}

/* output_shape and auto_pad resolved into pads >= 0 and output_padding >= 0 (ONNX's
 * ConvTranspose equations: total padding = strides (in - 1) + output_padding + extent -
 * out, split as SAME_UPPER: begin = total / 2, otherwise begin = total - total / 2; a
 * negative total, an output_shape above the natural size, is more output_padding). */
static int canon_conv_transpose(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrConvTranspose *a = APX_NODE_ATTRS(g, node, ApxAttrConvTranspose);
  if (check_spatial_rank(g, node, "ConvTranspose", d) || check_weight_rank(g, node, 0, 1, d)) return -1;
  const ApxValue *X = infer_in(g, node, 0), *W = infer_in(g, node, 1);
  int ns = X->rank - 2, off = 3 - ns;
  int64_t buf[8], in[3];
  int n, got;
  plane_of(X, in);
  memset(a, 0, sizeof *a);
  plane_of(W, a->kernel);
  if (check_kernel_shape(g, node, W, a->kernel, d)) return -1;
  if (attr_pair(g, node, "strides", ns, 1, 1, a->strides, d) ||
      attr_pair(g, node, "dilations", ns, 1, 1, a->dilations, d) ||
      attr_pair(g, node, "output_padding", ns, 0, 0, a->output_padding, d))
    return -1;
  if (infer_attr_int(g, node, "group", 1, &a->group, d)) return -1;
  if (a->group < 1) return apx_node_error(d, g, node, "attribute 'group' = %" PRId64 " must be >= 1", a->group);
  got = infer_attr_ints(g, node, "pads", buf, 8, &n, d);
  if (got < 0) return -1;
  if (got) {
    if (n != 2 * ns)
      return apx_node_error(d, g, node, "attribute 'pads' has %d values, expected %d", n, 2 * ns);
    for (int i = 0; i < 2 * ns; i++) {
      if (buf[i] < 0)
        return apx_node_error(d, g, node, "attribute 'pads' = %" PRId64 " must be >= 0", buf[i]);
      a->pads[(i < ns ? 0 : 3) + off + i % ns] = buf[i];
    }
  }
  const char *auto_pad;
  if (infer_attr_string(g, node, "auto_pad", "NOTSET", &auto_pad, d)) return -1;
  int same_upper = strcmp(auto_pad, "SAME_UPPER") == 0, same_lower = strcmp(auto_pad, "SAME_LOWER") == 0;
  int valid = strcmp(auto_pad, "VALID") == 0;
  if (!same_upper && !same_lower && !valid && strcmp(auto_pad, "NOTSET") != 0 && auto_pad[0])
    return apx_node_error(d, g, node, "attribute 'auto_pad' = '%s' (expected NOTSET, SAME_UPPER, "
                          "SAME_LOWER or VALID)", auto_pad);
  if ((same_upper || same_lower || valid) && got)
    for (int i = 0; i < 6; i++)
      if (a->pads[i])
        return apx_node_error(d, g, node, "attribute 'pads' cannot be used with auto_pad = '%s'", auto_pad);
  int64_t out[3];
  int n_out, has_out = infer_attr_ints(g, node, "output_shape", buf, 8, &n_out, d);
  if (has_out < 0) return -1;
  if (has_out) {
    if (n_out != ns && n_out != ns + 2)
      return apx_node_error(d, g, node, "attribute 'output_shape' has %d values, expected %d "
                            "(the spatial dims) or %d", n_out, ns, ns + 2);
    for (int i = 0; i < 3; i++) out[i] = i < off ? 1 : buf[n_out - 3 + i];
  }
  if (!has_out && !same_upper && !same_lower) return 0; /* NOTSET / VALID: pads as given */
  for (int i = off; i < 3; i++) {
    int64_t s = a->strides[i];
    int64_t o = has_out ? out[i] : in[i] * s;
    if (o < 1)
      return apx_node_error(d, g, node, "attribute 'output_shape' = %" PRId64 " must be >= 1", o);
    if (in[i] > (INT64_C(1) << 40) || s > (INT64_C(1) << 20) || a->kernel[i] > (INT64_C(1) << 20) ||
        a->dilations[i] > (INT64_C(1) << 20) || a->output_padding[i] > (INT64_C(1) << 40) ||
        o > (INT64_C(1) << 40))
      return apx_node_error(d, g, node, "not supported yet: ConvTranspose sizes this large");
    int64_t total = s * (in[i] - 1) + a->output_padding[i] + (a->kernel[i] - 1) * a->dilations[i] + 1 - o;
    if (total < 0) {
      a->pads[i] = a->pads[i + 3] = 0;
      a->output_padding[i] -= total;
    } else {
      a->pads[i] = same_upper ? total / 2 : total - total / 2;
      a->pads[i + 3] = total - a->pads[i];
    }
  }
  return 0;
}

/* ConvTranspose's output shape from X (x_slot) and W (w_slot). */
static int conv_transpose_shape(ApxGraph *g, int node, int x_slot, int w_slot, IShape *y, ApxDiag *d) {
  const ApxAttrConvTranspose *a = APX_NODE_ATTRS(g, node, ApxAttrConvTranspose);
  if (check_weight_rank(g, node, x_slot, w_slot, d)) return -1;
  const ApxValue *X = infer_in(g, node, x_slot), *W = infer_in(g, node, w_slot);
  int64_t c = X->dims[1], k[3], in2[3], o2[3];
  plane_of(W, k);
  plane_of(X, in2);
  if (a->group < 1 || c % a->group != 0)
    return apx_node_error(d, g, node, "group = %" PRId64 " must divide the input channels %" PRId64,
                          a->group, c);
  int64_t m = W->dims[1] * a->group;
  if (W->dims[0] != c || k[0] != a->kernel[0] || k[1] != a->kernel[1] || k[2] != a->kernel[2]) {
    IShape want = window_shape(W, c, W->dims[1], a->kernel);
    return infer_err_expected(g, node, w_slot, want.rank, want.dims, d);
  }
  for (int i = 0; i < 3; i++) {
    int64_t in = in2[i];
    if (a->strides[i] < 1 || a->dilations[i] < 1 || a->output_padding[i] < 0 || a->pads[i] < 0 ||
        a->pads[i + 3] < 0)
      return apx_node_error(d, g, node, "typed attributes: strides and dilations must be >= 1, "
                            "pads and output_padding >= 0");
    if (in > (INT64_C(1) << 40) || a->strides[i] > (INT64_C(1) << 20) ||
        a->kernel[i] > (INT64_C(1) << 20) || a->dilations[i] > (INT64_C(1) << 20) ||
        a->output_padding[i] > (INT64_C(1) << 40) || a->pads[i] > (INT64_C(1) << 40) ||
        a->pads[i + 3] > (INT64_C(1) << 40))
      return apx_node_error(d, g, node, "not supported yet: ConvTranspose sizes this large");
    int64_t o = a->strides[i] * (in - 1) + a->output_padding[i] +
                (a->kernel[i] - 1) * a->dilations[i] + 1 - a->pads[i] - a->pads[i + 3];
    if (o < 1)
      return apx_node_error(d, g, node, "output size %" PRId64 " of spatial dim %d is not positive "
                            "(the pads exceed the output)", o, i - (5 - X->rank));
    o2[i] = o;
  }
  *y = window_shape(X, X->dims[0], m, o2);
  return 0;
}

static int canon_pool(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrPool *a = APX_NODE_ATTRS(g, node, ApxAttrPool);
  int is_max = g->nodes[node].op == APX_OP_MaxPool;
  if (check_spatial_rank(g, node, is_max ? "MaxPool" : "AveragePool", d)) return -1;
  Window w;
  memset(&w, 0, sizeof w);
  int64_t ks[8], v;
  int n, got = infer_attr_ints(g, node, "kernel_shape", ks, 8, &n, d);
  if (got < 0) return -1;
  if (!got) return apx_node_error(d, g, node, "attribute 'kernel_shape' is required");
  int ns = infer_in(g, node, 0)->rank - 2;
  if (n != ns)
    return apx_node_error(d, g, node, "attribute 'kernel_shape' has %d values, expected %d", n, ns);
  w.kernel[0] = w.kernel[1] = 1; /* 2-D, 1-D: the unit leading entries */
  for (int i = 0; i < ns; i++) {
    if (ks[i] < 1) return apx_node_error(d, g, node, "attribute 'kernel_shape' = %" PRId64 " must be >= 1", ks[i]);
    w.kernel[3 - ns + i] = ks[i];
  }
  if (infer_attr_int(g, node, "ceil_mode", 0, &v, d)) return -1;
  if (v != 0 && v != 1) return apx_node_error(d, g, node, "attribute 'ceil_mode' = %" PRId64 " (expected 0 or 1)", v);
  w.ceil_mode = (int32_t)v;
  if (canon_window(g, node, &w, 1, d)) return -1;
  memset(a, 0, sizeof *a);
  window_to_attrs(&w, a->kernel, a->strides, a->pads, a->dilations);
  a->ceil_mode = w.ceil_mode;
  if (is_max) {
    if (infer_attr_int(g, node, "storage_order", 0, &v, d)) return -1;
    if (v != 0 && v != 1)
      return apx_node_error(d, g, node, "attribute 'storage_order' = %" PRId64 " (expected 0 or 1)", v);
    a->storage_order = (int32_t)v;
  } else {
    if (infer_attr_int(g, node, "count_include_pad", 0, &v, d)) return -1;
    if (v != 0 && v != 1)
      return apx_node_error(d, g, node, "attribute 'count_include_pad' = %" PRId64 " (expected 0 or 1)", v);
    a->count_include_pad = (int32_t)v;
  }
  return 0;
}

/* Pooling output spatial size from the node's typed attributes for input spatial dims in. */
static int pool_out(const ApxGraph *g, int node, const int64_t *in, int ns, int64_t *out,
                    ApxDiag *d) {
  const ApxAttrPool *a = APX_NODE_ATTRS(g, node, ApxAttrPool);
  Window w = window_of(a->kernel, a->strides, a->pads, a->dilations, a->ceil_mode);
  for (int i = 0; i < 3; i++)
    if (w.kernel[i] < 1 || w.strides[i] < 1 || w.dilations[i] < 1)
      return apx_node_error(d, g, node, "typed attributes: kernel, strides and dilations must be >= 1");
  return window_out(g, node, &w, in, ns, out, d);
}

static int pool_shape(ApxGraph *g, int node, int x_slot, IShape *y, ApxDiag *d) {
  if (infer_check_rank(g, node, x_slot, 3, 5, d)) return -1;
  const ApxValue *X = infer_in(g, node, x_slot);
  int64_t o[3], in[3];
  plane_of(X, in);
  if (pool_out(g, node, in, X->rank - 2, o, d)) return -1;
  *y = window_shape(X, X->dims[0], X->dims[1], o);
  return 0;
}

static int infer_pool(ApxGraph *g, int node, ApxDiag *d) {
  int is_max = g->nodes[node].op == APX_OP_MaxPool;
  const ApxValue *x = infer_in(g, node, 0);
  int ok = apx_dtype_is_float(x->dtype) || (is_max && (x->dtype == APX_DT_U8 || x->dtype == APX_DT_I8));
  if (!ok)
    return infer_in_error(d, g, node, "input 0 '%s': dtype %s not supported here (expected a "
                          "float type%s)", x->name, apx_dtype_name(x->dtype),
                          is_max ? ", int8 or uint8" : "");
  IShape y;
  if (pool_shape(g, node, 0, &y, d)) return -1;
  if (infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &y, d)) return -1;
  return infer_set_out_shape(g, node, 1, APX_DT_I64, &y, d);
}

/* MaxPoolGrad(dY, X) -> dX */
static int infer_max_pool_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d)) return -1;
  IShape y;
  if (pool_shape(g, node, 1, &y, d)) return -1;
  if (check_input_shape(g, node, 0, &y, d)) return -1;
  return infer_set_out_like(g, node, 0, 1, d);
}

/* AveragePoolGrad(dY) -> dX: dX shaped by the creating pass (the forward input's shape). */
static int infer_avg_pool_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  IShape xs;
  if (infer_preset_shape(g, node, 0, &xs, d)) return -1;
  if (xs.rank < 3 || xs.rank > 5)
    return apx_node_error(d, g, node, "output 0 must have rank 3, 4 or 5, has rank %d", xs.rank);
  int64_t o[3], in[3];
  ApxValue xv;
  memset(&xv, 0, sizeof xv);
  xv.rank = xs.rank;
  memcpy(xv.dims, xs.dims, sizeof xs.dims[0] * (size_t)xs.rank);
  plane_of(&xv, in);
  if (pool_out(g, node, in, xs.rank - 2, o, d)) return -1;
  IShape y = window_shape(&xv, xs.dims[0], xs.dims[1], o);
  if (check_input_shape(g, node, 0, &y, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &xs, d);
}

/* (N, C, 1 .. 1) for an input (N, C, spatial...) of rank r */
static IShape gap_shape(int r, const int64_t *dims) {
  IShape y;
  memset(&y, 0, sizeof y);
  y.rank = r;
  y.dims[0] = dims[0];
  y.dims[1] = dims[1];
  for (int i = 2; i < r; i++) y.dims[i] = 1;
  return y;
}

static int infer_global_avg_pool(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (infer_check_rank(g, node, 0, 3, APX_MAX_RANK, d)) return -1; /* the kernels take any spatial rank */
  const ApxValue *x = infer_in(g, node, 0);
  IShape y = gap_shape(x->rank, x->dims);
  return infer_set_out_shape(g, node, 0, x->dtype, &y, d);
}

/* GlobalAveragePoolGrad(dY) -> dX: dX shaped by the creating pass (the forward input). */
static int infer_global_avg_pool_grad(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  IShape xs;
  if (infer_preset_shape(g, node, 0, &xs, d)) return -1;
  if (xs.rank < 3)
    return apx_node_error(d, g, node, "output 0 must have rank 3 or more, has rank %d", xs.rank);
  IShape y = gap_shape(xs.rank, xs.dims);
  if (check_input_shape(g, node, 0, &y, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &xs, d);
}

/* ---- losses ------------------------------------------------------------------------- */

static int canon_loss(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrLoss *a = APX_NODE_ATTRS(g, node, ApxAttrLoss);
  const char *red;
  if (infer_attr_string(g, node, "reduction", "mean", &red, d)) return -1;
  if (strcmp(red, "mean") == 0)
    a->reduction = APX_RED_MEAN;
  else if (strcmp(red, "sum") == 0)
    a->reduction = APX_RED_SUM;
  else if (strcmp(red, "none") == 0)
    a->reduction = APX_RED_NONE;
  else
    return apx_node_error(d, g, node, "attribute 'reduction' = '%s' (expected mean, sum or none)", red);
  a->has_ignore_index = apx_node_attr(g, node, "ignore_index") != NULL;
  if (infer_attr_int(g, node, "ignore_index", 0, &a->ignore_index, d)) return -1;
  return 0;
}

/* The labels' shape (N, d1..dk) of scores (N, C, d1..dk), rank >= 2. */
static IShape labels_of(const IShape *scores) {
  IShape l = {scores->rank - 1, {0}};
  l.dims[0] = scores->dims[0];
  for (int i = 2; i < scores->rank; i++) l.dims[i - 1] = scores->dims[i];
  return l;
}

/* scores (N, C, d1..dk), labels (N, d1..dk), weights? [C]: the loss shape into *loss. */
static int loss_shapes(const ApxGraph *g, int node, int s_slot, int l_slot, int w_slot,
                       IShape *labels, IShape *loss, ApxDiag *d) {
  const ApxAttrLoss *a = APX_NODE_ATTRS(g, node, ApxAttrLoss);
  if (infer_check_dtype(g, node, s_slot, INFER_DT_FLOAT, d) ||
      infer_check_rank(g, node, s_slot, 2, APX_MAX_RANK, d) ||
      infer_check_dtype(g, node, l_slot, INFER_DT_INDEX, d))
    return -1;
  IShape s = infer_shape_of(infer_in(g, node, s_slot));
  *labels = labels_of(&s);
  if (check_input_shape(g, node, l_slot, labels, d)) return -1;
  if (w_slot >= 0 && infer_in(g, node, w_slot)) {
    if (infer_same_dtype(g, node, s_slot, w_slot, d) || infer_check_shape(g, node, w_slot, 1, &s.dims[1], d))
      return -1;
  }
  if (a->reduction == APX_RED_NONE)
    *loss = *labels;
  else
    loss->rank = 0;
  return 0;
}

/* SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob?
 * NegativeLogLikelihoodLoss(input, target, weight?) -> loss
 * FusedXentropy(scores, labels) -> loss, saved? (saved fp32, labels' shape; the loss is
 * fp32 for fp16/bf16 scores, which the kernel reads directly: the loss stays fp32) */
static int infer_loss(ApxGraph *g, int node, ApxDiag *d) {
  IShape labels, loss;
  if (loss_shapes(g, node, 0, 1, 2, &labels, &loss, d)) return -1;
  const ApxValue *s = infer_in(g, node, 0);
  if (g->nodes[node].op == APX_OP_FusedXentropy) {
    ApxDType lt = apx_dtype_is_half(s->dtype) ? APX_DT_F32 : s->dtype;
    if (infer_set_out_shape(g, node, 0, lt, &loss, d)) return -1;
    return infer_set_out_shape(g, node, 1, APX_DT_F32, &labels, d);
  }
  if (infer_set_out_shape(g, node, 0, s->dtype, &loss, d)) return -1;
  return infer_set_out_like(g, node, 1, 0, d);
}

/* SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?) -> dScores */
static int infer_sce_grad(ApxGraph *g, int node, ApxDiag *d) {
  IShape labels, loss;
  if (loss_shapes(g, node, 1, 2, 3, &labels, &loss, d)) return -1;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || check_input_shape(g, node, 0, &loss, d)) return -1;
  return infer_set_out_like(g, node, 0, 1, d);
}

/* FusedXentropyGrad(dLoss, scores, labels, saved) -> dScores */
static int infer_xent_grad(ApxGraph *g, int node, ApxDiag *d) {
  IShape labels, loss;
  if (loss_shapes(g, node, 1, 2, -1, &labels, &loss, d)) return -1;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || check_input_shape(g, node, 0, &loss, d) ||
      infer_check_dtype(g, node, 3, INFER_DT_FLOAT, d) || check_input_shape(g, node, 3, &labels, d))
    return -1;
  return set_out_like_mixed(g, node, 0, 1, d);
}

/* NegativeLogLikelihoodLossGrad(dLoss, target, weight?) -> dInput: dInput (N, C, d1..dk)
 * shaped by the creating pass (the forward input's shape). */
static int infer_nll_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrLoss *a = APX_NODE_ATTRS(g, node, ApxAttrLoss);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_check_dtype(g, node, 1, INFER_DT_INDEX, d))
    return -1;
  IShape xs;
  if (infer_preset_shape(g, node, 0, &xs, d)) return -1;
  if (xs.rank < 2) return apx_node_error(d, g, node, "output 0 must have rank >= 2, has rank %d", xs.rank);
  IShape labels = labels_of(&xs);
  if (check_input_shape(g, node, 1, &labels, d)) return -1;
  if (infer_in(g, node, 2) && (infer_same_dtype(g, node, 0, 2, d) || infer_check_shape(g, node, 2, 1, &xs.dims[1], d)))
    return -1;
  IShape loss = labels;
  if (a->reduction != APX_RED_NONE) loss.rank = 0;
  if (check_input_shape(g, node, 0, &loss, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &xs, d);
}

#define R(OP, CANON, INFER) {APX_OP_##OP, CANON, INFER}

const InferRule apx_infer_rules_nn[] = {
    R(Gemm, NULL, infer_gemm),
    R(MatMul, NULL, infer_matmul),
    R(FusedMatMul, NULL, infer_fused_matmul),
    R(FusedDense, NULL, infer_fused_dense),
    R(FusedDenseGrad, NULL, infer_fused_dense_grad),
    R(Softmax, canon_softmax, infer_softmax),
    R(LogSoftmax, canon_softmax, infer_softmax),
    R(SoftmaxGrad, NULL, infer_softmax_grad),
    R(LogSoftmaxGrad, NULL, infer_softmax_grad),
    R(FusedSoftmax, NULL, infer_fused_softmax),
    R(FusedSoftmaxGrad, NULL, infer_softmax_grad),
    R(LayerNormalization, canon_layer_norm, infer_layer_norm),
    R(LayerNormGrad, NULL, infer_layer_norm_grad),
    R(BatchNormalization, canon_batch_norm, infer_batch_norm),
    R(BatchNormRelu, NULL, infer_batch_norm),
    R(BatchNormGrad, NULL, infer_batch_norm_grad),
    R(BatchNormReluGrad, NULL, infer_batch_norm_relu_grad),
    R(Dropout, canon_dropout, infer_dropout),
    R(Conv, canon_conv, infer_conv),
    R(ConvBiasRelu, NULL, infer_conv),
    R(ConvGrad, NULL, infer_conv_grad),
    R(ConvBiasReluGrad, NULL, infer_conv_relu_grad),
    R(ConvTranspose, canon_conv_transpose, infer_conv),
    R(ConvTransposeGrad, NULL, infer_conv_grad),
    R(MaxPool, canon_pool, infer_pool),
    R(AveragePool, canon_pool, infer_pool),
    R(MaxPoolGrad, NULL, infer_max_pool_grad),
    R(AveragePoolGrad, NULL, infer_avg_pool_grad),
    R(GlobalAveragePool, NULL, infer_global_avg_pool),
    R(GlobalAveragePoolGrad, NULL, infer_global_avg_pool_grad),
    R(SoftmaxCrossEntropyLoss, canon_loss, infer_loss),
    R(NegativeLogLikelihoodLoss, canon_loss, infer_loss),
    R(FusedXentropy, NULL, infer_loss),
    R(SoftmaxCrossEntropyLossGrad, NULL, infer_sce_grad),
    R(NegativeLogLikelihoodLossGrad, NULL, infer_nll_grad),
    R(FusedXentropyGrad, NULL, infer_xent_grad),
    {APX_OP_INVALID, NULL, NULL},
};
