/* pool.cu - MaxPool(X) -> Y, Indices? and AveragePool(X) -> Y (3-D, 2-D as depth 1, 1-D as depth
 * and height 1; pads, strides,
 * dilations, ceil_mode through the output dims, count_include_pad, storage_order);
 * MaxPoolGrad(dY, X) -> dX; AveragePoolGrad(dY) -> dX; GlobalAveragePool(X) -> Y and its
 * gradient. Own kernels with the CPU reference's rules (pool_real.inc): windows scanned
 * in (d, h, w) order, MaxPool picks the first maximum (NaN wins), its gradient routes there.
 * Gradients gather instead of scattering: each dX element sums the windows that contain it in
 * the CPU's (oh, ow) order - deterministic, no atomics, the same sums as the CPU for fp32. */
#include "kernels/cuda/reduce.cuh"

struct PoolArgs {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int32_t storage_order, count_include_pad;
  int64_t D, OD, kd, sd, dd, pf, pk; /* depth (2-D and 1-D: 1, 1, 1, 1, 1, 0, 0) */
};

static PoolArgs pool_args(const ApxPoolGeom *g) {
  PoolArgs a = {g->N,  g->C,  g->H,  g->W,  g->OH, g->OW, g->kh, g->kw,
                g->sh, g->sw, g->dh, g->dw, g->pt, g->pl, g->pb, g->pr,
                g->storage_order, g->count_include_pad,
                g->D,  g->OD, g->kd, g->sd, g->dd, g->pf, g->pk};
  return a;
}

/* argmax (index in the volume, -1 for an empty window) of output (od, oh, ow) of volume px */
template <typename T>
static __device__ __forceinline__ int64_t window_argmax(const PoolArgs &g, const T *px, int64_t od,
                                                        int64_t oh, int64_t ow, float *best_out) {
  int64_t d0 = od * g.sd - g.pf, h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl, b = -1;
  int64_t HW = g.H * g.W;
  float best = -INFINITY;
  for (int64_t a = 0; a < g.kd; a++) {
    int64_t z = d0 + a * g.dd;
    if (z < 0 || z >= g.D) continue;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t h = h0 + i * g.dh;
      if (h < 0 || h >= g.H) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t w = w0 + j * g.dw;
        if (w < 0 || w >= g.W) continue;
        float v = ld(px[z * HW + h * g.W + w]);
        if (b < 0 || v > best || (isnan(v) && !isnan(best))) {
          best = v;
          b = z * HW + h * g.W + w;
        }
      }
    }
  }
  *best_out = best;
  return b;
}

static __device__ __forceinline__ int64_t pool_count(const PoolArgs &g, int64_t d0, int64_t h0,
                                                     int64_t w0) {
  int64_t cd = 0, ch = 0, cw = 0;
  int64_t lo_d = g.count_include_pad ? -g.pf : 0, hi_d = g.count_include_pad ? g.D + g.pk : g.D;
  int64_t lo_h = g.count_include_pad ? -g.pt : 0, hi_h = g.count_include_pad ? g.H + g.pb : g.H;
  int64_t lo_w = g.count_include_pad ? -g.pl : 0, hi_w = g.count_include_pad ? g.W + g.pr : g.W;
  for (int64_t a = 0; a < g.kd; a++) {
    int64_t z = d0 + a * g.dd;
    cd += z >= lo_d && z < hi_d;
  }
  for (int64_t i = 0; i < g.kh; i++) {
    int64_t h = h0 + i * g.dh;
    ch += h >= lo_h && h < hi_h;
  }
  for (int64_t j = 0; j < g.kw; j++) {
    int64_t w = w0 + j * g.dw;
    cw += w >= lo_w && w < hi_w;
  }
  return cd * ch * cw;
}

/* output o of the N * C * OD * OH * OW outputs -> (volume p, od, oh, ow) */
static __device__ __forceinline__ void out_pos(const PoolArgs &g, int64_t o, int64_t *p, int64_t *od,
                                               int64_t *oh, int64_t *ow) {
  int64_t OHW = g.OH * g.OW, OS = g.OD * OHW;
  *p = o / OS;
  *od = (o % OS) / OHW;
  *oh = (o % OHW) / g.OW;
  *ow = o % g.OW;
}

