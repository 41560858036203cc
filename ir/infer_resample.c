/* infer_resample.c - canonicalization and shape inference of the v1.1 resampling and
 * contraction ops: Resize (opsets 10 to 19: scales or sizes as constants, modes nearest and
 * linear), its gradient ResizeGrad, and Einsum (one or two operands, explicit or implicit
 * equation). What is refused is refused here, once, with a one-line error naming the node:
 * cubic mode, tf_crop_and_resize, antialias, keep_aspect_ratio_policy other than stretch,
 * an Einsum ellipsis or more than two operands. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/infer_util.h"
#include "kernels/resample_plan.h"

static int from_pass(const ApxGraph *g, int node) { return g->nodes[node].onnx_index < 0; }

/* ---- Resize ------------------------------------------------------------------------------ */

static int enum_index(const char *names, const char *s) {
  int i = 0;
  size_t n = strlen(s);
  for (const char *p = names; *p; i++) {
    const char *e = strchr(p, '|');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && !strncmp(p, s, n)) return i;
    if (!e) break;
    p = e + 1;
  }
  return -1;
}

/* Static input slot as doubles (float or integer constant, rank <= 1): 1 read, 0 absent or
 * empty, -1 error. */
static int static_doubles(const ApxGraph *g, int node, int slot, const char *what, double *out, int cap,
                          int *n, ApxDiag *d) {
  const ApxValue *v = infer_in(g, node, slot);
  *n = 0;
  if (!v) return 0;
  if (!infer_is_const(v))
    return infer_in_error(d, g, node, "input %d '%s' must be a compile-time constant (not supported yet: "
                          "Resize with %s computed at run time)", slot, what, what);
  int64_t cnt = apx_value_numel(v);
  if (cnt == 0) return 0;
  if (v->rank > 1)
    return infer_in_error(d, g, node, "input %d '%s' must be 1-D, got rank %d", slot, what, v->rank);
  if (cnt > cap)
    return infer_in_error(d, g, node, "input %d '%s' has %" PRId64 " values, at most %d supported", slot, what,
                          cnt, cap);
  for (int64_t i = 0; i < cnt; i++) out[i] = infer_elem_f64(v->data, v->dtype, i);
  *n = (int)cnt;
  return 1;
}

