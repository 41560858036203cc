/* validate.h - the one host-side check of a kernel's arguments against its op's contract
 * (attrs.h), shared by every backend (kernels/cpu/dispatch.c, kernels/cuda/dispatch.cu) and
 * by the plan validator (plan/plan_validate.c), as kernels/shape.h is for shape planning.
 *
 * Given the op, its typed attributes and its input and output tensors (dtype, shape,
 * presence: data == NULL marks an absent one), it checks everything a kernel relies on
 * before it touches memory: argument counts, required inputs and outputs, ranks, dims and
 * dtypes of each tensor, the shapes the op relates (broadcasting, products, convolution and
 * pooling geometry, reductions, losses, the multi-tensor layouts) and attribute values.
 * A kernel that passed may then index its tensors by their shapes without further checks;
 * what remains for the kernels is what depends on the data (label and index ranges,
 * integer division by zero) and what a backend does not implement ("not supported yet on
 * cuda: ..."), which stays with that backend.
 *
 * dtype rules follow the CPU reference (kernels/cpu/dispatch.c): for ops whose kernels
 * compute ("math" ops) tensors agree in their kind (float, integer or bool; any float
 * types may be mixed, e.g. fp16 X with fp32 statistics), for data movement, Cast,
 * AssignState and OptimizerStep in their exact dtype where bytes are copied. Whether a
 * backend implements the op's type T is its own query (apx_cpu_supports,
 * apx_cuda_supports), asked between apx_kernel_check_args and apx_kernel_check_contract.
 *
 * Every function returns APX_STATUS_OK, or BAD_INPUT / UNSUPPORTED with a one-line reason
 * (without the op name; apx_kernel_error_prefix adds it) in err[cap]. Plain C, no
 * allocation, reentrant. */
#ifndef APX_KERNELS_VALIDATE_H
#define APX_KERNELS_VALIDATE_H

#include <stddef.h>

#include "kernels/op.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OK for a real op (APX_OP_INVALID < op < APX_OP_COUNT), else BAD_INPUT "invalid op N". */
ApxStatus apx_kernel_check_op(ApxOp op, char *err, size_t cap);

/* Counts (n >= 0, arrays given), attributes (NULL only for ApxAttrNone ops), each present
 * tensor (rank in [0, APX_MAX_RANK], dims >= 0, a dtype with a size, element count in
 * int64). */
ApxStatus apx_kernel_check_args(ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                                const ApxTensor *outs, int n_out, char *err, size_t cap);

/* The op's contract (see the file comment); call after apx_kernel_check_args passed.
 * Ops without a kernel anywhere (tier 2, listed-only, Constant) pass: backends refuse them
 * as unsupported. */
ApxStatus apx_kernel_check_contract(ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                                    const ApxTensor *outs, int n_out, char *err, size_t cap);

/* apx_kernel_check_op, apx_kernel_check_args and apx_kernel_check_contract in turn. */
ApxStatus apx_kernel_validate(ApxOp op, const void *attrs, const ApxTensor *ins, int n_in,
                              const ApxTensor *outs, int n_out, char *err, size_t cap);

/* Rewrites the detail in err as "<Op>: <detail>" ("<Op>: failed" when empty): the form every
 * backend reports a failed kernel in. */
void apx_kernel_error_prefix(ApxOp op, char *err, size_t cap);

/* Data-dependent failures the kernels detect themselves, worded once for every backend. */
#define APX_MSG_LABEL_RANGE "label %lld at position %lld outside [0, %lld)"
#define APX_MSG_INDEX_RANGE "index %lld at position %lld outside [-%lld, %lld)"
#define APX_MSG_CONVERT "cannot convert %s to %s"

#ifdef __cplusplus
}
#endif
#endif
