// precision_test.cc - pass_precision: opt levels, lists, BN retention, overrides and their
// precedence, fixed roles (integer, Cast, loss, optimizer), backward inheritance.
#include "tests/testing/precision_testing.h"

using apxtest::PGraph;

namespace {

// x[8,16] -> MatMul(W[16,32]) -> Relu -> Softmax -> out
struct Mlp {
  int x, w, mm, relu, sm;
  explicit Mlp(PGraph &t) {
    x = t.input("x", {8, 16});
    w = t.param("W", {16, 32});
    mm = t.op(APX_OP_MatMul, "mm", {x, w}, {8, 32});
    relu = t.op(APX_OP_Relu, "relu", {mm}, {8, 32});
    sm = t.op(APX_OP_Softmax, "sm", {relu}, {8, 32});
    t.output(sm);
  }
};

}  // namespace

TEST(Precision, NoopAtO0) {
  PGraph t(APX_O0);
  Mlp m(t);
  t.preset();
  t.compile();
  for (const char *name : {"mm", "relu", "sm"}) {
    EXPECT_EQ(t.n(name).compute, APX_DT_F32) << name;
    EXPECT_EQ(t.n(name).reason, APX_REASON_DEFAULT_FP32) << name;
  }
  EXPECT_EQ(t.count_live(APX_OP_Cast), 0);
  EXPECT_EQ(t.g.casts.inserted, 0);
  EXPECT_EQ(t.v(m.w).dtype, APX_DT_F32);
  EXPECT_EQ(t.warnings(), "");
}

TEST(Precision, O1MatMulRunsHalfSoftmaxFp32) {
  PGraph t(APX_O1);
  Mlp m(t);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F16);
  EXPECT_EQ(t.n("mm").reason, APX_REASON_LIST_HALF);
  EXPECT_STREQ(t.n("mm").reason_detail, "list: fp16 (allow) -- MatMul");
  // Relu is on no list: at O1 it runs in its input's type, the MatMul's fp16
  EXPECT_EQ(t.n("relu").compute, APX_DT_F16);
  EXPECT_EQ(t.n("relu").reason, APX_REASON_DEFAULT_INPUTS);
  EXPECT_EQ(t.n("sm").compute, APX_DT_F32);
  EXPECT_EQ(t.n("sm").reason, APX_REASON_LIST_FP32);
  EXPECT_STREQ(t.n("sm").reason_detail, "list: fp32 (deny) -- Softmax");
}

TEST(Precision, O1WithBf16UsesBf16ForAllowList) {
  PGraph t(APX_O1, APX_DT_BF16);
  Mlp m(t);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("mm").compute, APX_DT_BF16);
  EXPECT_STREQ(t.n("mm").reason_detail, "list: bf16 (allow) -- MatMul");
}

TEST(Precision, PromoteTakesWidestInput) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 8});
  int w1 = t.param("W1", {8, 8}), w2 = t.param("W2", {8, 8}), b = t.param("b", {8});
  int h1 = t.op(APX_OP_MatMul, "mm1", {x, w1}, {4, 8});
  int h2 = t.op(APX_OP_MatMul, "mm2", {x, w2}, {4, 8});
  int half_half = t.op(APX_OP_Add, "add_hh", {h1, h2}, {4, 8});
  int half_fp32 = t.op(APX_OP_Add, "add_bias", {h1, b}, {4, 8});
  int half = t.constant("half", {}, {0.5f});
  int scaled = t.op(APX_OP_Mul, "scale", {h2, half}, {4, 8});
  int c1 = t.constant("c1", {8}, {1.0f}), c2 = t.constant("c2", {8}, {2.0f});
  int consts = t.op(APX_OP_Add, "add_consts", {c1, c2}, {8});
  for (int v : {half_half, half_fp32, scaled, consts}) t.output(v);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("add_hh").compute, APX_DT_F16);
  EXPECT_EQ(t.n("add_bias").compute, APX_DT_F32);  // fp32 parameter at O1 widens
  EXPECT_STREQ(t.n("add_bias").reason_detail, "list: promote -- Add: widest input fp32");
  EXPECT_EQ(t.n("scale").compute, APX_DT_F16);     // a constant does not widen (Python scalar)
  EXPECT_EQ(t.n("add_consts").compute, APX_DT_F32);
  for (const char *n : {"add_hh", "add_bias", "scale", "add_consts"})
    EXPECT_EQ(t.n(n).reason, APX_REASON_LIST_PROMOTE) << n;
}

