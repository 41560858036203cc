/* op.h - op enum, names and traits, expanded from ops.def (the one op table). */
#ifndef APX_OP_H
#define APX_OP_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attrs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxOp {
  APX_OP_INVALID = 0,
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS) APX_OP_##ID,
#include "kernels/ops.def"
#undef APX_OP
  APX_OP_COUNT
} ApxOp;

/* Precision class at O1 (DESIGN.md 6): see ops.def. */
typedef enum ApxPrecClass {
  APX_PREC_HALF,
  APX_PREC_FP32,
  APX_PREC_PROMOTE,
  APX_PREC_PASS,
  APX_PREC_INHERIT,
  APX_PREC_FIXED,
} ApxPrecClass;

typedef enum ApxOpFlags {
  APX_OPF_V1 = 1 << 0,          /* v1 forward op: loads, runs, has a gradient rule */
  APX_OPF_FOLD = 1 << 1,        /* compile-time only: must fold to a constant */
  APX_OPF_TIER2 = 1 << 2,       /* known, "not supported yet" */
  APX_OPF_LISTED = 1 << 3,      /* named by the precision lists only, not supported */
  APX_OPF_INTERNAL = 1 << 4,    /* created by apexc passes (domain com.apexc) */
  APX_OPF_ELEMWISE = 1 << 5,    /* elementwise (with numpy broadcasting) */
  APX_OPF_INPLACE = 1 << 6,     /* output 0 may reuse input 0's buffer */
  APX_OPF_SHAPEONLY = 1 << 7,   /* output aliases input 0's bytes (no data movement) */
  APX_OPF_MULTITENSOR = 1 << 8, /* variadic over a list of tensors */
} ApxOpFlags;

typedef struct ApxOpInfo {
  const char *name;       /* ONNX op_type or internal name */
  ApxPrecClass prec;      /* O1 list class */
  uint32_t flags;         /* ApxOpFlags */
  uint32_t static_inputs; /* bitmask: inputs that must be compile-time constants */
  size_t attrs_size;      /* sizeof the typed attribute struct */
  const char *attrs_type; /* its name, for dumps */
} ApxOpInfo;

/* Info for op (APX_OP_INVALID and out-of-range give a zeroed entry with name "?"). */
const ApxOpInfo *apx_op_info(ApxOp op);
static inline const char *apx_op_name(ApxOp op) { return apx_op_info(op)->name; }
/* Lookup by ONNX op_type / internal name (case-sensitive); APX_OP_INVALID if unknown. */
ApxOp apx_op_from_name(const char *name);
const char *apx_prec_class_name(ApxPrecClass c); /* "half", "fp32", "promote", ... */
/* 1 if input slot k of op must be a compile-time constant (ops.def STATIC_INPUTS: read into
 * the typed attributes, never a runtime tensor). */
static inline int apx_op_input_is_static(ApxOp op, int k) {
  return k >= 0 && k < 32 && ((apx_op_info(op)->static_inputs >> k) & 1u);
}

#ifdef __cplusplus
}
#endif
#endif
