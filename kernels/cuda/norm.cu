/* norm.cu - LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?;
 * LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> dX?, dScale?, dB?;
 * BatchNormalization / BatchNormRelu(X, scale, B, mean, var) -> Y, running_mean?,
 *   running_var?, saved_mean?, saved_inv_std? (training_mode: batch statistics);
 * BatchNormGrad(dY, X, scale, stat1, stat2) -> dX?, dscale?, dB? and
 * BatchNormReluGrad(dY, Y, X, ...) = BatchNormGrad of dY * (Y > 0).
 * Own kernels (not cuDNN) so the math is the CPU reference's (norm_real.inc): statistics
 * two-pass (mean, then mean squared deviation) in fp32, inverse std 1 / sqrt(var + eps).
 * Per-row / per-channel vectors (scale, bias, statistics) may have any float type. */
#include "kernels/cuda/reduce.cuh"

/* ---- LayerNormalization ---------------------------------------------------------------- */

/* One block per row (x, y: (rows, D)); statistics in fp64 like the CPU's double lanes:
 * md = sum x / D, vd = sum (x - md)^2 / D, m = (float)md, is = (float)(1 / sqrt(vd + eps)). */
template <typename T>
APX_CU_KERNEL(layer_norm_kernel)(const T *x, const void *scale, int sdt, const void *bias, int bdt,
                                  void *y, int ydt, void *mean, int mdt, void *istd, int idt,
                                  int64_t rows, int64_t D, float eps) {
  __shared__ double sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *px = x + r * D;
    double md = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) md += (double)ld(px[j]);
    md = block_sum(md, sh) / (double)D;
    double vd = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      double d = (double)ld(px[j]) - md;
      vd += d * d;
    }
    vd = block_sum(vd, sh) / (double)D;
    float m = (float)md, is = (float)(1.0 / sqrt(vd + (double)eps));
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      float v = (ld(px[j]) - m) * is * ld_dt(scale, sdt, j);
      st_dt(y, ydt, r * D + j, bias ? v + ld_dt(bias, bdt, j) : v);
    }
    if (threadIdx.x == 0) {
      if (mean) st_dt(mean, mdt, r, m);
      if (istd) st_dt(istd, idt, r, is);
    }
  }
}

/* dX = is (g - mean(g) - (x - m) is k), g = dY scale, k = mean(g (x - m)) is; sums in fp64
 * (the CPU's formula); one block per row. */
template <typename T>
APX_CU_KERNEL(layer_norm_dx_kernel)(const void *dy, int gdt, const T *x, const void *scale, int sdt,
                                     const void *mean, int mdt, const void *istd, int idt, void *dx,
                                     int dxdt, int64_t rows, int64_t D) {
  __shared__ double sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *px = x + r * D;
    int64_t b = r * D;
    float m = ld_dt(mean, mdt, r), is = ld_dt(istd, idt, r);
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      double g = (double)ld_dt(dy, gdt, b + j) * (double)ld_dt(scale, sdt, j);
      sg += g;
      sgx += g * ((double)ld(px[j]) - (double)m);
    }
    sg = block_sum(sg, sh);
    sgx = block_sum(sgx, sh);
    float mg = (float)(sg / (double)D), k = (float)(sgx * (double)is / (double)D);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
      st_dt(dx, dxdt, b + j,
            is * (ld_dt(dy, gdt, b + j) * ld_dt(scale, sdt, j) - mg - (ld(px[j]) - m) * is * k));
  }
}

/* dScale[j] terms: dy ((x - m) is) at (row r, column j), in fp64; dB terms: dy */
template <typename T>
struct LnScaleTerm {
  const void *dy;
  const T *x;
  const void *mean, *istd;
  int32_t gdt, mdt, idt;
  int64_t D;
  __device__ double operator()(int64_t j, int64_t r) const {
    int64_t i = r * D + j;
    double m = (double)ld_dt(mean, mdt, r), is = (double)ld_dt(istd, idt, r);
    return (double)ld_dt(dy, gdt, i) * (((double)ld(x[i]) - m) * is);
  }
};

