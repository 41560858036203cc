// infer_test.cc - canonicalization and shape/dtype inference on hand-built graphs: ONNX
// semantics of each op family, old-opset attribute forms, the error contract, and the
// internal ops other passes create.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ir/infer.h"
}

namespace {

using Dims = std::vector<int64_t>;

struct G {
  ApxGraph g;
  ApxDiag d;
  explicit G(int64_t opset = 17, const char *file = "m.onnx") {
    apx_graph_init(&g, file);
    apx_diag_init(&d);
    d.quiet = 1;
    g.opset = opset;
  }
  ~G() { apx_graph_free(&g); }
  G(const G &) = delete;
  G &operator=(const G &) = delete;

  int input(const char *name, ApxDType dt, Dims dims) {
    int v = apx_graph_add_value(&g, &d, name, APX_VAL_INPUT, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    return v;
  }
  int value(const char *name, ApxDType dt = APX_DT_UNDEFINED, int rank = -1, Dims dims = {}) {
    int v = apx_graph_add_value(&g, &d, name, APX_VAL_ACTIVATION, dt, rank, dims.data());
    EXPECT_GE(v, 0) << d.msg;
    return v;
  }
  template <typename T>
  int cst(const char *name, ApxDType dt, Dims dims, std::vector<T> data) {
    int v = apx_graph_add_value(&g, &d, name, APX_VAL_CONST, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    g.vals[v].data = apx_arena_alloc(&g.arena, data.size() * sizeof(T) + 1);
    if (!data.empty()) memcpy(g.vals[v].data, data.data(), data.size() * sizeof(T));
    return v;
  }
  int ints(const char *name, std::vector<int64_t> xs) {
    return cst<int64_t>(name, APX_DT_I64, {(int64_t)xs.size()}, xs);
  }
  int scalar_f(const char *name, float x) { return cst<float>(name, APX_DT_F32, {}, {x}); }
  int scalar_b(const char *name, bool x) { return cst<uint8_t>(name, APX_DT_BOOL, {}, {(uint8_t)x}); }
  // A node as the loader makes it (onnx_index >= 0).
  int node(ApxOp op, const char *name, std::vector<int> in, std::vector<int> out) {
    int n = apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
    EXPECT_GE(n, 0) << d.msg;
    g.nodes[n].onnx_index = n;
    return n;
  }
  // A node as a pass makes it (onnx_index -1, typed attributes set directly).
  int pass_node(ApxOp op, std::vector<int> in, std::vector<int> out) {
    int n = apx_graph_add_node(&g, &d, op, nullptr, (int)in.size(), in.data(), (int)out.size(), out.data());
    EXPECT_GE(n, 0) << d.msg;
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
  void attr_i(int n, const char *name, int64_t v) { attr(n, name, APX_ATTR_INT)->i = v; }
  void attr_f(int n, const char *name, float v) { attr(n, name, APX_ATTR_FLOAT)->f = v; }
  void attr_s(int n, const char *name, const char *v) {
    attr(n, name, APX_ATTR_STRING)->s = apx_arena_strdup(&g.arena, v);
  }
  void attr_is(int n, const char *name, std::vector<int64_t> v) {
    ApxAttr *a = attr(n, name, APX_ATTR_INTS);
    a->n = (int32_t)v.size();
    a->ints = (int64_t *)apx_arena_alloc(&g.arena, v.size() * sizeof(int64_t) + 1);
    if (!v.empty()) memcpy(a->ints, v.data(), v.size() * sizeof(int64_t));
  }
  // canonicalize + infer; returns 0 or -1
  int run(int n) {
    if (apx_node_canonicalize(&g, n, &d)) return -1;
    return apx_node_infer(&g, n, &d);
  }
  Dims shape(int v) {
    const ApxValue *x = &g.vals[v];
    return Dims(x->dims, x->dims + (x->rank < 0 ? 0 : x->rank));
  }
  ApxDType dtype(int v) { return g.vals[v].dtype; }
  std::string msg() { return d.msg; }
  void reset() {  // a fresh diagnostic for the next expected error
    apx_diag_init(&d);
    d.quiet = 1;
  }
  template <typename T>
  T *attrs(int n) { return (T *)g.nodes[n].typed; }
};

bool has(const std::string &s, const std::string &sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST(Infer, EveryV1FoldAndInternalOpHasARule) {
  for (int op = 1; op < APX_OP_COUNT; op++) {
    uint32_t f = apx_op_info((ApxOp)op)->flags;
    if (f & (APX_OPF_V1 | APX_OPF_FOLD | APX_OPF_INTERNAL)) {
      EXPECT_TRUE(apx_infer_has_rule((ApxOp)op)) << apx_op_name((ApxOp)op);
    }
  }
}

TEST(Infer, BroadcastShapeFollowsNumpy) {
  int64_t a[3] = {2, 3, 4}, b[2] = {3, 1}, out[8];
  int32_t r = 0;
  EXPECT_EQ(apx_broadcast_shape(3, a, 2, b, &r, out), 0);
  EXPECT_EQ(Dims(out, out + r), (Dims{2, 3, 4}));
  int64_t c[1] = {5};
  EXPECT_EQ(apx_broadcast_shape(3, a, 1, c, &r, out), 1);  // last dim differs
}

// ---- elementwise -------------------------------------------------------------------------

TEST(Infer, AddBroadcastsInputs) {
  G t;
  int a = t.input("a", APX_DT_F32, {2, 3, 4}), b = t.input("b", APX_DT_F32, {3, 1}), y = t.value("y");
  int n = t.node(APX_OP_Add, "add", {a, b}, {y});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3, 4}));
  EXPECT_EQ(t.dtype(y), APX_DT_F32);
  EXPECT_TRUE(t.g.vals[y].flags & APX_VALF_SHAPE_KNOWN);
}

TEST(Infer, AddRejectsIncompatibleBroadcastNamingTheInput) {
  G t;
  int a = t.input("a", APX_DT_F32, {3, 4}), b = t.input("b", APX_DT_F32, {3, 5}), y = t.value("y");
  int n = t.node(APX_OP_Add, "add", {a, b}, {y});
  EXPECT_LT(t.run(n), 0);
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
  EXPECT_TRUE(has(t.msg(), "m.onnx: node 'add' (Add) input 1: shape [3,5] does not broadcast")) << t.msg();
}

TEST(Infer, AddRejectsMixedDtypes) {
  G t;
  int a = t.input("a", APX_DT_F32, {3}), b = t.input("b", APX_DT_F16, {3}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Mul, "mul", {a, b}, {y})), 0);
  EXPECT_TRUE(has(t.msg(), "input 1 'b': dtype float16, expected float32")) << t.msg();
}

TEST(Infer, EqualGivesBoolAndWhereBroadcastsThree) {
  G t;
  int a = t.input("a", APX_DT_I64, {4, 1}), b = t.input("b", APX_DT_I64, {3}), e = t.value("e");
  ASSERT_EQ(t.run(t.node(APX_OP_Equal, "eq", {a, b}, {e})), 0) << t.msg();
  EXPECT_EQ(t.dtype(e), APX_DT_BOOL);
  EXPECT_EQ(t.shape(e), (Dims{4, 3}));
  int x = t.input("x", APX_DT_F16, {1, 3}), y = t.input("y", APX_DT_F16, {2, 1, 1}), w = t.value("w");
  ASSERT_EQ(t.run(t.node(APX_OP_Where, "where", {e, x, y}, {w})), 0) << t.msg();
  EXPECT_EQ(t.shape(w), (Dims{2, 4, 3}));
  EXPECT_EQ(t.dtype(w), APX_DT_F16);
}

TEST(Infer, WhereNeedsBoolCondition) {
  G t;
  int c = t.input("c", APX_DT_F32, {3}), x = t.input("x", APX_DT_F32, {3}), w = t.value("w");
  EXPECT_LT(t.run(t.node(APX_OP_Where, "where", {c, x, x}, {w})), 0);
  EXPECT_TRUE(has(t.msg(), "expected bool")) << t.msg();
}

TEST(Infer, CastSetsTargetDtypeAndRejectsStrings) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 2}), y = t.value("y"), z = t.value("z");
  int n = t.node(APX_OP_Cast, "c", {x}, {y});
  t.attr_i(n, "to", APX_DT_F16);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.dtype(y), APX_DT_F16);
  EXPECT_EQ(t.attrs<ApxAttrCast>(n)->to, APX_DT_F16);
  EXPECT_EQ(t.attrs<ApxAttrCast>(n)->saturate, 1);
  int m = t.node(APX_OP_Cast, "s", {x}, {z});
  t.attr_i(m, "to", APX_DT_STRING);
  EXPECT_LT(t.run(m), 0);
  EXPECT_TRUE(has(t.msg(), "not supported yet: string tensors")) << t.msg();
}

TEST(Infer, LeakyReluAndGeluDefaults) {
  G t(20);
  int x = t.input("x", APX_DT_F32, {4}), y = t.value("y"), z = t.value("z");
  int n = t.node(APX_OP_LeakyRelu, "lr", {x}, {y});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_FLOAT_EQ(t.attrs<ApxAttrLeakyRelu>(n)->alpha, 0.01f);
  int m = t.node(APX_OP_Gelu, "gelu", {x}, {z});
  t.attr_s(m, "approximate", "tanh");
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrGelu>(m)->approximate, APX_GELU_TANH);
}

TEST(Infer, BadAttributeValueNamesNodeAttributeAndValue) {
  G t(20);
  int x = t.input("x", APX_DT_F32, {4}), y = t.value("y");
  int m = t.node(APX_OP_Gelu, "gelu", {x}, {y});
  t.attr_s(m, "approximate", "erf");
  EXPECT_LT(t.run(m), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'gelu' (Gelu): attribute 'approximate' = 'erf' (expected 'none' or 'tanh')");
}

TEST(Infer, AttributeOfWrongTypeIsAnError) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), y = t.value("y");
  int n = t.node(APX_OP_Softmax, "sm", {x}, {y});
  t.attr_f(n, "axis", 1.0f);
  EXPECT_LT(t.run(n), 0);
  EXPECT_TRUE(has(t.msg(), "attribute 'axis' must be an int, got a float")) << t.msg();
}

TEST(Infer, TranscendentalOpsRejectIntegers) {
  G t;
  int x = t.input("x", APX_DT_I64, {4}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Exp, "exp", {x}, {y})), 0);
  EXPECT_TRUE(has(t.msg(), "dtype int64 not supported here (expected a float type)")) << t.msg();
}

TEST(Infer, PowKeepsBaseDtype) {
  G t;
  int a = t.input("a", APX_DT_F32, {2, 3}), b = t.input("b", APX_DT_I64, {3}), y = t.value("y");
  ASSERT_EQ(t.run(t.node(APX_OP_Pow, "pow", {a, b}, {y})), 0) << t.msg();
  EXPECT_EQ(t.dtype(y), APX_DT_F32);
  EXPECT_EQ(t.shape(y), (Dims{2, 3}));
}

