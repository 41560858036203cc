/* matmul.cu - matrix products through cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F,
 * fp32 alpha / beta): Gemm(A, B, C?), MatMul (numpy: 1-D operands, broadcast batch dims),
 * FusedMatMul (transposes, alpha, batches summed into a smaller output for gradients),
 * FusedDense(X, W, B?) -> Y, Aux? and FusedDenseGrad(dY, X, W, T) -> dX?, dW?, dB?.
 *
 * Row-major products are issued as their column-major transposes: Y^T (N, M) = op(B)^T op(A)^T,
 * so cuBLASLt's "A" is our B and its "B" our A. Batched products are strided-batched calls
 * (stride 0 for a shared operand); a shared right operand folds the batches into one tall
 * product; gradients summing batches stack them along K (one product) or accumulate in fp32.
 *
 * FusedDense uses cuBLASLt epilogues where they compute exactly the op: BIAS, RELU_BIAS, RELU
 * (beta = 1), and GELU_AUX_BIAS / GELU_BIAS for the tanh GELU (cuBLASLt's GELU is the tanh
 * approximation); otherwise (erf GELU, beta != 1, Aux of a ReLU, a bias of another type) the
 * product goes to an fp32 temporary and one epilogue kernel adds the bias, applies the
 * activation (ew_math.h) and rounds once - the CPU reference's arithmetic. FusedDenseGrad
 * computes g = dY * act'(T) in fp32 for the bias gradient and stores g in dY's type for the
 * two products (one rounding of g that the fp32 CPU path does not have; tolerances cover it). */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/lt_plan.h"
#include "kernels/cuda/reduce.cuh"

#define APX_CUBLAS_TRY(ctx, call)                                                          \
  do {                                                                                     \
    cublasStatus_t apx_b_ = (call);                                                        \
    if (apx_b_ != CUBLAS_STATUS_SUCCESS)                                                   \
      return apx_cuda_fail((ctx), APX_STATUS_RUNTIME, "%s: %s (%s:%d)", #call,             \
                           cublasLtGetStatusName(apx_b_), __FILE__, __LINE__);             \
  } while (0)

