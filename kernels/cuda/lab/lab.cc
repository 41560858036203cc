// lab.cc - the kernel lab harness (lab.h).
#include "kernels/cuda/lab/lab.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace lab {

namespace {

constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0xA5;
const int kBlocks[] = {0, 32, 64, 128, 256, 512, 1024};

double Eps(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return 9.765625e-4;
    case APX_DT_BF16: return 7.8125e-3;
    case APX_DT_F64: return 2.220446049250313e-16;
    default: return 1.1920928955078125e-7;
  }
}

ApxCudaCtx *Ctx() {
  static ApxCudaCtx ctx;
  static bool ready = false;
  if (!ready) {
    ApxStatus st = apx_cuda_ctx_init(&ctx, 0, nullptr);
    if (st != APX_STATUS_OK) {
      fprintf(stderr, "lab: apx_cuda_ctx_init: %s\n", ctx.err);
      abort();
    }
    ready = true;
  }
  return &ctx;
}

void Fill(LabTensor &t, std::mt19937 &rng) {
  int64_t n = t.Numel();
  t.host.assign(t.Bytes(), 0);
  if (t.absent) return;
  if (t.dtype == APX_DT_BOOL) {
    for (int64_t i = 0; i < n; i++) t.host[i] = (uint8_t)(rng() & 1u);
    return;
  }
  if (apx_dtype_is_float(t.dtype)) {
    std::vector<double> v(n);
    std::uniform_real_distribution<double> u(t.init == Init::kPositive ? 0.1 : t.lo, t.hi);
    for (auto &x : v) x = t.init == Init::kConst ? t.lo : t.init == Init::kZero ? 0.0 : u(rng);
    if (t.init == Init::kSmallInts)
      for (auto &x : v) x = (double)((int64_t)(rng() % (uint32_t)(2 * t.param)) - t.param);
    if (t.init == Init::kWithNaN)
      for (int64_t i = 0; i < n; i += 97) v[i] = NAN;
    apx_cpu_convert(v.data(), APX_DT_F64, t.host.data(), t.dtype, n);
    return;
  }
  std::vector<int64_t> v(n);
  for (auto &x : v) {
    switch (t.init) {
      case Init::kLabels: x = (int64_t)(rng() % (uint32_t)t.param); break;
      case Init::kIndices: case Init::kSmallInts: x = (int64_t)(rng() % (uint32_t)(2 * t.param)) - t.param; break;
      case Init::kConst: x = (int64_t)t.lo; break;
      default: x = 0; break;
    }
  }
  apx_cpu_convert(v.data(), APX_DT_I64, t.host.data(), t.dtype, n);
}

ApxTensor View(const LabTensor &t, void *data) {
  ApxTensor v;
  memset(&v, 0, sizeof v);
  v.data = t.absent ? nullptr : data;
  v.dtype = t.dtype;
  v.rank = (int32_t)t.dims.size();
  for (size_t i = 0; i < t.dims.size(); i++) v.dims[i] = t.dims[i];
  return v;
}

struct Buffers {
  std::vector<std::vector<uint8_t>> in, out;  // host results
};

// The CPU reference on host copies.
bool RunCpu(const LabCase &c, Buffers *b, std::string *err) {
  b->in.clear();
  b->out.clear();
  for (auto &t : c.ins) b->in.push_back(t.host);
  for (auto &t : c.outs) b->out.push_back(std::vector<uint8_t>(t.Bytes() + 1, 0));
  std::vector<ApxTensor> ins, outs;
  for (size_t i = 0; i < c.ins.size(); i++) ins.push_back(View(c.ins[i], b->in[i].data()));
  for (size_t i = 0; i < c.outs.size(); i++) outs.push_back(View(c.outs[i], b->out[i].data()));
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  ctx.n_threads = 1;
  ctx.seed = c.seed;
  ctx.step = c.step;
  ApxStatus st = apx_cpu_run(&ctx, c.op, c.attrs.empty() ? nullptr : c.attrs.data(), ins.data(),
                             (int)ins.size(), outs.data(), (int)outs.size());
  if (st != APX_STATUS_OK) *err = ctx.err;
  return st == APX_STATUS_OK;
}

