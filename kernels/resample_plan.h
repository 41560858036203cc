/* resample_plan.h - the coordinate arithmetic of Resize / ResizeGrad and the label plan of
 * Einsum, shared by the CPU reference (kernels/cpu/resample.c), the CUDA kernels
 * (kernels/cuda/resample.cu) and the host-side contract (kernels/validate.c):
 *   - apx_resize_plan checks X / Y against ApxAttrResize and fills the per-dim geometry;
 *     apx_resize_src (host + device) gives the input neighbours and weight an output
 *     coordinate reads along one dim, apx_resize_pre_range the output coordinates that can
 *     read one input coordinate (ResizeGrad's candidates, filtered by apx_resize_weight);
 *   - apx_einsum_plan resolves the labels of ApxAttrEinsum against the tensors: the free
 *     labels (Y's, each once) and the contracted ones, with every tensor's stride per label
 *     (a label repeated within a term adds its strides: the diagonal). */
#ifndef APX_KERNELS_RESAMPLE_PLAN_H
#define APX_KERNELS_RESAMPLE_PLAN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attrs.h"
#include "kernels/half.h" /* APX_HD */
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ApxAttrResize's enums, in attrs.def's order */
typedef enum ApxResizeMode { APX_RESIZE_NEAREST = 0, APX_RESIZE_LINEAR = 1, APX_RESIZE_CUBIC = 2 } ApxResizeMode;
typedef enum ApxResizeCoord {
  APX_RESIZE_HALF_PIXEL = 0,
  APX_RESIZE_HALF_PIXEL_SYMMETRIC = 1,
  APX_RESIZE_PYTORCH_HALF_PIXEL = 2,
  APX_RESIZE_ALIGN_CORNERS = 3,
  APX_RESIZE_ASYMMETRIC = 4,
  APX_RESIZE_TF_HALF_PIXEL_FOR_NN = 5,
  APX_RESIZE_TF_CROP_AND_RESIZE = 6
} ApxResizeCoord;
typedef enum ApxResizeNearest {
  APX_RESIZE_ROUND_PREFER_FLOOR = 0,
  APX_RESIZE_ROUND_PREFER_CEIL = 1,
  APX_RESIZE_FLOOR = 2,
  APX_RESIZE_CEIL = 3
} ApxResizeNearest;

static inline double apx_resize_scale(const ApxAttrResize *a, int d) { return a->scales[d]; }

/* One dim: in -> out elements at scale (out_f = scale * in, ONNX's float output width). */
typedef struct ApxResizeAxis {
  int64_t in, out;
  double scale, out_f;
  int32_t identity; /* scale ~ 1 and out == in: y = x along this dim */
} ApxResizeAxis;

typedef struct ApxResizePlan {
  int32_t rank, mode, coord, nearest;
  ApxResizeAxis ax[APX_MAX_RANK];
  int64_t xs[APX_MAX_RANK], ys[APX_MAX_RANK]; /* row-major strides of X and Y */
} ApxResizePlan;

/* x(o) = A o + B along one dim (apx_resize_x's formulas as an affine map; A = 0: constant). */
static inline APX_HD void apx_resize_affine(const ApxResizePlan *p, int d, double *A, double *B) {
  const ApxResizeAxis *ax = &p->ax[d];
  double s = ax->scale;
  *A = 1.0 / s;
  *B = 0.0;
  switch (p->coord) {
    case APX_RESIZE_HALF_PIXEL: *B = 0.5 / s - 0.5; break;
    case APX_RESIZE_HALF_PIXEL_SYMMETRIC: {
      double adj = (double)ax->out / ax->out_f, center = (double)ax->in / 2.0;
      *B = center * (1.0 - adj) + 0.5 / s - 0.5;
      break;
    }
    case APX_RESIZE_PYTORCH_HALF_PIXEL:
      if (ax->out_f == 1.0) *A = 0.0, *B = -0.5;
      else *B = 0.5 / s - 0.5;
      break;
    case APX_RESIZE_ALIGN_CORNERS:
      if (ax->out_f == 1.0) *A = 0.0;
      else *A = (double)(ax->in - 1) / (ax->out_f - 1.0);
      break;
    case APX_RESIZE_TF_HALF_PIXEL_FOR_NN: *B = 0.5 / s; break;
    default: break; /* asymmetric */
  }
}

/* The input coordinate x(o) of output coordinate o along dim d, in ONNX's expression order. */
static inline APX_HD double apx_resize_x(const ApxResizePlan *p, int d, int64_t o) {
  const ApxResizeAxis *ax = &p->ax[d];
  double s = ax->scale, y = (double)o;
  switch (p->coord) {
    case APX_RESIZE_HALF_PIXEL: return (y + 0.5) / s - 0.5;
    case APX_RESIZE_HALF_PIXEL_SYMMETRIC: {
      double adj = (double)ax->out / ax->out_f, center = (double)ax->in / 2.0;
      return center * (1.0 - adj) + (y + 0.5) / s - 0.5;
    }
    case APX_RESIZE_PYTORCH_HALF_PIXEL: return ax->out_f == 1.0 ? -0.5 : (y + 0.5) / s - 0.5;
    case APX_RESIZE_ALIGN_CORNERS: return ax->out_f == 1.0 ? 0.0 : y * (double)(ax->in - 1) / (ax->out_f - 1.0);
    case APX_RESIZE_TF_HALF_PIXEL_FOR_NN: return (y + 0.5) / s;
    default: return y / s; /* asymmetric */
  }
}

