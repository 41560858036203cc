/* cost.c - FLOP and byte estimates per node (see cost.h). */
#include "ir/cost.h"

static const ApxValue *in_val(const ApxGraph *g, const ApxNode *n, int k) {
  return (k < n->n_in && n->in[k] >= 0) ? &g->vals[n->in[k]] : NULL;
}

static const ApxValue *out_val(const ApxGraph *g, const ApxNode *n, int k) {
  return (k < n->n_out && n->out[k] >= 0) ? &g->vals[n->out[k]] : NULL;
}

static int64_t numel(const ApxValue *v) { return v ? apx_value_numel(v) : -1; }

static int64_t mul_ok(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a && b > INT64_MAX / a) return -1;
  return a * b;
}

/* FLOPs of the matrix product of a MatMul/FusedMatMul-like node: 2 * numel(Y) * K. */
static int64_t matmul_flops(const ApxGraph *g, const ApxNode *n, int trans_a) {
  const ApxValue *a = in_val(g, n, 0), *y = out_val(g, n, 0);
  if (!a || !y || a->rank < 1) return -1;
  int64_t k = a->rank == 1 ? a->dims[0] : trans_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  return mul_ok(2, mul_ok(numel(y), k));
}

static int64_t gemm_flops(const ApxGraph *g, const ApxNode *n, int trans_a, int bias) {
  const ApxValue *a = in_val(g, n, 0), *y = out_val(g, n, 0);
  if (!a || !y || a->rank < 1) return -1;
  int64_t k = (a->rank >= 2 && trans_a) ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  int64_t mn = numel(y), f = mul_ok(2, mul_ok(mn, k));
  if (f < 0) return -1;
  return f + (bias ? mn : 0);
}

/* Einsum: 2 * the product of every distinct label's size (one multiply-add per term of
 * each output element's sum); one operand: one add per term. */
static int64_t einsum_flops(const ApxGraph *g, const ApxNode *n) {
  const ApxAttrEinsum *e = n->typed;
  if (!e) return -1;
  const ApxValue *vs[3] = {in_val(g, n, 0), in_val(g, n, 1), out_val(g, n, 0)};
  const int64_t *terms[3] = {e->a, e->b, e->y};
  const int32_t ns[3] = {e->n_a, e->n_b, e->n_y};
  int64_t seen[3 * APX_MAX_RANK], f = 1;
  int n_seen = 0;
  for (int k = 0; k < 3; k++)
    for (int i = 0; vs[k] && i < ns[k] && i < vs[k]->rank; i++) {
      int dup = 0;
      for (int j = 0; j < n_seen; j++) dup |= seen[j] == terms[k][i];
      if (dup) continue;
      seen[n_seen++] = terms[k][i];
      f = mul_ok(f, vs[k]->dims[i]);
    }
  return vs[1] ? mul_ok(2, f) : f;
}

/* Resize / ResizeGrad: linear reads 2^k neighbours per output element (k: the dims whose
 * size changes), a multiply-add each; nearest is data movement. */
static int64_t resize_flops(const ApxGraph *g, const ApxNode *n, const ApxValue *big, const ApxValue *small) {
  const ApxAttrResize *a = n->typed;
  if (!a || !big || !small || big->rank != small->rank) return -1;
  if (a->mode != 1) return 0; /* nearest */
  int64_t corners = 1;
  for (int i = 0; i < big->rank && corners < (1 << 8); i++)
    if (big->dims[i] != small->dims[i]) corners *= 2;
  return mul_ok(2 * corners, numel(big));
}

static int64_t conv_flops(const ApxGraph *g, const ApxNode *n, int extra_per_out) {
  const ApxValue *w = in_val(g, n, 1), *y = out_val(g, n, 0);
  if (!w || !y || w->rank < 3) return -1;
  int64_t per = 1;
  for (int i = 1; i < w->rank; i++) per = mul_ok(per, w->dims[i]); /* C_in/group * kh * kw */
  int64_t ny = numel(y), f = mul_ok(2, mul_ok(ny, per));
  if (f < 0) return -1;
  return f + (int64_t)extra_per_out * ny;
}

static int64_t scaled(int64_t n, int64_t k) { return mul_ok(n, k); }

