// reference_test.cc - apexc's training step against onnxruntime-training (issue 5): for the
// example MLP, CNN with BatchNorm (training mode) and transformer, compiled at -O0 (fp32,
// loss scale 1, no fusion) with AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay
// 0.01) and run by the executor on the first batch (tests/fixtures/ort/<model>), compare
// with tests/fixtures/ort_training/<model>/ (make_reference.py):
//   - the loss of each of 5 steps (same batch every step),
//   - every parameter's gradient after the first backward (UnscaleCheck's inputs: the
//     gradients as the optimizer receives them; loss scale 1 at O0),
//   - every parameter after 5 AdamW steps, and the CNN's BN running statistics after 5 steps,
// each within 1e-5 relative L2 error per tensor: ||apexc - ref||_2 / ||ref||_2 in float64.
//
// Parameters whose exact gradient is zero (make_reference.py STRUCTURAL_ZERO_GRAD: the CNN's
// conv biases feeding training-mode BatchNorm, the transformer's key bias in front of a
// Softmax) get fp32 rounding noise as gradient in every implementation, and AdamW turns that
// noise into +-lr steps of arbitrary sign. For them the test checks instead that apexc's
// gradient is below 1e-5 of the model's gradient norm and that the 5 steps moved each element
// by no more than AdamW's bound (lr * sum over t of Adam's |m_hat / sqrt(v_hat)| bound, 5.06 lr,
// plus the decay), in apexc and in the reference. Such a conv bias also enters the batch mean
// of the BN after it, so running means are compared without that bias's share (shift_K.pb;
// apexc's share from its own bias values before each step).
//
// APX_REF_DUMP=DIR (optional) writes apexc's values in the fixtures' layout into DIR/<model>/
// (grad_K.pb, param_K.pb, loss.pb) for investigating a difference (tests/ort_training/
// float64_check.py compares both against float64 finite differences).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <map>
#include <ostream>
#include <string>
#include <sys/stat.h>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "compiler/onnx_load.h"
#include "compiler/pipeline.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}
#include "tests/testing/compile_plan.h"

namespace {

constexpr double kTol = 1e-5;
constexpr int kSteps = 5;
constexpr float kLr = 1e-3f, kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f, kWd = 0.01f;

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<double> v;
};

bool file_exists(const std::string &p) {
  FILE *f = fopen(p.c_str(), "rb");
  if (f) fclose(f);
  return f != nullptr;
}

// A TensorProto file as float64 values.
Tensor read_pb(const std::string &path) {
  Tensor t;
  ApxArena a;
  apx_arena_init(&a);
  ApxDiag d;
  apx_diag_init(&d);
  ApxTensorConst tc;
  const char *name = nullptr;
  EXPECT_EQ(apx_onnx_read_tensor_file(path.c_str(), &a, &tc, &name, &d), 0) << d.msg;
  if (!d.code) {
    int64_t n = 1;
    for (int i = 0; i < tc.rank; i++) {
      t.dims.push_back(tc.dims[i]);
      n *= tc.dims[i];
    }
    t.name = name ? name : "";
    t.v.resize((size_t)n);
    EXPECT_EQ(apx_cpu_convert(tc.data, tc.dtype, t.v.data(), APX_DT_F64, n), APX_STATUS_OK);
  }
  apx_arena_free(&a);
  return t;
}

// Files prefix_0.pb, prefix_1.pb ... until the first missing one.
std::vector<Tensor> read_series(const std::string &dir, const std::string &prefix) {
  std::vector<Tensor> out;
  for (int k = 0;; k++) {
    std::string p = dir + "/" + prefix + "_" + std::to_string(k) + ".pb";
    if (!file_exists(p)) break;
    out.push_back(read_pb(p));
  }
  return out;
}

double norm(const std::vector<double> &a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}

double rel_l2(const std::vector<double> &got, const std::vector<double> &ref) {
  double num = 0;
  for (size_t i = 0; i < ref.size(); i++) num += (got[i] - ref[i]) * (got[i] - ref[i]);
  double den = norm(ref);
  return den > 0 ? std::sqrt(num) / den : std::sqrt(num);
}

