// test_util.h - helpers for the CPU kernel tests: owned tensors of any dtype, running an op,
// naive references in double, and tolerances derived from the dtypes' epsilons.
//
// Tolerance model (used by every test that is not bit-exact): a kernel computes in its math
// type (fp32 for fp16/bf16/fp32 tensors, fp64 for fp64) and rounds its outputs once. The
// reference is computed in double from the stored (already rounded) inputs. So
//   |got - ref| <= eps(dt) * |ref|          output rounding (half an ulp is <= eps/2 |ref|)
//               +  c * eps(math) * scale    math-type error: c and scale come from the op's
//                                           error analysis (e.g. a K-term dot product: c = K,
//                                           scale = sum |a_i b_i|; a libm call: c of a few)
//               +  tiny(dt)                 the smallest subnormal step of dt
// eps(dt): fp16 2^-10, bf16 2^-7, fp32 2^-23, fp64 2^-52.
#ifndef APX_CPU_TEST_UTIL_H
#define APX_CPU_TEST_UTIL_H

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
}

namespace apxtest {

// An owned tensor. Values are set and read as double; stores round (RNE) to the dtype.
struct Tensor {
  ApxDType dt = APX_DT_F32;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;

  Tensor() = default;
  Tensor(ApxDType t, std::vector<int64_t> d);  // zero-filled
  int64_t numel() const;
  ApxTensor view() const;
  double get(int64_t i) const;
  void set(int64_t i, double v);
  std::vector<double> values() const;
  template <typename T>
  T *as() { return reinterpret_cast<T *>(bytes.data()); }
  template <typename T>
  const T *as() const { return reinterpret_cast<const T *>(bytes.data()); }
};

Tensor make(ApxDType t, std::vector<int64_t> dims, const std::vector<double> &values);
// Uniform values in [lo, hi), rounded to the dtype (integers: floor), from a fixed seed.
Tensor rand(ApxDType t, std::vector<int64_t> dims, double lo, double hi, uint64_t seed);
Tensor cast(const Tensor &x, ApxDType t);
// Row-major strides / unravel helpers for references.
std::vector<int64_t> strides_of(const std::vector<int64_t> &dims);
int64_t numel_of(const std::vector<int64_t> &dims);
// Flat index into a tensor of dims `in` of output element i (dims `out`) under numpy
// broadcasting (right-aligned; size-1 dims repeat).
int64_t broadcast_index(const std::vector<int64_t> &out, const std::vector<int64_t> &in,
                        int64_t i);

// Runs op; absent inputs/outputs are nullptr. Returns the status; *err gets ctx.err.
struct RunOpts {
  int threads = 1;
  uint64_t seed = 0;
  int64_t step = 0;
};
ApxStatus run(ApxOp op, const void *attrs, const std::vector<const Tensor *> &ins,
              const std::vector<Tensor *> &outs, std::string *err = nullptr,
              RunOpts o = RunOpts());
// Same, expecting OK (fails the test with the error text otherwise).
void run_ok(ApxOp op, const void *attrs, const std::vector<const Tensor *> &ins,
            const std::vector<Tensor *> &outs, RunOpts o = RunOpts());

double eps_of(ApxDType t);
double tiny_of(ApxDType t);
// Math type epsilon for tensors of dtype t (fp32 for halves).
double math_eps_of(ApxDType t);
// The bound above.
double tol(ApxDType dt, double ref, double scale, double c);

// Expects |got[i] - ref[i]| <= tol(got.dt, ref[i], scale[i] (or |ref[i]|), c) for all i;
// NaN and inf must match exactly. Reports the first few failures.
void expect_close(const Tensor &got, const std::vector<double> &ref, double c,
                  const std::vector<double> *scale = nullptr, const char *what = "");
// Bit-identical outputs.
void expect_same_bits(const Tensor &a, const Tensor &b, const char *what = "");

// The float dtypes every float op is tested with.
extern const ApxDType kFloatTypes[4];

}  // namespace apxtest

#endif