struct DevTensor {
  uint8_t *base = nullptr;  // guard | data | guard
  size_t bytes = 0;
};

#define LAB_CUDA(call)                                                                    \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      *err = std::string(#call) + ": " + cudaGetErrorString(e_);                          \
      return false;                                                                       \
    }                                                                                     \
  } while (0)

bool Upload(const LabTensor &t, bool output, DevTensor *d, std::string *err) {
  d->bytes = t.Bytes();
  LAB_CUDA(cudaMalloc((void **)&d->base, d->bytes + 2 * kGuard));
  LAB_CUDA(cudaMemset(d->base, kGuardByte, kGuard));
  LAB_CUDA(cudaMemset(d->base + kGuard + d->bytes, kGuardByte, kGuard));
  if (output)
    LAB_CUDA(cudaMemset(d->base + kGuard, 0xFF, d->bytes));
  else if (d->bytes)
    LAB_CUDA(cudaMemcpy(d->base + kGuard, t.host.data(), d->bytes, cudaMemcpyHostToDevice));
  return true;
}

bool Download(const DevTensor &d, std::vector<uint8_t> *out, bool *guards_ok, std::string *err) {
  std::vector<uint8_t> all(d.bytes + 2 * kGuard);
  LAB_CUDA(cudaMemcpy(all.data(), d.base, all.size(), cudaMemcpyDeviceToHost));
  *guards_ok = true;
  for (size_t i = 0; i < kGuard; i++)
    if (all[i] != kGuardByte || all[kGuard + d.bytes + i] != kGuardByte) *guards_ok = false;
  out->assign(all.begin() + kGuard, all.begin() + kGuard + d.bytes);
  out->push_back(0);
  return true;
}

// One CUDA run at block size `block`; results in b.
bool RunCuda(const LabCase &c, int block, Buffers *b, std::string *err) {
  std::vector<DevTensor> din(c.ins.size()), dout(c.outs.size());
  bool ok = true;
  for (size_t i = 0; ok && i < c.ins.size(); i++) ok = Upload(c.ins[i], false, &din[i], err);
  for (size_t i = 0; ok && i < c.outs.size(); i++) ok = Upload(c.outs[i], true, &dout[i], err);
  std::vector<ApxTensor> ins, outs;
  for (size_t i = 0; i < c.ins.size(); i++) ins.push_back(View(c.ins[i], din[i].base + kGuard));
  for (size_t i = 0; i < c.outs.size(); i++) outs.push_back(View(c.outs[i], dout[i].base + kGuard));
  ApxCudaCtx *ctx = Ctx();
  ctx->block = block;
  ctx->seed = c.seed;
  ctx->step = c.step;
  ctx->no_epilogue = c.no_epilogue;
  if (ok) {
    ApxStatus st = apx_cuda_run(ctx, c.op, c.attrs.empty() ? nullptr : c.attrs.data(), ins.data(),
                                (int)ins.size(), outs.data(), (int)outs.size());
    if (st != APX_STATUS_OK) {
      *err = std::string("apx_cuda_run: ") + ctx->err;
      ok = false;
    }
  }
  if (ok) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      *err = std::string("kernel: ") + cudaGetErrorString(e);
      ok = false;
    }
  }
  if (ok && apx_cuda_dev_error(ctx, nullptr) != APX_STATUS_OK) {
    *err = std::string("device error: ") + ctx->err;
    ok = false;
  }
  b->in.assign(c.ins.size(), {});
  b->out.assign(c.outs.size(), {});
  for (size_t i = 0; ok && i < c.outs.size(); i++) {
    bool g = true;
    ok = Download(dout[i], &b->out[i], &g, err);
    if (ok && !g) {
      *err = "output " + std::to_string(i) + ": a guard band was overwritten";
      ok = false;
    }
  }
  for (size_t i = 0; ok && i < c.ins.size(); i++) {
    bool g = true;
    ok = Download(din[i], &b->in[i], &g, err);
    if (ok && !g) {
      *err = "input " + std::to_string(i) + ": a guard band was overwritten";
      ok = false;
    }
  }
  for (auto &d : din) cudaFree(d.base);
  for (auto &d : dout) cudaFree(d.base);
  ctx->block = 0;
  ctx->no_epilogue = 0;
  return ok;
}