static cudaDataType lt_type(ApxDType dt) {
  switch (dt) {
    case APX_DT_F16: return CUDA_R_16F;
    case APX_DT_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

/* One (strided-batched) row-major product D = alpha op(A) op(B) + beta C (C = D's layout). */
typedef struct LtCall {
  int ta, tb;
  int64_t M, N, K;
  cudaDataType ab, cd;
  const void *A, *B, *C;
  void *D;
  int64_t batch, sa, sb, sd;
  float alpha, beta;
  cublasLtEpilogue_t epi;
  const void *bias;
  void *aux;
  int64_t aux_ld;
} LtCall;

static LtCall lt_call(const void *A, const void *B, void *D, int64_t M, int64_t N, int64_t K, int ta,
                      int tb, ApxDType ab, ApxDType cd, float alpha) {
  LtCall c;
  memset(&c, 0, sizeof c);
  c.A = A;
  c.B = B;
  c.D = D;
  c.C = D;
  c.M = M;
  c.N = N;
  c.K = K;
  c.ta = ta;
  c.tb = tb;
  c.ab = lt_type(ab);
  c.cd = lt_type(cd);
  c.alpha = alpha;
  c.batch = 1;
  c.epi = CUBLASLT_EPILOGUE_DEFAULT;
  return c;
}

typedef struct LtDescs {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c, d;
  cublasLtMatmulPreference_t pref;
} LtDescs;

static void lt_destroy(LtDescs *s) {
  if (s->pref) cublasLtMatmulPreferenceDestroy(s->pref);
  if (s->d) cublasLtMatrixLayoutDestroy(s->d);
  if (s->c) cublasLtMatrixLayoutDestroy(s->c);
  if (s->b) cublasLtMatrixLayoutDestroy(s->b);
  if (s->a) cublasLtMatrixLayoutDestroy(s->a);
  if (s->op) cublasLtMatmulDescDestroy(s->op);
}

static ApxStatus lt_layout(ApxCudaCtx *ctx, cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows,
                           int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  APX_CUBLAS_TRY(ctx, cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    APX_CUBLAS_TRY(ctx, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    APX_CUBLAS_TRY(ctx, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &stride, sizeof stride));
  }
  return APX_STATUS_OK;
}

/* Builds the descriptors and finds an algorithm; *found = 0 when cuBLASLt has none for this
 * combination (callers fall back to a plainer path). The epilogue's bias and aux pointers are
 * set by lt_try on every call (the descriptors are cached across calls). */
static ApxStatus lt_prepare(ApxCudaCtx *ctx, const LtCall *c, LtDescs *s,
                            cublasLtMatmulHeuristicResult_t *h, int *found) {
  *found = 0;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  cudaDataType st = CUDA_R_32F;
  APX_CUBLAS_TRY(ctx, cublasLtMatmulDescCreate(&s->op, ct, st));
  cublasOperation_t opa = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (c->epi != CUBLASLT_EPILOGUE_DEFAULT) {
    APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi));
    if (c->bias)
      APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->bias,
                                                         sizeof c->bias));
    if (c->aux) {
      APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                         &c->aux, sizeof c->aux));
      APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                         &c->aux_ld, sizeof c->aux_ld));
    }
  }
  /* cuBLASLt A = our B: (N, K) col-major when not transposed */
  APX_TRY(lt_layout(ctx, &s->a, c->ab, c->tb ? c->K : c->N, c->tb ? c->N : c->K, c->tb ? c->K : c->N,
                    c->batch, c->sb));
  APX_TRY(lt_layout(ctx, &s->b, c->ab, c->ta ? c->M : c->K, c->ta ? c->K : c->M, c->ta ? c->M : c->K,
                    c->batch, c->sa));
  APX_TRY(lt_layout(ctx, &s->c, c->cd, c->N, c->M, c->N, c->batch, c->sd));
  APX_TRY(lt_layout(ctx, &s->d, c->cd, c->N, c->M, c->N, c->batch, c->sd));
  APX_CUBLAS_TRY(ctx, cublasLtMatmulPreferenceCreate(&s->pref));
  uint64_t ws = ctx->lt_ws_bytes;
  APX_CUBLAS_TRY(ctx, cublasLtMatmulPreferenceSetAttribute(s->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &ws, sizeof ws));
  /* cuBLASLt assumes 256-byte aligned operands unless told otherwise and may pick a kernel
   * whose vector loads need it; the arena guarantees 64 bytes and batch-split products and
   * views use offset pointers, so every call states the real alignment of each operand */
  const uint32_t al[4] = {apx_lt_align(c->B), apx_lt_align(c->A), apx_lt_align(c->C), apx_lt_align(c->D)}; /* Lt's A B C D */
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++)
    APX_CUBLAS_TRY(ctx, cublasLtMatmulPreferenceSetAttribute(s->pref, al_attr[i], &al[i], sizeof al[i]));
  int n = 0;
  ctx->lt_heuristic_calls++;
  cublasStatus_t bs = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt, s->op, s->a, s->b, s->c,
                                                     s->d, s->pref, 1, h, &n);
  /* no algorithm for this combination (NOT_SUPPORTED, or INVALID_VALUE for an epilogue's
   * alignment rules): the caller falls back to a plainer path or reports it */
  if (bs == CUBLAS_STATUS_NOT_SUPPORTED || bs == CUBLAS_STATUS_INVALID_VALUE ||
      (bs == CUBLAS_STATUS_SUCCESS && n == 0)) {
    snprintf(ctx->err, sizeof ctx->err, "cublasLtMatmulAlgoGetHeuristic: %s, %d algorithms",
             cublasLtGetStatusName(bs), n);
    return APX_STATUS_OK;
  }
  if (bs != CUBLAS_STATUS_SUCCESS)
    return apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "cublasLtMatmulAlgoGetHeuristic: %s (%s:%d)",
                         cublasLtGetStatusName(bs), __FILE__, __LINE__);
  *found = 1;
  return APX_STATUS_OK;
}

/* ---- descriptor and heuristic cache ----------------------------------------------------------
 * A plan's products have static shapes, so their descriptors and cuBLASLt's choice are made
 * once per distinct product - everything of LtCall but the data pointers and alpha / beta,
 * plus the operands' alignments - and reused by every later step (no heuristic query, no
 * descriptor built per call; CUDA Graph capture replays the same calls). */
