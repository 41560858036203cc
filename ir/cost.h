/* cost.h - static cost estimates per node: floating-point operations and bytes moved, from
 * the values' shapes and dtypes. Used by --explain's summary (share of FLOPs in half),
 * the CLI summary and the fusion report. Estimates, not measurements:
 *
 *   MatMul, FusedMatMul      2 * numel(Y) * K
 *   Gemm                     2 * M * N * K (+ M * N with C)
 *   FusedDense               2 * M * N * K + M * N (bias) + M * N (activation)
 *   Conv, ConvBiasRelu       2 * numel(Y) * (C_in / group) * kh * kw (+ numel(Y) per bias,
 *                            relu)
 *   ConvGrad, FusedDenseGrad the forward product's FLOPs for each of dX, dW produced,
 *                            + numel(dY) for dB
 *   elementwise ops          numel(Y) (Gelu, Erf and their gradients 8, Sigmoid/Tanh 4,
 *                            other gradients 2 per element)
 *   Softmax, LogSoftmax      5 * numel; SoftmaxGrad 3 * numel; LayerNorm 8 * numel;
 *                            BatchNorm 8 * numel; their gradients 10 * numel
 *   ReduceSum/Mean, ReduceSumTo, GlobalAveragePool  numel(X)
 *   MaxPool, AveragePool     numel(Y) * kh * kw (gradients the same)
 *   losses                   5 * numel(scores), gradients 3 * numel(scores)
 *   OptimizerStep            SGD 4, AdamW 12, LAMB 16 per parameter element;
 *                            UnscaleCheck 3 per gradient element
 *   data movement and shape-only ops (Reshape, Transpose, Concat, Gather, Slice ...), Cast,
 *   AssignState, Allreduce   0
 * Bytes read: the node's runtime inputs (static operands excluded); bytes written: its
 * outputs; both at the values' current dtypes. Every function returns -1 when a needed
 * shape is unknown. */
#ifndef APX_COST_H
#define APX_COST_H

#include <stdint.h>

#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

int64_t apx_node_flops(const ApxGraph *g, int node);
int64_t apx_node_bytes_read(const ApxGraph *g, int node);
int64_t apx_node_bytes_written(const ApxGraph *g, int node);

#ifdef __cplusplus
}
#endif
#endif