// Normalized error of two host buffers of type t (floats), or mismatch count (others).
double Compare(const LabTensor &t, const std::vector<uint8_t> &cuda, const std::vector<uint8_t> &cpu,
               bool *exact_mismatch) {
  int64_t n = t.Numel();
  *exact_mismatch = false;
  if (!apx_dtype_is_float(t.dtype)) {
    *exact_mismatch = memcmp(cuda.data(), cpu.data(), t.Bytes()) != 0;
    return *exact_mismatch ? 1.0 : 0.0;
  }
  std::vector<double> a(n), b(n);
  apx_cpu_convert(cuda.data(), t.dtype, a.data(), APX_DT_F64, n);
  apx_cpu_convert(cpu.data(), t.dtype, b.data(), APX_DT_F64, n);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    if (std::isnan(a[i]) || std::isnan(b[i]) || std::isinf(a[i]) || std::isinf(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num) / std::sqrt(den);
}

void Prepare(LabCase &c) {
  std::mt19937 rng(c.rng_seed);
  for (auto &t : c.ins) Fill(t, rng);
}

}  // namespace

int64_t LabTensor::Numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

size_t LabTensor::Bytes() const { return (size_t)Numel() * apx_dtype_size(dtype); }

LabCase &LabCase::In(ApxDType dt, std::vector<int64_t> dims, Init init, double lo, double hi,
                     int64_t param) {
  LabTensor t;
  t.dtype = dt;
  t.dims = std::move(dims);
  t.init = init;
  t.lo = lo;
  t.hi = hi;
  t.param = param;
  ins.push_back(t);
  return *this;
}

LabCase &LabCase::Out(ApxDType dt, std::vector<int64_t> dims) {
  LabTensor t;
  t.dtype = dt;
  t.dims = std::move(dims);
  outs.push_back(t);
  return *this;
}

LabCase &LabCase::Absent(bool output) {
  LabTensor t;
  t.absent = true;
  t.dims = {0};
  (output ? outs : ins).push_back(t);
  return *this;
}

bool HaveGpu(std::string *why) {
  char buf[256] = "";
  int n = apx_cuda_device_count(buf, sizeof buf);
  *why = buf;
  return n > 0;
}

std::string Short(ApxDType dt) { return apx_dtype_short(dt); }

const std::vector<ApxDType> &FloatTypes() {
  static const std::vector<ApxDType> t = {APX_DT_F32, APX_DT_F16, APX_DT_BF16};
  return t;
}

void ExpectMatchesCpu(LabCase c) {
  Prepare(c);
  Buffers ref;
  std::string err;
  ASSERT_TRUE(RunCpu(c, &ref, &err)) << c.name << ": cpu: " << err;
  double worst = 0, worst_tol = 0;
  for (int block : kBlocks) {
    Buffers got;
    ASSERT_TRUE(RunCuda(c, block, &got, &err)) << c.name << " block " << block << ": " << err;
    for (size_t i = 0; i < c.outs.size(); i++) {
      if (c.outs[i].absent) continue;
      bool mismatch = false;
      double e = Compare(c.outs[i], got.out[i], ref.out[i], &mismatch);
      double tol = 2 * Eps(c.outs[i].dtype) + 4 * Eps(APX_DT_F32) * std::sqrt(c.K);
      EXPECT_FALSE(mismatch) << c.name << " block " << block << ": output " << i << " differs";
      EXPECT_LE(e, tol) << c.name << " block " << block << ": output " << i << " normalized error";
      if (e > worst) worst = e;
      worst_tol = tol;
    }
    for (size_t i = 0; c.compare_inputs && i < c.ins.size(); i++) {
      if (c.ins[i].absent) continue;
      bool mismatch = false;
      double e = Compare(c.ins[i], got.in[i], ref.in[i], &mismatch);
      double tol = 2 * Eps(c.ins[i].dtype) + 4 * Eps(APX_DT_F32) * std::sqrt(c.K);
      EXPECT_FALSE(mismatch) << c.name << " block " << block << ": updated input " << i << " differs";
      EXPECT_LE(e, tol) << c.name << " block " << block << ": updated input " << i;
      if (e > worst) worst = e;
    }
  }
  printf("lab %-40s max normalized error %.3g (tolerance %.3g)\n", c.name.c_str(), worst, worst_tol);
}

