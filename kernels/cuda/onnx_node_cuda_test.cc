// onnx_node_cuda_test.cc - the ONNX backend node tests (Debian libonnx-testdata) on the CUDA
// kernels: every in-scope v1 node test (tests/onnx_node/node_harness.h: listing, exclusions,
// input binding) compiled like apexrun infer, in three modes (fp32 at -O0; fp16 and bf16 at
// -O3 with every op of the model in the half type), then
//   without a GPU: every kernel of the plan is either supported by the CUDA kernels for its
//     type (apx_cuda_supports) and accepted by the CUDA entry's host-side checks (with fake
//     device addresses it may only fail at its first CUDA call), or refused by both (counted
//     and listed by op and type: "Add i64" - what `--device cuda` would refuse up front);
//   with a GPU: the plan runs on the cpu and on the cuda backend from the same inputs, and
//     every float output agrees within 2 eps(type) + 4 eps(fp32) sqrt(K), K = the largest
//     input's element count (a bound on any reduction length; the lab's formula); other
//     outputs exactly. Plans with a refused kernel are skipped (listed).
// A summary line per mode ends the run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}

#include "tests/testing/cuda_plan_check.h"
#include "tests/onnx_node/node_harness.h"

namespace {

using apx_node::Compiled;
using apx_node::kBf16;
using apx_node::kFp16;
using apx_node::kFp32;
using apx_node::kModeName;
using apx_node::Mode;

struct Summary {
  int plans = 0, kernels = 0, refused_plans = 0, compared = 0;
  std::map<std::string, int> refused;  // "Op type" -> kernels
};
Summary g_sum[3];

bool HaveGpu() {
  static int have = -1;
  if (have < 0) {
    char why[256];
    have = apx_cuda_device_count(why, sizeof why) > 0;
  }
  return have == 1;
}

// Host-side check of every kernel (no GPU). Returns the refused "Op type" set.
std::set<std::string> CheckKernels(const std::string &name, const ApxPlan &p, Mode mode, bool launch) {
  std::set<std::string> refused;
  for (int32_t k = 0; k < p.n_kernels; k++) {
    const ApxPlanKernel *kn = &p.kernels[k];
    ApxDType t = apx_cuda_test::KernelType(p, *kn);
    g_sum[mode].kernels++;
    bool sup = t == APX_DT_UNDEFINED || apx_cuda_supports(kn->op, t);
    if (!sup) {
      std::string key = std::string(apx_op_name(kn->op)) + " " + apx_dtype_short(t);
      refused.insert(key);
      continue;
    }
    if (!launch) continue;
    ApxCudaCtx ctx;
    ApxStatus st = apx_cuda_test::HostCheck(p, *kn, &ctx);
    EXPECT_TRUE(st == APX_STATUS_OK || st == APX_STATUS_RUNTIME || st == APX_STATUS_OOM)
        << name << " " << kModeName[mode] << ": kernel " << k << " node '" << kn->node << "': "
        << apx_status_name(st) << ": " << ctx.err;
  }
  return refused;
}

double Eps(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return 9.765625e-4;
    case APX_DT_BF16: return 7.8125e-3;
    case APX_DT_F64: return 2.220446049250313e-16;
    default: return 1.1920928955078125e-7;
  }
}

