// lab.h - the CUDA kernel lab (STYLE.md 11, llm.c dev/cuda): every production kernel
// (apx_cuda_run, not a copy) against the CPU reference (apx_cpu_run) on the same host data,
// at every block size the launchers accept, with sentinels around every device tensor, and a
// benchmark of the production kernel.
//
//   LabCase c("add_bcast", APX_OP_Add);          // a named op call
//   c.In(dt, {64, 128}).In(dt, {128}).Out(dt, {64, 128});
//   ExpectMatchesCpu(c);                          // all block sizes; gtest failures on mismatch
//   Bench(c);                                     // only with APEXC_LAB_BENCH=1
//
// Comparison: per output, the normalized error ||cuda - cpu|| / ||cpu|| (fp64, NaN at the same
// place counts as equal) must not exceed a tolerance derived from epsilons:
//   tol = 2 eps(output type) + 4 eps(fp32) sqrt(K)
// where 2 eps(output) covers one rounding of values that differ in the last fp32 bits and
// 4 eps(fp32) sqrt(K) the different order of a K-term fp32 sum (K = the case's reduction
// length: 1 for elementwise ops). Non-float outputs (masks, indices) must match exactly.
// Sentinels: each device tensor sits between 256-byte guard bands filled with 0xA5 that must
// survive the kernel; outputs start as 0xFF bytes (NaN) so an element a kernel forgets to
// write shows as a mismatch.
#ifndef APX_CUDA_LAB_H
#define APX_CUDA_LAB_H

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/op.h"
}

namespace lab {

// A 3-D window (ApxAttrConv / ApxAttrConvTranspose / ApxAttrPool): kernel k, stride and pads
// `pad` in every slot, dilation 1.
template <typename A>
void CubicWindow(A *a, int64_t k, int64_t stride, int64_t pad) {
  for (int i = 0; i < 3; i++) {
    a->kernel[i] = k;
    a->strides[i] = stride;
    a->dilations[i] = 1;
    a->pads[i] = a->pads[i + 3] = pad;
  }
}

enum class Init {
  kUniform,   // uniform in [lo, hi]
  kPositive,  // uniform in [0.1, hi]
  kLabels,    // integers in [0, param) (param: classes), a few = ignore value when set
  kIndices,   // integers in [-param, param)
  kBool,      // random true / false
  kConst,     // every element = lo
  kZero,
  kWithNaN,   // uniform in [lo, hi] with every 97th element NaN (NaN propagation)
  kSmallInts, // integers in [-param, param) in any dtype, floats too (ties in max reductions)
};

struct LabTensor {
  ApxDType dtype = APX_DT_F32;
  std::vector<int64_t> dims;
  Init init = Init::kUniform;
  double lo = -2, hi = 2;
  int64_t param = 0;
  bool absent = false;  // an absent optional input/output (data NULL)
  std::vector<uint8_t> host;  // filled by the harness
  int64_t Numel() const;
  size_t Bytes() const;
};

struct LabCase {
  std::string name;
  ApxOp op;
  std::vector<uint8_t> attrs;  // the op's attrs.h struct
  std::vector<LabTensor> ins, outs;
  double K = 1;                // reduction length for the tolerance
  bool compare_inputs = false; // ops that update inputs in place (AssignState, OptimizerStep)
  int64_t step = 3;
  uint64_t seed = 0x5eed;
  bool no_epilogue = false;    // FusedDense without cuBLASLt epilogues
  uint32_t rng_seed = 1;

  LabCase(std::string n, ApxOp o) : name(std::move(n)), op(o) {}
  template <typename A>
  LabCase &Attrs(const A &a) {
    attrs.assign(reinterpret_cast<const uint8_t *>(&a), reinterpret_cast<const uint8_t *>(&a) + sizeof a);
    return *this;
  }
  LabCase &In(ApxDType dt, std::vector<int64_t> dims, Init init = Init::kUniform, double lo = -2,
              double hi = 2, int64_t param = 0);
  LabCase &Out(ApxDType dt, std::vector<int64_t> dims);
  LabCase &Absent(bool output = false);  // an absent optional tensor
  LabCase &compare_inputs_(bool on) {
    compare_inputs = on;
    return *this;
  }
  LabCase &Reduce(double k) {
    K = k;
    return *this;
  }
};

// True when a CUDA device is present (else the reason in why).
bool HaveGpu(std::string *why);
// gtest: skips the test without a GPU.
#define LAB_REQUIRE_GPU()                                         \
  do {                                                            \
    std::string why_;                                             \
    if (!lab::HaveGpu(&why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

// Runs c on the CPU and on CUDA at the default and every block size (32 ... 1024), comparing
// each result (gtest expectations). Prints one line per case with the largest error.
void ExpectMatchesCpu(LabCase c);
// Without a GPU: the CPU reference accepts the case, and apx_cuda_run's host-side checks
// (shapes, types, attributes, plans) accept it too - the call may only fail at its first CUDA
// call (APX_STATUS_RUNTIME). So the lab's cases are known to be well formed before a GPU runs
// them.
void ExpectHostChecksPass(LabCase c);
// With APEXC_LAB_BENCH=1: times the production kernel (median of runs, CUDA events) at each
// block size and prints "bench <case> block=<b>: <us> us, <GB/s> GB/s". Otherwise nothing.
void Bench(LabCase c);
bool BenchEnabled();

// Short type name for case names ("f32", "f16", "bf16").
std::string Short(ApxDType dt);
// The three float types the kernels run in.
const std::vector<ApxDType> &FloatTypes();

}  // namespace lab

// The two tests of a family: every case against the CPU at every block size, and the
// benchmark of the production kernels (APEXC_LAB_BENCH=1).
#define LAB_FAMILY(Family, cases_fn, bench_fn)                                  \
  TEST(Family, MatchesCpuAtEveryBlockSize) {                                    \
    LAB_REQUIRE_GPU();                                                          \
    for (auto &c : cases_fn()) lab::ExpectMatchesCpu(c);                        \
  }                                                                             \
  TEST(Family, HostChecksPassWithoutAGpu) {                                     \
    std::string why_;                                                           \
    if (lab::HaveGpu(&why_)) GTEST_SKIP() << "a GPU is present: the real run covers this"; \
    auto cases_ = cases_fn();                                                   \
    for (auto &c : cases_) lab::ExpectHostChecksPass(c);                        \
    printf("lab %s: %zu cases host-checked\n", #Family, cases_.size());         \
  }                                                                             \
  TEST(Family, Bench) {                                                         \
    LAB_REQUIRE_GPU();                                                          \
    if (!lab::BenchEnabled()) GTEST_SKIP() << "APEXC_LAB_BENCH=1 to benchmark"; \
    for (auto &c : bench_fn()) lab::Bench(c);                                   \
  }

#endif