struct ColTerm { /* x[r * D + j] of any float type */
  const void *x;
  int32_t dt;
  int64_t D;
  __device__ double operator()(int64_t j, int64_t r) const { return (double)ld_dt(x, dt, r * D + j); }
};

struct StoreDt {
  void *out;
  int32_t dt;
  __device__ void operator()(int64_t o, double v) const { st_dt(out, dt, o, (float)v); }
};

/* t (when present) is fp32, fp16 or bf16; element counts: kernels/validate.h */
static ApxStatus need_float16(ApxCudaCtx *ctx, const ApxTensor *t, const char *what) {
  if (!t || !t->data) return APX_STATUS_OK;
  if (!apx_cu_is_float16(t->dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: %s of type %s",
                         what, apx_dtype_name(t->dtype));
  return APX_STATUS_OK;
}

static const ApxTensor *opt(const ApxTensor *t, int n, int i) { return i < n && t[i].data ? &t[i] : NULL; }
static void *data_of(const ApxTensor *t) { return t ? t->data : NULL; }
static int dt_of(const ApxTensor *t) { return t ? (int)t->dtype : 0; }

static unsigned row_grid(int64_t rows) { return (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16); }

APX_CUDA_ENTRY(apx_cuda_layer_norm) {
  const ApxAttrLayerNorm *a = (const ApxAttrLayerNorm *)attrs;
  const ApxTensor *x = &ins[0];
  int64_t rows = apx_dims_prod(x->dims, 0, (int32_t)a->axis), D = apx_dims_prod(x->dims, (int32_t)a->axis, x->rank);
  const ApxTensor *b = opt(ins, n_in, 2), *mean = opt(outs, n_out, 1), *istd = opt(outs, n_out, 2);
  APX_TRY(need_float16(ctx, &ins[1], "Scale"));
  APX_TRY(need_float16(ctx, b, "B"));
  APX_TRY(need_float16(ctx, mean, "Mean"));
  APX_TRY(need_float16(ctx, istd, "InvStdDev"));
  /* Y may have another float type than X (a Cast folded into the op: passes/fuse_casts.c) */
  APX_TRY(need_float16(ctx, &outs[0], "Y"));
  if (rows * D == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, D >= 1024 ? 512 : 256);
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    layer_norm_kernel<T><<<row_grid(rows), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)x->data, ins[1].data, ins[1].dtype, data_of(b), dt_of(b), outs[0].data,
        outs[0].dtype, data_of(mean), dt_of(mean), data_of(istd), dt_of(istd), rows, D, a->epsilon);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_layer_norm_grad) {
  const ApxAttrLayerNorm *a = (const ApxAttrLayerNorm *)attrs;
  const ApxTensor *x = &ins[1];
  int64_t rows = apx_dims_prod(x->dims, 0, (int32_t)a->axis), D = apx_dims_prod(x->dims, (int32_t)a->axis, x->rank);
  const ApxTensor *dx = opt(outs, n_out, 0), *dsc = opt(outs, n_out, 1), *db = opt(outs, n_out, 2);
  /* dY and dX may have other float types than X (passes/fuse_casts.c) */
  APX_TRY(need_float16(ctx, &ins[0], "dY"));
  APX_TRY(need_float16(ctx, dx, "dX"));
  APX_TRY(need_float16(ctx, &ins[2], "Scale"));
  APX_TRY(need_float16(ctx, &ins[3], "Mean"));
  APX_TRY(need_float16(ctx, &ins[4], "InvStdDev"));
  APX_TRY(need_float16(ctx, dsc, "dScale"));
  APX_TRY(need_float16(ctx, db, "dB"));
  if (rows * D == 0) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  int gdt = ins[0].dtype;
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    const T *px = (const T *)x->data;
    if (dx) {
      int block = apx_cu_block(ctx, D >= 1024 ? 512 : 256);
      layer_norm_dx_kernel<T><<<row_grid(rows), block, 0, s>>>(
          ins[0].data, gdt, px, ins[2].data, ins[2].dtype, ins[3].data, ins[3].dtype, ins[4].data,
          ins[4].dtype, dx->data, dx->dtype, rows, D);
      APX_CUDA_LAUNCHED(ctx);
    }
    if (dsc) {
      LnScaleTerm<T> f = {ins[0].data, px, ins[3].data, ins[4].data, (int32_t)gdt, (int32_t)ins[3].dtype,
                          (int32_t)ins[4].dtype, D};
      StoreDt o = {dsc->data, (int32_t)dsc->dtype};
      APX_TRY(apx_cu_reduce(ctx, f, o, D, rows, 0));
    }
  });
  if (db) {
    ColTerm f = {ins[0].data, (int32_t)gdt, D};
    StoreDt o = {db->data, (int32_t)db->dtype};
    APX_TRY(apx_cu_reduce(ctx, f, o, D, rows, 0));
  }
  return APX_STATUS_OK;
}

