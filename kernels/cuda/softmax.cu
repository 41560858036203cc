/* softmax.cu - Softmax and LogSoftmax along one axis, their gradients SoftmaxGrad(dY, Y) and
 * LogSoftmaxGrad(dY, Y), FusedSoftmax(X, Mask?) = softmax(X * scale + Mask) along the last
 * axis and FusedSoftmaxGrad(dY, Y) = scale * SoftmaxGrad. Math as the CPU reference
 * (softmax_real.inc): max (NaN wins), exp(x - max) in fp32, their sum (and the gradients' sums)
 * accumulated in fp64 and rounded to fp32;
 *   softmax     y = exp(x - max) * (1 / sum)
 *   log-softmax y = (x - max) - log(sum)
 *   grads       dx = y (dy - sum(dy y));  dx = dy - exp(y) sum(dy)
 * A tensor is (outer, L, inner) around the axis. inner == 1 (the last axis): a warp per row
 * when L <= 1024, else a block per row; inner > 1: a thread per (outer, inner) line (threads
 * of a warp read neighbouring elements). */
#include "kernels/cuda/common.cuh"

enum { SM_SOFTMAX = 0, SM_LOG = 1 };

/* x[row * L + j] as fp32 */
template <typename T>
struct RowLoad {
  const T *x;
  __device__ float operator()(int64_t row, int64_t L, int64_t j) const { return ld(x[row * L + j]); }
};

/* x * scale + mask[broadcast offset] (FusedSoftmax) */
template <typename T>
struct MaskedLoad {
  const T *x;
  const void *mask;
  int32_t mask_dt;
  float scale;
  int32_t rank;
  int64_t dims[APX_MAX_RANK], mst[APX_MAX_RANK];
  __device__ float operator()(int64_t row, int64_t L, int64_t j) const {
    int64_t i = row * L + j;
    float v = ld(x[i]) * scale;
    if (mask) {
      int64_t off = 0, q = i;
      for (int d = rank - 1; d >= 0; d--) {
        off += (q % dims[d]) * mst[d];
        q /= dims[d];
      }
      v += ld_dt(mask, mask_dt, off);
    }
    return v;
  }
};

/* Where results go: y[i] of the row kernels' type, or any float type (FusedSoftmax may round to
 * another type than X's: passes/fuse_casts.c). */
template <typename T>
struct TypedStore {
  T *y;
  __device__ void operator()(int64_t i, float v) const { y[i] = st<T>(v); }
};
struct DynStore {
  void *y;
  int32_t dt;
  __device__ void operator()(int64_t i, float v) const { st_dt(y, dt, i, v); }
};

/* dY, Y and dX of the gradient kernels: one type, or each its own float type */
template <typename T>
struct TypedGrad {
  const T *dy, *y;
  T *dx;
  __device__ float g(int64_t i) const { return ld(dy[i]); }
  __device__ float out(int64_t i) const { return ld(y[i]); }
  __device__ void put(int64_t i, float v) const { dx[i] = st<T>(v); }
};
struct DynGrad {
  const void *dy, *y;
  void *dx;
  int32_t gdt, ydt, xdt;
  __device__ float g(int64_t i) const { return ld_dt(dy, gdt, i); }
  __device__ float out(int64_t i) const { return ld_dt(y, ydt, i); }
  __device__ void put(int64_t i, float v) const { st_dt(dx, xdt, i, v); }
};

static __device__ __forceinline__ float fmax_nan(float m, float v) {
  return (v > m || isnan(v)) ? v : m;
}

/* ---- forward kernels -------------------------------------------------------------------- */

template <int MODE, class LOAD, class STORE>
APX_CU_KERNEL(softmax_rows_warp)(LOAD f, STORE y, int64_t rows, int64_t L) {
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
       row += warps) {
    float m = -INFINITY;
    for (int64_t j = lane; j < L; j += 32) m = fmax_nan(m, f(row, L, j));
    m = warp_max(m);
    double sd = 0.0;
    for (int64_t j = lane; j < L; j += 32) sd += (double)expf(f(row, L, j) - m);
    float s = (float)warp_sum(sd);
    int64_t b = row * L;
    if (MODE == SM_LOG) {
      float ls = logf(s);
      for (int64_t j = lane; j < L; j += 32) y(b + j, (f(row, L, j) - m) - ls);
    } else {
      float inv = 1.0f / s;
      for (int64_t j = lane; j < L; j += 32) y(b + j, expf(f(row, L, j) - m) * inv);
    }
  }
}

