/* infer_util.h - helpers shared by the inference files (private to //ir:infer):
 * the per-op rule table type, attribute and static-input readers, dtype and shape checks
 * that produce the one-line error contract, and the output setter that checks value_info. */
#ifndef APX_INFER_UTIL_H
#define APX_INFER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/infer.h"
#include "ir/ir.h"

typedef int (*InferFn)(ApxGraph *g, int node, ApxDiag *d);

/* One op's rule for the ops of kind OWN (ops.def): the two steps. canon NULL: the typed
 * attributes are read generically from their fields (attrs.def; infer_attrs_from_fields).
 * Arity comes from the op table. Family tables end with op APX_OP_INVALID. */
typedef struct InferRule {
  ApxOp op;
  InferFn canon;
  InferFn infer;
} InferRule;

/* The inference of the generated kinds (ops.def KIND, infer_elementwise.c):
 * EW_UNARY y = f(x): float input, output of its dtype and shape;
 * EW_UNARY_GRAD dX = f(dY, T): dY float, T of dY's dtype and shape, dX like dY. */
int infer_ew_unary(ApxGraph *g, int node, ApxDiag *d);
int infer_ew_unary_grad(ApxGraph *g, int node, ApxDiag *d);

/* Generic canonicalization (ops without a hand-written canon): every scalar field of the
 * op's typed struct that has an ONNX name is read from the node's attributes, its default
 * when absent; F32 must be finite, BOOL 0 or 1, ENUM one of its names. */
int infer_attrs_from_fields(ApxGraph *g, int node, ApxDiag *d);

extern const InferRule apx_infer_rules_elementwise[];
extern const InferRule apx_infer_rules_nn[];
extern const InferRule apx_infer_rules_shape[];
extern const InferRule apx_infer_rules_resample[];
extern const InferRule apx_infer_rules_train[];

/* A shape (rank + dims). */
typedef struct IShape {
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
} IShape;

/* ---- node access -------------------------------------------------------------------- */
static inline ApxNode *infer_node(ApxGraph *g, int node) { return &g->nodes[node]; }
/* Input k's value, NULL when absent (-1) or k >= n_in. */
const ApxValue *infer_in(const ApxGraph *g, int node, int k);
/* Output k's value, NULL when absent. */
ApxValue *infer_out(ApxGraph *g, int node, int k);
IShape infer_shape_of(const ApxValue *v);
/* "[2,3]" into buf. */
char *infer_dims_str(int32_t rank, const int64_t *dims, char *buf, size_t cap);
int64_t infer_numel(int32_t rank, const int64_t *dims);

/* Error about one input, in the contract's form (no colon after the op):
 *   "<file>: node '<name>' (<op>) input 1: expected [64,128], got [65,128]"
 * fmt starts with "input %d". Returns -1. */
