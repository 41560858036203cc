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
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, IO, GRAD, KIND) APX_OP_##ID,
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
  APX_OPF_REWRITE = 1 << 9,     /* rewritten into other ops by a pass (no kernel of its own):
                                   SplitToSequence / SequenceAt (passes/split_sequences.c) */
  APX_OPF_RANDOM = 1 << 10,     /* draws random numbers (Philox): never evaluated at compile
                                   time, except where its training_mode attribute is 0 */
} ApxOpFlags;

/* How an op's inference and kernels are written (ops.def KIND). */
typedef enum ApxOpKind {
  APX_KIND_OWN = 0,       /* hand-written inference rule and dispatch rows */
  APX_KIND_EW_UNARY,      /* y = apx_ew_<ID>(x, attrs): generated inference and kernels */
  APX_KIND_EW_UNARY_GRAD, /* dX = apx_ew_<ID>(dY, T, attrs): generated inference and kernels */
} ApxOpKind;

/* One field of a typed attribute struct (attrs.def). */
typedef enum ApxAttrFieldKind {
  APX_FIELD_F32,   /* float */
  APX_FIELD_I32,   /* int32_t */
  APX_FIELD_I64,   /* int64_t */
  APX_FIELD_BOOL,  /* int32_t 0 / 1 */
  APX_FIELD_ENUM,  /* int32_t index into names */
  APX_FIELD_DTYPE, /* int32_t ApxDType */
  APX_FIELD_COUNT, /* int32_t: entries used of the I64V array after it */
  APX_FIELD_I64S,  /* int64_t[n], all used */
  APX_FIELD_I64V,  /* int64_t[n], the first COUNT used */
  APX_FIELD_F64V,  /* double[n], the first COUNT used (no attribute form) */
  APX_FIELD_LABELV, /* int64_t[n] character codes, the first COUNT used, shown as text */
} ApxAttrFieldKind;

typedef struct ApxAttrField {
  const char *name;  /* C field name */
  const char *onnx;  /* ONNX attribute name, NULL when it has no attribute form */
  uint8_t kind;      /* ApxAttrFieldKind */
  int16_t n;         /* array length (I64S, I64V capacity); 1 for scalars */
  uint32_t offset;   /* offsetof in the struct */
  float fdef;        /* default of an F32 field */
  int64_t idef;      /* default of the integer kinds (ENUM: the index) */
  const char *names; /* ENUM: "a|b|c" */
} ApxAttrField;

typedef struct ApxAttrDesc {
  const char *type; /* the struct's name */
  size_t size;      /* its sizeof */
  int32_t n_fields;
  const ApxAttrField *fields;
} ApxAttrDesc;

typedef struct ApxOpInfo {
  const char *name;       /* ONNX op_type or internal name */
  ApxPrecClass prec;      /* O1 list class */
  uint32_t flags;         /* ApxOpFlags */
  uint32_t static_inputs; /* bitmask: inputs that must be compile-time constants */
  size_t attrs_size;      /* sizeof the typed attribute struct */
  const char *attrs_type; /* its name, for dumps */
  int8_t min_in, max_in;  /* arity (ops.def IO; -1: no upper bound) */
  int8_t min_out, max_out;
  uint8_t has_grad;       /* a gradient rule exists (ops.def GRAD) */
  uint8_t kind;           /* ApxOpKind */
} ApxOpInfo;

/* Info for op (APX_OP_INVALID and out-of-range give a zeroed entry with name "?"). */
const ApxOpInfo *apx_op_info(ApxOp op);
static inline const char *apx_op_name(ApxOp op) { return apx_op_info(op)->name; }
/* The op's typed attribute struct with its fields (attrs.def); ApxAttrNone's for
 * APX_OP_INVALID and out-of-range ops. */
const ApxAttrDesc *apx_op_attrs(ApxOp op);
/* Lookup by ONNX op_type / internal name (case-sensitive); APX_OP_INVALID if unknown. */
ApxOp apx_op_from_name(const char *name);
const char *apx_prec_class_name(ApxPrecClass c); /* "half", "fp32", "promote", ... */

/* Name of value v of an ENUM field ("tanh"), NULL when v is out of range; the name is
 * written into buf (cap bytes). */
const char *apx_attr_enum_name(const ApxAttrField *f, int64_t v, char *buf, size_t cap);
/* Index of name among an ENUM field's names, -1 when it is not one of them. */
int apx_attr_enum_index(const ApxAttrField *f, const char *name);
/* Fills attrs (apx_op_attrs(op)->size bytes) with the fields' defaults (arrays and counts
 * zero). */
void apx_attrs_defaults(ApxOp op, void *attrs);
/* Writes the typed attributes as "name=value ..." (every field; arrays as [a,b]; ENUM and
 * DTYPE fields by name) into buf; returns buf. For dumps. */
char *apx_attrs_format(ApxOp op, const void *attrs, char *buf, size_t cap);
/* 1 if input slot k of op must be a compile-time constant (ops.def STATIC_INPUTS: read into
 * the typed attributes, never a runtime tensor). */
static inline int apx_op_input_is_static(ApxOp op, int k) {
  return k >= 0 && k < 32 && ((apx_op_info(op)->static_inputs >> k) & 1u);
}

#ifdef __cplusplus
}
#endif
#endif