TEST(Precision, KeepsBatchNormFp32AtO2) {
  PGraph t(APX_O2);
  int x = t.input("x", {2, 3, 8, 8});
  int w = t.param("convW", {8, 3, 3, 3});
  int conv = t.op(APX_OP_Conv, "conv", {x, w}, {2, 8, 6, 6});
  int sc = t.param("bn_scale", {8}, {1.0f}), bi = t.param("bn_bias", {8}, {0.0f});
  int mean = t.constant("bn_mean", {8}, {0.0f}), var = t.constant("bn_var", {8}, {1.0f});
  int y = t.value("bn_y", APX_VAL_ACTIVATION, {2, 8, 6, 6});
  int rm = t.value("bn_rm", APX_VAL_ACTIVATION, {8}), rv = t.value("bn_rv", APX_VAL_ACTIVATION, {8});
  int bn = t.node(APX_OP_BatchNormalization, "bn", {conv, sc, bi, mean, var}, {y, rm, rv});
  apxtest::attrs<ApxAttrBatchNorm>(t, bn)->training_mode = 1;
  int r = t.op(APX_OP_Relu, "relu", {y}, {2, 8, 6, 6});
  t.output(r);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("conv").compute, APX_DT_F16);
  EXPECT_EQ(t.n("bn").compute, APX_DT_F32);
  EXPECT_EQ(t.n("bn").reason, APX_REASON_BN_FP32);
  EXPECT_STREQ(t.n("bn").reason_detail, "keep_batchnorm_fp32 (O2): BatchNormalization runs in fp32");
  EXPECT_EQ(t.n("relu").compute, APX_DT_F16);
  // half input cast in, output cast back for the half Relu; parameters and stats fp32
  const ApxNode &bnn = t.n("bn");
  EXPECT_EQ(t.v(bnn.in[0]).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(t.n("bn").in[0]).producer, t.cast_of(conv));
  for (int k = 1; k < 5; k++) EXPECT_EQ(t.v(bnn.in[k]).dtype, APX_DT_F32) << k;
  EXPECT_EQ(t.v(sc).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(y).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(t.n("relu").in[0]).dtype, APX_DT_F16);
  EXPECT_EQ(t.v(rm).dtype, APX_DT_F32);
  // the conv weight is stored in half with an fp32 master; BN parameters are not
  EXPECT_EQ(t.v(w).dtype, APX_DT_F16);
  int masters = 0;
  for (int v = 0; v < t.g.n_vals; v++) masters += (t.g.vals[v].flags & APX_VALF_MASTER) != 0;
  EXPECT_EQ(masters, 1);
}

TEST(Precision, BatchNormHalfAtO3) {
  PGraph t(APX_O3);
  int x = t.input("x", {2, 8, 4, 4});
  int sc = t.param("bn_scale", {8}, {1.0f}), bi = t.param("bn_bias", {8}, {0.0f});
  int mean = t.constant("bn_mean", {8}, {0.0f}), var = t.constant("bn_var", {8}, {1.0f});
  int y = t.value("bn_y", APX_VAL_ACTIVATION, {2, 8, 4, 4});
  int rm = t.value("bn_rm", APX_VAL_ACTIVATION, {8}), rv = t.value("bn_rv", APX_VAL_ACTIVATION, {8});
  t.node(APX_OP_BatchNormalization, "bn", {x, sc, bi, mean, var}, {y, rm, rv});
  int r = t.op(APX_OP_Relu, "relu", {y}, {2, 8, 4, 4});
  t.output(r);
  t.preset();
  t.compile();
  const ApxNode &bn = t.n("bn");
  EXPECT_EQ(bn.compute, APX_DT_F16);
  EXPECT_EQ(bn.reason, APX_REASON_DEFAULT_HALF);
  EXPECT_EQ(t.v(bn.in[0]).dtype, APX_DT_F16);
  // cuDNN semantics: scale, bias, mean, var stay fp32 for half x; running stats too
  for (int k = 1; k < 5; k++) EXPECT_EQ(t.v(bn.in[k]).dtype, APX_DT_F32) << k;
  EXPECT_EQ(t.v(bn.in[1]).producer, -1);  // no Cast, the parameter itself
  EXPECT_EQ(t.v(y).dtype, APX_DT_F16);
  EXPECT_EQ(t.v(rm).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(rv).dtype, APX_DT_F32);
}