/* ---- BatchNormalization ----------------------------------------------------------------- */

/* x (N, C, S): term of channel c, reduced index r = n * S + s, in fp64. */
template <typename T>
struct BnTerm {
  const T *x;
  const double *center; /* NULL: x itself; else (x - center[c])^2 */
  int64_t C, S;
  __device__ double operator()(int64_t c, int64_t r) const {
    double v = (double)ld(x[((r / S) * C + c) * S + r % S]);
    if (!center) return v;
    double d = v - center[c];
    return d * d;
  }
};

/* dy, and dy (x - m) of channel c (BatchNormGrad), in fp64 */
template <typename T>
struct BnGradTerm {
  const void *dy;
  int32_t gdt;
  const T *x;
  const float *m; /* NULL: the plain sum of dy */
  int64_t C, S;
  __device__ double operator()(int64_t c, int64_t r) const {
    int64_t i = ((r / S) * C + c) * S + r % S;
    double g = (double)ld_dt(dy, gdt, i);
    return m ? g * ((double)ld(x[i]) - (double)m[c]) : g;
  }
};

struct StoreDiv { /* fp64 sum / count */
  double *out;
  double div;
  __device__ void operator()(int64_t o, double v) const { out[o] = v / div; }
};

struct StoreD {
  double *out;
  __device__ void operator()(int64_t o, double v) const { out[o] = v; }
};

/* Per-channel statistics: m, is (fp32 scratch) and the optional outputs. Training (the CPU's
 * formulas): m = (float)md, is = (float)(1 / sqrt(vd + eps)), running variance term
 * v = (float)vd, or (float)(vd * cnt / (cnt - 1)) when unbiased and cnt > 1; inference:
 * is = 1 / sqrtf(var + eps). */
APX_CU_KERNEL(bn_stats_kernel)(const double *bm, const double *bv, const void *in_mean,
                                const void *in_var, int vdt, float *m, float *is, void *run_mean,
                                void *run_var, void *saved_mean, void *saved_istd, int odt,
                                int64_t C, float eps, float mo, int training, int unbiased,
                                double cnt) {
  APX_CU_GRID_STRIDE(c, C) {
    float mc, vc, isc;
    if (training) {
      mc = (float)bm[c];
      vc = (float)(unbiased && cnt > 1 ? bv[c] * cnt / (cnt - 1) : bv[c]);
      isc = (float)(1.0 / sqrt(bv[c] + (double)eps));
    } else {
      mc = ld_dt(in_mean, vdt, c);
      vc = ld_dt(in_var, vdt, c);
      isc = 1.0f / sqrtf(vc + eps);
    }
    m[c] = mc;
    is[c] = isc;
    if (training) {
      if (run_mean) st_dt(run_mean, odt, c, ld_dt(in_mean, vdt, c) * mo + mc * (1.0f - mo));
      if (run_var) st_dt(run_var, odt, c, ld_dt(in_var, vdt, c) * mo + vc * (1.0f - mo));
    } else {
      if (run_mean) st_dt(run_mean, odt, c, mc);
      if (run_var) st_dt(run_var, odt, c, vc);
    }
    if (saved_mean) st_dt(saved_mean, odt, c, mc);
    if (saved_istd) st_dt(saved_istd, odt, c, isc);
  }
}

