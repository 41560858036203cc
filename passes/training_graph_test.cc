// training_graph_test.cc - the training graph of the exported example models (examples/:
// MLP, CNN with training-mode BatchNorm, transformer LM with the exporter's hand-written
// LayerNorm and Erf GELU), end to end through loader, fold_constants, infer_shapes,
// autodiff and optimizer, with apx_graph_verify after every pass.
//
// Gradient check on the real graphs: after inference every float initializer, constant and
// input is converted to float64 and the graph re-inferred, so the whole forward and
// backward run in double on the CPU kernels. For sampled elements of every parameter the
// analytic gradient is compared with a central difference with h = 1e-6 max(1, |p|): small
// enough that a perturbation crosses no ReLU / max-pool kink and truncation (h^2 |L'''|) is
// ~1e-12, while the rounding of L (eps |L| per evaluation, times the depth of the graph)
// gives an absolute error ~ c eps |L| / h. Criterion:
//   |a - n| <= 1e-5 max(|n|, 1e-2 ||grad p||_inf) + 10 eps max(1, |L|) / h
// (the relative term catches wrong rules; the absolute term is the rounding floor, 7e-9
// for |L| = 3 -- the gradients checked are 1e-5 .. 1e-2).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

extern "C" {
#include "ir/infer.h"
#include "compiler/onnx_load.h"
#include "compiler/pipeline.h"
#include "passes/autodiff.h"
#include "passes/fold_constants.h"
#include "passes/infer_shapes.h"
#include "passes/optimizer.h"
#include "tests/testing/graph_eval.h"
}

namespace {

struct Loaded {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  explicit Loaded(const std::string &model) {
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    o.verify_each_pass = 1;
    apx_graph_init(&g, model.c_str());
    ok = apx_onnx_load_file(&g, model.c_str(), &o, &d) == 0 && apx_graph_verify(&g, &d) == 0;
  }
  ~Loaded() { apx_graph_free(&g); }
  bool Run(int (*fn)(ApxGraph *, const ApxOptions *, ApxDiag *), const char *name) {
    int rc = fn(&g, &o, &d);
    if (rc < 0) {
      ADD_FAILURE() << name << ": " << d.msg;
      return false;
    }
    if (rc > 0 && apx_graph_toposort(&g, &d)) {
      ADD_FAILURE() << name << ": toposort: " << d.msg;
      return false;
    }
    if (apx_graph_verify(&g, &d)) {
      ADD_FAILURE() << "verify after " << name << ": " << d.msg;
      return false;
    }
    return true;
  }
  bool Prepare() { return ok && Run(pass_fold_constants, "fold_constants") && Run(pass_infer_shapes, "infer_shapes"); }
  // Every float32 initializer / constant / input becomes float64; activations re-inferred.
  bool ToFloat64() {
    for (int v = 0; v < g.n_vals; v++) {
      ApxValue &val = g.vals[v];
      if (val.dtype != APX_DT_F32) continue;
      if (val.kind == APX_VAL_ACTIVATION && val.producer >= 0) {
        val.dtype = APX_DT_UNDEFINED;
        continue;
      }
      if (val.data) {
        int64_t n = apx_value_numel(&val);
        double *p = (double *)apx_arena_alloc(&g.arena, (size_t)(n > 0 ? n : 1) * sizeof(double));
        for (int64_t k = 0; k < n; k++) p[k] = ((const float *)val.data)[k];
        val.data = p;
      }
      val.dtype = APX_DT_F64;
    }
    for (int k = 0; k < g.n_order; k++)
      if (apx_node_infer(&g, g.order[k], &d)) {
        ADD_FAILURE() << "re-infer in float64: " << d.msg;
        return false;
      }
    return true;
  }
  bool ok = false;
};

class ExampleModel : public ::testing::TestWithParam<const char *> {};

TEST_P(ExampleModel, TrainingGraphVerifiesAfterEveryPass) {
  Loaded m(std::string("examples/") + GetParam() + "/model.onnx");
  ASSERT_TRUE(m.ok) << m.d.msg;
  ASSERT_TRUE(m.Prepare());
  ASSERT_TRUE(m.Run(pass_autodiff, "autodiff"));
  ASSERT_TRUE(m.Run(pass_optimizer, "optimizer"));
  int n_params = 0;
  for (int v = 0; v < m.g.n_vals; v++)
    if (m.g.vals[v].kind == APX_VAL_PARAM) {
      n_params++;
      EXPECT_GE(m.g.vals[v].grad, 0) << m.g.vals[v].name;
    }
  EXPECT_GT(n_params, 0);
  int os = -1;
  for (int i = 0; i < m.g.n_nodes; i++)
    if (m.g.nodes[i].op == APX_OP_OptimizerStep) os = i;
  ASSERT_GE(os, 0);
  EXPECT_EQ(APX_NODE_ATTRS(&m.g, os, ApxAttrOptimizer)->n_params, n_params);
}

TEST_P(ExampleModel, GradientsMatchFiniteDifferencesInFloat64) {
  Loaded m(std::string("examples/") + GetParam() + "/model.onnx");
  ASSERT_TRUE(m.ok) << m.d.msg;
  ASSERT_TRUE(m.Prepare());
  ASSERT_TRUE(m.ToFloat64());
  ASSERT_EQ(apx_graph_verify(&m.g, &m.d), 0) << m.d.msg;
  m.o.loss_scale = 1.0f;
  ASSERT_TRUE(m.Run(pass_autodiff, "autodiff"));

  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &m.g), 0) << ev.err;
  // data inputs: floats in [-1, 1], integer inputs (labels, tokens) 0 or 1
  uint64_t s = 88172645463325252ull;
  auto next = [&s]() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return (double)(s >> 11) / 9007199254740992.0;
  };
  for (int i = 0; i < m.g.n_inputs; i++) {
    int v = m.g.inputs[i];
    for (int64_t k = 0; k < apx_value_numel(&m.g.vals[v]); k++)
      apx_eval_set(&ev, v, k, apx_dtype_is_float(m.g.vals[v].dtype) ? 2 * next() - 1 : (double)(k % 2));
  }
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  const double loss = apx_eval_get(&ev, m.g.loss, 0);
  int checked = 0;
  for (int p = 0; p < m.g.n_vals; p++) {
    const ApxValue &pv = m.g.vals[p];
    if (pv.kind != APX_VAL_PARAM) continue;
    ASSERT_GE(pv.grad, 0) << pv.name;
    int64_t n = apx_value_numel(&pv);
    double gmax = 0;
    for (int64_t k = 0; k < n; k++) gmax = std::max(gmax, std::fabs(apx_eval_get(&ev, pv.grad, k)));
    for (int t = 0; t < 4; t++) {
      int64_t k = (int64_t)(next() * (double)n) % n;
      double a = apx_eval_get(&ev, pv.grad, k);
      double x0 = apx_eval_get(&ev, p, k), h = 1e-6 * std::max(1.0, std::fabs(x0));
      apx_eval_set(&ev, p, k, x0 + h);
      ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD), 0) << ev.err;
      double lp = apx_eval_get(&ev, m.g.loss, 0);
      apx_eval_set(&ev, p, k, x0 - h);
      ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD), 0) << ev.err;
      double lm = apx_eval_get(&ev, m.g.loss, 0);
      apx_eval_set(&ev, p, k, x0);
      double num = (lp - lm) / (2 * h);
      double floor = 10 * 2.220446049250313e-16 * std::max(1.0, std::fabs(loss)) / h;
      EXPECT_LE(std::fabs(a - num), 1e-5 * std::max(std::fabs(num), 1e-2 * gmax) + floor)
          << pv.name << "[" << k << "]: analytic " << a << ", numeric " << num;
      checked++;
    }
  }
  EXPECT_GT(checked, 0);
  apx_eval_free(&ev);
}

