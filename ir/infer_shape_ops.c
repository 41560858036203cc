/* infer_shape_ops.c - data-movement and shape ops: Flatten, Reshape, Transpose, Squeeze,
 * Unsqueeze, Identity, Concat, Split, Slice, Gather, Expand, the reductions (ReduceSum,
 * ReduceMean, ReduceSumTo), the compile-time ops (Shape, Constant, ConstantOfShape, Range)
 * and the gradients SliceGrad and GatherGrad; the v1.1 ops Pad, Tile, Trilu,
 * GatherElements, GatherND, ReduceMax, RandomUniformLike, SplitToSequence / SequenceAt and
 * the gradients PadGrad, GatherElementsGrad, GatherNDGrad, ReduceMaxGrad. Static inputs (shape, axes, starts ...) are
 * read from constant values; older opsets' attribute forms are read by g->opset. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/infer_util.h"
#include "kernels/half.h"

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
  unsigned types = g->nodes[node].op == APX_OP_ReduceMax ? INFER_DT_ANY
                                                         : INFER_DT_FLOAT | INFER_DT_INDEX | INFER_DT_UINT;
  if (infer_check_dtype(g, node, 0, types, d)) return -1;
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

/* ---- v1.1: Pad, Tile, Trilu, GatherElements, GatherND, ReduceMax, RandomUniformLike,
 * SplitToSequence / SequenceAt and their gradients ------------------------------------ */

/* A double stored as one element of dtype dt (Pad's constant_value given as an attribute). */
static void store_elem(double v, ApxDType dt, void *out) {
  switch (dt) {
    case APX_DT_F32: { float f = (float)v; memcpy(out, &f, 4); break; }
    case APX_DT_F64: memcpy(out, &v, 8); break;
    case APX_DT_F16: { uint16_t h = apx_f32_to_f16((float)v); memcpy(out, &h, 2); break; }
    case APX_DT_BF16: { uint16_t h = apx_f32_to_bf16((float)v); memcpy(out, &h, 2); break; }
    case APX_DT_BOOL: { uint8_t b = v != 0.0; memcpy(out, &b, 1); break; }
    default: { /* integers: the int64 value, its low bytes (little-endian) */
      int64_t i = (int64_t)v;
      memcpy(out, &i, apx_dtype_size(dt));
      break;
    }
  }
}

