/* dtype.h - element types shared by compiler, runtime and kernels.
 *
 * Values equal ONNX TensorProto.DataType so conversion from/to ONNX is the identity.
 * Half types (F16, BF16) are stored as 16-bit patterns; see half.h for conversions. */
#ifndef APX_DTYPE_H
#define APX_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxDType {
  APX_DT_UNDEFINED = 0,
  APX_DT_F32 = 1,
  APX_DT_U8 = 2,
  APX_DT_I8 = 3,
  APX_DT_U16 = 4,
  APX_DT_I16 = 5,
  APX_DT_I32 = 6,
  APX_DT_I64 = 7,
  APX_DT_STRING = 8,
  APX_DT_BOOL = 9,
  APX_DT_F16 = 10,
  APX_DT_F64 = 11,
  APX_DT_U32 = 12,
  APX_DT_U64 = 13,
  APX_DT_BF16 = 16,
} ApxDType;

#define APX_MAX_RANK 8

/* Bytes per element; 0 for UNDEFINED, STRING and values outside the enum. */
size_t apx_dtype_size(ApxDType t);
/* "float32", "float16", "bfloat16", "int64", ...; "undefined" for unknown values. */
const char *apx_dtype_name(ApxDType t);
/* Short name used in --explain and flags: "fp32", "fp16", "bf16", "fp64", "i64", ... */
const char *apx_dtype_short(ApxDType t);
/* 1 when t is one of the ApxDType values this project can store (not STRING). */
int apx_dtype_is_supported(int32_t onnx_type);
int apx_dtype_is_float(ApxDType t); /* F16, BF16, F32, F64 */
int apx_dtype_is_half(ApxDType t);  /* F16, BF16 */
int apx_dtype_is_int(ApxDType t);   /* signed/unsigned integers and BOOL */
/* Parse "fp16" / "float16" / "bf16" / "bfloat16" / "fp32" / "float32" / "float"; UNDEFINED if unknown. */
ApxDType apx_dtype_parse(const char *s);

#ifdef __cplusplus
}
#endif
#endif