// ---- v1.1 elementwise, comparison and logic ops ------------------------------------------

TEST(Infer, ComparisonsAndLogicGiveBoolWithBroadcasting) {
  G t;
  int a = t.input("a", APX_DT_F16, {4, 1}), b = t.input("b", APX_DT_F16, {3});
  int ops[] = {APX_OP_Less, APX_OP_LessOrEqual, APX_OP_Greater, APX_OP_GreaterOrEqual};
  std::vector<int> masks;
  const char *names[] = {"y0", "y1", "y2", "y3"};
  for (int op : ops) {
    int y = t.value(names[masks.size()]);
    ASSERT_EQ(t.run(t.node((ApxOp)op, names[masks.size()], {a, b}, {y})), 0) << t.msg();
    EXPECT_EQ(t.dtype(y), APX_DT_BOOL);
    EXPECT_EQ(t.shape(y), (Dims{4, 3}));
    masks.push_back(y);
  }
  int m = t.value("m"), n = t.value("n"), u = t.value("u");
  ASSERT_EQ(t.run(t.node(APX_OP_And, "and", {masks[0], masks[1]}, {m})), 0) << t.msg();
  ASSERT_EQ(t.run(t.node(APX_OP_Or, "or", {m, t.scalar_b("t", true)}, {n})), 0) << t.msg();
  ASSERT_EQ(t.run(t.node(APX_OP_Not, "not", {n}, {u})), 0) << t.msg();
  EXPECT_EQ(t.dtype(u), APX_DT_BOOL);
  EXPECT_EQ(t.shape(u), (Dims{4, 3}));
  int w = t.value("w");  // logic ops take bool only; comparisons need one type
  EXPECT_LT(t.run(t.node(APX_OP_And, "and2", {a, a}, {w})), 0);
  EXPECT_TRUE(has(t.msg(), "expected bool")) << t.msg();
  apx_diag_init(&t.d);
  t.d.quiet = 1;
  int c = t.input("c", APX_DT_F32, {3}), z = t.value("z");
  EXPECT_LT(t.run(t.node(APX_OP_Less, "less", {a, c}, {z})), 0);
  EXPECT_TRUE(has(t.msg(), "input 1 'c': dtype float32, expected float16")) << t.msg();
}

TEST(Infer, IsNaNIsInfTakeFloatsAndReadTheirFlags) {
  G t;
  int x = t.input("x", APX_DT_BF16, {2, 5}), y = t.value("y"), z = t.value("z");
  ASSERT_EQ(t.run(t.node(APX_OP_IsNaN, "nan", {x}, {y})), 0) << t.msg();
  EXPECT_EQ(t.dtype(y), APX_DT_BOOL);
  EXPECT_EQ(t.shape(y), (Dims{2, 5}));
  int n = t.node(APX_OP_IsInf, "inf", {x}, {z});
  t.attr_i(n, "detect_negative", 0);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrIsInf>(n)->detect_negative, 0);
  EXPECT_EQ(t.attrs<ApxAttrIsInf>(n)->detect_positive, 1);
  int i = t.input("i", APX_DT_I64, {2}), w = t.value("w");
  EXPECT_LT(t.run(t.node(APX_OP_IsNaN, "nan_i", {i}, {w})), 0);
  EXPECT_TRUE(has(t.msg(), "expected a float type")) << t.msg();
}

TEST(Infer, MinMaxAreVariadicWithBroadcasting) {
  G t;
  int a = t.input("a", APX_DT_I32, {2, 1, 4}), b = t.input("b", APX_DT_I32, {3, 1}),
      c = t.input("c", APX_DT_I32, {4}), y = t.value("y"), z = t.value("z");
  ASSERT_EQ(t.run(t.node(APX_OP_Max, "max", {a, b, c}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3, 4}));
  EXPECT_EQ(t.dtype(y), APX_DT_I32);
  ASSERT_EQ(t.run(t.node(APX_OP_Min, "min", {c}, {z})), 0) << t.msg();
  EXPECT_EQ(t.shape(z), (Dims{4}));
}

TEST(Infer, ClipTakesScalarBoundsOfXsType) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), y = t.value("y"), z = t.value("z");
  ASSERT_EQ(t.run(t.node(APX_OP_Clip, "clip", {x, -1, t.scalar_f("hi", 6)}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3}));
  int bad = t.cst<float>("lo2", APX_DT_F32, {2}, {0, 1});
  EXPECT_LT(t.run(t.node(APX_OP_Clip, "clip2", {x, bad}, {z})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'clip2' (Clip) input 1 'lo2': a bound must be a scalar, got shape [2]");
  G old(10);
  int x1 = old.input("x", APX_DT_F32, {2}), y1 = old.value("y");
  int n = old.node(APX_OP_Clip, "clip6", {x1}, {y1});
  old.attr_f(n, "min", 0.0f);
  EXPECT_LT(old.run(n), 0);
  EXPECT_TRUE(has(old.msg(), "not supported yet: Clip with 'min'/'max' attributes (opset 10")) << old.msg();
}

TEST(Infer, ModNeedsFmodForFloats) {
  G t;
  int a = t.input("a", APX_DT_F32, {2, 3}), b = t.input("b", APX_DT_F32, {3}), y = t.value("y"), z = t.value("z");
  EXPECT_LT(t.run(t.node(APX_OP_Mod, "mod", {a, b}, {y})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'mod' (Mod): attribute 'fmod' = 0 with float32 inputs: ONNX Mod needs "
                     "fmod = 1 for floating-point types");
  int n = t.node(APX_OP_Mod, "fmod", {a, b}, {z});
  t.attr_i(n, "fmod", 1);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(z), (Dims{2, 3}));
  int i = t.input("i", APX_DT_I64, {4}), j = t.input("j", APX_DT_I64, {}), k = t.value("k");
  ASSERT_EQ(t.run(t.node(APX_OP_Mod, "imod", {i, j}, {k})), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrMod>(t.g.n_nodes - 1)->fmod, 0);
}

TEST(Infer, CastLikeBecomesACastToTheSecondInputsType) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 2}), like = t.input("like", APX_DT_BF16, {1}), y = t.value("y");
  int n = t.node(APX_OP_CastLike, "cl", {x, like}, {y});
  t.attr_i(n, "saturate", 0);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.g.nodes[n].op, APX_OP_Cast);
  EXPECT_EQ(t.g.nodes[n].n_in, 1);
  EXPECT_STREQ(t.g.nodes[n].op_type, "CastLike");
  EXPECT_EQ(t.attrs<ApxAttrCast>(n)->to, APX_DT_BF16);
  EXPECT_EQ(t.attrs<ApxAttrCast>(n)->saturate, 0);
  EXPECT_EQ(t.dtype(y), APX_DT_BF16);
  EXPECT_EQ(t.shape(y), (Dims{2, 2}));
  ASSERT_EQ(t.run(n), 0) << t.msg();  // idempotent: canonicalizing again keeps it
  EXPECT_EQ(t.attrs<ApxAttrCast>(n)->to, APX_DT_BF16);
}

TEST(Infer, ClipGradAndMinMaxGradHaveDyShapes) {
  G t;
  int dy = t.value("dy", APX_DT_F32, 2, {2, 3}), x = t.value("x", APX_DT_F32, 2, {2, 3});
  int lo = t.scalar_f("lo", 0), hi = t.scalar_f("hi", 1);
  int dx = t.value("dx"), dlo = t.value("dlo"), dhi = t.value("dhi");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_ClipGrad, {dy, x, lo, hi}, {dx, dlo, dhi}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dlo), (Dims{2, 3}));
  int e = t.value("e");
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_ClipGrad, {dy, x, -1, hi}, {dx, e}), &t.d), 0);
  EXPECT_TRUE(has(t.msg(), "output 1 needs input 2 (its bound)")) << t.msg();
  int y = t.value("y", APX_DT_F32, 2, {2, 3}), b = t.value("b", APX_DT_F32, 1, {3});
  int g0 = t.value("g0"), g1 = t.value("g1");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_MinMaxGrad, {dy, y, x, b}, {g0, g1}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(g1), (Dims{2, 3}));
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_MinMaxGrad, {dy, y, x, b}, {g0}), &t.d), 0);
}

// ---- matmul family -----------------------------------------------------------------------

TEST(Infer, GemmInnerDimMismatchGivesTheContractMessage) {
  G t(17, "model.onnx");
  int a = t.input("a", APX_DT_F32, {32, 64}), b = t.input("b", APX_DT_F32, {65, 128}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Gemm, "Gemm_12", {a, b}, {y})), 0);
  EXPECT_EQ(t.msg(), "model.onnx: node 'Gemm_12' (Gemm) input 1: expected [64,128], got [65,128]");
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
}

TEST(Infer, GemmDefaultsTransposesAndBias) {
  G t;
  int a = t.input("a", APX_DT_F32, {4, 3}), b = t.input("b", APX_DT_F32, {5, 4});
  int c = t.input("c", APX_DT_F32, {5}), y = t.value("y");
  int n = t.node(APX_OP_Gemm, "g", {a, b, c}, {y});
  t.attr_i(n, "transA", 1);
  t.attr_i(n, "transB", 1);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{3, 5}));
  ApxAttrGemm *ga = t.attrs<ApxAttrGemm>(n);
  EXPECT_EQ(ga->alpha, 1.0f);
  EXPECT_EQ(ga->beta, 1.0f);
  EXPECT_EQ(ga->trans_a, 1);
  EXPECT_EQ(ga->trans_b, 1);
  int c2 = t.input("c2", APX_DT_F32, {4, 5}), y2 = t.value("y2");
  int m = t.node(APX_OP_Gemm, "g2", {a, b, c2}, {y2});
  t.attr_i(m, "transA", 1);
  t.attr_i(m, "transB", 1);
  EXPECT_LT(t.run(m), 0);
  EXPECT_TRUE(has(t.msg(), "input 2: shape [4,5] does not broadcast to the output [3,5]")) << t.msg();
}

TEST(Infer, MatMulBroadcastsBatchAndHandlesVectors) {
  G t;
  int a = t.input("a", APX_DT_F16, {2, 1, 3, 4}), b = t.input("b", APX_DT_F16, {5, 4, 6}), y = t.value("y");
  ASSERT_EQ(t.run(t.node(APX_OP_MatMul, "mm", {a, b}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 5, 3, 6}));
  int v = t.input("v", APX_DT_F16, {4}), m = t.input("m", APX_DT_F16, {4, 6}), y2 = t.value("y2");
  ASSERT_EQ(t.run(t.node(APX_OP_MatMul, "vm", {v, m}, {y2})), 0) << t.msg();
  EXPECT_EQ(t.shape(y2), (Dims{6}));
  int m2 = t.input("m2", APX_DT_F16, {3, 4}), y3 = t.value("y3");
  ASSERT_EQ(t.run(t.node(APX_OP_MatMul, "mv", {m2, v}, {y3})), 0) << t.msg();
  EXPECT_EQ(t.shape(y3), (Dims{3}));
  int bad = t.input("bad", APX_DT_F16, {5, 6}), y4 = t.value("y4");
  EXPECT_LT(t.run(t.node(APX_OP_MatMul, "mm_bad", {m2, bad}, {y4})), 0);
  EXPECT_TRUE(has(t.msg(), "input 1: expected [4,6], got [5,6]")) << t.msg();
}

