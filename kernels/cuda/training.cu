/* training.cu - the training-step ops (attrs.h documents their contracts):
 *   LossScaleSeed(loss, loss_scale) -> dLoss = loss_scale[0] * multiplier
 *   AssignState(src, dst)          copy / fill into the STATE buffer dst (any dtypes)
 *   UnscaleCheck(loss_scale, g...) -> found_inf, first_bad, norm_sq, u...   one multi-tensor
 *                                  pass: u = g / scale, the inf/nan check and sum u^2
 *   OptimizerStep(found_inf, norm_sq, lr, step, P..., G..., S..., H...?)   multi-tensor SGD /
 *                                  AdamW / LAMB on fp32 (or half) parameters, refreshing the
 *                                  half copies H
 * Nothing is read back to the host: found_inf, lr, step and norm_sq are read by the kernels,
 * which skip the update when found_inf != 0 (a skipped step changes nothing, step included).
 * Multi-tensor launches follow apex's multi_tensor_apply: tensors cut into chunks of
 * MT_CHUNK elements, one block per chunk, up to MT_MAX tensors per launch (shape.h
 * apx_cu_mt_plan). Sums of squares accumulate in fp64 per chunk; chunk partials are added in
 * chunk order (deterministic). Scalars (bias corrections, clip factor) are computed in fp64 on
 * the device exactly as the CPU reference (training_real.inc) computes them on the host. */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define MT_CHUNK 65536
#define MT_MAX 36
#define MT_BLOCK APX_CU_MT_BLOCK

/* One multi-tensor launch: up to 5 tensor lists (per op: g/u, or P/G/S0/S1/H). */
struct MtArgs {
  void *p[5][MT_MAX];
  int8_t dt[5][MT_MAX];
  int64_t n[MT_MAX];
  int64_t cstart[MT_MAX]; /* global index of the tensor's first chunk */
  int32_t first;          /* global index of tensor 0 of this launch */
  int32_t count;
  int64_t chunk0;         /* global index of the launch's first chunk */
};

/* Which tensor (local index) owns global chunk g, and the chunk's element range. */
static __device__ __forceinline__ int mt_locate(const MtArgs &a, int64_t g, int64_t *i0, int64_t *i1) {
  int t = 0;
  while (t + 1 < a.count && a.cstart[t + 1] <= g) t++;
  int64_t c = g - a.cstart[t];
  *i0 = c * MT_CHUNK;
  *i1 = *i0 + MT_CHUNK < a.n[t] ? *i0 + MT_CHUNK : a.n[t];
  return t;
}

static __device__ __forceinline__ bool finite_f(float v) { return isfinite(v); }

/* ---- LossScaleSeed -------------------------------------------------------------------------- */

APX_CU_KERNEL(loss_scale_seed_kernel)(const void *scale, int sdt, float mult, void *out, int odt,
                                       int64_t n) {
  float v = ld_dt(scale, sdt, 0) * mult;
  APX_CU_GRID_STRIDE(i, n) st_dt(out, odt, i, v);
}

APX_CUDA_ENTRY(apx_cuda_loss_scale_seed) {
  const ApxAttrLossScaleSeed *a = (const ApxAttrLossScaleSeed *)attrs;
  if (ins[1].dtype != APX_DT_F32 || !apx_cu_is_float16(outs[0].dtype))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: loss_scale %s, dLoss %s",
                         apx_dtype_name(ins[1].dtype), apx_dtype_name(outs[0].dtype));
  int64_t n = apx_tensor_numel(&outs[0]);
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  loss_scale_seed_kernel<<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
      ins[1].data, ins[1].dtype, a->multiplier, outs[0].data, outs[0].dtype, n);
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- AssignState -------------------------------------------------------------------------------- */

/* src has dst's element count or one element (kernels/validate.h) */
APX_CUDA_ENTRY(apx_cuda_assign_state) {
  const ApxTensor *src = &ins[0], *dst = &ins[1];
  int64_t ns = apx_tensor_numel(src), nd = apx_tensor_numel(dst);
  if (src->data == dst->data && src->dtype == dst->dtype) return APX_STATUS_OK;
  return apx_cuda_convert(ctx, src->data, src->dtype, ns, dst->data, dst->dtype, nd);
}

