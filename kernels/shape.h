/* shape.h - host-side shape planning shared by every backend (kernels/cpu, kernels/cuda):
 * broadcasting, reduction groups, batched matrix products, slices, gathers, transposes,
 * convolution and pooling geometry, and small dims helpers.
 *
 * One copy of the index arithmetic, so the CPU reference and the CUDA kernels cannot drift
 * apart (STYLE.md pitfalls). Plain C, no allocation, tested on its own (shape_test.cc) against
 * naive definitions. The rules: numpy broadcasting right-aligned, reductions over a set of
 * axes, MatMul's numpy semantics with broadcast batch dims, ONNX Conv / pooling geometry.
 *
 * Planners that check their operands return 0, or APX_SHAPE_BAD (-1: the shapes or
 * attributes break the op's contract) / APX_SHAPE_UNSUPPORTED (-2: valid, "not supported
 * yet: ..."), with a one-line reason in err (apx_shape_status maps these to ApxStatus). */
#ifndef APX_KERNELS_SHAPE_H
#define APX_KERNELS_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attrs.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { APX_SHAPE_BAD = -1, APX_SHAPE_UNSUPPORTED = -2 };

/* A planner's failure: the reason into err (when err and cap), returns APX_SHAPE_BAD. */
int apx_shape_fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The status of a planner's result: OK, BAD_INPUT or UNSUPPORTED. */
static inline ApxStatus apx_shape_status(int rc) {
  return rc == 0 ? APX_STATUS_OK
                 : rc == APX_SHAPE_UNSUPPORTED ? APX_STATUS_UNSUPPORTED : APX_STATUS_BAD_INPUT;
}

/* ---- dims ------------------------------------------------------------------------------ */

/* Product of dims[from, to). */
static inline int64_t apx_dims_prod(const int64_t *dims, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t i = from; i < to; i++) p *= dims[i];
  return p;
}

