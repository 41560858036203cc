/* loss.cu - SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob?;
 * NegativeLogLikelihoodLoss(input, target, weight?) -> loss; their gradients; FusedXentropy
 * (scores, labels) -> loss, saved? (per-line logsumexp) and FusedXentropyGrad(dLoss, scores,
 * labels, saved) -> dScores. Math as loss_real.inc: scores (N, C, inner), line l = n * inner
 * + d; log_prob = (x - max) - log(sum exp(x - max)); reductions mean (sum of losses / sum of
 * the weights of counted lines), sum, none; ignore_index lines give 0. A label outside
 * [0, C) that is not ignored is recorded as a device-side error (ctx->dev_err: reported at
 * the next synchronization) and its line counts 0.
 * Lines are handled by a warp (C <= 1024) or a block (larger C, vocabularies) when inner == 1,
 * else by one thread each. Labels: int64 or int32. */
#include "kernels/cuda/reduce.cuh"

/* A group of threads cooperating on one line. */
struct TeamThread {
  __device__ int lane() const { return 0; }
  __device__ int size() const { return 1; }
  __device__ double sum(double v) const { return v; }
  __device__ float max(float v) const { return v; }
  __device__ int64_t first() const { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
  __device__ int64_t stride() const { return (int64_t)gridDim.x * blockDim.x; }
  __device__ void bind(float *, double *) {}
};
struct TeamWarp {
  __device__ int lane() const { return threadIdx.x & 31; }
  __device__ int size() const { return 32; }
  __device__ double sum(double v) const { return warp_sum(v); }
  __device__ float max(float v) const { return warp_max(v); }
  __device__ int64_t first() const { return (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); }
  __device__ int64_t stride() const { return (int64_t)gridDim.x * (blockDim.x >> 5); }
  __device__ void bind(float *, double *) {}
};
struct TeamBlock {
  float *sh;
  double *shd;
  __device__ int lane() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ double sum(double v) const { return block_sum(v, shd); }
  __device__ float max(float v) const { return block_max(v, sh); }
  __device__ int64_t first() const { return blockIdx.x; }
  __device__ int64_t stride() const { return gridDim.x; }
  __device__ void bind(float *s, double *d) {
    sh = s;
    shd = d;
  }
};

template <typename T>
struct LossArgs {
  const T *x;            /* scores (SCE), log-probabilities (NLL), scores (FusedXentropyGrad) */
  const void *labels;
  int32_t ldt;
  const void *w;         /* (C) or NULL */
  int32_t wdt;
  const void *lse;       /* FusedXentropyGrad: per-line logsumexp */
  int32_t lsedt;
  int64_t N, C, inner;
  int32_t sce, has_ignore;
  int64_t ignore;
  int32_t op;
  int64_t seq;
  ApxCudaDevErr *err;
};

static __device__ __forceinline__ float fmax_nan(float m, float v) {
  return (v > m || isnan(v)) ? v : m;
}

/* forward: per-line loss and weight (fp32 scratch), optional log_prob and saved lse */
template <class TM, typename T>
APX_CU_KERNEL(loss_lines_kernel)(TM tm, LossArgs<T> a, float *loss, float *wl, void *log_prob,
                                  int lp_dt, void *lse_out, int lse_dt) {
  __shared__ float sh[33];
  __shared__ double shd[33];
  tm.bind(sh, shd);
  int64_t nl = a.N * a.inner, C = a.C, inner = a.inner;
  for (int64_t l = tm.first(); l < nl; l += tm.stride()) {
    int64_t n = l / inner, d = l % inner;
    const T *px = a.x + n * C * inner + d;
    int64_t t = ld_index(a.labels, a.ldt, l);
    float m = 0.0f, ls = 0.0f;
    if (a.sce) {
      m = -INFINITY;
      for (int64_t c = tm.lane(); c < C; c += tm.size()) m = fmax_nan(m, ld(px[c * inner]));
      m = tm.max(m);
      double s = 0.0;
      for (int64_t c = tm.lane(); c < C; c += tm.size()) s += (double)expf(ld(px[c * inner]) - m);
      ls = logf((float)tm.sum(s));
      if (log_prob) {
        int64_t b = n * C * inner + d;
        for (int64_t c = tm.lane(); c < C; c += tm.size())
          st_dt(log_prob, lp_dt, b + c * inner, (ld(px[c * inner]) - m) - ls);
      }
    }
    if (tm.lane() != 0) continue;
    if (lse_out) st_dt(lse_out, lse_dt, l, m + ls);
    if (a.has_ignore && t == a.ignore) {
      loss[l] = wl[l] = 0.0f;
    } else if (t < 0 || t >= C) {
      apx_cu_dev_fail(a.err, APX_CUDA_DERR_LABEL, a.op, a.seq, t, l, C);
      loss[l] = wl[l] = 0.0f;
    } else {
      float w = a.w ? ld_dt(a.w, a.wdt, t) : 1.0f;
      float v = ld(px[t * inner]);
      loss[l] = -(a.sce ? (v - m) - ls : v) * w;
      wl[l] = w;
    }
  }
}

/* gradient: dx (N, C, inner) per line; g from dloss (denom: summed weights for mean) */
template <class TM, typename T>
APX_CU_KERNEL(loss_grad_kernel)(TM tm, LossArgs<T> a, const void *dloss, int ddt, int reduction,
                                 const double *denom, void *dx, int dxdt) {
  int64_t nl = a.N * a.inner, C = a.C, inner = a.inner;
  for (int64_t l = tm.first(); l < nl; l += tm.stride()) {
    int64_t n = l / inner, d = l % inner;
    const T *px = a.x ? a.x + n * C * inner + d : NULL;
    int64_t b = n * C * inner + d;
    int64_t t = ld_index(a.labels, a.ldt, l);
    int ignored = a.has_ignore && t == a.ignore;
    if (ignored || t < 0 || t >= C) {
      if (!ignored && tm.lane() == 0) apx_cu_dev_fail(a.err, APX_CUDA_DERR_LABEL, a.op, a.seq, t, l, C);
      for (int64_t c = tm.lane(); c < C; c += tm.size()) st_dt(dx, dxdt, b + c * inner, 0.0f);
      continue;
    }
    float g = ld_dt(dloss, ddt, reduction == APX_RED_NONE ? l : 0);
    if (reduction == APX_RED_MEAN) g /= (float)denom[0]; /* the CPU's (real_t) denominator */
    float k = (a.w ? ld_dt(a.w, a.wdt, t) : 1.0f) * g;
    if (a.sce) {
      float shift = a.lse ? ld_dt(a.lse, a.lsedt, l) : 0.0f;
      for (int64_t c = tm.lane(); c < C; c += tm.size()) {
        float v = expf(ld(px[c * inner]) - shift) * k;
        st_dt(dx, dxdt, b + c * inner, c == t ? v - k : v);
      }
    } else {
      for (int64_t c = tm.lane(); c < C; c += tm.size()) st_dt(dx, dxdt, b + c * inner, c == t ? -k : 0.0f);
    }
  }
}

/* sums of per-line values (loss or weight), in fp64 */
struct LineTerm {
  const float *v;
  __device__ double operator()(int64_t o, int64_t r) const { return (double)v[r]; }
};
struct StoreAt {
  double *out;
  __device__ void operator()(int64_t o, double v) const { out[o] = v; }
};

/* weight of line l when it counts for the mean (valid, not ignored), else 0 */
template <typename T>
struct WeightTerm {
  LossArgs<T> a;
  __device__ double operator()(int64_t o, int64_t l) const {
    int64_t t = ld_index(a.labels, a.ldt, l);
    if ((a.has_ignore && t == a.ignore) || t < 0 || t >= a.C) return 0.0;
    return a.w ? (double)ld_dt(a.w, a.wdt, t) : 1.0;
  }
};

/* sum: (float)s; mean: (float)(s / sum of weights), in fp64 as the CPU */
APX_CU_KERNEL(loss_finish_kernel)(const double *sums, void *out, int odt, int reduction) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    st_dt(out, odt, 0, reduction == APX_RED_SUM ? (float)sums[0] : (float)(sums[0] / sums[1]));
}