/* ---- UnscaleCheck ------------------------------------------------------------------------------- */

/* list 0: g, list 1: u (may be NULL). Per chunk: sq (sum u^2, fp64) and the bad tensor index. */
APX_CU_KERNEL(unscale_kernel)(MtArgs a, const void *scale, int sdt,
                                                           double *part_sq, int32_t *part_bad) {
  __shared__ double sh[33];
  int64_t g = a.chunk0 + blockIdx.x, i0, i1;
  int t = mt_locate(a, g, &i0, &i1);
  const void *gp = a.p[0][t];
  void *up = a.p[1][t];
  int gdt = a.dt[0][t], udt = a.dt[1][t];
  float s = ld_dt(scale, sdt, 0);
  double sq = 0.0;
  int bad = 0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    float gv = ld_dt(gp, gdt, i), uv = gv / s;
    bad |= !finite_f(gv) || !finite_f(uv);
    if (up) st_dt(up, udt, i, uv);
    sq += (double)uv * (double)uv;
  }
  sq = block_sum(sq, sh);
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    part_sq[g] = sq;
    part_bad[g] = bad ? a.first + t : -1;
  }
}

APX_CU_KERNEL(unscale_finish_kernel)(const double *part_sq, const int32_t *part_bad, int64_t nch,
                                      void *found, int fdt, void *first, int idt, void *norm_sq,
                                      int ndt) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sq = 0.0;
  int32_t fb = -1;
  for (int64_t c = 0; c < nch; c++) {
    sq += part_sq[c];
    if (fb < 0 && part_bad[c] >= 0) fb = part_bad[c];
  }
  st_dt(found, fdt, 0, fb >= 0 ? 1.0f : 0.0f);
  if (idt == APX_DT_I64)
    ((long long *)first)[0] = fb;
  else
    ((int *)first)[0] = fb;
  if (ndt == APX_DT_F64)
    ((double *)norm_sq)[0] = sq;
  else
    st_dt(norm_sq, ndt, 0, (float)sq);
}

/* Plans the launches of n tensors with sizes[]: *out (malloc'ed), count returned (-1: OOM). */
static int64_t mt_launches(const int64_t *sizes, int32_t n, ApxCuMtLaunch **out) {
  int64_t nl = apx_cu_mt_plan(sizes, n, MT_CHUNK, MT_MAX, 65535, NULL, 0);
  *out = (ApxCuMtLaunch *)malloc((size_t)(nl ? nl : 1) * sizeof **out);
  if (!*out) return -1;
  apx_cu_mt_plan(sizes, n, MT_CHUNK, MT_MAX, 65535, *out, nl);
  return nl;
}

/* Fills the per-launch tensor table from lists[k][i] (tensor views, NULL / absent: no data). */
static void mt_fill(MtArgs *a, const ApxCuMtLaunch *l, const int64_t *sizes, const int64_t *cstart,
                    const ApxTensor *const *lists, const int *list_n, int n_lists, int32_t n) {
  memset(a, 0, sizeof *a);
  a->first = l->first;
  a->count = l->count;
  a->chunk0 = l->chunk0;
  for (int32_t j = 0; j < l->count; j++) {
    int32_t i = l->first + j;
    a->n[j] = sizes[i];
    a->cstart[j] = cstart[i];
    for (int k = 0; k < n_lists; k++) {
      const ApxTensor *t = list_n[k] > i ? &lists[k][i] : NULL;
      a->p[k][j] = t && t->data ? t->data : NULL;
      a->dt[k][j] = (int8_t)(t ? t->dtype : 0);
    }
  }
}