static int canon_pad(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrPad *a = APX_NODE_ATTRS(g, node, ApxAttrPad);
  const ApxValue *x = infer_in(g, node, 0);
  int32_t r = x->rank;
  const char *mode;
  if (infer_attr_string(g, node, "mode", "constant", &mode, d)) return -1;
  int32_t m = strcmp(mode, "constant") == 0 ? APX_PAD_CONSTANT
              : strcmp(mode, "reflect") == 0 ? APX_PAD_REFLECT
              : strcmp(mode, "edge") == 0    ? APX_PAD_EDGE : -1;
  if (m < 0 && strcmp(mode, "wrap") == 0)
    return apx_node_error(d, g, node, "not supported yet: Pad mode 'wrap' (constant, reflect and "
                          "edge are)");
  if (m < 0)
    return apx_node_error(d, g, node, "attribute 'mode' = '%s' (expected constant, reflect or edge)", mode);
  int64_t pads[2 * APX_MAX_RANK], axes[APX_MAX_RANK];
  int np = 0, na = -1, got;
  unsigned char value[8] = {0};
  if (is_old(g, 11)) {
    float v;
    if ((got = infer_attr_ints(g, node, "pads", pads, 2 * APX_MAX_RANK, &np, d)) < 0) return -1;
    if (!got) return apx_node_error(d, g, node, "attribute 'pads' is required");
    if (infer_attr_float(g, node, "value", 0.0f, &v, d)) return -1;
    store_elem(v, x->dtype, value);
  } else {
    if ((got = infer_static_ints(g, node, 1, "pads", pads, 2 * APX_MAX_RANK, &np, d)) < 0) return -1;
    if (!got) return infer_in_error(d, g, node, "input 1 'pads' is required");
    const ApxValue *cv = infer_in(g, node, 2);
    if (cv) {
      double v;
      if (infer_static_scalar(g, node, 2, "constant_value", &v, d) < 0) return -1;
      if (cv->dtype == x->dtype)
        memcpy(value, cv->data, apx_dtype_size(x->dtype));
      else
        store_elem(v, x->dtype, value);
    }
    int n_ax;
    if ((got = infer_static_ints(g, node, 3, "axes", axes, APX_MAX_RANK, &n_ax, d)) < 0) return -1;
    if (got) {
      na = n_ax;
      if (infer_norm_axes(g, node, "axes", axes, na, r, d)) return -1;
    }
  }
  /* infer_norm_axes sorted the axes: pads follow the given order, so read them unsorted */
  int64_t order[APX_MAX_RANK];
  int n = na >= 0 ? na : r;
  if (na >= 0) {
    int64_t raw[APX_MAX_RANK];
    int n_raw;
    if (infer_static_ints(g, node, 3, "axes", raw, APX_MAX_RANK, &n_raw, d) < 0) return -1;
    for (int i = 0; i < n_raw; i++) order[i] = raw[i] < 0 ? raw[i] + r : raw[i];
  } else {
    for (int i = 0; i < r; i++) order[i] = i;
  }
  if (np != 2 * n)
    return apx_node_error(d, g, node, "pads has %d values, expected %d (2 x %s %d)", np, 2 * n,
                          na >= 0 ? "axes" : "rank", n);
  memset(a, 0, sizeof *a);
  a->mode = m;
  a->rank = r;
  for (int i = 0; i < n; i++) {
    a->begins[order[i]] = pads[i];
    a->ends[order[i]] = pads[n + i];
  }
  memcpy(&a->value, value, sizeof value);
  return 0;
}

/* Pad / PadGrad shapes: the padded dims of x; -1 with an error when one is negative or an
 * edge / reflect pad reads an empty dim. */
static int pad_shape(ApxGraph *g, int node, const ApxAttrPad *a, const ApxValue *x, IShape *out,
                     ApxDiag *d) {
  if (a->rank != x->rank)
    return apx_node_error(d, g, node, "typed pads have rank %d, the input has rank %d", a->rank, x->rank);
  out->rank = x->rank;
  for (int i = 0; i < x->rank; i++) {
    out->dims[i] = x->dims[i] + a->begins[i] + a->ends[i];
    if (out->dims[i] < 0)
      return apx_node_error(d, g, node, "pads %" PRId64 ", %" PRId64 " crop dim %d of size %" PRId64
                            " below zero", a->begins[i], a->ends[i], i, x->dims[i]);
    if (a->mode != APX_PAD_CONSTANT && x->dims[i] == 0 && out->dims[i] > 0)
      return apx_node_error(d, g, node, "%s padding of the empty dim %d",
                            a->mode == APX_PAD_EDGE ? "edge" : "reflect", i);
  }
  return 0;
}

static int infer_pad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  IShape out;
  if (pad_shape(g, node, APX_NODE_ATTRS(g, node, ApxAttrPad), x, &out, d)) return -1;
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* PadGrad(dY) -> dX: dX shaped by the creating pass (the forward input's shape). */
static int infer_pad_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *dy = infer_in(g, node, 0);
  IShape xs, want;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_preset_shape(g, node, 0, &xs, d)) return -1;
  ApxValue xv = *infer_out(g, node, 0);
  if (pad_shape(g, node, APX_NODE_ATTRS(g, node, ApxAttrPad), &xv, &want, d)) return -1;
  if (infer_check_shape(g, node, 0, want.rank, want.dims, d)) return -1;
  return infer_set_out_shape(g, node, 0, dy->dtype, &xs, d);
}