template <int MODE, class LOAD, class STORE>
APX_CU_KERNEL(softmax_rows_block)(LOAD f, STORE y, int64_t rows, int64_t L) {
  __shared__ float sh[33];
  __shared__ double shd[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) m = fmax_nan(m, f(row, L, j));
    m = block_max(m, sh);
    double sd = 0.0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) sd += (double)expf(f(row, L, j) - m);
    float s = (float)block_sum(sd, shd);
    int64_t b = row * L;
    if (MODE == SM_LOG) {
      float ls = logf(s);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) y(b + j, (f(row, L, j) - m) - ls);
    } else {
      float inv = 1.0f / s;
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) y(b + j, expf(f(row, L, j) - m) * inv);
    }
  }
}

template <int MODE, typename T>
APX_CU_KERNEL(softmax_lines)(const T *x, T *y, int64_t outer, int64_t L, int64_t inner) {
  APX_CU_GRID_STRIDE(l, outer * inner) {
    int64_t base = (l / inner) * L * inner + l % inner;
    const T *px = x + base;
    T *py = y + base;
    float m = -INFINITY;
    double sd = 0.0;
    for (int64_t j = 0; j < L; j++) m = fmax_nan(m, ld(px[j * inner]));
    for (int64_t j = 0; j < L; j++) sd += (double)expf(ld(px[j * inner]) - m);
    float s = (float)sd;
    if (MODE == SM_LOG) {
      float ls = logf(s);
      for (int64_t j = 0; j < L; j++) py[j * inner] = st<T>((ld(px[j * inner]) - m) - ls);
    } else {
      float inv = 1.0f / s;
      for (int64_t j = 0; j < L; j++) py[j * inner] = st<T>(expf(ld(px[j * inner]) - m) * inv);
    }
  }
}

/* ---- gradient kernels (scale: FusedSoftmaxGrad's factor, 1 otherwise) ---------------------- */

template <int MODE, class ACC>
static __device__ __forceinline__ double sm_grad_term(const ACC &a, int64_t i) {
  return MODE == SM_LOG ? (double)a.g(i) : (double)a.g(i) * (double)a.out(i);
}

template <int MODE>
static __device__ __forceinline__ float sm_grad_out(float g, float yv, float s, float scale) {
  float d = MODE == SM_LOG ? g - expf(yv) * s : yv * (g - s);
  return scale == 1.0f ? d : d * scale;
}

template <int MODE, class ACC>
APX_CU_KERNEL(softmax_grad_rows_warp)(ACC a, int64_t rows, int64_t L, float scale) {
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
       row += warps) {
    int64_t b = row * L;
    double sd = 0.0;
    for (int64_t j = lane; j < L; j += 32) sd += sm_grad_term<MODE>(a, b + j);
    float s = (float)warp_sum(sd);
    for (int64_t j = lane; j < L; j += 32) a.put(b + j, sm_grad_out<MODE>(a.g(b + j), a.out(b + j), s, scale));
  }
}

template <int MODE, class ACC>
APX_CU_KERNEL(softmax_grad_rows_block)(ACC a, int64_t rows, int64_t L, float scale) {
  __shared__ double sh[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t b = row * L;
    double sd = 0.0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) sd += sm_grad_term<MODE>(a, b + j);
    float s = (float)block_sum(sd, sh);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
      a.put(b + j, sm_grad_out<MODE>(a.g(b + j), a.out(b + j), s, scale));
  }
}

