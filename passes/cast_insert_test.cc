// cast_insert_test.cc - pass_cast_insert: casts shared per value and type, constants
// converted at compile time, parameter storage (O1 copies, O2 half + fp32 masters, O3),
// graph outputs keep their dtype, parameters' gradients keep the parameter's type, index
// inputs and BN statistics untouched.
#include "tests/testing/precision_testing.h"

extern "C" {
#include "kernels/half.h"
}

using apxtest::PGraph;

TEST(CastInsert, EachValueCastOncePerType) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 8});
  int w1 = t.param("W1", {8, 8}), w2 = t.param("W2", {8, 8});
  int a = t.op(APX_OP_MatMul, "mm1", {x, w1}, {4, 8});
  int b = t.op(APX_OP_MatMul, "mm2", {x, w2}, {4, 8});
  int c = t.op(APX_OP_Softmax, "sm", {x}, {4, 8});
  int d = t.op(APX_OP_Softmax, "sm2", {a}, {4, 8});
  int e = t.op(APX_OP_Softmax, "sm3", {a}, {4, 8});
  for (int v : {b, c, d, e}) t.output(v);
  t.preset();
  t.decide();
  ASSERT_EQ(t.run(pass_cast_insert), APX_PASS_CHANGED) << t.d.msg;
  t.check_consistent();
  // x -> fp16 once (shared by both MatMuls); W1, W2 -> fp16; a -> fp32 once (sm2, sm3)
  EXPECT_EQ(t.count_live(APX_OP_Cast), 5);
  EXPECT_EQ(t.g.casts.inserted, 5);
  EXPECT_EQ(t.n("mm1").in[0], t.n("mm2").in[0]);
  EXPECT_NE(t.n("mm1").in[0], x);
  EXPECT_EQ(t.n("sm2").in[0], t.n("sm3").in[0]);
  EXPECT_EQ(t.v(t.n("sm2").in[0]).dtype, APX_DT_F32);
  EXPECT_EQ(t.n("sm").in[0], x);  // fp32 consumer reads x itself
  int cx = t.v(t.n("mm1").in[0]).producer;
  EXPECT_EQ(t.g.nodes[cx].op, APX_OP_Cast);
  EXPECT_EQ(t.g.nodes[cx].reason, APX_REASON_CAST_INSERTED);
  EXPECT_EQ(apxtest::attrs<ApxAttrCast>(t, cx)->to, APX_DT_F16);
  EXPECT_EQ(t.g.nodes[cx].origin, t.find_node("mm1"));
}

TEST(CastInsert, CastOfConstantFolded) {
  PGraph t(APX_O2);
  int x = t.input("x", {4});
  int half = t.constant("half", {}, {0.5f});
  int y = t.op(APX_OP_Mul, "scale", {x, half}, {4});
  int z = t.op(APX_OP_Relu, "relu", {y}, {4});
  t.output(z);
  t.preset();
  t.compile();
  const ApxValue &c = t.v(t.n("scale").in[1]);
  EXPECT_EQ(c.dtype, APX_DT_F16);
  EXPECT_EQ(c.kind, APX_VAL_CONST);
  EXPECT_EQ(c.producer, -1);
  EXPECT_EQ(c.origin, half);
  EXPECT_EQ(((const uint16_t *)c.data)[0], 0x3800);  // 0.5 in fp16
  EXPECT_EQ(t.cast_of(half), -1);
  EXPECT_EQ(t.g.casts.folded, 1);
  EXPECT_EQ(t.v(half).dtype, APX_DT_F32);  // the original stays
}

TEST(CastInsert, O1WeightsStayFp32WithOneHalfCopy) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8}, {0.5f});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  t.output(y);
  int dy = t.input("dy", {4, 8});
  int dx = t.op(APX_OP_FusedMatMul, "mm_grad_x", {dy, w}, {4, 8}, APX_DT_F32, APX_SEC_BACKWARD,
                t.find_node("mm"));
  t.output(dx);
  t.preset();
  t.compile();
  EXPECT_EQ(t.v(w).dtype, APX_DT_F32);
  EXPECT_EQ(((const float *)t.v(w).data)[0], 0.5f);
  int c = t.cast_of(w);
  ASSERT_GE(c, 0);
  EXPECT_EQ(t.g.nodes[c].section, APX_SEC_FORWARD);
  int copy = t.g.nodes[c].out[0];
  EXPECT_EQ(t.v(copy).dtype, APX_DT_F16);
  EXPECT_EQ(t.n("mm").in[1], copy);
  EXPECT_EQ(t.n("mm_grad_x").in[1], copy);  // the backward reuses the same copy
  int casts_of_w = 0;
  for (int i = 0; i < t.g.n_nodes; i++)
    casts_of_w += t.g.nodes[i].op == APX_OP_Cast && !(t.g.nodes[i].flags & APX_NODEF_DEAD) && t.g.nodes[i].in[0] == w;
  EXPECT_EQ(casts_of_w, 1);
}

