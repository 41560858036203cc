// cast_cleanup_test.cc - pass_cast_cleanup: round trips, lossless chains, no-op casts,
// constant casts, duplicates; the model's own narrowing casts and graph outputs are kept.
#include "tests/testing/precision_testing.h"

extern "C" {
#include "kernels/half.h"
}

using apxtest::PGraph;

namespace {

// An inserted-style Cast (as cast_insert makes them) of v to t; returns its output value.
int inserted_cast(PGraph &t, int v, ApxDType to) {
  int id = apx_cast_node_add(&t.g, v, to, -1, &t.d);
  EXPECT_GE(id, 0) << t.d.msg;
  return t.g.nodes[id].out[0];
}

// A Cast written in the model; returns its output value.
int model_cast(PGraph &t, const char *name, int v, ApxDType to) {
  std::vector<int64_t> dims(t.g.vals[v].dims, t.g.vals[v].dims + t.g.vals[v].rank);
  int out = t.op(APX_OP_Cast, name, {v}, dims, to);
  apxtest::attrs<ApxAttrCast>(t, t.find_node(name))->to = to;
  return out;
}

}  // namespace

TEST(CastCleanup, NoRoundTripSurvivesCleanup) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 8});
  int h = inserted_cast(t, x, APX_DT_F16);
  int back = inserted_cast(t, h, APX_DT_F32);
  int r = t.op(APX_OP_Softmax, "sm", {back}, {4, 8});
  int k = t.op(APX_OP_Relu, "relu", {h}, {4, 8}, APX_DT_F16);
  t.output(r);
  t.output(k);
  ASSERT_EQ(t.run(pass_cast_cleanup), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.n("sm").in[0], x);  // the original fp32 value, not its half rounding
  EXPECT_EQ(t.count_live(APX_OP_Cast), 1);  // x -> fp16 for the Relu remains
  EXPECT_EQ(t.g.casts.before_cleanup, 2);
  EXPECT_EQ(t.g.casts.after_cleanup, 1);
  for (int i = 0; i < t.g.n_nodes; i++) {
    const ApxNode &c = t.g.nodes[i];
    if (c.op != APX_OP_Cast || (c.flags & APX_NODEF_DEAD)) continue;
    int src = c.in[0];
    int p = t.g.vals[src].producer;
    EXPECT_FALSE(p >= 0 && t.g.nodes[p].op == APX_OP_Cast &&
                 t.g.vals[t.g.nodes[p].in[0]].dtype == apxtest::attrs<ApxAttrCast>(t, i)->to)
        << "round trip through " << c.name;
  }
}

TEST(CastCleanup, ModelNarrowingCastIsKept) {
  PGraph t(APX_O1);
  int x = t.input("x", {4});
  int h = model_cast(t, "user_half", x, APX_DT_F16);
  int back = inserted_cast(t, h, APX_DT_F32);
  int r = t.op(APX_OP_Softmax, "sm", {back}, {4});
  t.output(r);
  t.run(pass_cast_cleanup);
  // the model asked for the fp16 rounding: the consumer still sees it
  EXPECT_EQ(t.n("sm").in[0], back);
  EXPECT_EQ(t.count_live(APX_OP_Cast), 2);
}

TEST(CastCleanup, LosslessWideningChainCollapses) {
  PGraph t(APX_O2);
  int x = t.input("x", {4}, APX_DT_F16);
  int wide = model_cast(t, "user_float", x, APX_DT_F32);
  int narrow = inserted_cast(t, wide, APX_DT_F16);
  int r = t.op(APX_OP_Relu, "relu", {narrow}, {4}, APX_DT_F16);
  int s = t.op(APX_OP_Softmax, "sm", {wide}, {4});
  t.output(r);
  t.output(s);
  t.run(pass_cast_cleanup);
  EXPECT_EQ(t.n("relu").in[0], x);  // fp16 -> fp32 -> fp16 is the identity
  EXPECT_EQ(t.count_live(APX_OP_Cast), 1);
}