template <typename T>
APX_CU_KERNEL(max_pool_kernel)(const T *x, T *y, long long *idx, PoolArgs g) {
  int64_t HW = g.H * g.W, S = g.D * HW, n = g.N * g.C * g.OD * g.OH * g.OW;
  APX_CU_GRID_STRIDE(o, n) {
    int64_t p, od, oh, ow;
    out_pos(g, o, &p, &od, &oh, &ow);
    float best;
    int64_t b = window_argmax(g, x + p * S, od, oh, ow, &best);
    y[o] = st<T>(best);
    if (idx) {
      int64_t bd = b / HW, bh = (b % HW) / g.W, bw = b % g.W; /* storage_order 1: (w, h, d) */
      idx[o] = b < 0 ? -1 : p * S + (g.storage_order ? (bw * g.H + bh) * g.D + bd : b);
    }
  }
}

template <typename T>
APX_CU_KERNEL(avg_pool_kernel)(const T *x, T *y, PoolArgs g) {
  int64_t HW = g.H * g.W, S = g.D * HW, n = g.N * g.C * g.OD * g.OH * g.OW;
  APX_CU_GRID_STRIDE(o, n) {
    int64_t p, od, oh, ow;
    out_pos(g, o, &p, &od, &oh, &ow);
    const T *px = x + p * S;
    int64_t d0 = od * g.sd - g.pf, h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
    float s = 0.0f;
    for (int64_t a = 0; a < g.kd; a++) {
      int64_t z = d0 + a * g.dd;
      if (z < 0 || z >= g.D) continue;
      for (int64_t i = 0; i < g.kh; i++) {
        int64_t h = h0 + i * g.dh;
        if (h < 0 || h >= g.H) continue;
        for (int64_t j = 0; j < g.kw; j++) {
          int64_t w = w0 + j * g.dw;
          if (w >= 0 && w < g.W) s += ld(px[z * HW + h * g.W + w]);
        }
      }
    }
    int64_t cnt = pool_count(g, d0, h0, w0);
    y[o] = st<T>(cnt ? s / (float)cnt : 0.0f);
  }
}

/* argmax of every output window (MaxPoolGrad, phase 1) */
template <typename T>
APX_CU_KERNEL(argmax_kernel)(const T *x, int32_t *arg, PoolArgs g) {
  int64_t S = g.D * g.H * g.W, n = g.N * g.C * g.OD * g.OH * g.OW;
  APX_CU_GRID_STRIDE(o, n) {
    int64_t p, od, oh, ow;
    out_pos(g, o, &p, &od, &oh, &ow);
    float best;
    arg[o] = (int32_t)window_argmax(g, x + p * S, od, oh, ow, &best);
  }
}

/* dX (d, h, w) = sum over the windows containing it, in (od, oh, ow) order: max routes to the
 * argmax (arg != NULL), average spreads dY / count. */
template <typename T>
APX_CU_KERNEL(pool_grad_kernel)(const T *dy, const int32_t *arg, T *dx, PoolArgs g) {
  int64_t OHW = g.OH * g.OW, OS = g.OD * OHW, HW = g.H * g.W, S = g.D * HW, n = g.N * g.C * S;
  APX_CU_GRID_STRIDE(e, n) {
    int64_t p = e / S, z = (e % S) / HW, h = (e % HW) / g.W, w = e % g.W, self = e % S;
    float acc = 0.0f;
    for (int64_t a = g.kd - 1; a >= 0; a--) { /* od ascending */
      int64_t tz = z + g.pf - a * g.dd;
      if (tz < 0 || tz % g.sd) continue;
      int64_t od = tz / g.sd;
      if (od >= g.OD) continue;
      for (int64_t i = g.kh - 1; i >= 0; i--) { /* oh ascending */
        int64_t th = h + g.pt - i * g.dh;
        if (th < 0 || th % g.sh) continue;
        int64_t oh = th / g.sh;
        if (oh >= g.OH) continue;
        for (int64_t j = g.kw - 1; j >= 0; j--) { /* ow ascending */
          int64_t tw = w + g.pl - j * g.dw;
          if (tw < 0 || tw % g.sw) continue;
          int64_t ow = tw / g.sw;
          if (ow >= g.OW) continue;
          int64_t o = p * OS + od * OHW + oh * g.OW + ow;
          if (arg) {
            if (arg[o] == self) acc += ld(dy[o]);
          } else {
            int64_t cnt = pool_count(g, od * g.sd - g.pf, oh * g.sh - g.pt, ow * g.sw - g.pl);
            if (cnt) acc += ld(dy[o]) / (float)cnt;
          }
        }
      }
    }
    dx[e] = st<T>(acc);
  }
}

template <typename T>
APX_CU_KERNEL(gap_grad_kernel)(const T *dy, T *dx, int64_t planes, int64_t S) {
  APX_CU_GRID_STRIDE(i, planes * S) dx[i] = st<T>(ld(dy[i / S]) / (float)S);
}