TEST(Infer, FusedMatMulTransposesLastTwoDims) {
  G t;
  int a = t.value("a", APX_DT_F32, 3, {2, 4, 3}), b = t.value("b", APX_DT_F32, 2, {5, 4}), y = t.value("y");
  int n = t.pass_node(APX_OP_FusedMatMul, {a, b}, {y});
  *t.attrs<ApxAttrFusedMatMul>(n) = ApxAttrFusedMatMul{1, 1, 1.0f};
  // a: (2, 4, 3)^T -> (2, 3, 4); b^T: (4, 5)
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3, 5}));
}

TEST(Infer, FusedDenseAndItsGradient) {
  G t;
  int x = t.value("x", APX_DT_F16, 3, {2, 7, 16}), w = t.value("w", APX_DT_F16, 2, {32, 16});
  int b = t.value("b", APX_DT_F16, 1, {32}), y = t.value("y");
  int n = t.pass_node(APX_OP_FusedDense, {x, w, b}, {y});
  t.attrs<ApxAttrFusedDense>(n)->trans_w = 1;
  ASSERT_EQ(apx_node_infer(&t.g, n, &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 7, 32}));
  int dy = t.value("dy", APX_DT_F16, 3, {2, 7, 32}), dx = t.value("dx"), dw = t.value("dw"), db = t.value("db");
  int m = t.pass_node(APX_OP_FusedDenseGrad, {dy, x, w, y}, {dx, dw, db});
  t.attrs<ApxAttrFusedDense>(m)->trans_w = 1;
  ASSERT_EQ(apx_node_infer(&t.g, m, &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dx), (Dims{2, 7, 16}));
  EXPECT_EQ(t.shape(dw), (Dims{32, 16}));
  EXPECT_EQ(t.shape(db), (Dims{32}));
}

// ---- normalization, softmax, dropout -------------------------------------------------------

TEST(Infer, SoftmaxNormalizesAxisDefaultLast) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), y = t.value("y");
  int n = t.node(APX_OP_Softmax, "sm", {x}, {y});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrAxis>(n)->axis, 2);
}

TEST(Infer, SoftmaxBeforeOpset13AcceptsOnlyTheLastAxis) {
  G t(11);
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), y = t.value("y"), x2 = t.input("x2", APX_DT_F32, {2, 3}), y2 = t.value("y2");
  EXPECT_LT(t.run(t.node(APX_OP_Softmax, "sm", {x}, {y})), 0);  // default axis 1 of rank 3
  EXPECT_TRUE(has(t.msg(), "not supported yet: Softmax with axis 1 before opset 13")) << t.msg();
  apx_diag_init(&t.d);
  int n = t.node(APX_OP_LogSoftmax, "lsm", {x2}, {y2});  // axis 1 of rank 2 is the last
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrAxis>(n)->axis, 1);
}

TEST(Infer, LayerNormStatsUseStashTypeAndReducedShape) {
  G t;
  int x = t.input("x", APX_DT_F16, {2, 5, 8}), s = t.input("s", APX_DT_F16, {8}), b = t.input("b", APX_DT_F16, {8});
  int y = t.value("y"), mean = t.value("mean"), inv = t.value("inv");
  int n = t.node(APX_OP_LayerNormalization, "ln", {x, s, b}, {y, mean, inv});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrLayerNorm>(n)->axis, 2);
  EXPECT_FLOAT_EQ(t.attrs<ApxAttrLayerNorm>(n)->epsilon, 1e-5f);
  EXPECT_EQ(t.dtype(y), APX_DT_F16);
  EXPECT_EQ(t.dtype(mean), APX_DT_F32);
  EXPECT_EQ(t.shape(mean), (Dims{2, 5, 1}));
  EXPECT_EQ(t.shape(inv), (Dims{2, 5, 1}));
  int s2 = t.input("s2", APX_DT_F16, {7}), y2 = t.value("y2");
  EXPECT_LT(t.run(t.node(APX_OP_LayerNormalization, "ln2", {x, s2}, {y2})), 0);
  EXPECT_TRUE(has(t.msg(), "input 1: expected [8], got [7]")) << t.msg();
}

TEST(Infer, BatchNormTrainingAcceptsRunningAndSavedStatOutputs) {
  G t(15);
  int x = t.input("x", APX_DT_F16, {4, 3, 5, 5});
  int sc = t.input("sc", APX_DT_F32, {3}), bi = t.input("bi", APX_DT_F32, {3});
  int mu = t.input("mu", APX_DT_F32, {3}), var = t.input("var", APX_DT_F32, {3});
  int y = t.value("y"), rm = t.value("rm"), rv = t.value("rv"), sm = t.value("sm"), si = t.value("si");
  int n = t.node(APX_OP_BatchNormalization, "bn", {x, sc, bi, mu, var}, {y, rm, rv, sm, si});
  t.attr_i(n, "training_mode", 1);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrBatchNorm>(n)->training_mode, 1);
  EXPECT_FLOAT_EQ(t.attrs<ApxAttrBatchNorm>(n)->momentum, 0.9f);
  EXPECT_EQ(t.shape(y), (Dims{4, 3, 5, 5}));
  EXPECT_EQ(t.dtype(y), APX_DT_F16);
  for (int v : {rm, rv, sm, si}) {
    EXPECT_EQ(t.shape(v), (Dims{3}));
    EXPECT_EQ(t.dtype(v), APX_DT_F32);
  }
  int bad = t.input("bad", APX_DT_F32, {4}), y2 = t.value("y2");
  EXPECT_LT(t.run(t.node(APX_OP_BatchNormalization, "bn2", {x, sc, bi, bad, var}, {y2})), 0);
  EXPECT_TRUE(has(t.msg(), "input 3: expected [3], got [4]")) << t.msg();
}

TEST(Infer, BatchNormBeforeOpset14TrainsWhenStatsOutputsExist) {
  G t(12);
  int x = t.input("x", APX_DT_F32, {2, 3, 4, 4}), p = t.input("p", APX_DT_F32, {3});
  int y = t.value("y"), rm = t.value("rm"), rv = t.value("rv");
  int n = t.node(APX_OP_BatchNormalization, "bn", {x, p, p, p, p}, {y, rm, rv});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrBatchNorm>(n)->training_mode, 1);
}

TEST(Infer, DropoutReadsConstantInputsAndGivesBoolMask) {
  G t(13);
  int x = t.input("x", APX_DT_F32, {3, 4}), r = t.scalar_f("r", 0.25f), tm = t.scalar_b("tm", true);
  int y = t.value("y"), mask = t.value("mask");
  int n = t.node(APX_OP_Dropout, "do", {x, r, tm}, {y, mask});
  t.attrs<ApxAttrDropout>(n)->rng_stream = 7;  // assigned by the compiler, kept
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_FLOAT_EQ(t.attrs<ApxAttrDropout>(n)->ratio, 0.25f);
  EXPECT_EQ(t.attrs<ApxAttrDropout>(n)->training_mode, 1);
  EXPECT_EQ(t.attrs<ApxAttrDropout>(n)->rng_stream, 7);
  EXPECT_EQ(t.dtype(mask), APX_DT_BOOL);
  EXPECT_EQ(t.shape(mask), (Dims{3, 4}));
}

TEST(Infer, DropoutBeforeOpset12ReadsTheRatioAttribute) {
  G t(11);
  int x = t.input("x", APX_DT_F32, {3}), y = t.value("y");
  int n = t.node(APX_OP_Dropout, "do", {x}, {y});
  t.attr_f(n, "ratio", 0.2f);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_FLOAT_EQ(t.attrs<ApxAttrDropout>(n)->ratio, 0.2f);
  EXPECT_EQ(t.attrs<ApxAttrDropout>(n)->training_mode, 0);
}

TEST(Infer, DropoutRatioMustBeConstant) {
  G t(13);
  int x = t.input("x", APX_DT_F32, {3}), r = t.input("r", APX_DT_F32, {}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Dropout, "do", {x, r}, {y})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'do' (Dropout) input 1 'ratio' must be a compile-time constant "
                     "(value 'r': it is a graph input)");
}

// ---- conv and pooling ----------------------------------------------------------------------

TEST(Infer, ConvResolvesSameUpperAndSameLowerPads) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 1, 4, 4}), w = t.input("w", APX_DT_F32, {2, 1, 3, 3});
  int y = t.value("y"), y2 = t.value("y2");
  int n = t.node(APX_OP_Conv, "cu", {x, w}, {y});
  t.attr_s(n, "auto_pad", "SAME_UPPER");
  t.attr_is(n, "strides", {2, 2});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{1, 2, 2, 2}));
  ApxAttrConv *a = t.attrs<ApxAttrConv>(n);
  // out = ceil(4/2) = 2, total pad = (2-1)*2 + 3 - 4 = 1: the extra pad goes at the end
  EXPECT_EQ(Dims(a->pads, a->pads + 6), (Dims{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(a->group, 1);
  EXPECT_EQ(Dims(a->kernel, a->kernel + 3), (Dims{1, 3, 3}));
  int m = t.node(APX_OP_Conv, "cl", {x, w}, {y2});
  t.attr_s(m, "auto_pad", "SAME_LOWER");
  t.attr_is(m, "strides", {2, 2});
  ASSERT_EQ(t.run(m), 0) << t.msg();
  ApxAttrConv *b = t.attrs<ApxAttrConv>(m);
  EXPECT_EQ(Dims(b->pads, b->pads + 6), (Dims{0, 1, 1, 0, 0, 0}));
}

TEST(Infer, ConvChecksChannelsAndGroups) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 4, 8, 8}), w = t.input("w", APX_DT_F32, {6, 2, 3, 3});
  int bias = t.input("bias", APX_DT_F32, {6}), y = t.value("y"), y2 = t.value("y2");
  int n = t.node(APX_OP_Conv, "c", {x, w, bias}, {y});
  t.attr_i(n, "group", 2);
  t.attr_is(n, "pads", {1, 1, 1, 1});
  t.attr_is(n, "dilations", {2, 1});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  // H: (8 + 2 - 5) / 1 + 1 = 6, W: (8 + 2 - 3) + 1 = 8
  EXPECT_EQ(t.shape(y), (Dims{2, 6, 6, 8}));
  int m = t.node(APX_OP_Conv, "c2", {x, w}, {y2});  // group 1 needs 4 input channels per filter
  EXPECT_LT(t.run(m), 0);
  EXPECT_TRUE(has(t.msg(), "input 1: expected [6,4,3,3], got [6,2,3,3]")) << t.msg();
}

