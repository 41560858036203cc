/* infer_shape_ops.c - data-movement and shape ops: Flatten, Reshape, Transpose, Squeeze,
 * Unsqueeze, Identity, Concat, Split, Slice, Gather, Expand, the reductions (ReduceSum,
 * ReduceMean, ReduceSumTo), the compile-time ops (Shape, Constant, ConstantOfShape, Range)
 * and the gradients SliceGrad and GatherGrad. Static inputs (shape, axes, starts ...) are
 * read from constant values; older opsets' attribute forms are read by g->opset. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/infer_util.h"

/* Max static-input entries read for Split sizes. */
#define SPLIT_MAX 4096

static int is_old(const ApxGraph *g, int64_t before) { return g->opset > 0 && g->opset < before; }

/* Pass-created node (not from the model): may rely on pre-shaped outputs. */
static int from_pass(const ApxGraph *g, int node) { return g->nodes[node].onnx_index < 0; }

/* ---- Flatten, Identity, Transpose --------------------------------------------------- */

static int canon_flatten(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  int64_t axis;
  if (infer_attr_int(g, node, "axis", 1, &axis, d)) return -1;
  return infer_norm_axis(g, node, "attribute 'axis'", axis, infer_in(g, node, 0)->rank, 1, &a->axis, d);
}

static int infer_flatten(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  const ApxValue *x = infer_in(g, node, 0);
  if (a->axis < 0 || a->axis > x->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x->rank);
  int64_t out[2] = {infer_numel((int32_t)a->axis, x->dims),
                    infer_numel(x->rank - (int32_t)a->axis, x->dims + a->axis)};
  return infer_set_out(g, node, 0, x->dtype, 2, out, d);
}

static int infer_identity(ApxGraph *g, int node, ApxDiag *d) {
  return infer_set_out_like(g, node, 0, 0, d);
}

static int canon_transpose(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrTranspose *a = APX_NODE_ATTRS(g, node, ApxAttrTranspose);
  int32_t r = infer_in(g, node, 0)->rank;
  int64_t perm[APX_MAX_RANK + 1];
  int n, got = infer_attr_ints(g, node, "perm", perm, APX_MAX_RANK + 1, &n, d);
  if (got < 0) return -1;
  if (!got) {
    n = r;
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  if (n != r)
    return apx_node_error(d, g, node, "attribute 'perm' has %d values, the input has rank %d", n, r);
  int seen[APX_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]++)
      return apx_node_error(d, g, node, "attribute 'perm' is not a permutation of 0..%d", r - 1);
  }
  memset(a, 0, sizeof *a);
  a->rank = r;
  for (int i = 0; i < r; i++) a->perm[i] = perm[i];
  return 0;
}

static int infer_transpose(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrTranspose *a = APX_NODE_ATTRS(g, node, ApxAttrTranspose);
  const ApxValue *x = infer_in(g, node, 0);
  if (a->rank != x->rank)
    return apx_node_error(d, g, node, "typed perm has rank %d, input 0 has rank %d", a->rank, x->rank);
  int64_t out[APX_MAX_RANK];
  int seen[APX_MAX_RANK] = {0};
  for (int i = 0; i < x->rank; i++) {
    if (a->perm[i] < 0 || a->perm[i] >= x->rank || seen[a->perm[i]]++)
      return apx_node_error(d, g, node, "typed perm is not a permutation");
    out[i] = x->dims[a->perm[i]];
  }
  return infer_set_out(g, node, 0, x->dtype, x->rank, out, d);
}

/* ---- Reshape, Expand ---------------------------------------------------------------- */

static int canon_reshape(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrReshape *a = APX_NODE_ATTRS(g, node, ApxAttrReshape);
  int64_t az, buf[APX_MAX_RANK];
  int n;
  if (infer_attr_int(g, node, "allowzero", 0, &az, d)) return -1;
  a->allowzero = az != 0;
  if (!infer_in(g, node, 1) && !from_pass(g, node))
    return infer_in_error(d, g, node, "input 1 'shape' is required");
  return infer_static_ints(g, node, 1, "shape", buf, APX_MAX_RANK, &n, d) < 0 ? -1 : 0;
}

