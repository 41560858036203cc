/* matmul.c - Gemm, MatMul (numpy semantics: 1-D operands, broadcast batch dims) and
 * FusedMatMul (MatMul with transposes, a scale, and optional summing of broadcast batches
 * into a smaller output, for gradients). All products go through OpenBLAS. */
#include <cblas.h>
#include <limits.h>

#include "kernels/cpu/cpu_internal.h"

typedef struct MatMulPlan {
  ApxMatMulPlan mm; /* M, N, K, transposes, batch broadcast, reduce (kernels/shape.h) */
  double alpha;
  int fold;         /* B without batch, A with every batch: one tall product */
  int64_t y_numel;
} MatMulPlan;

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/gemm_real.inc"
#include "kernels/cpu/matmul_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/gemm_real.inc"
#include "kernels/cpu/matmul_real.inc"
#include "kernels/cpu/real_end.h"

static int too_big(int64_t v) { return v > INT_MAX; }

/* Gemm(A, B, C?) -> Y = alpha * op(A) @ op(B) + beta * C, C broadcast to (M, N). */
APX_CPU_KERNEL(apx_cpu_gemm) {
  const ApxAttrGemm *g = attrs;
  const ApxTensor *A = &ins[0], *B = &ins[1];
  ApxTensor *Y = &outs[0];
  ApxDType dt = Y->dtype;
  int64_t M = g->trans_a ? A->dims[1] : A->dims[0], K = g->trans_a ? A->dims[0] : A->dims[1];
  int64_t N = g->trans_b ? B->dims[0] : B->dims[1];
  if (too_big(M) || too_big(N) || too_big(K))
    return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: dims beyond 2^31");
  int nt = apx_cpu_threads(ctx);
  double beta = 0;
  if (apx_cpu_has(ins, n_in, 2) && g->beta != 0) {
    apx_cpu_broadcast_copy(&ins[2], Y, nt);
    beta = g->beta;
  }
  if (dt == APX_DT_F64)
    gemm_f64(g->trans_a, g->trans_b, M, N, K, g->alpha, A->data, B->data, beta, Y->data, nt);
  else
    gemm_f32(g->trans_a, g->trans_b, M, N, K, g->alpha, A->data, B->data, (float)beta, Y->data,
             nt);
  return APX_STATUS_OK;
}

static ApxStatus plan_matmul(ApxCpuCtx *ctx, MatMulPlan *p, const ApxTensor *A,
                             const ApxTensor *B, const ApxTensor *Y) {
  ApxMatMulPlan *m = &p->mm;
  ApxStatus s = apx_shape_status(apx_matmul_plan(m, A, B, Y, ctx->err, sizeof ctx->err));
  if (s) return s;
  int32_t ra = A->rank - (A->rank == 1 ? 1 : 2), rb = B->rank - (B->rank == 1 ? 1 : 2);
  int64_t aa = apx_dims_prod(A->dims, 0, ra), ba = apx_dims_prod(B->dims, 0, rb);
  p->y_numel = apx_tensor_numel(Y);
  p->fold = !m->reduce && !m->ta && ba == 1 && aa == m->bc.numel && m->bc.numel > 1 &&
            !too_big(m->M * m->bc.numel);
  return APX_STATUS_OK;
}

/* MatMul(A, B) -> Y;  FusedMatMul(A, B) -> alpha * op(A) @ op(B) (attrs.h). */
APX_CPU_KERNEL(apx_cpu_matmul) {
  ApxStatus s;
  MatMulPlan p;
  memset(&p, 0, sizeof p);
  p.alpha = 1;
  if (op == APX_OP_FusedMatMul) {
    const ApxAttrFusedMatMul *f = attrs;
    p.mm.ta = f->trans_a;
    p.mm.tb = f->trans_b;
    p.alpha = f->alpha;
  }
  ApxDType dt = outs[0].dtype;
  if ((s = plan_matmul(ctx, &p, &ins[0], &ins[1], &outs[0]))) return s;
  int nt = apx_cpu_threads(ctx);
  if (dt == APX_DT_F64)
    matmul_batched_f64(&p, ins[0].data, ins[1].data, outs[0].data, nt);
  else
    matmul_batched_f32(&p, ins[0].data, ins[1].data, outs[0].data, nt);
  return APX_STATUS_OK;
}
