/* grad_rules_shape.c - gradient rules of the data-movement and reduction ops: the
 * gradient moves back the way the data came (Reshape back, inverse Transpose, Split for
 * Concat, Concat for Split, SliceGrad / GatherGrad scatters, Expand for reductions; v1.1:
 * PadGrad, Tile's sum of tiles, Trilu's mask, GatherElementsGrad / GatherNDGrad scatters,
 * ReduceMaxGrad, nothing through RandomUniformLike). */
#include "passes/grad_rules.h"

#include <stdlib.h>
#include <string.h>

/* Flatten, Reshape, Squeeze, Unsqueeze: element order unchanged */
GRAD_RULE(Reshape) {
  if (!gr_need(c, 0)) return 0;
  return (c->dx[0] = gr_reshape(c, c->dy[0], gr_in(c, 0))) < 0 ? -1 : 0;
}

GRAD_RULE(Transpose) {
  if (!gr_need(c, 0)) return 0;
  const ApxAttrTranspose *fw = gr_attrs(c);
  ApxAttrTranspose inv = {.rank = fw->rank};
  for (int i = 0; i < fw->rank; i++) inv.perm[fw->perm[i]] = i;
  return (c->dx[0] = gr_op(c, APX_OP_Transpose, &inv, 1, &c->dy[0])) < 0 ? -1 : 0;
}

/* Concat(x_0 .. x_{n-1}) along axis: dY split back into pieces shaped like the inputs */
GRAD_RULE(Concat) {
  int n = gr_n_in(c);
  int *out = calloc((size_t)n, sizeof *out);
  if (!out) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", c->g->file);
  int rc = 0;
  for (int k = 0; k < n && rc == 0; k++) {
    ApxValue shape = *gr_val(c, gr_in(c, k));
    rc = (out[k] = gr_new_value(c, shape.dtype, shape.rank, shape.dims)) < 0 ? -1 : 0;
  }
  ApxAttrSplit at = {.axis = ((const ApxAttrAxis *)gr_attrs(c))->axis};
  if (rc == 0 && gr_node(c, APX_OP_Split, &at, 1, &c->dy[0], n, out) < 0) rc = -1;
  for (int k = 0; k < n && rc == 0; k++) c->dx[k] = gr_need(c, k) ? out[k] : -1;
  free(out);
  return rc;
}

/* Split(x) -> y_0 .. y_{n-1}: dX = Concat of the outputs' gradients (zeros where none) */
GRAD_RULE(Split) {
  if (!gr_need(c, 0)) return 0;
  int n = gr_n_out(c);
  int *in = calloc((size_t)n, sizeof *in);
  if (!in) return apx_diag_error(c->d, APX_EXIT_RUNTIME, "%s: out of memory", c->g->file);
  int rc = 0;
  for (int k = 0; k < n && rc == 0; k++) {
    in[k] = c->dy[k];
    if (in[k] < 0 && (in[k] = gr_zeros(c, gr_out(c, k))) < 0) rc = -1;
  }
  ApxAttrAxis at = {.axis = ((const ApxAttrSplit *)gr_attrs(c))->axis};
  if (rc == 0 && (c->dx[0] = gr_op(c, APX_OP_Concat, &at, n, in)) < 0) rc = -1;
  free(in);
  return rc;
}

