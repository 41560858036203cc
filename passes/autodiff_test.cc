// autodiff_test.cc - pass_autodiff, spec by spec: the seed, which values get gradients and
// how they are accumulated and reduced, state binding, provenance, errors. Every pass run
// goes through GraphBuilder::RunPass (toposort + apx_graph_verify after a change).
#include <gtest/gtest.h>

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

// x (input [4,3]) -> Gemm(w1 [3,5], b1 [5]) -> Relu -> Gemm(w2 [5,2]) -> loss
struct Mlp : GraphBuilder {
  int x, w1, b1, w2, h, y, loss;
  Mlp() {
    x = Input("x", {4, 3}, APX_DT_F32);
    w1 = Param("w1", {3, 5}, -1, 1, 0, APX_DT_F32);
    b1 = Param("b1", {5}, -1, 1, 0, APX_DT_F32);
    w2 = Param("w2", {5, 2}, -1, 1, 0, APX_DT_F32);
    h = Op("Relu", {Op("Gemm", {x, w1, b1})});
    y = Op("Gemm", {h, w2});
    loss = Op("ReduceMean", {y}, {Attr::Int("keepdims", 0)});
    SetLoss(loss);
    SortAndVerify();
  }
};

bool IsForwardNode(const ApxGraph &g, int id) { return g.nodes[id].onnx_index >= 0; }

// Both passes only append nodes: the backward and optimizer sections sort after the forward
// one, so each extends the order instead of asking for a sort (RunPass checks that the order
// is the one a fresh sort gives).
TEST(Autodiff, AutodiffAndOptimizerExtendTheOrder) {
  Mlp m;
  int n_forward = m.g.n_order;
  EXPECT_EQ(m.RunPass(pass_autodiff), APX_PASS_CHANGED_KEEPS_ORDER) << m.d.msg;
  EXPECT_EQ(m.RunPass(pass_optimizer), APX_PASS_CHANGED_KEEPS_ORDER) << m.d.msg;
  EXPECT_GT(m.g.n_order, n_forward);
}

TEST(Autodiff, SeedIsLossScale) {
  Mlp m;
  m.o.loss_scale = 512.0f;
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  ASSERT_EQ(m.CountOp(APX_OP_LossScaleSeed), 1);
  const ApxNode &seed = m.g.nodes[m.NodeByOp(APX_OP_LossScaleSeed)];
  EXPECT_EQ(seed.section, APX_SEC_BACKWARD);
  ASSERT_EQ(seed.n_in, 2);
  EXPECT_EQ(seed.in[0], m.loss);
  int scale = m.Value(APX_LOSS_SCALE_NAME);
  ASSERT_GE(scale, 0);
  EXPECT_EQ(seed.in[1], scale);
  const ApxValue &sv = m.g.vals[scale];
  EXPECT_EQ(sv.kind, APX_VAL_STATE);
  EXPECT_EQ(sv.dtype, APX_DT_F32);
  ASSERT_EQ(sv.rank, 1);
  EXPECT_EQ(sv.dims[0], 1);
  ASSERT_NE(sv.data, nullptr);
  EXPECT_EQ(*(const float *)sv.data, 512.0f);
  EXPECT_EQ(((const ApxAttrLossScaleSeed *)seed.typed)->multiplier, 1.0f);
  const ApxValue &dl = m.g.vals[seed.out[0]];
  EXPECT_EQ(dl.dtype, APX_DT_F32);
  EXPECT_EQ(dl.rank, m.g.vals[m.loss].rank);
  // the seed is the first backward node and every other backward node depends on it
  for (int k = 0; k < m.g.n_order; k++) {
    const ApxNode &n = m.g.nodes[m.g.order[k]];
    if (n.section == APX_SEC_BACKWARD) {
      EXPECT_EQ(n.op, APX_OP_LossScaleSeed);
      break;
    }
  }
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &m.g), 0) << ev.err;
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  EXPECT_EQ(apx_eval_get(&ev, seed.out[0], 0), 512.0);
  apx_eval_free(&ev);
}

TEST(Autodiff, EveryParameterGetsANamedGradient) {
  Mlp m;
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  for (int p : {m.w1, m.b1, m.w2}) {
    const ApxValue &pv = m.g.vals[p];
    ASSERT_GE(pv.grad, 0) << pv.name;
    const ApxValue &gv = m.g.vals[pv.grad];
    EXPECT_EQ(std::string(gv.name), std::string("grad/") + pv.name);
    EXPECT_TRUE(gv.flags & APX_VALF_GRAD);
    EXPECT_EQ(gv.origin, p);
    EXPECT_EQ(gv.dtype, pv.dtype);
    EXPECT_EQ(gv.rank, pv.rank);
    for (int i = 0; i < pv.rank; i++) EXPECT_EQ(gv.dims[i], pv.dims[i]);
    ASSERT_GE(gv.producer, 0);
    EXPECT_EQ(m.g.nodes[gv.producer].section, APX_SEC_BACKWARD);
  }
  // the data input gets no gradient
  EXPECT_EQ(m.g.vals[m.x].grad, -1);
}

