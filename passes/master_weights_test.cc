// master_weights_test.cc - pass_master_weights: after the O2 precision pass stored
// parameters in half with fp32 masters (simulated here exactly as passes/cast_insert.h
// documents it), OptimizerStep updates the masters and refreshes the half copies.
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "kernels/half.h"
#include "passes/autodiff.h"
#include "passes/master_weights.h"
#include "passes/optimizer.h"
}
#include "tests/testing/graph_builder.h"

namespace {

using apx_testing::Attr;
using apx_testing::GraphBuilder;

struct Net : GraphBuilder {
  int x, w, b, loss;
  Net() {
    x = Input("x", {4, 3}, APX_DT_F32);
    w = Param("w", {3, 2}, -1, 1, 0, APX_DT_F32);
    b = Param("b", {2}, -1, 1, 0, APX_DT_F32);
    loss = Op("ReduceSum", {Op("Add", {Op("MatMul", {x, w}), b})}, {Attr::Int("keepdims", 0)});
    SetLoss(loss);
    SortAndVerify();
    EXPECT_GE(RunPass(pass_autodiff), APX_PASS_CHANGED) << d.msg;
    EXPECT_GE(RunPass(pass_optimizer), APX_PASS_CHANGED) << d.msg;
  }
  // What cast_insert does at O2 for parameter p: data to fp16 in place, the fp32 data kept
  // as STATE "<p>_fp32_master" with APX_VALF_MASTER and origin p.
  int StoreInHalf(int p) {
    ApxValue pv = g.vals[p];
    int64_t n = apx_value_numel(&pv);
    std::string mn = std::string(pv.name) + "_fp32_master";
    int m = apx_graph_add_value(&g, &d, mn.c_str(), APX_VAL_STATE, APX_DT_F32, pv.rank, pv.dims);
    EXPECT_GE(m, 0) << d.msg;
    g.vals[m].data = pv.data;
    g.vals[m].flags |= APX_VALF_MASTER;
    g.vals[m].origin = p;
    uint16_t *h = (uint16_t *)apx_arena_alloc(&g.arena, (size_t)n * 2);
    for (int64_t k = 0; k < n; k++) h[k] = apx_f32_to_f16(((const float *)pv.data)[k]);
    g.vals[p].data = h;
    g.vals[p].dtype = APX_DT_F16;
    return m;
  }
};

TEST(MasterWeights, OptimizerStepUpdatesMastersAndRefreshesHalfCopies) {
  Net n;
  n.o.master_weights = APX_TRI_ON;
  int mw = n.StoreInHalf(n.w); // b stays fp32 (like a BatchNorm parameter at O2)
  int os = n.NodeByOp(APX_OP_OptimizerStep);
  std::vector<int> old(n.g.nodes[os].in, n.g.nodes[os].in + n.g.nodes[os].n_in);
  // w, its master and b are produced by no node: no edge changes, the order stands as it is
  std::vector<int> order(n.g.order, n.g.order + n.g.n_order);
  ASSERT_EQ(pass_master_weights(&n.g, &n.o, &n.d), APX_PASS_CHANGED_KEEPS_ORDER) << n.d.msg;
  ASSERT_TRUE(n.SortAndVerify());
  EXPECT_EQ(std::vector<int>(n.g.order, n.g.order + n.g.n_order), order);
  const ApxNode &node = n.g.nodes[os];
  const ApxAttrOptimizer *a = (const ApxAttrOptimizer *)node.typed;
  EXPECT_EQ(a->master_weights, 1);
  int np = 2, k = apx_optimizer_state_groups(a);
  ASSERT_EQ(node.n_in, APX_OPTIM_IN_FIRST_GROUP + np * (3 + k));
  const int f = APX_OPTIM_IN_FIRST_GROUP;
  // P: the fp32 master for w, b itself
  EXPECT_EQ(node.in[f + 0], mw);
  EXPECT_EQ(node.in[f + 1], n.b);
  // G and state groups unchanged
  for (int i = f + np; i < f + np * (2 + k); i++) EXPECT_EQ(node.in[i], old[(size_t)i]) << i;
  // H: the half parameter w, none for b
  EXPECT_EQ(node.in[f + np * (2 + k) + 0], n.w);
  EXPECT_EQ(node.in[f + np * (2 + k) + 1], -1);
  EXPECT_EQ(n.g.vals[node.in[f + np]].dtype, APX_DT_F32); // gradients fp32 for the masters
}

// A master that a node makes (not the case after cast_insert, built here) adds an edge into
// OptimizerStep: the pass says the order must be made again.
TEST(MasterWeights, ANewEdgeAsksForTheOrderAgain) {
  Net n;
  int mw = n.StoreInHalf(n.w);
  int made = n.Op("Identity", {mw});
  n.g.vals[made].kind = APX_VAL_STATE;
  n.g.vals[made].flags |= APX_VALF_MASTER;
  n.g.vals[made].origin = n.w;
  n.g.vals[mw].flags &= ~(uint32_t)APX_VALF_MASTER;
  ASSERT_TRUE(n.SortAndVerify());
  EXPECT_EQ(n.RunPass(pass_master_weights), APX_PASS_CHANGED) << n.d.msg;
  int os = n.NodeByOp(APX_OP_OptimizerStep);
  EXPECT_EQ(n.g.nodes[os].in[APX_OPTIM_IN_FIRST_GROUP], made);
}

TEST(MasterWeights, NothingToDoWithoutHalfParameters) {
  Net n;
  EXPECT_EQ(n.RunPass(pass_master_weights), APX_PASS_UNCHANGED);
  EXPECT_EQ(APX_NODE_ATTRS(&n.g, n.NodeByOp(APX_OP_OptimizerStep), ApxAttrOptimizer)->master_weights, 0);
}

TEST(MasterWeights, RunsOnce) {
  Net n;
  n.StoreInHalf(n.w);
  ASSERT_EQ(n.RunPass(pass_master_weights), APX_PASS_CHANGED_KEEPS_ORDER) << n.d.msg;
  int nin = n.g.nodes[n.NodeByOp(APX_OP_OptimizerStep)].n_in;
  EXPECT_EQ(n.RunPass(pass_master_weights), APX_PASS_UNCHANGED);
  EXPECT_EQ(n.g.nodes[n.NodeByOp(APX_OP_OptimizerStep)].n_in, nin);
}

TEST(MasterWeights, HalfParameterWithoutMasterIsInternalErrorWhenMastersAreOn) {
  Net n;
  n.o.master_weights = APX_TRI_ON;
  n.g.vals[n.w].dtype = APX_DT_F16; // converted, but no master kept
  EXPECT_EQ(pass_master_weights(&n.g, &n.o, &n.d), APX_PASS_ERROR);
  EXPECT_EQ(n.d.code, APX_EXIT_RUNTIME);
  EXPECT_NE(std::string(n.d.msg).find("parameter 'w' is fp16 but has no fp32 master"), std::string::npos)
      << n.d.msg;
}

TEST(MasterWeights, O3HalfParametersAreUpdatedInPlace) {
  Net n;
  n.o.master_weights = APX_TRI_OFF;
  n.g.vals[n.w].dtype = APX_DT_F16;
  EXPECT_EQ(n.RunPass(pass_master_weights), APX_PASS_UNCHANGED);
  const ApxNode &node = n.g.nodes[n.NodeByOp(APX_OP_OptimizerStep)];
  EXPECT_EQ(node.in[APX_OPTIM_IN_FIRST_GROUP], n.w);
}

}  // namespace