// 3-D windows use all three spatial slots (depth, height, width); rank 6 is refused.
TEST(Infer, Conv3DUsesEveryWindowSlot) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 2, 5, 6, 7}), w = t.input("w", APX_DT_F32, {4, 2, 3, 3, 3});
  int y = t.value("y");
  int n = t.node(APX_OP_Conv, "c3", {x, w}, {y});
  t.attr_is(n, "strides", {2, 1, 1});
  t.attr_is(n, "pads", {1, 0, 1, 1, 0, 1});
  t.attr_is(n, "dilations", {1, 1, 2});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  // D: (5 + 2 - 3) / 2 + 1 = 3, H: 6 - 3 + 1 = 4, W: 7 + 2 - 5 + 1 = 5
  EXPECT_EQ(t.shape(y), (Dims{1, 4, 3, 4, 5}));
  ApxAttrConv *a = t.attrs<ApxAttrConv>(n);
  EXPECT_EQ(Dims(a->pads, a->pads + 6), (Dims{1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(Dims(a->strides, a->strides + 3), (Dims{2, 1, 1}));
  int pv = t.value("p");
  int m = t.node(APX_OP_MaxPool, "mp3", {x}, {pv});
  t.attr_is(m, "kernel_shape", {2, 2, 2});
  t.attr_is(m, "strides", {2, 2, 2});
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(pv), (Dims{1, 2, 2, 3, 3}));
  int x6 = t.input("x6", APX_DT_F32, {1, 1, 4, 4, 4, 4}), w6 = t.input("w6", APX_DT_F32, {1, 1, 3, 3, 3, 3});
  EXPECT_LT(t.run(t.node(APX_OP_Conv, "c4", {x6, w6}, {t.value("y6")})), 0);
  EXPECT_TRUE(has(t.msg(), "not supported yet: 4-D Conv (input 0 'x6' has rank 6; supported: 1-D, 2-D and 3-D)"))
      << t.msg();
}

// ConvTranspose: Y = strides (I - 1) + output_padding + (k - 1) dilations + 1 - pads; output_shape
// and SAME_* become pads (ONNX's split: SAME_UPPER puts the smaller half first, otherwise the
// larger), an output_shape above the natural size more output_padding.
TEST(Infer, ConvTransposeResolvesOutputShapeAndAutoPad) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 4, 3, 3}), w = t.input("w", APX_DT_F32, {4, 3, 3, 3});
  int bias = t.input("bias", APX_DT_F32, {6});
  int y = t.value("y"), y2 = t.value("y2"), y3 = t.value("y3"), y4 = t.value("y4");
  int n = t.node(APX_OP_ConvTranspose, "ct", {x, w, bias}, {y});
  t.attr_i(n, "group", 2);
  t.attr_is(n, "strides", {2, 2});
  t.attr_is(n, "pads", {1, 0, 1, 1});
  t.attr_is(n, "output_padding", {1, 0});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  // H: 2 * 2 + 1 + 3 - 2 = 6, W: 2 * 2 + 0 + 3 - 1 = 6; C_out = 3 * group
  EXPECT_EQ(t.shape(y), (Dims{1, 6, 6, 6}));
  int m = t.node(APX_OP_ConvTranspose, "su", {x, w}, {y2});
  t.attr_i(m, "group", 2);
  t.attr_s(m, "auto_pad", "SAME_UPPER");
  t.attr_is(m, "strides", {2, 2});
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(y2), (Dims{1, 6, 6, 6}));  // in * strides; total pad 2 * 2 + 3 - 6 = 1
  ApxAttrConvTranspose *a = t.attrs<ApxAttrConvTranspose>(m);
  EXPECT_EQ(Dims(a->pads, a->pads + 6), (Dims{0, 0, 0, 0, 1, 1}));
  int o = t.node(APX_OP_ConvTranspose, "os", {x, w}, {y3});
  t.attr_i(o, "group", 2);
  t.attr_is(o, "output_shape", {4, 9});  // natural 5: total pad 1 on H; 4 more positions on W
  ASSERT_EQ(t.run(o), 0) << t.msg();
  EXPECT_EQ(t.shape(y3), (Dims{1, 6, 4, 9}));
  ApxAttrConvTranspose *b = t.attrs<ApxAttrConvTranspose>(o);
  EXPECT_EQ(Dims(b->pads, b->pads + 6), (Dims{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(Dims(b->output_padding, b->output_padding + 3), (Dims{0, 0, 4}));
  int q = t.node(APX_OP_ConvTranspose, "bad", {x, w}, {y4});  // pads larger than the output
  t.attr_is(q, "pads", {3, 3, 3, 3});
  EXPECT_LT(t.run(q), 0);
  EXPECT_TRUE(has(t.msg(), "output size -1 of spatial dim 0 is not positive")) << t.msg();
}

// GlobalAveragePool: any spatial rank (the kernels reduce the trailing dims as one)
TEST(Infer, GlobalAveragePoolKeepsTheRank) {
  G t;
  int x1 = t.input("x1", APX_DT_F32, {2, 3, 7}), x3 = t.input("x3", APX_DT_F32, {2, 3, 4, 5, 6});
  int y1 = t.value("y1"), y3 = t.value("y3");
  int n = t.node(APX_OP_GlobalAveragePool, "g1", {x1}, {y1});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y1), (Dims{2, 3, 1}));
  int m = t.node(APX_OP_GlobalAveragePool, "g3", {x3}, {y3});
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(y3), (Dims{2, 3, 1, 1, 1}));
}

TEST(Infer, ConvTranspose3D) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 1, 4, 4, 4}), w = t.input("w", APX_DT_F32, {1, 2, 3, 3, 3}), y = t.value("y");
  int n = t.node(APX_OP_ConvTranspose, "c3", {x, w}, {y});
  t.attr_is(n, "strides", {2, 1, 1});
  t.attr_is(n, "output_padding", {1, 0, 0});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  // D: 2 * 3 + 1 + 3 = 10, H, W: 3 + 3 = 6
  EXPECT_EQ(t.shape(y), (Dims{1, 2, 10, 6, 6}));
  ApxAttrConvTranspose *a = t.attrs<ApxAttrConvTranspose>(n);
  EXPECT_EQ(Dims(a->output_padding, a->output_padding + 3), (Dims{1, 0, 0}));
}

// 1-D windows: the typed attributes hold two spatial entries, the first unit (X read as
// (N, C, 1, L)); Y keeps X's rank.
TEST(Infer, OneDimensionalWindowsCanonicalizeWithAUnitLeadingEntry) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 4, 9}), w = t.input("w", APX_DT_F32, {6, 2, 3});
  int y = t.value("y"), p = t.value("p"), ct = t.value("ct");
  int n = t.node(APX_OP_Conv, "c", {x, w}, {y});
  t.attr_i(n, "group", 2);
  t.attr_is(n, "strides", {2});
  t.attr_is(n, "pads", {1, 2});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 6, 5}));  // (9 + 3 - 3) / 2 + 1
  ApxAttrConv *a = t.attrs<ApxAttrConv>(n);
  EXPECT_EQ(Dims(a->kernel, a->kernel + 3), (Dims{1, 1, 3}));
  EXPECT_EQ(Dims(a->strides, a->strides + 3), (Dims{1, 1, 2}));
  EXPECT_EQ(Dims(a->pads, a->pads + 6), (Dims{0, 0, 1, 0, 0, 2}));
  int m = t.node(APX_OP_MaxPool, "mp", {x}, {p});
  t.attr_is(m, "kernel_shape", {3});
  t.attr_s(m, "auto_pad", "SAME_UPPER");
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(p), (Dims{2, 4, 9}));
  ApxAttrPool *b = t.attrs<ApxAttrPool>(m);
  EXPECT_EQ(Dims(b->pads, b->pads + 6), (Dims{0, 0, 1, 0, 0, 1}));
  int q = t.node(APX_OP_ConvTranspose, "ct", {x, t.input("wt", APX_DT_F32, {4, 3, 2})}, {ct});
  t.attr_is(q, "strides", {2});
  t.attr_is(q, "output_shape", {20});  // natural 2 * 8 + 2 = 18: 2 more output_padding
  ASSERT_EQ(t.run(q), 0) << t.msg();
  EXPECT_EQ(t.shape(ct), (Dims{2, 3, 20}));
  int r = t.node(APX_OP_Conv, "bad", {x, w}, {t.value("y2")});
  t.attr_is(r, "strides", {2, 2});
  EXPECT_LT(t.run(r), 0);
  EXPECT_TRUE(has(t.msg(), "attribute 'strides' has 2 values, expected 1")) << t.msg();
}

TEST(Infer, MaxPoolCeilModeAndInt64Indices) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 3, 4, 4}), y = t.value("y"), idx = t.value("idx");
  int n = t.node(APX_OP_MaxPool, "mp", {x}, {y, idx});
  t.attr_is(n, "kernel_shape", {3, 3});
  t.attr_is(n, "strides", {2, 2});
  t.attr_i(n, "ceil_mode", 1);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{1, 3, 2, 2}));
  EXPECT_EQ(t.dtype(idx), APX_DT_I64);
  EXPECT_EQ(t.shape(idx), (Dims{1, 3, 2, 2}));
}

TEST(Infer, AveragePoolNeedsKernelShape) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 3, 4, 4}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_AveragePool, "ap", {x}, {y})), 0);
  EXPECT_TRUE(has(t.msg(), "attribute 'kernel_shape' is required")) << t.msg();
}

TEST(Infer, GlobalAveragePoolKeepsChannels) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 7, 7}), y = t.value("y");
  ASSERT_EQ(t.run(t.node(APX_OP_GlobalAveragePool, "gap", {x}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3, 1, 1}));
}

// ---- shape ops -----------------------------------------------------------------------------

TEST(Infer, ReshapeCopiesZerosAndInfersMinusOne) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), s = t.ints("s", {0, -1, 2}), y = t.value("y");
  ASSERT_EQ(t.run(t.node(APX_OP_Reshape, "r", {x, s}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 6, 2}));
  int s2 = t.ints("s2", {5, -1}), y2 = t.value("y2");
  EXPECT_LT(t.run(t.node(APX_OP_Reshape, "r2", {x, s2}, {y2})), 0);
  EXPECT_TRUE(has(t.msg(), "cannot reshape [2,3,4] (24 elements)")) << t.msg();
}

TEST(Infer, ReshapeShapeMustBeACompileTimeConstant) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), s = t.input("s", APX_DT_I64, {2}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Reshape, "r", {x, s}, {y})), 0);
  EXPECT_TRUE(has(t.msg(), "m.onnx: node 'r' (Reshape) input 1 'shape' must be a compile-time constant")) << t.msg();
}

