// test_util.cc - see test_util.h.
#include "kernels/cpu/test_util.h"

#include <cmath>
#include <cstring>
#include <random>

namespace apxtest {

const ApxDType kFloatTypes[4] = {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_BF16};

int64_t numel_of(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> strides_of(const std::vector<int64_t> &dims) {
  std::vector<int64_t> s(dims.size());
  int64_t k = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = k;
    k *= dims[i];
  }
  return s;
}

int64_t broadcast_index(const std::vector<int64_t> &out, const std::vector<int64_t> &in,
                        int64_t i) {
  std::vector<int64_t> is = strides_of(in);
  int64_t off = 0;
  size_t lead = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    int64_t id = i % out[d];
    i /= out[d];
    if (d >= lead && in[d - lead] != 1) off += id * is[d - lead];
  }
  return off;
}

Tensor::Tensor(ApxDType t, std::vector<int64_t> d) : dt(t), dims(std::move(d)) {
  bytes.assign((size_t)numel() * apx_dtype_size(dt) + 1, 0);
}

int64_t Tensor::numel() const { return numel_of(dims); }

ApxTensor Tensor::view() const {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = const_cast<uint8_t *>(bytes.data());
  t.dtype = dt;
  t.rank = (int32_t)dims.size();
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

double Tensor::get(int64_t i) const {
  double v = 0;
  apx_cpu_convert(bytes.data() + (size_t)i * apx_dtype_size(dt), dt, &v, APX_DT_F64, 1);
  return v;
}

void Tensor::set(int64_t i, double v) {
  apx_cpu_convert(&v, APX_DT_F64, bytes.data() + (size_t)i * apx_dtype_size(dt), dt, 1);
}

std::vector<double> Tensor::values() const {
  std::vector<double> v((size_t)numel());
  apx_cpu_convert(bytes.data(), dt, v.data(), APX_DT_F64, numel());
  return v;
}

Tensor make(ApxDType t, std::vector<int64_t> dims, const std::vector<double> &values) {
  Tensor x(t, std::move(dims));
  EXPECT_EQ((int64_t)values.size(), x.numel());
  apx_cpu_convert(values.data(), APX_DT_F64, x.bytes.data(), t, x.numel());
  return x;
}

Tensor rand(ApxDType t, std::vector<int64_t> dims, double lo, double hi, uint64_t seed) {
  Tensor x(t, std::move(dims));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v((size_t)x.numel());
  for (auto &e : v) {
    e = u(g);
    if (!apx_dtype_is_float(t)) e = std::floor(e);
  }
  apx_cpu_convert(v.data(), APX_DT_F64, x.bytes.data(), t, x.numel());
  return x;
}

Tensor cast(const Tensor &x, ApxDType t) {
  Tensor y(t, x.dims);
  apx_cpu_convert(x.bytes.data(), x.dt, y.bytes.data(), t, x.numel());
  return y;
}

ApxStatus run(ApxOp op, const void *attrs, const std::vector<const Tensor *> &ins,
              const std::vector<Tensor *> &outs, std::string *err, RunOpts o) {
  std::vector<ApxTensor> ti(ins.size() + 1), to(outs.size() + 1);
  for (size_t i = 0; i < ins.size(); i++) {
    if (ins[i]) ti[i] = ins[i]->view();
    else memset(&ti[i], 0, sizeof ti[i]);
  }
  for (size_t i = 0; i < outs.size(); i++) {
    if (outs[i]) to[i] = outs[i]->view();
    else memset(&to[i], 0, sizeof to[i]);
  }
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  ctx.n_threads = o.threads;
  ctx.seed = o.seed;
  ctx.step = o.step;
  ApxStatus st = apx_cpu_run(&ctx, op, attrs, ti.data(), (int)ins.size(), to.data(),
                             (int)outs.size());
  if (err) *err = ctx.err;
  return st;
}

void run_ok(ApxOp op, const void *attrs, const std::vector<const Tensor *> &ins,
            const std::vector<Tensor *> &outs, RunOpts o) {
  std::string err;
  ApxStatus st = run(op, attrs, ins, outs, &err, o);
  ASSERT_EQ(st, APX_STATUS_OK) << apx_op_name(op) << ": " << err;
}

double eps_of(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return std::ldexp(1.0, -10);
    case APX_DT_BF16: return std::ldexp(1.0, -7);
    case APX_DT_F32: return std::ldexp(1.0, -23);
    case APX_DT_F64: return std::ldexp(1.0, -52);
    default: return 0;
  }
}

double tiny_of(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return std::ldexp(1.0, -24);
    case APX_DT_BF16: return std::ldexp(1.0, -133);
    case APX_DT_F32: return std::ldexp(1.0, -149);
    case APX_DT_F64: return std::ldexp(1.0, -1074);
    default: return 0;
  }
}

double math_eps_of(ApxDType t) { return t == APX_DT_F64 ? eps_of(APX_DT_F64) : eps_of(APX_DT_F32); }

double tol(ApxDType dt, double ref, double scale, double c) {
  return eps_of(dt) * std::fabs(ref) + c * math_eps_of(dt) * scale + tiny_of(dt);
}

void expect_close(const Tensor &got, const std::vector<double> &ref, double c,
                  const std::vector<double> *scale, const char *what) {
  ASSERT_EQ((int64_t)ref.size(), got.numel()) << what;
  std::vector<double> g = got.values();
  int bad = 0;
  for (size_t i = 0; i < ref.size() && bad < 5; i++) {
    double r = ref[i], v = g[i];
    if (std::isnan(r) || std::isinf(r)) {
      bool same = std::isnan(r) ? std::isnan(v) : v == r;
      if (!same) {
        ADD_FAILURE() << what << " [" << apx_dtype_short(got.dt) << "] element " << i << ": got "
                      << v << ", want " << r;
        bad++;
      }
      continue;
    }
    double s = scale ? (*scale)[i] : std::fabs(r);
    double t = tol(got.dt, r, s, c);
    if (!(std::fabs(v - r) <= t)) {
      ADD_FAILURE() << what << " [" << apx_dtype_short(got.dt) << "] element " << i << ": got "
                    << v << ", want " << r << " (|diff| " << std::fabs(v - r) << " > tol " << t
                    << ")";
      bad++;
    }
  }
}

void expect_same_bits(const Tensor &a, const Tensor &b, const char *what) {
  ASSERT_EQ(a.dt, b.dt) << what;
  ASSERT_EQ(a.dims, b.dims) << what;
  size_t n = (size_t)a.numel() * apx_dtype_size(a.dt);
  EXPECT_EQ(0, memcmp(a.bytes.data(), b.bytes.data(), n)) << what << ": results differ";
}

}  // namespace apxtest
