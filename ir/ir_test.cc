// ir_test.cc - graph construction, names, topological order, cycles, verifier, use lists.
#include <gtest/gtest.h>

extern "C" {
#include "ir/ir.h"
}

namespace {

struct Graph {
  ApxGraph g;
  ApxDiag d;
  Graph() {
    apx_graph_init(&g, "t.onnx");
    apx_diag_init(&d);
  }
  ~Graph() { apx_graph_free(&g); }
  int val(const char *name, ApxValueKind k = APX_VAL_ACTIVATION) {
    int64_t dims[2] = {2, 3};
    return apx_graph_add_value(&g, &d, name, k, APX_DT_F32, 2, dims);
  }
  int node(ApxOp op, const char *name, std::initializer_list<int> in, std::initializer_list<int> out) {
    std::vector<int> i(in), o(out);
    return apx_graph_add_node(&g, &d, op, name, (int)i.size(), i.data(), (int)o.size(), o.data());
  }
};

}  // namespace

TEST(Ir, ValuesHaveUniqueNames) {
  Graph t;
  int a = t.val("a", APX_VAL_INPUT);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(apx_graph_find_value(&t.g, "a"), a);
  EXPECT_EQ(apx_graph_find_value(&t.g, "b"), -1);
  EXPECT_LT(t.val("a"), 0);
  EXPECT_STREQ(t.d.msg, "t.onnx: value 'a' is defined twice");
  for (int i = 0; i < 1000; i++) ASSERT_GE(apx_graph_add_value(&t.g, &t.d, nullptr, APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr), 0);
  for (int i = 0; i < t.g.n_vals; i++) ASSERT_EQ(apx_graph_find_value(&t.g, t.g.vals[i].name), i);
}

TEST(Ir, ToposortKeepsModelOrderAndFixesBadOrder) {
  Graph t;
  int x = t.val("x", APX_VAL_INPUT), y = t.val("y"), z = t.val("z"), w = t.val("w");
  // listed out of order: n0 consumes z which n1 produces
  int n0 = t.node(APX_OP_Relu, "n0", {z}, {w});
  int n1 = t.node(APX_OP_Relu, "n1", {y}, {z});
  int n2 = t.node(APX_OP_Relu, "n2", {x}, {y});
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
  ASSERT_EQ(t.g.n_order, 3);
  EXPECT_EQ(t.g.order[0], n2);
  EXPECT_EQ(t.g.order[1], n1);
  EXPECT_EQ(t.g.order[2], n0);
  EXPECT_EQ(apx_graph_verify(&t.g, &t.d), 0) << t.d.msg;
}

TEST(Ir, CycleIsAnErrorNamingANode) {
  Graph t;
  int a = t.val("a"), b = t.val("b");
  t.node(APX_OP_Relu, "r1", {a}, {b});
  t.node(APX_OP_Relu, "r2", {b}, {a});
  EXPECT_LT(apx_graph_toposort(&t.g, &t.d), 0);
  EXPECT_NE(std::string(t.d.msg).find("cycle"), std::string::npos) << t.d.msg;
  EXPECT_NE(std::string(t.d.msg).find("(Relu)"), std::string::npos) << t.d.msg;
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
}

TEST(Ir, DeadNodesLeaveTheOrderAndVerifierCatchesStaleOrder) {
  Graph t;
  int x = t.val("x", APX_VAL_INPUT), y = t.val("y"), z = t.val("z");
  t.node(APX_OP_Relu, "a", {x}, {y});
  int b = t.node(APX_OP_Relu, "b", {x}, {z});
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  t.g.nodes[b].flags |= APX_NODEF_DEAD;
  EXPECT_LT(apx_graph_verify(&t.g, &t.d), 0);  // order still holds b
  apx_diag_init(&t.d);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  EXPECT_EQ(t.g.n_order, 1);
  EXPECT_EQ(apx_graph_verify(&t.g, &t.d), 0) << t.d.msg;
}

TEST(Ir, VerifierRejectsActivationWithoutProducer) {
  Graph t;
  int ghost = t.val("ghost"), y = t.val("y");
  t.node(APX_OP_Relu, "r", {ghost}, {y});
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  EXPECT_LT(apx_graph_verify(&t.g, &t.d), 0);
  EXPECT_NE(std::string(t.d.msg).find("no producer"), std::string::npos) << t.d.msg;
}