/* The layout (kernels/attrs.h) and shapes are checked by kernels/validate.h. */
APX_CUDA_ENTRY(apx_cuda_unscale_check) {
  int n = n_in - 1;
  if (ins[0].dtype != APX_DT_F32)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: loss scale of type %s",
                         apx_dtype_name(ins[0].dtype));
  if (outs[1].dtype != APX_DT_I32 && outs[1].dtype != APX_DT_I64)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: first_bad of type %s",
                         apx_dtype_name(outs[1].dtype));
  int64_t *sizes = (int64_t *)calloc((size_t)(2 * n + 1), sizeof(int64_t));
  if (!sizes) return apx_cuda_fail(ctx, APX_STATUS_OOM, "out of host memory");
  int64_t *cstart = sizes + n;
  int64_t nch = 0;
  ApxStatus st = APX_STATUS_OK;
  for (int i = 0; i < n && st == APX_STATUS_OK; i++) {
    const ApxTensor *g = &ins[1 + i], *u = &outs[3 + i];
    if (!apx_cu_is_float16(g->dtype) || (u->data && !apx_cu_is_float16(u->dtype)))
      st = apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: gradient %d of type %s (fp64: cpu only)",
                         i, apx_dtype_name(u->data && apx_cu_is_float16(g->dtype) ? u->dtype : g->dtype));
    sizes[i] = apx_tensor_numel(g);
    cstart[i] = nch;
    nch += (sizes[i] + MT_CHUNK - 1) / MT_CHUNK;
  }
  ApxCuMtLaunch *ls = NULL;
  int64_t nl = st == APX_STATUS_OK ? mt_launches(sizes, n, &ls) : 0;
  if (st == APX_STATUS_OK && nl < 0) st = apx_cuda_fail(ctx, APX_STATUS_OOM, "out of host memory");
  double *part_sq = NULL;
  if (st == APX_STATUS_OK)
    st = apx_cuda_tmp(ctx, (size_t)(nch + 1) * (sizeof(double) + sizeof(int32_t)), (void **)&part_sq);
  cudaStream_t s = apx_cu_stream(ctx);
  const ApxTensor *lists[2] = {ins + 1, outs + 3};
  int list_n[2] = {n, n};
  for (int64_t l = 0; l < nl && st == APX_STATUS_OK; l++) {
    if (ls[l].n_chunks == 0) continue;
    MtArgs a;
    mt_fill(&a, &ls[l], sizes, cstart, lists, list_n, 2, n);
    unscale_kernel<<<(unsigned)ls[l].n_chunks, MT_BLOCK, 0, s>>>(a, ins[0].data, ins[0].dtype, part_sq,
                                                                 (int32_t *)(part_sq + nch + 1));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) st = apx_cuda_fail_call(ctx, e, "unscale_kernel<<<>>>", __FILE__, __LINE__);
  }
  free(ls);
  free(sizes);
  if (st != APX_STATUS_OK) return st;
  unscale_finish_kernel<<<1, 32, 0, s>>>(part_sq, (const int32_t *)(part_sq + nch + 1), nch,
                                         outs[0].data, outs[0].dtype, outs[1].data, outs[1].dtype,
                                         outs[2].data, outs[2].dtype);
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- OptimizerStep ------------------------------------------------------------------------------ */

/* Per-step scalars, computed once on the device (CPU: training.c / training_real.inc). */
struct OptScalars {
  int32_t skip;
  int64_t t;
  double lr;
  float lr_f, clip, decay, step, bc2s, ib1, ib2;
};

APX_CU_KERNEL(opt_scalars_kernel)(ApxAttrOptimizer a, const void *found, int fdt, const void *norm_sq,
                                   int ndt, const void *lr, int lrdt, const void *step, int sdt,
                                   OptScalars *out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  OptScalars s;
  s.skip = ld_dt(found, fdt, 0) != 0.0f;
  int64_t t = sdt == APX_DT_I64 ? (int64_t)((const long long *)step)[0] : (int64_t)((const int *)step)[0];
  s.t = t + 1;
  double lrd = lrdt == APX_DT_F64 ? ((const double *)lr)[0] : (double)ld_dt(lr, lrdt, 0);
  double clip = 1.0;
  if (a.max_grad_norm > 0) {
    double nsq = ndt == APX_DT_F64 ? ((const double *)norm_sq)[0] : (double)ld_dt(norm_sq, ndt, 0);
    clip = (double)a.max_grad_norm / (sqrt(nsq) + 1e-6);
    if (clip > 1.0) clip = 1.0;
  }
  s.lr = lrd;
  s.lr_f = (float)lrd;
  s.clip = (float)clip;
  double bc1 = 1.0 - pow((double)a.beta1, (double)s.t), bc2 = 1.0 - pow((double)a.beta2, (double)s.t);
  s.decay = (float)(1.0 - lrd * (double)a.weight_decay);
  s.step = (float)(lrd / bc1);
  s.bc2s = (float)sqrt(bc2);
  s.ib1 = (float)(1.0 / bc1);
  s.ib2 = (float)(1.0 / bc2);
  *out = s;
}