static int canon_tile(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrTile *a = APX_NODE_ATTRS(g, node, ApxAttrTile);
  int32_t r = infer_in(g, node, 0)->rank;
  int64_t rep[APX_MAX_RANK];
  int n, got = infer_static_ints(g, node, 1, "repeats", rep, APX_MAX_RANK, &n, d);
  if (got < 0) return -1;
  if (!got) return infer_in_error(d, g, node, "input 1 'repeats' is required");
  if (n != r) return apx_node_error(d, g, node, "repeats has %d values, the input has rank %d", n, r);
  memset(a, 0, sizeof *a);
  a->rank = r;
  for (int i = 0; i < r; i++) {
    if (rep[i] < 0) return apx_node_error(d, g, node, "repeats[%d] = %" PRId64 " is negative", i, rep[i]);
    a->repeats[i] = rep[i];
  }
  return 0;
}

static int infer_tile(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrTile *a = APX_NODE_ATTRS(g, node, ApxAttrTile);
  const ApxValue *x = infer_in(g, node, 0);
  if (a->rank != x->rank)
    return apx_node_error(d, g, node, "typed repeats have rank %d, the input has rank %d", a->rank, x->rank);
  IShape out = {x->rank, {0}};
  for (int i = 0; i < x->rank; i++) {
    if (a->repeats[i] < 0) return apx_node_error(d, g, node, "typed repeats[%d] is negative", i);
    if (a->repeats[i] > 0 && x->dims[i] > INT64_MAX / a->repeats[i])
      return apx_node_error(d, g, node, "tiled dim %d overflows", i);
    out.dims[i] = x->dims[i] * a->repeats[i];
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

static int canon_trilu(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrTrilu *a = APX_NODE_ATTRS(g, node, ApxAttrTrilu);
  int64_t upper, k[1] = {0};
  int n;
  if (infer_attr_int(g, node, "upper", 1, &upper, d)) return -1;
  if (upper != 0 && upper != 1) return apx_node_error(d, g, node, "attribute 'upper' must be 0 or 1");
  int got = infer_static_ints(g, node, 1, "k", k, 1, &n, d);
  if (got < 0) return -1;
  if (got && n != 1) return infer_in_error(d, g, node, "input 1 'k' must hold one value, holds %d", n);
  a->upper = (int32_t)upper;
  a->k = k[0];
  return 0;
}

static int infer_trilu(ApxGraph *g, int node, ApxDiag *d) {
  if (infer_check_rank(g, node, 0, 2, APX_MAX_RANK, d)) return -1;
  return infer_set_out_like(g, node, 0, 0, d);
}

static int canon_gather_elements(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  int64_t axis;
  if (infer_attr_int(g, node, "axis", 0, &axis, d)) return -1;
  return infer_norm_axis(g, node, "attribute 'axis'", axis, infer_in(g, node, 0)->rank, 0, &a->axis, d);
}

/* GatherElements shapes: indices (slot idx_slot) fit data (shape ds) along axis. */
static int gather_elements_check(ApxGraph *g, int node, const IShape *ds, int idx_slot, ApxDiag *d) {
  const ApxAttrAxis *a = APX_NODE_ATTRS(g, node, ApxAttrAxis);
  const ApxValue *idx = infer_in(g, node, idx_slot);
  if (infer_check_dtype(g, node, idx_slot, INFER_DT_INDEX, d)) return -1;
  if (a->axis < 0 || a->axis >= ds->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, ds->rank);
  int ok = idx->rank == ds->rank;
  for (int i = 0; ok && i < ds->rank; i++) ok = i == a->axis || idx->dims[i] <= ds->dims[i];
  if (!ok) {
    char s1[256], s2[256];
    apx_value_shape_str(idx, s1, sizeof s1);
    infer_dims_str(ds->rank, ds->dims, s2, sizeof s2);
    return infer_in_error(d, g, node, "input %d 'indices' %s does not fit data %s (same rank, every dim "
                          "but axis %" PRId64 " at most data's)", idx_slot, s1, s2, a->axis);
  }
  return 0;
}

static int infer_gather_elements(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  IShape xs = infer_shape_of(x);
  if (gather_elements_check(g, node, &xs, 1, d)) return -1;
  IShape out = infer_shape_of(infer_in(g, node, 1));
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* GatherElementsGrad(dY, indices) -> dData (shaped by the creating pass). */
static int infer_gather_elements_grad(ApxGraph *g, int node, ApxDiag *d) {
  IShape ds;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_preset_shape(g, node, 0, &ds, d)) return -1;
  if (gather_elements_check(g, node, &ds, 1, d)) return -1;
  const ApxValue *idx = infer_in(g, node, 1);
  if (infer_check_shape(g, node, 0, idx->rank, idx->dims, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &ds, d);
}

static int canon_gather_nd(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrGatherND *a = APX_NODE_ATTRS(g, node, ApxAttrGatherND);
  int64_t b;
  if (infer_attr_int(g, node, "batch_dims", 0, &b, d)) return -1;
  a->batch_dims = b;
  return 0;
}

/* GatherND's output shape from data's shape ds and the indices (slot idx_slot). */
static int gather_nd_shape(ApxGraph *g, int node, const IShape *ds, int idx_slot, IShape *out, ApxDiag *d) {
  int64_t b = APX_NODE_ATTRS(g, node, ApxAttrGatherND)->batch_dims;
  const ApxValue *idx = infer_in(g, node, idx_slot);
  if (infer_check_dtype(g, node, idx_slot, INFER_DT_INDEX, d)) return -1;
  int32_t r = ds->rank, q = idx->rank;
  char s1[256], s2[256];
  apx_value_shape_str(idx, s1, sizeof s1);
  infer_dims_str(r, ds->dims, s2, sizeof s2);
  if (q < 1 || b < 0 || b >= q || b >= r)
    return apx_node_error(d, g, node, "batch_dims = %" PRId64 " does not fit data %s and indices %s", b, s2, s1);
  int64_t m = idx->dims[q - 1];
  if (m < 1 || m > r - b)
    return infer_in_error(d, g, node, "input %d 'indices' %s: the last dim must be in [1, %" PRId64
                          "] for data %s", idx_slot, s1, r - b, s2);
  for (int i = 0; i < b; i++)
    if (idx->dims[i] != ds->dims[i])
      return infer_in_error(d, g, node, "input %d 'indices' %s: batch dim %d differs from data %s",
                            idx_slot, s1, i, s2);
  out->rank = 0;
  if (q - 1 + r - b - m > APX_MAX_RANK)
    return apx_node_error(d, g, node, "output rank is more than %d", APX_MAX_RANK);
  for (int i = 0; i < q - 1; i++) out->dims[out->rank++] = idx->dims[i];
  for (int64_t i = b + m; i < r; i++) out->dims[out->rank++] = ds->dims[i];
  return 0;
}

static int infer_gather_nd(ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *x = infer_in(g, node, 0);
  IShape xs = infer_shape_of(x), out;
  if (gather_nd_shape(g, node, &xs, 1, &out, d)) return -1;
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

/* GatherNDGrad(dY, indices) -> dData (shaped by the creating pass). */
static int infer_gather_nd_grad(ApxGraph *g, int node, ApxDiag *d) {
  IShape ds, want;
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_preset_shape(g, node, 0, &ds, d)) return -1;
  if (gather_nd_shape(g, node, &ds, 1, &want, d)) return -1;
  if (infer_check_shape(g, node, 0, want.rank, want.dims, d)) return -1;
  return infer_set_out_shape(g, node, 0, infer_in(g, node, 0)->dtype, &ds, d);
}

/* ReduceMaxGrad(dY, X, Y) -> dX of X's dtype and shape; dY and Y of the reduced shape. */
static int infer_reduce_max_grad(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrReduce *a = APX_NODE_ATTRS(g, node, ApxAttrReduce);
  const ApxValue *x = infer_in(g, node, 1);
  if (infer_check_dtype(g, node, 0, INFER_DT_FLOAT, d) || infer_same_dtype(g, node, 0, 1, d) ||
      infer_same_dtype(g, node, 0, 2, d))
    return -1;
  int64_t n = 1;
  int red[APX_MAX_RANK] = {0};
  for (int i = 0; i < a->n_axes; i++)
    if (a->axes[i] >= 0 && a->axes[i] < x->rank) red[a->axes[i]] = 1;
  for (int i = 0; i < x->rank; i++)
    if (!(red[i] || (a->n_axes == 0 && !a->noop_with_empty_axes))) n *= x->dims[i];
  for (int k = 0; k < 3; k += 2)
    if (apx_value_numel(infer_in(g, node, k)) != n)
      return infer_in_error(d, g, node, "input %d has %" PRId64 " elements, the reduction of input 1 has %"
                            PRId64, k, apx_value_numel(infer_in(g, node, k)), n);
  return infer_set_out_like(g, node, 0, 1, d);
}

static int canon_random_uniform_like(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrRandomUniform *a = APX_NODE_ATTRS(g, node, ApxAttrRandomUniform);
  if (infer_attrs_from_fields(g, node, d)) return -1;
  if (a->dtype == APX_DT_UNDEFINED) a->dtype = (int32_t)infer_in(g, node, 0)->dtype;
  if (!apx_dtype_is_float((ApxDType)a->dtype))
    return apx_node_error(d, g, node, "output type %s: RandomUniformLike draws float types (set "
                          "attribute 'dtype')", apx_dtype_name((ApxDType)a->dtype));
  a->has_seed = apx_node_attr(g, node, "seed") != NULL;
  a->rng_stream = node;
  return 0;
}

static int infer_random_uniform_like(ApxGraph *g, int node, ApxDiag *d) {
  const ApxAttrRandomUniform *a = APX_NODE_ATTRS(g, node, ApxAttrRandomUniform);
  IShape s = infer_shape_of(infer_in(g, node, 0));
  if (!apx_dtype_is_float((ApxDType)a->dtype))
    return apx_node_error(d, g, node, "typed dtype %d is not a float type", a->dtype);
  return infer_set_out_shape(g, node, 0, (ApxDType)a->dtype, &s, d);
}

static int canon_split_to_sequence(ApxGraph *g, int node, ApxDiag *d) {
  ApxAttrSplitToSequence *a = APX_NODE_ATTRS(g, node, ApxAttrSplitToSequence);
  int64_t axis, keep;
  if (infer_attr_int(g, node, "axis", 0, &axis, d) || infer_attr_int(g, node, "keepdims", 1, &keep, d))
    return -1;
  if (keep != 0 && keep != 1) return apx_node_error(d, g, node, "attribute 'keepdims' must be 0 or 1");
  a->keepdims = (int32_t)keep;
  return infer_norm_axis(g, node, "attribute 'axis'", axis, infer_in(g, node, 0)->rank, 0, &a->axis, d);
}

int apx_split_to_sequence_pieces(const ApxGraph *g, int node, int64_t *sizes, int cap, int *n,
                                 int *squeeze, ApxDiag *d) {
  const ApxAttrSplitToSequence *a = APX_NODE_ATTRS(g, node, ApxAttrSplitToSequence);
  const ApxValue *x = infer_in(g, node, 0), *s = infer_in(g, node, 1);
  if (a->axis < 0 || a->axis >= x->rank)
    return apx_node_error(d, g, node, "typed attribute axis = %" PRId64 " out of range for rank %d",
                          a->axis, x->rank);
  int64_t dim = x->dims[a->axis], chunk = 1;
  *squeeze = 0;
  *n = 0;
  if (s && s->rank == 1) {
    int got = infer_static_ints(g, node, 1, "split", sizes, cap, n, d);
    if (got < 0) return -1;
    int64_t sum = 0;
    for (int k = 0; k < *n; k++) {
      if (sizes[k] < 0) return apx_node_error(d, g, node, "split size %d is negative", k);
      sum += sizes[k];
    }
    if (sum != dim)
      return apx_node_error(d, g, node, "split sizes sum to %" PRId64 ", axis %" PRId64 " has size %"
                            PRId64, sum, a->axis, dim);
    return 0;
  }
  if (s) {
    int m, got = infer_static_ints(g, node, 1, "split", &chunk, 1, &m, d);
    if (got < 0) return -1;
    if (chunk <= 0) return apx_node_error(d, g, node, "split = %" PRId64 " must be positive", chunk);
  } else {
    *squeeze = !a->keepdims;
  }
  int64_t pieces = dim == 0 ? 0 : (dim + chunk - 1) / chunk;
  if (pieces > cap)
    return apx_node_error(d, g, node, "not supported yet: a sequence of %" PRId64 " pieces (at most %d)",
                          pieces, cap);
  for (int64_t k = 0; k < pieces; k++) sizes[k] = dim - k * chunk < chunk ? dim - k * chunk : chunk;
  *n = (int)pieces;
  return 0;
}

/* The sequence stands for its pieces joined along axis: the input's dtype and shape (the
 * rewrite into Split needs every use to be a SequenceAt). */
static int infer_split_to_sequence(ApxGraph *g, int node, ApxDiag *d) {
  int seq = g->nodes[node].out[0];
  if (g->vals[seq].flags & APX_VALF_GRAPH_OUTPUT)
    return apx_node_error(d, g, node, "not supported yet: the sequence '%s' is a graph output (apexc "
                          "has no sequence values)", g->vals[seq].name);
  for (int k = 0; k < g->n_nodes; k++) {
    const ApxNode *c = &g->nodes[k];
    if (c->flags & APX_NODEF_DEAD) continue;
    for (int i = 0; i < c->n_in; i++)
      if (c->in[i] == seq && (c->op != APX_OP_SequenceAt || i != 0))
        return apx_node_error(d, g, node, "not supported yet: the sequence '%s' is used by node '%s' "
                              "(%s); apexc has no sequence values, only SequenceAt with a constant "
                              "position may read one", g->vals[seq].name, c->name,
                              c->op_type ? c->op_type : apx_op_name(c->op));
  }
  int64_t sizes[SPLIT_MAX];
  int n, squeeze;
  if (apx_split_to_sequence_pieces(g, node, sizes, SPLIT_MAX, &n, &squeeze, d)) return -1;
  return infer_set_out_like(g, node, 0, 0, d);
}

/* The SplitToSequence node producing SequenceAt's input, -1 with an error. */
static int sequence_producer(const ApxGraph *g, int node, ApxDiag *d) {
  const ApxValue *s = infer_in(g, node, 0);
  int p = s->producer;
  if (p < 0 || g->nodes[p].op != APX_OP_SplitToSequence || (g->nodes[p].flags & APX_NODEF_DEAD))
    return infer_in_error(d, g, node, "input 0 '%s': not supported yet: a sequence not made by "
                          "SplitToSequence (apexc has no sequence values)", s->name);
  return p;
}

static int canon_sequence_at(ApxGraph *g, int node, ApxDiag *d) {
  int p = sequence_producer(g, node, d);
  if (p < 0) return -1;
  int64_t pos[1], sizes[SPLIT_MAX];
  int n, squeeze, got = infer_static_ints(g, node, 1, "position", pos, 1, &n, d);
  if (got < 0) return -1;
  if (!got || n != 1) return infer_in_error(d, g, node, "input 1 'position' must hold one value");
  if (apx_split_to_sequence_pieces(g, p, sizes, SPLIT_MAX, &n, &squeeze, d)) return -1;
  if (pos[0] < -n || pos[0] >= n)
    return apx_node_error(d, g, node, "position %" PRId64 " is outside the sequence of %d pieces", pos[0], n);
  APX_NODE_ATTRS(g, node, ApxAttrSequenceAt)->position = pos[0] < 0 ? pos[0] + n : pos[0];
  return 0;
}

static int infer_sequence_at(ApxGraph *g, int node, ApxDiag *d) {
  int p = sequence_producer(g, node, d);
  if (p < 0) return -1;
  int64_t sizes[SPLIT_MAX], pos = APX_NODE_ATTRS(g, node, ApxAttrSequenceAt)->position;
  int n, squeeze;
  if (apx_split_to_sequence_pieces(g, p, sizes, SPLIT_MAX, &n, &squeeze, d)) return -1;
  if (pos < 0 || pos >= n)
    return apx_node_error(d, g, node, "typed position %" PRId64 " outside the sequence of %d pieces", pos, n);
  const ApxValue *x = infer_in(g, p, 0);
  int64_t axis = APX_NODE_ATTRS(g, p, ApxAttrSplitToSequence)->axis;
  IShape out = {0, {0}};
  for (int i = 0; i < x->rank; i++) {
    if (i == axis && squeeze) continue;
    out.dims[out.rank++] = i == axis ? sizes[pos] : x->dims[i];
  }
  return infer_set_out_shape(g, node, 0, x->dtype, &out, d);
}

#define R(OP, CANON, INFER) {APX_OP_##OP, CANON, INFER}

const InferRule apx_infer_rules_shape[] = {
    R(Flatten, canon_flatten, infer_flatten),
    R(Reshape, canon_reshape, infer_reshape),
    R(Transpose, canon_transpose, infer_transpose),
    R(Squeeze, canon_squeeze, infer_squeeze),
    R(Unsqueeze, canon_unsqueeze, infer_unsqueeze),
    R(Identity, NULL, infer_identity),
    R(Concat, canon_concat, infer_concat),
    R(Split, canon_split, infer_split),
    R(Slice, canon_slice, infer_slice),
    R(SliceGrad, NULL, infer_slice_grad),
    R(Gather, canon_gather, infer_gather),
    R(GatherGrad, NULL, infer_gather_grad),
    R(Expand, canon_expand, infer_expand),
    R(ReduceSum, canon_reduce, infer_reduce),
    R(ReduceMean, canon_reduce, infer_reduce),
    R(ReduceSumTo, NULL, infer_reduce_sum_to),
    R(Shape, canon_shape, infer_shape),
    R(Constant, NULL, infer_constant),
    R(ConstantOfShape, canon_constant_of_shape, infer_constant_of_shape),
    R(Range, NULL, infer_range),
    /* v1.1: data movement, indexing and reductions */
    R(Pad, canon_pad, infer_pad),
    R(PadGrad, NULL, infer_pad_grad),
    R(Tile, canon_tile, infer_tile),
    R(Trilu, canon_trilu, infer_trilu),
    R(GatherElements, canon_gather_elements, infer_gather_elements),
    R(GatherElementsGrad, NULL, infer_gather_elements_grad),
    R(GatherND, canon_gather_nd, infer_gather_nd),
    R(GatherNDGrad, NULL, infer_gather_nd_grad),
    R(ReduceMax, canon_reduce, infer_reduce),
    R(ReduceMaxGrad, NULL, infer_reduce_max_grad),
    R(RandomUniformLike, canon_random_uniform_like, infer_random_uniform_like),
    R(SplitToSequence, canon_split_to_sequence, infer_split_to_sequence),
    R(SequenceAt, canon_sequence_at, infer_sequence_at),
    {APX_OP_INVALID, NULL, NULL},
};