typedef struct LtKey {
  int32_t ta, tb, ab, cd, epi, has_bias, has_aux, pad;
  int64_t M, N, K, batch, sa, sb, sd, aux_ld;
  uint32_t al[4];
} LtKey;

typedef struct LtEntry {
  LtKey key;
  int used, found;
  LtDescs s;
  cublasLtMatmulHeuristicResult_t h;
  char why[160]; /* found = 0: cuBLASLt's answer */
} LtEntry;

typedef struct LtCache {
  LtEntry *e;
  int64_t cap, n;
} LtCache;

static LtKey lt_key(const LtCall *c) {
  LtKey k;
  memset(&k, 0, sizeof k);
  k.ta = c->ta, k.tb = c->tb, k.ab = (int32_t)c->ab, k.cd = (int32_t)c->cd, k.epi = (int32_t)c->epi;
  k.has_bias = c->bias != NULL, k.has_aux = c->aux != NULL;
  k.M = c->M, k.N = c->N, k.K = c->K, k.batch = c->batch, k.sa = c->sa, k.sb = c->sb, k.sd = c->sd;
  k.aux_ld = c->aux ? c->aux_ld : 0;
  k.al[0] = apx_lt_align(c->B), k.al[1] = apx_lt_align(c->A), k.al[2] = apx_lt_align(c->C), k.al[3] = apx_lt_align(c->D);
  return k;
}

static uint64_t lt_hash(const LtKey *k) {
  const unsigned char *b = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The cache slot of key k (open addressing; grows at half full): an unused slot to fill, or
 * the entry. NULL: out of host memory. */
static LtEntry *lt_slot(ApxCudaCtx *ctx, const LtKey *k) {
  LtCache *lc = (LtCache *)ctx->lt_cache;
  if (!lc) {
    lc = (LtCache *)calloc(1, sizeof *lc);
    if (!lc) return NULL;
    ctx->lt_cache = lc;
  }
  if (2 * (lc->n + 1) > lc->cap) {
    int64_t ncap = lc->cap ? 2 * lc->cap : 256;
    LtEntry *ne = (LtEntry *)calloc((size_t)ncap, sizeof *ne);
    if (!ne) return NULL;
    for (int64_t i = 0; i < lc->cap; i++) {
      if (!lc->e[i].used) continue;
      uint64_t j = lt_hash(&lc->e[i].key) & (uint64_t)(ncap - 1);
      while (ne[j].used) j = (j + 1) & (uint64_t)(ncap - 1);
      ne[j] = lc->e[i];
    }
    free(lc->e);
    lc->e = ne;
    lc->cap = ncap;
  }
  uint64_t j = lt_hash(k) & (uint64_t)(lc->cap - 1);
  while (lc->e[j].used && memcmp(&lc->e[j].key, k, sizeof *k) != 0) j = (j + 1) & (uint64_t)(lc->cap - 1);
  return &lc->e[j];
}

void apx_cuda_lt_cache_free(ApxCudaCtx *ctx) {
  LtCache *lc = (LtCache *)ctx->lt_cache;
  if (!lc) return;
  for (int64_t i = 0; i < lc->cap; i++)
    if (lc->e[i].used) lt_destroy(&lc->e[i].s);
  free(lc->e);
  free(lc);
  ctx->lt_cache = NULL;
}

/* The cache entry of product c, made (descriptors, heuristic query) when it is new. */
static ApxStatus lt_entry(ApxCudaCtx *ctx, const LtCall *c, LtEntry **out) {
  LtKey k = lt_key(c);
  LtEntry *e = lt_slot(ctx, &k);
  *out = e;
  if (!e) return apx_cuda_fail(ctx, APX_STATUS_OOM, "cuBLASLt cache: out of host memory");
  if (!e->used) {
    LtEntry fresh;
    memset(&fresh, 0, sizeof fresh);
    ApxStatus st = lt_prepare(ctx, c, &fresh.s, &fresh.h, &fresh.found);
    if (st != APX_STATUS_OK) {
      lt_destroy(&fresh.s);
      return st;
    }
    if (!fresh.found) {
      snprintf(fresh.why, sizeof fresh.why, "%.159s", ctx->err);
      lt_destroy(&fresh.s);
      memset(&fresh.s, 0, sizeof fresh.s);
    }
    fresh.key = k;
    fresh.used = 1;
    *e = fresh;
    ((LtCache *)ctx->lt_cache)->n++;
  }
  return APX_STATUS_OK;
}

/* Queues the product; *done = 0 (and nothing queued) when cuBLASLt has no algorithm. */
static ApxStatus lt_try(ApxCudaCtx *ctx, const LtCall *c, int *done) {
  *done = 0;
  LtEntry *e = NULL;
  APX_TRY(lt_entry(ctx, c, &e));
  if (!e->found) {
    snprintf(ctx->err, sizeof ctx->err, "%s", e->why);
    return APX_STATUS_OK;
  }
  if (c->bias)
    APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(e->s.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->bias,
                                                       sizeof c->bias));
  if (c->aux)
    APX_CUBLAS_TRY(ctx, cublasLtMatmulDescSetAttribute(e->s.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                       &c->aux, sizeof c->aux));
  cublasStatus_t bs = cublasLtMatmul((cublasLtHandle_t)ctx->lt, e->s.op, &c->alpha, c->B, e->s.a, c->A, e->s.b,
                                     &c->beta, c->C, e->s.c, c->D, e->s.d, &e->h.algo, ctx->lt_ws,
                                     ctx->lt_ws_bytes, apx_cu_stream(ctx));
  if (bs != CUBLAS_STATUS_SUCCESS)
    return apx_cuda_fail(ctx, APX_STATUS_RUNTIME, "cublasLtMatmul: %s (M %lld, N %lld, K %lld, batch %lld) (%s:%d)",
                         cublasLtGetStatusName(bs), (long long)c->M, (long long)c->N, (long long)c->K,
                         (long long)c->batch, __FILE__, __LINE__);
  *done = 1;
  return APX_STATUS_OK;
}