/* Y of any float type (BatchNormRelu may round to another one: passes/fuse_casts.c) */
template <typename T>
APX_CU_KERNEL(bn_apply_kernel)(const T *x, const float *m, const float *is, const void *scale,
                                const void *bias, int pdt, void *y, int ydt, int64_t C, int64_t S,
                                int64_t n, int relu) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t c = (i / S) % C;
    float sc = ld_dt(scale, pdt, c) * is[c];
    float v = (ld(x[i]) - m[c]) * sc + ld_dt(bias, pdt, c);
    st_dt(y, ydt, i, relu ? apx_relu_f32(v) : v);
  }
}

/* training: dx = k (dy - mg - (x - m) kx), k = scale is, mg = (float)(sdy / cnt),
 * kx = (float)((sdyx is) is / cnt) with sdyx = sum dy (x - m); inference: dx = k dy (the CPU's
 * formula) */
/* dY and dX of any float type */
template <typename T>
APX_CU_KERNEL(bn_dx_kernel)(const void *dy, int gdt, const T *x, const float *m, const float *is,
                             const double *sdy, const double *sdyx, const void *scale, int pdt,
                             void *dx, int dxdt, int64_t C, int64_t S, int64_t n, double cnt,
                             int training) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t c = (i / S) % C;
    float k = ld_dt(scale, pdt, c) * is[c], g = ld_dt(dy, gdt, i);
    if (training) {
      double sx = sdyx[c] * (double)is[c]; /* sum dy xhat */
      float mg = (float)(sdy[c] / cnt), kx = (float)(sx * (double)is[c] / cnt);
      st_dt(dx, dxdt, i, k * (g - mg - (ld(x[i]) - m[c]) * kx));
    } else {
      st_dt(dx, dxdt, i, k * g);
    }
  }
}

/* dscale = (float)(sum dy (x - m) * is), dbias = (float)sum dy */
APX_CU_KERNEL(bn_grad_out_kernel)(const double *sdy, const double *sdyx, const float *is, void *dscale,
                                   void *dbias, int odt, int64_t C) {
  APX_CU_GRID_STRIDE(c, C) {
    if (dscale) st_dt(dscale, odt, c, (float)(sdyx[c] * (double)is[c]));
    if (dbias) st_dt(dbias, odt, c, (float)sdy[c]);
  }
}

/* inference-mode statistics for the gradient: m = running mean, is = 1 / sqrt(var + eps);
 * training: m, is = the saved ones */
APX_CU_KERNEL(bn_grad_stats_kernel)(const void *s1, const void *s2, int dt, float *m, float *is,
                                     int64_t C, float eps, int training) {
  APX_CU_GRID_STRIDE(c, C) {
    m[c] = ld_dt(s1, dt, c);
    is[c] = training ? ld_dt(s2, dt, c) : 1.0f / sqrtf(ld_dt(s2, dt, c) + eps);
  }
}

/* X (N, C, spatial...) (rank >= 2: kernels/validate.h) */
static void bn_shape(const ApxTensor *x, int64_t *N, int64_t *C, int64_t *S) {
  *N = x->dims[0];
  *C = x->dims[1];
  *S = apx_dims_prod(x->dims, 2, x->rank);
}