TEST(Precision, NodeOverrideBeatsOpOverride) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 8});
  int a = t.op(APX_OP_Softmax, "softmax_attn", {x}, {4, 8});
  int b = t.op(APX_OP_Softmax, "head_softmax", {x}, {4, 8});
  t.output(a);
  t.output(b);
  t.o.half_ops.items[t.o.half_ops.n++] = "Softmax";
  t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "softmax_*";
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("softmax_attn").compute, APX_DT_F32);
  EXPECT_EQ(t.n("softmax_attn").reason, APX_REASON_NODE_OVERRIDE);
  EXPECT_STREQ(t.n("softmax_attn").reason_detail, "node override --fp32-nodes 'softmax_*'");
  EXPECT_EQ(t.n("head_softmax").compute, APX_DT_F16);
  EXPECT_EQ(t.n("head_softmax").reason, APX_REASON_OP_OVERRIDE);
  EXPECT_STREQ(t.n("head_softmax").reason_detail, "op override --half-ops Softmax");
}

TEST(Precision, OpOverrideBeatsList) {
  PGraph t(APX_O1);
  Mlp m(t);
  t.o.fp32_ops.items[t.o.fp32_ops.n++] = "MatMul";
  t.o.promote_ops.items[t.o.promote_ops.n++] = "Relu";
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F32);
  EXPECT_EQ(t.n("mm").reason, APX_REASON_OP_OVERRIDE);
  EXPECT_STREQ(t.n("mm").reason_detail, "op override --fp32-ops MatMul");
  EXPECT_EQ(t.n("relu").reason, APX_REASON_OP_OVERRIDE);
  EXPECT_EQ(t.n("relu").compute, APX_DT_F32);
}

TEST(Precision, HalfOpsAtO0ForceHalf) {
  PGraph t(APX_O0);
  Mlp m(t);
  t.o.half_ops.items[t.o.half_ops.n++] = "MatMul";
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F16);
  EXPECT_EQ(t.n("relu").compute, APX_DT_F32);  // O0 default
  EXPECT_EQ(t.v(t.n("relu").in[0]).dtype, APX_DT_F32);
}

TEST(Precision, Fp32NodesGlob) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8});
  int q = t.op(APX_OP_MatMul, "attn_q", {x, w}, {4, 8});
  int k = t.op(APX_OP_MatMul, "attn_k", {x, w}, {4, 8});
  int m = t.op(APX_OP_MatMul, "mlp_1", {x, w}, {4, 8});
  for (int v : {q, k, m}) t.output(v);
  t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "attn*";
  t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "nothing_[0-9]";
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("attn_q").compute, APX_DT_F32);
  EXPECT_EQ(t.n("attn_k").compute, APX_DT_F32);
  EXPECT_EQ(t.n("mlp_1").compute, APX_DT_F16);
  EXPECT_EQ(t.n("attn_k").reason, APX_REASON_NODE_OVERRIDE);
  EXPECT_NE(t.warnings().find("--fp32-nodes 'nothing_[0-9]' matches no forward node"), std::string::npos)
      << t.warnings();
}

TEST(Precision, UnknownOrConflictingOpOverridesAreErrors) {
  {
    PGraph t(APX_O1);
    Mlp m(t);
    t.o.half_ops.items[t.o.half_ops.n++] = "Matmul";
    t.preset();
    EXPECT_LT(t.run(pass_precision), 0);
    EXPECT_STREQ(t.d.msg, "--half-ops: unknown op 'Matmul' (see apexc --list-ops)");
    EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
  }
  {
    PGraph t(APX_O1);
    Mlp m(t);
    t.o.half_ops.items[t.o.half_ops.n++] = "MatMul";
    t.o.fp32_ops.items[t.o.fp32_ops.n++] = "MatMul";
    t.preset();
    EXPECT_LT(t.run(pass_precision), 0);
    EXPECT_STREQ(t.d.msg, "--half-ops and --fp32-ops both name 'MatMul'");
  }
}

