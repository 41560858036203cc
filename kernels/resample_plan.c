/* resample_plan.c - host-side planners of Resize / ResizeGrad and Einsum (resample_plan.h):
 * each checks a kernel's tensors against its attributes for both backends; the Einsum
 * equation parser shared by the loader's canonicalizer. */
#include "kernels/resample_plan.h"

#include <stdio.h>

#include "kernels/shape.h"

#define fail apx_shape_fail

static int float_pair(const ApxTensor *x, const ApxTensor *y, char *err, size_t cap) {
  if (x->dtype != y->dtype)
    return fail(err, cap, "types differ (%s, %s)", apx_dtype_name(x->dtype), apx_dtype_name(y->dtype));
  if (!apx_dtype_is_float(x->dtype))
    return fail(err, cap, "type %s, expected a float type", apx_dtype_name(x->dtype));
  return 0;
}

int apx_resize_plan(const ApxAttrResize *a, const ApxTensor *x, const ApxTensor *y, ApxResizePlan *p,
                    char *err, size_t cap) {
  char sx[96], sy[96];
  if (float_pair(x, y, err, cap)) return APX_SHAPE_BAD;
  if (a->mode != APX_RESIZE_NEAREST && a->mode != APX_RESIZE_LINEAR)
    return fail(err, cap, "mode %d is neither nearest nor linear", a->mode);
  if (a->coord < APX_RESIZE_HALF_PIXEL || a->coord > APX_RESIZE_TF_HALF_PIXEL_FOR_NN)
    return fail(err, cap, "coordinate transformation %d out of range", a->coord);
  if (a->nearest_mode < APX_RESIZE_ROUND_PREFER_FLOOR || a->nearest_mode > APX_RESIZE_CEIL)
    return fail(err, cap, "nearest mode %d out of range", a->nearest_mode);
  if (a->rank != x->rank || y->rank != x->rank)
    return fail(err, cap, "scales for rank %d, input %s, output %s", a->rank, apx_dims_str(x, sx, sizeof sx),
                apx_dims_str(y, sy, sizeof sy));
  memset(p, 0, sizeof *p);
  p->rank = x->rank;
  p->mode = a->mode;
  p->coord = a->coord;
  p->nearest = a->nearest_mode;
  for (int d = 0; d < x->rank; d++) {
    double s = apx_resize_scale(a, d);
    if (!(s > 0.0) || !isfinite(s)) return fail(err, cap, "scale %g of dim %d is not positive", s, d);
    ApxResizeAxis *ax = &p->ax[d];
    ax->in = x->dims[d];
    ax->out = y->dims[d];
    ax->scale = s;
    ax->out_f = s * (double)x->dims[d];
    ax->identity = ax->in == ax->out && fabs(s - 1.0) <= 1e-9;
    if (ax->in == 0 && ax->out > 0)
      return fail(err, cap, "output %s resamples the empty dim %d of input %s", apx_dims_str(y, sy, sizeof sy), d,
                  apx_dims_str(x, sx, sizeof sx));
  }
  apx_dims_strides(x->dims, x->rank, p->xs);
  apx_dims_strides(y->dims, y->rank, p->ys);
  return 0;
}

/* ---- Einsum ---------------------------------------------------------------------------- */

/* Label l's size in term t of tensor x (-1 when t does not name it); -2 when two of its
 * positions there disagree. */
static int64_t label_size(const int64_t *t, int n, const ApxTensor *x, int64_t l) {
  int64_t s = -1;
  for (int i = 0; i < n; i++) {
    if (t[i] != l) continue;
    if (s >= 0 && s != x->dims[i]) return -2;
    s = x->dims[i];
  }
  return s;
}

static int64_t label_stride(const int64_t *t, int n, const ApxTensor *x, int64_t l) {
  int64_t st[APX_MAX_RANK], s = 0;
  apx_dims_strides(x->dims, x->rank, st);
  for (int i = 0; i < n; i++)
    if (t[i] == l) s += st[i];
  return s;
}

static int seen_before(const int64_t *labels, int n, int64_t l) {
  for (int i = 0; i < n; i++)
    if (labels[i] == l) return 1;
  return 0;
}