/* ---- entries ---------------------------------------------------------------------------------- */

APX_CUDA_ENTRY(apx_cuda_pool) {
  ApxPoolGeom pg;
  if (apx_pool_geom((const ApxAttrPool *)attrs, &ins[0], &outs[0], &pg, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  ApxDType dt = ins[0].dtype;
  if (outs[0].dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: X and Y of types %s and %s",
                         apx_dtype_name(dt), apx_dtype_name(outs[0].dtype));
  long long *idx = NULL;
  if (op == APX_OP_MaxPool && apx_cu_has(outs, n_out, 1)) {
    if (outs[1].dtype != APX_DT_I64)
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: Indices of type %s",
                           apx_dtype_name(outs[1].dtype));
    idx = (long long *)outs[1].data;
  }
  int64_t n = apx_tensor_numel(&outs[0]);
  if (n == 0) return APX_STATUS_OK;
  PoolArgs g = pool_args(&pg);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (op == APX_OP_MaxPool)
      max_pool_kernel<T><<<grid, block, 0, s>>>((const T *)ins[0].data, (T *)outs[0].data, idx, g);
    else
      avg_pool_kernel<T><<<grid, block, 0, s>>>((const T *)ins[0].data, (T *)outs[0].data, g);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_pool_grad) {
  int is_max = op == APX_OP_MaxPoolGrad;
  ApxPoolGeom pg;
  if (apx_pool_geom((const ApxAttrPool *)attrs, &outs[0], &ins[0], &pg, ctx->err, sizeof ctx->err))
    return APX_STATUS_BAD_INPUT;
  ApxDType dt = outs[0].dtype;
  if (ins[0].dtype != dt || (is_max && ins[1].dtype != dt))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed types (dX %s)",
                         apx_dtype_name(dt));
  if (pg.D * pg.H * pg.W > 0x7fffffff)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: planes beyond 2^31");
  int64_t nx = apx_tensor_numel(&outs[0]), ny = apx_tensor_numel(&ins[0]);
  if (nx == 0) return APX_STATUS_OK;
  PoolArgs g = pool_args(&pg);
  int block = apx_cu_block(ctx, 256);
  cudaStream_t s = apx_cu_stream(ctx);
  int32_t *arg = NULL;
  if (is_max && ny > 0) APX_TRY(apx_cuda_tmp(ctx, (size_t)ny * sizeof(int32_t), (void **)&arg));
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (arg) {
      argmax_kernel<T><<<apx_cu_grid(ctx, ny, block), block, 0, s>>>((const T *)ins[1].data, arg, g);
      APX_CUDA_LAUNCHED(ctx);
    }
    if (is_max && !arg) { /* no windows: dX = 0 */
      APX_CUDA_TRY(ctx, cudaMemsetAsync(outs[0].data, 0, apx_tensor_bytes(&outs[0]), s));
      return APX_STATUS_OK;
    }
    pool_grad_kernel<T><<<apx_cu_grid(ctx, nx, block), block, 0, s>>>((const T *)ins[0].data, arg,
                                                                       (T *)outs[0].data, g);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* x (N, C, spatial...), y N * C elements (kernels/validate.h): planes, spatial size; one type */
static ApxStatus gap_shape(ApxCudaCtx *ctx, const ApxTensor *x, const ApxTensor *y, int64_t *planes,
                           int64_t *S) {
  if (x->dtype != y->dtype)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: X and Y of types %s and %s",
                         apx_dtype_name(x->dtype), apx_dtype_name(y->dtype));
  *planes = x->dims[0] * x->dims[1];
  *S = apx_dims_prod(x->dims, 2, x->rank);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_global_avg_pool) {
  int64_t planes = 0, S = 0;
  APX_TRY(gap_shape(ctx, &ins[0], &outs[0], &planes, &S));
  int64_t dims[2] = {planes, S};
  ApxReducePlan p;
  apx_reduce_plan(&p, dims, 2, 2u);
  return apx_cuda_reduce_sum(ctx, ins[0].data, ins[0].dtype, &p, (float)S, APX_CU_MEAN_FP64,
                             outs[0].data, outs[0].dtype);
}

APX_CUDA_ENTRY(apx_cuda_global_avg_pool_grad) {
  int64_t planes = 0, S = 0;
  APX_TRY(gap_shape(ctx, &outs[0], &ins[0], &planes, &S));
  if (planes * S == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, outs[0].dtype, T, {
    gap_grad_kernel<T><<<apx_cu_grid(ctx, planes * S, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)ins[0].data, (T *)outs[0].data, planes, S);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