APX_CUDA_ENTRY(apx_cuda_batch_norm) {
  const ApxAttrBatchNorm *a = (const ApxAttrBatchNorm *)attrs;
  const ApxTensor *x = &ins[0];
  int64_t N = 0, C = 0, S = 0;
  bn_shape(x, &N, &C, &S);
  for (int i = 1; i < 5; i++) APX_TRY(need_float16(ctx, &ins[i], i < 3 ? "BatchNorm parameter" : "BatchNorm statistic"));
  if (ins[2].dtype != ins[1].dtype || ins[4].dtype != ins[3].dtype)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed parameter types");
  ApxDType odt = APX_DT_UNDEFINED;
  for (int i = 1; i < 5; i++) {
    const ApxTensor *o = opt(outs, n_out, i);
    APX_TRY(need_float16(ctx, o, "BatchNorm statistic"));
    if (o && odt != APX_DT_UNDEFINED && o->dtype != odt)
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed statistics types");
    if (o) odt = o->dtype;
  }
  APX_TRY(need_float16(ctx, &outs[0], "Y")); /* any float type (fuse_casts) */
  if (C == 0) return APX_STATUS_OK;
  int training = a->training_mode != 0, relu = op == APX_OP_BatchNormRelu;
  double *bm = NULL, *bv = NULL;
  APX_TRY(apx_cuda_tmp(ctx, (size_t)C * (2 * sizeof(double) + 2 * sizeof(float)), (void **)&bm));
  bv = bm + C;
  float *m = (float *)(bv + C), *is = m + C;
  cudaStream_t s = apx_cu_stream(ctx);
  int64_t n = N * C * S;
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    const T *px = (const T *)x->data;
    if (training) {
      double cnt = (double)(N * S);
      BnTerm<T> fm = {px, NULL, C, S};
      StoreDiv sm = {bm, cnt};
      APX_TRY(apx_cu_reduce(ctx, fm, sm, C, N * S, S > 1));
      BnTerm<T> fv = {px, bm, C, S};
      StoreDiv sv = {bv, cnt};
      APX_TRY(apx_cu_reduce(ctx, fv, sv, C, N * S, S > 1));
    }
    int block = apx_cu_block(ctx, 256);
    bn_stats_kernel<<<apx_cu_grid(ctx, C, block), block, 0, s>>>(
        bm, bv, ins[3].data, ins[4].data, ins[3].dtype, m, is, data_of(opt(outs, n_out, 1)),
        data_of(opt(outs, n_out, 2)), data_of(opt(outs, n_out, 3)), data_of(opt(outs, n_out, 4)),
        odt, C, a->epsilon, a->momentum, training, a->unbiased_running_var != 0,
        (double)(N * S));
    APX_CUDA_LAUNCHED(ctx);
    if (n > 0) {
      bn_apply_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, s>>>(
          px, m, is, ins[1].data, ins[2].data, ins[1].dtype, outs[0].data, outs[0].dtype, C, S, n,
          relu);
      APX_CUDA_LAUNCHED(ctx);
    }
  });
  return APX_STATUS_OK;
}

