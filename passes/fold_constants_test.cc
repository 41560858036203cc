// fold_constants_test.cc - pass_fold_constants on hand-built graphs: Shape from static
// shapes, shape subgraphs, the compile-time ops, what must not fold, and errors. Every run
// is followed by apx_graph_toposort + apx_graph_verify.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "ir/options.h"
#include "passes/fold_constants.h"
}

namespace {

using Dims = std::vector<int64_t>;

struct G {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  G() {
    apx_graph_init(&g, "m.onnx");
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    g.opset = 17;
  }
  ~G() { apx_graph_free(&g); }
  int input(const char *name, ApxDType dt, Dims dims) {
    return apx_graph_add_value(&g, &d, name, APX_VAL_INPUT, dt, (int32_t)dims.size(), dims.data());
  }
  int value(const char *name) {
    return apx_graph_add_value(&g, &d, name, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, nullptr);
  }
  template <typename T>
  int cst(const char *name, ApxDType dt, Dims dims, std::vector<T> data, ApxValueKind k = APX_VAL_CONST) {
    int v = apx_graph_add_value(&g, &d, name, k, dt, (int32_t)dims.size(), dims.data());
    g.vals[v].data = apx_arena_alloc(&g.arena, data.size() * sizeof(T) + 1);
    if (!data.empty()) memcpy(g.vals[v].data, data.data(), data.size() * sizeof(T));
    return v;
  }
  int ints(const char *name, std::vector<int64_t> xs) { return cst<int64_t>(name, APX_DT_I64, {(int64_t)xs.size()}, xs); }
  int node(ApxOp op, const char *name, std::vector<int> in, std::vector<int> out) {
    int n = apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
    g.nodes[n].onnx_index = n;
    return n;
  }
  ApxAttr *attr(int n, const char *name, ApxAttrType t) {
    ApxNode *nd = &g.nodes[n];
    ApxAttr *a = (ApxAttr *)apx_arena_alloc(&g.arena, sizeof(ApxAttr) * (nd->n_attrs + 1));
    if (nd->n_attrs) memcpy(a, nd->attrs, sizeof(ApxAttr) * nd->n_attrs);
    nd->attrs = a;
    ApxAttr *x = &a[nd->n_attrs++];
    x->name = apx_arena_strdup(&g.arena, name);
    x->type = t;
    return x;
  }
  void output(int v) {
    g.outputs = (int *)apx_arena_alloc(&g.arena, sizeof(int) * 8);
    g.outputs[g.n_outputs++] = v;
    g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
  }
  // Runs the pass, re-sorts and verifies (as the pipeline does in tests).
  int fold() {
    if (apx_graph_toposort(&g, &d)) return -2;
    int r = pass_fold_constants(&g, &o, &d);
    if (r < 0) return r;
    if (apx_graph_toposort(&g, &d) || apx_graph_verify(&g, &d)) return -3;
    return r;
  }
  bool dead(int n) { return g.nodes[n].flags & APX_NODEF_DEAD; }
  bool is_const(int v) { return g.vals[v].kind == APX_VAL_CONST && g.vals[v].data; }
  template <typename T>
  std::vector<T> data(int v) {
    const T *p = (const T *)g.vals[v].data;
    return std::vector<T>(p, p + apx_value_numel(&g.vals[v]));
  }
  Dims shape(int v) { return Dims(g.vals[v].dims, g.vals[v].dims + g.vals[v].rank); }
};

bool has(const std::string &s, const std::string &sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST(FoldConstants, FoldsShapeOfStaticInput) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), s = t.value("s");
  int n = t.node(APX_OP_Shape, "shape", {x}, {s});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_TRUE(t.dead(n));
  ASSERT_TRUE(t.is_const(s));
  EXPECT_EQ(t.g.vals[s].dtype, APX_DT_I64);
  EXPECT_EQ(t.g.vals[s].producer, -1);
  EXPECT_EQ(t.data<int64_t>(s), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t.g.n_order, 0);
}

TEST(FoldConstants, FoldsShapeWithStartAndEnd) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 4, 5}), s = t.value("s");
  int n = t.node(APX_OP_Shape, "shape", {x}, {s});
  t.attr(n, "start", APX_ATTR_INT)->i = 1;
  t.attr(n, "end", APX_ATTR_INT)->i = -1;
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int64_t>(s), (std::vector<int64_t>{3, 4}));
}