TEST(Autodiff, FrozenParamHasNoGradient) {
  Mlp m;
  m.o.frozen.items[m.o.frozen.n++] = "w1";
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  EXPECT_EQ(m.g.vals[m.w1].grad, -1);
  EXPECT_GE(m.g.vals[m.b1].grad, 0);
  EXPECT_GE(m.g.vals[m.w2].grad, 0);
  // nothing computes dW1: no backward node reads x (only dW1 = x^T dY would)
  for (int i = 0; i < m.g.n_nodes; i++) {
    const ApxNode &n = m.g.nodes[i];
    if (n.section != APX_SEC_BACKWARD) continue;
    for (int k = 0; k < n.n_in; k++) EXPECT_NE(n.in[k], m.x) << n.name;
  }
}

TEST(Autodiff, FrozenInitializerFromTheLoaderHasNoGradient) {
  GraphBuilder b;
  int w = b.Param("w", {3}), f = b.Param("f", {3});
  b.g.vals[f].kind = APX_VAL_CONST; // what the loader makes of --frozen f
  b.g.vals[f].flags |= APX_VALF_FROZEN;
  b.WeightedSumLoss(b.Op("Mul", {w, f}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_GE(b.g.vals[w].grad, 0);
  EXPECT_EQ(b.g.vals[f].grad, -1);
}

TEST(Autodiff, SharedValueGradientsAccumulate) {
  GraphBuilder b;
  int x = b.Param("x", {2, 3});
  int t = b.Op("Tanh", {x});
  int two = b.Op("Add", {b.Op("Exp", {t}), b.Op("Neg", {t})}); // t has 2 consumers
  b.WeightedSumLoss(two);
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  // d(t) = Add(contribution from Exp, contribution from Neg), named grad/<t>
  int gt = b.Value(std::string("grad/") + b.g.vals[t].name);
  ASSERT_GE(gt, 0);
  const ApxNode &acc = b.g.nodes[b.g.vals[gt].producer];
  EXPECT_EQ(acc.op, APX_OP_Add);
  EXPECT_EQ(acc.section, APX_SEC_BACKWARD);
  EXPECT_EQ(acc.origin, b.g.vals[t].producer);
  // the Tanh gradient consumes the accumulated value
  const ApxNode &tg = b.g.nodes[b.NodeByOp(APX_OP_TanhGrad)];
  EXPECT_EQ(tg.in[0], gt);
}

TEST(Autodiff, ThreeContributionsUseOneSum) {
  GraphBuilder b;
  int x = b.Param("x", {4});
  int y = b.Op("Add", {b.Op("Mul", {x, x}), b.Op("Exp", {x})}); // x used 3 times
  b.WeightedSumLoss(y);
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  int gx = b.g.vals[x].grad;
  ASSERT_GE(gx, 0);
  const ApxNode &sum = b.g.nodes[b.g.vals[gx].producer];
  EXPECT_EQ(sum.op, APX_OP_Sum);
  EXPECT_EQ(sum.n_in, 3);
  EXPECT_EQ(std::string(b.g.vals[gx].name), "grad/x");
}

TEST(Autodiff, BroadcastGradientReducedToShape) {
  GraphBuilder b;
  int a = b.Param("a", {2, 3}), bias = b.Param("bias", {3});
  b.WeightedSumLoss(b.Op("Add", {a, bias}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  int gb = b.g.vals[bias].grad;
  ASSERT_GE(gb, 0);
  const ApxNode &r = b.g.nodes[b.g.vals[gb].producer];
  EXPECT_EQ(r.op, APX_OP_ReduceSumTo);
  ASSERT_EQ(b.g.vals[gb].rank, 1);
  EXPECT_EQ(b.g.vals[gb].dims[0], 3);
  // the same-shaped operand takes the incoming gradient as is: no reduction for it
  EXPECT_EQ(b.CountOp(APX_OP_ReduceSumTo), 1);
}

TEST(Autodiff, IntegerInputsNeverGetGradients) {
  GraphBuilder b;
  int emb = b.Param("emb", {5, 3});
  int idx = b.Data("idx", APX_VAL_PARAM, APX_DT_I64, {4}, {0, 1, 1, 4}); // an int "initializer"
  b.WeightedSumLoss(b.Op("Gather", {emb, idx}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_GE(b.g.vals[emb].grad, 0);
  EXPECT_EQ(b.g.vals[idx].grad, -1);
  const ApxNode &gg = b.g.nodes[b.NodeByOp(APX_OP_GatherGrad)];
  EXPECT_EQ(gg.in[1], idx);
}

TEST(Autodiff, BatchNormStatsBoundBack) {
  GraphBuilder b;
  int x = b.Param("x", {2, 3, 2, 2}), s = b.Param("scale", {3}), bias = b.Param("bias", {3});
  int mean = b.Param("bn.running_mean", {3}), var = b.Param("bn.running_var", {3}, 0.5, 1.5);
  auto y = b.Node("BatchNormalization", {x, s, bias, mean, var}, 1, {Attr::Int("training_mode", 1)}, "bn");
  b.WeightedSumLoss(y[0]);
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  // running statistics are state, not parameters
  EXPECT_EQ(b.g.vals[mean].kind, APX_VAL_STATE);
  EXPECT_EQ(b.g.vals[var].kind, APX_VAL_STATE);
  EXPECT_EQ(b.g.vals[mean].grad, -1);
  EXPECT_EQ(b.g.vals[var].grad, -1);
  // the exporter left outputs 1..2 absent: apexc created them, plus saved outputs 3..4
  const ApxNode &bn = b.g.nodes[b.NodeByOp(APX_OP_BatchNormalization)];
  ASSERT_EQ(bn.n_out, 5);
  for (int k = 1; k < 5; k++) EXPECT_GE(bn.out[k], 0) << k;
  // AssignState(out1 -> in3), AssignState(out2 -> in4) in the optimizer section
  ASSERT_EQ(b.CountOp(APX_OP_AssignState), 2);
  for (int k = 0; k < 2; k++) {
    const ApxNode &as = b.g.nodes[b.NodeByOp(APX_OP_AssignState, k)];
    EXPECT_EQ(as.section, APX_SEC_OPTIMIZER);
    EXPECT_EQ(as.n_out, 0);
    ASSERT_EQ(as.n_in, 2);
    EXPECT_EQ(as.in[0], bn.out[1 + k]);
    EXPECT_EQ(as.in[1], k == 0 ? mean : var);
    EXPECT_EQ(as.origin, b.NodeByOp(APX_OP_BatchNormalization));
  }
  // the gradient goes through the saved statistics
  const ApxNode &bg = b.g.nodes[b.NodeByOp(APX_OP_BatchNormGrad)];
  EXPECT_EQ(bg.in[3], bn.out[3]);
  EXPECT_EQ(bg.in[4], bn.out[4]);
}

TEST(Autodiff, BatchNormInferenceModeStatsAreStateWithoutBinding) {
  GraphBuilder b;
  int x = b.Param("x", {2, 3, 2, 2}), s = b.Param("scale", {3}), bias = b.Param("bias", {3});
  int mean = b.Param("mean", {3}), var = b.Param("var", {3}, 0.5, 1.5);
  b.WeightedSumLoss(b.Op("BatchNormalization", {x, s, bias, mean, var}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_EQ(b.g.vals[mean].kind, APX_VAL_STATE);
  EXPECT_EQ(b.CountOp(APX_OP_AssignState), 0);
  EXPECT_EQ(b.CountOp(APX_OP_BatchNormGrad), 0);
  EXPECT_GE(b.g.vals[s].grad, 0);
}

TEST(Autodiff, NoGradientRuleNamesOpNodeAndParam) {
  GraphBuilder b;
  int w1 = b.Param("w1", {3});
  int m = b.RawNode("Reciprocal", APX_OP_Reciprocal, "Reciprocal_3", {w1}, APX_DT_F64, {3});
  b.WeightedSumLoss(b.Op("Relu", {m}));
  b.SortAndVerify();
  EXPECT_EQ(pass_autodiff(&b.g, &b.o, &b.d), APX_PASS_ERROR);
  EXPECT_EQ(b.d.code, APX_EXIT_BAD_INPUT);
  EXPECT_STREQ(b.d.msg, "model.onnx: node 'Reciprocal_3' (Reciprocal): no gradient rule, needed for the "
                        "gradient of parameter 'w1'");
}

TEST(Autodiff, OpOffThePathNeedsNoRule) {
  // Reciprocal (no gradient rule) only sees the data input: nothing needs its gradient
  GraphBuilder b;
  int w = b.Param("w", {3}), x = b.Input("x", {3});
  int m = b.RawNode("Reciprocal", APX_OP_Reciprocal, "Reciprocal_0", {x}, APX_DT_F64, {3});
  b.WeightedSumLoss(b.Op("Mul", {m, w}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_GE(b.g.vals[w].grad, 0);
}

TEST(Autodiff, BackwardNodesCarryOrigin) {
  Mlp m;
  int n_fwd = m.g.n_nodes;
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  int n_bwd = 0;
  for (int i = n_fwd; i < m.g.n_nodes; i++) {
    const ApxNode &n = m.g.nodes[i];
    EXPECT_NE(n.section, APX_SEC_FORWARD) << n.name;
    if (n.section != APX_SEC_BACKWARD) continue;
    n_bwd++;
    ASSERT_GE(n.origin, 0) << n.name;
    EXPECT_TRUE(IsForwardNode(m.g, n.origin)) << n.name;
    EXPECT_LT(n.origin, n_fwd) << n.name;
  }
  EXPECT_GT(n_bwd, 5);
  // e.g. the ReluGrad derives from the Relu
  const ApxNode &rg = m.g.nodes[m.NodeByOp(APX_OP_ReluGrad)];
  EXPECT_EQ(m.g.nodes[rg.origin].op, APX_OP_Relu);
  EXPECT_EQ(rg.in[1], m.h); // the saved forward output
}

TEST(Autodiff, SectionsStayContiguousInOrder) {
  GraphBuilder b;
  int x = b.Param("x", {2, 3, 2, 2}), s = b.Param("scale", {3}), bias = b.Param("bias", {3});
  int mean = b.Const("mean", {3}, {0, 0, 0}), var = b.Const("var", {3}, {1, 1, 1});
  auto y = b.Node("BatchNormalization", {x, s, bias, mean, var}, 3, {Attr::Int("training_mode", 1)});
  b.WeightedSumLoss(b.Op("Relu", {y[0]}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  ASSERT_GE(b.RunPass(pass_optimizer), APX_PASS_CHANGED) << b.d.msg;
  int last = APX_SEC_FORWARD;
  for (int k = 0; k < b.g.n_order; k++) {
    int s2 = b.g.nodes[b.g.order[k]].section;
    EXPECT_GE(s2, last) << b.g.nodes[b.g.order[k]].name;
    last = s2;
  }
  EXPECT_EQ(last, APX_SEC_OPTIMIZER);
}

TEST(Autodiff, SectionsStayContiguousWithConstantOnlyBackwardNodesAndLateForwardNodes) {
  // inference-mode BatchNorm's gradient computes sqrt(var + eps) from state only (ready at
  // the start); a forward node added later (like cast_insert's casts) has a higher id
  GraphBuilder b;
  int x = b.Input("x", {2, 3, 2, 2}), s = b.Param("scale", {3}), bias = b.Param("bias", {3});
  int mean = b.Param("mean", {3}), var = b.Param("var", {3}, 0.5, 1.5);
  int w = b.Param("w", {2, 3, 2, 2});
  b.WeightedSumLoss(b.Op("BatchNormalization", {b.Op("Mul", {x, w}), s, bias, mean, var}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  int mul = b.NodeByOp(APX_OP_Mul);
  int xc = apx_graph_add_value(&b.g, &b.d, "x_copy", APX_VAL_ACTIVATION, APX_DT_F64, 4, b.g.vals[x].dims);
  int id = apx_graph_add_node(&b.g, &b.d, APX_OP_Identity, "late_forward", 1, &x, 1, &xc);
  ASSERT_GE(id, 0);
  b.g.nodes[mul].in[0] = xc;
  ASSERT_TRUE(b.SortAndVerify());
  int last = APX_SEC_FORWARD;
  for (int k = 0; k < b.g.n_order; k++) {
    int sec = b.g.nodes[b.g.order[k]].section;
    EXPECT_GE(sec, last) << b.g.nodes[b.g.order[k]].name;
    last = sec;
  }
}

TEST(Autodiff, LossMustBeAFloatScalar) {
  {
    GraphBuilder b;
    int w = b.Param("w", {2, 3});
    b.SetLoss(b.Op("Relu", {w}));
    b.SortAndVerify();
    EXPECT_EQ(pass_autodiff(&b.g, &b.o, &b.d), APX_PASS_ERROR);
    EXPECT_EQ(b.d.code, APX_EXIT_BAD_INPUT);
    EXPECT_NE(std::string(b.d.msg).find("value 'Relu_0_out0': the loss must be a scalar"), std::string::npos)
        << b.d.msg;
  }
  {
    GraphBuilder b;
    int w = b.Data("w", APX_VAL_CONST, APX_DT_I64, {1}, {3});
    b.SetLoss(b.Op("Neg", {w}));
    b.SortAndVerify();
    EXPECT_EQ(pass_autodiff(&b.g, &b.o, &b.d), APX_PASS_ERROR);
    EXPECT_NE(std::string(b.d.msg).find("the loss must be a float scalar, got int64"), std::string::npos)
        << b.d.msg;
  }
  {
    GraphBuilder b; // a one-element [1] loss is accepted
    int w = b.Param("w", {1});
    b.SetLoss(b.Op("Relu", {w}));
    b.SortAndVerify();
    EXPECT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  }
}

TEST(Autodiff, SavedOutputsAddedWhereTheModelLeftThemOut) {
  GraphBuilder b;
  int x = b.Param("x", {2, 4}), s = b.Param("s", {4});
  int ln = b.Op("LayerNormalization", {x, s});
  int ln_node = b.last_node;
  int ratio = b.Const("ratio", {}, {0.5}, APX_DT_F32);
  int tm = b.Data("tm", APX_VAL_CONST, APX_DT_BOOL, {}, {1});
  int dr = b.Op("Dropout", {ln, ratio, tm});
  int dr_node = b.last_node;
  int labels = b.Data("labels", APX_VAL_CONST, APX_DT_I64, {2}, {0, 3});
  int l = b.Op("SoftmaxCrossEntropyLoss", {dr, labels});
  int sce_node = b.last_node;
  b.SetLoss(l);
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_EQ(b.g.nodes[ln_node].n_out, 3); // Mean, InvStdDev
  EXPECT_EQ(b.g.nodes[dr_node].n_out, 2); // mask
  EXPECT_EQ(b.g.vals[b.g.nodes[dr_node].out[1]].dtype, APX_DT_BOOL);
  EXPECT_EQ(b.g.nodes[sce_node].n_out, 2); // log_prob
  const ApxNode &dg = b.g.nodes[b.NodeByOp(APX_OP_DropoutGrad)];
  EXPECT_EQ(dg.in[1], b.g.nodes[dr_node].out[1]);
  const ApxNode &lg = b.g.nodes[b.NodeByOp(APX_OP_LayerNormGrad)];
  EXPECT_EQ(lg.in[3], b.g.nodes[ln_node].out[1]);
  EXPECT_EQ(lg.in[4], b.g.nodes[ln_node].out[2]);
  EXPECT_EQ(lg.n_out, 3);
  EXPECT_GE(lg.out[0], 0);
  EXPECT_GE(lg.out[1], 0);
  EXPECT_EQ(lg.out[2], -1); // no bias: no dB
}

TEST(Autodiff, DropoutNodesGetDistinctStreams) {
  GraphBuilder b;
  int x = b.Param("x", {3, 4});
  int ratio = b.Const("ratio", {}, {0.5}, APX_DT_F32);
  int tm = b.Data("tm", APX_VAL_CONST, APX_DT_BOOL, {}, {1});
  int d1 = b.Op("Dropout", {x, ratio, tm});
  int n1 = b.last_node;
  int d2 = b.Op("Dropout", {d1, ratio, tm});
  int n2 = b.last_node;
  b.WeightedSumLoss(d2);
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  int64_t s1 = APX_NODE_ATTRS(&b.g, n1, ApxAttrDropout)->rng_stream;
  int64_t s2 = APX_NODE_ATTRS(&b.g, n2, ApxAttrDropout)->rng_stream;
  EXPECT_NE(s1, s2);
  EXPECT_EQ(s1, n1);
  // DropoutGrad carries its forward node's attributes, stream included
  for (int k = 0; k < 2; k++) {
    int dg = b.NodeByOp(APX_OP_DropoutGrad, k);
    int fwd = b.g.nodes[dg].origin;
    EXPECT_EQ(APX_NODE_ATTRS(&b.g, dg, ApxAttrDropout)->rng_stream, APX_NODE_ATTRS(&b.g, fwd, ApxAttrDropout)->rng_stream);
  }
}

TEST(Autodiff, ParamNotReachingTheLossIsWarnedAboutAndSkipped) {
  GraphBuilder b;
  int w = b.Param("w", {3}), unused = b.Param("unused", {3});
  b.Op("Relu", {unused}); // a dead branch
  b.WeightedSumLoss(b.Op("Tanh", {w}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_GE(b.g.vals[w].grad, 0);
  EXPECT_EQ(b.g.vals[unused].grad, -1);
  EXPECT_EQ(b.d.n_warnings, 1);
}

TEST(Autodiff, ClassWeightsAreConstantsNotParameters) {
  GraphBuilder b;
  int s = b.Param("scores", {3, 4});
  int labels = b.Data("labels", APX_VAL_CONST, APX_DT_I64, {3}, {0, 1, 3});
  int cw = b.Param("class_weights", {4}, 0.5, 1.5);
  b.SetLoss(b.Op("SoftmaxCrossEntropyLoss", {s, labels, cw}));
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_EQ(b.g.vals[cw].kind, APX_VAL_CONST);
  EXPECT_EQ(b.g.vals[cw].grad, -1);
  EXPECT_GE(b.g.vals[s].grad, 0);
}

TEST(Autodiff, AccumulationDividesTheSeedAndAddsAccumulators) {
  Mlp m;
  m.o.accumulate = 4;
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  const ApxNode &seed = m.g.nodes[m.NodeByOp(APX_OP_LossScaleSeed)];
  EXPECT_EQ(((const ApxAttrLossScaleSeed *)seed.typed)->multiplier, 0.25f);
  for (int p : {m.w1, m.b1, m.w2}) {
    std::string pn = m.g.vals[p].name;
    int acc = m.Value("gradacc/" + pn);
    ASSERT_GE(acc, 0) << pn;
    EXPECT_EQ(m.g.vals[acc].kind, APX_VAL_STATE);
    EXPECT_EQ(m.g.vals[acc].dtype, APX_DT_F32);
    EXPECT_EQ(m.g.vals[acc].origin, p);
    // vals[p].grad = Add(gradacc, grad/<p>), stored back by AssignState in BACKWARD
    int sum = m.g.vals[p].grad;
    EXPECT_EQ(std::string(m.g.vals[sum].name), "grad/" + pn + "/sum");
    const ApxNode &add = m.g.nodes[m.g.vals[sum].producer];
    EXPECT_EQ(add.op, APX_OP_Add);
    EXPECT_EQ(add.section, APX_SEC_BACKWARD);
    EXPECT_EQ(add.origin, -1);
    EXPECT_EQ(add.in[0], acc);
    EXPECT_EQ(add.in[1], m.Value("grad/" + pn));
    bool stored = false;
    for (int i = 0; i < m.g.n_nodes; i++) {
      const ApxNode &n = m.g.nodes[i];
      if (n.op == APX_OP_AssignState && n.in[0] == sum && n.in[1] == acc) {
        stored = true;
        EXPECT_EQ(n.section, APX_SEC_BACKWARD);
      }
    }
    EXPECT_TRUE(stored) << pn;
  }
  // the optimizer section resets every accumulator
  ASSERT_GE(m.RunPass(pass_optimizer), APX_PASS_CHANGED) << m.d.msg;
  int resets = 0;
  for (int i = 0; i < m.g.n_nodes; i++) {
    const ApxNode &n = m.g.nodes[i];
    if (n.op != APX_OP_AssignState || n.section != APX_SEC_OPTIMIZER) continue;
    resets++;
    EXPECT_EQ(apx_value_numel(&m.g.vals[n.in[0]]), 1);
    EXPECT_EQ(*(const float *)m.g.vals[n.in[0]].data, 0.0f);
    EXPECT_EQ(m.g.vals[n.in[1]].kind, APX_VAL_STATE);
  }
  EXPECT_EQ(resets, 3);
}

TEST(Autodiff, NotTrainingOrAlreadyDoneIsUnchanged) {
  {
    Mlp m;
    m.o.training = 0;
    EXPECT_EQ(m.RunPass(pass_autodiff), APX_PASS_UNCHANGED);
    EXPECT_EQ(m.CountOp(APX_OP_LossScaleSeed), 0);
  }
  {
    Mlp m;
    ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
    int n = m.g.n_nodes;
    EXPECT_EQ(m.RunPass(pass_autodiff), APX_PASS_UNCHANGED);
    EXPECT_EQ(m.g.n_nodes, n);
  }
}

TEST(Autodiff, MlpGradientsMatchAHandDerivation) {
  // loss = mean(relu(x w1 + b1) w2): dW2 = h^T (1/8), dh = (1/8) w2^T row-summed ...
  // checked numerically against the closed form on the evaluator
  Mlp m;
  m.o.loss_scale = 1.0f;
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &m.g), 0) << ev.err;
  for (int i = 0; i < 12; i++) apx_eval_set(&ev, m.x, i, 0.1 * (i % 5) - 0.2);
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  // closed form in double: Y = H W2 (4x2), L = sum(Y)/8, dY = 1/8, dW2[j][k] = sum_i H[i][j]/8
  for (int j = 0; j < 5; j++)
    for (int k = 0; k < 2; k++) {
      double want = 0;
      for (int i = 0; i < 4; i++) want += apx_eval_get(&ev, m.h, i * 5 + j) / 8.0;
      EXPECT_NEAR(apx_eval_get(&ev, m.g.vals[m.w2].grad, j * 2 + k), want, 1e-6);
    }
  // db1[j] = sum_i [H[i][j] > 0] * (W2[j][0] + W2[j][1]) / 8
  for (int j = 0; j < 5; j++) {
    double want = 0;
    for (int i = 0; i < 4; i++)
      if (apx_eval_get(&ev, m.h, i * 5 + j) > 0)
        want += (apx_eval_get(&ev, m.w2, j * 2) + apx_eval_get(&ev, m.w2, j * 2 + 1)) / 8.0;
    EXPECT_NEAR(apx_eval_get(&ev, m.g.vals[m.b1].grad, j), want, 1e-6);
  }
  apx_eval_free(&ev);
}

}  // namespace

namespace {

// Running the graph: after a step the running statistics hold
// momentum * old + (1 - momentum) * batch statistic (ONNX BatchNormalization, training).
TEST(Autodiff, BatchNormRunningMeanIsCommittedByTheOptimizerSection) {
  GraphBuilder b;
  int x = b.Param("x", {4, 2, 1, 3}), s = b.Param("scale", {2}), bias = b.Param("bias", {2});
  int mean = b.Const("mean", {2}, {0.5, -0.25}), var = b.Const("var", {2}, {1, 2});
  auto y = b.Node("BatchNormalization", {x, s, bias, mean, var}, 1,
                  {Attr::Int("training_mode", 1), Attr::Float("momentum", 0.75f)});
  b.WeightedSumLoss(y[0]);
  b.SortAndVerify();
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &b.g), 0) << ev.err;
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_ALL), 0) << ev.err;
  const double old[2] = {0.5, -0.25};
  for (int c = 0; c < 2; c++) {
    double m = 0; // batch mean of channel c over N, H, W
    for (int n = 0; n < 4; n++)
      for (int w = 0; w < 3; w++) m += apx_eval_get(&ev, x, (n * 2 + c) * 3 + w) / 12.0;
    EXPECT_NEAR(apx_eval_get(&ev, mean, c), 0.75 * old[c] + 0.25 * m, 1e-12) << c;
  }
  apx_eval_free(&ev);
}

// --accumulate 2 on the evaluator: the accumulated gradient after two micro-batches is the
// sum of the two micro-batch gradients (each seeded with scale / 2), and the optimizer
// section resets the accumulators.
TEST(Autodiff, AccumulatedGradientIsTheSumOverMicroBatches) {
  GraphBuilder b;
  int x = b.Input("x", {3, 2});
  int w = b.Param("w", {2, 2});
  b.WeightedSumLoss(b.Op("Tanh", {b.Op("MatMul", {x, w})}));
  b.SortAndVerify();
  b.o.accumulate = 2;
  b.o.loss_scale = 8.0f;
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  ASSERT_GE(b.RunPass(pass_optimizer), APX_PASS_CHANGED) << b.d.msg;
  int micro = b.Value("grad/w"), sum = b.g.vals[w].grad, acc = b.Value("gradacc/w");
  ASSERT_GE(micro, 0);
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &b.g), 0) << ev.err;
  std::vector<double> g1, g2;
  for (int mb = 0; mb < 2; mb++) {
    for (int i = 0; i < 6; i++) apx_eval_set(&ev, x, i, mb ? 0.3 - 0.1 * i : 0.1 * i - 0.2);
    ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
    for (int k = 0; k < 4; k++) (mb ? g2 : g1).push_back(apx_eval_get(&ev, micro, k));
  }
  for (int k = 0; k < 4; k++) {
    EXPECT_NE(g1[(size_t)k], 0.0);
    EXPECT_DOUBLE_EQ(apx_eval_get(&ev, sum, k), g1[(size_t)k] + g2[(size_t)k]) << k;
    EXPECT_DOUBLE_EQ(apx_eval_get(&ev, acc, k), g1[(size_t)k] + g2[(size_t)k]) << k;
  }
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_OPTIMIZER), 0) << ev.err;
  for (int k = 0; k < 4; k++) EXPECT_EQ(apx_eval_get(&ev, acc, k), 0.0) << k;
  apx_eval_free(&ev);
}

}  // namespace

// --loss A,B: x -> Gemm(w1) -> Relu = h; la = ReduceMean(Gemm(h, wa)), lb = ReduceSum(Gemm(h, wb)),
// total = la + lb (the single-loss twin). Deterministic parameters: both builds are equal.
struct TwoHeads : GraphBuilder {
  int x, w1, wa, wb, la, lb, total;
  std::string names;
  explicit TwoHeads(bool several) {
    x = Input("x", {4, 3}, APX_DT_F32);
    w1 = Param("w1", {3, 5}, -1, 1, 0, APX_DT_F32);
    wa = Param("wa", {5, 2}, -1, 1, 0, APX_DT_F32);
    wb = Param("wb", {5, 2}, -1, 1, 0, APX_DT_F32);
    int h = Op("Relu", {Op("Gemm", {x, w1})});
    la = Op("ReduceMean", {Op("Gemm", {h, wa})}, {Attr::Int("keepdims", 0)});
    lb = Op("ReduceSum", {Op("Gemm", {h, wb})}, {Attr::Int("keepdims", 0)});
    total = Op("Add", {la, lb});
    SetLoss(several ? la : total);
    names = std::string(g.vals[la].name) + "," + g.vals[lb].name;
    if (several) o.loss_name = names.c_str();
    SortAndVerify();
  }
};

TEST(Autodiff, SeveralLossesEachScaledAndUnscaledByItsOwnScale) {
  TwoHeads m(true), one(false);
  ASSERT_GE(m.RunPass(pass_autodiff), APX_PASS_CHANGED) << m.d.msg;
  ASSERT_GE(m.RunPass(pass_optimizer), APX_PASS_CHANGED) << m.d.msg;
  ASSERT_GE(one.RunPass(pass_autodiff), APX_PASS_CHANGED) << one.d.msg;
  EXPECT_EQ(m.CountOp(APX_OP_LossScaleSeed), 2);
  EXPECT_EQ(m.CountOp(APX_OP_UnscaleCheck), 3);  // one per loss, then the sum's
  EXPECT_EQ(m.CountOp(APX_OP_OptimizerStep), 1);
  std::string a = m.g.vals[m.la].name, b = m.g.vals[m.lb].name;
  int sa = m.Value(std::string(APX_LOSS_SCALE_NAME) + "/" + a), sb = m.Value(std::string(APX_LOSS_SCALE_NAME) + "/" + b);
  ASSERT_GE(sa, 0);
  ASSERT_GE(sb, 0);
  EXPECT_EQ(m.g.vals[sa].kind, APX_VAL_STATE);
  int one_scale = m.Value(APX_LOSS_SCALE_NAME);
  ASSERT_GE(one_scale, 0);
  EXPECT_EQ(m.g.vals[one_scale].kind, APX_VAL_CONST);  // the sum is unscaled already
  EXPECT_EQ(*(const float *)m.g.vals[one_scale].data, 1.0f);
  // each per-loss check reads its loss's scale, and only that loss's parameters
  for (int k = 0; k < 2; k++) {
    const ApxNode &uc = m.g.nodes[m.NodeByOp(APX_OP_UnscaleCheck, k)];
    EXPECT_EQ(uc.section, APX_SEC_OPTIMIZER);
    EXPECT_EQ(uc.in[0], k == 0 ? sa : sb);
    EXPECT_EQ(uc.n_in, 1 + 2);  // w1 and its own head
    EXPECT_STREQ(m.g.vals[uc.out[APX_UNSCALE_OUT_FOUND_INF]].name,
                 ("apx_found_inf/" + (k == 0 ? a : b)).c_str());
  }
  // scales 4 and 256: each parameter's (unscaled, summed) gradient equals the single loss
  // la + lb's gradient (scale 1)
  *(float *)one.g.vals[one.Value(APX_LOSS_SCALE_NAME)].data = 1.0f;
  ApxEval ev, ev1;
  ASSERT_EQ(apx_eval_init(&ev, &m.g), 0) << ev.err;
  ASSERT_EQ(apx_eval_init(&ev1, &one.g), 0) << ev1.err;
  for (int64_t i = 0; i < 12; i++) apx_eval_set(&ev, m.x, i, 0.1 * (double)(i % 5) - 0.2);
  for (int64_t i = 0; i < 12; i++) apx_eval_set(&ev1, one.x, i, 0.1 * (double)(i % 5) - 0.2);
  apx_eval_set(&ev, sa, 0, 4.0);
  apx_eval_set(&ev, sb, 0, 256.0);
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  // the per-loss checks and sums (not OptimizerStep: the parameters stay)
  for (int k = 0; k < m.g.n_order; k++) {
    const ApxNode &n = m.g.nodes[m.g.order[k]];
    if (n.section == APX_SEC_OPTIMIZER && n.op == APX_OP_OptimizerStep) m.g.nodes[m.g.order[k]].flags |= APX_NODEF_DEAD;
  }
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_OPTIMIZER), 0) << ev.err;
  ASSERT_EQ(apx_eval_run(&ev1, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev1.err;
  EXPECT_EQ(apx_eval_get(&ev, m.g.nodes[m.NodeByOp(APX_OP_UnscaleCheck, 0)].out[0], 0), 0.0);  // no overflow
  for (int p : {m.w1, m.wa, m.wb}) {
    int g2 = m.g.vals[p].grad, g1 = one.g.vals[p].grad;
    ASSERT_GE(g2, 0);
    ASSERT_GE(g1, 0);
    int64_t n = apx_value_numel(&m.g.vals[p]);
    for (int64_t i = 0; i < n; i++)
      EXPECT_NEAR(apx_eval_get(&ev, g2, i), apx_eval_get(&ev1, g1, i), 1e-6) << m.g.vals[p].name << " " << i;
  }
  apx_eval_free(&ev);
  apx_eval_free(&ev1);
}

TEST(Autodiff, SeveralLossesRefuseAccumulation) {
  TwoHeads m(true);
  m.o.accumulate = 4;
  EXPECT_EQ(m.RunPass(pass_autodiff), APX_PASS_ERROR);
  EXPECT_NE(std::string(m.d.msg).find("not supported yet: several losses"), std::string::npos) << m.d.msg;
}