// x @ W forward, dW = x^T dY backward (a half product at O1/O2/O3) read by an optimizer node.
struct WeightGrad {
  PGraph t;
  int w, gw;
  explicit WeightGrad(ApxOptLevel lvl) : t(lvl) {
    int x = t.input("x", {4, 8});
    w = t.param("W", {8, 8});
    int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
    t.output(y);
    int dy = t.input("dy", {4, 8});
    gw = t.op(APX_OP_FusedMatMul, "mm_grad_w", {x, dy}, {8, 8}, APX_DT_F32, APX_SEC_BACKWARD, t.find_node("mm"));
    t.g.vals[gw].flags |= APX_VALF_GRAD;
    t.g.vals[gw].origin = w;
    t.output(t.op(APX_OP_Identity, "reader", {gw}, {8, 8}, APX_DT_F32, APX_SEC_OPTIMIZER));
    t.preset();
    t.compile();
  }
};

// Apex / torch AMP: the backward of the weight's per-step Cast widens, so an fp32 weight has
// an fp32 gradient (buckets, allreduce, accumulation in fp32); the half product writes a half
// value that one Cast, outside the product's backward (origin: the reader), widens.
TEST(CastInsert, O1GradientOfAnFp32WeightIsFp32) {
  WeightGrad m(APX_O1);
  PGraph &t = m.t;
  EXPECT_EQ(t.v(m.w).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(m.gw).dtype, APX_DT_F32);
  int c = t.v(m.gw).producer;
  ASSERT_GE(c, 0);
  EXPECT_EQ(t.g.nodes[c].op, APX_OP_Cast);
  EXPECT_EQ(t.g.nodes[c].origin, t.find_node("reader"));
  int half = t.g.nodes[c].in[0];
  EXPECT_EQ(t.v(half).dtype, APX_DT_F16);
  EXPECT_EQ(t.v(half).producer, t.find_node("mm_grad_w"));
  EXPECT_EQ(t.n("reader").in[0], m.gw);
}

// A weight stored in half (O2 with an fp32 master, O3) keeps a half gradient.
TEST(CastInsert, HalfWeightsKeepHalfGradients) {
  for (ApxOptLevel lvl : {APX_O2, APX_O3}) {
    WeightGrad m(lvl);
    EXPECT_EQ(m.t.v(m.w).dtype, APX_DT_F16);
    EXPECT_EQ(m.t.v(m.gw).dtype, APX_DT_F16);
    EXPECT_EQ(m.t.v(m.gw).producer, m.t.find_node("mm_grad_w"));
  }
}

TEST(CastInsert, O2WeightsStoredHalfWithFp32Masters) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8}, {0.5f, -2.0f});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  int frozen = t.constant("frozen", {8}, {0.25f});
  int z = t.op(APX_OP_Add, "add", {y, frozen}, {4, 8});
  t.output(z);
  const float *orig = (const float *)t.v(w).data;
  t.preset();
  t.compile();
  const ApxValue &wv = t.v(w);
  EXPECT_EQ(wv.dtype, APX_DT_F16);
  EXPECT_EQ(wv.kind, APX_VAL_PARAM);
  // its bytes are the master's converted, made where needed (the plan derives them at load)
  EXPECT_EQ(wv.data, nullptr);
  EXPECT_TRUE(wv.flags & APX_VALF_DATA_FROM_MASTER);
  EXPECT_EQ(apx_graph_verify(&t.g, &t.d), 0) << t.d.msg;
  EXPECT_EQ(t.n("mm").in[1], w);                      // read directly, no Cast
  int m = t.val("W_fp32_master");
  ASSERT_GE(m, 0);
  const ApxValue &mv = t.v(m);
  EXPECT_EQ(mv.kind, APX_VAL_STATE);
  EXPECT_EQ(mv.dtype, APX_DT_F32);
  EXPECT_TRUE(mv.flags & APX_VALF_MASTER);
  EXPECT_EQ(mv.origin, w);
  EXPECT_EQ((const float *)mv.data, orig);
  EXPECT_EQ(((const float *)mv.data)[1], -2.0f);
  // the graph input is cast to half once (Apex casts model inputs at O2)
  EXPECT_EQ(t.v(t.n("mm").in[0]).dtype, APX_DT_F16);
  // the graph output is fp32 for the user, produced by a Cast from the half Add
  EXPECT_EQ(t.v(z).dtype, APX_DT_F32);
  int p = t.v(z).producer;
  EXPECT_EQ(t.g.nodes[p].op, APX_OP_Cast);
  EXPECT_EQ(t.v(t.g.nodes[p].in[0]).dtype, APX_DT_F16);
  EXPECT_EQ(t.v(t.g.nodes[p].in[0]).producer, t.find_node("add"));
}

