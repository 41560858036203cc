/* lt_plan.c - the cuBLASLt products of a plan's kernels, derived on the host (lt_plan.h). */
#include "kernels/cuda/lt_plan.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/attrs.h"
#include "kernels/cuda/shape.h"
#include "kernels/shape.h"

/* A stand-in address for a stream-ordered temporary: 256-byte aligned (lt_plan.h). */
#define TMP_BASE ((const char *)(uintptr_t)0x100000)

uint32_t apx_lt_align(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && (a & (al - 1))) al >>= 1;
  return al;
}

static int float16(ApxDType t) { return t == APX_DT_F32 || t == APX_DT_F16 || t == APX_DT_BF16; }

/* Appends product D = op(A) op(B) (C = D) when there is room; counts it either way. */
typedef struct Sink {
  ApxLtProduct *out;
  int64_t cap, n;
} Sink;

static ApxLtKey *put(Sink *s, const void *A, const void *B, const void *D, int64_t M, int64_t N, int64_t K,
                     int ta, int tb, ApxDType ab, ApxDType cd) {
  int64_t i = s->n++;
  if (i >= s->cap) return NULL;
  ApxLtProduct *p = &s->out[i];
  memset(p, 0, sizeof *p);
  ApxLtKey *k = &p->key;
  k->ta = ta, k->tb = tb, k->ab = (int32_t)ab, k->cd = (int32_t)cd;
  k->M = M, k->N = N, k->K = K, k->batch = 1;
  k->al[0] = apx_lt_align(B), k->al[1] = apx_lt_align(A), k->al[2] = apx_lt_align(D), k->al[3] = apx_lt_align(D);
  return k;
}

static int has(const ApxTensor *t, int32_t n, int32_t i) { return i < n && t[i].data; }

static void gemm(const ApxLtCallView *c, Sink *s) {
  const ApxAttrGemm *g = (const ApxAttrGemm *)c->attrs;
  const ApxTensor *A = &c->ins[0], *B = &c->ins[1], *Y = &c->outs[0];
  ApxDType dt = Y->dtype;
  if (!float16(dt) || A->dtype != dt || B->dtype != dt || A->rank != 2 || B->rank != 2) return;
  int64_t M = g->trans_a ? A->dims[1] : A->dims[0], K = g->trans_a ? A->dims[0] : A->dims[1];
  int64_t N = g->trans_b ? B->dims[0] : B->dims[1];
  if (M == 0 || N == 0 || K == 0) return;
  const ApxTensor *C = has(c->ins, c->n_in, 2) && g->beta != 0 ? &c->ins[2] : NULL;
  if (C && C->dtype != dt) return;
  ApxLtKey *k = put(s, A->data, B->data, Y->data, M, N, K, g->trans_a, g->trans_b, dt, dt);
  int row = C && apx_tensor_numel(C) == N && (C->rank == 1 || (C->rank == 2 && C->dims[0] == 1));
  if (k && row && g->beta == 1.0f) {
    k->epi = APX_LT_EPI_BIAS;
    k->has_bias = 1;
    s->out[s->n - 1].bias = C->data;
  }
}