// Adam's |m_hat_t / sqrt(v_hat_t)| <= (1-b1)/(1-b1^t) * sqrt(1-b2^t)/sqrt(1-b2)
//   * sqrt(sum_{k<t} (b1^2/b2)^k)   (Cauchy-Schwarz on m_t against v_t); summed over t.
double adam_move_bound(int steps) {
  double s = 0;
  for (int t = 1; t <= steps; t++) {
    double geo = 0;
    for (int k = 0; k < t; k++) geo += std::pow((double)kBeta1 * kBeta1 / kBeta2, k);
    s += (1 - kBeta1) / (1 - std::pow((double)kBeta1, t)) *
         std::sqrt((1 - std::pow((double)kBeta2, t)) / (1 - kBeta2)) * std::sqrt(geo);
  }
  return s * kLr;
}

struct Model {
  const char *name;
  std::vector<std::string> zero_grad;  // make_reference.py STRUCTURAL_ZERO_GRAD
};

std::string model_name(const ::testing::TestParamInfo<Model> &i) { return i.param.name; }
void PrintTo(const Model &m, std::ostream *os) { *os << m.name; }

class OrtTrainingReference : public ::testing::TestWithParam<Model> {};

}  // namespace

TEST_P(OrtTrainingReference, LossGradientsAndFiveAdamWStepsMatch) {
  const Model &m = GetParam();
  const std::string in_dir = std::string("tests/fixtures/ort/") + m.name;
  const std::string ref_dir = std::string("tests/fixtures/ort_training/") + m.name;
  const std::string model = in_dir + "/model.onnx";

  ApxOptions o;
  apx_options_init(&o);
  o.model_path = model.c_str();
  o.opt_level = APX_O0;
  o.training = 1;
  o.optimizer = APX_OPTIM_ADAMW;
  o.lr = kLr;
  o.lr_set = 1;
  o.beta1 = kBeta1;
  o.beta2 = kBeta2;
  o.eps = kEps;
  o.eps_set = 1;
  o.weight_decay = kWd;
  o.weight_decay_set = 1;
  o.no_fuse = 1;
  o.verify_each_pass = 1;
  o.quiet = 1;
  ApxDiag d;
  ApxGraph g;
  ApxPlan plan;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileToPlan(o, &g, &plan, &d, &err)) << err;
  ASSERT_EQ(plan.opts.loss_scale, 1.0f);

  // UnscaleCheck(loss_scale, g_0..g_{n-1}) and OptimizerStep(found_inf, norm_sq, lr, step,
  // P[n], G[n], ...): parameter i is OptimizerStep input 4 + i, its gradient UnscaleCheck
  // input 1 + i (kernels/attrs.h).
  const ApxPlanKernel *uc = nullptr, *os = nullptr;
  for (int32_t k = 0; k < plan.n_kernels; k++) {
    if (plan.kernels[k].op == APX_OP_UnscaleCheck) uc = &plan.kernels[k];
    if (plan.kernels[k].op == APX_OP_OptimizerStep) os = &plan.kernels[k];
  }
  ASSERT_NE(uc, nullptr);
  ASSERT_NE(os, nullptr);
  ApxAttrOptimizer oa;
  memcpy(&oa, os->attrs, sizeof oa);
  ASSERT_EQ(oa.kind, APX_OPTIM_ADAMW);
  ASSERT_EQ(oa.master_weights, 0);
  const int n = oa.n_params;
  ASSERT_EQ(uc->n_in, 1 + n);
  std::map<std::string, int> param_index;  // name -> i
  for (int i = 0; i < n; i++) param_index[plan.bufs[os->in[4 + i]].name] = i;

  auto is_zero_class = [&](const std::string &p) {
    return std::find(m.zero_grad.begin(), m.zero_grad.end(), p) != m.zero_grad.end();
  };

  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  cfg.n_threads = 1;
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, &cfg, &d), 0) << d.msg;
  for (int i = 0; i < plan.n_inputs; i++) {
    std::string path = in_dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb";
    ApxArena a;
    apx_arena_init(&a);
    ApxTensorConst tc;
    const char *name = nullptr;
    ASSERT_EQ(apx_onnx_read_tensor_file(path.c_str(), &a, &tc, &name, &d), 0) << d.msg;
    ASSERT_STREQ(name, plan.bufs[plan.inputs[i]].name);
    ApxTensor t = {tc.data, tc.dtype, tc.rank, {0}};
    memcpy(t.dims, tc.dims, sizeof t.dims);
    ASSERT_EQ(apx_exec_set_input(&ex, i, &t, &d), 0) << d.msg;
    apx_arena_free(&a);
  }

  auto read_f64 = [&](int32_t b) {
    const ApxPlanBuffer *pb = &plan.bufs[b];
    std::vector<uint8_t> raw((size_t)pb->bytes);
    EXPECT_EQ(apx_exec_read(&ex, b, raw.data(), raw.size(), &d), 0) << d.msg;
    int64_t cnt = 1;
    for (int r = 0; r < pb->rank; r++) cnt *= pb->dims[r];
    std::vector<double> v((size_t)cnt);
    EXPECT_EQ(apx_cpu_convert(raw.data(), pb->dtype, v.data(), APX_DT_F64, cnt), APX_STATUS_OK);
    return v;
  };
  const int32_t lr_buf = apx_plan_find_buffer(&plan, "apx_lr");
  const int32_t scale_buf = apx_plan_find_buffer(&plan, "apx_loss_scale");
  ASSERT_GE(lr_buf, 0);
  ASSERT_GE(scale_buf, 0);
  std::vector<std::vector<double>> initial(n);
  for (int i = 0; i < n; i++) initial[i] = read_f64(os->in[4 + i]);

  // Running means whose BN input is a Conv with a zero-gradient bias (see the file comment
  // of make_reference.py, shift_K.pb): that bias's share of the batch means is tracked here
  // from apexc's own bias values before each step and taken out before comparing.
  struct Shift {
    int32_t state, bias;
    double momentum;
    std::vector<double> v;
  };
  std::vector<Shift> shifts;
  for (int32_t k = 0; k < plan.n_kernels; k++) {
    const ApxPlanKernel *bn = &plan.kernels[k];
    if (bn->op != APX_OP_BatchNormalization || bn->n_in < 5 || bn->in[3] < 0) continue;
    for (int32_t c = 0; c < plan.n_kernels; c++) {
      const ApxPlanKernel *cv = &plan.kernels[c];
      if (cv->op != APX_OP_Conv || cv->n_out < 1 || cv->out[0] != bn->in[0] || cv->n_in < 3 ||
          cv->in[2] < 0 || !is_zero_class(plan.bufs[cv->in[2]].name))
        continue;
      ApxAttrBatchNorm ba;
      memcpy(&ba, bn->attrs, sizeof ba);
      shifts.push_back({bn->in[3], cv->in[2], ba.momentum, {}});
    }
  }

  // the training step as the runtime runs it (runtime/exec.h)
  std::vector<double> losses;
  std::vector<std::vector<double>> grads(n);
  for (int s = 0; s < kSteps; s++) {
    const float lr = kLr, scale = 1.0f;
    ASSERT_EQ(apx_exec_write(&ex, lr_buf, &lr, sizeof lr, &d), 0) << d.msg;
    ASSERT_EQ(apx_exec_write(&ex, scale_buf, &scale, sizeof scale, &d), 0) << d.msg;
    apx_exec_set_step(&ex, s);
    for (Shift &sh : shifts) {
      std::vector<double> b = read_f64(sh.bias);
      sh.v.resize(b.size(), 0.0);
      for (size_t j = 0; j < b.size(); j++) sh.v[j] = sh.momentum * sh.v[j] + (1 - sh.momentum) * b[j];
    }
    ASSERT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), 0) << d.msg;
    ASSERT_EQ(apx_exec_run(&ex, APX_SEC_BACKWARD, &d), 0) << d.msg;
    losses.push_back(read_f64(plan.loss)[0]);
    if (s == 0)
      for (int i = 0; i < n; i++) grads[i] = read_f64(uc->in[1 + i]);
    ASSERT_EQ(apx_exec_run(&ex, APX_SEC_OPTIMIZER, &d), 0) << d.msg;
    ASSERT_EQ(read_f64(uc->out[0])[0], 0.0) << "found_inf at step " << s;
  }

  // loss of every step
  Tensor ref_loss = read_pb(ref_dir + "/loss.pb");
  ASSERT_EQ(ref_loss.v.size(), (size_t)kSteps);
  double worst_loss = 0;
  for (int s = 0; s < kSteps; s++) {
    double e = std::fabs(losses[s] - ref_loss.v[s]) / std::fabs(ref_loss.v[s]);
    worst_loss = std::max(worst_loss, e);
    EXPECT_LE(e, kTol) << m.name << " step " << s + 1 << ": loss " << losses[s] << ", onnxruntime "
                       << ref_loss.v[s];
  }

  // gradients after one backward
  std::vector<Tensor> ref_grads = read_series(ref_dir, "grad");
  std::vector<Tensor> ref_params = read_series(ref_dir, "param");
  ASSERT_EQ((int)ref_grads.size(), n) << "parameters in the fixture vs the plan";
  ASSERT_EQ((int)ref_params.size(), n);
  double total = 0;
  for (const Tensor &t : ref_grads) total += norm(t.v) * norm(t.v);
  total = std::sqrt(total);
  double worst_grad = 0, worst_param = 0, worst_zero = 0;
  std::string worst_grad_at, worst_param_at;
  for (int k = 0; k < n; k++) {
    const Tensor &rg = ref_grads[k];
    auto it = param_index.find(rg.name);
    ASSERT_NE(it, param_index.end()) << rg.name << " is not a parameter of the plan";
    int i = it->second;
    const ApxPlanBuffer *pb = &plan.bufs[os->in[4 + i]];
    ASSERT_EQ(rg.v.size(), grads[i].size()) << rg.name;
    ASSERT_EQ(rg.dims, std::vector<int64_t>(pb->dims, pb->dims + pb->rank)) << rg.name;
    if (is_zero_class(rg.name)) {
      // exact gradient 0: both are rounding noise far below the model's gradient scale
      double e = norm(grads[i]) / total;
      worst_zero = std::max(worst_zero, e);
      EXPECT_LE(e, kTol) << rg.name << ": gradient should be 0 up to rounding";
      EXPECT_LE(norm(rg.v) / total, kTol) << rg.name << " (reference)";
      continue;
    }
    double e = rel_l2(grads[i], rg.v);
    if (e > worst_grad) worst_grad = e, worst_grad_at = rg.name;
    EXPECT_LE(e, kTol) << m.name << ": gradient of " << rg.name;
  }

  // parameters after 5 AdamW steps
  const double bound = adam_move_bound(kSteps);
  for (int k = 0; k < n; k++) {
    const Tensor &rp = ref_params[k];
    auto it = param_index.find(rp.name);
    ASSERT_NE(it, param_index.end()) << rp.name;
    int i = it->second;
    std::vector<double> got = read_f64(os->in[4 + i]);
    ASSERT_EQ(rp.v.size(), got.size()) << rp.name;
    if (is_zero_class(rp.name)) {
      double decay = 1 - std::pow(1 - (double)kLr * kWd, kSteps);
      for (size_t j = 0; j < got.size(); j++) {
        double allowed = bound + decay * std::fabs(initial[i][j]) + 1e-7;
        EXPECT_LE(std::fabs(got[j] - initial[i][j]), allowed) << rp.name << "[" << j << "]";
        EXPECT_LE(std::fabs(rp.v[j] - initial[i][j]), allowed) << rp.name << "[" << j << "] (reference)";
      }
      continue;
    }
    double e = rel_l2(got, rp.v);
    if (e > worst_param) worst_param = e, worst_param_at = rp.name;
    EXPECT_LE(e, kTol) << m.name << ": " << rp.name << " after " << kSteps << " AdamW steps";
  }

  // BatchNorm running statistics after 5 steps (STATE buffers named after the initializers)
  double worst_state = 0;
  std::vector<Tensor> ref_state = read_series(ref_dir, "state");
  std::vector<Tensor> ref_shift = read_series(ref_dir, "shift");
  ASSERT_EQ(ref_shift.size(), ref_state.size());
  for (size_t k = 0; k < ref_state.size(); k++) {
    Tensor rs = ref_state[k];
    const Tensor &rsh = ref_shift[k];
    ASSERT_EQ(rsh.name, rs.name);
    ASSERT_EQ(rsh.v.size(), rs.v.size());
    int32_t b = apx_plan_find_buffer(&plan, rs.name.c_str());
    ASSERT_GE(b, 0) << rs.name;
    EXPECT_EQ(plan.bufs[b].kind, APX_VAL_STATE) << rs.name;
    std::vector<double> got = read_f64(b);
    ASSERT_EQ(got.size(), rs.v.size()) << rs.name;
    const Shift *sh = nullptr;
    for (const Shift &x : shifts)
      if (x.state == b) sh = &x;
    if (!sh) {
      EXPECT_EQ(norm(rsh.v), 0.0) << rs.name << ": the reference shifts it, apexc found no Conv bias";
    }
    for (size_t j = 0; j < got.size(); j++) {
      rs.v[j] -= rsh.v[j];
      if (sh) got[j] -= sh->v[j];
    }
    double e = rel_l2(got, rs.v);
    worst_state = std::max(worst_state, e);
    EXPECT_LE(e, kTol) << m.name << ": " << rs.name << " after " << kSteps << " steps"
                       << (sh ? " (without its Conv bias's share)" : "");
  }

  if (const char *dump = getenv("APX_REF_DUMP")) {
    std::string dd = std::string(dump) + "/" + m.name;
    mkdir(dump, 0755);
    mkdir(dd.c_str(), 0755);
    auto write = [&](const std::string &file, const std::string &name, std::vector<double> v,
                     std::vector<int64_t> dims) {
      std::vector<float> f(v.begin(), v.end());
      ApxTensor t = {f.data(), APX_DT_F32, (int32_t)dims.size(), {0}};
      std::copy(dims.begin(), dims.end(), t.dims);
      EXPECT_EQ(apx_onnx_write_tensor_file((dd + "/" + file).c_str(), name.c_str(), &t, &d), 0) << d.msg;
    };
    write("loss.pb", "loss", losses, {kSteps});
    for (int k = 0; k < n; k++) {
      int i = param_index[ref_grads[k].name];
      write("grad_" + std::to_string(k) + ".pb", ref_grads[k].name, grads[i], ref_grads[k].dims);
      write("param_" + std::to_string(k) + ".pb", ref_grads[k].name, read_f64(os->in[4 + i]),
            ref_grads[k].dims);
    }
  }

  printf("%s: loss %.6f -> %.6f; max rel L2 error: loss %.2e, gradients %.2e (%s), "
         "parameters after %d AdamW steps %.2e (%s), BN running stats %.2e (%zu); "
         "zero-gradient parameters (%zu): |g| / model gradient norm <= %.2e\n",
         m.name, losses.front(), losses.back(), worst_loss, worst_grad, worst_grad_at.c_str(),
         kSteps, worst_param, worst_param_at.c_str(), worst_state, ref_state.size(),
         m.zero_grad.size(), worst_zero);

  apx_exec_free(&ex);
  apx_plan_free(&plan);
  apx_graph_free(&g);
}

INSTANTIATE_TEST_SUITE_P(Examples, OrtTrainingReference,
                         ::testing::Values(Model{"mlp", {}},
                                           Model{"cnn", {"conv1.bias", "conv2.bias"}},
                                           Model{"transformer", {"attn/k.bias"}}),
                         model_name);