TEST(Precision, O2RunsFloatOpsHalfAndO3Too) {
  for (ApxOptLevel lvl : {APX_O2, APX_O3}) {
    PGraph t(lvl);
    Mlp m(t);
    t.preset();
    t.decide();
    for (const char *n : {"mm", "relu", "sm"}) {
      EXPECT_EQ(t.n(n).compute, APX_DT_F16) << n;
      EXPECT_EQ(t.n(n).reason, APX_REASON_DEFAULT_HALF) << n;
    }
  }
}

TEST(Precision, BackwardInheritsForwardDecision) {
  PGraph t(APX_O1);
  Mlp m(t);
  int mm = t.find_node("mm"), sm = t.find_node("sm");
  int dy = t.input("dy", {8, 32});
  int dsm = t.op(APX_OP_SoftmaxGrad, "sm_grad", {dy, m.sm}, {8, 32}, APX_DT_F32, APX_SEC_BACKWARD, sm);
  int dw = t.op(APX_OP_FusedMatMul, "mm_grad_w", {m.x, dsm}, {16, 32}, APX_DT_F32, APX_SEC_BACKWARD, mm);
  int acc = t.op(APX_OP_Sum, "acc", {dw, dw}, {16, 32}, APX_DT_F32, APX_SEC_BACKWARD, -1);
  t.output(acc);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("mm_grad_w").compute, APX_DT_F16);
  EXPECT_EQ(t.n("mm_grad_w").reason, APX_REASON_INHERITED);
  EXPECT_STREQ(t.n("mm_grad_w").reason_detail, "inherited from mm");
  EXPECT_EQ(t.n("sm_grad").compute, APX_DT_F32);
  EXPECT_STREQ(t.n("sm_grad").reason_detail, "inherited from sm");
  // no forward origin: widest input, here the half gradient
  EXPECT_EQ(t.n("acc").compute, APX_DT_F16);
  EXPECT_EQ(t.n("acc").reason, APX_REASON_BACKWARD_WIDEST);
  EXPECT_EQ(t.v(dw).dtype, APX_DT_F16);
}

TEST(Precision, LossOpsAndOptimizerStayFp32) {
  PGraph t(APX_O3);
  int x = t.input("x", {4, 10});
  int w = t.param("W", {10, 10});
  int logits = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 10});
  int labels = t.input("labels", {4}, APX_DT_I64);
  int loss = t.op(APX_OP_SoftmaxCrossEntropyLoss, "xent", {logits, labels}, {});
  int mean = t.op(APX_OP_ReduceMean, "loss_mean", {loss}, {});
  t.loss(mean);
  int ls = t.constant("apx_loss_scale", {1}, {1.0f}, APX_VAL_STATE);
  int seed = t.op(APX_OP_LossScaleSeed, "seed", {mean, ls}, {}, APX_DT_F32, APX_SEC_BACKWARD);
  (void)seed;
  int st = t.value("state", APX_VAL_STATE, {10, 10});
  t.g.vals[st].data = apx_arena_alloc(&t.g.arena, 400);
  t.node(APX_OP_AssignState, "assign", {w, st}, {}, APX_SEC_OPTIMIZER);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F16);
  EXPECT_EQ(t.n("xent").compute, APX_DT_F32);
  EXPECT_EQ(t.n("xent").reason, APX_REASON_LOSS);
  EXPECT_EQ(t.n("loss_mean").compute, APX_DT_F32);  // the loss's producer
  EXPECT_EQ(t.n("loss_mean").reason, APX_REASON_LOSS);
  EXPECT_EQ(t.n("seed").reason, APX_REASON_OPTIMIZER);
  EXPECT_EQ(t.n("assign").compute, APX_DT_F32);
  EXPECT_EQ(t.n("assign").reason, APX_REASON_OPTIMIZER);
  EXPECT_EQ(t.v(mean).dtype, APX_DT_F32);
  // the loss reads fp32 logits; its integer labels are untouched
  EXPECT_EQ(t.v(t.n("xent").in[0]).dtype, APX_DT_F32);
  EXPECT_EQ(t.n("xent").in[1], labels);
}