static void matmul(const ApxLtCallView *c, Sink *s) {
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  if (c->op == APX_OP_FusedMatMul) {
    const ApxAttrFusedMatMul *f = (const ApxAttrFusedMatMul *)c->attrs;
    p.ta = f->trans_a;
    p.tb = f->trans_b;
  }
  const ApxTensor *A = &c->ins[0], *B = &c->ins[1], *Y = &c->outs[0];
  ApxDType dt = Y->dtype;
  if (!float16(dt) || A->dtype != dt || B->dtype != dt) return;
  char err[160];
  if (apx_matmul_plan(&p, A, B, Y, err, sizeof err)) return;
  if (apx_tensor_numel(Y) == 0 || p.K == 0 || p.bc.numel == 0) return;
  int64_t es = (int64_t)apx_dtype_size(dt);
  const char *a0 = A->data, *b0 = B->data, *y0 = Y->data;
  if (!p.reduce) {
    int32_t folded = 0;
    int64_t n_calls = apx_cu_matmul_n_calls(&p, &folded);
    for (int64_t i = 0; i < n_calls; i++) {
      ApxCuGemmCall gc;
      apx_cu_matmul_call(&p, i, folded, &gc);
      ApxLtKey *k = put(s, a0 + gc.a_off * es, b0 + gc.b_off * es, y0 + gc.y_off * es, gc.M, p.N, p.K, p.ta,
                        p.tb, dt, dt);
      if (!k) continue;
      k->batch = gc.batch;
      k->sa = gc.a_stride;
      k->sb = gc.b_stride;
      k->sd = gc.y_stride;
    }
    return;
  }
  ApxCuGemmCall gc;
  if (apx_cu_matmul_stacked(&p, &gc)) {
    put(s, a0, b0, y0, gc.M, p.N, gc.K, p.ta, p.tb, dt, dt);
    return;
  }
  int64_t sA = p.M * p.K, sB = p.K * p.N, sY = p.M * p.N;
  for (int64_t b = 0; b < p.bc.numel; b++) { /* fp32 accumulation into a temporary */
    int64_t off[3];
    apx_bcast_offsets(&p.bc, b, off);
    put(s, a0 + off[0] * sA * es, b0 + off[1] * sB * es, TMP_BASE + off[2] * sY * 4, p.M, p.N, p.K, p.ta, p.tb,
        dt, APX_DT_F32);
  }
}

/* X (..., K), W (K, N) or (N, K): rows M, N, K (matmul.cu dense_shape) */
static int dense_shape(const ApxAttrFusedDense *a, const ApxTensor *x, const ApxTensor *w, int64_t *M, int64_t *N,
                       int64_t *K) {
  if (x->rank < 1 || w->rank != 2) return -1;
  *K = x->dims[x->rank - 1];
  *N = a->trans_w ? w->dims[0] : w->dims[1];
  *M = apx_tensor_numel(x) / (*K ? *K : 1);
  return 0;
}

static void dense(const ApxLtCallView *c, Sink *s) {
  const ApxAttrFusedDense *a = (const ApxAttrFusedDense *)c->attrs;
  int64_t M = 0, N = 0, K = 0;
  if (dense_shape(a, &c->ins[0], &c->ins[1], &M, &N, &K)) return;
  ApxDType dt = c->outs[0].dtype;
  if (!float16(dt) || c->ins[0].dtype != dt || c->ins[1].dtype != dt) return;
  const ApxTensor *b = has(c->ins, c->n_in, 2) ? &c->ins[2] : NULL;
  const ApxTensor *aux = has(c->outs, c->n_out, 1) ? &c->outs[1] : NULL;
  if ((aux && aux->dtype != dt) || M * N == 0 || K == 0) return;
  int epi_ok = !b || (a->beta == 1.0f && b->dtype == dt);
  int epi = APX_LT_EPI_DEFAULT;
  switch (a->activation) {
    case APX_ACT_NONE: epi = b ? APX_LT_EPI_BIAS : APX_LT_EPI_DEFAULT; epi_ok &= !aux; break;
    case APX_ACT_RELU: epi = b ? APX_LT_EPI_RELU_BIAS : APX_LT_EPI_RELU; epi_ok &= !aux; break;
    case APX_ACT_GELU_TANH:
      epi = aux ? (b ? APX_LT_EPI_GELU_AUX_BIAS : APX_LT_EPI_GELU_AUX) : (b ? APX_LT_EPI_GELU_BIAS : APX_LT_EPI_GELU);
      epi_ok &= !aux || N % 8 == 0;
      break;
    default: epi_ok = 0; break;
  }
  if (!epi_ok) { /* the fp32 product into a temporary, then matmul.cu's epilogue kernel */
    put(s, c->ins[0].data, c->ins[1].data, TMP_BASE, M, N, K, 0, a->trans_w, dt, APX_DT_F32);
    return;
  }
  ApxLtKey *k = put(s, c->ins[0].data, c->ins[1].data, c->outs[0].data, M, N, K, 0, a->trans_w, dt, dt);
  if (!k) return;
  ApxLtProduct *p = &s->out[s->n - 1];
  k->epi = epi;
  if (b && epi != APX_LT_EPI_DEFAULT) {
    k->has_bias = 1;
    p->bias = b->data;
  }
  if (aux) {
    k->has_aux = 1;
    k->aux_ld = N;
    p->aux = aux->data;
  }
}