void ExpectHostChecksPass(LabCase c) {
  Prepare(c);
  Buffers ref;
  std::string err;
  ASSERT_TRUE(RunCpu(c, &ref, &err)) << c.name << ": cpu: " << err;
  // fake device addresses: never dereferenced, the first CUDA call fails without a driver
  std::vector<ApxTensor> ins, outs;
  uintptr_t fake = 0x7f0000000000ull;
  for (auto &t : c.ins) ins.push_back(View(t, (void *)(fake += 1 << 30)));
  for (auto &t : c.outs) outs.push_back(View(t, (void *)(fake += 1 << 30)));
  ApxCudaCtx ctx;
  memset(&ctx, 0, sizeof ctx);
  ApxStatus st = apx_cuda_run(&ctx, c.op, c.attrs.empty() ? nullptr : c.attrs.data(), ins.data(),
                              (int)ins.size(), outs.data(), (int)outs.size());
  EXPECT_TRUE(st == APX_STATUS_RUNTIME || st == APX_STATUS_OOM)
      << c.name << ": host checks refused the case: " << apx_status_name(st) << ": " << ctx.err;
}

bool BenchEnabled() {
  const char *e = getenv("APEXC_LAB_BENCH");
  return e && *e && strcmp(e, "0") != 0;
}

void Bench(LabCase c) {
  if (!BenchEnabled()) return;
  Prepare(c);
  std::string err;
  std::vector<DevTensor> din(c.ins.size()), dout(c.outs.size());
  size_t bytes = 0;
  for (size_t i = 0; i < c.ins.size(); i++) {
    ASSERT_TRUE(Upload(c.ins[i], false, &din[i], &err)) << err;
    bytes += c.ins[i].Bytes();
  }
  for (size_t i = 0; i < c.outs.size(); i++) {
    ASSERT_TRUE(Upload(c.outs[i], true, &dout[i], &err)) << err;
    bytes += c.outs[i].Bytes();
  }
  std::vector<ApxTensor> ins, outs;
  for (size_t i = 0; i < c.ins.size(); i++) ins.push_back(View(c.ins[i], din[i].base + kGuard));
  for (size_t i = 0; i < c.outs.size(); i++) outs.push_back(View(c.outs[i], dout[i].base + kGuard));
  ApxCudaCtx *ctx = Ctx();
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  const void *attrs = c.attrs.empty() ? nullptr : c.attrs.data();
  for (int block : kBlocks) {
    ctx->block = block;
    ctx->no_epilogue = c.no_epilogue;
    for (int w = 0; w < 3; w++)
      ASSERT_EQ(apx_cuda_run(ctx, c.op, attrs, ins.data(), (int)ins.size(), outs.data(), (int)outs.size()),
                APX_STATUS_OK) << ctx->err;
    const int iters = 20;
    std::vector<float> ms;
    for (int r = 0; r < 5; r++) {
      cudaEventRecord(t0, nullptr);
      for (int k = 0; k < iters; k++)
        apx_cuda_run(ctx, c.op, attrs, ins.data(), (int)ins.size(), outs.data(), (int)outs.size());
      cudaEventRecord(t1, nullptr);
      cudaEventSynchronize(t1);
      float m = 0;
      cudaEventElapsedTime(&m, t0, t1);
      ms.push_back(m / iters);
    }
    std::sort(ms.begin(), ms.end());
    double us = ms[ms.size() / 2] * 1e3;
    printf("bench %-40s block=%-4d %10.2f us %9.1f GB/s\n", c.name.c_str(), block, us,
           (double)bytes / (us * 1e-6) / 1e9);
  }
  ctx->block = 0;
  ctx->no_epilogue = 0;
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  for (auto &d : din) cudaFree(d.base);
  for (auto &d : dout) cudaFree(d.base);
}

}  // namespace lab