TEST(Infer, ReshapeWithoutShapeInputTakesThePresetOutputWhenPassCreated) {
  G t;
  int x = t.value("x", APX_DT_F32, 2, {2, 6}), y = t.value("y", APX_DT_UNDEFINED, 3, {3, 2, 2});
  int n = t.pass_node(APX_OP_Reshape, {x}, {y});
  ASSERT_EQ(apx_node_infer(&t.g, n, &t.d), 0) << t.msg();
  EXPECT_EQ(t.dtype(y), APX_DT_F32);
  int z = t.value("z", APX_DT_UNDEFINED, 1, {5});
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_Reshape, {x}, {z}), &t.d), 0);
}

TEST(Infer, SqueezeAndUnsqueezeReadAxesByOpset) {
  G old(11), cur(13);
  for (G *t : {&old, &cur}) {
    int x = t->input("x", APX_DT_F32, {1, 3, 1, 5}), y = t->value("y"), z = t->value("z");
    int sq = t->g.opset < 13 ? t->node(APX_OP_Squeeze, "sq", {x}, {y})
                             : t->node(APX_OP_Squeeze, "sq", {x, t->ints("a", {-2})}, {y});
    if (t->g.opset < 13) t->attr_is(sq, "axes", {-2});
    ASSERT_EQ(t->run(sq), 0) << t->msg();
    EXPECT_EQ(t->shape(y), (Dims{1, 3, 5}));
    int us = t->g.opset < 13 ? t->node(APX_OP_Unsqueeze, "us", {y}, {z})
                             : t->node(APX_OP_Unsqueeze, "us", {y, t->ints("b", {-1, 0})}, {z});
    if (t->g.opset < 13) t->attr_is(us, "axes", {-1, 0});
    ASSERT_EQ(t->run(us), 0) << t->msg();
    EXPECT_EQ(t->shape(z), (Dims{1, 1, 3, 5, 1}));
    EXPECT_EQ(t->attrs<ApxAttrAxes>(us)->n_axes, 2);
    EXPECT_EQ(t->attrs<ApxAttrAxes>(us)->axes[0], 0);
    EXPECT_EQ(t->attrs<ApxAttrAxes>(us)->axes[1], 4);
  }
}

TEST(Infer, SqueezeWithoutAxesDropsEveryOneDimAndRejectsOthers) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 3, 1}), y = t.value("y"), z = t.value("z");
  int n = t.node(APX_OP_Squeeze, "sq", {x}, {y});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{3}));
  EXPECT_EQ(t.attrs<ApxAttrAxes>(n)->n_axes, 2);
  EXPECT_LT(t.run(t.node(APX_OP_Squeeze, "sq2", {x, t.ints("a", {1})}, {z})), 0);
  EXPECT_TRUE(has(t.msg(), "cannot squeeze axis 1 of size 3")) << t.msg();
}

TEST(Infer, SplitSizesFromAttributeInputOrEvenly) {
  G old(11), cur(13);
  int x = old.input("x", APX_DT_F32, {2, 6}), a = old.value("a"), b = old.value("b");
  int n = old.node(APX_OP_Split, "sp", {x}, {a, b});
  old.attr_i(n, "axis", -1);
  old.attr_is(n, "split", {2, 4});
  ASSERT_EQ(old.run(n), 0) << old.msg();
  EXPECT_EQ(old.shape(a), (Dims{2, 2}));
  EXPECT_EQ(old.shape(b), (Dims{2, 4}));
  int x2 = cur.input("x", APX_DT_F32, {6}), c = cur.value("c"), dd = cur.value("d"), e = cur.value("e");
  ASSERT_EQ(cur.run(cur.node(APX_OP_Split, "sp", {x2}, {c, dd, e})), 0) << cur.msg();
  EXPECT_EQ(cur.shape(e), (Dims{2}));
  int f = cur.value("f"), h = cur.value("h");
  ASSERT_EQ(cur.run(cur.node(APX_OP_Split, "sp2", {x2, cur.ints("s", {1, 5})}, {f, h})), 0) << cur.msg();
  EXPECT_EQ(cur.shape(h), (Dims{5}));
  int i1 = cur.value("i1"), i2 = cur.value("i2"), i3 = cur.value("i3"), i4 = cur.value("i4");
  EXPECT_LT(cur.run(cur.node(APX_OP_Split, "sp3", {x2}, {i1, i2, i3, i4})), 0);
  EXPECT_TRUE(has(cur.msg(), "cannot split dim 6 (axis 0) evenly into 4 outputs")) << cur.msg();
}

TEST(Infer, SliceNormalizesNegativeClampedAndReversedBounds) {
  G t;
  int x = t.input("x", APX_DT_F32, {20, 10, 5}), y = t.value("y");
  int st = t.ints("st", {-3, 1}), en = t.ints("en", {1000, -100}), ax = t.ints("ax", {0, 1}), sp = t.ints("sp", {1, -1});
  int n = t.node(APX_OP_Slice, "sl", {x, st, en, ax, sp}, {y});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  // axis 0: [17, 20) -> 3; axis 1: from 1 down to (clamped) -1 exclusive -> 2
  EXPECT_EQ(t.shape(y), (Dims{3, 2, 5}));
  ApxAttrSlice *a = t.attrs<ApxAttrSlice>(n);
  EXPECT_EQ(a->rank, 3);
  EXPECT_EQ(Dims(a->starts, a->starts + 3), (Dims{17, 1, 0}));
  EXPECT_EQ(Dims(a->steps, a->steps + 3), (Dims{1, -1, 1}));
}

TEST(Infer, SliceBeforeOpset10ReadsAttributes) {
  G t(9);
  int x = t.input("x", APX_DT_F32, {4, 6}), y = t.value("y");
  int n = t.node(APX_OP_Slice, "sl", {x}, {y});
  t.attr_is(n, "starts", {1});
  t.attr_is(n, "ends", {-1});
  t.attr_is(n, "axes", {1});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{4, 4}));
}

TEST(Infer, ConcatSumsTheAxisAndChecksTheOtherDims) {
  G t;
  int a = t.input("a", APX_DT_F32, {2, 3, 4}), b = t.input("b", APX_DT_F32, {2, 5, 4}), y = t.value("y");
  int n = t.node(APX_OP_Concat, "cat", {a, b}, {y});
  t.attr_i(n, "axis", -2);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 8, 4}));
  int c = t.input("c", APX_DT_F32, {2, 7, 5}), y2 = t.value("y2");
  int m = t.node(APX_OP_Concat, "cat2", {a, c}, {y2});
  t.attr_i(m, "axis", 1);
  EXPECT_LT(t.run(m), 0);
  EXPECT_TRUE(has(t.msg(), "input 1: expected [2,7,4], got [2,7,5]")) << t.msg();
}

TEST(Infer, GatherTransposeFlattenExpand) {
  G t;
  int data = t.input("data", APX_DT_F32, {5, 4, 3}), idx = t.input("idx", APX_DT_I64, {2, 6}), y = t.value("y");
  int n = t.node(APX_OP_Gather, "ga", {data, idx}, {y});
  t.attr_i(n, "axis", 1);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{5, 2, 6, 3}));
  int tr = t.value("tr");
  ASSERT_EQ(t.run(t.node(APX_OP_Transpose, "tp", {data}, {tr})), 0) << t.msg();
  EXPECT_EQ(t.shape(tr), (Dims{3, 4, 5}));
  int fl = t.value("fl");
  int f = t.node(APX_OP_Flatten, "fl", {data}, {fl});
  t.attr_i(f, "axis", 3);  // rank is allowed
  ASSERT_EQ(t.run(f), 0) << t.msg();
  EXPECT_EQ(t.shape(fl), (Dims{60, 1}));
  int ex = t.value("ex");
  ASSERT_EQ(t.run(t.node(APX_OP_Expand, "ex", {data, t.ints("es", {2, 1, 1, 1})}, {ex})), 0) << t.msg();
  EXPECT_EQ(t.shape(ex), (Dims{2, 5, 4, 3}));
}

TEST(Infer, ReduceAxesAttributeOrInputByOpset) {
  G t(13);
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), y = t.value("y"), z = t.value("z"), w = t.value("w");
  int n = t.node(APX_OP_ReduceMean, "rm", {x}, {y});  // ReduceMean-13: axes attribute
  t.attr_is(n, "axes", {-1, 0});
  t.attr_i(n, "keepdims", 0);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{3}));
  int m = t.node(APX_OP_ReduceSum, "rs", {x, t.ints("ax", {1})}, {z});  // ReduceSum-13: input
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(z), (Dims{2, 1, 4}));
  ASSERT_EQ(t.run(t.node(APX_OP_ReduceSum, "all", {x}, {w})), 0) << t.msg();
  EXPECT_EQ(t.shape(w), (Dims{1, 1, 1}));
}

TEST(Infer, ShapeGivesInt64WithStartAndEnd) {
  G t(15);
  int x = t.input("x", APX_DT_F32, {2, 3, 4, 5}), y = t.value("y");
  int n = t.node(APX_OP_Shape, "sh", {x}, {y});
  t.attr_i(n, "start", -3);
  t.attr_i(n, "end", -1);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.dtype(y), APX_DT_I64);
  EXPECT_EQ(t.shape(y), (Dims{2}));
}

TEST(Infer, RangeAndConstantOfShapeNeedConstants) {
  G t;
  int s = t.cst<int32_t>("s", APX_DT_I32, {}, {10}), l = t.cst<int32_t>("l", APX_DT_I32, {}, {1});
  int dl = t.cst<int32_t>("dl", APX_DT_I32, {}, {-3}), y = t.value("y");
  ASSERT_EQ(t.run(t.node(APX_OP_Range, "rg", {s, l, dl}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{3}));  // 10, 7, 4
  EXPECT_EQ(t.dtype(y), APX_DT_I32);
  int c = t.value("c");
  ASSERT_EQ(t.run(t.node(APX_OP_ConstantOfShape, "cos", {t.ints("shp", {2, 3})}, {c})), 0) << t.msg();
  EXPECT_EQ(t.shape(c), (Dims{2, 3}));
  EXPECT_EQ(t.dtype(c), APX_DT_F32);
  int si = t.input("si", APX_DT_I32, {}), y2 = t.value("y2");
  EXPECT_LT(t.run(t.node(APX_OP_Range, "rg2", {si, l, dl}, {y2})), 0);
  EXPECT_TRUE(has(t.msg(), "compile-time only op: its inputs are not constant")) << t.msg();
}

// ---- graph-level contract ------------------------------------------------------------------

TEST(Infer, UnboundSymbolicDimTellsTheUserToBindIt) {
  G t;
  int x = t.input("tokens", APX_DT_F32, {-1, 8}), y = t.value("y");
  const char **dp = (const char **)apx_arena_alloc(&t.g.arena, 2 * sizeof(char *));
  dp[0] = "batch";
  t.g.vals[x].dim_params = dp;
  EXPECT_LT(t.run(t.node(APX_OP_Relu, "relu", {x}, {y})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'relu' (Relu) input 0 'tokens': dimension 0 ('batch') is not "
                     "bound: pass --dim batch=V");
}

TEST(Infer, DeclaredOutputShapeThatDisagreesIsAnErrorNamingTheValue) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), y = t.value("y", APX_DT_F32, 2, {3, 3});
  EXPECT_LT(t.run(t.node(APX_OP_Relu, "relu", {x}, {y})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: value 'y': declared with shape [3,3], but node 'relu' (Relu) output 0 "
                     "has shape [2,3]");
  G u;
  int x2 = u.input("x", APX_DT_F32, {2, 3}), y2 = u.value("y", APX_DT_F16, 2, {-1, 3});
  EXPECT_LT(u.run(u.node(APX_OP_Relu, "relu", {x2}, {y2})), 0);
  EXPECT_TRUE(has(u.msg(), "value 'y': declared as float16")) << u.msg();
}

TEST(Infer, DeclaredUnknownDimsAreFilledIn) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), y = t.value("y", APX_DT_F32, 2, {-1, 3});
  ASSERT_EQ(t.run(t.node(APX_OP_Relu, "relu", {x}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3}));
}