static int canon_resize(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrResize *a = APX_NODE_ATTRS(g, node, ApxAttrResize);
  const ApxValue *x = infer_in(g, node, 0);
  int32_t r = x->rank;
  int old = g->opset > 0 && g->opset < 11; /* Resize-10: (X, scales), asymmetric */
  const char *mode, *coord, *nearest, *policy;
  int64_t antialias, exclude;
  if (infer_attr_string(g, node, "mode", "nearest", &mode, d) ||
      infer_attr_string(g, node, "coordinate_transformation_mode", old ? "asymmetric" : "half_pixel", &coord, d) ||
      infer_attr_string(g, node, "nearest_mode", "round_prefer_floor", &nearest, d) ||
      infer_attr_string(g, node, "keep_aspect_ratio_policy", "stretch", &policy, d) ||
      infer_attr_int(g, node, "antialias", 0, &antialias, d) || infer_attr_int(g, node, "exclude_outside", 0, &exclude, d))
    return -1;
  int m = enum_index("nearest|linear|cubic", mode);
  int c = enum_index("half_pixel|half_pixel_symmetric|pytorch_half_pixel|align_corners|asymmetric|"
                     "tf_half_pixel_for_nn|tf_crop_and_resize", coord);
  int nm = enum_index("round_prefer_floor|round_prefer_ceil|floor|ceil", nearest);
  if (m < 0) return apx_node_error(d, g, node, "attribute 'mode' = '%s' (expected nearest, linear or cubic)", mode);
  if (m == APX_RESIZE_CUBIC)
    return apx_node_error(d, g, node, "not supported yet: Resize mode=cubic (nearest and linear are)");
  if (c < 0) return apx_node_error(d, g, node, "attribute 'coordinate_transformation_mode' = '%s' is unknown", coord);
  if (c == APX_RESIZE_TF_CROP_AND_RESIZE)
    return apx_node_error(d, g, node, "not supported yet: Resize coordinate_transformation_mode=tf_crop_and_resize");
  if (nm < 0) return apx_node_error(d, g, node, "attribute 'nearest_mode' = '%s' is unknown", nearest);
  if (antialias) return apx_node_error(d, g, node, "not supported yet: Resize antialias=1");
  if (strcmp(policy, "stretch") != 0)
    return apx_node_error(d, g, node, "not supported yet: Resize keep_aspect_ratio_policy=%s (stretch is)", policy);
  (void)exclude; /* cubic only */
  if (r < 1) return apx_node_error(d, g, node, "input 0 must have rank >= 1, got rank 0");
  int64_t axes[APX_MAX_RANK];
  int na = r, got;
  if ((got = infer_attr_ints(g, node, "axes", axes, APX_MAX_RANK, &na, d)) < 0) return -1;
  if (!got) {
    na = r;
    for (int i = 0; i < r; i++) axes[i] = i;
  } else {
    int seen[APX_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
      if (axes[i] < -r || axes[i] >= r)
        return apx_node_error(d, g, node, "attribute 'axes' value %" PRId64 " out of range for rank %d", axes[i], r);
      if (axes[i] < 0) axes[i] += r;
      if (seen[axes[i]]++) return apx_node_error(d, g, node, "attribute 'axes' repeats axis %" PRId64, axes[i]);
    }
  }
  double scales[APX_MAX_RANK];
  int64_t sizes[APX_MAX_RANK];
  int ns = 0, nz = 0;
  if ((got = static_doubles(g, node, old ? 1 : 2, "scales", scales, APX_MAX_RANK, &ns, d)) < 0) return -1;
  if (!old && (got = infer_static_ints(g, node, 3, "sizes", sizes, APX_MAX_RANK, &nz, d)) < 0) return -1;
  if (ns && nz) return apx_node_error(d, g, node, "both 'scales' and 'sizes' are given (only one may be)");
  if (!ns && !nz) return apx_node_error(d, g, node, "one of 'scales' and 'sizes' is required");
  int n = ns ? ns : nz;
  if (n != na)
    return apx_node_error(d, g, node, "'%s' has %d values, expected %d (%s)", ns ? "scales" : "sizes", n, na,
                          got && na != r ? "one per axis" : "one per dim");
  memset(a, 0, sizeof *a);
  a->mode = m;
  a->coord = c;
  a->nearest_mode = nm;
  a->rank = r;
  for (int i = 0; i < r; i++) a->scales[i] = 1.0;
  for (int i = 0; i < na; i++) {
    int dim = (int)axes[i];
    double s;
    if (ns) {
      s = scales[i];
      if (!(s > 0.0) || !isfinite(s))
        return apx_node_error(d, g, node, "scales[%d] = %g must be positive", i, s);
    } else {
      if (sizes[i] <= 0) return apx_node_error(d, g, node, "sizes[%d] = %" PRId64 " must be positive", i, sizes[i]);
      if (x->dims[dim] == 0) return apx_node_error(d, g, node, "sizes[%d] resizes the empty dim %d", i, dim);
      s = (double)sizes[i] / (double)x->dims[dim];
    }
    a->scales[dim] = s;
  }
  return 0;
}

/* Output dims: floor(in * scale) per dim (ONNX), or exactly the sizes they came from. */
static int resize_shape(ApxGraph *g, int node, const ApxAttrResize *a, const ApxValue *x, IShape *out,
                        ApxDiag *d) {
  if (a->rank != x->rank)
    return apx_node_error(d, g, node, "typed scales have rank %d, the input has rank %d", a->rank, x->rank);
  out->rank = x->rank;
  for (int i = 0; i < x->rank; i++) {
    double s = apx_resize_scale(a, i), o = s * (double)x->dims[i], r = nearbyint(o);
    /* sizes-derived scales reproduce their size exactly; given scales floor */
    out->dims[i] = fabs(o - r) <= 1e-9 * (r > 1 ? r : 1) ? (int64_t)r : (int64_t)floor(o);
    if (out->dims[i] < 0 || !(s > 0.0))
      return apx_node_error(d, g, node, "typed scale %g of dim %d is not positive", s, i);
  }
  return 0;
}

static int infer_resize(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  IShape out;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) ||
      resize_shape(g, node, APX_NODE_ATTRS(g, node, ApxAttrResize), x, &out, d))
    return -1;
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* ResizeGrad(dY) -> dX: dX shaped by the creating pass (the forward input's shape). */
static int infer_resize_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *dy = infer_in(g, node, 0);
  IShape xs, want;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_preset_shape(g, node, 0, &xs, d)) return -1;
  ApxValue xv = *infer_out(g, node, 0);
  if (resize_shape(g, node, APX_NODE_ATTRS(g, node, ApxAttrResize), &xv, &want, d)) return -1;
  if (infer_check_shape(g, node, 0, want.rank, want.dims, d)) return -1;
  return infer_set_out_shape(g, node, 0, dy->dtype, &xs, d);
}

/* ---- Einsum ------------------------------------------------------------------------------ */