/* lists: 0 P, 1 G, 2 S0, 3 S1, 4 H. SGD / AdamW update p in place and refresh h; LAMB writes
 * u (fp32 scratch at uoff[t] + i) and the chunk's sums of p^2 and u^2. */
APX_CU_KERNEL(opt_update_kernel)(MtArgs a, ApxAttrOptimizer at,
                                                              const OptScalars *sc, float *ubuf,
                                                              const int64_t *uoff, double *part_p,
                                                              double *part_u) {
  __shared__ double sh[33];
  if (sc->skip) return;
  int64_t g = a.chunk0 + blockIdx.x, i0, i1;
  int t = mt_locate(a, g, &i0, &i1);
  void *P = a.p[0][t], *S0 = a.p[2][t], *S1 = a.p[3][t], *H = a.p[4][t];
  const void *G = a.p[1][t];
  int pdt = a.dt[0][t], gdt = a.dt[1][t], s0dt = a.dt[2][t], s1dt = a.dt[3][t], hdt = a.dt[4][t];
  float cl = sc->clip, wd = at.weight_decay, lr = sc->lr_f;
  if (at.kind == APX_OPTIM_SGD) {
    float mom = at.momentum, damp = (float)(1.0 - (double)at.dampening);
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      float p = ld_dt(P, pdt, i), d = ld_dt(G, gdt, i) * cl + wd * p;
      if (S0) {
        float buf = sc->t == 1 ? d : mom * ld_dt(S0, s0dt, i) + damp * d;
        st_dt(S0, s0dt, i, buf);
        d = at.nesterov ? d + mom * buf : buf;
      }
      p -= lr * d;
      st_dt(P, pdt, i, p);
      if (H) st_dt(H, hdt, i, ld_dt(P, pdt, i));
    }
    return;
  }
  float b1 = at.beta1, b2 = at.beta2, eps = at.eps;
  float c1 = (float)(1.0 - (double)at.beta1), c2 = (float)(1.0 - (double)at.beta2);
  if (at.kind == APX_OPTIM_ADAMW) {
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      float gi = ld_dt(G, gdt, i) * cl;
      float m = b1 * ld_dt(S0, s0dt, i) + c1 * gi, v = b2 * ld_dt(S1, s1dt, i) + c2 * gi * gi;
      st_dt(S0, s0dt, i, m);
      st_dt(S1, s1dt, i, v);
      float pi = ld_dt(P, pdt, i) * sc->decay;
      st_dt(P, pdt, i, pi - sc->step * m / (sqrtf(v) / sc->bc2s + eps));
      if (H) st_dt(H, hdt, i, ld_dt(P, pdt, i));
    }
    return;
  }
  /* LAMB, phase 1 */
  double sp = 0.0, su = 0.0;
  float *u = ubuf + uoff[a.first + t];
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    float gi = ld_dt(G, gdt, i) * cl, p = ld_dt(P, pdt, i);
    float m = b1 * ld_dt(S0, s0dt, i) + c1 * gi, v = b2 * ld_dt(S1, s1dt, i) + c2 * gi * gi;
    st_dt(S0, s0dt, i, m);
    st_dt(S1, s1dt, i, v);
    float ui = (m * sc->ib1) / (sqrtf(v * sc->ib2) + eps) + wd * p;
    u[i] = ui;
    sp += (double)p * (double)p;
    su += (double)ui * (double)ui;
  }
  sp = block_sum(sp, sh);
  su = block_sum(su, sh);
  if (threadIdx.x == 0) {
    part_p[g] = sp;
    part_u[g] = su;
  }
}