APX_CU_KERNEL(loss_none_kernel)(const float *loss, void *out, int odt, int64_t n) {
  APX_CU_GRID_STRIDE(i, n) st_dt(out, odt, i, loss[i]);
}

/* ---- launchers ---------------------------------------------------------------------------- */

template <typename T>
static void launch_loss_lines(const ApxCudaCtx *ctx, const LossArgs<T> &a, float *loss, float *wl,
                              void *log_prob, int lp_dt, void *lse, int lse_dt, cudaStream_t s) {
  int64_t nl = a.N * a.inner;
  if (a.inner == 1 && a.sce && a.C > 1024) {
    TeamBlock tm = {NULL, NULL};
    int block = apx_cu_block(ctx, 512);
    loss_lines_kernel<TeamBlock, T><<<(unsigned)(nl < 65535 * 16 ? nl : 65535 * 16), block, 0, s>>>(
        tm, a, loss, wl, log_prob, lp_dt, lse, lse_dt);
  } else if (a.inner == 1 && a.sce) {
    int block = apx_cu_block(ctx, 256);
    loss_lines_kernel<TeamWarp, T><<<apx_cu_grid(ctx, nl * 32, block), block, 0, s>>>(
        TeamWarp(), a, loss, wl, log_prob, lp_dt, lse, lse_dt);
  } else {
    int block = apx_cu_block(ctx, 256);
    loss_lines_kernel<TeamThread, T><<<apx_cu_grid(ctx, nl, block), block, 0, s>>>(
        TeamThread(), a, loss, wl, log_prob, lp_dt, lse, lse_dt);
  }
}