/* Queues the product; a strided batch without an algorithm (a stride-0 operand, say) is
 * split into single products. */
static ApxStatus lt_run(ApxCudaCtx *ctx, const LtCall *c) {
  int done = 0;
  APX_TRY(lt_try(ctx, c, &done));
  if (done) return APX_STATUS_OK;
  if (c->batch > 1) {
    size_t ea = c->ab == CUDA_R_32F ? 4 : 2, ed = c->cd == CUDA_R_32F ? 4 : 2;
    for (int64_t k = 0; k < c->batch; k++) {
      LtCall one = *c;
      one.batch = 1;
      one.A = (const char *)c->A + k * c->sa * (int64_t)ea;
      one.B = (const char *)c->B + k * c->sb * (int64_t)ea;
      one.D = (char *)c->D + k * c->sd * (int64_t)ed;
      one.C = one.D;
      APX_TRY(lt_run(ctx, &one));
    }
    return APX_STATUS_OK;
  }
  char why[sizeof ctx->err];
  memcpy(why, ctx->err, sizeof why);
  return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                       "not supported yet on cuda: no cuBLASLt algorithm for M %lld, N %lld, K %lld (%s)",
                       (long long)c->M, (long long)c->N, (long long)c->K, why);
}

/* ---- the cache filled from a plan (lt_plan.h) ----------------------------------------------- */