TEST(Infer, RunningTwiceChangesNothing) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3, 4}), y = t.value("y"), z = t.value("z");
  int n = t.node(APX_OP_Transpose, "t", {x}, {y});
  t.attr_is(n, "perm", {2, 0, 1});
  int m = t.node(APX_OP_Softmax, "s", {y}, {z});
  for (int k = 0; k < 2; k++) {
    ASSERT_EQ(t.run(n), 0) << t.msg();
    ASSERT_EQ(t.run(m), 0) << t.msg();
    EXPECT_EQ(t.shape(z), (Dims{4, 2, 3}));
  }
}

TEST(Infer, UnsupportedOpsAreRejectedByName) {
  G t;
  int x = t.input("x", APX_DT_F32, {2}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Upsample, "deconv", {x}, {y})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'deconv' (Upsample): not supported yet: Upsample");
}

TEST(Infer, ArityIsChecked) {
  G t;
  int x = t.input("x", APX_DT_F32, {2}), y = t.value("y");
  EXPECT_LT(t.run(t.node(APX_OP_Add, "add", {x}, {y})), 0);
  EXPECT_TRUE(has(t.msg(), "expects 2 inputs, got 1")) << t.msg();
}

// ---- internal ops ----------------------------------------------------------------------

TEST(Infer, ReduceSumToTakesTheLikeInputOrThePresetOutput) {
  G t;
  int dy = t.value("dy", APX_DT_F16, 3, {4, 5, 6}), like = t.value("like", APX_DT_F32, 2, {1, 6});
  int y = t.value("y");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_ReduceSumTo, {dy, like}, {y}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{1, 6}));
  EXPECT_EQ(t.dtype(y), APX_DT_F16);
  int z = t.value("z", APX_DT_UNDEFINED, 1, {5});  // does not broadcast to (4, 5, 6)
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_ReduceSumTo, {dy}, {z}), &t.d), 0);
  EXPECT_TRUE(has(t.msg(), "target shape [5] does not broadcast to input 0 [4,5,6]")) << t.msg();
  apx_diag_init(&t.d);
  int w = t.value("w");
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_ReduceSumTo, {dy}, {w}), &t.d), 0);
  EXPECT_TRUE(has(t.msg(), "must be shaped by the pass that creates the node")) << t.msg();
}

TEST(Infer, ElementwiseGradsKeepDyShape) {
  G t;
  int dy = t.value("dy", APX_DT_F32, 2, {3, 4}), y = t.value("y", APX_DT_F32, 2, {3, 4});
  int mask = t.value("mask", APX_DT_BOOL, 2, {3, 4}), dx = t.value("dx"), dx2 = t.value("dx2");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_SigmoidGrad, {dy, y}, {dx}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dx), (Dims{3, 4}));
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_DropoutGrad, {dy, mask}, {dx2}), &t.d), 0) << t.msg();
  int other = t.value("o", APX_DT_F32, 2, {4, 3}), dx3 = t.value("dx3");
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_ReluGrad, {dy, other}, {dx3}), &t.d), 0);
}

TEST(Infer, PowGradOutputsHaveTheBroadcastShape) {
  G t;
  int dy = t.value("dy", APX_DT_F32, 2, {3, 4}), a = t.value("a", APX_DT_F32, 2, {3, 4});
  int b = t.value("b", APX_DT_F32, 0, {}), da = t.value("da"), db = t.value("db");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_PowGrad, {dy, a, b}, {da, db}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(db), (Dims{3, 4}));
  int db2 = t.value("db2");  // dA absent
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_PowGrad, {dy, a, b}, {-1, db2}), &t.d), 0) << t.msg();
}

TEST(Infer, GradientOpsWithPresetOutputsCheckTheirInputs) {
  G t;
  // AveragePoolGrad: dX (1,1,4,4) pooled by 2x2 stride 2 is (1,1,2,2)
  int dy = t.value("dy", APX_DT_F32, 4, {1, 1, 2, 2}), dx = t.value("dx", APX_DT_UNDEFINED, 4, {1, 1, 4, 4});
  int n = t.pass_node(APX_OP_AveragePoolGrad, {dy}, {dx});
  ApxAttrPool *p = t.attrs<ApxAttrPool>(n);
  p->kernel[0] = p->strides[0] = 1;  // 2-D: the unit depth slot
  p->kernel[1] = p->kernel[2] = p->strides[1] = p->strides[2] = 2;
  p->dilations[0] = p->dilations[1] = p->dilations[2] = 1;
  ASSERT_EQ(apx_node_infer(&t.g, n, &t.d), 0) << t.msg();
  EXPECT_EQ(t.dtype(dx), APX_DT_F32);
  // GatherGrad: dY (2, 6, 3) from data (5, 3) gathered on axis 0 with indices (2, 6)
  int gdy = t.value("gdy", APX_DT_F32, 3, {2, 6, 3}), ind = t.value("ind", APX_DT_I64, 2, {2, 6});
  int gdx = t.value("gdx", APX_DT_UNDEFINED, 2, {5, 3}), bad = t.value("bad", APX_DT_UNDEFINED, 2, {5, 4});
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_GatherGrad, {gdy, ind}, {gdx}), &t.d), 0) << t.msg();
  EXPECT_LT(apx_node_infer(&t.g, t.pass_node(APX_OP_GatherGrad, {gdy, ind}, {bad}), &t.d), 0);
  apx_diag_init(&t.d);
  // SliceGrad: dY (2, 3) taken from (4, 3) at rows 1, 2
  int sdy = t.value("sdy", APX_DT_F32, 2, {2, 3}), sdx = t.value("sdx", APX_DT_UNDEFINED, 2, {4, 3});
  int s = t.pass_node(APX_OP_SliceGrad, {sdy}, {sdx});
  ApxAttrSlice *sa = t.attrs<ApxAttrSlice>(s);
  sa->rank = 2;
  sa->starts[0] = 1;
  sa->steps[0] = sa->steps[1] = 1;
  ASSERT_EQ(apx_node_infer(&t.g, s, &t.d), 0) << t.msg();
  sa->starts[0] = 3;  // rows 3, 4: out of range
  EXPECT_LT(apx_node_infer(&t.g, s, &t.d), 0);
  apx_diag_init(&t.d);
  // NegativeLogLikelihoodLossGrad: dInput (4, 10) for targets (4)
  int dl = t.value("dl", APX_DT_F32, 0, {}), tg = t.value("tg", APX_DT_I64, 1, {4});
  int din = t.value("din", APX_DT_UNDEFINED, 2, {4, 10});
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_NegativeLogLikelihoodLossGrad, {dl, tg}, {din}), &t.d), 0)
      << t.msg();
}

TEST(Infer, ConvAndNormGradsShapeLikeTheirForwardInputs) {
  G t;
  int x = t.value("x", APX_DT_F16, 4, {2, 3, 8, 8}), w = t.value("w", APX_DT_F16, 4, {4, 3, 3, 3});
  int dy = t.value("dy", APX_DT_F16, 4, {2, 4, 6, 6}), dx = t.value("dx"), dw = t.value("dw"), db = t.value("db");
  int n = t.pass_node(APX_OP_ConvGrad, {dy, x, w}, {dx, dw, db});
  ApxAttrConv *c = t.attrs<ApxAttrConv>(n);
  c->kernel[0] = 1;  // 2-D: the unit depth slot
  c->kernel[1] = c->kernel[2] = 3;
  c->strides[0] = c->dilations[0] = 1;
  c->strides[1] = c->strides[2] = c->dilations[1] = c->dilations[2] = c->group = 1;
  ASSERT_EQ(apx_node_infer(&t.g, n, &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dx), (Dims{2, 3, 8, 8}));
  EXPECT_EQ(t.shape(dw), (Dims{4, 3, 3, 3}));
  EXPECT_EQ(t.shape(db), (Dims{4}));
  int sc = t.value("sc", APX_DT_F32, 1, {3}), sm = t.value("sm", APX_DT_F32, 1, {3});
  int xf = t.value("xf", APX_DT_F32, 4, {2, 3, 8, 8}), dyf = t.value("dyf", APX_DT_F32, 4, {2, 3, 8, 8});
  int bdx = t.value("bdx"), bds = t.value("bds");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_BatchNormGrad, {dyf, xf, sc, sm, sm}, {bdx, bds, -1}), &t.d), 0)
      << t.msg();
  EXPECT_EQ(t.shape(bds), (Dims{3}));
  int lx = t.value("lx", APX_DT_F32, 2, {4, 16}), ls = t.value("ls", APX_DT_F32, 1, {16});
  int lm = t.value("lm", APX_DT_F32, 2, {4, 1}), ldx = t.value("ldx"), lds = t.value("lds"), ldb = t.value("ldb");
  int l = t.pass_node(APX_OP_LayerNormGrad, {lx, lx, ls, lm, lm}, {ldx, lds, ldb});
  t.attrs<ApxAttrLayerNorm>(l)->axis = 1;
  ASSERT_EQ(apx_node_infer(&t.g, l, &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(ldb), (Dims{16}));
}

TEST(Infer, LossesAndTheirGradients) {
  G t;
  int sc = t.input("sc", APX_DT_F32, {4, 10, 3}), lb = t.input("lb", APX_DT_I64, {4, 3});
  int loss = t.value("loss"), lp = t.value("lp");
  int n = t.node(APX_OP_SoftmaxCrossEntropyLoss, "sce", {sc, lb}, {loss, lp});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(loss), Dims{});
  EXPECT_EQ(t.shape(lp), (Dims{4, 10, 3}));
  int loss2 = t.value("loss2");
  int m = t.node(APX_OP_NegativeLogLikelihoodLoss, "nll", {sc, lb}, {loss2});
  t.attr_s(m, "reduction", "none");
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(loss2), (Dims{4, 3}));
  int badl = t.input("badl", APX_DT_I64, {4, 4}), loss3 = t.value("loss3");
  EXPECT_LT(t.run(t.node(APX_OP_SoftmaxCrossEntropyLoss, "sce2", {sc, badl}, {loss3})), 0);
  EXPECT_TRUE(has(t.msg(), "input 1: expected [4,3], got [4,4]")) << t.msg();
  apx_diag_init(&t.d);
  int dsc = t.value("dsc");
  int gn = t.pass_node(APX_OP_SoftmaxCrossEntropyLossGrad, {loss, lp, lb}, {dsc});
  ASSERT_EQ(apx_node_infer(&t.g, gn, &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dsc), (Dims{4, 10, 3}));
  int fl = t.value("fl"), fs = t.value("fs");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_FusedXentropy, {sc, lb}, {fl, fs}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.dtype(fs), APX_DT_F32);
  EXPECT_EQ(t.shape(fs), (Dims{4, 3}));
}

