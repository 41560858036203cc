// exec_cuda_test.cc - the example models (MLP, CNN+BN, transformer) compiled by the whole
// pipeline and trained for a few steps on the cuda backend and on the cpu reference from the
// same plan, inputs, seed and steps (Dropout's Philox stream included): per-step losses and
// the final parameters, optimizer state and outputs must agree within a tolerance derived
// from the plan's half type (fp32 math differs only in summation order, FMA contraction and
// libm vs CUDA transcendentals, which fp16/bf16 rounding then amplifies). Needs a GPU
// (requires-gpu); skips without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "compiler/onnx_load.h"
#include "compiler/pipeline.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}

#include "tests/testing/cuda_plan_check.h"
#include "tests/testing/compile_plan.h"

namespace {

struct Case {
  const char *model;
  ApxOptLevel level;
  ApxOptimizerKind optim;
  bool bf16;
};

std::string case_name(const ::testing::TestParamInfo<Case> &i) {
  static const char *opt[] = {"sgd", "adamw", "lamb"};
  return std::string(i.param.model) + "_O" + std::to_string((int)i.param.level) + "_" +
         opt[i.param.optim] + (i.param.bf16 ? "_bf16" : "");
}

std::vector<double> AsDoubles(const std::vector<uint8_t> &bytes, ApxDType t) {
  size_t n = bytes.size() / apx_dtype_size(t);
  std::vector<double> out(n);
  if (apx_dtype_is_float(t)) {
    EXPECT_EQ(apx_cpu_convert(bytes.data(), t, out.data(), APX_DT_F64, (int64_t)n), APX_STATUS_OK);
  }
  return out;
}

// ||a - b|| / (||b|| + tiny), NaN-aware (matching NaNs count as equal).
double NormErr(const std::vector<double> &a, const std::vector<double> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return std::sqrt(num) / (std::sqrt(den) + 1e-30);
}

class CudaTrain : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(CudaTrain, StepsAgreeWithTheCpuReference) {
  char why[256] = "";
  if (apx_cuda_device_count(why, sizeof why) <= 0) GTEST_SKIP() << "no CUDA device: " << why;
  const Case &c = GetParam();
  std::string dir = std::string("tests/fixtures/ort/") + c.model;
  ApxOptions o;
  apx_options_init(&o);
  std::string model = dir + "/model.onnx";
  o.model_path = model.c_str();
  o.opt_level = c.level;
  o.optimizer = c.optim;
  o.lr = c.optim == APX_OPTIM_SGD ? 0.05f : 1e-3f;
  o.lr_set = 1;
  o.quiet = 1;
  if (c.bf16) o.half = APX_DT_BF16;
  ApxDiag d;
  ApxGraph g;
  ApxPlan plan;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileToPlan(o, &g, &plan, &d, &err)) << err;

  ApxExec ex[2];
  const char *dev[2] = {"cpu", "cuda"};
  for (int k = 0; k < 2; k++) {
    ApxExecConfig cfg;
    apx_exec_config_init(&cfg);
    cfg.device = dev[k];
    cfg.n_threads = 1;
    ASSERT_EQ(apx_exec_init(&ex[k], &plan, &cfg, &d), 0) << d.msg;
  }
  ApxArena a;
  apx_arena_init(&a);
  for (int i = 0; i < plan.n_inputs; i++) {
    std::string path = dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb";
    ApxTensorConst tc;
    const char *name = nullptr;
    ASSERT_EQ(apx_onnx_read_tensor_file(path.c_str(), &a, &tc, &name, &d), 0) << d.msg;
    ApxTensor t;
    memset(&t, 0, sizeof t);
    t.data = const_cast<void *>(tc.data);
    t.dtype = tc.dtype;
    t.rank = tc.rank;
    memcpy(t.dims, tc.dims, sizeof t.dims);
    for (int k = 0; k < 2; k++) ASSERT_EQ(apx_exec_set_input(&ex[k], i, &t, &d), 0) << d.msg;
  }
  // tolerance from the half type's epsilon (fp32 plans: a few hundred fp32 ulps of drift)
  double eps = c.level == APX_O0 ? 1.2e-7 : c.bf16 ? 7.8e-3 : 9.8e-4;
  double tol = c.level == APX_O0 ? 2e-4 : 8 * eps;
  const ApxPlanBuffer *lb = &plan.bufs[plan.loss];
  std::vector<uint8_t> loss[2] = {std::vector<uint8_t>((size_t)lb->bytes), std::vector<uint8_t>((size_t)lb->bytes)};
  const int steps = 5;
  for (int s = 0; s < steps; s++) {
    for (int k = 0; k < 2; k++) {
      apx_exec_set_step(&ex[k], s);
      for (ApxSection sec : {APX_SEC_FORWARD, APX_SEC_BACKWARD, APX_SEC_OPTIMIZER})
        ASSERT_EQ(apx_exec_run(&ex[k], sec, &d), 0) << dev[k] << ": " << d.msg;
      ASSERT_EQ(apx_exec_read(&ex[k], plan.loss, loss[k].data(), loss[k].size(), &d), 0) << d.msg;
    }
    double lc = AsDoubles(loss[0], lb->dtype)[0], lg = AsDoubles(loss[1], lb->dtype)[0];
    printf("%s step %d: loss cpu %.7f cuda %.7f\n", case_name({GetParam(), 0}).c_str(), s, lc, lg);
    EXPECT_NEAR(lg, lc, tol * (std::fabs(lc) + 1e-3) * (s + 1)) << "step " << s;
  }
  int compared = 0;
  for (int32_t b = 0; b < plan.n_bufs; b++) {
    const ApxPlanBuffer *pb = &plan.bufs[b];
    bool check = (pb->kind == APX_VAL_PARAM || pb->kind == APX_VAL_STATE ||
                  (pb->flags & APX_VALF_GRAPH_OUTPUT)) && apx_dtype_is_float(pb->dtype);
    if (!check || pb->bytes == 0) continue;
    std::vector<uint8_t> got[2] = {std::vector<uint8_t>((size_t)pb->bytes), std::vector<uint8_t>((size_t)pb->bytes)};
    for (int k = 0; k < 2; k++) ASSERT_EQ(apx_exec_read(&ex[k], b, got[k].data(), got[k].size(), &d), 0) << d.msg;
    double e = NormErr(AsDoubles(got[1], pb->dtype), AsDoubles(got[0], pb->dtype));
    EXPECT_LE(e, tol * steps) << pb->name;
    compared++;
  }
  EXPECT_GT(compared, 4);
  apx_arena_free(&a);
  for (int k = 0; k < 2; k++) apx_exec_free(&ex[k]);
  apx_plan_free(&plan);
  apx_graph_free(&g);
}