// Training steps on the CPU kernels through the whole compiler (apx_compile_file: the
// precision passes and master weights included): the MLP memorizes one fixed batch, so the
// loss must fall. At O2 the forward and backward run in fp16 with loss scale 1024 and
// OptimizerStep updates fp32 masters and refreshes the fp16 weights.
class TrainMlp : public ::testing::TestWithParam<ApxOptLevel> {};

TEST_P(TrainMlp, LossFallsOverSgdSteps) {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  apx_diag_init(&d);
  d.quiet = 1;
  apx_options_init(&o);
  o.model_path = "examples/mlp/model.onnx";
  o.opt_level = GetParam();
  o.verify_each_pass = 1;
  o.optimizer = APX_OPTIM_SGD;
  o.lr = 0.1f, o.momentum = 0.9f;
  o.loss_scale = 1024.0f, o.loss_scale_set = 1, o.loss_scale_mode = APX_LOSS_SCALE_STATIC;
  char err[256];
  ASSERT_EQ(apx_options_apply_preset(&o, err, sizeof err), 0) << err;
  ASSERT_EQ(apx_compile_file(&g, &o, &d), 0) << d.msg;
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &g), 0) << ev.err;
  int x = apx_graph_find_value(&g, "x"), labels = apx_graph_find_value(&g, "labels");
  ASSERT_GE(x, 0);
  ASSERT_GE(labels, 0);
  for (int64_t k = 0; k < apx_value_numel(&g.vals[x]); k++) apx_eval_set(&ev, x, k, std::sin(0.37 * (double)k));
  for (int64_t k = 0; k < apx_value_numel(&g.vals[labels]); k++) apx_eval_set(&ev, labels, k, (double)(k % 10));
  std::vector<double> loss;
  for (int step = 0; step < 60; step++) {
    ev.ctx.step = step;
    ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_ALL), 0) << ev.err;
    loss.push_back(apx_eval_get(&ev, g.loss, 0));
    ASSERT_TRUE(std::isfinite(loss.back())) << "step " << step;
  }
  std::string curve;
  for (size_t k = 0; k < loss.size(); k += 5) curve += " " + std::to_string(loss[k]);
  EXPECT_LT(loss.back(), 0.5 * loss.front()) << "loss every 5 steps:" << curve << ", last " << loss.back();
  apx_eval_free(&ev);
  apx_graph_free(&g);
}

INSTANTIATE_TEST_SUITE_P(Levels, TrainMlp, ::testing::Values(APX_O0, APX_O1, APX_O2, APX_O3),
                         [](const ::testing::TestParamInfo<ApxOptLevel> &i) { return "O" + std::to_string((int)i.param); });

INSTANTIATE_TEST_SUITE_P(Examples, ExampleModel, ::testing::Values("mlp", "cnn", "transformer"),
                         [](const ::testing::TestParamInfo<const char *> &i) { return std::string(i.param); });

}  // namespace
