/* elementwise.cu - unary ops (Neg, Relu and every op of kind EW_UNARY in ops.def), their
 * gradients XGrad(dY, T) -> dX (kind EW_UNARY_GRAD), binary ops with numpy broadcasting (Add Sub Mul Div Pow),
 * the variadic Sum, and PowGrad(dY, A, B) -> dA?, dB? (summed down to A's / B's shapes).
 * fp32 / fp16 / bf16 tensors, math in fp32 with the formulas of kernels/ew_math.h (the CPU
 * reference compiles the same functions), one RNE rounding on store. */
#include "kernels/cuda/bcast.cuh"
#include "kernels/cuda/common.cuh"

/* ---- per-element formulas --------------------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW };

/* Ew<OP>: the formula of each unary op and unary gradient op, with its typed attributes A
 * passed by value to the kernel. Every op of kind EW_UNARY / EW_UNARY_GRAD (ops.def) gets
 * its specialization from the table, calling apx_ew_<ID>_f32 (ew_math.inc); Neg and Relu
 * (kind OWN: integer inference) are written here. */
template <int OP> struct Ew;
template <> struct Ew<APX_OP_Neg> {
  typedef ApxAttrNone A;
  static __device__ __forceinline__ float f(float v, const A &) { return -v; }
};
template <> struct Ew<APX_OP_Relu> {
  typedef ApxAttrNone A;
  static __device__ __forceinline__ float f(float v, const A &) { return apx_relu_f32(v); }
};
#define IO(a, b, c, d)
#define APX_KIND_OWN(ID, ATTRS)
#define APX_KIND_EW_UNARY(ID, ATTRS)                                              \
  template <> struct Ew<APX_OP_##ID> {                                            \
    typedef ATTRS A;                                                              \
    static __device__ __forceinline__ float f(float v, const A &a) {              \
      return apx_ew_##ID##_f32(v, &a);                                            \
    }                                                                             \
  };
#define APX_KIND_EW_UNARY_GRAD(ID, ATTRS)                                         \
  template <> struct Ew<APX_OP_##ID> {                                            \
    typedef ATTRS A;                                                              \
    static __device__ __forceinline__ float f(float g, float v, const A &a) {     \
      return apx_ew_##ID##_f32(g, v, &a);                                         \
    }                                                                             \
  };
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) APX_KIND_##KIND(ID, ATTRS)
#include "kernels/ops.def"
#undef APX_OP
#undef APX_KIND_EW_UNARY_GRAD
#undef APX_KIND_EW_UNARY
#undef APX_KIND_OWN
#undef IO

template <int OP>
static __device__ __forceinline__ float binary_f(float x, float y) {
  if constexpr (OP == B_ADD) return x + y;
  if constexpr (OP == B_SUB) return x - y;
  if constexpr (OP == B_MUL) return x * y;
  if constexpr (OP == B_DIV) return x / y;
  if constexpr (OP == B_POW) return powf(x, y);
  return x;
}


/* ---- kernels ---------------------------------------------------------------------------- */

template <int OP, typename T>
APX_CU_KERNEL(unary_kernel)(const T *x, T *y, int64_t n, typename Ew<OP>::A a) {
  APX_CU_GRID_STRIDE(i, n) y[i] = st<T>(Ew<OP>::f(ld(x[i]), a));
}

template <int OP, typename T>
APX_CU_KERNEL(unary_grad_kernel)(const T *dy, const T *t, T *dx, int64_t n, typename Ew<OP>::A a) {
  APX_CU_GRID_STRIDE(i, n) dx[i] = st<T>(Ew<OP>::f(ld(dy[i]), ld(t[i]), a));
}

/* CONTIG: both inputs have the output's layout (no index arithmetic). */
template <int OP, typename T, bool CONTIG>
APX_CU_KERNEL(binary_kernel)(const T *a, const T *b, T *o, int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t ia = i, ib = i;
    if (!CONTIG) bcast_off(g, i, &ia, &ib, NULL);
    o[i] = st<T>(binary_f<OP>(ld(a[ia]), ld(b[ib])));
  }
}

/* Pow with a float base and an integer exponent: the exponent converted to fp32 first (as the
 * CPU converts it to the base's math type), o = powf(a, e). */