TEST(Ir, UsesListConsumersWithSlots) {
  Graph t;
  int x = t.val("x", APX_VAL_INPUT), y = t.val("y"), z = t.val("z");
  t.node(APX_OP_Add, "add", {x, x}, {y});
  t.node(APX_OP_Mul, "mul", {y, x}, {z});
  ApxUses u;
  ASSERT_EQ(apx_uses_build(&t.g, &u), 0);
  EXPECT_EQ(apx_uses_count(&u, x), 3);
  EXPECT_EQ(apx_uses_count(&u, y), 1);
  EXPECT_EQ(apx_uses_count(&u, z), 0);
  EXPECT_EQ(u.use_slot[u.use_start[y]], 0);
  apx_uses_free(&u);
}

TEST(Ir, ShapeHelpers) {
  Graph t;
  int64_t dims[3] = {4, -1, 8};
  int v = apx_graph_add_value(&t.g, &t.d, "v", APX_VAL_ACTIVATION, APX_DT_F16, 3, dims);
  char buf[64];
  EXPECT_STREQ(apx_value_shape_str(&t.g.vals[v], buf, sizeof buf), "[4,?,8]");
  EXPECT_EQ(apx_value_numel(&t.g.vals[v]), -1);
  EXPECT_FALSE(t.g.vals[v].flags & APX_VALF_SHAPE_KNOWN);
  dims[1] = 2;
  apx_value_set_shape(&t.g.vals[v], 3, dims);
  EXPECT_EQ(apx_value_numel(&t.g.vals[v]), 64);
  EXPECT_EQ(apx_value_bytes(&t.g.vals[v]), 128);
  EXPECT_TRUE(t.g.vals[v].flags & APX_VALF_SHAPE_KNOWN);
}

TEST(Ir, ToposortKeepsSectionsContiguous) {
  Graph t;
  int x = t.val("x", APX_VAL_INPUT), y = t.val("y"), s = t.val("s"), z = t.val("z");
  int opt = t.node(APX_OP_Relu, "opt", {y}, {s});  // created first, but optimizer section
  t.g.nodes[opt].section = APX_SEC_OPTIMIZER;
  int fwd = t.node(APX_OP_Relu, "fwd", {x}, {y});
  int fwd2 = t.node(APX_OP_Relu, "fwd2", {x}, {z});  // independent of the optimizer node
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
  ASSERT_EQ(t.g.n_order, 3);
  EXPECT_EQ(t.g.order[0], fwd);
  EXPECT_EQ(t.g.order[1], fwd2);
  EXPECT_EQ(t.g.order[2], opt);
}

TEST(Ir, UniqueNamesCountUpAndSkipTakenOnes) {
  Graph t;
  EXPECT_STREQ(apx_graph_unique_name(&t.g, "w"), "w_apx0");
  t.val("w_apx1");  // taken: the counter moves past it
  EXPECT_STREQ(apx_graph_unique_name(&t.g, "w"), "w_apx2");
  EXPECT_STREQ(apx_graph_unique_name(&t.g, nullptr), "v_apx3");
  t.g.name_gen = 1234567;
  EXPECT_STREQ(apx_graph_unique_name(&t.g, "a/b"), "a/b_apx1234567");
  t.g.name_gen = 9;
  EXPECT_STREQ(apx_graph_unique_name(&t.g, ""), "_apx9");
  EXPECT_STREQ(apx_graph_unique_name(&t.g, ""), "_apx10");
}

// The order's tie-breaks: section, then eager nodes as soon as they are ready, then node id.
TEST(Ir, ToposortRunsEagerNodesFirstWithinTheirSection) {
  Graph t;
  int x = t.val("x", APX_VAL_INPUT), a = t.val("a"), b = t.val("b"), c = t.val("c"), e = t.val("e");
  int n0 = t.node(APX_OP_Relu, "n0", {x}, {a});
  int n1 = t.node(APX_OP_Relu, "n1", {x}, {b});
  int n2 = t.node(APX_OP_Relu, "n2", {a}, {e});  // eager: runs as soon as n0 is done
  int n3 = t.node(APX_OP_Relu, "n3", {x}, {c});  // eager backward: after every forward node
  t.g.nodes[n2].flags |= APX_NODEF_EAGER;
  t.g.nodes[n3].flags |= APX_NODEF_EAGER;
  t.g.nodes[n3].section = APX_SEC_BACKWARD;
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
  ASSERT_EQ(t.g.n_order, 4);
  EXPECT_EQ(t.g.order[0], n0);
  EXPECT_EQ(t.g.order[1], n2);
  EXPECT_EQ(t.g.order[2], n1);
  EXPECT_EQ(t.g.order[3], n3);
}