// Runs the plan on cpu and cuda and compares every output (GPU only).
void RunBoth(const std::string &name, Compiled *c, Mode mode) {
  ApxExec ex[2];
  const char *dev[2] = {"cpu", "cuda"};
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  int64_t K = 1;
  for (const ApxTensorConst &t : c->data) {
    int64_t n = 1;
    for (int i = 0; i < t.rank; i++) n *= t.dims[i];
    K = std::max(K, n);
  }
  for (int k = 0; k < 2; k++) {
    ApxExecConfig cfg;
    apx_exec_config_init(&cfg);
    cfg.device = dev[k];
    cfg.n_threads = 1;
    ASSERT_EQ(apx_exec_init(&ex[k], &c->plan, &cfg, &d), 0) << name << " " << dev[k] << ": " << d.msg;
    std::string err;
    ASSERT_TRUE(apx_node::set_inputs(&ex[k], *c, &err)) << name << ": " << err;
    ASSERT_EQ(apx_exec_run(&ex[k], APX_SEC_FORWARD, &d), 0) << name << " " << dev[k] << ": " << d.msg;
  }
  for (int32_t o = 0; o < c->plan.n_outputs; o++) {
    int32_t b = c->plan.outputs[o];
    const ApxPlanBuffer *pb = &c->plan.bufs[b];
    std::vector<uint8_t> got[2] = {std::vector<uint8_t>((size_t)pb->bytes + 1), std::vector<uint8_t>((size_t)pb->bytes + 1)};
    for (int k = 0; k < 2; k++)
      ASSERT_EQ(apx_exec_read(&ex[k], b, got[k].data(), (size_t)pb->bytes, &d), 0) << d.msg;
    if (!apx_dtype_is_float(pb->dtype)) {
      EXPECT_EQ(0, memcmp(got[0].data(), got[1].data(), (size_t)pb->bytes)) << name << ": output " << pb->name;
      continue;
    }
    int64_t n = pb->bytes / (int64_t)apx_dtype_size(pb->dtype);
    std::vector<double> a((size_t)n), r((size_t)n);
    apx_cpu_convert(got[1].data(), pb->dtype, a.data(), APX_DT_F64, n);
    apx_cpu_convert(got[0].data(), pb->dtype, r.data(), APX_DT_F64, n);
    double num = 0, den = 0;
    bool nan_mismatch = false;
    for (int64_t i = 0; i < n; i++) {
      if (std::isnan(a[i]) || std::isnan(r[i])) {
        nan_mismatch |= std::isnan(a[i]) != std::isnan(r[i]);
        continue;
      }
      if (std::isinf(a[i]) || std::isinf(r[i])) {
        nan_mismatch |= a[i] != r[i];
        continue;
      }
      num += (a[i] - r[i]) * (a[i] - r[i]);
      den += r[i] * r[i];
    }
    double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    double tol = 2 * Eps(pb->dtype) + 4 * Eps(APX_DT_F32) * std::sqrt((double)K);
    EXPECT_FALSE(nan_mismatch) << name << " " << kModeName[mode] << ": output " << pb->name << " inf/nan differ";
    EXPECT_LE(e, tol) << name << " " << kModeName[mode] << ": output " << pb->name;
  }
  g_sum[mode].compared++;
  for (int k = 0; k < 2; k++) apx_exec_free(&ex[k]);
}

class NodeCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void Run(Mode mode) {
    const std::string name = GetParam();
    const std::string dir = std::string(apx_node::node_dir()) + "/" + name;
    const std::string model = dir + "/model.onnx";
    std::string ops;
    std::set<std::string> opset;
    if (!apx_node::model_is_v1(model, &ops, &opset)) GTEST_SKIP() << "not a v1 model";
    if (apx_node::excluded_tests().count(name)) GTEST_SKIP() << "excluded";
    std::vector<std::string> sets = apx_node::list_data_sets(dir);
    if (sets.empty()) GTEST_SKIP() << "no data set";
    Compiled c(model);
    std::string err;
    if (!apx_node::compile(model, dir + "/" + sets[0], mode, opset, false, &c, &err))
      GTEST_SKIP() << "does not compile in this mode (node_conformance_test covers it): " << err;
    g_sum[mode].plans++;
    std::set<std::string> refused = CheckKernels(name, c.plan, mode, !HaveGpu());
    if (!refused.empty()) {
      g_sum[mode].refused_plans++;
      std::string why;
      for (const std::string &r : refused) {
        g_sum[mode].refused[r]++;
        why += (why.empty() ? "" : ", ") + r;
      }
      GTEST_SKIP() << "refused on cuda: " << why;
    }
    if (HaveGpu()) RunBoth(name, &c, mode);
  }
};

std::string ParamName(const ::testing::TestParamInfo<std::string> &i) { return i.param; }

TEST_P(NodeCuda, Fp32) { Run(kFp32); }
TEST_P(NodeCuda, Fp16) { Run(kFp16); }
TEST_P(NodeCuda, Bf16) { Run(kBf16); }

INSTANTIATE_TEST_SUITE_P(Onnx, NodeCuda, ::testing::ValuesIn(apx_node::list_tests()), ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeCuda);

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    for (int m = 0; m < 3; m++) {
      const Summary &s = g_sum[m];
      std::string refused;
      for (const auto &r : s.refused) refused += " " + r.first + " (" + std::to_string(r.second) + ")";
      printf("onnx node tests on cuda, %s: %d plans, %d kernels%s; %d plans refused:%s; compared on a GPU: %d\n",
             kModeName[m], s.plans, s.kernels, HaveGpu() ? "" : " host-checked", s.refused_plans,
             refused.empty() ? " none" : refused.c_str(), s.compared);
    }
  }
};
const ::testing::Environment *const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

}  // namespace
