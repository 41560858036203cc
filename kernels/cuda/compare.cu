/* compare.cu - the v1.1 comparison, logic and selection ops on CUDA (contracts: attrs.def,
 * after ApxAttrHardSigmoid; the CPU reference is kernels/cpu/compare.c): Less, LessOrEqual,
 * Greater, GreaterOrEqual, Not, And, Or, IsNaN, IsInf, Min, Max (variadic), Clip, Mod with
 * numpy broadcasting, and the gradients ClipGrad and MinMaxGrad.
 *
 * Types: the forward ops run in fp32, fp16, bf16, int8, uint8, int32 and int64 (bool for the
 * logic ops); the others (int16, uint16, uint32, uint64, fp64) are "not supported yet on
 * cuda" (they run on the CPU backend). As on the CPU every result is exact: fp16 / bf16
 * compare as fp32, selections (Min, Max, Clip) copy the chosen element's bits, integer
 * remainders are integer arithmetic, fmod is exact (a half operand's fmodf result is
 * representable in its type). An integer Mod by zero records a device error (the CPU fails
 * the call). The gradients (fp32 / fp16 / bf16) load to fp32 and round once on store. */
#include <type_traits>

#include "kernels/cuda/bcast.cuh"
#include "kernels/cuda/common.cuh"

/* ---- values ---------------------------------------------------------------------------- */

/* cv: an element as the value it stands for (fp16 / bf16 as fp32, others unchanged) */
template <typename T>
static __device__ __forceinline__ T cv(T v) {
  return v;
}
static __device__ __forceinline__ float cv(__half v) { return __half2float(v); }
static __device__ __forceinline__ float cv(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename C>
static __device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point<C>::value) return isnan(v);
  return false;
}

/* Runs the statements with T = the storage type of dt (the forward ops' types); other types
 * fail with UNSUPPORTED. */
#define APX_CU_NUM_SWITCH(ctx, dt, T, ...)                                                \
  do {                                                                                    \
    switch (dt) {                                                                         \
      case APX_DT_F32: { typedef float T; __VA_ARGS__; break; }                           \
      case APX_DT_F16: { typedef __half T; __VA_ARGS__; break; }                          \
      case APX_DT_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; break; }                  \
      case APX_DT_I8: { typedef int8_t T; __VA_ARGS__; break; }                           \
      case APX_DT_U8: { typedef uint8_t T; __VA_ARGS__; break; }                          \
      case APX_DT_I32: { typedef int32_t T; __VA_ARGS__; break; }                         \
      case APX_DT_I64: { typedef long long T; __VA_ARGS__; break; }                       \
      default:                                                                            \
        return apx_cuda_fail((ctx), APX_STATUS_UNSUPPORTED,                               \
                             "not supported yet on cuda: type %s (the cpu backend runs it)", \
                             apx_dtype_name(dt));                                         \
    }                                                                                     \
  } while (0)

enum { C_LT, C_LE, C_GT, C_GE };
enum { L_AND, L_OR };

template <int OP, typename C>
static __device__ __forceinline__ bool compare_f(C x, C y) {
  if constexpr (OP == C_LT) return x < y;
  if constexpr (OP == C_LE) return x <= y;
  if constexpr (OP == C_GT) return x > y;
  return x >= y;
}

/* max / min keeping a on ties and where a is NaN, b where b is NaN (numpy, compare.c) */
template <bool MAX, typename T>
static __device__ __forceinline__ T select_f(T a, T b) {
  auto x = cv(a), y = cv(b);
  bool keep_a = MAX ? (x >= y || is_nan(x)) : (x <= y || is_nan(x));
  return keep_a ? a : b;
}

/* ---- kernels ---------------------------------------------------------------------------- */

template <int OP, typename T>
APX_CU_KERNEL(compare_kernel)(const T *a, const T *b, uint8_t *o, int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    bcast_off(g, i, &ia, &ib, NULL);
    o[i] = compare_f<OP>(cv(a[ia]), cv(b[ib])) ? 1 : 0;
  }
}

template <int OP>
APX_CU_KERNEL(logic_kernel)(const uint8_t *a, const uint8_t *b, uint8_t *o, int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    bcast_off(g, i, &ia, &ib, NULL);
    bool x = a[ia] != 0, y = b[ib] != 0;
    o[i] = (OP == L_AND ? (x && y) : (x || y)) ? 1 : 0;
  }
}

APX_CU_KERNEL(not_kernel)(const uint8_t *x, uint8_t *y, int64_t n) {
  APX_CU_GRID_STRIDE(i, n) y[i] = x[i] == 0 ? 1 : 0;
}