static int canon_einsum(ApxGraph *g, int node, ApxDiag *d) {
  if (from_pass(g, node)) return 0; /* the gradient rule sets the typed terms itself */
  ApxAttrEinsum *a = APX_NODE_ATTRS(g, node, ApxAttrEinsum);
  const char *eq;
  if (infer_attr_string(g, node, "equation", NULL, &eq, d)) return -1;
  if (!eq) return apx_node_error(d, g, node, "attribute 'equation' is required");
  char err[160];
  int n_terms, rc = apx_einsum_parse(eq, a, &n_terms, err, sizeof err);
  if (rc) return apx_node_error(d, g, node, "%s%s", rc == -1 ? "attribute 'equation': " : "", err);
  int n_in = g->nodes[node].n_in;
  if (n_in > 2) return apx_node_error(d, g, node, "not supported yet: Einsum with %d operands (one or two are)", n_in);
  if (n_terms != n_in)
    return apx_node_error(d, g, node, "the equation '%s' has %d operand terms, the node %d inputs", eq, n_terms, n_in);
  return 0;
}

static int infer_einsum(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrEinsum *e = APX_NODE_ATTRS(g, node, ApxAttrEinsum);
  const ApxValue *a = infer_in(g, node, 0), *b = infer_in(g, node, 1);
  const ApxValue *vs[2] = {a, b};
  const int64_t *terms[2] = {e->a, e->b};
  const int ns[2] = {e->n_a, e->n_b};
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (b && infer_same_dtype(g, node, 0, 1, d)) return -1;
  for (int k = 0; k < 2; k++) {
    if (!vs[k]) continue;
    if (ns[k] != vs[k]->rank)
      return infer_in_error(d, g, node, "input %d has rank %d, its equation term %d labels", k, vs[k]->rank, ns[k]);
  }
  IShape out = {e->n_y, {0}};
  for (int i = 0; i < e->n_y; i++) {
    int64_t size = -1;
    for (int k = 0; k < 2; k++)
      for (int j = 0; vs[k] && j < ns[k]; j++) {
        if (terms[k][j] != e->y[i]) continue;
        if (size >= 0 && size != vs[k]->dims[j])
          return infer_in_error(d, g, node, "input %d: label '%c' has size %" PRId64 " here and %" PRId64
                                " elsewhere", k, (char)e->y[i], vs[k]->dims[j], size);
        size = vs[k]->dims[j];
      }
    out.dims[i] = size;
  }
  /* every label one size across the inputs (the contracted ones too) */
  for (int j = 0; a && b && j < e->n_a; j++)
    for (int i = 0; i < e->n_b; i++)
      if (e->a[j] == e->b[i] && a->dims[j] != b->dims[i])
        return infer_in_error(d, g, node, "input 1: label '%c' has size %" PRId64 ", input 0 has %" PRId64,
                              (char)e->a[j], b->dims[i], a->dims[j]);
  for (int k = 0; k < 2; k++)
    for (int j = 0; vs[k] && j < ns[k]; j++)
      for (int i = 0; i < j; i++)
        if (terms[k][i] == terms[k][j] && vs[k]->dims[i] != vs[k]->dims[j])
          return infer_in_error(d, g, node, "input %d: the diagonal label '%c' has sizes %" PRId64 " and %" PRId64,
                                k, (char)terms[k][i], vs[k]->dims[i], vs[k]->dims[j]);
  int unsized = 0;
  for (int i = 0; i < out.rank; i++) unsized |= out.dims[i] < 0;
  if (unsized) {
    /* gradient Einsums name labels of no input: their output was pre-shaped */
    IShape pre;
    if (!from_pass(g, node) || infer_preset_shape(g, node, 0, &pre, d))
      return apx_node_error(d, g, node, "an output label is in no input term");
    if (pre.rank != out.rank) return apx_node_error(d, g, node, "pre-shaped output has rank %d, the equation %d",
                                                    pre.rank, out.rank);
    for (int i = 0; i < out.rank; i++) {
      if (out.dims[i] >= 0 && out.dims[i] != pre.dims[i])
        return apx_node_error(d, g, node, "pre-shaped output dim %d is %" PRId64 ", the label's size %" PRId64, i,
                              pre.dims[i], out.dims[i]);
      out.dims[i] = pre.dims[i];
    }
  }
  return infer_set_out_shape(g, node, 0, a->dtype, &out, d);
}

#define R(OP, CANON, INFER) {APX_OP_##OP, CANON, INFER}

const InferRule apx_infer_rules_resample[] = {
    R(Resize, canon_resize, infer_resize),
    R(ResizeGrad, NULL, infer_resize_grad),
    R(Einsum, canon_einsum, infer_einsum),
    {APX_OP_INVALID, NULL, NULL},
};
