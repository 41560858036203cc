/* convert.cu - Cast(input) -> output of type attrs->to, and apx_cuda_convert (any dtype to
 * any dtype, with a one-element source filling the destination: AssignState).
 * Semantics are the CPU reference's (kernels/cpu/convert.c): every conversion to a float
 * type rounds once to nearest even (fp64 via __double2half / __double2bfloat16, 64-bit
 * integers through an fp32 value rounded to odd); float -> integer truncates toward zero, NaN
 * gives 0, values beyond int64 saturate, then wrap to narrower types; -> bool is x != 0 (NaN
 * is true). fp32 <-> fp16 / bf16 (the casts mixed precision inserts) have their own kernel. */
#include "kernels/cuda/common.cuh"
#include "kernels/validate.h"

/* ---- fast path: between fp32, fp16 and bf16 ---------------------------------------------- */

template <typename S, typename D>
APX_CU_KERNEL(convert_float_kernel)(const S *src, D *dst, int64_t n, int fill) {
  if (fill) {
    D v = st<D>(ld(src[0]));
    APX_CU_GRID_STRIDE(i, n) dst[i] = v;
  } else {
    APX_CU_GRID_STRIDE(i, n) dst[i] = st<D>(ld(src[i]));
  }
}

/* ---- general path --------------------------------------------------------------------------- */

static __device__ __forceinline__ bool dt_is_float(int dt) {
  return dt == APX_DT_F32 || dt == APX_DT_F16 || dt == APX_DT_BF16 || dt == APX_DT_F64;
}

static __device__ double load_f64(const void *p, int dt, int64_t i) {
  switch (dt) {
    case APX_DT_F64: return ((const double *)p)[i];
    case APX_DT_F16: return (double)__half2float(((const __half *)p)[i]);
    case APX_DT_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return (double)((const float *)p)[i];
  }
}

static __device__ int64_t load_i64(const void *p, int dt, int64_t i) {
  switch (dt) {
    case APX_DT_I64: return ((const long long *)p)[i];
    case APX_DT_U64: return (int64_t)((const unsigned long long *)p)[i];
    case APX_DT_I32: return ((const int *)p)[i];
    case APX_DT_U32: return ((const unsigned *)p)[i];
    case APX_DT_I16: return ((const short *)p)[i];
    case APX_DT_U16: return ((const unsigned short *)p)[i];
    case APX_DT_I8: return ((const signed char *)p)[i];
    case APX_DT_U8: return ((const unsigned char *)p)[i];
    case APX_DT_BOOL: return ((const unsigned char *)p)[i] != 0;
    default: return 0;
  }
}