template <typename T>
APX_CU_KERNEL(pow_mixed_kernel)(const T *a, const float *e, T *o, int64_t n, BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t ia, ie;
    bcast_off(g, i, &ia, &ie, NULL);
    o[i] = st<T>(powf(ld(a[ia]), e[ie]));
  }
}

/* Pow gradients at dY's full shape into fp32 buffers (either may be NULL):
 * da = dy * b * a^(b-1) (0 where b == 0), db = dy * a^b * ln(a) (0 where a == 0, b >= 0). */
template <typename T>
APX_CU_KERNEL(pow_grad_kernel)(const T *dy, const T *a, const T *b, float *da, float *db, int64_t n,
                                BcastArgs g) {
  APX_CU_GRID_STRIDE(i, n) {
    int64_t i0, ia, ib;
    bcast_off(g, i, &i0, &ia, &ib);
    float gv = ld(dy[i0]), x = ld(a[ia]), e = ld(b[ib]);
    if (da) da[i] = e == 0.0f ? 0.0f : gv * e * powf(x, e - 1.0f);
    if (db) db[i] = (x == 0.0f && e >= 0.0f) ? 0.0f : gv * powf(x, e) * logf(x);
  }
}

/* ---- launchers -------------------------------------------------------------------------- */

/* The typed attributes of the launch (zeros when the plan holds none). */
template <int OP>
static typename Ew<OP>::A attrs_of(const void *attrs) {
  typename Ew<OP>::A a;
  memset(&a, 0, sizeof a);
  if (attrs) memcpy(&a, attrs, sizeof a);
  return a;
}

template <int OP, typename T>
static void launch_unary(const T *x, T *y, int64_t n, const void *attrs, cudaStream_t s, int block,
                         unsigned grid) {
  unary_kernel<OP, T><<<grid, block, 0, s>>>(x, y, n, attrs_of<OP>(attrs));
}

template <int OP, typename T>
static void launch_unary_grad(const T *dy, const T *t, T *dx, int64_t n, const void *attrs,
                              cudaStream_t s, int block, unsigned grid) {
  unary_grad_kernel<OP, T><<<grid, block, 0, s>>>(dy, t, dx, n, attrs_of<OP>(attrs));
}

/* op's kernel over type T: 0, or -1 when op is not a unary (gradient) op. */
template <typename T>
static int launch_unary_op(ApxOp op, const T *x, T *y, int64_t n, const void *attrs,
                           cudaStream_t s, int block, unsigned grid) {
  switch (op) {
    case APX_OP_Neg: launch_unary<APX_OP_Neg, T>(x, y, n, attrs, s, block, grid); return 0;
    case APX_OP_Relu: launch_unary<APX_OP_Relu, T>(x, y, n, attrs, s, block, grid); return 0;
#define IO(a, b, c, d)
#define APX_KIND_OWN(ID)
#define APX_KIND_EW_UNARY_GRAD(ID)
#define APX_KIND_EW_UNARY(ID) \
  case APX_OP_##ID: launch_unary<APX_OP_##ID, T>(x, y, n, attrs, s, block, grid); return 0;
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) APX_KIND_##KIND(ID)
#include "kernels/ops.def"
#undef APX_OP
#undef APX_KIND_EW_UNARY
#undef APX_KIND_EW_UNARY_GRAD
#undef APX_KIND_OWN
#undef IO
    default: return -1;
  }
}

template <typename T>
static int launch_unary_grad_op(ApxOp op, const T *dy, const T *t, T *dx, int64_t n,
                                const void *attrs, cudaStream_t s, int block, unsigned grid) {
  switch (op) {
#define IO(a, b, c, d)
#define APX_KIND_OWN(ID)
#define APX_KIND_EW_UNARY(ID)
#define APX_KIND_EW_UNARY_GRAD(ID)                                               \
  case APX_OP_##ID:                                                              \
    launch_unary_grad<APX_OP_##ID, T>(dy, t, dx, n, attrs, s, block, grid);      \
    return 0;
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS, ARITY, GRAD, KIND) APX_KIND_##KIND(ID)
#include "kernels/ops.def"
#undef APX_OP
#undef APX_KIND_EW_UNARY
#undef APX_KIND_EW_UNARY_GRAD
#undef APX_KIND_OWN
#undef IO
    default: return -1;
  }
}