template <typename T>
static void launch_loss_grad(const ApxCudaCtx *ctx, const LossArgs<T> &a, const void *dloss,
                             int ddt, int reduction, const double *denom, void *dx, int dxdt,
                             cudaStream_t s) {
  int64_t nl = a.N * a.inner;
  if (a.inner == 1) {
    int block = apx_cu_block(ctx, 256);
    loss_grad_kernel<TeamWarp, T><<<apx_cu_grid(ctx, nl * 32, block), block, 0, s>>>(
        TeamWarp(), a, dloss, ddt, reduction, denom, dx, dxdt);
  } else {
    int block = apx_cu_block(ctx, 256);
    loss_grad_kernel<TeamThread, T><<<apx_cu_grid(ctx, nl, block), block, 0, s>>>(
        TeamThread(), a, dloss, ddt, reduction, denom, dx, dxdt);
  }
}

/* ---- entries ------------------------------------------------------------------------------ */

typedef struct LossShape {
  int64_t N, C, inner;
} LossShape;

/* x (N, C, D...), labels (N, D...), weights (C) floats of any type (ld_dt): kernels/validate.h;
 * this backend reads int32 / int64 labels and fp32 / fp16 / bf16 scores. */
static ApxStatus loss_shape(ApxCudaCtx *ctx, const ApxTensor *x, const ApxTensor *labels, LossShape *sh) {
  if (apx_loss_shape(x, labels, &sh->N, &sh->C, &sh->inner, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  if (labels->dtype != APX_DT_I64 && labels->dtype != APX_DT_I32)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: labels of type %s",
                         apx_dtype_name(labels->dtype));
  if (!apx_cu_is_float16(x->dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                         apx_dtype_name(x->dtype));
  return APX_STATUS_OK;
}

template <typename T>
static LossArgs<T> loss_args(const ApxCudaCtx *ctx, ApxOp op, const ApxAttrLoss *at, const T *x,
                             const ApxTensor *labels, const ApxTensor *w, const LossShape &sh,
                             int sce) {
  LossArgs<T> a;
  a.x = x;
  a.labels = labels->data;
  a.ldt = labels->dtype;
  a.w = w ? w->data : NULL;
  a.wdt = w ? w->dtype : 0;
  a.lse = NULL;
  a.lsedt = 0;
  a.N = sh.N;
  a.C = sh.C;
  a.inner = sh.inner;
  a.sce = sce;
  a.has_ignore = at->has_ignore_index;
  a.ignore = at->ignore_index;
  a.op = op;
  a.seq = ctx->seq;
  a.err = ctx->dev_err;
  return a;
}

/* Shapes, kinds and the reduction: kernels/validate.h; the loss may be fp32 for half scores
 * (FusedXentropy), log_prob and saved any float type. */
APX_CUDA_ENTRY(apx_cuda_loss) {
  const ApxAttrLoss *at = (const ApxAttrLoss *)attrs;
  int fused = op == APX_OP_FusedXentropy, sce = fused || op == APX_OP_SoftmaxCrossEntropyLoss;
  const ApxTensor *x = &ins[0], *w = !fused && apx_cu_has(ins, n_in, 2) ? &ins[2] : NULL;
  LossShape sh;
  APX_TRY(loss_shape(ctx, x, &ins[1], &sh));
  const ApxTensor *lp = sce && !fused && apx_cu_has(outs, n_out, 1) ? &outs[1] : NULL;
  const ApxTensor *saved = fused && apx_cu_has(outs, n_out, 1) ? &outs[1] : NULL;
  int64_t nl = sh.N * sh.inner;
  double *sums = NULL;
  APX_TRY(apx_cuda_tmp(ctx, 2 * sizeof(double) + (size_t)(2 * nl) * sizeof(float), (void **)&sums));
  float *loss = (float *)(sums + 2), *wl = loss + nl;
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    LossArgs<T> a = loss_args<T>(ctx, op, at, (const T *)x->data, &ins[1], w, sh, sce);
    if (nl > 0)
      launch_loss_lines<T>(ctx, a, loss, wl, lp ? lp->data : NULL, lp ? lp->dtype : 0,
                           saved ? saved->data : NULL, saved ? saved->dtype : 0, s);
    APX_CUDA_LAUNCHED(ctx);
  });
  if (at->reduction == APX_RED_NONE) {
    if (nl == 0) return APX_STATUS_OK;
    int block = apx_cu_block(ctx, 256);
    loss_none_kernel<<<apx_cu_grid(ctx, nl, block), block, 0, s>>>(loss, outs[0].data,
                                                                   outs[0].dtype, nl);
    APX_CUDA_LAUNCHED(ctx);
    return APX_STATUS_OK;
  }
  APX_TRY(apx_cu_reduce(ctx, LineTerm{loss}, StoreAt{sums}, 1, nl, 1));
  if (at->reduction == APX_RED_MEAN) APX_TRY(apx_cu_reduce(ctx, LineTerm{wl}, StoreAt{sums + 1}, 1, nl, 1));
  loss_finish_kernel<<<1, 32, 0, s>>>(sums, outs[0].data, outs[0].dtype, at->reduction);
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* Shapes and kinds: kernels/validate.h; dScores may be rounded to another float type than the
 * scores (fuse_casts), dLoss and saved any float type. */
APX_CUDA_ENTRY(apx_cuda_loss_grad) {
  int fused = op == APX_OP_FusedXentropyGrad;
  int sce = fused || op == APX_OP_SoftmaxCrossEntropyLossGrad;
  int li = sce ? 2 : 1;
  const ApxAttrLoss *at = (const ApxAttrLoss *)attrs;
  ApxTensor *dx = &outs[0];
  const ApxTensor *w = !fused && apx_cu_has(ins, n_in, li + 1) ? &ins[li + 1] : NULL;
  LossShape sh;
  APX_TRY(loss_shape(ctx, dx, &ins[li], &sh));
  int64_t nl = sh.N * sh.inner;
  if (nl == 0) return APX_STATUS_OK;
  double *denom = NULL;
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, sce ? ins[1].dtype : dx->dtype, T, {
    LossArgs<T> a = loss_args<T>(ctx, op, at, sce ? (const T *)ins[1].data : NULL, &ins[li], w, sh, sce);
    if (fused) {
      a.lse = ins[3].data;
      a.lsedt = ins[3].dtype;
    }
    if (at->reduction == APX_RED_MEAN) {
      APX_TRY(apx_cuda_tmp(ctx, sizeof(double), (void **)&denom));
      APX_TRY(apx_cu_reduce(ctx, WeightTerm<T>{a}, StoreAt{denom}, 1, nl, 1));
    }
    launch_loss_grad<T>(ctx, a, ins[0].data, ins[0].dtype, at->reduction, denom, dx->data, dx->dtype, s);
    APX_CUDA_LAUNCHED(ctx);
  });
  return APX_STATUS_OK;
}
