/* dropout.c - Dropout(data, ratio?, training_mode?) -> output, mask? and
 * DropoutGrad(dY, mask) -> dX. ratio and training_mode come from attrs (static inputs).
 * Training mode: keep element i when its Philox uniform is >= ratio (kernels/philox.h;
 * key: attrs->seed when attrs->has_seed, else ctx->seed; counter: ctx->step,
 * attrs->rng_stream, i), output = x / (1 - ratio) where kept, else 0. Inference mode:
 * identity with an all-true mask. RandomUniformLike draws its uniforms from the same stream
 * (philox.h). */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/philox.h"

#define APX_REAL_F64 0
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/dropout_real.inc"
#include "kernels/cpu/real_end.h"
#define APX_REAL_F64 1
#include "kernels/cpu/real_begin.h"
#include "kernels/cpu/dropout_real.inc"
#include "kernels/cpu/real_end.h"

APX_CPU_KERNEL(apx_cpu_dropout) {
  const ApxAttrDropout *a = attrs;
  int64_t n = apx_tensor_numel(&ins[0]);
  ApxDType dt = ins[0].dtype;
  uint8_t *mask = apx_cpu_has(outs, n_out, 1) ? outs[1].data : NULL;
  int nt = apx_cpu_threads(ctx);
  if (!a->training_mode) {
    if (outs[0].data != ins[0].data)
      memmove(outs[0].data, ins[0].data, (size_t)n * apx_dtype_size(dt));
    if (mask) memset(mask, 1, (size_t)n);
    return APX_STATUS_OK;
  }
  uint64_t seed = a->has_seed ? (uint64_t)a->seed : ctx->seed;
  if (dt == APX_DT_F64)
    dropout_f64(ins[0].data, outs[0].data, mask, n, a->ratio, seed, (uint64_t)a->rng_stream,
                ctx->step, nt);
  else
    dropout_f32(ins[0].data, outs[0].data, mask, n, a->ratio, seed, (uint64_t)a->rng_stream,
                ctx->step, nt);
  return APX_STATUS_OK;
}

APX_CPU_KERNEL(apx_cpu_dropout_grad) {
  const ApxAttrDropout *a = attrs;
  int64_t n = apx_tensor_numel(&ins[0]);
  /* inference mode: the forward was the identity */
  double scale = !a->training_mode ? 1.0 : a->ratio < 1.0f ? 1.0 / (1.0 - (double)a->ratio) : 0.0;
  int nt = apx_cpu_threads(ctx);
  if (outs[0].dtype == APX_DT_F64)
    dropout_grad_f64(ins[0].data, ins[1].data, outs[0].data, n, scale, nt);
  else
    dropout_grad_f32(ins[0].data, ins[1].data, outs[0].data, n,
                     a->training_mode && a->ratio < 1.0f ? 1.0f / (1.0f - a->ratio) : (float)scale,
                     nt);
  return APX_STATUS_OK;
}

/* RandomUniformLike(input) -> output (raw: the input is never read; attrs.h): element i =
 * apx_random_uniform (philox.h) in fp32, rounded once to fp16 / bf16, or in fp64. */
APX_CPU_KERNEL(apx_cpu_random_uniform_like) {
  const ApxAttrRandomUniform *a = attrs;
  ApxTensor *y = &outs[0];
  int64_t n = apx_tensor_numel(y); /* the input's element count: kernels/validate.c */
  uint64_t key = apx_random_key(a->has_seed, a->seed, ctx->seed), st = (uint64_t)a->rng_stream;
  int64_t step = ctx->step;
  int nt = apx_cpu_threads(ctx);
  switch (y->dtype) {
    case APX_DT_F64: {
      double *p = y->data;
      APX_OMP_FOR(n > APX_CPU_PAR_WORK / 8)
      for (int64_t i = 0; i < n; i++) p[i] = apx_random_uniform_f64(key, st, step, (uint64_t)i, a->low, a->high);
      break;
    }
    case APX_DT_F32: case APX_DT_F16: case APX_DT_BF16: {
      ApxDType dt = y->dtype;
      APX_OMP_FOR(n > APX_CPU_PAR_WORK / 8)
      for (int64_t i = 0; i < n; i++) {
        float v = apx_random_uniform_f32(key, st, step, (uint64_t)i, a->low, a->high);
        if (dt == APX_DT_F32)
          ((float *)y->data)[i] = v;
        else
          ((uint16_t *)y->data)[i] = dt == APX_DT_F16 ? apx_f32_to_f16(v) : apx_f32_to_bf16(v);
      }
      break;
    }
    default:
      return apx_cpu_fail(ctx, APX_STATUS_UNSUPPORTED, "not supported yet: type %s (a float type is required)",
                          apx_dtype_name(y->dtype));
  }
  return APX_STATUS_OK;
}