template <int OP, typename T>
static void launch_binary(const T *a, const T *b, T *o, int64_t n, const BcastArgs &g, int contig,
                          cudaStream_t s, int block, unsigned grid) {
  if (contig)
    binary_kernel<OP, T, true><<<grid, block, 0, s>>>(a, b, o, n, g);
  else
    binary_kernel<OP, T, false><<<grid, block, 0, s>>>(a, b, o, n, g);
}

/* ---- entries ------------------------------------------------------------------------------ */

static ApxStatus check_float(ApxCudaCtx *ctx, ApxDType dt) {
  if (apx_cu_is_float16(dt)) return APX_STATUS_OK;
  return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: type %s",
                       apx_dtype_name(dt));
}

APX_CUDA_ENTRY(apx_cuda_unary) {
  int64_t n = apx_tensor_numel(&ins[0]);
  ApxDType dt = ins[0].dtype;
  if (outs[0].dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: mixed types %s -> %s",
                         apx_dtype_name(dt), apx_dtype_name(outs[0].dtype));
  APX_TRY(check_float(ctx, dt));
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (launch_unary_op<T>(op, (const T *)ins[0].data, (T *)outs[0].data, n, attrs, s, block, grid))
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not a unary op");
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_unary_grad) {
  int64_t n = apx_tensor_numel(&outs[0]);
  ApxDType dt = outs[0].dtype;
  if (ins[0].dtype != dt || ins[1].dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                         "not supported yet on cuda: mixed types %s, %s -> %s",
                         apx_dtype_name(ins[0].dtype), apx_dtype_name(ins[1].dtype),
                         apx_dtype_name(dt));
  APX_TRY(check_float(ctx, dt));
  if (n == 0) return APX_STATUS_OK;
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    if (launch_unary_grad_op<T>(op, (const T *)ins[0].data, (const T *)ins[1].data,
                                (T *)outs[0].data, n, attrs, s, block, grid))
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not a gradient op");
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

static ApxStatus bcast_setup(ApxCudaCtx *ctx, ApxBcast *bc, const ApxTensor *out,
                             const ApxTensor *const *ins, int n) {
  if (apx_bcast_plan(bc, out, ins, n, ctx->err, sizeof ctx->err)) return APX_STATUS_BAD_INPUT;
  return APX_STATUS_OK;
}

/* o = a (op) b, broadcast (op: APX_OP_Add ... APX_OP_Pow); shared by Sum. */
static ApxStatus run_binary(ApxCudaCtx *ctx, ApxOp op, const ApxTensor *a, const ApxTensor *b,
                            ApxTensor *o) {
  const ApxTensor *pair[2] = {a, b};
  ApxBcast bc;
  APX_TRY(bcast_setup(ctx, &bc, o, pair, 2));
  ApxDType dt = o->dtype;
  if (op == APX_OP_Pow && a->dtype == dt && apx_dtype_is_int(b->dtype) && b->dtype != APX_DT_BOOL) {
    APX_TRY(check_float(ctx, dt));
    int64_t nb = apx_tensor_numel(b), n = bc.numel;
    if (n == 0) return APX_STATUS_OK;
    float *e = NULL;
    APX_TRY(apx_cuda_tmp(ctx, (size_t)(nb ? nb : 1) * sizeof(float), (void **)&e));
    APX_TRY(apx_cuda_convert(ctx, b->data, b->dtype, nb, e, APX_DT_F32, nb));
    BcastArgs g = bcast_args(&bc);
    int block = apx_cu_block(ctx, 256);
    APX_CU_FLOAT_SWITCH(ctx, dt, T, {
      pow_mixed_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, apx_cu_stream(ctx)>>>(
          (const T *)a->data, e, (T *)o->data, n, g);
    });
    APX_CUDA_LAUNCHED(ctx);
    return APX_STATUS_OK;
  }
  if (a->dtype != dt || b->dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                         "not supported yet on cuda: types %s, %s -> %s",
                         apx_dtype_name(a->dtype), apx_dtype_name(b->dtype), apx_dtype_name(dt));
  APX_TRY(check_float(ctx, dt));
  int64_t n = bc.numel;
  if (n == 0) return APX_STATUS_OK;
  BcastArgs g = bcast_args(&bc);
  int contig = apx_bcast_is_contig(&bc, 0) && apx_bcast_is_contig(&bc, 1);
  int block = apx_cu_block(ctx, 256);
  unsigned grid = apx_cu_grid(ctx, n, block);
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    const T *pa = (const T *)a->data, *pb = (const T *)b->data;
    T *po = (T *)o->data;
    switch (op) {
      case APX_OP_Add: launch_binary<B_ADD, T>(pa, pb, po, n, g, contig, s, block, grid); break;
      case APX_OP_Sub: launch_binary<B_SUB, T>(pa, pb, po, n, g, contig, s, block, grid); break;
      case APX_OP_Mul: launch_binary<B_MUL, T>(pa, pb, po, n, g, contig, s, block, grid); break;
      case APX_OP_Div: launch_binary<B_DIV, T>(pa, pb, po, n, g, contig, s, block, grid); break;
      case APX_OP_Pow: launch_binary<B_POW, T>(pa, pb, po, n, g, contig, s, block, grid); break;
      default: return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not a binary op");
    }
  });
  APX_CUDA_LAUNCHED(ctx);
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_binary) {
  return run_binary(ctx, op, &ins[0], &ins[1], &outs[0]);
}