TEST(Infer, TrainingStepOpsFollowTheirContracts) {
  G t;
  int loss = t.value("loss", APX_DT_F32, 0, {});
  int64_t one = 1;
  int scale = apx_graph_add_value(&t.g, &t.d, "apx_loss_scale", APX_VAL_STATE, APX_DT_F32, 1, &one);
  int dl = t.value("dl");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_LossScaleSeed, {loss, scale}, {dl}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dl), Dims{});
  EXPECT_EQ(t.dtype(dl), APX_DT_F32);
  int g0 = t.value("g0", APX_DT_F16, 2, {3, 4}), g1 = t.value("g1", APX_DT_F32, 1, {4});
  int fi = t.value("fi"), fb = t.value("fb"), ns = t.value("ns"), u0 = t.value("u0"), u1 = t.value("u1");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_UnscaleCheck, {scale, g0, g1}, {fi, fb, ns, u0, u1}), &t.d), 0)
      << t.msg();
  EXPECT_EQ(t.dtype(fb), APX_DT_I32);
  EXPECT_EQ(t.shape(fi), (Dims{1}));
  EXPECT_EQ(t.dtype(u0), APX_DT_F32);
  EXPECT_EQ(t.shape(u0), (Dims{3, 4}));
  // AdamW over two params: 4 + 2 * (2 + 2) inputs
  int lr = apx_graph_add_value(&t.g, &t.d, "apx_lr", APX_VAL_STATE, APX_DT_F32, 1, &one);
  int step = apx_graph_add_value(&t.g, &t.d, "apx_step", APX_VAL_STATE, APX_DT_I64, 1, &one);
  int p0 = t.value("p0", APX_DT_F32, 2, {3, 4}), p1 = t.value("p1", APX_DT_F32, 1, {4});
  int m0 = t.value("m0", APX_DT_F32, 2, {3, 4}), m1 = t.value("m1", APX_DT_F32, 1, {4});
  int v0 = t.value("v0", APX_DT_F32, 2, {3, 4}), v1 = t.value("v1", APX_DT_F32, 1, {4});
  int o = t.pass_node(APX_OP_OptimizerStep, {fi, ns, lr, step, p0, p1, u0, u1, m0, m1, v0, v1}, {});
  ApxAttrOptimizer *oa = t.attrs<ApxAttrOptimizer>(o);
  oa->kind = APX_OPTIM_ADAMW;
  oa->n_params = 2;
  ASSERT_EQ(apx_node_infer(&t.g, o, &t.d), 0) << t.msg();
  oa->n_params = 3;
  EXPECT_LT(apx_node_infer(&t.g, o, &t.d), 0);
  apx_diag_init(&t.d);
  int swapped = t.pass_node(APX_OP_OptimizerStep, {fi, ns, lr, step, p0, p1, u1, u0, m0, m1, v0, v1}, {});
  t.attrs<ApxAttrOptimizer>(swapped)->kind = APX_OPTIM_ADAMW;
  t.attrs<ApxAttrOptimizer>(swapped)->n_params = 2;
  EXPECT_LT(apx_node_infer(&t.g, swapped, &t.d), 0);
  apx_diag_init(&t.d);
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_AssignState, {u0, m0}, {}), &t.d), 0) << t.msg();
  int r0 = t.value("r0"), r1 = t.value("r1");
  ASSERT_EQ(apx_node_infer(&t.g, t.pass_node(APX_OP_Allreduce, {g0, g1}, {r0, r1}), &t.d), 0) << t.msg();
  EXPECT_EQ(t.dtype(r0), APX_DT_F16);
}

TEST(Infer, InternalOpCanonicalizationKeepsThePassesTypedAttributes) {
  G t;
  int dy = t.value("dy", APX_DT_F32, 2, {3, 4}), y = t.value("y", APX_DT_F32, 2, {3, 4}), dx = t.value("dx");
  int n = t.pass_node(APX_OP_SoftmaxGrad, {dy, y}, {dx});
  t.attrs<ApxAttrAxis>(n)->axis = 1;
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrAxis>(n)->axis, 1);
  EXPECT_EQ(t.shape(dx), (Dims{3, 4}));
}

TEST(Infer, ShapesWhoseElementCountOverflowsAreErrors) {
  G t;
  int x = t.input("x", APX_DT_F32, {1}), y = t.value("y");
  int64_t big = (int64_t)1 << 40;
  EXPECT_LT(t.run(t.node(APX_OP_Expand, "ex", {x, t.ints("s", {big, big})}, {y})), 0);
  EXPECT_TRUE(has(t.msg(), "has too many elements")) << t.msg();
}

// ---- v1.1 data movement, indexing and reductions ------------------------------------------

TEST(InferV11, PadAxesNegativePadsValueAndOldAttributes) {
  G t(18);
  int x = t.input("x", APX_DT_F16, {2, 3, 4}), y = t.value("y");
  uint16_t half_two = 0x4000;  // 2.0 in fp16: the constant is kept as the data type's bytes
  int cv = t.cst<uint16_t>("cv", APX_DT_F16, {}, {half_two});
  int n = t.node(APX_OP_Pad, "pad", {x, t.ints("pads", {1, -1, 2, 0}), cv, t.ints("axes", {-1, 0})}, {y});
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{1, 3, 7}));  // pads [begin(-1), begin(0), end(-1), end(0)]
  ApxAttrPad *a = t.attrs<ApxAttrPad>(n);
  EXPECT_EQ(a->rank, 3);
  EXPECT_EQ(Dims(a->begins, a->begins + 3), (Dims{-1, 0, 1}));
  EXPECT_EQ(Dims(a->ends, a->ends + 3), (Dims{0, 0, 2}));
  EXPECT_EQ(a->value, 0x4000);
  G o(10);
  int x2 = o.input("x", APX_DT_F32, {3}), y2 = o.value("y");
  int m = o.node(APX_OP_Pad, "pad", {x2}, {y2});
  o.attr_is(m, "pads", {2, 1});
  o.attr_f(m, "value", 1.5f);
  o.attr_s(m, "mode", "edge");
  ASSERT_EQ(o.run(m), 0) << o.msg();
  EXPECT_EQ(o.shape(y2), (Dims{6}));
  EXPECT_EQ(o.attrs<ApxAttrPad>(m)->mode, APX_PAD_EDGE);
}

TEST(InferV11, PadErrorsAreOneLine) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3});
  int n = t.node(APX_OP_Pad, "pad", {x, t.ints("pads", {1, 1, 1})}, {t.value("y")});
  EXPECT_LT(t.run(n), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'pad' (Pad): pads has 3 values, expected 4 (2 x rank 2)");
  int w = t.node(APX_OP_Pad, "wrap", {x, t.ints("p2", {0, 0, 0, 0})}, {t.value("y2")});
  t.attr_s(w, "mode", "wrap");
  t.reset();
  EXPECT_LT(t.run(w), 0);
  EXPECT_TRUE(has(t.msg(), "(Pad): not supported yet: Pad mode 'wrap'")) << t.msg();
  int c = t.node(APX_OP_Pad, "crop", {x, t.ints("p3", {0, -2, 0, -2})}, {t.value("y3")});
  t.reset();
  EXPECT_LT(t.run(c), 0);
  EXPECT_TRUE(has(t.msg(), "crop dim 1 of size 3 below zero")) << t.msg();
  int pin = t.input("pads_in", APX_DT_I64, {4});
  int g = t.node(APX_OP_Pad, "dyn", {x, pin}, {t.value("y4")});
  t.reset();
  EXPECT_LT(t.run(g), 0);
  EXPECT_TRUE(has(t.msg(), "input 1 'pads' must be a compile-time constant")) << t.msg();
  int e = t.input("e", APX_DT_F32, {0, 2});
  int r = t.node(APX_OP_Pad, "refl", {e, t.ints("p5", {1, 0, 0, 0})}, {t.value("y5")});
  t.attr_s(r, "mode", "reflect");
  t.reset();
  EXPECT_LT(t.run(r), 0);
  EXPECT_TRUE(has(t.msg(), "reflect padding of the empty dim 0")) << t.msg();
}

TEST(InferV11, TileTriluGatherElementsGatherND) {
  G t;
  int x = t.input("x", APX_DT_BOOL, {2, 3, 4}), y = t.value("y");
  ASSERT_EQ(t.run(t.node(APX_OP_Tile, "tile", {x, t.ints("rep", {3, 1, 2})}, {y})), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{6, 3, 8}));
  EXPECT_LT(t.run(t.node(APX_OP_Tile, "tile2", {x, t.ints("rep2", {3, 1})}, {t.value("y2")})), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'tile2' (Tile): repeats has 2 values, the input has rank 3");
  int tr = t.value("tr");
  int n = t.node(APX_OP_Trilu, "tri", {x, t.cst<int64_t>("k", APX_DT_I64, {}, {-2})}, {tr});
  t.attr_i(n, "upper", 0);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.attrs<ApxAttrTrilu>(n)->k, -2);
  EXPECT_EQ(t.attrs<ApxAttrTrilu>(n)->upper, 0);
  EXPECT_EQ(t.shape(tr), (Dims{2, 3, 4}));
  int v = t.input("v", APX_DT_F32, {5});
  t.reset();
  EXPECT_LT(t.run(t.node(APX_OP_Trilu, "tri1", {v}, {t.value("t1")})), 0);
  t.reset();
  int data = t.input("data", APX_DT_F32, {4, 5}), idx = t.input("idx", APX_DT_I64, {7, 5}), ge = t.value("ge");
  int g = t.node(APX_OP_GatherElements, "ge", {data, idx}, {ge});
  ASSERT_EQ(t.run(g), 0) << t.msg();
  EXPECT_EQ(t.shape(ge), (Dims{7, 5}));
  int big = t.input("big", APX_DT_I64, {2, 6});
  t.reset();
  EXPECT_LT(t.run(t.node(APX_OP_GatherElements, "ge2", {data, big}, {t.value("ge2o")})), 0);
  EXPECT_TRUE(has(t.msg(), "input 1 'indices' [2,6] does not fit data [4,5]")) << t.msg();
  int d3 = t.input("d3", APX_DT_F32, {2, 3, 4, 5}), tup = t.input("tup", APX_DT_I64, {2, 7, 2}), nd = t.value("nd");
  int gn = t.node(APX_OP_GatherND, "gnd", {d3, tup}, {nd});
  t.attr_i(gn, "batch_dims", 1);
  ASSERT_EQ(t.run(gn), 0) << t.msg();
  EXPECT_EQ(t.shape(nd), (Dims{2, 7, 5}));
  int bad = t.input("bad", APX_DT_I64, {3, 7, 2});
  int gb = t.node(APX_OP_GatherND, "gnd2", {d3, bad}, {t.value("nd2")});
  t.attr_i(gb, "batch_dims", 1);
  t.reset();
  EXPECT_LT(t.run(gb), 0);
  EXPECT_TRUE(has(t.msg(), "batch dim 0 differs from data [2,3,4,5]")) << t.msg();
}