template <int MODE, typename T>
APX_CU_KERNEL(softmax_grad_lines)(const T *dy, const T *y, T *dx, int64_t outer, int64_t L,
                                   int64_t inner) {
  APX_CU_GRID_STRIDE(l, outer * inner) {
    int64_t base = (l / inner) * L * inner + l % inner;
    double sd = 0.0;
    TypedGrad<T> a = {dy, y, dx};
    for (int64_t j = 0; j < L; j++) sd += sm_grad_term<MODE>(a, base + j * inner);
    float s = (float)sd;
    for (int64_t j = 0; j < L; j++) {
      int64_t i = base + j * inner;
      dx[i] = st<T>(sm_grad_out<MODE>(ld(dy[i]), ld(y[i]), s, 1.0f));
    }
  }
}

/* ---- launchers ------------------------------------------------------------------------------ */

#define WARP_ROWS_MAX_L 1024

template <int MODE, class LOAD, class STORE>
static void launch_softmax_rows(const ApxCudaCtx *ctx, LOAD f, STORE y, int64_t rows, int64_t L,
                                cudaStream_t s) {
  if (L <= WARP_ROWS_MAX_L) {
    int block = apx_cu_block(ctx, 256);
    unsigned grid = apx_cu_grid(ctx, rows * 32, block);
    softmax_rows_warp<MODE, LOAD, STORE><<<grid, block, 0, s>>>(f, y, rows, L);
  } else {
    int block = apx_cu_block(ctx, 512);
    unsigned grid = (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16);
    softmax_rows_block<MODE, LOAD, STORE><<<grid, block, 0, s>>>(f, y, rows, L);
  }
}

template <int MODE, class ACC>
static void launch_softmax_grad_rows(const ApxCudaCtx *ctx, ACC a, int64_t rows, int64_t L, float scale,
                                     cudaStream_t s) {
  if (L <= WARP_ROWS_MAX_L) {
    int block = apx_cu_block(ctx, 256);
    softmax_grad_rows_warp<MODE, ACC><<<apx_cu_grid(ctx, rows * 32, block), block, 0, s>>>(a, rows, L, scale);
  } else {
    int block = apx_cu_block(ctx, 512);
    unsigned grid = (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16);
    softmax_grad_rows_block<MODE, ACC><<<grid, block, 0, s>>>(a, rows, L, scale);
  }
}

/* ---- entries -------------------------------------------------------------------------------- */

/* The lines along axis (in [0, rank): kernels/validate.h); a scalar is one line of length 1. */
static void split_axis(const ApxTensor *t, int64_t axis, int64_t *outer, int64_t *L, int64_t *inner) {
  if (t->rank == 0) {
    *outer = *L = *inner = 1;
    return;
  }
  *outer = apx_dims_prod(t->dims, 0, (int32_t)axis);
  *L = t->dims[axis];
  *inner = apx_dims_prod(t->dims, (int32_t)axis + 1, t->rank);
}