static inline APX_HD int64_t apx_resize_clamp(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* Output coordinate o along dim d reads input coordinates i0 (weight 1 - *w1) and i1
 * (weight *w1); nearest and identity dims: i0 == i1, w1 = 0. */
static inline APX_HD void apx_resize_src(const ApxResizePlan *p, int d, int64_t o, int64_t *i0, int64_t *i1,
                                         double *w1) {
  const ApxResizeAxis *ax = &p->ax[d];
  *w1 = 0.0;
  if (ax->identity) {
    *i0 = *i1 = o;
    return;
  }
  double x = apx_resize_x(p, d, o);
  double fl = floor(x), f = x - fl;
  int64_t lo = (int64_t)fl;
  if (p->mode == APX_RESIZE_NEAREST) {
    int64_t i;
    if (f == 0.0) i = lo;
    else if (p->nearest == APX_RESIZE_FLOOR) i = lo;
    else if (p->nearest == APX_RESIZE_CEIL) i = lo + 1;
    else if (p->nearest == APX_RESIZE_ROUND_PREFER_CEIL) i = f < 0.5 ? lo : lo + 1;
    else i = f <= 0.5 ? lo : lo + 1;
    *i0 = *i1 = apx_resize_clamp(i, ax->in);
    return;
  }
  *i0 = apx_resize_clamp(lo, ax->in);
  *i1 = apx_resize_clamp(lo + 1, ax->in);
  if (f == 0.0 || *i0 == *i1) {
    *i1 = *i0;
    return;
  }
  *w1 = f;
}

/* The weight with which output coordinate o reads input coordinate i along dim d. */
static inline APX_HD double apx_resize_weight(const ApxResizePlan *p, int d, int64_t o, int64_t i) {
  int64_t i0, i1;
  double w1;
  apx_resize_src(p, d, o, &i0, &i1, &w1);
  return (i0 == i ? 1.0 - w1 : 0.0) + (i1 == i && i1 != i0 ? w1 : 0.0);
}

/* Output coordinates [*lo, *hi) that may read input coordinate i along dim d (a superset:
 * callers weigh each with apx_resize_weight; the map is monotone, so this is an interval). */
static inline APX_HD void apx_resize_pre_range(const ApxResizePlan *p, int d, int64_t i, int64_t *lo,
                                               int64_t *hi) {
  const ApxResizeAxis *ax = &p->ax[d];
  if (ax->identity) {
    *lo = i, *hi = i + 1;
    return;
  }
  double A, B;
  apx_resize_affine(p, d, &A, &B);
  int64_t l = 0, h = ax->out;
  if (A > 0.0) {
    if (i > 0) l = (int64_t)floor(((double)i - 1.5 - B) / A) - 1;
    if (i < ax->in - 1) h = (int64_t)ceil(((double)i + 1.5 - B) / A) + 2;
  }
  *lo = l < 0 ? 0 : l > ax->out ? ax->out : l;
  *hi = h < *lo ? *lo : h > ax->out ? ax->out : h;
}

/* Resize: x and y of one float dtype and rank, a->rank == rank, y's dims those of the
 * scales (floor(in * scale), or the sizes they came from). ResizeGrad: the same with x = dX,
 * y = dY. */
int apx_resize_plan(const ApxAttrResize *a, const ApxTensor *x, const ApxTensor *y, ApxResizePlan *p,
                    char *err, size_t cap);

/* ---- Einsum ---------------------------------------------------------------------------- */

#define APX_EINSUM_MAX_LABELS (3 * APX_MAX_RANK)

typedef struct ApxEinsumPlan {
  int32_t nf, nc; /* free labels (Y's distinct ones), contracted labels */
  int64_t fsize[APX_EINSUM_MAX_LABELS], fa[APX_EINSUM_MAX_LABELS], fb[APX_EINSUM_MAX_LABELS],
      fy[APX_EINSUM_MAX_LABELS];
  int64_t csize[APX_EINSUM_MAX_LABELS], ca[APX_EINSUM_MAX_LABELS], cb[APX_EINSUM_MAX_LABELS];
  int64_t n_free, n_con; /* products of the sizes */
  int32_t zero_first;    /* Y has more elements than free-label tuples (a repeated label) */
} ApxEinsumPlan;

/* Einsum: the terms' lengths are the ranks of a, b (NULL: one operand) and y; every label
 * one size wherever it appears; a, b, y of one float dtype. */
int apx_einsum_plan(const ApxAttrEinsum *e, const ApxTensor *a, const ApxTensor *b, const ApxTensor *y,
                    ApxEinsumPlan *p, char *err, size_t cap);

/* Parse an ONNX equation ("bij,bjk->bik", spaces allowed; implicit form without "->") into
 * e; the number of operand terms in *n_terms. 0, or -1 with a one-line reason in err
 * ("not supported yet: ..." for an ellipsis or more than two operands: return -2). */
int apx_einsum_parse(const char *eq, ApxAttrEinsum *e, int *n_terms, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