static cublasLtEpilogue_t lt_epilogue(int32_t e) {
  switch (e) {
    case APX_LT_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case APX_LT_EPI_RELU: return CUBLASLT_EPILOGUE_RELU;
    case APX_LT_EPI_RELU_BIAS: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case APX_LT_EPI_GELU: return CUBLASLT_EPILOGUE_GELU;
    case APX_LT_EPI_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case APX_LT_EPI_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX;
    case APX_LT_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/* An address with exactly alignment al (never dereferenced: the cache key and cuBLASLt's
 * preferences only read the operands' alignments). */
static const void *aligned_as(uint32_t al) { return (const void *)(uintptr_t)(al ? al : 256); }

ApxStatus apx_cuda_prepare(ApxCudaCtx *ctx, const ApxLtCallView *calls, int32_t n) {
  ApxLtProduct *p = NULL;
  int64_t np = apx_lt_plan_products(calls, n, &p);
  if (np < 0) return apx_cuda_fail(ctx, APX_STATUS_OOM, "cuBLASLt cache: out of host memory");
  ApxStatus st = APX_STATUS_OK;
  for (int64_t i = 0; i < np && st == APX_STATUS_OK; i++) {
    const ApxLtKey *k = &p[i].key;
    LtCall c = lt_call(aligned_as(k->al[1]), aligned_as(k->al[0]), (void *)aligned_as(k->al[3]), k->M, k->N, k->K,
                       k->ta, k->tb, (ApxDType)k->ab, (ApxDType)k->cd, 1.0f);
    c.C = aligned_as(k->al[2]);
    c.batch = k->batch;
    c.sa = k->sa;
    c.sb = k->sb;
    c.sd = k->sd;
    c.epi = lt_epilogue(k->epi);
    c.bias = k->has_bias ? p[i].bias : NULL;
    c.aux = k->has_aux ? p[i].aux : NULL;
    c.aux_ld = k->aux_ld;
    LtEntry *e = NULL;
    int64_t before = ctx->lt_heuristic_calls;
    st = lt_entry(ctx, &c, &e);
    ctx->lt_prefilled += ctx->lt_heuristic_calls - before;
  }
  free(p);
  return st;
}

static ApxStatus same_float(ApxCudaCtx *ctx, const ApxTensor *t, ApxDType dt, const char *what) {
  if (t->dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: %s of type %s with %s",
                         what, apx_dtype_name(t->dtype), apx_dtype_name(dt));
  if (!apx_cu_is_float16(dt))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s (fp64: cpu only)",
                         apx_dtype_name(dt));
  return APX_STATUS_OK;
}

/* ---- Gemm ------------------------------------------------------------------------------------- */

/* 2-D shapes (kernels/validate.h) */
APX_CUDA_ENTRY(apx_cuda_gemm) {
  const ApxAttrGemm *g = (const ApxAttrGemm *)attrs;
  const ApxTensor *A = &ins[0], *B = &ins[1];
  ApxTensor *Y = &outs[0];
  ApxDType dt = Y->dtype;
  APX_TRY(same_float(ctx, A, dt, "A"));
  APX_TRY(same_float(ctx, B, dt, "B"));
  int64_t M = g->trans_a ? A->dims[1] : A->dims[0], K = g->trans_a ? A->dims[0] : A->dims[1];
  int64_t N = g->trans_b ? B->dims[0] : B->dims[1];
  if (M == 0 || N == 0) return APX_STATUS_OK;
  const ApxTensor *C = apx_cu_has(ins, n_in, 2) && g->beta != 0 ? &ins[2] : NULL;
  if (C) APX_TRY(same_float(ctx, C, dt, "C"));
  if (K == 0) {
    if (C) return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: K = 0 with C");
    APX_CUDA_TRY(ctx, cudaMemsetAsync(Y->data, 0, apx_tensor_bytes(Y), apx_cu_stream(ctx)));
    return APX_STATUS_OK;
  }
  LtCall c = lt_call(A->data, B->data, Y->data, M, N, K, g->trans_a, g->trans_b, dt, dt, g->alpha);
  if (C) {
    /* a bias row (N) with beta 1: the BIAS epilogue; else C broadcast into Y, then beta */
    int row = apx_tensor_numel(C) == N && (C->rank == 1 || (C->rank == 2 && C->dims[0] == 1));
    if (row && g->beta == 1.0f && !ctx->no_epilogue) {
      LtCall cb = c;
      cb.epi = CUBLASLT_EPILOGUE_BIAS;
      cb.bias = C->data;
      int done = 0;
      APX_TRY(lt_try(ctx, &cb, &done));
      if (done) return APX_STATUS_OK;
    }
    APX_TRY(apx_cuda_broadcast_copy(ctx, C, Y));
    c.beta = g->beta;
  }
  return lt_run(ctx, &c);
}

/* ---- MatMul, FusedMatMul -------------------------------------------------------------------------- */

APX_CUDA_ENTRY(apx_cuda_matmul) {
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  float alpha = 1.0f;
  if (op == APX_OP_FusedMatMul) {
    const ApxAttrFusedMatMul *f = (const ApxAttrFusedMatMul *)attrs;
    p.ta = f->trans_a;
    p.tb = f->trans_b;
    alpha = f->alpha;
  }
  const ApxTensor *A = &ins[0], *B = &ins[1];
  ApxTensor *Y = &outs[0];
  ApxDType dt = Y->dtype;
  APX_TRY(same_float(ctx, A, dt, "A"));
  APX_TRY(same_float(ctx, B, dt, "B"));
  if (apx_matmul_plan(&p, A, B, Y, ctx->err, sizeof ctx->err)) return APX_STATUS_BAD_INPUT;
  int64_t ny = apx_tensor_numel(Y);
  if (ny == 0) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  size_t es = apx_dtype_size(dt);
  if (p.K == 0 || p.bc.numel == 0) {
    APX_CUDA_TRY(ctx, cudaMemsetAsync(Y->data, 0, (size_t)ny * es, s));
    return APX_STATUS_OK;
  }
  if (!p.reduce) {
    int32_t folded = 0;
    int64_t n_calls = apx_cu_matmul_n_calls(&p, &folded);
    for (int64_t k = 0; k < n_calls; k++) {
      ApxCuGemmCall gc;
      apx_cu_matmul_call(&p, k, folded, &gc);
      LtCall c = lt_call((const char *)A->data + gc.a_off * (int64_t)es, (const char *)B->data + gc.b_off * (int64_t)es,
                         (char *)Y->data + gc.y_off * (int64_t)es, gc.M, p.N, p.K, p.ta, p.tb, dt, dt, alpha);
      c.batch = gc.batch;
      c.sa = gc.a_stride;
      c.sb = gc.b_stride;
      c.sd = gc.y_stride;
      APX_TRY(lt_run(ctx, &c));
    }
    return APX_STATUS_OK;
  }
  ApxCuGemmCall gc;
  if (apx_cu_matmul_stacked(&p, &gc)) {
    LtCall c = lt_call(A->data, B->data, Y->data, gc.M, p.N, gc.K, p.ta, p.tb, dt, dt, alpha);
    return lt_run(ctx, &c);
  }
  /* general reduction over batches: accumulate in fp32, round once */
  float *acc = NULL;
  APX_TRY(apx_cuda_tmp(ctx, (size_t)ny * sizeof(float), (void **)&acc));
  APX_CUDA_TRY(ctx, cudaMemsetAsync(acc, 0, (size_t)ny * sizeof(float), s));
  int64_t sA = p.M * p.K, sB = p.K * p.N, sY = p.M * p.N;
  for (int64_t b = 0; b < p.bc.numel; b++) {
    int64_t off[3];
    apx_bcast_offsets(&p.bc, b, off);
    LtCall c = lt_call((const char *)A->data + off[0] * sA * (int64_t)es,
                       (const char *)B->data + off[1] * sB * (int64_t)es, acc + off[2] * sY, p.M, p.N,
                       p.K, p.ta, p.tb, dt, APX_DT_F32, alpha);
    c.beta = 1.0f;
    APX_TRY(lt_run(ctx, &c));
  }
  return apx_cuda_convert(ctx, acc, APX_DT_F32, ny, Y->data, dt, ny);
}

/* ---- FusedDense ---------------------------------------------------------------------------------- */

/* pre (M, N) fp32 = alpha X op(W); v = pre + beta b[j]; aux = v; y = act(v) */
template <typename T>
APX_CU_KERNEL(dense_epilogue_kernel)(const float *pre, const void *b, int bdt, float beta, T *y,
                                      T *aux, int64_t M, int64_t N, int act) {
  APX_CU_GRID_STRIDE(i, M * N) {
    float v = pre[i] + (b ? beta * ld_dt(b, bdt, i % N) : 0.0f);
    if (aux) aux[i] = st<T>(v);
    float r;
    switch (act) {
      case APX_ACT_RELU: r = apx_relu_f32(v); break;
      case APX_ACT_GELU: r = apx_gelu_f32(v); break;
      case APX_ACT_GELU_TANH: r = apx_gelu_tanh_f32(v); break;
      default: r = v; break;
    }
    y[i] = st<T>(r);
  }
}

/* X (..., K), W (K, N) or (N, K), Y (..., N) (checked by kernels/validate.h): rows M, N, K */
static void dense_shape(const ApxAttrFusedDense *a, const ApxTensor *x, const ApxTensor *w, int64_t *M,
                        int64_t *N, int64_t *K) {
  *K = x->dims[x->rank - 1];
  *N = a->trans_w ? w->dims[0] : w->dims[1];
  *M = apx_tensor_numel(x) / (*K ? *K : 1);
}

APX_CUDA_ENTRY(apx_cuda_fused_dense) {
  const ApxAttrFusedDense *a = (const ApxAttrFusedDense *)attrs;
  int64_t M = 0, N = 0, K = 0;
  dense_shape(a, &ins[0], &ins[1], &M, &N, &K);
  ApxDType dt = outs[0].dtype;
  APX_TRY(same_float(ctx, &ins[0], dt, "X"));
  APX_TRY(same_float(ctx, &ins[1], dt, "W"));
  const ApxTensor *b = apx_cu_has(ins, n_in, 2) ? &ins[2] : NULL; /* any float type (ld_dt) */
  ApxTensor *aux = apx_cu_has(outs, n_out, 1) ? &outs[1] : NULL;
  if (aux) APX_TRY(same_float(ctx, aux, dt, "Aux"));
  if (M * N == 0) return APX_STATUS_OK;
  if (K == 0) return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: K = 0");
  LtCall c = lt_call(ins[0].data, ins[1].data, outs[0].data, M, N, K, 0, a->trans_w, dt, dt, a->alpha);
  /* cuBLASLt epilogues that are exactly the op */
  int bias_ok = !b || (a->beta == 1.0f && b->dtype == dt);
  int epi_ok = bias_ok && !ctx->no_epilogue;
  switch (a->activation) {
    case APX_ACT_NONE: c.epi = b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; epi_ok &= !aux; break;
    case APX_ACT_RELU: c.epi = b ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; epi_ok &= !aux; break;
    case APX_ACT_GELU_TANH:
      c.epi = aux ? (b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                  : (b ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
      epi_ok &= !aux || N % 8 == 0;
      break;
    default: epi_ok = 0; break;
  }
  if (epi_ok) {
    c.bias = b ? b->data : NULL;
    if (aux) {
      c.aux = aux->data;
      c.aux_ld = N;
    }
    int done = 0;
    APX_TRY(lt_try(ctx, &c, &done));
    if (done) return APX_STATUS_OK;
  }
  /* fp32 product, then bias + activation + one rounding */
  float *pre = NULL;
  APX_TRY(apx_cuda_tmp(ctx, (size_t)(M * N) * sizeof(float), (void **)&pre));
  LtCall p = lt_call(ins[0].data, ins[1].data, pre, M, N, K, 0, a->trans_w, dt, APX_DT_F32, a->alpha);
  APX_TRY(lt_run(ctx, &p));
  int block = apx_cu_block(ctx, 256);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    dense_epilogue_kernel<T><<<apx_cu_grid(ctx, M * N, block), block, 0, apx_cu_stream(ctx)>>>(
        pre, b ? b->data : NULL, b ? b->dtype : 0, a->beta, (T *)outs[0].data,
        aux ? (T *)aux->data : NULL, M, N, a->activation);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ---- FusedDenseGrad ------------------------------------------------------------------------------- */

static __device__ __forceinline__ float act_grad(int act, float g, float t) {
  switch (act) {
    case APX_ACT_RELU: return apx_relu_grad_f32(g, t);
    case APX_ACT_GELU: return apx_gelu_grad_f32(g, t);
    case APX_ACT_GELU_TANH: return apx_gelu_tanh_grad_f32(g, t);
    default: return g;
  }
}

template <typename T>
APX_CU_KERNEL(dense_act_grad_kernel)(const T *dy, const T *t, T *g, int64_t n, int act) {
  APX_CU_GRID_STRIDE(i, n) g[i] = st<T>(act_grad(act, ld(dy[i]), ld(t[i])));
}

/* column j of g = dY * act'(T) in fp32 (row r) */
template <typename T>
struct DenseBiasTerm {
  const T *dy, *t;
  int64_t N;
  int act;
  __device__ double operator()(int64_t j, int64_t r) const {
    int64_t i = r * N + j;
    return (double)(t ? act_grad(act, ld(dy[i]), ld(t[i])) : ld(dy[i]));
  }
};

/* (float)sum * k: the CPU's column sum rounded to fp32, then times beta */
struct StoreScaled {
  void *out;
  int32_t dt;
  float k;
  __device__ void operator()(int64_t o, double v) const { st_dt(out, dt, o, (float)v * k); }
};

APX_CUDA_ENTRY(apx_cuda_fused_dense_grad) {
  const ApxAttrFusedDense *a = (const ApxAttrFusedDense *)attrs;
  int64_t M = 0, N = 0, K = 0;
  dense_shape(a, &ins[1], &ins[2], &M, &N, &K);
  ApxDType dt = ins[0].dtype;
  APX_TRY(same_float(ctx, &ins[1], dt, "X"));
  APX_TRY(same_float(ctx, &ins[2], dt, "W"));
  const ApxTensor *T_ = a->activation != APX_ACT_NONE ? &ins[3] : NULL;
  if (T_) APX_TRY(same_float(ctx, T_, dt, "T"));
  ApxTensor *dx = apx_cu_has(outs, n_out, 0) ? &outs[0] : NULL;
  ApxTensor *dw = apx_cu_has(outs, n_out, 1) ? &outs[1] : NULL;
  ApxTensor *db = apx_cu_has(outs, n_out, 2) ? &outs[2] : NULL; /* any float type (st_dt) */
  if (dx) APX_TRY(same_float(ctx, dx, dt, "dX"));
  if (dw) APX_TRY(same_float(ctx, dw, dt, "dW"));
  cudaStream_t s = apx_cu_stream(ctx);
  size_t es = apx_dtype_size(dt);
  if (M == 0 || K == 0 || N == 0) {
    if (dx) APX_CUDA_TRY(ctx, cudaMemsetAsync(dx->data, 0, apx_tensor_bytes(dx), s));
    if (dw) APX_CUDA_TRY(ctx, cudaMemsetAsync(dw->data, 0, apx_tensor_bytes(dw), s));
    if (db && M == 0) APX_CUDA_TRY(ctx, cudaMemsetAsync(db->data, 0, apx_tensor_bytes(db), s));
    if (!db || M == 0) return APX_STATUS_OK;
  }
  const void *g = ins[0].data;
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (db) {
      DenseBiasTerm<T> f = {(const T *)ins[0].data, T_ ? (const T *)T_->data : NULL, N, a->activation};
      StoreScaled o = {db->data, (int32_t)db->dtype, a->beta};
      APX_TRY(apx_cu_reduce(ctx, f, o, N, M, 0));
    }
    if (T_ && (dx || dw) && M * N > 0) {
      void *gt = NULL;
      APX_TRY(apx_cuda_tmp(ctx, (size_t)(M * N) * es, &gt));
      int block = apx_cu_block(ctx, 256);
      dense_act_grad_kernel<T><<<apx_cu_grid(ctx, M * N, block), block, 0, s>>>(
          (const T *)ins[0].data, (const T *)T_->data, (T *)gt, M * N, a->activation);
      APX_CUDA_LAUNCHED(ctx);
      g = gt;
    }
  });
  if (M == 0 || K == 0 || N == 0) return APX_STATUS_OK;
  if (dx) { /* trans_w: dX = g W (W (N, K)); else dX = g W^T (W (K, N)) */
    LtCall c = lt_call(g, ins[2].data, dx->data, M, K, N, 0, a->trans_w ? 0 : 1, dt, dt, a->alpha);
    APX_TRY(lt_run(ctx, &c));
  }
  if (dw) { /* trans_w: dW (N, K) = g^T X; else dW (K, N) = X^T g */
    LtCall c = a->trans_w ? lt_call(g, ins[1].data, dw->data, N, K, M, 1, 0, dt, dt, a->alpha)
                          : lt_call(ins[1].data, g, dw->data, K, N, M, 1, 0, dt, dt, a->alpha);
    APX_TRY(lt_run(ctx, &c));
  }
  return APX_STATUS_OK;
}
