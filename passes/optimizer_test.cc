// optimizer_test.cc - pass_optimizer: one fused UnscaleCheck and one multi-tensor
// OptimizerStep in the optimizer section, wired exactly as attrs.h documents.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

extern "C" {
#include "passes/autodiff.h"
#include "passes/optimizer.h"
#include "tests/testing/graph_eval.h"
}
#include "tests/testing/graph_builder.h"

namespace {

using apx_testing::Attr;
using apx_testing::GraphBuilder;

// x [4,3] -> MatMul w [3,2] -> Add b [2] -> LayerNorm(gamma [2]) -> mean -> loss
struct Net : GraphBuilder {
  int x, w, b, gamma, loss;
  std::vector<int> params;
  explicit Net(ApxOptimizerKind kind = APX_OPTIM_ADAMW) {
    o.optimizer = kind;
    x = Input("x", {4, 3}, APX_DT_F32);
    w = Param("w", {3, 2}, -1, 1, 0, APX_DT_F32);
    b = Param("b", {2}, -1, 1, 0, APX_DT_F32);
    gamma = Param("gamma", {2}, 0.5, 1.5, 0, APX_DT_F32);
    int y = Op("LayerNormalization", {Op("Add", {Op("MatMul", {x, w}), b}), gamma});
    loss = Op("ReduceMean", {Op("Mul", {y, y})}, {Attr::Int("keepdims", 0)});
    SetLoss(loss);
    params = {w, b, gamma};
    SortAndVerify();
  }
  void Build() {
    ASSERT_GE(RunPass(pass_autodiff), APX_PASS_CHANGED) << d.msg;
    ASSERT_GE(RunPass(pass_optimizer), APX_PASS_CHANGED) << d.msg;
  }
};

TEST(Optimizer, OptimizerSectionHasOneMultiTensorUpdate) {
  Net n;
  n.Build();
  ASSERT_EQ(n.CountOp(APX_OP_UnscaleCheck), 1);
  ASSERT_EQ(n.CountOp(APX_OP_OptimizerStep), 1);
  int uc = n.NodeByOp(APX_OP_UnscaleCheck), os = n.NodeByOp(APX_OP_OptimizerStep);
  EXPECT_EQ(n.g.nodes[uc].section, APX_SEC_OPTIMIZER);
  EXPECT_EQ(n.g.nodes[os].section, APX_SEC_OPTIMIZER);
  const ApxAttrOptimizer *a = APX_NODE_ATTRS(&n.g, os, ApxAttrOptimizer);
  EXPECT_EQ(a->n_params, 3);
  EXPECT_EQ(a->kind, APX_OPTIM_ADAMW);
  EXPECT_EQ(a->master_weights, 0);
  EXPECT_EQ(n.g.nodes[os].n_out, 0);
  // every node of the optimizer section comes after every backward node
  int last_bwd = -1, first_opt = n.g.n_order;
  for (int k = 0; k < n.g.n_order; k++) {
    int s = n.g.nodes[n.g.order[k]].section;
    if (s == APX_SEC_BACKWARD) last_bwd = k;
    if (s == APX_SEC_OPTIMIZER && k < first_opt) first_opt = k;
  }
  EXPECT_LT(last_bwd, first_opt);
}

TEST(Optimizer, UnscaleCheckTakesEveryGradientInParameterOrder) {
  Net n;
  n.Build();
  const ApxNode &uc = n.g.nodes[n.NodeByOp(APX_OP_UnscaleCheck)];
  ASSERT_EQ(uc.n_in, 4);
  EXPECT_EQ(uc.in[0], n.Value(APX_LOSS_SCALE_NAME));
  ASSERT_EQ(uc.n_out, APX_UNSCALE_OUT_FIRST_GRAD + 3);
  const ApxValue &fi = n.g.vals[uc.out[APX_UNSCALE_OUT_FOUND_INF]];
  const ApxValue &fb = n.g.vals[uc.out[APX_UNSCALE_OUT_FIRST_BAD]];
  const ApxValue &ns = n.g.vals[uc.out[APX_UNSCALE_OUT_NORM_SQ]];
  EXPECT_EQ(fi.dtype, APX_DT_F32);
  EXPECT_EQ(fb.dtype, APX_DT_I32);
  EXPECT_EQ(ns.dtype, APX_DT_F32);
  for (const ApxValue *v : {&fi, &fb, &ns}) {
    ASSERT_EQ(v->rank, 1);
    EXPECT_EQ(v->dims[0], 1);
  }
  for (int i = 0; i < 3; i++) {
    int p = n.params[(size_t)i];
    EXPECT_EQ(uc.in[1 + i], n.g.vals[p].grad) << i;
    const ApxValue &u = n.g.vals[uc.out[APX_UNSCALE_OUT_FIRST_GRAD + i]];
    EXPECT_EQ(u.dtype, APX_DT_F32);
    EXPECT_EQ(u.origin, p);
    EXPECT_TRUE(u.flags & APX_VALF_GRAD);
    EXPECT_EQ(u.rank, n.g.vals[p].rank);
    EXPECT_EQ(std::string(u.name), std::string("grad/") + n.g.vals[p].name + "/unscaled");
  }
}

TEST(Optimizer, AdamWInputsFollowTheDocumentedOrder) {
  Net n;
  n.o.lr = 3e-4f;
  n.Build();
  const ApxNode &uc = n.g.nodes[n.NodeByOp(APX_OP_UnscaleCheck)];
  const ApxNode &os = n.g.nodes[n.NodeByOp(APX_OP_OptimizerStep)];
  ASSERT_EQ(os.n_in, APX_OPTIM_IN_FIRST_GROUP + 3 * (2 + 2));
  EXPECT_EQ(os.in[APX_OPTIM_IN_FOUND_INF], uc.out[APX_UNSCALE_OUT_FOUND_INF]);
  EXPECT_EQ(os.in[APX_OPTIM_IN_NORM_SQ], uc.out[APX_UNSCALE_OUT_NORM_SQ]);
  const ApxValue &lr = n.g.vals[os.in[APX_OPTIM_IN_LR]];
  EXPECT_EQ(std::string(lr.name), "apx_lr");
  EXPECT_EQ(lr.kind, APX_VAL_STATE);
  EXPECT_EQ(*(const float *)lr.data, 3e-4f);
  const ApxValue &step = n.g.vals[os.in[APX_OPTIM_IN_STEP]];
  EXPECT_EQ(std::string(step.name), "apx_optimizer_step");
  EXPECT_EQ(step.dtype, APX_DT_I64);
  EXPECT_EQ(*(const int64_t *)step.data, 0);
  const char *state[2] = {"exp_avg", "exp_avg_sq"};
  for (int i = 0; i < 3; i++) {
    int p = n.params[(size_t)i];
    EXPECT_EQ(os.in[APX_OPTIM_IN_FIRST_GROUP + i], p);
    EXPECT_EQ(os.in[APX_OPTIM_IN_FIRST_GROUP + 3 + i], uc.out[APX_UNSCALE_OUT_FIRST_GRAD + i]);
    for (int s = 0; s < 2; s++) {
      const ApxValue &sv = n.g.vals[os.in[APX_OPTIM_IN_FIRST_GROUP + (2 + s) * 3 + i]];
      EXPECT_EQ(std::string(sv.name), std::string("opt/") + n.g.vals[p].name + "/" + state[s]);
      EXPECT_EQ(sv.kind, APX_VAL_STATE);
      EXPECT_EQ(sv.dtype, APX_DT_F32);
      EXPECT_EQ(apx_value_numel(&sv), apx_value_numel(&n.g.vals[p]));
      EXPECT_EQ(sv.data, nullptr);  // starts at zero: no bytes in the IR or the plan
    }
  }
}

TEST(Optimizer, AttributesComeFromTheOptions) {
  Net n;
  n.o.beta1 = 0.8f, n.o.beta2 = 0.99f, n.o.eps = 1e-6f, n.o.weight_decay = 0.05f;
  n.o.clip_grad_norm = 1.0f;
  n.Build();
  const ApxAttrOptimizer *a = APX_NODE_ATTRS(&n.g, n.NodeByOp(APX_OP_OptimizerStep), ApxAttrOptimizer);
  EXPECT_EQ(a->beta1, 0.8f);
  EXPECT_EQ(a->beta2, 0.99f);
  EXPECT_EQ(a->eps, 1e-6f);
  EXPECT_EQ(a->weight_decay, 0.05f);
  EXPECT_EQ(a->max_grad_norm, 1.0f); // clipping folds into the update
  EXPECT_EQ(a->lr, n.o.lr);
}

TEST(Optimizer, SgdWithoutMomentumHasNoStateAndNoDefaultDecay) {
  Net n(APX_OPTIM_SGD);
  n.Build();
  const ApxNode &os = n.g.nodes[n.NodeByOp(APX_OP_OptimizerStep)];
  const ApxAttrOptimizer *a = (const ApxAttrOptimizer *)os.typed;
  EXPECT_EQ(apx_optimizer_state_groups(a), 0);
  EXPECT_EQ(os.n_in, APX_OPTIM_IN_FIRST_GROUP + 3 * 2);
  EXPECT_EQ(a->weight_decay, 0.0f); // torch.optim.SGD default
}

TEST(Optimizer, SgdMomentumHasOneBufferPerParameter) {
  Net n(APX_OPTIM_SGD);
  n.o.momentum = 0.9f, n.o.nesterov = 1, n.o.weight_decay = 1e-4f, n.o.weight_decay_set = 1;
  n.Build();
  const ApxNode &os = n.g.nodes[n.NodeByOp(APX_OP_OptimizerStep)];
  const ApxAttrOptimizer *a = (const ApxAttrOptimizer *)os.typed;
  EXPECT_EQ(apx_optimizer_state_groups(a), 1);
  EXPECT_EQ(a->nesterov, 1);
  EXPECT_EQ(a->weight_decay, 1e-4f);
  ASSERT_EQ(os.n_in, APX_OPTIM_IN_FIRST_GROUP + 3 * 3);
  EXPECT_EQ(std::string(n.g.vals[os.in[APX_OPTIM_IN_FIRST_GROUP + 6]].name), "opt/w/momentum");
}

TEST(Optimizer, LambDefaultsToApexEps) {
  Net n(APX_OPTIM_LAMB);
  n.Build();
  const ApxAttrOptimizer *a = APX_NODE_ATTRS(&n.g, n.NodeByOp(APX_OP_OptimizerStep), ApxAttrOptimizer);
  EXPECT_EQ(a->kind, APX_OPTIM_LAMB);
  EXPECT_EQ(a->eps, 1e-6f);
  EXPECT_EQ(apx_optimizer_state_groups(a), 2);
}

TEST(Optimizer, OnlyParametersWithGradientsAreUpdated) {
  GraphBuilder b;
  int w = b.Param("w", {3}, -1, 1, 0, APX_DT_F32), dead = b.Param("dead", {3}, -1, 1, 0, APX_DT_F32);
  b.Op("Relu", {dead});
  b.WeightedSumLoss(b.Op("Tanh", {w}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  ASSERT_GE(b.RunPass(pass_optimizer), APX_PASS_CHANGED) << b.d.msg;
  const ApxNode &os = b.g.nodes[b.NodeByOp(APX_OP_OptimizerStep)];
  EXPECT_EQ(((const ApxAttrOptimizer *)os.typed)->n_params, 1);
  EXPECT_EQ(os.in[APX_OPTIM_IN_FIRST_GROUP], w);
}

TEST(Optimizer, RunsOnceAndNeedsAutodiffFirst) {
  {
    Net n;
    EXPECT_EQ(pass_optimizer(&n.g, &n.o, &n.d), APX_PASS_ERROR);
    EXPECT_EQ(n.d.code, APX_EXIT_RUNTIME);
  }
  {
    Net n;
    n.Build();
    int nodes = n.g.n_nodes;
    EXPECT_EQ(n.RunPass(pass_optimizer), APX_PASS_UNCHANGED);
    EXPECT_EQ(n.g.n_nodes, nodes);
  }
}

// One AdamW step against torch.optim.AdamW's formula (attrs.h), computed here in double
// from the evaluator's gradients. Needs the CPU kernels of UnscaleCheck and OptimizerStep.
TEST(Optimizer, OneAdamWStepFollowsTorchAdamW) {
  if (!apx_cpu_supports(APX_OP_UnscaleCheck, APX_DT_F32) || !apx_cpu_supports(APX_OP_OptimizerStep, APX_DT_F32))
    GTEST_SKIP() << "blocked: no CPU kernel for UnscaleCheck/OptimizerStep yet";
  Net n;
  n.o.lr = 0.1f, n.o.weight_decay = 0.01f, n.o.loss_scale = 256.0f;
  n.Build();
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &n.g), 0) << ev.err;
  for (int i = 0; i < 12; i++) apx_eval_set(&ev, n.x, i, 0.3 * (i % 4) - 0.4);
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  std::vector<std::vector<double>> p0, g0;
  for (int p : n.params) {
    std::vector<double> pv, gv;
    for (int64_t k = 0; k < apx_value_numel(&n.g.vals[p]); k++) {
      pv.push_back(apx_eval_get(&ev, p, k));
      gv.push_back(apx_eval_get(&ev, n.g.vals[p].grad, k) / 256.0);
    }
    p0.push_back(pv), g0.push_back(gv);
  }
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_OPTIMIZER), 0) << ev.err;
  const double lr = 0.1, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (size_t i = 0; i < n.params.size(); i++)
    for (size_t k = 0; k < p0[i].size(); k++) {
      double g = g0[i][k], p = p0[i][k] * (1 - lr * wd);
      double m = (1 - b1) * g, v = (1 - b2) * g * g;
      double want = p - lr / (1 - b1) * m / (std::sqrt(v) / std::sqrt(1 - b2) + eps);
      EXPECT_NEAR(apx_eval_get(&ev, n.params[i], (int64_t)k), want, 1e-5 * std::max(1.0, std::fabs(want)));
    }
  apx_eval_free(&ev);
}

}  // namespace