TEST(FoldConstants, FoldsShapeSubgraphFeedingReshape) {
  // Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): the exporter's flatten.
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), s = t.value("s"), b = t.value("b"), bu = t.value("bu");
  int shp = t.value("shp"), y = t.value("y");
  t.node(APX_OP_Shape, "shape", {x}, {s});
  int ga = t.node(APX_OP_Gather, "gather", {s, t.cst<int64_t>("zero", APX_DT_I64, {}, {0})}, {b});
  int un = t.node(APX_OP_Unsqueeze, "unsq", {b, t.ints("ax0", {0})}, {bu});
  int cat = t.node(APX_OP_Concat, "cat", {bu, t.ints("m1", {-1})}, {shp});
  t.attr(cat, "axis", APX_ATTR_INT)->i = 0;
  int rs = t.node(APX_OP_Reshape, "reshape", {x, shp}, {y});
  t.output(y);
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_TRUE(t.dead(ga));
  EXPECT_TRUE(t.dead(un));
  EXPECT_TRUE(t.dead(cat));
  EXPECT_FALSE(t.dead(rs));  // x is a runtime input
  EXPECT_EQ(t.data<int64_t>(shp), (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(t.shape(y), (Dims{2, 12}));
  EXPECT_EQ(t.g.n_order, 1);
}

TEST(FoldConstants, FoldsConstantOfShapeRangeAndEqual) {
  G t;
  int c = t.value("c"), r = t.value("r"), e = t.value("e");
  int cos = t.node(APX_OP_ConstantOfShape, "cos", {t.ints("shp", {2, 3})}, {c});
  ApxAttr *v = t.attr(cos, "value", APX_ATTR_TENSOR);
  v->t = (ApxTensorConst *)apx_arena_alloc(&t.g.arena, sizeof(ApxTensorConst));
  v->t->dtype = APX_DT_I64;
  v->t->rank = 1;
  v->t->dims[0] = 1;
  int64_t seven = 7;
  v->t->data = apx_arena_memdup(&t.g.arena, &seven, sizeof seven);
  int start = t.cst<int64_t>("start", APX_DT_I64, {}, {0}), lim = t.cst<int64_t>("lim", APX_DT_I64, {}, {10});
  int dl = t.cst<int64_t>("dl", APX_DT_I64, {}, {3});
  t.node(APX_OP_Range, "range", {start, lim, dl}, {r});
  t.node(APX_OP_Equal, "eq", {r, t.ints("six", {6})}, {e});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int64_t>(c), (std::vector<int64_t>(6, 7)));
  EXPECT_EQ(t.shape(c), (Dims{2, 3}));
  EXPECT_EQ(t.data<int64_t>(r), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(t.g.vals[e].dtype, APX_DT_BOOL);
  EXPECT_EQ(t.data<uint8_t>(e), (std::vector<uint8_t>{0, 0, 1, 0}));
}

TEST(FoldConstants, FoldsIntegerArithmeticCastAndSliceOnConstants) {
  G t;
  int a = t.ints("a", {4, 5, 6}), m = t.value("m"), f = t.value("f"), sl = t.value("sl");
  t.node(APX_OP_Mul, "mul", {a, t.ints("two", {2})}, {m});
  int cast = t.node(APX_OP_Cast, "cast", {m}, {f});
  t.attr(cast, "to", APX_ATTR_INT)->i = APX_DT_F32;
  t.node(APX_OP_Slice, "slice", {f, t.ints("st", {1}), t.ints("en", {100})}, {sl});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int64_t>(m), (std::vector<int64_t>{8, 10, 12}));
  EXPECT_EQ(t.data<float>(sl), (std::vector<float>{10.0f, 12.0f}));
}

TEST(FoldConstants, LeavesFloatMathAndParametersAlone) {
  G t;
  int a = t.cst<float>("a", APX_DT_F32, {2}, {1.0f, 2.0f}), w = t.cst<float>("w", APX_DT_F32, {2}, {3, 4}, APX_VAL_PARAM);
  int s = t.value("s"), r = t.value("r"), id = t.value("id");
  int add = t.node(APX_OP_Add, "add", {a, a}, {s});
  int relu = t.node(APX_OP_Relu, "relu", {a}, {r});
  int ident = t.node(APX_OP_Identity, "ident", {w}, {id});
  ASSERT_EQ(t.fold(), APX_PASS_UNCHANGED) << t.d.msg;
  EXPECT_FALSE(t.dead(add));
  EXPECT_FALSE(t.dead(relu));
  EXPECT_FALSE(t.dead(ident));
  EXPECT_EQ(t.g.vals[s].kind, APX_VAL_ACTIVATION);
  EXPECT_EQ(t.shape(s), (Dims{2}));  // still inferred
}