TEST(InferV11, ReduceMaxByOpsetAndRandomUniformLike) {
  G t(18);
  int x = t.input("x", APX_DT_I32, {2, 3, 4}), y = t.value("y");
  int n = t.node(APX_OP_ReduceMax, "rm", {x, t.ints("axes", {-1})}, {y});
  t.attr_i(n, "keepdims", 0);
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 3}));
  EXPECT_EQ(t.dtype(y), APX_DT_I32);
  G o(13);
  int x2 = o.input("x", APX_DT_F32, {2, 3}), y2 = o.value("y");
  int m = o.node(APX_OP_ReduceMax, "rm", {x2}, {y2});
  o.attr_is(m, "axes", {0});
  ASSERT_EQ(o.run(m), 0) << o.msg();
  EXPECT_EQ(o.shape(y2), (Dims{1, 3}));
  int r = o.value("r");
  int rn = o.node(APX_OP_RandomUniformLike, "rand", {x2}, {r});
  o.attr_f(rn, "seed", 5.0f);
  o.attr_f(rn, "low", -1.0f);
  ASSERT_EQ(o.run(rn), 0) << o.msg();
  const ApxAttrRandomUniform *a = o.attrs<ApxAttrRandomUniform>(rn);
  EXPECT_EQ(o.dtype(r), APX_DT_F32);
  EXPECT_EQ(a->has_seed, 1);
  EXPECT_EQ(a->rng_stream, rn);  // its own stream
  EXPECT_EQ(a->low, -1.0f);
  EXPECT_EQ(a->high, 1.0f);
  int xi = o.input("xi", APX_DT_I64, {4});
  o.reset();
  EXPECT_LT(o.run(o.node(APX_OP_RandomUniformLike, "randi", {xi}, {o.value("ri")})), 0);
  EXPECT_TRUE(has(o.msg(), "output type int64: RandomUniformLike draws float types")) << o.msg();
}

// ---- v1.1 resampling and contraction: Resize, Einsum ------------------------------------

TEST(InferV11, ResizeScalesSizesAxesAndOpset10) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 2, 5, 3}), y = t.value("y");
  int sc = t.cst<float>("scales", APX_DT_F32, {4}, {1, 1, 0.6f, 2.5f});
  int n = t.node(APX_OP_Resize, "up", {x, -1, sc}, {y});
  t.attr_s(n, "mode", "linear");
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{1, 2, 3, 7}));  // floor(5 * 0.6), floor(3 * 2.5)
  const ApxAttrResize *a = t.attrs<ApxAttrResize>(n);
  EXPECT_EQ(a->mode, 1);
  EXPECT_EQ(a->coord, 0);  // half_pixel from opset 11
  EXPECT_DOUBLE_EQ(a->scales[2], (double)0.6f);
  char buf[256];
  EXPECT_STREQ(apx_attrs_format(APX_OP_Resize, a, buf, sizeof buf),
               "mode=linear coord=half_pixel nearest_mode=round_prefer_floor scales=[1,1,0.60000002384185791,2.5]");
  // opset 18: sizes for the listed axes only
  G s(18);
  int x2 = s.input("x", APX_DT_F16, {1, 2, 3, 6}), y2 = s.value("y");
  int m = s.node(APX_OP_Resize, "sz", {x2, -1, -1, s.ints("sizes", {4, 9})}, {y2});
  s.attr_is(m, "axes", {-2, 3});
  ASSERT_EQ(s.run(m), 0) << s.msg();
  EXPECT_EQ(s.shape(y2), (Dims{1, 2, 4, 9}));
  EXPECT_EQ(s.dtype(y2), APX_DT_F16);
  EXPECT_DOUBLE_EQ(s.attrs<ApxAttrResize>(m)->scales[2], 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.attrs<ApxAttrResize>(m)->scales[1], 1.0);
  // opset 10: Resize(X, scales), asymmetric coordinates
  G o(10);
  int x3 = o.input("x", APX_DT_F32, {2, 4}), y3 = o.value("y");
  int k = o.node(APX_OP_Resize, "old", {x3, o.cst<float>("s", APX_DT_F32, {2}, {1, 2})}, {y3});
  ASSERT_EQ(o.run(k), 0) << o.msg();
  EXPECT_EQ(o.shape(y3), (Dims{2, 8}));
  EXPECT_EQ(o.attrs<ApxAttrResize>(k)->coord, 4);  // asymmetric
}

TEST(InferV11, ResizeErrorsAreOneLine) {
  G t;
  int x = t.input("x", APX_DT_F32, {1, 1, 2, 2});
  int sc = t.cst<float>("scales", APX_DT_F32, {4}, {1, 1, 2, 2});
  int both = t.node(APX_OP_Resize, "both", {x, -1, sc, t.ints("sizes", {1, 1, 4, 4})}, {t.value("y")});
  EXPECT_LT(t.run(both), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'both' (Resize): both 'scales' and 'sizes' are given (only one may be)");
  t.reset();
  int cnt = t.node(APX_OP_Resize, "cnt", {x, -1, t.cst<float>("s3", APX_DT_F32, {3}, {1, 2, 2})}, {t.value("y2")});
  EXPECT_LT(t.run(cnt), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'cnt' (Resize): 'scales' has 3 values, expected 4 (one per dim)");
  t.reset();
  int none = t.node(APX_OP_Resize, "none", {x}, {t.value("y3")});
  EXPECT_LT(t.run(none), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'none' (Resize): one of 'scales' and 'sizes' is required");
  t.reset();
  int cub = t.node(APX_OP_Resize, "cub", {x, -1, sc}, {t.value("y4")});
  t.attr_s(cub, "mode", "cubic");
  EXPECT_LT(t.run(cub), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'cub' (Resize): not supported yet: Resize mode=cubic (nearest and linear are)");
  t.reset();
  int neg = t.node(APX_OP_Resize, "neg", {x, -1, t.cst<float>("s4", APX_DT_F32, {4}, {1, 1, -2, 2})}, {t.value("y5")});
  EXPECT_LT(t.run(neg), 0);
  EXPECT_EQ(t.msg(), "m.onnx: node 'neg' (Resize): scales[2] = -2 must be positive");
}

TEST(InferV11, EinsumExplicitImplicitAndDump) {
  G t;
  int q = t.input("q", APX_DT_F32, {2, 3, 4, 8}), k = t.input("k", APX_DT_F32, {2, 3, 5, 8});
  int s = t.value("s");
  int n = t.node(APX_OP_Einsum, "scores", {q, k}, {s});
  t.attr_s(n, "equation", "bhid, bhjd -> bhij");
  ASSERT_EQ(t.run(n), 0) << t.msg();
  EXPECT_EQ(t.shape(s), (Dims{2, 3, 4, 5}));
  char buf[128];
  EXPECT_STREQ(apx_attrs_format(APX_OP_Einsum, t.attrs<ApxAttrEinsum>(n), buf, sizeof buf),
               "a=\"bhid\" b=\"bhjd\" y=\"bhij\"");
  int a = t.input("a", APX_DT_F32, {2, 3}), b = t.input("b", APX_DT_F32, {3, 4}), y = t.value("y");
  int m = t.node(APX_OP_Einsum, "mm", {a, b}, {y});
  t.attr_s(m, "equation", "ij,jk");  // implicit: the labels seen once, sorted
  ASSERT_EQ(t.run(m), 0) << t.msg();
  EXPECT_EQ(t.shape(y), (Dims{2, 4}));
  int d = t.input("d", APX_DT_F32, {4, 4}), tr = t.value("tr");
  int o = t.node(APX_OP_Einsum, "trace", {d}, {tr});
  t.attr_s(o, "equation", "ii->");
  ASSERT_EQ(t.run(o), 0) << t.msg();
  EXPECT_EQ(t.shape(tr), (Dims{}));
}

TEST(InferV11, EinsumErrorsAreOneLine) {
  G t;
  int a = t.input("a", APX_DT_F32, {2, 3}), b = t.input("b", APX_DT_F32, {4, 5});
  struct {
    const char *eq, *msg;
  } cases[] = {
      {"ij,jk->ik", "(Einsum) input 1: label 'j' has size 4, input 0 has 3"},
      {"ij,kl->m", "(Einsum): attribute 'equation': equation: output label 'm' is in no input term"},
      {"ij,kl->ii", "(Einsum): attribute 'equation': equation: output label 'i' repeated"},
      {"ij->ij", "(Einsum): the equation 'ij->ij' has 1 operand terms, the node 2 inputs"},
      {"i2,kl->i", "(Einsum): attribute 'equation': equation: '2' is not a letter"},
      {"...j,kl->j", "(Einsum): not supported yet: Einsum with ellipsis ('...')"},
      {"ijk,kl->il", "(Einsum) input 0 has rank 2, its equation term 3 labels"},
  };
  int i = 0;
  for (auto &c : cases) {
    t.reset();
    std::string out = "y" + std::to_string(i++);
    int n = t.node(APX_OP_Einsum, "e", {a, b}, {t.value(out.c_str())});
    t.attr_s(n, "equation", c.eq);
    EXPECT_LT(t.run(n), 0) << c.eq;
    EXPECT_TRUE(has(t.msg(), c.msg)) << c.eq << ": " << t.msg();
    EXPECT_EQ(t.msg().find('\n'), std::string::npos) << t.msg();
  }
}

// The gradient rule's Einsum: a label of no input takes its size from the pre-shaped output.
TEST(InferV11, PassCreatedEinsumBroadcastsIntoItsPresetShape) {
  G t;
  int dy = t.input("dy", APX_DT_F32, {3});
  int dx = t.value("dx", APX_DT_F32, 2, {3, 4});
  int n = t.pass_node(APX_OP_Einsum, {dy}, {dx});
  ApxAttrEinsum e;
  memset(&e, 0, sizeof e);
  e.n_a = 1, e.a[0] = 'i', e.n_y = 2, e.y[0] = 'i', e.y[1] = 'j';
  t.g.nodes[n].typed = apx_arena_alloc(&t.g.arena, sizeof e);
  memcpy(t.g.nodes[n].typed, &e, sizeof e);
  ASSERT_EQ(apx_node_infer(&t.g, n, &t.d), 0) << t.msg();
  EXPECT_EQ(t.shape(dx), (Dims{3, 4}));
}