namespace {

// An inf in one gradient: UnscaleCheck flags it and names the parameter's index, and
// OptimizerStep leaves parameters, state and the step counter alone (DESIGN.md 9).
TEST(Optimizer, OverflowSkipsTheStepAndNamesTheFirstBadGradient) {
  if (!apx_cpu_supports(APX_OP_UnscaleCheck, APX_DT_F32) || !apx_cpu_supports(APX_OP_OptimizerStep, APX_DT_F32))
    GTEST_SKIP() << "blocked: no CPU kernel for UnscaleCheck/OptimizerStep yet";
  Net n;
  n.Build();
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &n.g), 0) << ev.err;
  for (int i = 0; i < 12; i++) apx_eval_set(&ev, n.x, i, 0.25 * (i % 3) - 0.2);
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  apx_eval_set(&ev, n.g.vals[n.b].grad, 1, INFINITY); // parameter 1 of the step: b
  std::vector<double> before;
  for (int p : n.params)
    for (int64_t k = 0; k < apx_value_numel(&n.g.vals[p]); k++) before.push_back(apx_eval_get(&ev, p, k));
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_OPTIMIZER), 0) << ev.err;
  const ApxNode &uc = n.g.nodes[n.NodeByOp(APX_OP_UnscaleCheck)];
  EXPECT_EQ(apx_eval_get(&ev, uc.out[APX_UNSCALE_OUT_FOUND_INF], 0), 1.0);
  EXPECT_EQ(apx_eval_get(&ev, uc.out[APX_UNSCALE_OUT_FIRST_BAD], 0), 1.0);
  size_t i = 0;
  for (int p : n.params)
    for (int64_t k = 0; k < apx_value_numel(&n.g.vals[p]); k++) EXPECT_EQ(apx_eval_get(&ev, p, k), before[i++]);
  EXPECT_EQ(apx_eval_get(&ev, n.Value("apx_optimizer_step"), 0), 0.0);
  apx_eval_free(&ev);
}

}  // namespace