/* BatchNormGrad on g (dY or dY * (Y > 0)) */
static ApxStatus bn_grad(ApxCudaCtx *ctx, const ApxAttrBatchNorm *a, const void *g, ApxDType gdt,
                         const ApxTensor *ins, int n_in, ApxTensor *outs, int n_out) {
  const ApxTensor *x = &ins[1];
  int64_t N = 0, C = 0, S = 0;
  bn_shape(x, &N, &C, &S);
  int training = a->training_mode != 0;
  const ApxTensor *dx = opt(outs, n_out, 0), *dsc = opt(outs, n_out, 1), *db = opt(outs, n_out, 2);
  APX_TRY(need_float16(ctx, &ins[0], "dY")); /* dY, dX: any float types */
  APX_TRY(need_float16(ctx, dx, "dX"));
  for (int i = 2; i < 5; i++) APX_TRY(need_float16(ctx, &ins[i], "BatchNorm statistic"));
  APX_TRY(need_float16(ctx, dsc, "dscale"));
  APX_TRY(need_float16(ctx, db, "dB"));
  if (ins[4].dtype != ins[3].dtype || (dsc && db && dsc->dtype != db->dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed statistics types");
  if (C == 0) return APX_STATUS_OK;
  double *sdy = NULL;
  APX_TRY(apx_cuda_tmp(ctx, (size_t)C * (2 * sizeof(double) + 2 * sizeof(float)), (void **)&sdy));
  double *sdyx = sdy + C;
  float *m = (float *)(sdyx + C), *is = m + C;
  cudaStream_t s = apx_cu_stream(ctx);
  int block = apx_cu_block(ctx, 256);
  bn_grad_stats_kernel<<<apx_cu_grid(ctx, C, block), block, 0, s>>>(
      ins[3].data, ins[4].data, ins[3].dtype, m, is, C, a->epsilon, training);
  APX_CUDA_LAUNCHED(ctx);
  int64_t n = N * C * S;
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    const T *px = (const T *)x->data;
    BnGradTerm<T> f1 = {g, (int32_t)gdt, px, NULL, C, S};
    StoreD s1 = {sdy};
    APX_TRY(apx_cu_reduce(ctx, f1, s1, C, N * S, S > 1));
    BnGradTerm<T> f2 = {g, (int32_t)gdt, px, m, C, S};
    StoreD s2 = {sdyx};
    APX_TRY(apx_cu_reduce(ctx, f2, s2, C, N * S, S > 1));
    if (dsc || db) {
      bn_grad_out_kernel<<<apx_cu_grid(ctx, C, block), block, 0, s>>>(
          sdy, sdyx, is, data_of(dsc), data_of(db), dsc ? dsc->dtype : dt_of(db), C);
      APX_CUDA_LAUNCHED(ctx);
    }
    if (dx && n > 0) {
      bn_dx_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, s>>>(
          g, gdt, px, m, is, sdy, sdyx, ins[2].data, ins[2].dtype, dx->data, dx->dtype, C, S, n,
          (double)(N * S), training);
      APX_CUDA_LAUNCHED(ctx);
    }
  });
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_batch_norm_grad) {
  if (op == APX_OP_BatchNormReluGrad) {
    void *g = NULL;
    APX_TRY(apx_cuda_relu_mask(ctx, &ins[0], &ins[1], &g));
    ApxTensor rest[5] = {ins[0], ins[2], ins[3], ins[4], ins[5]};
    return bn_grad(ctx, (const ApxAttrBatchNorm *)attrs, g, ins[0].dtype, rest, 5, outs, n_out);
  }
  return bn_grad(ctx, (const ApxAttrBatchNorm *)attrs, ins[0].data, ins[0].dtype, ins, n_in, outs,
                 n_out);
}

/* ---- shared: dY * (Y > 0) ---------------------------------------------------------------- */

/* g (dY's type) = dY * (Y > 0); Y of any float type (it may be rounded to another type than dY) */
template <typename T>
APX_CU_KERNEL(relu_mask_kernel)(const T *dy, const void *y, int ydt, T *g, int64_t n) {
  APX_CU_GRID_STRIDE(i, n) g[i] = st<T>(apx_relu_grad_f32(ld(dy[i]), ld_dt(y, ydt, i)));
}

ApxStatus apx_cuda_relu_mask(ApxCudaCtx *ctx, const ApxTensor *dy, const ApxTensor *y, void **g) {
  int64_t n = apx_tensor_numel(dy); /* Y: a float of dY's shape (kernels/validate.h) */
  APX_TRY(apx_cuda_tmp(ctx, (size_t)n * apx_dtype_size(dy->dtype), g));
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, dy->dtype, T, {
    relu_mask_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)dy->data, y->data, y->dtype, (T *)*g, n);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