TEST(Precision, IntegerNodesKeepTheirTypeAndCastRunsInTarget) {
  PGraph t(APX_O2);
  int shp = t.int_const("shape", {3}, {2, 3, 4});
  int idx = t.int_const("idx", {}, {1});
  int g = t.op(APX_OP_Gather, "gather_dim", {shp, idx}, {}, APX_DT_I64);
  int x = t.input("x", {2, 3});
  int c = t.op(APX_OP_Cast, "to_int", {x}, {2, 3}, APX_DT_I32);
  apxtest::attrs<ApxAttrCast>(t, t.find_node("to_int"))->to = APX_DT_I32;
  t.output(g);
  t.output(c);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("gather_dim").compute, APX_DT_I64);
  EXPECT_EQ(t.n("gather_dim").reason, APX_REASON_INTEGER);
  EXPECT_EQ(t.n("to_int").compute, APX_DT_I32);
  EXPECT_EQ(t.n("to_int").reason, APX_REASON_CAST);
  EXPECT_EQ(t.n("to_int").in[0], x);  // a Cast reads any type: not cast again
}

TEST(Precision, ModelCastRunsInItsTargetType) {
  PGraph t(APX_O1);
  int x = t.input("x", {2, 3});
  int c = t.op(APX_OP_Cast, "to_half", {x}, {2, 3}, APX_DT_F16);
  apxtest::attrs<ApxAttrCast>(t, t.find_node("to_half"))->to = APX_DT_F16;
  int r = t.op(APX_OP_Relu, "relu", {c}, {2, 3});
  t.output(r);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("to_half").compute, APX_DT_F16);
  EXPECT_EQ(t.n("to_half").reason, APX_REASON_CAST);
  EXPECT_EQ(t.n("relu").compute, APX_DT_F16);  // O1: the type of its input
}

TEST(Precision, DecisionsAreStableWhenRunTwice) {
  PGraph t(APX_O1);
  Mlp m(t);
  t.preset();
  t.decide();
  EXPECT_EQ(t.run(pass_overflow_check), APX_PASS_UNCHANGED);
  EXPECT_EQ(t.run(pass_precision), APX_PASS_UNCHANGED);
}

TEST(Precision, GradientWithAbsentFirstOutputStillInherits) {
  PGraph t(APX_O1);
  int x = t.input("x", {2, 3, 8, 8});
  int w = t.param("convW", {8, 3, 3, 3});
  int y = t.op(APX_OP_Conv, "conv", {x, w}, {2, 8, 6, 6});
  t.output(y);
  int dy = t.input("dy", {2, 8, 6, 6});
  int dw = t.value("dW", APX_VAL_ACTIVATION, {8, 3, 3, 3});
  t.node(APX_OP_ConvGrad, "conv_grad", {dy, x, w}, {-1, dw}, APX_SEC_BACKWARD, t.find_node("conv"));
  t.output(dw);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("conv_grad").compute, APX_DT_F16);
  EXPECT_EQ(t.n("conv_grad").reason, APX_REASON_INHERITED);
  EXPECT_EQ(t.n("conv_grad").in[1], t.n("conv").in[0]);  // the same half copy of x
  EXPECT_EQ(t.n("conv_grad").in[2], t.n("conv").in[1]);  // and of the weight
  EXPECT_EQ(t.v(dw).dtype, APX_DT_F32);                  // a graph output keeps its dtype
}

TEST(Precision, InferenceFirstOutputIsNotALoss) {
  // apexrun infer / --inference: no training graph, so a MatMul producing the first output
  // follows the lists like any other node (only loss ops keep fp32).
  PGraph t(APX_O1);
  t.o.training = 0;
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  t.loss(y);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F16);
  EXPECT_EQ(t.n("mm").reason, APX_REASON_LIST_HALF);
  t.o.training = 1;  // with a training graph the loss's producer stays fp32
  t.decide();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F32);
  EXPECT_EQ(t.n("mm").reason, APX_REASON_LOSS);
}