TEST(FoldConstants, FoldsConstantNodes) {
  G t;
  int c = t.value("c");
  int n = t.node(APX_OP_Constant, "k", {}, {c});
  ApxAttr *a = t.attr(n, "value_ints", APX_ATTR_INTS);
  int64_t xs[3] = {1, 2, 3};
  a->n = 3;
  a->ints = (int64_t *)apx_arena_memdup(&t.g.arena, xs, sizeof xs);
  t.output(c);
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int64_t>(c), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(t.g.vals[c].flags & APX_VALF_GRAPH_OUTPUT);
}

TEST(FoldConstants, RejectsCompileTimeOpOnRuntimeInput) {
  G t;
  int x = t.input("x", APX_DT_I64, {3}), e = t.value("e");
  t.node(APX_OP_Equal, "eq", {x, t.ints("k", {1, 2, 3})}, {e});
  EXPECT_EQ(t.fold(), APX_PASS_ERROR);
  EXPECT_EQ(std::string(t.d.msg), "m.onnx: node 'eq' (Equal): compile-time only op: its inputs are not "
                                  "constant (input 0 'x' is a graph input)");
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
}

TEST(FoldConstants, RejectsUnboundSymbolicDim) {
  G t;
  int x = t.input("x", APX_DT_F32, {-1, 3}), s = t.value("s");
  const char **dp = (const char **)apx_arena_alloc(&t.g.arena, 2 * sizeof(char *));
  dp[0] = "N";
  t.g.vals[x].dim_params = dp;
  t.node(APX_OP_Shape, "shape", {x}, {s});
  EXPECT_EQ(t.fold(), APX_PASS_ERROR);
  EXPECT_TRUE(has(t.d.msg, "dimension 0 ('N') is not bound: pass --dim N=V")) << t.d.msg;
}

TEST(FoldConstants, ReshapeShapeComputedAtRunTimeIsAnError) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), k = t.input("k", APX_DT_I64, {2}), s = t.value("s"), y = t.value("y");
  t.node(APX_OP_Add, "add", {k, k}, {s});
  t.node(APX_OP_Reshape, "reshape", {x, s}, {y});
  EXPECT_EQ(t.fold(), APX_PASS_ERROR);
  EXPECT_TRUE(has(t.d.msg, "node 'reshape' (Reshape) input 1 'shape' must be a compile-time constant "
                           "(value 's': it is computed at run time by node 'add' (Add))")) << t.d.msg;
}

TEST(FoldConstants, FloatInitializerUsedOnlyAsAnOperandIsNotTrained) {
  G t;
  t.g.opset = 13;
  int x = t.input("x", APX_DT_F32, {2, 3}), w = t.cst<float>("w", APX_DT_F32, {3, 3}, std::vector<float>(9, 1.0f), APX_VAL_PARAM);
  int ratio = t.cst<float>("ratio", APX_DT_F32, {}, {0.25f}, APX_VAL_PARAM);
  int tm = t.cst<uint8_t>("tm", APX_DT_BOOL, {}, {1});
  int h = t.value("h"), y = t.value("y"), m = t.value("m");
  t.node(APX_OP_MatMul, "mm", {x, w}, {h});
  int dn = t.node(APX_OP_Dropout, "drop", {h, ratio, tm}, {y, m});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.g.vals[ratio].kind, APX_VAL_CONST);
  EXPECT_EQ(t.g.vals[w].kind, APX_VAL_PARAM);
  EXPECT_FLOAT_EQ(((ApxAttrDropout *)t.g.nodes[dn].typed)->ratio, 0.25f);
  EXPECT_EQ(((ApxAttrDropout *)t.g.nodes[dn].typed)->training_mode, 1);
}

TEST(FoldConstants, RejectsAHugeCompileTimeConstant) {
  G t;
  int c = t.value("c");
  t.node(APX_OP_ConstantOfShape, "cos", {t.ints("shp", {1 << 20, 1 << 20})}, {c});
  EXPECT_EQ(t.fold(), APX_PASS_ERROR);
  EXPECT_TRUE(has(t.d.msg, "compile-time constant output 0 'c' would take 4398046511104 bytes")) << t.d.msg;
}