/* Contiguous row-major element strides of dims[rank]. */
static inline void apx_dims_strides(const int64_t *dims, int32_t rank, int64_t *strides) {
  int64_t s = 1;
  for (int32_t i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

/* Shape's slice of a rank-r shape (opset 15 start / end: negative from the end, clamped to
 * [0, r]): the first dim *first and the count *n. */
static inline void apx_shape_slice(int64_t start, int64_t end, int64_t r, int64_t *first,
                                   int64_t *n) {
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  *first = start;
  *n = end > start ? end - start : 0;
}

/* 1 when a and b have the same rank and dims. */
int apx_same_dims(const ApxTensor *a, const ApxTensor *b);
/* "[2,3,4]" into buf (for messages); returns buf. */
const char *apx_dims_str(const ApxTensor *t, char *buf, size_t cap);

/* ---- numpy multidirectional broadcasting ------------------------------------------------ */

/* The broadcasting rule (numpy, shapes right-aligned): a dim broadcasts to another when the
 * two are equal or it is 1. Every broadcast check of the kernels and of the compiler's shape
 * inference (ir/infer*.c) goes through it. */
static inline int apx_dim_broadcasts(int64_t from, int64_t to) { return from == to || from == 1; }
/* 1 when dims s[rs] broadcast to b[rb] (rs <= rb, each dim by apx_dim_broadcasts). */
int apx_broadcasts_to(int32_t rs, const int64_t *s, int32_t rb, const int64_t *b);
/* The broadcast of a[ra] and b[rb] into out[*ro] (out may be a or b): 0, or the position
 * from the right (1 = last dim) of the first dim where they do not broadcast (out untouched). */
int apx_broadcast_shape(int32_t ra, const int64_t *a, int32_t rb, const int64_t *b, int32_t *ro,
                        int64_t *out);

#define APX_BCAST_MAX_IN 4

/* Output dims (collapsed: size-1 dims dropped, neighbours contiguous in every input merged)
 * and, per input, element strides (0 along broadcast dims). Input k's element for output
 * flat index i is sum_d ((i / prod(dims[d+1..])) % dims[d]) * strides[k][d]. The innermost
 * stride of every input is 0 or 1. */
typedef struct ApxBcast {
  int32_t rank;
  int32_t n_in;
  int64_t dims[APX_MAX_RANK];
  int64_t strides[APX_BCAST_MAX_IN][APX_MAX_RANK];
  int64_t numel; /* output elements */
  int64_t inner; /* dims[rank - 1] (1 when rank is 0) */
} ApxBcast;

/* ins[0..n_in) (ranks / dims) broadcast to out_dims[out_rank]: each input right-aligned,
 * every dim equal or 1. 0, or -1 with *bad = the first input that does not broadcast. */
int apx_bcast_init(ApxBcast *b, int32_t out_rank, const int64_t *out_dims, int32_t n_in,
                   const int32_t *in_ranks, const int64_t (*in_dims)[APX_MAX_RANK], int *bad);
/* Same from tensors. */
int apx_bcast_init_t(ApxBcast *b, const ApxTensor *out, const ApxTensor *const *ins, int32_t n_in,
                     int *bad);
/* apx_bcast_init_t with a message: 0, or APX_SHAPE_BAD with "input K shape [..] does not
 * broadcast to [..]" in err. */
int apx_bcast_plan(ApxBcast *b, const ApxTensor *out, const ApxTensor *const *ins, int32_t n_in,
                   char *err, size_t cap);
/* 1 when input k is read contiguously (its element for output i is element i). */
int apx_bcast_is_contig(const ApxBcast *b, int k);

/* Offsets into each input of output element i (flat). */
static inline void apx_bcast_offsets(const ApxBcast *b, int64_t i, int64_t *off) {
  for (int32_t k = 0; k < b->n_in; k++) off[k] = 0;
  for (int32_t d = b->rank - 1; d >= 0 && i > 0; d--) {
    int64_t id = i % b->dims[d];
    i /= b->dims[d];
    for (int32_t k = 0; k < b->n_in; k++) off[k] += id * b->strides[k][d];
  }
}

/* ---- reductions ------------------------------------------------------------------------ */

/* A sum over the axes in mask of x (dims[rank]), as groups: kept dims kd/ks (row-major
 * order of the output) and reduced dims rd/rs (row-major order of the reduced indices),
 * both with element strides into x (size-1 dims dropped, neighbours with the same reduce
 * status merged). Output o, reduced index r read
 *   x[off(o; kd, ks) + off(r; rd, rs)],  off = apx_group_offset.
 * inner_reduced: the innermost non-trivial group is reduced (rows contiguous along r);
 * else outputs are contiguous along o. empty: some dim is 0 (then only ny and nred are set;
 * the sums are 0). */
typedef struct ApxReducePlan {
  int32_t nk, nr;
  int64_t kd[APX_MAX_RANK], ks[APX_MAX_RANK];
  int64_t rd[APX_MAX_RANK], rs[APX_MAX_RANK];
  int64_t ny, nred; /* outputs, inputs per output */
  int32_t inner_reduced;
  int32_t empty;
} ApxReducePlan;

void apx_reduce_plan(ApxReducePlan *p, const int64_t *dims, int32_t rank, uint32_t mask);

/* Offset of group index i over dims d / strides s (n groups, row-major). */
static inline int64_t apx_group_offset(int64_t i, const int64_t *d, const int64_t *s, int32_t n) {
  int64_t off = 0;
  for (int32_t g = n - 1; g >= 0 && i > 0; g--) {
    off += (i % d[g]) * s[g];
    i /= d[g];
  }
  return off;
}

/* Mask of the axes of `from` that broadcasting reduces to `to` (right-aligned: axes missing
 * in `to`, or 1 in `to` and not 1 in `from`; ReduceSumTo); -1 when `to` does not broadcast
 * to `from`. */
int64_t apx_sum_to_mask(const ApxTensor *from, const ApxTensor *to);
/* ReduceSum / ReduceMean axes -> mask (all axes for none unless noop_with_empty_axes). */
int apx_reduce_mask(const ApxAttrReduce *a, int32_t rank, uint32_t *mask, char *err, size_t cap);

/* ---- matrix products ------------------------------------------------------------------- */

/* Batched product Y = op(A) @ op(B) (MatMul / FusedMatMul numpy semantics: 1-D operands,
 * broadcast batch dims): M, N, K, and the broadcast of the batch dims (units: whole
 * matrices; inputs A, B, Y). reduce: Y has fewer batches than the broadcast (FusedMatMul
 * gradients summing batches); y_batches: Y's batches. */
typedef struct ApxMatMulPlan {
  int64_t M, N, K;
  int32_t ta, tb; /* transposes: set by the caller before apx_matmul_plan */
  ApxBcast bc;
  int32_t reduce;
  int64_t y_batches;
} ApxMatMulPlan;

/* Plans p (keeping p->ta, p->tb). Dims beyond 2^31 are APX_SHAPE_UNSUPPORTED. */
int apx_matmul_plan(ApxMatMulPlan *p, const ApxTensor *A, const ApxTensor *B, const ApxTensor *Y,
                    char *err, size_t cap);

/* ---- data movement --------------------------------------------------------------------- */

/* Slice view: base element offset into `full` and per-dim element strides for `part`
 * (Slice: part = output; SliceGrad: part = dY). */
int apx_slice_view(const ApxAttrSlice *a, const ApxTensor *full, const ApxTensor *part,
                   int64_t *base, int64_t *strides, char *err, size_t cap);

/* Gather: data (outer, A, inner), indices (any shape, any integer type but bool),
 * out (outer, I..., inner). Index values are not read. */
int apx_gather_shape(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                     const ApxTensor *out, int64_t *outer, int64_t *A, int64_t *inner, char *err,
                     size_t cap);

/* Concat / Split: the joined tensor `whole` (outer, whole->dims[axis], inner) and its n
 * pieces `parts` along axis, each of whole's dtype and of its dims but axis. A piece
 * without data is an error for Concat (unless empty), an output not wanted for Split. */
int apx_concat_plan(int64_t axis, const ApxTensor *whole, const ApxTensor *parts, int32_t n,
                    int split, int64_t *outer, int64_t *inner, char *err, size_t cap);

/* Transpose: source element strides of x per output dim (y's dims checked). */
int apx_transpose_plan(const ApxAttrTranspose *a, const ApxTensor *x, const ApxTensor *y,
                       int64_t *src_strides, char *err, size_t cap);

/* ---- losses ---------------------------------------------------------------------------- */

/* Scores x (N, C, D1..Dk) with rank >= 2 and labels (N, D1..Dk) (shapes only):
 * inner = D1 * ... * Dk. */
int apx_loss_shape(const ApxTensor *x, const ApxTensor *labels, int64_t *N, int64_t *C,
                   int64_t *inner, char *err, size_t cap);

/* ---- convolution and pooling ----------------------------------------------------------- */

/* Output size of a sliding window along one spatial dim (ONNX Conv and pooling): input in,
 * kernel k, stride s >= 1, dilation d >= 1, pads p0 (begin) and p1 (end); -1 when the
 * dilated kernel is larger than the padded input. The one output-size rule of the kernels
 * and of shape inference (ir/infer_nn.c). */
typedef enum ApxWindowMode {
  APX_WINDOW_FLOOR = 0,    /* floor((in + p0 + p1 - ((k - 1) d + 1)) / s) + 1 */
  APX_WINDOW_CEIL = 1,     /* ceil, without a last window that starts in the end padding
                            * (PyTorch, ONNX 1.16) */
  APX_WINDOW_CEIL_ALL = 2, /* ceil, every window (ONNX's reference before 1.16) */
} ApxWindowMode;
int64_t apx_window_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                       ApxWindowMode mode);

/* Convolution geometry (Conv, ConvGrad): x (N, C, D, H, W), w (M, C / G, kd, kh, kw),
 * y (N, M, OD, OH, OW); strides, dilations and group 0 read as 1. 2-D operands (rank 4)
 * read as depth 1 (D = OD = kd = 1) and 1-D ones (rank 3, (N, C, L)) as depth and height 1
 * (their attributes' leading entries unit, as canonicalization writes them), so the 2-D
 * kernels run them unchanged; `depth` says a kernel needs the 3-D path. Other ranks than 3,
 * 4 and 5 are APX_SHAPE_UNSUPPORTED. */
typedef struct ApxConvGeom {
  int64_t N, C, H, W, M, OH, OW, G, Cg, Mg; /* Cg = C / G, Mg = M / G */
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int64_t D, OD, kd, sd, dd, pf, pk; /* depth: size, output size, kernel, stride, dilation,
                                      * front and back pads (1, 1, 1, 1, 1, 0, 0 for 2-D) */
  int32_t pointwise; /* 1x1(x1), stride 1, no padding: im2col is X itself */
  int32_t depth;     /* 1 unless D = OD = kd = 1 (the 2-D kernels apply) */
} ApxConvGeom;
int apx_conv_geom(const ApxAttrConv *a, const ApxTensor *x, const ApxTensor *w, const ApxTensor *y,
                  ApxConvGeom *g, char *err, size_t cap);

/* ConvTranspose(X, W) -> Y (attrs.def ApxAttrConvTranspose) as the convolution it is the
 * adjoint of: g describes a Conv with input y (N, C_out, OH, OW), weight w (C_in, C_out / G,
 * kh, kw) and output x (N, C_in, IH, IW), so g.C = C_out, g.M = C_in, g.OH / g.OW are X's
 * dims and g.H / g.W Y's, with the end pads reduced by output_padding (g.pb, g.pr may be
 * negative: the end pads only decide the output size, which is checked here). Y is that
 * convolution's ConvGrad dX for dY = X; ConvTransposeGrad's dX is its forward on dY (3-D:
 * the same with depth, g.pk may be negative too). Y's dims must be exactly strides (I - 1) + output_padding + (k - 1) dilations + 1 - pads. */
int apx_conv_transpose_geom(const ApxAttrConvTranspose *a, const ApxTensor *x, const ApxTensor *w,
                            const ApxTensor *y, ApxConvGeom *g, char *err, size_t cap);

/* Pooling geometry: x (N, C, D, H, W), y (N, C, OD, OH, OW) with floor / ceil mode output
 * sizes (ceil: the last window must start inside the input or its begin padding, as in
 * PyTorch and ONNX's reference); rank 4 (2-D) as depth 1 and rank 3 (1-D) as depth and
 * height 1, as apx_conv_geom. Other ranks than 3, 4 and 5 are APX_SHAPE_UNSUPPORTED. */
typedef struct ApxPoolGeom {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int32_t storage_order, count_include_pad;
  int64_t D, OD, kd, sd, dd, pf, pk; /* depth, as ApxConvGeom's */
  int32_t depth;                     /* 1 unless D = OD = kd = 1 */
} ApxPoolGeom;
int apx_pool_geom(const ApxAttrPool *a, const ApxTensor *x, const ApxTensor *y, ApxPoolGeom *g,
                  char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