static void dense_grad(const ApxLtCallView *c, Sink *s) {
  const ApxAttrFusedDense *a = (const ApxAttrFusedDense *)c->attrs;
  if (c->n_in < 3) return;
  int64_t M = 0, N = 0, K = 0;
  if (dense_shape(a, &c->ins[1], &c->ins[2], &M, &N, &K)) return;
  ApxDType dt = c->ins[0].dtype;
  if (!float16(dt) || c->ins[1].dtype != dt || c->ins[2].dtype != dt) return;
  const ApxTensor *dx = has(c->outs, c->n_out, 0) ? &c->outs[0] : NULL;
  const ApxTensor *dw = has(c->outs, c->n_out, 1) ? &c->outs[1] : NULL;
  if ((dx && dx->dtype != dt) || (dw && dw->dtype != dt) || M == 0 || K == 0 || N == 0) return;
  int act = a->activation != APX_ACT_NONE && c->n_in > 3;
  const void *g = act && (dx || dw) ? (const void *)TMP_BASE : c->ins[0].data;
  if (dx) put(s, g, c->ins[2].data, dx->data, M, K, N, 0, a->trans_w ? 0 : 1, dt, dt);
  if (dw) {
    if (a->trans_w) put(s, g, c->ins[1].data, dw->data, N, K, M, 1, 0, dt, dt);
    else put(s, c->ins[1].data, g, dw->data, K, N, M, 1, 0, dt, dt);
  }
}

int64_t apx_lt_products_of(const ApxLtCallView *k, ApxLtProduct *out, int64_t cap) {
  Sink s = {out, cap, 0};
  if (k->n_out < 1 || k->n_in < 2 || !k->ins[0].data || !k->ins[1].data) return 0;
  if (!k->attrs && k->op != APX_OP_MatMul) return 0; /* MatMul alone has no attributes */
  switch (k->op) {
    case APX_OP_Gemm: if (k->outs[0].data) gemm(k, &s); break;
    case APX_OP_MatMul:
    case APX_OP_FusedMatMul: if (k->outs[0].data) matmul(k, &s); break;
    case APX_OP_FusedDense: if (k->outs[0].data) dense(k, &s); break;
    case APX_OP_FusedDenseGrad: dense_grad(k, &s); break;
    default: break;
  }
  return s.n;
}

static uint64_t key_hash(const ApxLtKey *k) {
  const unsigned char *b = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

int64_t apx_lt_plan_products(const ApxLtCallView *k, int32_t n, ApxLtProduct **out) {
  *out = NULL;
  int64_t total = 0;
  for (int32_t i = 0; i < n; i++) total += apx_lt_products_of(&k[i], NULL, 0);
  if (total == 0) return 0;
  ApxLtProduct *all = malloc((size_t)total * sizeof *all);
  int64_t cap = 16;
  while (cap < 2 * total) cap *= 2;
  int64_t *slot = malloc((size_t)cap * sizeof *slot); /* open addressing: index into all, -1 */
  if (!all || !slot) {
    free(all);
    free(slot);
    return -1;
  }
  for (int64_t i = 0; i < cap; i++) slot[i] = -1;
  int64_t n_out = 0;
  ApxLtProduct tmp[64];
  for (int32_t i = 0; i < n; i++) {
    int64_t m = apx_lt_products_of(&k[i], NULL, 0);
    ApxLtProduct *buf = m <= 64 ? tmp : malloc((size_t)m * sizeof *buf);
    if (!buf) {
      free(all);
      free(slot);
      return -1;
    }
    apx_lt_products_of(&k[i], buf, m);
    for (int64_t j = 0; j < m; j++) {
      uint64_t h = key_hash(&buf[j].key) & (uint64_t)(cap - 1);
      while (slot[h] >= 0 && memcmp(&all[slot[h]].key, &buf[j].key, sizeof buf[j].key) != 0)
        h = (h + 1) & (uint64_t)(cap - 1);
      if (slot[h] >= 0) continue;
      slot[h] = n_out;
      all[n_out++] = buf[j];
    }
    if (buf != tmp) free(buf);
  }
  free(slot);
  *out = all;
  return n_out;
}