/* IsNaN (nan = 1) or IsInf with its detect flags */
template <typename T>
APX_CU_KERNEL(isclass_kernel)(const T *x, uint8_t *y, int64_t n, int nan, int dn, int dp) {
  APX_CU_GRID_STRIDE(i, n) {
    float v = ld(x[i]);
    y[i] = (nan ? isnan(v) : ((dp && v == INFINITY) || (dn && v == -INFINITY))) ? 1 : 0;
  }
}

template <bool MAX, typename T>
APX_CU_KERNEL(minmax_kernel)(const T *a, const T *b, T *o, int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    bcast_off(g, i, &ia, &ib, NULL);
    o[i] = select_f<MAX>(a[ia], b[ib]);
  }
}

/* y = min(max(x, *lo), *hi); lo / hi NULL: unbounded (NaN propagates, numpy.clip) */
template <typename T>
APX_CU_KERNEL(clip_kernel)(const T *x, const T *lo, const T *hi, T *y, int64_t n) {
  APX_CU_GRID_STRIDE(i, n) {
    T v = x[i];
    if (lo) v = select_f<true>(v, *lo);
    if (hi) v = select_f<false>(v, *hi);
    y[i] = v;
  }
}

/* Mod: integers truncated (fm = 1) or floored (fm = 0, the divisor's sign), a zero divisor
 * recorded as a device error (the element is set to 0); floats fmod (fm = 1 only). */
template <typename T>
APX_CU_KERNEL(mod_kernel)(const T *a, const T *b, T *o, int64_t n, BcastArgs g, int fm,
                          ApxCudaDevErr *err, int op, int64_t seq) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t ia, ib;
    bcast_off(g, i, &ia, &ib, NULL);
    if constexpr (std::is_integral<T>::value) {
      T x = a[ia], y = b[ib], r = 0;
      if (y == 0) {
        apx_cu_dev_fail(err, APX_CUDA_DERR_DIV_ZERO, op, seq, ib, 0, 0);
      } else if constexpr (std::is_signed<T>::value) {
        if (y != (T)-1) { /* INT_MIN % -1 would overflow; the remainder is 0 */
          r = (T)(x % y);
          if (!fm && r != 0 && ((r < 0) != (y < 0))) r = (T)(r + y);
        }
      } else {
        r = (T)(x % y);
      }
      o[i] = r;
    } else {
      o[i] = st<T>(fmodf(ld(a[ia]), ld(b[ib])));
    }
  }
}

/* PyTorch's clamp backward (attrs.def ClipGrad); lo / hi NULL when absent, outputs NULL
 * when not needed. */
template <typename T>
APX_CU_KERNEL(clip_grad_kernel)(const T *dy, const T *x, const T *lo, const T *hi, T *dx, T *dlo,
                                T *dhi, int64_t n) {
  float l = lo ? ld(*lo) : 0.0f, h = hi ? ld(*hi) : 0.0f;
  APX_CU_GRID_STRIDE(i, n) {
    float v = ld(x[i]);
    T g = dy[i], z = st<T>(0.0f);
    if (dx) dx[i] = ((!lo || v >= l) && (!hi || v <= h)) ? g : z;
    if (dlo) dlo[i] = (v < l && (!hi || l < h)) ? g : z;
    if (dhi) dhi[i] = (v > h || (lo && h < l)) ? g : z;
  }
}

/* MinMaxGrad over one input X_k of the broadcast (dY, Y, X_k): count[i] += (x_k == y) */
template <typename T>
APX_CU_KERNEL(minmax_count_kernel)(const T *y, const T *x, float *count, int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t i0, iy, ix;
    bcast_off(g, i, &i0, &iy, &ix);
    if (ld(x[ix]) == ld(y[iy])) count[i] += 1.0f;
  }
}

/* dx_k = dy / max(count, 1) where x_k == y or y is NaN, else 0 */
template <typename T>
APX_CU_KERNEL(minmax_grad_kernel)(const T *dy, const T *y, const T *x, const float *count, T *dx,
                                  int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t i0, iy, ix;
    bcast_off(g, i, &i0, &iy, &ix);
    float yv = ld(y[iy]), c = count[i], gv = ld(dy[i0]);
    bool hit = ld(x[ix]) == yv || isnan(yv);
    dx[i] = st<T>(hit ? (c > 1.0f ? gv / c : gv) : 0.0f);
  }
}

/* ---- entries ------------------------------------------------------------------------------ */

static ApxStatus bcast2(ApxCudaCtx *ctx, BcastArgs *g, int64_t *n, const ApxTensor *out,
                        const ApxTensor *a, const ApxTensor *b) {
  const ApxTensor *pair[2] = {a, b};
  ApxBcast bc;
  if (apx_bcast_plan(&bc, out, pair, 2, ctx->err, sizeof ctx->err)) return APX_STATUS_BAD_INPUT;
  *g = bcast_args(&bc);
  *n = bc.numel;
  return APX_STATUS_OK;
}