static int infer_reshape(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrReshape *a = APX_NODE_ATTRS(g, node, ApxAttrReshape);
  const ApxValue *x = infer_in(g, node, 0);
  int64_t numel = apx_value_numel(x);
  IShape out;
  int n;
  int got = infer_static_ints(g, node, 1, "shape", out.dims, APX_MAX_RANK, &n, d);
  if (got < 0) return -1;
  if (!got) {
    if (!from_pass(g, node)) return infer_in_error(d, g, node, "input 1 'shape' is required");
    if (infer_preset_shape(g, node, 0, &out, d)) return -1;
  } else {
    out.rank = n;
    int neg = -1, has_zero = 0;
    for (int i = 0; i < n; i++) {
      int64_t v = out.dims[i];
      if (v == 0 && !a->allowzero) {
        if (i >= x->rank)
          return apx_node_error(d, g, node, "shape[%d] = 0 copies a dim the input (rank %d) "
                                "does not have", i, x->rank);
        out.dims[i] = x->dims[i];
      } else if (v == 0) {
        has_zero = 1;
      } else if (v == -1) {
        if (neg >= 0) return apx_node_error(d, g, node, "shape has more than one -1");
        neg = i;
      } else if (v < -1) {
        return apx_node_error(d, g, node, "shape[%d] = %" PRId64 " is invalid", i, v);
      }
    }
    if (neg >= 0) {
      if (has_zero) return apx_node_error(d, g, node, "shape has both 0 (allowzero) and -1");
      out.dims[neg] = 1;
      int64_t rest = infer_numel(n, out.dims);
      if (rest <= 0 || numel % rest != 0) {
        char s1[256];
        apx_value_shape_str(x, s1, sizeof s1);
        return apx_node_error(d, g, node, "cannot reshape %s (%" PRId64 " elements) with a -1 "
                              "next to dims of %" PRId64 " elements", s1, numel, rest);
      }
      out.dims[neg] = numel / rest;
    }
  }
  if (infer_numel(out.rank, out.dims) != numel) {
    char s1[256], s2[256];
    apx_value_shape_str(x, s1, sizeof s1);
    infer_dims_str(out.rank, out.dims, s2, sizeof s2);
    return apx_node_error(d, g, node, "cannot reshape %s (%" PRId64 " elements) to %s (%" PRId64
                          " elements)", s1, numel, s2, infer_numel(out.rank, out.dims));
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

static int canon_expand(ApxGraph *g, int node, ApxDiag *d) {
  int64_t buf[APX_MAX_RANK];
  int n;
  if (!infer_in(g, node, 1) && !from_pass(g, node))
    return infer_in_error(d, g, node, "input 1 'shape' is required");
  return infer_static_ints(g, node, 1, "shape", buf, APX_MAX_RANK, &n, d) < 0 ? -1 : 0;
}

static int infer_expand(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  IShape xs = infer_shape_of(x), out;
  int64_t shape[APX_MAX_RANK];
  int n, got = infer_static_ints(g, node, 1, "shape", shape, APX_MAX_RANK, &n, d);
  if (got < 0) return -1;
  if (!got) {
    if (!from_pass(g, node)) return infer_in_error(d, g, node, "input 1 'shape' is required");
    if (infer_preset_shape(g, node, 0, &out, d)) return -1;
    if (!infer_broadcasts_to(&xs, &out)) {
      char s1[256], s2[256];
      apx_value_shape_str(x, s1, sizeof s1);
      infer_dims_str(out.rank, out.dims, s2, sizeof s2);
      return infer_in_error(d, g, node, "input 0 %s does not broadcast to output 0 %s", s1, s2);
    }
  } else {
    for (int i = 0; i < n; i++)
      if (shape[i] < 0) return apx_node_error(d, g, node, "shape[%d] = %" PRId64 " is negative", i, shape[i]);
    int bad = apx_broadcast_shape(xs.rank, xs.dims, n, shape, &out.rank, out.dims);
    if (bad) {
      char s1[256], s2[256];
      apx_value_shape_str(x, s1, sizeof s1);
      infer_dims_str(n, shape, s2, sizeof s2);
      return infer_in_error(d, g, node, "input 0 %s cannot be expanded to shape %s", s1, s2);
    }
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* ---- Squeeze, Unsqueeze ------------------------------------------------------------- */

/* axes from the attribute (old opsets) or static input 1: 1 read, 0 absent, -1 error */
static int read_axes(ApxGraph *g, int node, int64_t new_opset, int64_t *axes, int *n, ApxDiag *d) {
  if (is_old(g, new_opset)) return infer_attr_ints(g, node, "axes", axes, APX_MAX_RANK, n, d);
  return infer_static_ints(g, node, 1, "axes", axes, APX_MAX_RANK, n, d);
}

static int canon_squeeze(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxes *a = APX_NODE_ATTRS(g, node, ApxAttrAxes);
  const ApxValue *x = infer_in(g, node, 0);
  int64_t axes[APX_MAX_RANK];
  int n, got = read_axes(g, node, 13, axes, &n, d);
  if (got < 0) return -1;
  if (!got) {
    n = 0;
    for (int i = 0; i < x->rank; i++)
      if (x->dims[i] == 1) axes[n++] = i;
  }
  if (infer_norm_axes(g, node, "axes", axes, n, x->rank, d)) return -1;
  for (int i = 0; i < n; i++)
    if (x->dims[axes[i]] != 1)
      return apx_node_error(d, g, node, "cannot squeeze axis %" PRId64 " of size %" PRId64,
                            axes[i], x->dims[axes[i]]);
  memset(a, 0, sizeof *a);
  a->n_axes = n;
  for (int i = 0; i < n; i++) a->axes[i] = axes[i];
  return 0;
}

static int infer_squeeze(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrAxes *a = APX_NODE_ATTRS(g, node, ApxAttrAxes);
  const ApxValue *x = infer_in(g, node, 0);
  int drop[APX_MAX_RANK] = {0};
  for (int i = 0; i < a->n_axes; i++) {
    int64_t ax = a->axes[i];
    if (ax < 0 || ax >= x->rank || x->dims[ax] != 1)
      return apx_node_error(d, g, node, "cannot squeeze axis %" PRId64 " of input 0", ax);
    drop[ax] = 1;
  }
  IShape out = {0, {0}};
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) out.dims[out.rank++] = x->dims[i];
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

static int canon_unsqueeze(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxes *a = APX_NODE_ATTRS(g, node, ApxAttrAxes);
  const ApxValue *x = infer_in(g, node, 0);
  int64_t axes[APX_MAX_RANK];
  int n, got = read_axes(g, node, 13, axes, &n, d);
  if (got < 0) return -1;
  if (!got) return apx_node_error(d, g, node, "axes are required");
  if (x->rank + n > APX_MAX_RANK)
    return apx_node_error(d, g, node, "output rank %d is more than %d", x->rank + n, APX_MAX_RANK);
  if (infer_norm_axes(g, node, "axes", axes, n, x->rank + n, d)) return -1;
  memset(a, 0, sizeof *a);
  a->n_axes = n;
  for (int i = 0; i < n; i++) a->axes[i] = axes[i];
  return 0;
}

static int infer_unsqueeze(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrAxes *a = APX_NODE_ATTRS(g, node, ApxAttrAxes);
  const ApxValue *x = infer_in(g, node, 0);
  int32_t r = x->rank + a->n_axes;
  if (r > APX_MAX_RANK) return apx_node_error(d, g, node, "output rank %d is more than %d", r, APX_MAX_RANK);
  int ins[APX_MAX_RANK] = {0};
  for (int i = 0; i < a->n_axes; i++) {
    if (a->axes[i] < 0 || a->axes[i] >= r || ins[a->axes[i]]++)
      return apx_node_error(d, g, node, "typed axes are not normalized");
  }
  IShape out = {r, {0}};
  for (int i = 0, k = 0; i < r; i++) out.dims[i] = ins[i] ? 1 : x->dims[k++];
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* ---- Concat, Split ------------------------------------------------------------------ */

static int canon_concat(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  int64_t axis;
  if (!apx_node_attr(g, node, "axis")) return apx_node_error(d, g, node, "attribute 'axis' is required");
  if (infer_attr_int(g, node, "axis", 0, &axis, d)) return -1;
  return infer_norm_axis(g, node, "attribute 'axis'", axis, infer_in(g, node, 0)->rank, 0, &a->axis, d);
}

static int infer_concat(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  const ApxNode *n = &g->nodes[node];
  const ApxValue *x0 = infer_in(g, node, 0);
  if (a->axis < 0 || a->axis >= x0->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x0->rank);
  IShape out = infer_shape_of(x0);
  for (int k = 1; k < n->n_in; k++) {
    const ApxValue *v = infer_in(g, node, k);
    if (!v) return infer_in_error(d, g, node, "input %d is missing", k);
    if (infer_same_dtype(g, node, 0, k, d)) return -1;
    IShape want = infer_shape_of(x0);
    if (v->rank == x0->rank) want.dims[a->axis] = v->dims[a->axis];
    if (infer_check_shape(g, node, k, want.rank, want.dims, d)) return -1;
    out.dims[a->axis] += v->dims[a->axis];
  }
  return infer_set_out_shape(g, node, 0, x0->dtype, &out, d);
}

static int canon_split(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrSplit *a = APX_NODE_ATTRS(g, node, ApxAttrSplit);
  int64_t axis, buf[1];
  int n;
  if (infer_attr_int(g, node, "axis", 0, &axis, d)) return -1;
  if (infer_norm_axis(g, node, "attribute 'axis'", axis, infer_in(g, node, 0)->rank, 0, &a->axis, d))
    return -1;
  /* constness of the sizes is checked here, their values in inference */
  const ApxValue *s = infer_in(g, node, 1);
  if (!is_old(g, 13) && s && !infer_is_const(s))
    return infer_static_ints(g, node, 1, "split", buf, 0, &n, d);
  return 0;
}

static int infer_split(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrSplit *a = APX_NODE_ATTRS(g, node, ApxAttrSplit);
  const ApxNode *nd = &g->nodes[node];
  const ApxValue *x = infer_in(g, node, 0);
  if (a->axis < 0 || a->axis >= x->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x->rank);
  int64_t dim = x->dims[a->axis];
  int nout = nd->n_out;
  int64_t sizes[SPLIT_MAX];
  if (nout > SPLIT_MAX) return apx_node_error(d, g, node, "more than %d outputs", SPLIT_MAX);
  int n = 0, got;
  if (is_old(g, 13))
    got = infer_attr_ints(g, node, "split", sizes, SPLIT_MAX, &n, d);
  else
    got = infer_static_ints(g, node, 1, "split", sizes, SPLIT_MAX, &n, d);
  if (got < 0) return -1;
  if (got) {
    if (n != nout)
      return apx_node_error(d, g, node, "split has %d sizes for %d outputs", n, nout);
  } else {
    int all_shaped = from_pass(g, node);
    for (int k = 0; k < nout && all_shaped; k++) all_shaped = infer_out_shaped(g, node, k);
    if (all_shaped) {
      for (int k = 0; k < nout; k++) {
        const ApxValue *o = infer_out(g, node, k);
        if (o->rank != x->rank) return apx_node_error(d, g, node, "output %d has rank %d, input 0 has %d", k, o->rank, x->rank);
        sizes[k] = o->dims[a->axis];
      }
    } else {
      int64_t parts = nout, num_outputs;
      if (infer_attr_int(g, node, "num_outputs", nout, &num_outputs, d)) return -1;
      if (num_outputs != nout)
        return apx_node_error(d, g, node, "attribute 'num_outputs' = %" PRId64 " but the node has %d outputs",
                              num_outputs, nout);
      if (g->opset >= 18) {
        int64_t chunk = (dim + parts - 1) / parts;
        for (int k = 0; k < nout; k++) {
          int64_t left = dim - chunk * k;
          sizes[k] = left < 0 ? 0 : (left < chunk ? left : chunk);
        }
      } else {
        if (dim % parts != 0)
          return apx_node_error(d, g, node, "cannot split dim %" PRId64 " (axis %" PRId64 ") evenly "
                                "into %d outputs", dim, a->axis, nout);
        for (int k = 0; k < nout; k++) sizes[k] = dim / parts;
      }
    }
  }
  int64_t sum = 0;
  for (int k = 0; k < nout; k++) {
    if (sizes[k] < 0) return apx_node_error(d, g, node, "split size %d is negative", k);
    sum += sizes[k];
  }
  if (sum != dim)
    return apx_node_error(d, g, node, "split sizes sum to %" PRId64 ", axis %" PRId64 " has size %" PRId64,
                          sum, a->axis, dim);
  for (int k = 0; k < nout; k++) {
    IShape s = infer_shape_of(x);
    s.dims[a->axis] = sizes[k];
    if (infer_set_out_shape(g, node, k, x->dtype, &s, d)) return -1;
  }
  return 0;
}

/* ---- Slice -------------------------------------------------------------------------- */

typedef struct SliceSpec {
  int32_t rank;
  int64_t starts[APX_MAX_RANK], steps[APX_MAX_RANK], lens[APX_MAX_RANK];
} SliceSpec;

/* Reads starts/ends/axes/steps (inputs, or attributes before opset 10) and normalizes them
 * against input 0's dims. Returns 1 (resolved), 0 (no starts: pass-created) or -1. */
static int slice_resolve(ApxGraph *g, int node, SliceSpec *sp, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  int64_t starts[APX_MAX_RANK], ends[APX_MAX_RANK], axes[APX_MAX_RANK], steps[APX_MAX_RANK];
  int ns, ne, na, nst, got;
  if (is_old(g, 10)) {
    if ((got = infer_attr_ints(g, node, "starts", starts, APX_MAX_RANK, &ns, d)) < 0) return -1;
    if (!got) return apx_node_error(d, g, node, "attribute 'starts' is required");
    if ((got = infer_attr_ints(g, node, "ends", ends, APX_MAX_RANK, &ne, d)) < 0) return -1;
    if (!got) return apx_node_error(d, g, node, "attribute 'ends' is required");
    if ((got = infer_attr_ints(g, node, "axes", axes, APX_MAX_RANK, &na, d)) < 0) return -1;
    if (!got) na = -1;
    nst = -1;
  } else {
    if ((got = infer_static_ints(g, node, 1, "starts", starts, APX_MAX_RANK, &ns, d)) < 0) return -1;
    if (!got) {
      if (from_pass(g, node)) return 0;
      return infer_in_error(d, g, node, "input 1 'starts' is required");
    }
    if ((got = infer_static_ints(g, node, 2, "ends", ends, APX_MAX_RANK, &ne, d)) < 0) return -1;
    if (!got) return infer_in_error(d, g, node, "input 2 'ends' is required");
    if ((got = infer_static_ints(g, node, 3, "axes", axes, APX_MAX_RANK, &na, d)) < 0) return -1;
    if (!got) na = -1;
    if ((got = infer_static_ints(g, node, 4, "steps", steps, APX_MAX_RANK, &nst, d)) < 0) return -1;
    if (!got) nst = -1;
  }
  if (ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
    return apx_node_error(d, g, node, "starts, ends, axes and steps must have the same length "
                          "(%d, %d, %d, %d)", ns, ne, na, nst);
  sp->rank = x->rank;
  for (int i = 0; i < x->rank; i++) {
    sp->starts[i] = 0;
    sp->steps[i] = 1;
    sp->lens[i] = x->dims[i];
  }
  int seen[APX_MAX_RANK] = {0};
  for (int i = 0; i < ns; i++) {
    int64_t ax = na >= 0 ? axes[i] : i;
    if (infer_norm_axis(g, node, "axes", ax, x->rank, 0, &ax, d)) return -1;
    if (seen[ax]++) return apx_node_error(d, g, node, "axes list axis %" PRId64 " twice", ax);
    int64_t step = nst >= 0 ? steps[i] : 1, dim = x->dims[ax];
    if (step == 0) return apx_node_error(d, g, node, "steps[%d] is 0", i);
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s = s < INT64_MIN + dim ? INT64_MIN : s + dim;
    if (e < 0) e = e < INT64_MIN + dim ? INT64_MIN : e + dim;
    int64_t len;
    if (step > 0) {
      s = s < 0 ? 0 : (s > dim ? dim : s);
      e = e < 0 ? 0 : (e > dim ? dim : e);
      len = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = s < 0 ? 0 : (s > dim - 1 ? dim - 1 : s);
      e = e < -1 ? -1 : (e > dim - 1 ? dim - 1 : e);
      len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
      if (dim == 0) s = 0, len = 0;
    }
    sp->starts[ax] = s;
    sp->steps[ax] = step;
    sp->lens[ax] = len;
  }
  return 1;
}

static int canon_slice(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrSlice *a = APX_NODE_ATTRS(g, node, ApxAttrSlice);
  SliceSpec sp;
  int got = slice_resolve(g, node, &sp, d);
  if (got <= 0) return got;
  memset(a, 0, sizeof *a);
  a->rank = sp.rank;
  for (int i = 0; i < sp.rank; i++) {
    a->starts[i] = sp.starts[i];
    a->steps[i] = sp.steps[i];
  }
  return 0;
}

/* Checks that a slice of `lens` with typed starts/steps fits in `dims`. */
static int slice_fits(const ApxAttrSlice *a, int32_t rank, const int64_t *dims, const int64_t *lens) {
  if (a->rank != rank) return 0;
  for (int i = 0; i < rank; i++) {
    if (a->steps[i] == 0 || lens[i] < 0) return 0;
    if (lens[i] == 0) continue;
    int64_t last = a->starts[i] + (lens[i] - 1) * a->steps[i];
    if (a->starts[i] < 0 || a->starts[i] >= dims[i] || last < 0 || last >= dims[i]) return 0;
  }
  return 1;
}

static int infer_slice(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrSlice *a = APX_NODE_ATTRS(g, node, ApxAttrSlice);
  const ApxValue *x = infer_in(g, node, 0);
  SliceSpec sp;
  IShape out;
  int got = slice_resolve(g, node, &sp, d);
  if (got < 0) return -1;
  if (got) {
    out.rank = sp.rank;
    for (int i = 0; i < sp.rank; i++) out.dims[i] = sp.lens[i];
  } else if (infer_preset_shape(g, node, 0, &out, d)) {
    return -1;
  }
  if (!slice_fits(a, x->rank, x->dims, out.dims)) {
    char s1[256], s2[256];
    apx_value_shape_str(x, s1, sizeof s1);
    infer_dims_str(out.rank, out.dims, s2, sizeof s2);
    return apx_node_error(d, g, node, "typed starts/steps do not select %s from input 0 %s", s2, s1);
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* SliceGrad(dY) -> dX: dX shaped by the creating pass (the forward input's shape). */
static int infer_slice_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrSlice *a = APX_NODE_ATTRS(g, node, ApxAttrSlice);
  const ApxValue *dy = infer_in(g, node, 0);
  IShape xs;
  if (infer_preset_shape(g, node, 0, &xs, d)) return -1;
  if (xs.rank != dy->rank || !slice_fits(a, xs.rank, xs.dims, dy->dims)) {
    char s1[256], s2[256];
    apx_value_shape_str(dy, s1, sizeof s1);
    infer_dims_str(xs.rank, xs.dims, s2, sizeof s2);
    return infer_in_error(d, g, node, "input 0 %s is not a slice of output 0 %s with the typed "
                          "starts/steps", s1, s2);
  }
  return infer_set_out_shape(g, node, 0, dy->dtype, &xs, d);
}

/* ---- Gather ------------------------------------------------------------------------- */

static int canon_gather(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  int64_t axis;
  if (infer_attr_int(g, node, "axis", 0, &axis, d)) return -1;
  return infer_norm_axis(g, node, "attribute 'axis'", axis, infer_in(g, node, 0)->rank, 0, &a->axis, d);
}

static int gather_shape(const ApxGraph *g, int node, const IShape *data, int idx_slot, IShape *out,
                        ApxDiag *d) {
  const ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  const ApxValue *idx = infer_in(g, node, idx_slot);
  if (infer_check_dtype(g, node, idx_slot, INFER_DT_INDEX, d)) return -1;
  if (a->axis < 0 || a->axis >= data->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, data->rank);
  int32_t r = data->rank + idx->rank - 1;
  if (r > APX_MAX_RANK) return apx_node_error(d, g, node, "output rank %d is more than %d", r, APX_MAX_RANK);
  out->rank = 0;
  for (int i = 0; i < a->axis; i++) out->dims[out->rank++] = data->dims[i];
  for (int i = 0; i < idx->rank; i++) out->dims[out->rank++] = idx->dims[i];
  for (int i = (int)a->axis + 1; i < data->rank; i++) out->dims[out->rank++] = data->dims[i];
  return 0;
}

static int infer_gather(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  IShape xs = infer_shape_of(x), out;
  if (gather_shape(g, node, &xs, 1, &out, d)) return -1;
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* GatherGrad(dY, Indices) -> dData: dData shaped by the creating pass (the data's shape). */
static int infer_gather_grad(ApxGraph *g, int node, ApxDiag *d) {
  IShape xs, want;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d)) return -1;
  if (infer_preset_shape(g, node, 0, &xs, d)) return -1;
  if (gather_shape(g, node, &xs, 1, &want, d)) return -1;
  if (infer_check_shape(g, node, 0, want.rank, want.dims, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &xs, d);
}

/* ---- reductions --------------------------------------------------------------------- */

static int canon_reduce(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrReduce *a = APX_NODE_ATTRS(g, node, ApxAttrReduce);
  const ApxValue *x = infer_in(g, node, 0);
  int64_t keep, noop, axes[APX_MAX_RANK];
  int n, got;
  int input_form = g->nodes[node].op == APX_OP_ReduceSum ? !is_old(g, 13) : !is_old(g, 18);
  if (infer_attr_int(g, node, "keepdims", 1, &keep, d)) return -1;
  if (infer_attr_int(g, node, "noop_with_empty_axes", 0, &noop, d)) return -1;
  if (input_form)
    got = infer_static_ints(g, node, 1, "axes", axes, APX_MAX_RANK, &n, d);
  else {
    if (infer_in(g, node, 1))
      return apx_node_error(d, g, node, "takes its axes as an attribute before opset %d",
                            g->nodes[node].op == APX_OP_ReduceSum ? 13 : 18);
    got = infer_attr_ints(g, node, "axes", axes, APX_MAX_RANK, &n, d);
  }
  if (got < 0) return -1;
  if (infer_norm_axes(g, node, "axes", axes, n, x->rank, d)) return -1;
  memset(a, 0, sizeof *a);
  a->n_axes = n;
  for (int i = 0; i < n; i++) a->axes[i] = axes[i];
  a->keepdims = keep != 0;
  a->noop_with_empty_axes = noop != 0;
  return 0;
}

static int infer_reduce(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrReduce *a = APX_NODE_ATTRS(g, node, ApxAttrReduce);
  const ApxValue *x = infer_in(g, node, 0);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT | INFER_DT_INDEX | INFER_DT_UINT, d)) return -1;
  int red[APX_MAX_RANK] = {0};
  if (a->n_axes == 0 && !a->noop_with_empty_axes)
    for (int i = 0; i < x->rank; i++) red[i] = 1;
  for (int i = 0; i < a->n_axes; i++) {
    if (a->axes[i] < 0 || a->axes[i] >= x->rank)
      return apx_node_error(d, g, node, "typed axis %" PRId64 " out of range for rank %d", a->axes[i], x->rank);
    red[a->axes[i]] = 1;
  }
  IShape out = {0, {0}};
  for (int i = 0; i < x->rank; i++) {
    if (!red[i])
      out.dims[out.rank++] = x->dims[i];
    else if (a->keepdims)
      out.dims[out.rank++] = 1;
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* ReduceSumTo(X, Like?) -> Y (infer.h). */
static int infer_reduce_sum_to(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0), *like = infer_in(g, node, 1);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT | INFER_DT_INDEX, d)) return -1;
  IShape xs = infer_shape_of(x), s;
  if (like)
    s = infer_shape_of(like);
  else if (infer_preset_shape(g, node, 0, &s, d))
    return -1;
  if (!infer_broadcasts_to(&s, &xs)) {
    char s1[256], s2[256];
    infer_dims_str(s.rank, s.dims, s1, sizeof s1);
    apx_value_shape_str(x, s2, sizeof s2);
    return apx_node_error(d, g, node, "target shape %s does not broadcast to input 0 %s", s1, s2);
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &s, d);
}

/* ---- compile-time ops --------------------------------------------------------------- */

static int canon_shape(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrShape *a = APX_NODE_ATTRS(g, node, ApxAttrShape);
  int64_t r = infer_in(g, node, 0)->rank, s, e;
  if (infer_attr_int(g, node, "start", 0, &s, d)) return -1;
  if (infer_attr_int(g, node, "end", INT64_MAX, &e, d)) return -1;
  if (s < 0) s += r;
  if (e < 0) e += r;
  a->start = s < 0 ? 0 : (s > r ? r : s);
  a->end = e < 0 ? 0 : (e > r ? r : e);
  return 0;
}

static int infer_shape(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrShape *a = APX_NODE_ATTRS(g, node, ApxAttrShape);
  int64_t first, n;
  apx_shape_slice(a->start, a->end, infer_in(g, node, 0)->rank, &first, &n);
  return infer_set_out(g, node, 0, APX_DT_I64, 1, &n, d);
}

int apx_constant_node_value(const ApxGraph *g, int node, ApxTensorConst *t, ApxDiag *d) {
  const ApxNode *n = &g->nodes[node];
  memset(t, 0, sizeof *t);
  if (n->n_attrs != 1)
    return apx_node_error(d, g, node, "needs exactly one value attribute, has %d attributes", n->n_attrs);
  const ApxAttr *a = &n->attrs[0];
  if (strcmp(a->name, "value") == 0 && a->type == APX_ATTR_TENSOR && a->t) {
    *t = *a->t;
  } else if (strcmp(a->name, "value_float") == 0 && a->type == APX_ATTR_FLOAT) {
    t->dtype = APX_DT_F32;
    t->data = (void *)&a->f;
  } else if (strcmp(a->name, "value_int") == 0 && a->type == APX_ATTR_INT) {
    t->dtype = APX_DT_I64;
    t->data = (void *)&a->i;
  } else if (strcmp(a->name, "value_floats") == 0 && a->type == APX_ATTR_FLOATS) {
    t->dtype = APX_DT_F32;
    t->rank = 1;
    t->dims[0] = a->n;
    t->data = a->floats;
  } else if (strcmp(a->name, "value_ints") == 0 && a->type == APX_ATTR_INTS) {
    t->dtype = APX_DT_I64;
    t->rank = 1;
    t->dims[0] = a->n;
    t->data = a->ints;
  } else {
    return apx_node_error(d, g, node, "not supported yet: Constant attribute '%s'", a->name);
  }
  if (!apx_dtype_is_supported(t->dtype))
    return apx_node_error(d, g, node, "not supported yet: Constant of dtype %s", apx_dtype_name(t->dtype));
  return 0;
}

static int infer_constant(ApxGraph *g, int node, ApxDiag *d) {
  ApxTensorConst t;
  if (apx_constant_node_value(g, node, &t, d)) return -1;
  return infer_set_out(g, node, 0, t.dtype, t.rank, t.dims, d);
}

int apx_constant_of_shape_value(const ApxGraph *g, int node, ApxDType *dt, const void **elem, ApxDiag *d) {
  static const float zero = 0.0f;
  const ApxAttr *a = apx_node_attr(g, node, "value");
  *dt = APX_DT_F32;
  *elem = &zero;
  if (!a) return 0;
  if (a->type != APX_ATTR_TENSOR || !a->t)
    return apx_node_error(d, g, node, "attribute 'value' must be a tensor");
  int64_t n = infer_numel(a->t->rank, a->t->dims);
  if (n != 1) return apx_node_error(d, g, node, "attribute 'value' must hold one element, holds %" PRId64, n);
  if (!apx_dtype_is_supported(a->t->dtype))
    return apx_node_error(d, g, node, "not supported yet: attribute 'value' of dtype %s",
                          apx_dtype_name(a->t->dtype));
  *dt = a->t->dtype;
  *elem = a->t->data;
  return 0;
}

static int canon_constant_of_shape(ApxGraph *g, int node, ApxDiag *d) {
  int64_t dims[APX_MAX_RANK];
  int n;
  ApxDType dt;
  const void *elem;
  if (infer_static_ints(g, node, 0, "input", dims, APX_MAX_RANK, &n, d) < 0) return -1;
  return apx_constant_of_shape_value(g, node, &dt, &elem, d);
}

static int infer_constant_of_shape(ApxGraph *g, int node, ApxDiag *d) {
  int64_t dims[APX_MAX_RANK];
  int n;
  ApxDType dt;
  const void *elem;
  if (infer_check_dtype(g, node, 0, INFER_DT_INDEX, d)) return -1;
  if (infer_static_ints(g, node, 0, "input", dims, APX_MAX_RANK, &n, d) < 0) return -1;
  for (int i = 0; i < n; i++)
    if (dims[i] < 0) return apx_node_error(d, g, node, "input[%d] = %" PRId64 " is negative", i, dims[i]);
  if (apx_constant_of_shape_value(g, node, &dt, &elem, d)) return -1;
  return infer_set_out(g, node, 0, dt, n, dims, d);
}

/* Range(start, limit, delta): every input constant; length max(ceil((limit-start)/delta), 0). */
static int range_len(const ApxGraph *g, int node, int64_t *len, ApxDiag *d) {
  static const char *const names[3] = {"start", "limit", "delta"};
  for (int k = 0; k < 3; k++) {
    const ApxValue *v = infer_in(g, node, k);
    if (!infer_is_const(v))
      return apx_node_error(d, g, node, "compile-time only op: its inputs are not constant "
                            "(input %d '%s')", k, v->name);
    if (apx_value_numel(v) != 1 || v->rank > 1)
      return infer_in_error(d, g, node, "input %d '%s' must be a scalar", k, names[k]);
    if (infer_check_dtype(g, node, k, INFER_DT_FLOAT | INFER_DT_SINT, d) || infer_same_dtype(g, node, 0, k, d))
      return -1;
  }
  const ApxValue *s = infer_in(g, node, 0), *l = infer_in(g, node, 1), *dl = infer_in(g, node, 2);
  if (apx_dtype_is_float(s->dtype)) {
    double a = infer_elem_f64(s->data, s->dtype, 0), b = infer_elem_f64(l->data, l->dtype, 0);
    double c = infer_elem_f64(dl->data, dl->dtype, 0);
    if (c == 0.0 || !isfinite(a) || !isfinite(b) || !isfinite(c))
      return apx_node_error(d, g, node, "start, limit and delta must be finite, delta non-zero");
    double n = ceil((b - a) / c);
    if (n > 1e12) return apx_node_error(d, g, node, "range of %g elements is too large", n);
    *len = n > 0 ? (int64_t)n : 0;
  } else {
    int64_t a = infer_elem_i64(s->data, s->dtype, 0), b = infer_elem_i64(l->data, l->dtype, 0);
    int64_t c = infer_elem_i64(dl->data, dl->dtype, 0);
    if (c == 0) return apx_node_error(d, g, node, "delta is 0");
    /* |a|, |b| < 2^63 but their difference may overflow: go through double for the guard */
    if ((double)b - (double)a > 9e18 || (double)b - (double)a < -9e18)
      return apx_node_error(d, g, node, "range is too large");
    int64_t span = b - a;
    int64_t n = c > 0 ? (span > 0 ? (span + c - 1) / c : 0) : (span < 0 ? (-span + (-c) - 1) / (-c) : 0);
    *len = n;
  }
  return 0;
}

static int infer_range(ApxGraph *g, int node, ApxDiag *d) {
  int64_t n;
  if (range_len(g, node, &n, d)) return -1;
  return infer_set_out(g, node, 0, infer_in(g, node, 0)->dtype, 1, &n, d);
}

#define R(OP, MIN_IN, MAX_IN, MIN_OUT, MAX_OUT, CANON, INFER) \
  {APX_OP_##OP, MIN_IN, MAX_IN, MIN_OUT, MAX_OUT, CANON, INFER}

const InferRule apx_infer_rules_shape[] = {
    R(Flatten, 1, 1, 1, 1, canon_flatten, infer_flatten),
    R(Reshape, 1, 2, 1, 1, canon_reshape, infer_reshape),
    R(Transpose, 1, 1, 1, 1, canon_transpose, infer_transpose),
    R(Squeeze, 1, 2, 1, 1, canon_squeeze, infer_squeeze),
    R(Unsqueeze, 1, 2, 1, 1, canon_unsqueeze, infer_unsqueeze),
    R(Identity, 1, 1, 1, 1, NULL, infer_identity),
    R(Concat, 1, -1, 1, 1, canon_concat, infer_concat),
    R(Split, 1, 2, 1, -1, canon_split, infer_split),
    R(Slice, 1, 5, 1, 1, canon_slice, infer_slice),
    R(SliceGrad, 1, 1, 1, 1, NULL, infer_slice_grad),
    R(Gather, 2, 2, 1, 1, canon_gather, infer_gather),
    R(GatherGrad, 2, 2, 1, 1, NULL, infer_gather_grad),
    R(Expand, 1, 2, 1, 1, canon_expand, infer_expand),
    R(ReduceSum, 1, 2, 1, 1, canon_reduce, infer_reduce),
    R(ReduceMean, 1, 2, 1, 1, canon_reduce, infer_reduce),
    R(ReduceSumTo, 1, 2, 1, 1, NULL, infer_reduce_sum_to),
    R(Shape, 1, 1, 1, 1, canon_shape, infer_shape),
    R(Constant, 0, 0, 1, 1, NULL, infer_constant),
    R(ConstantOfShape, 1, 1, 1, 1, canon_constant_of_shape, infer_constant_of_shape),
    R(Range, 3, 3, 1, 1, NULL, infer_range),
    {APX_OP_INVALID, 0, 0, 0, 0, NULL, NULL},
};