TEST(CastCleanup, DuplicateCastsMerged) {
  PGraph t(APX_O1);
  int x = t.input("x", {4});
  int a = inserted_cast(t, x, APX_DT_F16);
  int b = inserted_cast(t, x, APX_DT_F16);
  int c = model_cast(t, "user_cast", x, APX_DT_F16);
  int r1 = t.op(APX_OP_Relu, "r1", {a}, {4}, APX_DT_F16);
  int r2 = t.op(APX_OP_Relu, "r2", {b}, {4}, APX_DT_F16);
  int r3 = t.op(APX_OP_Relu, "r3", {c}, {4}, APX_DT_F16);
  for (int v : {r1, r2, r3}) t.output(v);
  ASSERT_EQ(t.run(pass_cast_cleanup), APX_PASS_CHANGED);
  EXPECT_EQ(t.count_live(APX_OP_Cast), 1);
  EXPECT_EQ(t.n("r1").in[0], t.n("r2").in[0]);
  EXPECT_EQ(t.n("r2").in[0], t.n("r3").in[0]);
}

TEST(CastCleanup, NoOpCastRemoved) {
  PGraph t(APX_O0);
  int x = t.input("x", {4});
  int c = model_cast(t, "noop", x, APX_DT_F32);
  int r = t.op(APX_OP_Relu, "relu", {c}, {4});
  t.output(r);
  ASSERT_EQ(t.run(pass_cast_cleanup), APX_PASS_CHANGED);
  EXPECT_EQ(t.n("relu").in[0], x);
  EXPECT_EQ(t.count_live(APX_OP_Cast), 0);
}

TEST(CastCleanup, CastOfConstantFolded) {
  PGraph t(APX_O0);
  int k = t.constant("k", {2}, {1.5f, -3.0f});
  int c = model_cast(t, "k_half", k, APX_DT_F16);
  int x = t.input("x", {2}, APX_DT_F16);
  int y = t.op(APX_OP_Add, "add", {x, c}, {2}, APX_DT_F16);
  t.output(y);
  ASSERT_EQ(t.run(pass_cast_cleanup), APX_PASS_CHANGED);
  const ApxValue &f = t.v(t.n("add").in[1]);
  EXPECT_EQ(f.producer, -1);
  EXPECT_EQ(f.kind, APX_VAL_CONST);
  EXPECT_EQ(f.dtype, APX_DT_F16);
  EXPECT_EQ(apx_f16_to_f32(((const uint16_t *)f.data)[0]), 1.5f);
  EXPECT_EQ(apx_f16_to_f32(((const uint16_t *)f.data)[1]), -3.0f);
  EXPECT_EQ(t.count_live(APX_OP_Cast), 0);
  EXPECT_EQ(t.g.casts.folded, 1);
}

TEST(CastCleanup, CastProducingGraphOutputKept) {
  PGraph t(APX_O0);
  int x = t.input("x", {4});
  int c = model_cast(t, "out_cast", x, APX_DT_F32);
  t.output(c);
  EXPECT_EQ(t.run(pass_cast_cleanup), APX_PASS_UNCHANGED);
  EXPECT_EQ(t.count_live(APX_OP_Cast), 1);
  EXPECT_EQ(t.v(c).producer, t.find_node("out_cast"));
}

TEST(CastCleanup, AfterInsertionTheCountsAreReported) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  int s = t.op(APX_OP_Softmax, "sm", {y}, {4, 8});
  t.output(s);
  t.preset();
  t.compile();
  EXPECT_EQ(t.g.casts.inserted, 3);  // x, W to fp16; MatMul output to fp32
  EXPECT_EQ(t.g.casts.before_cleanup, 3);
  EXPECT_EQ(t.g.casts.after_cleanup, 3);  // nothing redundant
}