/* Sum(X1, ..., Xn) -> ((X1 + X2) + X3) + ... (the CPU's order) */
APX_CUDA_ENTRY(apx_cuda_sum) {
  ApxTensor *o = &outs[0];
  for (int k = 0; k < n_in; k++)
    if (ins[k].dtype != o->dtype)
      return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet on cuda: input %d of type %s with %s",
                           k, apx_dtype_name(ins[k].dtype), apx_dtype_name(o->dtype));
  APX_TRY(check_float(ctx, o->dtype));
  if (n_in == 1) return apx_cuda_broadcast_copy(ctx, &ins[0], o);
  for (int k = 1; k < n_in; k++)
    APX_TRY(run_binary(ctx, APX_OP_Add, k == 1 ? &ins[0] : o, &ins[k], o));
  return APX_STATUS_OK;
}

APX_CUDA_ENTRY(apx_cuda_pow_grad) {
  const ApxTensor *dy = &ins[0];
  ApxDType dt = dy->dtype;
  if (ins[1].dtype != dt || ins[2].dtype != dt)
    return apx_cuda_fail(ctx, APX_STATUS_UNSUPPORTED,
                         "not supported yet on cuda: PowGrad with %s exponent",
                         apx_dtype_name(ins[2].dtype));
  APX_TRY(check_float(ctx, dt));
  const ApxTensor *tri[3] = {dy, &ins[1], &ins[2]};
  ApxBcast bc;
  APX_TRY(bcast_setup(ctx, &bc, dy, tri, 3));
  int64_t n = bc.numel;
  float *full[2] = {NULL, NULL};
  int64_t mask[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    if (!apx_cu_has(outs, n_out, k)) continue;
    if (outs[k].dtype != dt)
      return apx_cuda_fail(ctx, APX_STATUS_BAD_INPUT, "output %d has type %s", k,
                           apx_dtype_name(outs[k].dtype));
    mask[k] = apx_sum_to_mask(dy, &outs[k]);
    APX_TRY(apx_cuda_tmp(ctx, (size_t)n * sizeof(float), (void **)&full[k]));
  }
  if (n == 0) return APX_STATUS_OK;
  BcastArgs g = bcast_args(&bc);
  int block = apx_cu_block(ctx, 256);
  cudaStream_t s = apx_cu_stream(ctx);
  APX_CU_FLOAT_SWITCH(ctx, dt, T, {
    pow_grad_kernel<T><<<apx_cu_grid(ctx, n, block), block, 0, s>>>(
        (const T *)dy->data, (const T *)ins[1].data, (const T *)ins[2].data, full[0], full[1], n, g);
  });
  APX_CUDA_LAUNCHED(ctx);
  for (int k = 0; k < 2; k++) {
    if (!full[k]) continue;
    ApxReducePlan p;
    apx_reduce_plan(&p, dy->dims, dy->rank, (uint32_t)mask[k]);
    APX_TRY(apx_cuda_reduce_sum(ctx, full[k], APX_DT_F32, &p, 1.0f, APX_CU_SUM, outs[k].data, dt));
  }
  return APX_STATUS_OK;
}