int infer_in_error(ApxDiag *d, const ApxGraph *g, int node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- generic attributes (error on a wrong attribute type) --------------------------- */
int infer_attr_int(const ApxGraph *g, int node, const char *name, int64_t def, int64_t *out,
                   ApxDiag *d);
int infer_attr_float(const ApxGraph *g, int node, const char *name, float def, float *out,
                     ApxDiag *d);
/* *out = def when absent. */
int infer_attr_string(const ApxGraph *g, int node, const char *name, const char *def,
                      const char **out, ApxDiag *d);
/* Reads an INTS attribute: returns 1 (read, *n set), 0 (absent) or -1 (error). */
int infer_attr_ints(const ApxGraph *g, int node, const char *name, int64_t *out, int cap,
                    int *n, ApxDiag *d);

/* ---- static inputs ------------------------------------------------------------------ */
/* 1 when v is a constant whose bytes are available. */
int infer_is_const(const ApxValue *v);
/* Reads static input `slot` (formal name `what`) as integers (int32/int64, rank 0/1):
 * returns 1 (read, *n set), 0 (absent) or -1 (not constant, wrong type, too long). */
int infer_static_ints(const ApxGraph *g, int node, int slot, const char *what, int64_t *out,
                      int cap, int *n, ApxDiag *d);
/* Reads a scalar (one element, any numeric dtype) as double: 1, 0 (absent) or -1. */
int infer_static_scalar(const ApxGraph *g, int node, int slot, const char *what, double *out,
                        ApxDiag *d);
/* Element i of a constant's data as int64 / double (any numeric dtype). */
int64_t infer_elem_i64(const void *data, ApxDType dt, int64_t i);
double infer_elem_f64(const void *data, ApxDType dt, int64_t i);

/* ---- checks ------------------------------------------------------------------------- */
enum {
  INFER_DT_FLOAT = 1 << 0, /* f16 bf16 f32 f64 */
  INFER_DT_SINT = 1 << 1,  /* i8 i16 i32 i64 */
  INFER_DT_UINT = 1 << 2,  /* u8 u16 u32 u64 */
  INFER_DT_BOOL = 1 << 3,
  INFER_DT_INDEX = 1 << 4, /* i32 i64 only */
  INFER_DT_NUMERIC = INFER_DT_FLOAT | INFER_DT_SINT | INFER_DT_UINT,
  INFER_DT_ANY = INFER_DT_NUMERIC | INFER_DT_BOOL,
};
int infer_dtype_in(ApxDType t, unsigned mask);
/* Input slot's dtype must be in mask. */
int infer_check_dtype(const ApxGraph *g, int node, int slot, unsigned mask, ApxDiag *d);
/* Input slot b must have input a's dtype. */
int infer_same_dtype(const ApxGraph *g, int node, int a, int b, ApxDiag *d);
/* Input slot's rank must be in [lo, hi]. */
int infer_check_rank(const ApxGraph *g, int node, int slot, int lo, int hi, ApxDiag *d);
/* "input <slot>: expected <exp>, got <actual>" error. */
int infer_err_expected(const ApxGraph *g, int node, int slot, int32_t rank,
                       const int64_t *dims, ApxDiag *d);
/* Input slot must have exactly shape (rank, dims). */
int infer_check_shape(const ApxGraph *g, int node, int slot, int32_t rank, const int64_t *dims,
                      ApxDiag *d);
/* Normalizes axis (attribute `what`) into [0, rank) (or [0, rank] with inclusive_end). */
int infer_norm_axis(const ApxGraph *g, int node, const char *what, int64_t axis, int32_t rank,
                    int inclusive_end, int64_t *out, ApxDiag *d);
/* Normalizes, sorts and de-duplicates-checks n axes in place. */
int infer_norm_axes(const ApxGraph *g, int node, const char *what, int64_t *axes, int n,
                    int32_t rank, ApxDiag *d);
/* Broadcasts the present inputs among slots[0..n) into out (error names the input). */
int infer_broadcast_inputs(const ApxGraph *g, int node, const int *slots, int n, IShape *out,
                           ApxDiag *d);
/* 1 when `small` broadcasts to `big` (unidirectional). */
int infer_broadcasts_to(const IShape *small, const IShape *big);

/* ---- outputs ------------------------------------------------------------------------ */
/* Sets output slot's dtype and shape; a conflicting earlier dtype/shape is an error naming
 * the value. Absent outputs are skipped. */
int infer_set_out(ApxGraph *g, int node, int slot, ApxDType dt, int32_t rank,
                  const int64_t *dims, ApxDiag *d);
static inline int infer_set_out_shape(ApxGraph *g, int node, int slot, ApxDType dt,
                                      const IShape *s, ApxDiag *d) {
  return infer_set_out(g, node, slot, dt, s->rank, s->dims, d);
}
/* Output slot copies input in_slot's dtype and shape. */
int infer_set_out_like(ApxGraph *g, int node, int slot, int in_slot, ApxDiag *d);
/* Output slot's shape as the creating pass set it (error when it is not set). */
int infer_preset_shape(ApxGraph *g, int node, int slot, IShape *out, ApxDiag *d);
/* 1 when output slot is present and already has a full static shape. */
int infer_out_shaped(const ApxGraph *g, int node, int slot);

#endif
