/* dtype.c - element type table (sizes and names). */
#include "kernels/dtype.h"

#include <string.h>

size_t apx_dtype_size(ApxDType t) {
  switch (t) {
    case APX_DT_F32: return 4;
    case APX_DT_U8: return 1;
    case APX_DT_I8: return 1;
    case APX_DT_U16: return 2;
    case APX_DT_I16: return 2;
    case APX_DT_I32: return 4;
    case APX_DT_I64: return 8;
    case APX_DT_BOOL: return 1;
    case APX_DT_F16: return 2;
    case APX_DT_F64: return 8;
    case APX_DT_U32: return 4;
    case APX_DT_U64: return 8;
    case APX_DT_BF16: return 2;
    default: return 0;
  }
}

const char *apx_dtype_name(ApxDType t) {
  switch (t) {
    case APX_DT_F32: return "float32";
    case APX_DT_U8: return "uint8";
    case APX_DT_I8: return "int8";
    case APX_DT_U16: return "uint16";
    case APX_DT_I16: return "int16";
    case APX_DT_I32: return "int32";
    case APX_DT_I64: return "int64";
    case APX_DT_STRING: return "string";
    case APX_DT_BOOL: return "bool";
    case APX_DT_F16: return "float16";
    case APX_DT_F64: return "float64";
    case APX_DT_U32: return "uint32";
    case APX_DT_U64: return "uint64";
    case APX_DT_BF16: return "bfloat16";
    default: return "undefined";
  }
}

const char *apx_dtype_short(ApxDType t) {
  switch (t) {
    case APX_DT_F32: return "fp32";
    case APX_DT_U8: return "u8";
    case APX_DT_I8: return "i8";
    case APX_DT_U16: return "u16";
    case APX_DT_I16: return "i16";
    case APX_DT_I32: return "i32";
    case APX_DT_I64: return "i64";
    case APX_DT_STRING: return "str";
    case APX_DT_BOOL: return "bool";
    case APX_DT_F16: return "fp16";
    case APX_DT_F64: return "fp64";
    case APX_DT_U32: return "u32";
    case APX_DT_U64: return "u64";
    case APX_DT_BF16: return "bf16";
    default: return "?";
  }
}

int apx_dtype_is_supported(int32_t t) {
  return t != APX_DT_STRING && apx_dtype_size((ApxDType)t) != 0;
}

int apx_dtype_is_float(ApxDType t) {
  return t == APX_DT_F32 || t == APX_DT_F16 || t == APX_DT_BF16 || t == APX_DT_F64;
}

int apx_dtype_is_half(ApxDType t) { return t == APX_DT_F16 || t == APX_DT_BF16; }

int apx_dtype_is_int(ApxDType t) {
  switch (t) {
    case APX_DT_U8: case APX_DT_I8: case APX_DT_U16: case APX_DT_I16: case APX_DT_I32:
    case APX_DT_I64: case APX_DT_U32: case APX_DT_U64: case APX_DT_BOOL: return 1;
    default: return 0;
  }
}

ApxDType apx_dtype_parse(const char *s) {
  static const struct { const char *name; ApxDType t; } names[] = {
      {"fp16", APX_DT_F16}, {"float16", APX_DT_F16}, {"half", APX_DT_F16},
      {"bf16", APX_DT_BF16}, {"bfloat16", APX_DT_BF16},
      {"fp32", APX_DT_F32}, {"float32", APX_DT_F32}, {"float", APX_DT_F32},
      {"fp64", APX_DT_F64}, {"float64", APX_DT_F64}, {"double", APX_DT_F64},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i].name) == 0) return names[i].t;
  return APX_DT_UNDEFINED;
}
