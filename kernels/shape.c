/* shape.c - host-side shape planning shared by every backend (shape.h). */
#include "kernels/shape.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail_rc(int rc, char *err, size_t cap, const char *fmt, va_list ap) {
  if (err && cap) vsnprintf(err, cap, fmt, ap);
  return rc;
}

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = fail_rc(APX_SHAPE_BAD, err, cap, fmt, ap);
  va_end(ap);
  return rc;
}

static int unsupported(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int unsupported(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = fail_rc(APX_SHAPE_UNSUPPORTED, err, cap, fmt, ap);
  va_end(ap);
  return rc;
}

int apx_same_dims(const ApxTensor *a, const ApxTensor *b) {
  if (a->rank != b->rank) return 0;
  for (int32_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

const char *apx_dims_str(const ApxTensor *t, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int32_t i = 0; i < t->rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, i ? ",%lld" : "%lld", (long long)t->dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

/* ---- broadcasting ------------------------------------------------------------------ */

int apx_broadcasts_to(int32_t rs, const int64_t *s, int32_t rb, const int64_t *b) {
  if (rs > rb) return 0;
  for (int32_t i = 0; i < rs; i++)
    if (!apx_dim_broadcasts(s[rs - 1 - i], b[rb - 1 - i])) return 0;
  return 1;
}

int apx_broadcast_shape(int32_t ra, const int64_t *a, int32_t rb, const int64_t *b, int32_t *ro,
                        int64_t *out) {
  int32_t r = ra > rb ? ra : rb;
  int64_t tmp[APX_MAX_RANK];
  if (r > APX_MAX_RANK) return r;
  for (int32_t i = 0; i < r; i++) {
    int64_t x = i < r - ra ? 1 : a[i - (r - ra)];
    int64_t y = i < r - rb ? 1 : b[i - (r - rb)];
    if (apx_dim_broadcasts(y, x))
      tmp[i] = x;
    else if (apx_dim_broadcasts(x, y))
      tmp[i] = y;
    else
      return r - i;
  }
  for (int32_t i = 0; i < r; i++) out[i] = tmp[i];
  *ro = r;
  return 0;
}

int apx_bcast_init(ApxBcast *b, int32_t out_rank, const int64_t *out_dims, int32_t n_in,
                   const int32_t *in_ranks, const int64_t (*in_dims)[APX_MAX_RANK], int *bad) {
  int64_t st[APX_BCAST_MAX_IN][APX_MAX_RANK];
  memset(b, 0, sizeof *b);
  if (n_in < 0 || n_in > APX_BCAST_MAX_IN || out_rank < 0 || out_rank > APX_MAX_RANK) {
    if (bad) *bad = 0;
    return -1;
  }
  b->n_in = n_in;
  for (int32_t k = 0; k < n_in; k++) {
    int32_t r = in_ranks[k];
    int64_t cs[APX_MAX_RANK];
    if (r > out_rank || r < 0) {
      if (bad) *bad = k;
      return -1;
    }
    apx_dims_strides(in_dims[k], r, cs);
    for (int32_t d = 0; d < out_rank; d++) {
      int32_t id = d - (out_rank - r);
      if (id < 0) {
        st[k][d] = 0;
        continue;
      }
      int64_t dim = in_dims[k][id];
      if (!apx_dim_broadcasts(dim, out_dims[d])) {
        if (bad) *bad = k;
        return -1;
      }
      st[k][d] = dim == 1 ? 0 : cs[id];
    }
  }
  /* collapse: drop size-1 output dims, merge neighbours contiguous in every input */
  int32_t n = 0;
  for (int32_t d = 0; d < out_rank; d++) {
    if (out_dims[d] == 1) continue;
    int merge = n > 0;
    for (int32_t k = 0; k < n_in && merge; k++)
      if (b->strides[k][n - 1] != st[k][d] * out_dims[d]) merge = 0;
    if (merge) {
      b->dims[n - 1] *= out_dims[d];
      for (int32_t k = 0; k < n_in; k++) b->strides[k][n - 1] = st[k][d];
    } else {
      b->dims[n] = out_dims[d];
      for (int32_t k = 0; k < n_in; k++) b->strides[k][n] = st[k][d];
      n++;
    }
  }
  b->rank = n;
  b->numel = apx_dims_prod(b->dims, 0, n);
  b->inner = n ? b->dims[n - 1] : 1;
  return 0;
}

int apx_bcast_init_t(ApxBcast *b, const ApxTensor *out, const ApxTensor *const *ins, int32_t n_in,
                     int *bad) {
  int32_t ranks[APX_BCAST_MAX_IN];
  int64_t dims[APX_BCAST_MAX_IN][APX_MAX_RANK];
  if (n_in > APX_BCAST_MAX_IN) n_in = APX_BCAST_MAX_IN + 1; /* rejected below */
  for (int32_t k = 0; k < n_in && k < APX_BCAST_MAX_IN; k++) {
    ranks[k] = ins[k]->rank;
    memcpy(dims[k], ins[k]->dims, sizeof dims[k]);
  }
  return apx_bcast_init(b, out->rank, out->dims, n_in, ranks,
                        (const int64_t(*)[APX_MAX_RANK])dims, bad);
}

int apx_bcast_plan(ApxBcast *b, const ApxTensor *out, const ApxTensor *const *ins, int32_t n_in,
                   char *err, size_t cap) {
  int bad = 0;
  if (apx_bcast_init_t(b, out, ins, n_in, &bad) == 0) return 0;
  char a[96], o[96];
  return fail(err, cap, "input %d shape %s does not broadcast to %s", bad,
              apx_dims_str(ins[bad], a, sizeof a), apx_dims_str(out, o, sizeof o));
}

int apx_bcast_is_contig(const ApxBcast *b, int k) {
  int64_t s = 1;
  for (int32_t d = b->rank - 1; d >= 0; d--) {
    if (b->strides[k][d] != s) return 0;
    s *= b->dims[d];
  }
  return 1;
}

/* ---- reductions -------------------------------------------------------------------- */

void apx_reduce_plan(ApxReducePlan *p, const int64_t *dims, int32_t rank, uint32_t mask) {
  memset(p, 0, sizeof *p);
  int64_t xs[APX_MAX_RANK], gd[APX_MAX_RANK], gs[APX_MAX_RANK];
  int gr[APX_MAX_RANK], ng = 0;
  apx_dims_strides(dims, rank, xs);
  p->ny = 1;
  p->nred = 1;
  for (int32_t d = 0; d < rank; d++) {
    if (mask >> d & 1u)
      p->nred *= dims[d];
    else
      p->ny *= dims[d];
    if (dims[d] == 0) p->empty = 1;
  }
  if (p->empty) return;
  /* collapse: drop size-1 dims, merge neighbours with the same reduce status */
  for (int32_t d = 0; d < rank; d++) {
    if (dims[d] == 1) continue;
    int red = (int)(mask >> d & 1u);
    if (ng > 0 && gr[ng - 1] == red) {
      gd[ng - 1] *= dims[d];
      gs[ng - 1] = xs[d];
    } else {
      gd[ng] = dims[d];
      gs[ng] = xs[d];
      gr[ng] = red;
      ng++;
    }
  }
  for (int g = 0; g < ng; g++) {
    if (gr[g]) {
      p->rd[p->nr] = gd[g];
      p->rs[p->nr++] = gs[g];
    } else {
      p->kd[p->nk] = gd[g];
      p->ks[p->nk++] = gs[g];
    }
  }
  p->inner_reduced = ng > 0 && gr[ng - 1];
}

int64_t apx_sum_to_mask(const ApxTensor *from, const ApxTensor *to) {
  int64_t mask = 0;
  int32_t lead = from->rank - to->rank;
  for (int32_t d = 0; d < -lead; d++)
    if (to->dims[d] != 1) return -1;
  for (int32_t d = 0; d < from->rank; d++) {
    int32_t td = d - lead;
    if (td < 0) {
      mask |= 1ll << d;
    } else if (!apx_dim_broadcasts(to->dims[td], from->dims[d])) {
      return -1;
    } else if (to->dims[td] != from->dims[d]) {
      mask |= 1ll << d;
    }
  }
  return mask;
}

int apx_reduce_mask(const ApxAttrReduce *a, int32_t rank, uint32_t *mask, char *err, size_t cap) {
  *mask = 0;
  if (a->n_axes < 0 || a->n_axes > rank)
    return fail(err, cap, "%d axes for rank %d", a->n_axes, rank);
  if (a->n_axes == 0) {
    *mask = a->noop_with_empty_axes ? 0u : (uint32_t)((1u << rank) - 1u);
    return 0;
  }
  for (int32_t i = 0; i < a->n_axes; i++) {
    if (a->axes[i] < 0 || a->axes[i] >= rank)
      return fail(err, cap, "axis %lld out of range for rank %d", (long long)a->axes[i], rank);
    *mask |= 1u << a->axes[i];
  }
  return 0;
}

/* ---- matrix products --------------------------------------------------------------- */

int apx_matmul_plan(ApxMatMulPlan *p, const ApxTensor *A, const ApxTensor *B, const ApxTensor *Y,
                    char *err, size_t cap) {
  char sa[96], sb[96], sy[96];
  int32_t ta = p->ta, tb = p->tb;
  memset(p, 0, sizeof *p);
  p->ta = ta;
  p->tb = tb;
  int a1 = A->rank == 1, b1 = B->rank == 1;
  if (A->rank < 1 || B->rank < 1) return fail(err, cap, "operands must have rank >= 1");
  if ((a1 && ta) || (b1 && tb)) return fail(err, cap, "transpose of a 1-D operand");
  int64_t Kb;
  if (a1) {
    p->M = 1;
    p->K = A->dims[0];
  } else {
    int64_t r = A->dims[A->rank - 2], c = A->dims[A->rank - 1];
    p->M = ta ? c : r;
    p->K = ta ? r : c;
  }
  if (b1) {
    Kb = B->dims[0];
    p->N = 1;
  } else {
    int64_t r = B->dims[B->rank - 2], c = B->dims[B->rank - 1];
    Kb = tb ? c : r;
    p->N = tb ? r : c;
  }
  if (Kb != p->K)
    return fail(err, cap, "inner dims differ: A %s, B %s", apx_dims_str(A, sa, sizeof sa),
                apx_dims_str(B, sb, sizeof sb));
  if (p->M > 0x7fffffff || p->N > 0x7fffffff || p->K > 0x7fffffff)
    return unsupported(err, cap, "not supported yet: dims beyond 2^31");
  /* batch shapes */
  int32_t nma = a1 ? 1 : 2, nmb = b1 ? 1 : 2, nmy = (!a1) + (!b1);
  int32_t ra = A->rank - nma, rb = B->rank - nmb, ry = Y->rank - nmy;
  if (ry < 0) return fail(err, cap, "output rank %d too small", Y->rank);
  int64_t want[2];
  int nw = 0;
  if (!a1) want[nw++] = p->M;
  if (!b1) want[nw++] = p->N;
  for (int i = 0; i < nw; i++)
    if (Y->dims[ry + i] != want[i])
      return fail(err, cap, "output %s does not match A %s, B %s", apx_dims_str(Y, sy, sizeof sy),
                  apx_dims_str(A, sa, sizeof sa), apx_dims_str(B, sb, sizeof sb));
  int32_t rf = ra > rb ? ra : rb;
  if (ry > rf) rf = ry;
  int64_t full[APX_MAX_RANK];
  int32_t ranks[3] = {ra, rb, ry};
  int64_t dims[3][APX_MAX_RANK];
  memcpy(dims[0], A->dims, sizeof dims[0]);
  memcpy(dims[1], B->dims, sizeof dims[1]);
  memcpy(dims[2], Y->dims, sizeof dims[2]);
  for (int32_t d = 0; d < rf; d++) {
    int64_t m = 1;
    for (int k = 0; k < 2; k++) { /* Y's batch dims follow A's and B's, never widen them */
      int32_t id = d - (rf - ranks[k]);
      if (id < 0) continue;
      int64_t v = dims[k][id];
      if (v != 1) {
        if (m != 1 && m != v)
          return fail(err, cap, "batch dims do not broadcast: A %s, B %s",
                      apx_dims_str(A, sa, sizeof sa), apx_dims_str(B, sb, sizeof sb));
        m = v;
      }
    }
    full[d] = m;
  }
  int bad = 0;
  if (apx_bcast_init(&p->bc, rf, full, 3, ranks, (const int64_t(*)[APX_MAX_RANK])dims, &bad))
    return fail(err, cap, "output batch dims %s do not match A %s, B %s",
                apx_dims_str(Y, sy, sizeof sy), apx_dims_str(A, sa, sizeof sa),
                apx_dims_str(B, sb, sizeof sb));
  p->y_batches = apx_dims_prod(Y->dims, 0, ry);
  p->reduce = p->y_batches < p->bc.numel;
  return 0;
}

/* ---- data movement ----------------------------------------------------------------- */

int apx_slice_view(const ApxAttrSlice *a, const ApxTensor *full, const ApxTensor *part,
                   int64_t *base, int64_t *strides, char *err, size_t cap) {
  if (a->rank != full->rank || part->rank != full->rank)
    return fail(err, cap, "slice rank %d, tensors %d and %d", a->rank, full->rank, part->rank);
  int64_t fs[APX_MAX_RANK];
  apx_dims_strides(full->dims, full->rank, fs);
  *base = 0;
  for (int32_t d = 0; d < full->rank; d++) {
    int64_t st = a->starts[d], step = a->steps[d], cnt = part->dims[d], last = 0, span = 0;
    /* overflow-checked: a plan's attributes are data (scripts/fuzz_plan.sh found a step whose
     * product overflowed) */
    int over = __builtin_mul_overflow(step, fs[d], &strides[d]);
    if (cnt > 0) {
      over |= __builtin_mul_overflow(cnt - 1, step, &span) | __builtin_add_overflow(st, span, &last);
      if (over || step == 0 || st < 0 || st >= full->dims[d] || last < 0 || last >= full->dims[d])
        return fail(err, cap, "dim %d: start %lld step %lld count %lld outside [0, %lld)", d,
                    (long long)st, (long long)step, (long long)cnt, (long long)full->dims[d]);
      *base += st * fs[d];
    } else if (over) {
      return fail(err, cap, "dim %d: step %lld overflows", d, (long long)step);
    }
  }
  return 0;
}

int apx_gather_shape(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                     const ApxTensor *out, int64_t *outer, int64_t *A, int64_t *inner, char *err,
                     size_t cap) {
  char sd[96], si[96], so[96];
  if (axis < 0 || axis >= data->rank)
    return fail(err, cap, "axis %lld out of range for rank %d", (long long)axis, data->rank);
  if (!apx_dtype_is_int(idx->dtype) || idx->dtype == APX_DT_BOOL)
    return fail(err, cap, "indices of type %s (expected an integer type)", apx_dtype_name(idx->dtype));
  int ok = out->rank == data->rank - 1 + idx->rank;
  for (int32_t d = 0; ok && d < out->rank; d++) {
    int64_t want = d < axis ? data->dims[d]
                   : d < axis + idx->rank ? idx->dims[d - axis]
                                          : data->dims[d - idx->rank + 1];
    ok = out->dims[d] == want;
  }
  if (!ok)
    return fail(err, cap, "output %s does not match data %s, indices %s",
                apx_dims_str(out, so, sizeof so), apx_dims_str(data, sd, sizeof sd),
                apx_dims_str(idx, si, sizeof si));
  *outer = apx_dims_prod(data->dims, 0, (int32_t)axis);
  *A = data->dims[axis];
  *inner = apx_dims_prod(data->dims, (int32_t)axis + 1, data->rank);
  return 0;
}

/* 1 when t matches ref in every dim but axis. */
static int match_but_axis(const ApxTensor *t, const ApxTensor *ref, int64_t axis) {
  if (t->rank != ref->rank) return 0;
  for (int32_t d = 0; d < t->rank; d++)
    if (d != axis && t->dims[d] != ref->dims[d]) return 0;
  return 1;
}

int apx_concat_plan(int64_t axis, const ApxTensor *whole, const ApxTensor *parts, int32_t n,
                    int split, int64_t *outer, int64_t *inner, char *err, size_t cap) {
  if (axis < 0 || axis >= whole->rank)
    return fail(err, cap, "axis %lld out of range for rank %d", (long long)axis, whole->rank);
  int64_t total = 0;
  for (int32_t k = 0; k < n; k++) {
    if (!match_but_axis(&parts[k], whole, axis) || parts[k].dtype != whole->dtype)
      return fail(err, cap, "%s %d does not match along non-axis dims", split ? "output" : "input",
                  k);
    if (!parts[k].data && apx_tensor_numel(&parts[k]) && !split)
      return fail(err, cap, "input %d missing", k);
    total += parts[k].dims[axis];
  }
  if (total != whole->dims[axis])
    return fail(err, cap, "sizes along axis add to %lld, expected %lld", (long long)total,
                (long long)whole->dims[axis]);
  *outer = apx_dims_prod(whole->dims, 0, (int32_t)axis);
  *inner = apx_dims_prod(whole->dims, (int32_t)axis + 1, whole->rank);
  return 0;
}

int apx_transpose_plan(const ApxAttrTranspose *a, const ApxTensor *x, const ApxTensor *y,
                       int64_t *src_strides, char *err, size_t cap) {
  int32_t r = x->rank;
  if (a->rank != r || y->rank != r)
    return fail(err, cap, "perm has %d entries, input rank %d", a->rank, r);
  int64_t xs[APX_MAX_RANK];
  uint32_t seen = 0;
  apx_dims_strides(x->dims, r, xs);
  for (int32_t i = 0; i < r; i++) {
    int64_t p = a->perm[i];
    if (p < 0 || p >= r || (seen >> p & 1u) || y->dims[i] != x->dims[p])
      return fail(err, cap, "bad perm or output dims at %d", i);
    seen |= 1u << p;
    src_strides[i] = xs[p];
  }
  return 0;
}

/* ---- losses ---------------------------------------------------------------------- */

int apx_loss_shape(const ApxTensor *x, const ApxTensor *labels, int64_t *N, int64_t *C,
                   int64_t *inner, char *err, size_t cap) {
  char a[96], b[96];
  if (x->rank < 2) return fail(err, cap, "scores must have rank >= 2, got %d", x->rank);
  *N = x->dims[0];
  *C = x->dims[1];
  *inner = apx_dims_prod(x->dims, 2, x->rank);
  int ok = labels->rank == x->rank - 1 && labels->dims[0] == *N;
  for (int32_t d = 1; ok && d < labels->rank; d++) ok = labels->dims[d] == x->dims[d + 1];
  if (!ok)
    return fail(err, cap, "labels %s do not match scores %s", apx_dims_str(labels, a, sizeof a),
                apx_dims_str(x, b, sizeof b));
  return 0;
}

/* ---- convolution and pooling ------------------------------------------------------- */

static int64_t one_if_zero(int64_t v) { return v ? v : 1; }

/* The (D, H, W) volume of a window operand: rank 5 (N, C, D, H, W), rank 4 (N, C, H, W) as
 * (N, C, 1, H, W), or rank 3 (N, C, L) as (N, C, 1, 1, L): 2-D and 1-D windows run as 3-D
 * ones with unit leading dims (their attributes canonicalized with unit leading entries,
 * ir/infer_nn.c). 0 for other ranks. */
static int volume(const ApxTensor *t, int64_t *d, int64_t *h, int64_t *w) {
  if (t->rank < 3 || t->rank > 5) return 0;
  *d = t->rank == 5 ? t->dims[2] : 1;
  *h = t->rank >= 4 ? t->dims[t->rank - 2] : 1;
  *w = t->dims[t->rank - 1];
  return 1;
}
/* Window attributes past int range (kernel sizes, strides, dilations, pads, groups): refused,
 * so that no index arithmetic of a kernel can overflow on a crafted plan. */
static int beyond_int(int64_t v) { return v > 0x7fffffff || v < -0x7fffffff; }

/* Strides, dilations (0 read as 1) and pads of window attributes a (ApxAttrConv, ApxAttrPool:
 * the same field names) into geometry g (ApxConvGeom, ApxPoolGeom). */
#define READ_WINDOW(g, a)                                                              \
  do {                                                                                 \
    (g)->sd = one_if_zero((a)->strides[0]);                                            \
    (g)->sh = one_if_zero((a)->strides[1]);                                            \
    (g)->sw = one_if_zero((a)->strides[2]);                                            \
    (g)->dd = one_if_zero((a)->dilations[0]);                                          \
    (g)->dh = one_if_zero((a)->dilations[1]);                                          \
    (g)->dw = one_if_zero((a)->dilations[2]);                                          \
    (g)->pf = (a)->pads[0];                                                            \
    (g)->pt = (a)->pads[1];                                                            \
    (g)->pl = (a)->pads[2];                                                            \
    (g)->pk = (a)->pads[3];                                                            \
    (g)->pb = (a)->pads[4];                                                            \
    (g)->pr = (a)->pads[5];                                                            \
  } while (0)

/* apx_conv_geom, with end pads (back, bottom, right) down to -neg_end allowed
 * (ConvTranspose's adjoint view: its output_padding). */
static int conv_geom(const ApxAttrConv *a, const ApxTensor *x, const ApxTensor *w,
                     const ApxTensor *y, ApxConvGeom *g, int64_t neg_end, char *err, size_t cap) {
  char sx[96], sw[96], sy[96];
  memset(g, 0, sizeof *g);
  if (w->rank != x->rank || y->rank != x->rank)
    return fail(err, cap, "operand ranks differ: X %d, W %d, Y %d", x->rank, w->rank, y->rank);
  if (!volume(x, &g->D, &g->H, &g->W) || !volume(w, &g->kd, &g->kh, &g->kw) ||
      !volume(y, &g->OD, &g->OH, &g->OW))
    return unsupported(err, cap, "not supported yet: convolution of rank %d (1-D, 2-D and 3-D "
                       "only, rank 3, 4 and 5)", x->rank);
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->M = w->dims[0];
  g->G = one_if_zero(a->group);
  READ_WINDOW(g, a);
  if (beyond_int(g->G) || beyond_int(g->sh) || beyond_int(g->sw) || beyond_int(g->dh) ||
      beyond_int(g->dw) || beyond_int(g->pt) || beyond_int(g->pl) || beyond_int(g->pb) ||
      beyond_int(g->pr) || beyond_int(g->sd) || beyond_int(g->dd) || beyond_int(g->pf) ||
      beyond_int(g->pk))
    return unsupported(err, cap, "not supported yet: convolution attributes beyond 2^31");
  int bad = g->G < 1 || g->C % g->G || g->M % g->G || g->sh < 1 || g->sw < 1 || g->dh < 1 ||
            g->dw < 1 || g->pt < 0 || g->pl < 0 || g->pb < -neg_end || g->pr < -neg_end ||
            g->sd < 1 || g->dd < 1 || g->pf < 0 || g->pk < -neg_end;
  if (!bad) {
    g->Cg = g->C / g->G;
    g->Mg = g->M / g->G;
    bad = w->dims[1] != g->Cg || (a->kernel[0] && a->kernel[0] != g->kd) ||
          (a->kernel[1] && a->kernel[1] != g->kh) || (a->kernel[2] && a->kernel[2] != g->kw) ||
          y->dims[0] != g->N || y->dims[1] != g->M;
  }
  if (!bad) {
    int64_t od = apx_window_out(g->D, g->kd, g->sd, g->dd, g->pf, g->pk, APX_WINDOW_FLOOR);
    int64_t oh = apx_window_out(g->H, g->kh, g->sh, g->dh, g->pt, g->pb, APX_WINDOW_FLOOR);
    int64_t ow = apx_window_out(g->W, g->kw, g->sw, g->dw, g->pl, g->pr, APX_WINDOW_FLOOR);
    bad = od < 0 || oh < 0 || ow < 0 || g->OD != od || g->OH != oh || g->OW != ow;
  }
  if (bad)
    return fail(err, cap, "shapes/attributes do not match: X %s, W %s, Y %s, group %lld",
                apx_dims_str(x, sx, sizeof sx), apx_dims_str(w, sw, sizeof sw),
                apx_dims_str(y, sy, sizeof sy), (long long)a->group);
  g->depth = !(g->D == 1 && g->OD == 1 && g->kd == 1);
  g->pointwise = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 &&
                 g->pl == 0 && g->pb == 0 && g->pr == 0 && g->kd == 1 && g->sd == 1 &&
                 g->pf == 0 && g->pk == 0;
  return 0;
}

int apx_conv_geom(const ApxAttrConv *a, const ApxTensor *x, const ApxTensor *w, const ApxTensor *y,
                  ApxConvGeom *g, char *err, size_t cap) {
  return conv_geom(a, x, w, y, g, 0, err, cap);
}

int apx_conv_transpose_geom(const ApxAttrConvTranspose *a, const ApxTensor *x, const ApxTensor *w,
                            const ApxTensor *y, ApxConvGeom *g, char *err, size_t cap) {
  char sx[96], sw[96], sy[96];
  memset(g, 0, sizeof *g);
  int64_t in[3], out[3];
  if (w->rank != x->rank || y->rank != x->rank)
    return fail(err, cap, "operand ranks differ: X %d, W %d, Y %d", x->rank, w->rank, y->rank);
  if (!volume(x, &in[0], &in[1], &in[2]) || !volume(y, &out[0], &out[1], &out[2]))
    return unsupported(err, cap, "not supported yet: ConvTranspose of rank %d (1-D, 2-D and 3-D "
                       "only, rank 3, 4 and 5)", x->rank);
  ApxAttrConv c;
  memset(&c, 0, sizeof c);
  int64_t lim = 0;
  for (int i = 0; i < 3; i++) {
    int64_t op = a->output_padding[i];
    if (beyond_int(op) || beyond_int(a->pads[i + 3]))
      return unsupported(err, cap, "not supported yet: convolution attributes beyond 2^31");
    if (op < 0) return fail(err, cap, "output_padding %lld is negative", (long long)op);
    c.kernel[i] = a->kernel[i];
    c.strides[i] = a->strides[i];
    c.dilations[i] = a->dilations[i];
    c.pads[i] = a->pads[i];
    c.pads[i + 3] = a->pads[i + 3] - op;
    if (a->pads[i + 3] < 0) return fail(err, cap, "pads are negative");
    if (op > lim) lim = op;
  }
  c.group = a->group;
  /* the adjoint convolution: input Y, output X; then Y's size exactly (the convolution's
   * floor division admits strides - 1 more) */
  int rc = conv_geom(&c, y, w, x, g, lim, err, cap);
  if (rc == APX_SHAPE_UNSUPPORTED) return rc;
  if (rc == 0) {
    int64_t k[3] = {g->kd, g->kh, g->kw}, st[3] = {g->sd, g->sh, g->sw}, d[3] = {g->dd, g->dh, g->dw};
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
      int64_t t, e; /* st (in - 1) + op + (k - 1) d + 1 - pads, every step checked */
      ok = !__builtin_mul_overflow(st[i], in[i] - 1, &t) &&
           !__builtin_mul_overflow(k[i] - 1, d[i], &e) && !__builtin_add_overflow(t, e, &t) &&
           !__builtin_add_overflow(t, a->output_padding[i] + 1 - a->pads[i] - a->pads[i + 3], &t) &&
           t == out[i];
    }
    if (ok) return 0;
  }
  return fail(err, cap, "ConvTranspose shapes/attributes do not match: X %s, W %s, Y %s, group %lld",
              apx_dims_str(x, sx, sizeof sx), apx_dims_str(w, sw, sizeof sw),
              apx_dims_str(y, sy, sizeof sy), (long long)a->group);
}

int64_t apx_window_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                       ApxWindowMode mode) {
  /* crafted attributes reach this (plans are inputs): every step checked for overflow */
  int64_t ext, padded, span, begin;
  if (s < 1 || __builtin_mul_overflow(k - 1, d, &ext) || __builtin_add_overflow(ext, 1, &ext) ||
      __builtin_add_overflow(in, p0, &begin) || __builtin_add_overflow(begin, p1, &padded) ||
      __builtin_sub_overflow(padded, ext, &span) || span < 0)
    return -1;
  if (mode == APX_WINDOW_FLOOR) return span / s + 1;
  int64_t o = span / s + (span % s != 0) + 1; /* ceil(span / s) + 1 */
  if (mode == APX_WINDOW_CEIL && (begin <= 0 || (o - 1) > (begin - 1) / s)) o--; /* (o - 1) s >= in + p0 */
  return o;
}

/* Pooling output size along one dim: floor mode, or either ceil-mode size (the kernels run
 * both conventions of ONNX models). */
static int out_size_ok(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                       int ceil_mode, int64_t out) {
  if (out < 0) return 0;
  if (!ceil_mode) return out == apx_window_out(in, k, s, d, p0, p1, APX_WINDOW_FLOOR);
  return out == apx_window_out(in, k, s, d, p0, p1, APX_WINDOW_CEIL) ||
         out == apx_window_out(in, k, s, d, p0, p1, APX_WINDOW_CEIL_ALL);
}

int apx_pool_geom(const ApxAttrPool *a, const ApxTensor *x, const ApxTensor *y, ApxPoolGeom *g,
                  char *err, size_t cap) {
  char sx[96], sy[96];
  if (y->rank != x->rank) return fail(err, cap, "ranks differ: X %d, Y %d", x->rank, y->rank);
  if (!volume(x, &g->D, &g->H, &g->W) || !volume(y, &g->OD, &g->OH, &g->OW))
    return unsupported(err, cap, "not supported yet: pooling of rank %d (1-D, 2-D and 3-D only, "
                       "rank 3, 4 and 5)", x->rank);
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->kd = a->kernel[0];
  g->kh = a->kernel[1];
  g->kw = a->kernel[2];
  READ_WINDOW(g, a);
  g->storage_order = a->storage_order;
  g->count_include_pad = a->count_include_pad;
  if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pt < 0 ||
      g->pl < 0 || g->pb < 0 || g->pr < 0 || g->kd < 1 || g->sd < 1 || g->dd < 1 || g->pf < 0 ||
      g->pk < 0)
    return fail(err, cap, "bad kernel/strides/dilations/pads");
  if (beyond_int(g->kh) || beyond_int(g->kw) || beyond_int(g->sh) || beyond_int(g->sw) ||
      beyond_int(g->dh) || beyond_int(g->dw) || beyond_int(g->pt) || beyond_int(g->pl) ||
      beyond_int(g->pb) || beyond_int(g->pr) || beyond_int(g->kd) || beyond_int(g->sd) ||
      beyond_int(g->dd) || beyond_int(g->pf) || beyond_int(g->pk))
    return unsupported(err, cap, "not supported yet: pooling attributes beyond 2^31");
  if (y->dims[0] != g->N || y->dims[1] != g->C ||
      !out_size_ok(g->D, g->kd, g->sd, g->dd, g->pf, g->pk, a->ceil_mode, g->OD) ||
      !out_size_ok(g->H, g->kh, g->sh, g->dh, g->pt, g->pb, a->ceil_mode, g->OH) ||
      !out_size_ok(g->W, g->kw, g->sw, g->dw, g->pl, g->pr, a->ceil_mode, g->OW))
    return fail(err, cap, "output %s does not match input %s", apx_dims_str(y, sy, sizeof sy),
                apx_dims_str(x, sx, sizeof sx));
  g->depth = !(g->D == 1 && g->OD == 1 && g->kd == 1);
  return 0;
}

int apx_shape_fail(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = fail_rc(APX_SHAPE_BAD, err, cap, fmt, ap);
  va_end(ap);
  return rc;
}