static __device__ int64_t f64_to_i64_sat(double d) {
  if (d != d) return 0;
  d = trunc(d);
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

static __device__ uint64_t f64_to_u64(double d) {
  if (d != d) return 0;
  d = trunc(d);
  if (d >= 18446744073709551616.0) return UINT64_MAX;
  if (d >= 9223372036854775808.0) return (uint64_t)d;
  return (uint64_t)f64_to_i64_sat(d);
}

/* |v| = u with sign to fp32 rounded to odd (truncate, low bit set when inexact). */
static __device__ float u64_to_f32_odd(uint64_t u, int neg) {
  float f = __ull2float_rz(u);
  if ((uint64_t)f != u) f = __uint_as_float(__float_as_uint(f) | 1u);
  return neg ? -f : f;
}

static __device__ void store_f64(void *p, int dt, int64_t i, double d) {
  switch (dt) {
    case APX_DT_F64: ((double *)p)[i] = d; break;
    case APX_DT_F32: ((float *)p)[i] = (float)d; break;
    case APX_DT_F16: ((__half *)p)[i] = __double2half(d); break;
    case APX_DT_BF16: ((__nv_bfloat16 *)p)[i] = __double2bfloat16(d); break;
    case APX_DT_BOOL: ((unsigned char *)p)[i] = d != 0; break;
    case APX_DT_U64: ((unsigned long long *)p)[i] = f64_to_u64(d); break;
    case APX_DT_I64: ((long long *)p)[i] = f64_to_i64_sat(d); break;
    case APX_DT_I32: ((int *)p)[i] = (int)(uint32_t)f64_to_i64_sat(d); break;
    case APX_DT_U32: ((unsigned *)p)[i] = (unsigned)f64_to_i64_sat(d); break;
    case APX_DT_I16: ((short *)p)[i] = (short)(uint16_t)f64_to_i64_sat(d); break;
    case APX_DT_U16: ((unsigned short *)p)[i] = (unsigned short)f64_to_i64_sat(d); break;
    case APX_DT_I8: ((signed char *)p)[i] = (signed char)(uint8_t)f64_to_i64_sat(d); break;
    case APX_DT_U8: ((unsigned char *)p)[i] = (unsigned char)f64_to_i64_sat(d); break;
    default: break;
  }
}

static __device__ void store_i64(void *p, int dt, int64_t i, int64_t v, int src_u64) {
  switch (dt) {
    case APX_DT_F64:
      ((double *)p)[i] = src_u64 ? __ull2double_rn((uint64_t)v) : __ll2double_rn(v);
      break;
    case APX_DT_F32:
      ((float *)p)[i] = src_u64 ? __ull2float_rn((uint64_t)v) : __ll2float_rn(v);
      break;
    case APX_DT_F16:
    case APX_DT_BF16: {
      int neg = !src_u64 && v < 0;
      uint64_t u = neg ? 0 - (uint64_t)v : (uint64_t)v;
      float f = u64_to_f32_odd(u, neg);
      if (dt == APX_DT_F16)
        ((__half *)p)[i] = __float2half_rn(f);
      else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(f);
      break;
    }
    case APX_DT_BOOL: ((unsigned char *)p)[i] = v != 0; break;
    case APX_DT_I64: ((long long *)p)[i] = v; break;
    case APX_DT_U64: ((unsigned long long *)p)[i] = (uint64_t)v; break;
    case APX_DT_I32: ((int *)p)[i] = (int)(uint32_t)v; break;
    case APX_DT_U32: ((unsigned *)p)[i] = (unsigned)v; break;
    case APX_DT_I16: ((short *)p)[i] = (short)(uint16_t)v; break;
    case APX_DT_U16: ((unsigned short *)p)[i] = (unsigned short)v; break;
    case APX_DT_I8: ((signed char *)p)[i] = (signed char)(uint8_t)v; break;
    case APX_DT_U8: ((unsigned char *)p)[i] = (unsigned char)v; break;
    default: break;
  }
}

APX_CU_KERNEL(convert_any_kernel)(const void *src, int sdt, void *dst, int ddt, int64_t n, int fill) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t j = fill ? 0 : i;
    if (dt_is_float(sdt))
      store_f64(dst, ddt, i, load_f64(src, sdt, j));
    else
      store_i64(dst, ddt, i, load_i64(src, sdt, j), sdt == APX_DT_U64);
  }
}

/* ---- launchers and entries -------------------------------------------------------------------- */

template <typename S, typename D>
static void launch_convert_float(const S *src, D *dst, int64_t n, int fill, cudaStream_t s,
                                 int block, unsigned grid) {
  convert_float_kernel<S, D><<<grid, block, 0, s>>>(src, dst, n, fill);
}

static void launch_convert_any(const void *src, ApxDType sdt, void *dst, ApxDType ddt, int64_t n,
                               int fill, cudaStream_t s, int block, unsigned grid) {
  convert_any_kernel<<<grid, block, 0, s>>>(src, (int)sdt, dst, (int)ddt, n, fill);
}

ApxStatus apx_cuda_convert(ApxCudaCtx *ctx, const void *src, ApxDType sdt, int64_t n_src,
                           void *dst, ApxDType ddt, int64_t n) {
  size_t ss = apx_dtype_size(sdt), ds = apx_dtype_size(ddt);
  if (ss == 0 || ds == 0 || sdt == APX_DT_STRING || ddt == APX_DT_STRING)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, APX_MSG_CONVERT,
                         apx_dtype_name(sdt), apx_dtype_name(ddt));
  if (n <= 0) return APX_STATUS_OK;
  int fill = n_src == 1 && n != 1;
  if (!fill && n_src != n)
    return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "src has %lld elements, dst %lld",
                         (long long)n_src, (long long)n);
  cudaStream_t s = apx_cu_stream(ctx);
  if (sdt == ddt && !fill) {
    if (src != dst)
      APX_CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, (size_t)n * ss, cudaMemcpyDeviceToDevice, s));
    return APX_STATUS_OK;
  }
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  if (apx_cu_is_float16(sdt) && apx_cu_is_float16(ddt)) {
    APX_CU_FLOAT_SWITCH(ctx, sdt, S, {
      APX_CU_FLOAT_SWITCH(ctx, ddt, D,
                          launch_convert_float<S, D>((const S *)src, (D *)dst, n, fill, s, block, grid));
    });
  } else {
    launch_convert_any(src, sdt, dst, ddt, n, fill, s, block, grid);
  }
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* Element counts and the target type: kernels/validate.h */
APX_CUDA_ENTRY(apx_cuda_cast) {
  int64_t n = apx_tensor_numel(&ins[0]);
  return apx_cuda_convert(ctx, ins[0].data, ins[0].dtype, n, outs[0].data, outs[0].dtype, n);
}