int64_t apx_node_flops(const ApxGraph *g, int node) {
  const ApxNode *n = &g->nodes[node];
  const ApxValue *x = in_val(g, n, 0), *y = out_val(g, n, 0);
  switch (n->op) {
    case APX_OP_MatMul: return matmul_flops(g, n, 0);
    case APX_OP_FusedMatMul: return matmul_flops(g, n, APX_NODE_ATTRS(g, node, ApxAttrFusedMatMul)->trans_a);
    case APX_OP_Gemm: {
      const ApxAttrGemm *a = APX_NODE_ATTRS(g, node, ApxAttrGemm);
      return gemm_flops(g, n, a->trans_a, n->n_in > 2 && n->in[2] >= 0);
    }
    case APX_OP_FusedDense: {
      int64_t f = gemm_flops(g, n, 0, n->n_in > 2 && n->in[2] >= 0);
      return f < 0 ? -1 : f + numel(y);
    }
    case APX_OP_FusedDenseGrad: {
      /* dY (M,N), X (M,K): dX and dW each 2*M*N*K */
      const ApxValue *dy = in_val(g, n, 0), *xx = in_val(g, n, 1);
      if (!dy || !xx || xx->rank < 1) return -1;
      int64_t fwd = mul_ok(2, mul_ok(numel(dy), xx->dims[xx->rank - 1])), f = 0;
      if (fwd < 0) return -1;
      for (int o = 0; o < n->n_out && o < 2; o++)
        if (n->out[o] >= 0) f += fwd; /* dX, dW: one product each */
      if (n->n_out > 2 && n->out[2] >= 0) f += numel(dy);
      return f;
    }
    case APX_OP_Einsum: return einsum_flops(g, n);
    case APX_OP_Resize: return resize_flops(g, n, out_val(g, n, 0), in_val(g, n, 0));
    case APX_OP_ResizeGrad: return resize_flops(g, n, in_val(g, n, 0), out_val(g, n, 0));
    case APX_OP_Conv: return conv_flops(g, n, n->n_in > 2 && n->in[2] >= 0);
    case APX_OP_ConvBiasRelu: return conv_flops(g, n, 2);
    case APX_OP_ConvTranspose: {
      /* the adjoint convolution's product: 2 * numel(X) * C_out/group * kh * kw, plus the bias */
      const ApxValue *w = in_val(g, n, 1);
      if (!x || !y || !w || w->rank < 3) return -1;
      int64_t per = 1;
      for (int i = 1; i < w->rank; i++) per = mul_ok(per, w->dims[i]);
      int64_t f = mul_ok(2, mul_ok(numel(x), per));
      return f < 0 ? -1 : f + (n->n_in > 2 && n->in[2] >= 0 ? numel(y) : 0);
    }
    case APX_OP_ConvGrad:
    case APX_OP_ConvTransposeGrad: {
      /* ConvGrad(dY, X, W): forward product = 2 * numel(dY) * C_in/group * kh * kw;
       * ConvTransposeGrad(dY, X, W): 2 * numel(X) * C_out/group * kh * kw */
      const ApxValue *dy = in_val(g, n, 0), *w = in_val(g, n, 2);
      const ApxValue *prod = in_val(g, n, n->op == APX_OP_ConvTransposeGrad ? 1 : 0);
      if (!dy || !prod || !w || w->rank < 3) return -1;
      int64_t per = 1;
      for (int i = 1; i < w->rank; i++) per = mul_ok(per, w->dims[i]);
      int64_t fwd = mul_ok(2, mul_ok(numel(prod), per));
      if (fwd < 0) return -1;
      int64_t f = 0;
      for (int o = 0; o < n->n_out && o < 2; o++)
        if (n->out[o] >= 0) f += fwd; /* dX, dW: one product each */
      if (n->n_out > 2 && n->out[2] >= 0) f += numel(dy);
      return f;
    }
    case APX_OP_Softmax:
    case APX_OP_LogSoftmax:
    case APX_OP_FusedSoftmax: return scaled(numel(y), 5);
    case APX_OP_SoftmaxGrad:
    case APX_OP_LogSoftmaxGrad:
    case APX_OP_FusedSoftmaxGrad: return scaled(numel(y), 3);
    case APX_OP_LayerNormalization:
    case APX_OP_BatchNormalization:
    case APX_OP_BatchNormRelu: return scaled(numel(y), 8);
    case APX_OP_LayerNormGrad:
    case APX_OP_BatchNormGrad: return scaled(numel(x), 10);
    case APX_OP_ReduceSum:
    case APX_OP_ReduceMean:
    case APX_OP_ReduceSumTo:
    case APX_OP_GlobalAveragePool:
    case APX_OP_GlobalAveragePoolGrad: return numel(x);
    case APX_OP_MaxPool:
    case APX_OP_AveragePool:
    case APX_OP_MaxPoolGrad:
    case APX_OP_AveragePoolGrad: {
      const ApxAttrPool *p = APX_NODE_ATTRS(g, node, ApxAttrPool);
      const ApxValue *big = n->op == APX_OP_MaxPool || n->op == APX_OP_AveragePool ? y : x;
      return mul_ok(numel(big), mul_ok(p->kernel[0] > 0 ? p->kernel[0] : 1,
                                       mul_ok(p->kernel[1] > 0 ? p->kernel[1] : 1, p->kernel[2] > 0 ? p->kernel[2] : 1)));
    }
    case APX_OP_SoftmaxCrossEntropyLoss:
    case APX_OP_NegativeLogLikelihoodLoss:
    case APX_OP_FusedXentropy: return scaled(numel(x), 5);
    case APX_OP_SoftmaxCrossEntropyLossGrad:
    case APX_OP_NegativeLogLikelihoodLossGrad:
    case APX_OP_FusedXentropyGrad: return scaled(numel(y), 3);
    case APX_OP_OptimizerStep: {
      const ApxAttrOptimizer *a = APX_NODE_ATTRS(g, node, ApxAttrOptimizer);
      int64_t per = a->kind == APX_OPTIM_SGD ? 4 : a->kind == APX_OPTIM_ADAMW ? 12 : 16, tot = 0;
      for (int i = 0; i < a->n_params && 4 + i < n->n_in; i++) {
        int64_t e = numel(in_val(g, n, 4 + i));
        if (e < 0) return -1;
        tot += e * per;
      }
      return tot;
    }
    case APX_OP_UnscaleCheck: {
      int64_t tot = 0;
      for (int i = 1; i < n->n_in; i++) {
        int64_t e = numel(in_val(g, n, i));
        if (e < 0) return -1;
        tot += 3 * e;
      }
      return tot;
    }
    case APX_OP_Gelu:
    case APX_OP_Erf:
    case APX_OP_GeluGrad:
    case APX_OP_ErfGrad: return scaled(numel(y), 8);
    case APX_OP_Sigmoid:
    case APX_OP_Tanh: return scaled(numel(y), 4);
    case APX_OP_Reshape: case APX_OP_Flatten: case APX_OP_Squeeze: case APX_OP_Unsqueeze:
    case APX_OP_Identity: case APX_OP_Transpose: case APX_OP_Concat: case APX_OP_Split:
    case APX_OP_Slice: case APX_OP_Gather: case APX_OP_Expand: case APX_OP_Cast:
    case APX_OP_SliceGrad: case APX_OP_GatherGrad: case APX_OP_AssignState: case APX_OP_Allreduce:
    case APX_OP_Shape: case APX_OP_Constant: case APX_OP_ConstantOfShape: case APX_OP_Range:
    case APX_OP_LossScaleSeed:
    case APX_OP_Pad: case APX_OP_Tile: case APX_OP_Trilu: case APX_OP_GatherElements: /* v1.1 */
    case APX_OP_GatherND: case APX_OP_RandomUniformLike:
      return (y || n->n_out == 0) ? 0 : -1;
    default: break;
  }
  const ApxOpInfo *info = apx_op_info(n->op);
  if (!y) return 0;
  if (info->prec == APX_PREC_INHERIT) return scaled(numel(y), 2); /* elementwise gradients */
  return numel(y);
}

static int64_t sum_bytes(const ApxGraph *g, const ApxNode *n, int inputs) {
  int64_t tot = 0;
  int cnt = inputs ? n->n_in : n->n_out;
  const ApxOpInfo *info = apx_op_info(n->op);
  for (int k = 0; k < cnt; k++) {
    int v = inputs ? n->in[k] : n->out[k];
    if (v < 0) continue;
    if (inputs && k < 32 && ((info->static_inputs >> k) & 1u)) continue;
    int64_t b = apx_value_bytes(&g->vals[v]);
    if (b < 0) return -1;
    tot += b;
  }
  return tot;
}

int64_t apx_node_bytes_read(const ApxGraph *g, int node) { return sum_bytes(g, &g->nodes[node], 1); }

int64_t apx_node_bytes_written(const ApxGraph *g, int node) { return sum_bytes(g, &g->nodes[node], 0); }