APX_CUDA_ENTRY(apx_cuda_softmax) {
  const ApxTensor *x = &ins[0];
  if (outs[0].dtype != x->dtype)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed types");
  int64_t outer = 0, L = 0, inner = 0;
  split_axis(x, ((const ApxAttrAxis *)attrs)->axis, &outer, &L, &inner);
  if (outer * L * inner == 0) return APX_STATUS_OK;
  int is_log = op == APX_OP_LogSoftmax;
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    const T *px = (const T *)x->data;
    T *py = (T *)outs[0].data;
    if (inner == 1) {
      RowLoad<T> f = {px};
      TypedStore<T> o = {py};
      if (is_log)
        launch_softmax_rows<SM_LOG>(ctx, f, o, outer, L, s);
      else
        launch_softmax_rows<SM_SOFTMAX>(ctx, f, o, outer, L, s);
    } else {
      int block = apx_cu_block(ctx, 256);
      unsigned grid = apx_cu_grid(ctx, outer * inner, block);
      if (is_log)
        softmax_lines<SM_LOG, T><<<grid, block, 0, s>>>(px, py, outer, L, inner);
      else
        softmax_lines<SM_SOFTMAX, T><<<grid, block, 0, s>>>(px, py, outer, L, inner);
    }
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_softmax_grad) {
  ApxDType dt = outs[0].dtype;
  if (ins[0].dtype != dt || ins[1].dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed types");
  int64_t outer = 0, L = 0, inner = 0;
  split_axis(&ins[0], ((const ApxAttrAxis *)attrs)->axis, &outer, &L, &inner);
  if (outer * L * inner == 0) return APX_STATUS_OK;
  int is_log = op == APX_OP_LogSoftmaxGrad;
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    const T *dy = (const T *)ins[0].data, *y = (const T *)ins[1].data;
    T *dx = (T *)outs[0].data;
    if (inner == 1) {
      TypedGrad<T> a = {dy, y, dx};
      if (is_log)
        launch_softmax_grad_rows<SM_LOG>(ctx, a, outer, L, 1.0f, s);
      else
        launch_softmax_grad_rows<SM_SOFTMAX>(ctx, a, outer, L, 1.0f, s);
    } else {
      int block = apx_cu_block(ctx, 256);
      unsigned grid = apx_cu_grid(ctx, outer * inner, block);
      if (is_log)
        softmax_grad_lines<SM_LOG, T><<<grid, block, 0, s>>>(dy, y, dx, outer, L, inner);
      else
        softmax_grad_lines<SM_SOFTMAX, T><<<grid, block, 0, s>>>(dy, y, dx, outer, L, inner);
    }
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_fused_softmax) {
  const ApxAttrFusedSoftmax *a = (const ApxAttrFusedSoftmax *)attrs;
  const ApxTensor *x = &ins[0];
  const ApxTensor *mask = a->has_mask && apx_cu_has(ins, n_in, 1) ? &ins[1] : NULL;
  if (!apx_cu_is_float16(outs[0].dtype) || (mask && !apx_cu_is_float16(mask->dtype)))
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: Y of type %s, mask %s",
                         apx_dtype_name(outs[0].dtype), mask ? apx_dtype_name(mask->dtype) : "none");
  ApxBcast bc; /* Mask broadcasts to X (kernels/validate.h) */
  const ApxTensor *pair[2] = {x, mask};
  apx_bcast_init_t(&bc, &outs[0], pair, mask ? 2 : 1, NULL);
  int64_t L = x->dims[x->rank - 1], n = apx_tensor_numel(x), rows = n / (L ? L : 1);
  if (n == 0) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, x->dtype, T, {
    MaskedLoad<T> f;
    f.x = (const T *)x->data;
    f.mask = mask ? mask->data : NULL;
    f.mask_dt = mask ? (int32_t)mask->dtype : 0;
    f.scale = a->scale;
    f.rank = bc.rank;
    for (int d = 0; d < APX_MAX_RANK; d++) {
      f.dims[d] = bc.dims[d];
      f.mst[d] = mask ? bc.strides[1][d] : 0;
    }
    DynStore o = {outs[0].data, (int32_t)outs[0].dtype}; /* any float type (fuse_casts) */
    launch_softmax_rows<SM_SOFTMAX>(ctx, f, o, rows, L, s);
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_fused_softmax_grad) {
  const ApxAttrFusedSoftmax *a = (const ApxAttrFusedSoftmax *)attrs;
  ApxDType dt = outs[0].dtype;
  for (const ApxTensor *t : {&ins[0], &ins[1], (const ApxTensor *)&outs[0]})
    if (!apx_cu_is_float16(t->dtype))
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                           apx_dtype_name(t->dtype));
  int64_t L = ins[0].dims[ins[0].rank - 1], n = apx_tensor_numel(&ins[0]), rows = n / (L ? L : 1);
  if (n == 0) return APX_STATUS_OK;
  cudaStream_t s = apx_cu_stream(ctx);
  if (ins[0].dtype == dt && ins[1].dtype == dt) {
    APX_CU_FLOAT_SWITCH(ctx, dt, T, {
      TypedGrad<T> g = {(const T *)ins[0].data, (const T *)ins[1].data, (T *)outs[0].data};
      launch_softmax_grad_rows<SM_SOFTMAX>(ctx, g, rows, L, a->scale, s);
    });
  } else { /* dX rounded to another type than dY / Y (fuse_casts) */
    DynGrad g = {ins[0].data, ins[1].data, outs[0].data, (int32_t)ins[0].dtype, (int32_t)ins[1].dtype,
                 (int32_t)dt};
    launch_softmax_grad_rows<SM_SOFTMAX>(ctx, g, rows, L, a->scale, s);
  }
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}
