// sync_bn_test.cc - pass_sync_bn: training-mode BatchNorm rewritten into statistics that are
// summed over the ranks (passes/sync_bn.h). With one process the rewrite must train exactly
// like BatchNormalization (float64, three SGD steps: loss, gradients, weights, running
// statistics, up to the fp32 rounding of BatchNormalization's saved statistics), and its
// gradients match float64 central differences; the multi-rank equality to one process on the combined batch is
// tests/dp:dp_train_test's.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

extern "C" {
#include "passes/autodiff.h"
#include "passes/bucketing.h"
#include "passes/optimizer.h"
#include "passes/sync_bn.h"
#include "tests/testing/graph_eval.h"
}
#include "tests/testing/graph_builder.h"

namespace {

using apx_testing::Attr;
using apx_testing::GraphBuilder;

// x (a parameter, so dX is needed) -> BatchNorm (training) -> Relu -> weighted sum. float64
// throughout. (Not x * w: BatchNorm is invariant to a per-channel scale, so that gradient is
// a cancellation of large terms, ~0.)
struct Net : GraphBuilder {
  int x, scale, bias, mean, var, bn;
  // unbiased: PyTorch's running variance (the loader's choice for PyTorch models)
  explicit Net(bool sync, bool unbiased = false) {
    g.bn_unbiased_running_var = unbiased;
    o.sync_bn = sync;
    o.optimizer = APX_OPTIM_SGD;
    o.lr = 0.1f;
    x = Param("x", {4, 3, 3, 3});
    scale = Param("bn.scale", {3}, 0.5, 1.5);
    bias = Param("bn.bias", {3});
    mean = Param("bn.running_mean", {3});
    var = Param("bn.running_var", {3}, 0.5, 1.5);
    auto y = Node("BatchNormalization", {x, scale, bias, mean, var}, 3,
                  {Attr::Int("training_mode", 1), Attr::Float("momentum", 0.8f), Attr::Float("epsilon", 1e-3f)},
                  "bn");
    bn = last_node;
    WeightedSumLoss(Op("Relu", {y[0]}));
    SortAndVerify();
    EXPECT_GE(RunPass(pass_autodiff), APX_PASS_CHANGED) << d.msg;
    EXPECT_GE(RunPass(pass_optimizer), APX_PASS_CHANGED) << d.msg;
    EXPECT_EQ(RunPass(pass_sync_bn), sync ? APX_PASS_CHANGED : APX_PASS_UNCHANGED) << d.msg;
  }
};

TEST(SyncBn, RewritesBatchNormAndItsGradientIntoReducedStatistics) {
  Net n(true);
  EXPECT_EQ(n.CountOp(APX_OP_BatchNormalization), 0);
  EXPECT_EQ(n.CountOp(APX_OP_BatchNormGrad), 0);
  int fwd = 0, bwd = 0;
  for (int i = 0; i < n.g.n_nodes; i++) {
    const ApxNode &nd = n.g.nodes[i];
    if (nd.op != APX_OP_Allreduce || (nd.flags & APX_NODEF_DEAD)) continue;
    const ApxAttrAllreduce *a = (const ApxAttrAllreduce *)nd.typed;
    EXPECT_EQ(a->bucket, -1);
    EXPECT_EQ(a->average, 0);  // plain sums of statistics
    EXPECT_EQ(nd.compute, APX_DT_F64);
    (nd.section == APX_SEC_FORWARD ? fwd : bwd)++;
  }
  EXPECT_EQ(fwd, 2);  // [sum, count], [sum of squared deviations]
  EXPECT_EQ(bwd, 1);  // [sum dY, sum dY * xhat]
  // the BatchNorm's own outputs are produced by the rewrite: consumers unchanged
  const ApxNode &bn = n.g.nodes[n.bn];
  EXPECT_TRUE(bn.flags & APX_NODEF_DEAD);
  int y = bn.out[0], p = n.g.vals[y].producer;
  ASSERT_GE(p, 0);
  EXPECT_FALSE(n.g.nodes[p].flags & APX_NODEF_DEAD);
  EXPECT_EQ(n.g.nodes[p].origin, n.bn);
  // statistics reductions are not gradient buckets
  EXPECT_EQ(n.RunPass(pass_bucketing), APX_PASS_CHANGED) << n.d.msg;
  int buckets = apx_buckets_collect(&n.g, nullptr, 0);
  EXPECT_GE(buckets, 1);
  EXPECT_EQ(n.CountOp(APX_OP_Allreduce), 3 + buckets);
}

void TrainsLikeBatchNormalization(bool unbiased) {
  Net a(false, unbiased), b(true, unbiased);
  ApxEval ea, eb;
  ASSERT_EQ(apx_eval_init(&ea, &a.g), 0) << ea.err;
  ASSERT_EQ(apx_eval_init(&eb, &b.g), 0) << eb.err;
  double worst = 0;
  std::string worst_name;
  for (int step = 0; step < 3; step++) {
    ASSERT_EQ(apx_eval_run(&ea, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ea.err;
    ASSERT_EQ(apx_eval_run(&eb, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << eb.err;
    if (step == 0) {  // the rewrite's gradients against float64 central differences
      for (const char *p : {"x", "bn.scale", "bn.bias"}) {
        int pv = apx_graph_find_value(&b.g, p), gv = b.g.vals[pv].grad;
        int64_t n = apx_value_numel(&b.g.vals[pv]);
        double scale = apx_eval_get(&eb, apx_graph_find_value(&b.g, APX_LOSS_SCALE_NAME), 0);
        for (int64_t k = 0; k < n; k++) {
          double p0 = apx_eval_get(&eb, pv, k), h = 1e-5, l[2];
          for (int s = 0; s < 2; s++) {
            apx_eval_set(&eb, pv, k, p0 + (s ? -h : h));
            ASSERT_EQ(apx_eval_run(&eb, APX_EVAL_FORWARD), 0) << eb.err;
            l[s] = apx_eval_get(&eb, b.g.loss, 0);
          }
          apx_eval_set(&eb, pv, k, p0);
          double fd = (l[0] - l[1]) / (2 * h), an = apx_eval_get(&eb, gv, k) / scale;
          EXPECT_NEAR(an, fd, 1e-7 * std::max(1.0, std::fabs(fd))) << p << "[" << k << "]";
        }
      }
      ASSERT_EQ(apx_eval_run(&eb, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << eb.err;
    }
    ASSERT_EQ(apx_eval_run(&ea, APX_EVAL_OPTIMIZER), 0) << ea.err;
    ASSERT_EQ(apx_eval_run(&eb, APX_EVAL_OPTIMIZER), 0) << eb.err;
    EXPECT_NEAR(apx_eval_get(&ea, a.g.loss, 0), apx_eval_get(&eb, b.g.loss, 0), 256 * FLT_EPSILON) << "step " << step;
    // every parameter, gradient and state of the plain graph has its twin by name
    for (int v = 0; v < a.g.n_vals; v++) {
      const ApxValue &val = a.g.vals[v];
      bool grad = (val.flags & APX_VALF_GRAD) && val.producer >= 0 && !(a.g.nodes[val.producer].flags & APX_NODEF_DEAD);
      if (val.kind != APX_VAL_PARAM && val.kind != APX_VAL_STATE && !grad) continue;
      int u = apx_graph_find_value(&b.g, val.name);
      ASSERT_GE(u, 0) << val.name;
      for (int64_t k = 0; k < apx_value_numel(&val); k++) {
        double x = apx_eval_get(&ea, v, k), y = apx_eval_get(&eb, u, k);
        double e = std::fabs(x - y) / std::max(1.0, std::fabs(x));
        if (e > worst) worst = e, worst_name = val.name;
      }
    }
  }
  // BatchNormalization keeps its saved batch statistics in fp32 (attrs.h), so the plain
  // graph's float64 gradients carry fp32 rounding, amplified by the cancellation in
  // dX = k (dY - mean(dY) - xhat mean(dY xhat)); the rewrite keeps them in float64 (checked
  // against central differences above)
  EXPECT_LT(worst, 256 * FLT_EPSILON) << "worst: " << worst_name;
  std::printf("sync-bn vs BatchNormalization, one process, 3 SGD steps (f64): worst rel error %.3g (%s)\n", worst,
              worst_name.c_str());
  apx_eval_free(&ea);
  apx_eval_free(&eb);
}

TEST(SyncBn, OneProcessTrainsExactlyLikeBatchNormalization) { TrainsLikeBatchNormalization(false); }

// PyTorch's running variance, x n / (n - 1): the rewrite's S2 / (CNT - 1) is the kernel's
TEST(SyncBn, UnbiasedRunningVarianceLikeBatchNormalization) {
  TrainsLikeBatchNormalization(true);
  Net pop(false), unb(false, true);
  ApxEval ep, eu;
  ASSERT_EQ(apx_eval_init(&ep, &pop.g), 0) << ep.err;
  ASSERT_EQ(apx_eval_init(&eu, &unb.g), 0) << eu.err;
  for (ApxEval *e : {&ep, &eu}) {
    ASSERT_EQ(apx_eval_run(e, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << e->err;
    ASSERT_EQ(apx_eval_run(e, APX_EVAL_OPTIMIZER), 0) << e->err;
  }
  // running_var' = v0 m + var_b (1 - m): the batch terms differ by n / (n - 1), n = 4 * 9
  int rv = apx_graph_find_value(&pop.g, "bn.running_var");
  ASSERT_GE(rv, 0);
  const double m = 0.8, n = 36;
  std::vector<double> v0 = {0, 0, 0};
  {
    Net fresh(false);
    ApxEval e0;
    ASSERT_EQ(apx_eval_init(&e0, &fresh.g), 0) << e0.err;
    for (int c = 0; c < 3; c++) v0[c] = apx_eval_get(&e0, rv, c);
    apx_eval_free(&e0);
  }
  for (int c = 0; c < 3; c++) {
    double bp = (apx_eval_get(&ep, rv, c) - v0[c] * m) / (1 - m);
    double bu = (apx_eval_get(&eu, apx_graph_find_value(&unb.g, "bn.running_var"), c) - v0[c] * m) / (1 - m);
    EXPECT_NEAR(bu, bp * n / (n - 1), 1e-6 * bu) << "channel " << c;
  }
  apx_eval_free(&ep);
  apx_eval_free(&eu);
}

TEST(SyncBn, NoopWithoutTheOption) {
  Net n(false);
  EXPECT_EQ(n.CountOp(APX_OP_BatchNormalization), 1);
  EXPECT_EQ(n.CountOp(APX_OP_Allreduce), 0);
}

// O1/O3 decide BatchNorm in half (x, y half; scale, bias, statistics fp32): the statistics
// are computed and allreduced in fp32 between Cast(x -> fp32) and Cast(y -> fp16). (The
// 2-rank equality to one process at O3 is tests/dp:dp_train_test's.)
TEST(SyncBn, HalfPrecisionBatchNormReducesItsStatisticsInFp32) {
  GraphBuilder b;
  b.o.sync_bn = 1;
  int x = b.Input("x", {2, 3, 2, 2}, APX_DT_F16);
  int s = b.Param("s", {3}, -1, 1, 0, APX_DT_F32), bias = b.Param("b", {3}, -1, 1, 0, APX_DT_F32);
  int m = b.Param("m", {3}, -1, 1, 0, APX_DT_F32), v = b.Param("v", {3}, 0.5, 1, 0, APX_DT_F32);
  auto y = b.Node("BatchNormalization", {x, s, bias, m, v}, 3, {Attr::Int("training_mode", 1)}, "bn1");
  int bn = b.last_node;
  b.g.nodes[bn].compute = APX_DT_F16;  // as O3 decides it
  ASSERT_EQ(b.g.vals[y[0]].dtype, APX_DT_F16);
  EXPECT_EQ(pass_sync_bn(&b.g, &b.o, &b.d), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_TRUE(b.g.nodes[bn].flags & APX_NODEF_DEAD);
  int allreduces = 0, casts_in = 0;
  for (int i = 0; i < b.g.n_nodes; i++) {
    const ApxNode &nd = b.g.nodes[i];
    if (nd.flags & APX_NODEF_DEAD) continue;
    if (nd.op == APX_OP_Allreduce) {
      allreduces++;
      EXPECT_EQ(nd.compute, APX_DT_F32);
      for (int k = 0; k < nd.n_in; k++) EXPECT_EQ(b.g.vals[nd.in[k]].dtype, APX_DT_F32) << nd.name;
    }
    if (nd.op == APX_OP_Cast && nd.in[0] == x) {
      casts_in++;
      EXPECT_EQ(b.g.vals[nd.out[0]].dtype, APX_DT_F32);
    }
  }
  EXPECT_EQ(allreduces, 2);
  EXPECT_EQ(casts_in, 1);
  // y keeps its value and half type, written once by a narrowing Cast of the fp32 result
  int p = b.g.vals[y[0]].producer;
  ASSERT_GE(p, 0);
  EXPECT_EQ(b.g.nodes[p].op, APX_OP_Cast);
  EXPECT_EQ(b.g.vals[y[0]].dtype, APX_DT_F16);
  EXPECT_EQ(b.g.vals[b.g.nodes[p].in[0]].dtype, APX_DT_F32);
  // the running statistics stay fp32
  EXPECT_EQ(b.g.vals[y[1]].dtype, APX_DT_F32);
  EXPECT_EQ(b.g.vals[y[2]].dtype, APX_DT_F32);
}

}  // namespace