GRAD_RULE(Slice) {
  if (!gr_need(c, 0)) return 0;
  int dy = c->dy[0];
  c->dx[0] = gr_op_like(c, APX_OP_SliceGrad, gr_attrs(c), 1, &dy, gr_in(c, 0), gr_val(c, dy)->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

/* Gather(data, indices): scatter-add dY into zeros shaped like data */
GRAD_RULE(Gather) {
  if (!gr_need(c, 0)) return 0;
  int in[2] = {c->dy[0], gr_in(c, 1)};
  c->dx[0] = gr_op_like(c, APX_OP_GatherGrad, gr_attrs(c), 2, in, gr_in(c, 0),
                        gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

GRAD_RULE(Expand) {
  if (!gr_need(c, 0)) return 0;
  return (c->dx[0] = gr_sum_to(c, c->dy[0], gr_in(c, 0))) < 0 ? -1 : 0;
}

/* Reductions: dY (viewed with the reduced dims kept as 1) broadcast back to X's shape,
 * times 1/count for the mean. */
static int reduce_grad(GradCtx *c, int mean) {
  if (!gr_need(c, 0)) return 0;
  const ApxAttrReduce at = *(const ApxAttrReduce *)gr_attrs(c);
  int x = gr_in(c, 0), dy = c->dy[0];
  if (at.n_axes == 0 && at.noop_with_empty_axes) {
    c->dx[0] = dy;
    return 0;
  }
  ApxValue vx = *gr_val(c, x);
  int64_t kept[APX_MAX_RANK];
  int64_t count = 1;
  for (int i = 0; i < vx.rank; i++) {
    int reduced = at.n_axes == 0;
    for (int k = 0; k < at.n_axes; k++) reduced |= at.axes[k] == i;
    kept[i] = reduced ? 1 : vx.dims[i];
    if (reduced) count *= vx.dims[i];
  }
  int t = dy;
  if (mean && count != 1) {
    int s = gr_scalar(c, 1.0 / (double)count, gr_val(c, dy)->dtype);
    if (s < 0 || (t = gr_op2(c, APX_OP_Mul, dy, s)) < 0) return -1;
  }
  if ((t = gr_reshape_shape(c, t, vx.rank, kept)) < 0) return -1;
  if (gr_val(c, t)->rank == vx.rank && apx_value_numel(gr_val(c, t)) == apx_value_numel(&vx)) {
    c->dx[0] = t;
    return 0;
  }
  c->dx[0] = gr_op_like(c, APX_OP_Expand, NULL, 1, &t, x, gr_val(c, t)->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

GRAD_RULE(ReduceSum) { return reduce_grad(c, 0); }
GRAD_RULE(ReduceMean) { return reduce_grad(c, 1); }

/* ---- v1.1: data movement, indexing and reductions ---------------------------------- */

/* Pad: PadGrad sums dY back onto the elements each output element read (edge and reflect
 * read some input elements several times; cropped elements get zero). */
GRAD_RULE(Pad) {
  if (!gr_need(c, 0)) return 0;
  c->dx[0] = gr_op_like(c, APX_OP_PadGrad, gr_attrs(c), 1, &c->dy[0], gr_in(c, 0),
                        gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

/* Tile: the sum of the tiles. dY (r_0 n_0, ..., r_k n_k) is viewed as (r_0, n_0, ...) with a
 * repeat axis before every dim tiled more than once, and those axes are summed away. */
GRAD_RULE(Tile) {
  if (!gr_need(c, 0)) return 0;
  const ApxAttrTile at = *(const ApxAttrTile *)gr_attrs(c);
  int x = gr_in(c, 0), dy = c->dy[0];
  ApxValue vx = *gr_val(c, x);
  int64_t dims[2 * APX_MAX_RANK];
  ApxAttrReduce red;
  memset(&red, 0, sizeof red);
  int r2 = 0;
  for (int i = 0; i < vx.rank; i++) {
    if (at.repeats[i] == 0) return (c->dx[0] = gr_zeros(c, x)) < 0 ? -1 : 0; /* nothing tiled */
    if (at.repeats[i] > 1) {
      red.axes[red.n_axes++] = r2;
      dims[r2++] = at.repeats[i];
    }
    dims[r2++] = vx.dims[i];
  }
  if (red.n_axes == 0) return (c->dx[0] = dy) < 0 ? -1 : 0; /* every repeat 1: the identity */
  if (r2 > APX_MAX_RANK)
    return gr_unsupported(c, "the gradient of a Tile whose (repeat, dim) view has more than 8 dims");
  int t = gr_reshape_shape(c, dy, r2, dims);
  if (t < 0) return -1;
  red.keepdims = 0;
  c->dx[0] = gr_op(c, APX_OP_ReduceSum, &red, 1, &t);
  return c->dx[0] < 0 ? -1 : 0;
}

/* Trilu: the same mask on dY. */
GRAD_RULE(Trilu) {
  if (!gr_need(c, 0)) return 0;
  c->dx[0] = gr_op(c, APX_OP_Trilu, gr_attrs(c), 1, &c->dy[0]);
  return c->dx[0] < 0 ? -1 : 0;
}

/* GatherElements(data, indices): dY scatter-added into zeros shaped like data. */
GRAD_RULE(GatherElements) {
  if (!gr_need(c, 0)) return 0;
  int in[2] = {c->dy[0], gr_in(c, 1)};
  c->dx[0] = gr_op_like(c, APX_OP_GatherElementsGrad, gr_attrs(c), 2, in, gr_in(c, 0),
                        gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

/* GatherND(data, indices): dY's slices scatter-added into zeros shaped like data. */
GRAD_RULE(GatherND) {
  if (!gr_need(c, 0)) return 0;
  int in[2] = {c->dy[0], gr_in(c, 1)};
  c->dx[0] = gr_op_like(c, APX_OP_GatherNDGrad, gr_attrs(c), 2, in, gr_in(c, 0),
                        gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

/* ReduceMax: PyTorch's amax rule (ties share evenly), ReduceMaxGrad(dY, X, Y). */
GRAD_RULE(ReduceMax) {
  if (!gr_need(c, 0)) return 0;
  const ApxAttrReduce *at = gr_attrs(c);
  if (at->n_axes == 0 && at->noop_with_empty_axes) return (c->dx[0] = c->dy[0]) < 0 ? -1 : 0;
  int in[3] = {c->dy[0], gr_in(c, 0), gr_out(c, 0)};
  c->dx[0] = gr_op_like(c, APX_OP_ReduceMaxGrad, at, 3, in, gr_in(c, 0), gr_val(c, c->dy[0])->dtype);
  return c->dx[0] < 0 ? -1 : 0;
}

/* RandomUniformLike: its output does not depend on the input's values (no contribution). */
GRAD_RULE(RandomUniformLike) {
  (void)c;
  return 0;
}