/* Types, shapes, bounds and aliasing of every entry below: kernels/validate.c. */

/* Less, LessOrEqual, Greater, GreaterOrEqual (A, B) -> bool */
APX_CUDA_ENTRY(apx_cuda_compare) {
  BcastArgs g;
  int64_t n;
  APX_TRY(bcast2(ctx, &g, &n, &outs[0], &ins[0], &ins[1]));
  ApxDType dt = ins[0].dtype;
#define APX_CU_COMPARE(T)                                                                           \
  do {                                                                                              \
    if (n == 0) break;                                                                              \
    int block = apx_cu_block(ctx, 256);                                                             \
    unsigned grid = apx_cu_grid(ctx, n, block);                                                     \
    cudaStream_t s = apx_cu_stream(ctx);                                                            \
    const T *a = (const T *)ins[0].data, *b = (const T *)ins[1].data;                               \
    uint8_t *o = (uint8_t *)outs[0].data;                                                           \
    switch (op) {                                                                                   \
      case APX_OP_Less: compare_kernel<C_LT, T><<<grid, block, 0, s>>>(a, b, o, n, g); break;       \
      case APX_OP_LessOrEqual: compare_kernel<C_LE, T><<<grid, block, 0, s>>>(a, b, o, n, g); break;\
      case APX_OP_Greater: compare_kernel<C_GT, T><<<grid, block, 0, s>>>(a, b, o, n, g); break;    \
      case APX_OP_GreaterOrEqual: compare_kernel<C_GE, T><<<grid, block, 0, s>>>(a, b, o, n, g); break; \
      default: return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not a comparison");              \
    }                                                                                               \
  } while (0)
  if (dt == APX_DT_F64) /* float64 too, as the CPU (masks computed from fp64 data) */
    APX_CU_COMPARE(double);
  else
    APX_CU_NUM_SWITCH(ctx, dt, T, { APX_CU_COMPARE(T); });
#undef APX_CU_COMPARE
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* Not(X), And(A, B), Or(A, B): bool */
APX_CUDA_ENTRY(apx_cuda_logic) {
  int block = apx_cu_block(ctx, 256);
  cudaStream_t s = apx_cu_stream(ctx);
  const uint8_t *a = (const uint8_t *)ins[0].data;
  uint8_t *o = (uint8_t *)outs[0].data;
  if (op == APX_OP_Not) {
    int64_t n = apx_tensor_numel(&outs[0]);
    if (n == 0) return APX_STATUS_OK;
    not_kernel<<<apx_cu_grid(ctx, n, block), block, 0, s>>>(a, o, n);
  } else {
    BcastArgs g;
    int64_t n;
    APX_TRY(bcast2(ctx, &g, &n, &outs[0], &ins[0], &ins[1]));
    if (n == 0) return APX_STATUS_OK;
    const uint8_t *b = (const uint8_t *)ins[1].data;
    if (op == APX_OP_And)
      logic_kernel<L_AND><<<apx_cu_grid(ctx, n, block), block, 0, s>>>(a, b, o, n, g);
    else
      logic_kernel<L_OR><<<apx_cu_grid(ctx, n, block), block, 0, s>>>(a, b, o, n, g);
  }
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* IsNaN(X), IsInf(X) -> bool */
APX_CUDA_ENTRY(apx_cuda_isclass) {
  int64_t n = apx_tensor_numel(&ins[0]);
  int dn = 1, dp = 1;
  if (op == APX_OP_IsInf) {
    const ApxAttrIsInf *a = (const ApxAttrIsInf *)attrs;
    dn = a->detect_negative, dp = a->detect_positive;
  }
  ApxDType dt = ins[0].dtype;
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (n == 0) break;
    int block = apx_cu_block(ctx, 256);
    isclass_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)ins[0].data, (uint8_t *)outs[0].data, n, op == APX_OP_IsNaN, dn, dp);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* Min / Max (X_0, ..., X_{n-1}) -> Y = f(f(X_0, X_1), X_2) ... (the CPU's order) */
APX_CUDA_ENTRY(apx_cuda_minmax) {
  ApxTensor *o = &outs[0];
  if (n_in == 1) return apx_cuda_broadcast_copy(ctx, &ins[0], o);
  ApxDType dt = o->dtype;
  int block = apx_cu_block(ctx, 256);
  cudaStream_t s = apx_cu_stream(ctx);
  for (int k = 1; k < n_in; k++) {
    const ApxTensor *a = k == 1 ? &ins[0] : o;
    BcastArgs g;
    int64_t n;
    APX_TRY(bcast2(ctx, &g, &n, o, a, &ins[k]));
    if (n == 0) return APX_STATUS_OK;
    unsigned grid = apx_cu_grid(ctx, n, block);
    APX_CU_NUM_SWITCH(ctx, dt, T, {
      const T *pa = (const T *)a->data, *pb = (const T *)ins[k].data;
      if (op == APX_OP_Max)
        minmax_kernel<true, T><<<grid, block, 0, s>>>(pa, pb, (T *)o->data, n, g);
      else
        minmax_kernel<false, T><<<grid, block, 0, s>>>(pa, pb, (T *)o->data, n, g);
    });
    APX_CUDA_LAUNCHED(ctx);
  }
  return APX_STATUS_OK;
}

/* Bounds at input slots first, first + 1: absent (NULL), or one element of X's type. */
static void bounds(const ApxTensor *ins, int n_in, int first, const void **b) {
  for (int k = first; k < first + 2; k++) b[k - first] = apx_cu_has(ins, n_in, k) ? ins[k].data : NULL;
}

/* Clip(X, min?, max?) -> Y */
APX_CUDA_ENTRY(apx_cuda_clip) {
  ApxDType dt = ins[0].dtype;
  int64_t n = apx_tensor_numel(&ins[0]);
  const void *b[2];
  bounds(ins, n_in, 1, b);
  APX_CU_NUM_SWITCH(ctx, dt, T, {
    if (n == 0) break;
    int block = apx_cu_block(ctx, 256);
    clip_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)ins[0].data, (const T *)b[0], (const T *)b[1], (T *)outs[0].data, n);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* Mod(A, B) -> C (ApxAttrMod) */
APX_CUDA_ENTRY(apx_cuda_mod) {
  ApxDType dt = ins[0].dtype;
  int fm = ((const ApxAttrMod *)attrs)->fmod;
  BcastArgs g;
  int64_t n;
  APX_TRY(bcast2(ctx, &g, &n, &outs[0], &ins[0], &ins[1]));
  APX_CU_NUM_SWITCH(ctx, dt, T, {
    if (n == 0) break;
    int block = apx_cu_block(ctx, 256);
    mod_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)ins[0].data, (const T *)ins[1].data, (T *)outs[0].data, n, g, fm, ctx->dev_err,
        (int)op, ctx->seq);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* ClipGrad(dY, X, min?, max?) -> dX?, dMin?, dMax?, all of dY's shape */
APX_CUDA_ENTRY(apx_cuda_clip_grad) {
  ApxDType dt = ins[0].dtype;
  int64_t n = apx_tensor_numel(&ins[0]);
  const void *b[2];
  bounds(ins, n_in, 2, b);
  void *gout[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++)
    if (apx_cu_has(outs, n_out, k)) gout[k] = outs[k].data;
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (n == 0) break;
    int block = apx_cu_block(ctx, 256);
    clip_grad_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
        (const T *)ins[0].data, (const T *)ins[1].data, (const T *)b[0], (const T *)b[1],
        (T *)gout[0], (T *)gout[1], (T *)gout[2], n);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

/* MinMaxGrad(dY, Y, X_0 .. X_{n-1}) -> dX_0? .. dX_{n-1}?, each of dY's shape */
APX_CUDA_ENTRY(apx_cuda_minmax_grad) {
  const ApxTensor *dy = &ins[0];
  ApxDType dt = dy->dtype;
  int64_t n = apx_tensor_numel(dy);
  int block = apx_cu_block(ctx, 256);
  cudaStream_t s = apx_cu_stream(ctx);
  float *count = NULL;
  APX_TRY(apx_cuda_tmp(ctx, (size_t)(n ? n : 1) * sizeof(float), (void **)&count));
  APX_CUDA_TRY(ctx, cudaMemsetAsync(count, 0, (size_t)(n ? n : 1) * sizeof(float), s));
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < n_out; k++) {
      if (pass == 1 && !apx_cu_has(outs, n_out, k)) continue;
      const ApxTensor *tri[3] = {&ins[0], &ins[1], &ins[2 + k]};
      ApxBcast bc;
      if (apx_bcast_plan(&bc, dy, tri, 3, ctx->err, sizeof ctx->err)) return APX_STATUS_BAD_INPUT;
      if (bc.numel == 0) return APX_STATUS_OK;
      BcastArgs a = bcast_args(&bc);
      unsigned grid = apx_cu_grid(ctx, bc.numel, block);
      APX_CU_FLOAT_SWITCH(ctx, dt, T, {
        const T *py = (const T *)ins[1].data, *px = (const T *)ins[2 + k].data;
        if (pass == 0)
          minmax_count_kernel<T><<<grid, block, 0, s>>>(py, px, count, bc.numel, a);
        else
          minmax_grad_kernel<T><<<grid, block, 0, s>>>((const T *)dy->data, py, px, count,
                                                       (T *)outs[k].data, bc.numel, a);
      });
      APX_CUDA_LAUNCHED(ctx);
    }
  return APX_STATUS_OK;
}