TEST(CastInsert, O3WeightsHalfWithoutMasters) {
  PGraph t(APX_O3);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  t.output(y);
  t.preset();
  t.compile();
  EXPECT_EQ(t.v(w).dtype, APX_DT_F16);
  EXPECT_NE(t.v(w).data, nullptr);  // no master: the half bytes are the graph's
  EXPECT_FALSE(t.v(w).flags & APX_VALF_DATA_FROM_MASTER);
  for (int v = 0; v < t.g.n_vals; v++) EXPECT_FALSE(t.g.vals[v].flags & APX_VALF_MASTER);
}

TEST(CastInsert, ParameterUsedOnlyByFp32NodesStaysFp32AtO2) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int sc = t.param("ln_scale", {8}, {1.0f});
  int bi = t.param("ln_bias", {8}, {0.0f});
  int y = t.op(APX_OP_LayerNormalization, "ln", {x, sc, bi}, {4, 8});
  t.output(y);
  t.o.fp32_ops.items[t.o.fp32_ops.n++] = "LayerNormalization";
  t.preset();
  t.compile();
  EXPECT_EQ(t.v(sc).dtype, APX_DT_F32);
  EXPECT_EQ(t.n("ln").in[1], sc);
  EXPECT_LT(t.val("ln_scale_fp32_master"), 0);
}

TEST(CastInsert, GraphOutputsKeepOriginalDtype) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int r = t.op(APX_OP_Relu, "relu", {x}, {4, 8});
  int s = t.op(APX_OP_Sigmoid, "sig", {r}, {4, 8});
  t.output(r);
  t.output(s);
  t.preset();
  t.compile();
  EXPECT_EQ(t.v(r).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(s).dtype, APX_DT_F32);
  EXPECT_STREQ(t.v(t.g.outputs[0]).name, "relu:0");  // names unchanged
  // the half consumer reads the half value, not a cast of the fp32 output
  int rin = t.n("sig").in[0];
  EXPECT_EQ(t.v(rin).dtype, APX_DT_F16);
  EXPECT_EQ(t.v(rin).producer, t.find_node("relu"));
  EXPECT_EQ(t.count_live(APX_OP_Cast), 3);  // x in, relu out, sig out
}

TEST(CastInsert, IndexInputsAndConditionsUntouched) {
  PGraph t(APX_O2);
  int emb = t.param("emb", {100, 16});
  int ids = t.input("ids", {4}, APX_DT_I64);
  int e = t.op(APX_OP_Gather, "embed", {emb, ids}, {4, 16});
  int cond = t.input("cond", {4, 16}, APX_DT_BOOL);
  int zero = t.constant("zero", {}, {0.0f});
  int w = t.op(APX_OP_Where, "where", {cond, e, zero}, {4, 16});
  t.output(w);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("embed").in[1], ids);
  EXPECT_EQ(t.v(ids).dtype, APX_DT_I64);
  EXPECT_EQ(t.n("where").in[0], cond);
  EXPECT_EQ(t.v(emb).dtype, APX_DT_F16);
  EXPECT_EQ(t.v(t.n("where").in[2]).dtype, APX_DT_F16);
}

TEST(CastInsert, LayerNormStatisticsKeepStashType) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int sc = t.param("ln_scale", {8}, {1.0f});
  int y = t.value("ln_y", APX_VAL_ACTIVATION, {4, 8});
  int mean = t.value("ln_mean", APX_VAL_ACTIVATION, {4, 1});
  int inv = t.value("ln_inv", APX_VAL_ACTIVATION, {4, 1});
  t.node(APX_OP_LayerNormalization, "ln", {x, sc}, {y, mean, inv});
  int dy = t.input("dy", {4, 8});
  int dx = t.value("ln_dx", APX_VAL_ACTIVATION, {4, 8});
  int ds = t.value("ln_dscale", APX_VAL_ACTIVATION, {8});
  t.node(APX_OP_LayerNormGrad, "ln_grad", {dy, x, sc, mean, inv}, {dx, ds, -1}, APX_SEC_BACKWARD,
         t.find_node("ln"));
  t.output(y);
  t.output(dx);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("ln").compute, APX_DT_F16);
  EXPECT_EQ(t.v(mean).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(inv).dtype, APX_DT_F32);
  EXPECT_EQ(t.v(ds).dtype, APX_DT_F16);
  EXPECT_EQ(t.n("ln_grad").in[3], mean);  // saved statistics read as they are
  EXPECT_EQ(t.n("ln_grad").in[4], inv);
}

TEST(CastInsert, UnchangedAtO0) {
  PGraph t(APX_O0);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  t.output(y);
  t.preset();
  t.decide();
  EXPECT_EQ(t.run(pass_cast_insert), APX_PASS_UNCHANGED);
}
