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

// A small deterministic generator for the random-graph tests: next() gives the next number.
struct XorShift {
  uint64_t state;
  uint64_t operator()() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
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

// A name given explicitly in the generated form moves the counter past its number, so
// generated names never meet it; one whose number is out of the counter's range turns the
// lookups back on. The name apx_graph_unique_name / apx_graph_free_name returned last is
// added without a lookup and is still unique.
TEST(Ir, GeneratedNamesMeetNamesGivenInTheirForm) {
  Graph t;
  const char *n0 = apx_graph_unique_name(&t.g, "x");
  ASSERT_GE(apx_graph_add_value(&t.g, &t.d, n0, APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr), 0);
  EXPECT_LT(t.val("x_apx0"), 0);  // given explicitly: looked up, found
  EXPECT_STREQ(t.d.msg, "t.onnx: value 'x_apx0' is defined twice");
  EXPECT_GE(t.val("y_apx7"), 0);  // a model's name of that form: the counter moves to 8
  EXPECT_EQ(t.g.name_gen, 8);
  EXPECT_STREQ(apx_graph_unique_name(&t.g, "y"), "y_apx8");
  EXPECT_GE(t.val("y_apx3"), 0);   // below the counter: nothing to do
  EXPECT_GE(t.val("y_apx05"), 0);  // a leading zero: never generated
  EXPECT_GE(t.val("apx_lr"), 0);   // not of the form
  EXPECT_GE(t.val("z_apx"), 0);
  EXPECT_GE(t.val("z_apx1b"), 0);
  EXPECT_EQ(t.g.name_gen, 9);
  EXPECT_EQ(t.g.n_apx_form_names, 0);
  EXPECT_GE(t.val("q_apx99999999999"), 0);  // out of range: looked up from now on
  EXPECT_EQ(t.g.n_apx_form_names, 1);
  t.g.name_gen = 2147483000;
  EXPECT_GE(t.val("v_apx2147483001"), 0);
  EXPECT_STREQ(apx_graph_unique_name(&t.g, "v"), "v_apx2147483002");
  // apx_graph_free_name: the plain name when free, then added without a second lookup
  const char *f = apx_graph_free_name(&t.g, "w");
  EXPECT_STREQ(f, "w");
  ASSERT_GE(apx_graph_add_value(&t.g, &t.d, f, APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr), 0);
  const char *f2 = apx_graph_free_name(&t.g, "w");  // taken: a variant
  EXPECT_STRNE(f2, "w");
  ASSERT_GE(apx_graph_add_value(&t.g, &t.d, f2, APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr), 0);
  // a known-free name goes stale once another value is added
  const char *f3 = apx_graph_free_name(&t.g, "u");
  EXPECT_GE(t.val("u"), 0);
  EXPECT_LT(apx_graph_add_value(&t.g, &t.d, f3, APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr), 0);
  for (int i = 0; i < t.g.n_vals; i++) ASSERT_EQ(apx_graph_find_value(&t.g, t.g.vals[i].name), i);
}

// apx_graph_toposort against the rule it implements, on random graphs: repeatedly take the
// ready node with the smallest (section, not eager, id). Graphs whose ids already follow that
// order take the sort's fast path; the others its heap.
TEST(Ir, ToposortMatchesTheSmallestReadyNodeRule) {
  XorShift next{12345};
  int fast_shaped = 0;
  for (int trial = 0; trial < 300; trial++) {
    Graph t;
    int nn = 1 + (int)(next() % 40);
    std::vector<int> outs;
    outs.push_back(t.val("in", APX_VAL_INPUT));
    // node i's output is value i + 1; inputs from earlier nodes' outputs (a DAG in id order),
    // then a random relabelling of which node gets which id breaks the id order in most trials
    std::vector<int> perm(nn);
    for (int i = 0; i < nn; i++) perm[i] = i;
    bool shuffle = trial % 3 != 0;
    if (shuffle)
      for (int i = nn - 1; i > 0; i--) std::swap(perm[i], perm[next() % (i + 1)]);
    std::vector<std::vector<int>> ins(nn);
    for (int i = 0; i < nn; i++) {
      int k = 1 + (int)(next() % 3);
      for (int j = 0; j < k; j++) ins[i].push_back(i ? 1 + (int)(next() % i) : 0);
    }
    for (int i = 0; i < nn; i++) t.val(("v" + std::to_string(i)).c_str());
    // node with id perm[i] computes value i + 1; add nodes in id order
    std::vector<int> who(nn);
    for (int i = 0; i < nn; i++) who[perm[i]] = i;
    for (int id = 0; id < nn; id++) {
      int i = who[id];
      std::vector<int> in;
      for (int x : ins[i]) in.push_back(x == 0 ? 0 : x);  // value x: the output of topo node x - 1
      int out = i + 1;
      ASSERT_EQ(apx_graph_add_node(&t.g, &t.d, APX_OP_Relu, nullptr, (int)in.size(), in.data(), 1, &out), id);
    }
    for (int id = 0; id < nn; id++) {
      ApxNode *nd = &t.g.nodes[id];
      // sections that never run backwards along an edge would be the pipeline's; random ones
      // test the rule itself
      nd->section = shuffle ? (ApxSection)(next() % 3) : (ApxSection)(id * 3 / nn);
      if (shuffle && next() % 4 == 0) nd->flags |= APX_NODEF_EAGER;
      if (next() % 10 == 0) nd->flags |= APX_NODEF_DEAD;
    }
    // reference
    std::vector<int> indeg(nn, 0), expect;
    auto live = [&](int id) { return !(t.g.nodes[id].flags & APX_NODEF_DEAD); };
    auto key = [&](int id) {
      const ApxNode *nd = &t.g.nodes[id];
      return ((uint64_t)(nd->section * 2 + ((nd->flags & APX_NODEF_EAGER) ? 0 : 1)) << 32) | (uint32_t)id;
    };
    int n_live = 0;
    bool ids_in_key_order = true;
    for (int id = 0; id < nn; id++) {
      if (!live(id)) continue;
      n_live++;
      for (int k = 0; k < t.g.nodes[id].n_in; k++) {
        int p = t.g.vals[t.g.nodes[id].in[k]].producer;
        if (p >= 0 && live(p)) {
          indeg[id]++;
          ids_in_key_order &= key(p) < key(id);
        }
      }
    }
    fast_shaped += ids_in_key_order;
    std::vector<bool> done(nn, false);
    for (;;) {
      int best = -1;
      for (int id = 0; id < nn; id++)
        if (live(id) && !done[id] && indeg[id] == 0 && (best < 0 || key(id) < key(best))) best = id;
      if (best < 0) break;
      done[best] = true;
      expect.push_back(best);
      for (int id = 0; id < nn; id++)
        if (live(id) && !done[id])
          for (int k = 0; k < t.g.nodes[id].n_in; k++)
            if (t.g.vals[t.g.nodes[id].in[k]].producer == best) indeg[id]--;
    }
    ASSERT_EQ((int)expect.size(), n_live);  // a DAG stays one with nodes removed
    ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
    ASSERT_EQ(t.g.n_order, n_live) << "trial " << trial;
    for (int k = 0; k < n_live; k++) ASSERT_EQ(t.g.order[k], expect[k]) << "trial " << trial << " position " << k;
  }
  EXPECT_GT(fast_shaped, 20);  // both paths ran
  EXPECT_LT(fast_shaped, 280);
}

// apx_graph_order_append against a fresh sort: random graphs sorted, then random nodes
// appended (random sections, eager flags and inputs, now and then an old node killed). When it
// says the order extends (2), the order is exactly the one apx_graph_toposort gives; when it
// says sort (1), the order is left as it was.
TEST(Ir, OrderAppendGivesTheFreshSortsOrderOrAsksForOne) {
  XorShift next{777};
  int extended = 0, refused = 0;
  for (int trial = 0; trial < 400; trial++) {
    Graph t;
    int nn = 1 + (int)(next() % 30), na = 1 + (int)(next() % 12);
    t.val("in", APX_VAL_INPUT);
    for (int i = 0; i < nn + na; i++) t.val(("v" + std::to_string(i)).c_str());
    int old_top = (int)(next() % 3);  // the old nodes' sections: 0 .. old_top
    for (int id = 0; id < nn; id++) {
      std::vector<int> in;
      for (int j = 0, k = 1 + (int)(next() % 3); j < k; j++) in.push_back(id ? 1 + (int)(next() % id) : 0);
      int out = id + 1;
      ASSERT_EQ(apx_graph_add_node(&t.g, &t.d, APX_OP_Relu, nullptr, (int)in.size(), in.data(), 1, &out), id);
      t.g.nodes[id].section = (ApxSection)(id * (old_top + 1) / nn);
      if (next() % 8 == 0) t.g.nodes[id].flags |= APX_NODEF_DEAD;
    }
    ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
    for (int a = 0; a < na; a++) {
      int id = nn + a;
      std::vector<int> in;
      for (int j = 0, k = 1 + (int)(next() % 3); j < k; j++) {
        // mostly earlier values; now and then one a later appended node makes
        int hi = next() % 6 == 0 ? nn + na : id;
        in.push_back((int)(next() % (hi + 1)));
      }
      int out = id + 1;
      ASSERT_EQ(apx_graph_add_node(&t.g, &t.d, APX_OP_Relu, nullptr, (int)in.size(), in.data(), 1, &out), id);
      int sec = next() % 4 == 0 ? (int)(next() % 3) : old_top + (int)(next() % (3 - old_top));
      t.g.nodes[id].section = (ApxSection)(sec > 2 ? 2 : sec);
      if (next() % 5 == 0) t.g.nodes[id].flags |= APX_NODEF_EAGER;
      if (next() % 10 == 0) t.g.nodes[id].flags |= APX_NODEF_DEAD;
    }
    if (next() % 10 == 0) t.g.nodes[next() % nn].flags |= APX_NODEF_DEAD;  // not append-only
    std::vector<int> before(t.g.order, t.g.order + t.g.n_order);
    int rc = apx_graph_order_append(&t.g, nn, &t.d);
    ASSERT_GE(rc, 1) << t.d.msg;
    std::vector<int> got(t.g.order, t.g.order + t.g.n_order);
    if (rc == 1) {
      refused++;
      EXPECT_EQ(got, before) << "trial " << trial;
      continue;
    }
    ASSERT_EQ(rc, 2);
    extended++;
    // a cycle among the appended nodes can only be refused, never extended
    ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << "trial " << trial << ": " << t.d.msg;
    std::vector<int> fresh(t.g.order, t.g.order + t.g.n_order);
    EXPECT_EQ(got, fresh) << "trial " << trial;
  }
  EXPECT_GT(extended, 60);  // both answers were exercised
  EXPECT_GT(refused, 60);
}

// An old node the last sort did not see (added since, then counted as old) asks for a sort.
TEST(Ir, OrderAppendRefusesAnOldNodeMissingFromTheOrder) {
  Graph t;
  int x = t.val("x", APX_VAL_INPUT), a = t.val("a"), b = t.val("b"), c = t.val("c");
  t.node(APX_OP_Relu, "ra", {x}, {a});
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
  t.node(APX_OP_Relu, "rb", {a}, {b});  // after the sort, yet below n_before
  int n_before = t.g.n_nodes;
  t.node(APX_OP_Relu, "rc", {b}, {c});
  t.g.nodes[2].section = APX_SEC_BACKWARD;
  std::vector<int> before(t.g.order, t.g.order + t.g.n_order);
  EXPECT_EQ(apx_graph_order_append(&t.g, n_before, &t.d), 1);
  EXPECT_EQ(std::vector<int>(t.g.order, t.g.order + t.g.n_order), before);
  EXPECT_EQ(apx_graph_order_append(&t.g, 1, &t.d), 2);  // counted right, it extends
  ASSERT_EQ(t.g.n_order, 3);
  EXPECT_EQ(t.g.order[1], 1);
  EXPECT_EQ(t.g.order[2], 2);
}

// apx_arena_printf formats text, %s, %d and %% by hand and everything else through
// vsnprintf: both give what snprintf gives.
TEST(Ir, ArenaPrintfAgreesWithSnprintf) {
  ApxArena a;
  apx_arena_init(&a);
  char want[1024];
  std::string longs(300, 'x');
  const char *strs[] = {"", "w", "grad/layer.0/weight", longs.c_str()};
  int ints[] = {0, 7, -1, 123456, 2147483647, -2147483647 - 1};
  for (const char *s : strs)
    for (int v : ints) {
      snprintf(want, sizeof want, "%s/grad/%s%d", s, s, v);
      EXPECT_STREQ(apx_arena_printf(&a, "%s/grad/%s%d", s, s, v), want);
      snprintf(want, sizeof want, "100%% %d%s", v, s);
      EXPECT_STREQ(apx_arena_printf(&a, "100%% %d%s", v, s), want);
      snprintf(want, sizeof want, "%5d|%-3s|%lld|%.2f", v, s, (long long)v * 3, 1.25);  // vsnprintf
      EXPECT_STREQ(apx_arena_printf(&a, "%5d|%-3s|%lld|%.2f", v, s, (long long)v * 3, 1.25), want);
    }
  EXPECT_STREQ(apx_arena_printf(&a, "plain"), "plain");
  apx_arena_free(&a);
}

// Generated names wait outside the name table until a name of their form is looked up:
// lookups of other names leave them waiting, and every value is still found by its name.
TEST(Ir, GeneratedNamesEnterTheTableWhenOneIsLookedUp) {
  Graph t;
  t.val("a");
  for (int i = 0; i < 300; i++)
    ASSERT_GE(apx_graph_add_value(&t.g, &t.d, apx_graph_unique_name(&t.g, "g"), APX_VAL_ACTIVATION,
                                  APX_DT_F32, -1, nullptr), 0);
  EXPECT_EQ(t.g.n_name_pending, 300);
  EXPECT_EQ(apx_graph_find_value(&t.g, "a"), 0);
  EXPECT_EQ(apx_graph_find_value(&t.g, "nothing"), -1);
  EXPECT_EQ(t.g.n_name_pending, 300);
  EXPECT_EQ(apx_graph_find_value(&t.g, "g_apx150"), 151);
  EXPECT_EQ(t.g.n_name_pending, 0);
  EXPECT_LT(t.val("g_apx7"), 0);  // given explicitly: found, a duplicate
  for (int i = 0; i < t.g.n_vals; i++) ASSERT_EQ(apx_graph_find_value(&t.g, t.g.vals[i].name), i);
}

// The value and node arrays grow in mappings of their own (ir.c grow_mapped): after many
// doublings every record is as written, the arrays stay writable, and a graph freed and
// made again works (the mappings are released by apx_graph_free).
TEST(Ir, ValueAndNodeArraysKeepTheirRecordsAcrossGrowth) {
  for (int round = 0; round < 2; round++) {
    Graph t;
    const int n = 20000;  // 64 -> 32768 records: nine doublings
    int prev = t.val("in", APX_VAL_INPUT);
    for (int i = 0; i < n; i++) {
      std::string name = "v" + std::to_string(i);
      int v = t.val(name.c_str());
      ASSERT_EQ(v, i + 1);
      ASSERT_EQ(t.node(APX_OP_Relu, ("r" + std::to_string(i)).c_str(), {prev}, {v}), i);
      prev = v;
    }
    ASSERT_GE(t.g.cap_vals, n + 1);
    for (int i = 0; i < n; i++) {
      const ApxValue &v = t.g.vals[i + 1];
      ASSERT_EQ(std::string(v.name), "v" + std::to_string(i));
      ASSERT_EQ(v.producer, i);
      ASSERT_EQ(v.rank, 2);
      ASSERT_EQ(v.dims[1], 3);
      ASSERT_EQ(t.g.nodes[i].in[0], i);
      ASSERT_EQ(t.g.nodes[i].out[0], i + 1);
    }
    ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
    EXPECT_EQ(t.g.n_order, n);
    EXPECT_EQ(apx_graph_find_value(&t.g, "v19999"), n);
  }
}

// Names given explicitly enter the filter at once and their slots in batches (ir.c
// name_defer): a lookup whose filter bit is clear answers "absent" without flushing, a name
// just added is found (its bit is set, the batch goes in first), a second value of that name
// is refused, and all of it holds across table growth.
TEST(Ir, DeferredNamesAreFoundAndStayUnique) {
  Graph t;
  for (int i = 0; i < 5000; i++) {  // the table grows from 256 slots several times
    std::string name = "w" + std::to_string(i) + ".exp_avg";
    ASSERT_EQ(t.val(name.c_str(), APX_VAL_STATE), i) << t.d.msg;
    if (i % 997 == 0) {
      EXPECT_EQ(apx_graph_find_value(&t.g, name.c_str()), i);  // found: flushed first
      EXPECT_EQ(t.g.n_name_deferred, 0);
    }
  }
  EXPECT_GT(t.g.n_name_deferred, 0);
  // most absent names end at a clear filter bit: nothing flushed (about 7 in 8; a name whose
  // bit is set flushes the batch, and a new value defers one again for the next lookup)
  int absent_kept = 0;
  for (int i = 0; i < 50; i++) {
    if (t.g.n_name_deferred == 0) {
      ASSERT_GE(t.val(("extra" + std::to_string(i)).c_str(), APX_VAL_STATE), 0);
    }
    ASSERT_GT(t.g.n_name_deferred, 0);
    std::string name = "nothing" + std::to_string(i);
    int32_t before = t.g.n_name_deferred;
    EXPECT_EQ(apx_graph_find_value(&t.g, name.c_str()), -1);
    absent_kept += t.g.n_name_deferred == before;
  }
  EXPECT_GE(absent_kept, 35);
  EXPECT_LT(t.val("w4999.exp_avg"), 0);  // defined twice, though maybe still deferred
  EXPECT_NE(std::string(t.d.msg).find("'w4999.exp_avg' is defined twice"), std::string::npos) << t.d.msg;
  for (int i = 0; i < 5000; i++)
    ASSERT_EQ(apx_graph_find_value(&t.g, ("w" + std::to_string(i) + ".exp_avg").c_str()), i);
  EXPECT_EQ(t.g.n_name_deferred, 0);
}

// apx_graph_find_values answers as apx_graph_find_value does, name by name: present names
// (deferred ones, generated ones still pending), absent ones, NULL and empty names, batches
// shorter and longer than its prefetch group.
TEST(Ir, BatchedLookupsAgreeWithOneByOne) {
  Graph t;
  std::vector<std::string> names;
  for (int i = 0; i < 3000; i++) {
    names.push_back("x" + std::to_string(i));
    ASSERT_EQ(t.val(names.back().c_str()), i) << t.d.msg;
  }
  const char *gen = apx_graph_unique_name(&t.g, "tmp");  // pending until a lookup of its form
  ASSERT_NE(gen, nullptr);
  int gen_id = apx_graph_add_value(&t.g, &t.d, gen, APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr);
  ASSERT_GE(gen_id, 0);
  ASSERT_GT(t.g.n_name_pending + t.g.n_name_deferred, 0);
  std::vector<std::string> asked;
  uint64_t rng = 99;
  for (int i = 0; i < 700; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int r = (int)(rng >> 33) % 5000;
    asked.push_back(r < 3000 ? names[r] : "absent" + std::to_string(r));
  }
  asked.push_back(gen);
  std::vector<const char *> ptrs;
  for (auto &s : asked) ptrs.push_back(s.c_str());
  ptrs.push_back(nullptr);
  ptrs.push_back("");
  for (int n : {0, 1, 15, 16, 17, (int)ptrs.size()}) {
    std::vector<int> ids(ptrs.size(), -7);
    apx_graph_find_values(&t.g, ptrs.data(), n, ids.data());
    for (int i = 0; i < n; i++) {
      int want = ptrs[i] && *ptrs[i] ? apx_graph_find_value(&t.g, ptrs[i]) : -1;
      ASSERT_EQ(ids[i], want) << "batch " << n << " name " << (ptrs[i] ? ptrs[i] : "(null)");
    }
    for (size_t i = n; i < ids.size(); i++) ASSERT_EQ(ids[i], -7);  // nothing past n written
  }
  std::vector<int> one(1);
  const char *g1[1] = {gen};
  apx_graph_find_values(&t.g, g1, 1, one.data());
  EXPECT_EQ(one[0], gen_id);
}