// Without a GPU too: every kernel of the example plans (all levels, fp16 and bf16, the three
// optimizers, fused and not) is one the CUDA kernels implement for its type, so the executor's
// up-front check (exec.c) accepts these plans on cuda, and the CUDA entries' host-side checks
// accept each kernel's shapes, types and attributes. On a GPU machine the second part would
// launch with fake addresses, so it runs only without one.
TEST(CudaPlans, ExamplePlansUseOnlySupportedKernels) {
  char why[256] = "";
  bool gpu = apx_cuda_device_count(why, sizeof why) > 0;
  int checked = 0;
  for (const char *m : {"mlp", "cnn", "transformer"})
    for (ApxOptLevel level : {APX_O0, APX_O1, APX_O2, APX_O3})
      for (bool bf16 : {false, true})
        for (ApxOptimizerKind optim : {APX_OPTIM_SGD, APX_OPTIM_ADAMW, APX_OPTIM_LAMB})
          for (bool no_fuse : {false, true}) {
            ApxOptions o;
            apx_options_init(&o);
            std::string model = std::string("tests/fixtures/ort/") + m + "/model.onnx";
            o.model_path = model.c_str();
            o.opt_level = level;
            o.optimizer = optim;
            o.quiet = 1;
            o.no_fuse = no_fuse;
            if (bf16) o.half = APX_DT_BF16;
            ApxDiag d;
            ApxGraph g;
            ApxPlan plan;
            std::string err;
            ASSERT_TRUE(apx_testing::CompileToPlan(o, &g, &plan, &d, &err)) << err;
            for (int32_t k = 0; k < plan.n_kernels; k++) {
              const ApxPlanKernel *kn = &plan.kernels[k];
              if (kn->op == APX_OP_Allreduce) continue;
              ApxDType t = apx_cuda_test::KernelType(plan, *kn);
              EXPECT_TRUE(apx_cuda_supports(kn->op, t))
                  << m << " O" << (int)level << (bf16 ? " bf16" : "") << ": kernel " << k << " node '"
                  << kn->node << "' (" << apx_op_name(kn->op) << ", " << apx_dtype_name(t) << ")";
              // the CUDA entry's host-side checks accept the kernel's real shapes, types and
              // attributes: with fake device addresses it may only fail at its first CUDA call
              if (gpu) {
                checked++;
                continue;
              }
              ApxCudaCtx ctx;
              ApxStatus st = apx_cuda_test::HostCheck(plan, *kn, &ctx);
              EXPECT_TRUE(st == APX_STATUS_OK || st == APX_STATUS_RUNTIME || st == APX_STATUS_OOM)
                  << m << " O" << (int)level << ": node '" << kn->node << "': " << apx_status_name(st)
                  << ": " << ctx.err;
              checked++;
            }
            apx_plan_free(&plan);
            apx_graph_free(&g);
          }
  printf("%d kernels of the example plans checked\n", checked);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, CudaTrain,
    ::testing::Values(Case{"mlp", APX_O0, APX_OPTIM_SGD, false}, Case{"mlp", APX_O2, APX_OPTIM_ADAMW, false},
                      Case{"mlp", APX_O2, APX_OPTIM_LAMB, true}, Case{"cnn", APX_O0, APX_OPTIM_SGD, false},
                      Case{"cnn", APX_O1, APX_OPTIM_SGD, false}, Case{"cnn", APX_O2, APX_OPTIM_ADAMW, false},
                      Case{"transformer", APX_O0, APX_OPTIM_ADAMW, false},
                      Case{"transformer", APX_O2, APX_OPTIM_ADAMW, false},
                      Case{"transformer", APX_O2, APX_OPTIM_ADAMW, true}),
    case_name);