/* LAMB phase 2: per tensor, the trust ratio from its chunks' sums (in chunk order). */
APX_CU_KERNEL(lamb_ratio_kernel)(ApxAttrOptimizer at, const OptScalars *sc, const double *part_p,
                                  const double *part_u, const int64_t *cstart, int32_t n,
                                  float *k_out) {
  if (sc->skip) return;
  APX_CU_GRID_STRIDE(t, (int64_t)n) {
    double sp = 0.0, su = 0.0;
    for (int64_t c = cstart[t]; c < cstart[t + 1]; c++) {
      sp += part_p[c];
      su += part_u[c];
    }
    double pn = sqrt(sp), un = sqrt(su);
    double r = (at.weight_decay != 0 && pn > 0 && un > 0) ? pn / un : 1.0;
    k_out[t] = (float)(sc->lr * r);
  }
}

/* LAMB phase 3: p -= k u, refresh h. */
APX_CU_KERNEL(lamb_apply_kernel)(MtArgs a, const OptScalars *sc,
                                                              const float *ubuf, const int64_t *uoff,
                                                              const float *kt) {
  if (sc->skip) return;
  int64_t g = a.chunk0 + blockIdx.x, i0, i1;
  int t = mt_locate(a, g, &i0, &i1);
  void *P = a.p[0][t], *H = a.p[4][t];
  int pdt = a.dt[0][t], hdt = a.dt[4][t];
  const float *u = ubuf + uoff[a.first + t];
  float k = kt[a.first + t];
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    st_dt(P, pdt, i, ld_dt(P, pdt, i) - k * u[i]);
    if (H) st_dt(H, hdt, i, ld_dt(P, pdt, i));
  }
}

/* Parameters without chunks (empty) still get their half copy refreshed: nothing to do. The
 * step counter advances on a taken step. */
APX_CU_KERNEL(opt_step_kernel)(const OptScalars *sc, void *step, int sdt) {
  if (blockIdx.x != 0 || threadIdx.x != 0 || sc->skip) return;
  if (sdt == APX_DT_I64)
    ((long long *)step)[0] = sc->t;
  else
    ((int *)step)[0] = (int)sc->t;
}