int apx_einsum_plan(const ApxAttrEinsum *e, const ApxTensor *a, const ApxTensor *b, const ApxTensor *y,
                    ApxEinsumPlan *p, char *err, size_t cap) {
  const ApxTensor *ts[3] = {a, b, y};
  const int64_t *terms[3] = {e->a, e->b, e->y};
  const int ns[3] = {e->n_a, e->n_b, e->n_y};
  static const char *const what[3] = {"input 0", "input 1", "output"};
  if (float_pair(a, y, err, cap) || (b && float_pair(b, y, err, cap))) return APX_SHAPE_BAD;
  if (!b && e->n_b != 0) return fail(err, cap, "the equation has two operands, the call one");
  for (int k = 0; k < 3; k++) {
    if (!ts[k]) continue;
    if (ns[k] < 0 || ns[k] > APX_MAX_RANK || ns[k] != ts[k]->rank)
      return fail(err, cap, "the equation's %s term has %d labels, the tensor rank %d", what[k], ns[k],
                  ts[k]->rank);
  }
  memset(p, 0, sizeof *p);
  int64_t all[APX_EINSUM_MAX_LABELS];
  int n_all = 0;
  for (int k = 0; k < 3; k++)
    for (int i = 0; ts[k] && i < ns[k]; i++)
      if (!seen_before(all, n_all, terms[k][i])) all[n_all++] = terms[k][i];
  for (int j = 0; j < n_all; j++) {
    int64_t l = all[j], size = -1;
    for (int k = 0; k < 3; k++) {
      if (!ts[k]) continue;
      int64_t s = label_size(terms[k], ns[k], ts[k], l);
      if (s == -2 || (s >= 0 && size >= 0 && s != size))
        return fail(err, cap, "label '%c' has two sizes (%s)", (char)l, what[k]);
      if (s >= 0) size = s;
    }
    int64_t sa = label_stride(e->a, e->n_a, a, l), sb = b ? label_stride(e->b, e->n_b, b, l) : 0;
    if (seen_before(e->y, e->n_y, l)) {
      p->fsize[p->nf] = size, p->fa[p->nf] = sa, p->fb[p->nf] = sb;
      p->fy[p->nf++] = label_stride(e->y, e->n_y, y, l);
    } else {
      p->csize[p->nc] = size, p->ca[p->nc] = sa, p->cb[p->nc++] = sb;
    }
  }
  p->n_free = 1;
  for (int j = 0; j < p->nf; j++) p->n_free *= p->fsize[j];
  p->n_con = 1;
  for (int j = 0; j < p->nc; j++) p->n_con *= p->csize[j];
  p->zero_first = p->n_free != apx_tensor_numel(y);
  return 0;
}

static int is_label(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* One term of the equation from s (up to ',' '-' or the end) into t; *n labels. */
static int parse_term(const char **s, int64_t *t, int32_t *n, char *err, size_t cap) {
  *n = 0;
  for (; **s && **s != ',' && **s != '-'; (*s)++) {
    char c = **s;
    if (c == ' ') continue;
    if (c == '.') {
      if (err && cap) snprintf(err, cap, "not supported yet: Einsum with ellipsis ('...')");
      return -2;
    }
    if (!is_label(c)) {
      if (err && cap) snprintf(err, cap, "equation: '%c' is not a letter", c);
      return -1;
    }
    if (*n >= APX_MAX_RANK) {
      if (err && cap) snprintf(err, cap, "equation: a term has more than %d labels", APX_MAX_RANK);
      return -1;
    }
    t[(*n)++] = c;
  }
  return 0;
}

int apx_einsum_parse(const char *eq, ApxAttrEinsum *e, int *n_terms, char *err, size_t cap) {
  memset(e, 0, sizeof *e);
  *n_terms = 0;
  const char *s = eq;
  int64_t scratch[APX_MAX_RANK];
  int32_t ns;
  int rc;
  for (;;) {
    int k = *n_terms;
    int64_t *t = k == 0 ? e->a : k == 1 ? e->b : scratch;
    int32_t *n = k == 0 ? &e->n_a : k == 1 ? &e->n_b : &ns;
    if ((rc = parse_term(&s, t, n, err, cap))) return rc;
    (*n_terms)++;
    if (*s != ',') break;
    s++;
  }
  if (*n_terms > 2) {
    if (err && cap) snprintf(err, cap, "not supported yet: Einsum with %d operands (one or two are)", *n_terms);
    return -2;
  }
  if (*s == '-') {
    if (s[1] != '>') {
      if (err && cap) snprintf(err, cap, "equation: '-' not followed by '>'");
      return -1;
    }
    s += 2;
    if ((rc = parse_term(&s, e->y, &e->n_y, err, cap))) return rc;
    if (*s) {
      if (err && cap) snprintf(err, cap, "equation: unexpected '%c' after the output term", *s);
      return -1;
    }
    for (int i = 0; i < e->n_y; i++) {
      if (seen_before(e->y, i, e->y[i])) {
        if (err && cap) snprintf(err, cap, "equation: output label '%c' repeated", (char)e->y[i]);
        return -1;
      }
      if (!seen_before(e->a, e->n_a, e->y[i]) && !seen_before(e->b, e->n_b, e->y[i])) {
        if (err && cap) snprintf(err, cap, "equation: output label '%c' is in no input term", (char)e->y[i]);
        return -1;
      }
    }
    return 0;
  }
  /* implicit output: the labels that appear exactly once, in alphabetical order (ASCII) */
  for (int c = 'A'; c <= 'z'; c++) {
    if (!is_label((char)c)) continue;
    int cnt = 0;
    for (int i = 0; i < e->n_a; i++) cnt += e->a[i] == c;
    for (int i = 0; i < e->n_b; i++) cnt += e->b[i] == c;
    if (cnt == 1) {
      if (e->n_y >= APX_MAX_RANK) {
        if (err && cap) snprintf(err, cap, "equation: the implicit output has more than %d labels", APX_MAX_RANK);
        return -1;
      }
      e->y[e->n_y++] = c;
    }
  }
  return 0;
}