/* The input layout (kernels/attrs.h) and sizes are checked by kernels/validate.h. */
APX_CUDA_ENTRY(apx_cuda_optimizer_step) {
  const ApxAttrOptimizer *a = (const ApxAttrOptimizer *)attrs;
  int n = a->n_params, k = apx_optimizer_state_groups(a), mw = a->master_weights != 0;
  if (ins[3].dtype != APX_DT_I64 && ins[3].dtype != APX_DT_I32)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: step of type %s",
                         apx_dtype_name(ins[3].dtype));
  if (!apx_cu_is_float16(ins[0].dtype) || !apx_cu_is_float16(ins[2].dtype) ||
      (!apx_cu_is_float16(ins[1].dtype) && ins[1].dtype != APX_DT_F64))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: fp64 scalars");
  const ApxTensor *P = &ins[4], *G = &ins[4 + n];
  const ApxTensor *S0 = k > 0 ? &ins[4 + 2 * n] : NULL, *S1 = k > 1 ? &ins[4 + 3 * n] : NULL;
  const ApxTensor *H = mw ? &ins[4 + (2 + k) * n] : NULL;
  int64_t *sizes = (int64_t *)calloc((size_t)(3 * n + 2), sizeof(int64_t));
  if (!sizes) return apx_cuda_fail(ctx, APX_STATUS_OOM, "out of host memory");
  int64_t *cstart = sizes + n, *uoff = cstart + n + 1;
  int64_t nch = 0, total = 0;
  ApxStatus st = APX_STATUS_OK;
  for (int i = 0; i < n && st == APX_STATUS_OK; i++) {
    int64_t ne = apx_tensor_numel(&P[i]);
    if (!apx_cu_is_float16(P[i].dtype) || !apx_cu_is_float16(G[i].dtype) ||
             (S0 && !apx_cu_is_float16(S0[i].dtype)) || (S1 && !apx_cu_is_float16(S1[i].dtype)) ||
             (H && H[i].data && !apx_cu_is_float16(H[i].dtype)))
      st = apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                         "not supported yet on cuda: parameter %d of type %s (fp64: cpu only)", i,
                         apx_dtype_name(P[i].dtype));
    sizes[i] = ne;
    cstart[i] = nch;
    uoff[i] = total;
    nch += (ne + MT_CHUNK - 1) / MT_CHUNK;
    total += ne;
  }
  cstart[n] = nch;
  ApxCuMtLaunch *ls = NULL;
  int64_t nl = st == APX_STATUS_OK ? mt_launches(sizes, n, &ls) : 0;
  if (st == APX_STATUS_OK && nl < 0) st = apx_cuda_fail(ctx, APX_STATUS_OOM, "out of host memory");
  cudaStream_t s = apx_cu_stream(ctx);
  /* device scratch: scalars | cstart (n + 1) | uoff (n) | k (n) | part_p, part_u (nch) | u (total) */
  char *scratch = NULL;
  int lamb = a->kind == APX_OPTIM_LAMB;
  size_t b_sc = 256, b_idx = (size_t)(2 * n + 1) * sizeof(int64_t), b_k = ((size_t)n * sizeof(float) + 7) / 8 * 8;
  size_t b_part = lamb ? (size_t)(2 * nch) * sizeof(double) : 0, b_u = lamb ? (size_t)total * sizeof(float) : 0;
  if (st == APX_STATUS_OK) st = apx_cuda_tmp(ctx, b_sc + b_idx + b_k + b_part + b_u + 8, (void **)&scratch);
  OptScalars *sc = (OptScalars *)scratch;
  int64_t *d_cstart = (int64_t *)(scratch + b_sc), *d_uoff = d_cstart + n + 1;
  float *d_k = (float *)(scratch + b_sc + b_idx);
  double *part_p = (double *)(scratch + b_sc + b_idx + b_k), *part_u = part_p + nch;
  float *ubuf = (float *)(scratch + b_sc + b_idx + b_k + b_part);
  if (st == APX_STATUS_OK && lamb) {
    /* index tables: a pageable host source is staged by the driver before the call returns */
    cudaError_t e = cudaMemcpyAsync(d_cstart, cstart, b_idx, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) st = apx_cuda_fail_call(ctx, e, "cudaMemcpyAsync(index tables)", __FILE__, __LINE__);
  }
  if (st == APX_STATUS_OK) {
    opt_scalars_kernel<<<1, 32, 0, s>>>(*a, ins[0].data, ins[0].dtype, ins[1].data, ins[1].dtype,
                                        ins[2].data, ins[2].dtype, ins[3].data, ins[3].dtype, sc);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) st = apx_cuda_fail_call(ctx, e, "opt_scalars_kernel<<<>>>", __FILE__, __LINE__);
  }
  static const ApxTensor none = {};
  const ApxTensor *lists[5] = {P, G, S0 ? S0 : &none, S1 ? S1 : &none, H ? H : &none};
  int list_n[5] = {n, n, S0 ? n : 0, S1 ? n : 0, H ? n : 0};
  for (int phase = 0; phase < (lamb ? 2 : 1) && st == APX_STATUS_OK; phase++) {
    if (phase == 1) {
      lamb_ratio_kernel<<<apx_cu_grid(ctx, n, 128), 128, 0, s>>>(*a, sc, part_p, part_u, d_cstart, n, d_k);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) {
        st = apx_cuda_fail_call(ctx, e, "lamb_ratio_kernel<<<>>>", __FILE__, __LINE__);
        break;
      }
    }
    for (int64_t l = 0; l < nl && st == APX_STATUS_OK; l++) {
      if (ls[l].n_chunks == 0) continue;
      MtArgs ma;
      mt_fill(&ma, &ls[l], sizes, cstart, lists, list_n, 5, n);
      if (phase == 0)
        opt_update_kernel<<<(unsigned)ls[l].n_chunks, MT_BLOCK, 0, s>>>(ma, *a, sc, ubuf, d_uoff,
                                                                         part_p, part_u);
      else
        lamb_apply_kernel<<<(unsigned)ls[l].n_chunks, MT_BLOCK, 0, s>>>(ma, sc, ubuf, d_uoff, d_k);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) st = apx_cuda_fail_call(ctx, e, "optimizer kernel<<<>>>", __FILE__, __LINE__);
    }
  }
  free(ls);
  free(sizes);
  if (st != APX_STATUS_OK) return st;
  opt_step_kernel<<<1, 32, 0, s>>>(sc, ins[3].data, ins[3].dtype);
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
