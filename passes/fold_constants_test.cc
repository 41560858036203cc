// fold_constants_test.cc - pass_fold_constants on hand-built graphs: Shape from static
// shapes, shape subgraphs, the compile-time ops, every node on constants through the CPU
// kernels (int64 index arithmetic, bool masks, float and half casts, a causal mask), the
// cap, what must not fold (parameters, data inputs, random and state-updating ops), and
// errors. Every run is followed by apx_graph_toposort + apx_graph_verify.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
#include "passes/infer_shapes.h"
#include "passes/overflow_check.h"
#include "passes/precision.h"
}

#include "passes/fold_testing.h"

namespace {

using apx_testing::Dims;
using G = apx_testing::FoldGraph;

using apx_testing::Halves;

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

TEST(FoldConstants, FoldsFloatMathOnConstantsButNeverAParameter) {
  G t;
  int a = t.cst<float>("a", APX_DT_F32, {2}, {1.0f, -2.0f}), w = t.cst<float>("w", APX_DT_F32, {2}, {3, 4}, APX_VAL_PARAM);
  int s = t.value("s"), r = t.value("r"), id = t.value("id"), wm = t.value("wm");
  int add = t.node(APX_OP_Add, "add", {a, a}, {s});
  int relu = t.node(APX_OP_Relu, "relu", {s}, {r});
  int ident = t.node(APX_OP_Identity, "ident", {w}, {id});
  int mul = t.node(APX_OP_Mul, "mul", {w, r}, {wm});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_TRUE(t.dead(add));
  EXPECT_TRUE(t.dead(relu));
  EXPECT_EQ(t.data<float>(r), (std::vector<float>{2.0f, 0.0f}));
  EXPECT_FALSE(t.dead(ident));  // w is trained: nothing downstream of it folds
  EXPECT_FALSE(t.dead(mul));
  EXPECT_EQ(t.g.vals[w].kind, APX_VAL_PARAM);
  EXPECT_EQ(t.g.vals[wm].kind, APX_VAL_ACTIVATION);
  EXPECT_EQ(t.shape(wm), (Dims{2}));  // still inferred
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

// ---- every node on constants runs on the CPU kernels ------------------------------------

TEST(FoldConstants, FoldsInt64IndexArithmetic) {
  // position ids as exporters write them: Range(0, T) * 2 + offset, then Div, Gather, Concat
  G t;
  int r = t.value("r"), m = t.value("m"), a = t.value("a"), q = t.value("q"), ga = t.value("ga");
  int cat = t.value("cat"), neg = t.value("neg");
  t.node(APX_OP_Range, "range", {t.cst<int64_t>("s0", APX_DT_I64, {}, {0}), t.cst<int64_t>("T", APX_DT_I64, {}, {5}),
                                 t.cst<int64_t>("d1", APX_DT_I64, {}, {1})}, {r});
  t.node(APX_OP_Mul, "mul", {r, t.cst<int64_t>("two", APX_DT_I64, {}, {2})}, {m});
  t.node(APX_OP_Add, "add", {m, t.ints("off", {-3})}, {a});
  t.node(APX_OP_Div, "div", {a, t.cst<int64_t>("three", APX_DT_I64, {}, {3})}, {q});  // truncates
  int gn = t.node(APX_OP_Gather, "gather", {a, t.ints("idx", {4, 0, -1})}, {ga});
  t.attr(gn, "axis", APX_ATTR_INT)->i = 0;
  int cn = t.node(APX_OP_Concat, "cat", {q, ga}, {cat});
  t.attr(cn, "axis", APX_ATTR_INT)->i = 0;
  t.node(APX_OP_Neg, "neg", {cat}, {neg});
  t.output(neg);
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.live(), 0);
  EXPECT_EQ(t.data<int64_t>(a), (std::vector<int64_t>{-3, -1, 1, 3, 5}));
  EXPECT_EQ(t.data<int64_t>(q), (std::vector<int64_t>{-1, 0, 0, 1, 1}));
  EXPECT_EQ(t.data<int64_t>(neg), (std::vector<int64_t>{1, 0, 0, -1, -1, -5, 3, -5}));
  EXPECT_TRUE(t.g.vals[neg].flags & APX_VALF_GRAPH_OUTPUT);
}

TEST(FoldConstants, FoldsInt32ArithmeticWrappingLikeTheKernels) {
  G t;
  int a = t.cst<int32_t>("a", APX_DT_I32, {3}, {2147483647, -7, 9}), s = t.value("s"), c = t.value("c");
  t.node(APX_OP_Add, "add", {a, t.cst<int32_t>("one", APX_DT_I32, {}, {1})}, {s});
  int cast = t.node(APX_OP_Cast, "cast", {s}, {c});
  t.attr(cast, "to", APX_ATTR_INT)->i = APX_DT_I64;
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int32_t>(s), (std::vector<int32_t>{INT32_MIN, -6, 10}));  // int64 math, wrapped back
  EXPECT_EQ(t.data<int64_t>(c), (std::vector<int64_t>{INT32_MIN, -6, 10}));
}

TEST(FoldConstants, FoldsBoolMasks) {
  // Equal -> Where on bool data -> Cast(bool -> float) -> Cast(float -> bool)
  G t;
  int e = t.value("e"), w = t.value("w"), f = t.value("f"), b = t.value("b");
  t.node(APX_OP_Equal, "eq", {t.ints("k", {1, 2, 3, 2}), t.cst<int64_t>("two", APX_DT_I64, {}, {2})}, {e});
  t.node(APX_OP_Where, "where", {e, t.cst<uint8_t>("yes", APX_DT_BOOL, {}, {0}), t.cst<uint8_t>("no", APX_DT_BOOL, {4}, {1, 1, 0, 0})}, {w});
  int c1 = t.node(APX_OP_Cast, "tofloat", {w}, {f});
  t.attr(c1, "to", APX_ATTR_INT)->i = APX_DT_F32;
  int c2 = t.node(APX_OP_Cast, "tobool", {t.cst<float>("fx", APX_DT_F32, {3}, {0.0f, -0.5f, NAN})}, {b});
  t.attr(c2, "to", APX_ATTR_INT)->i = APX_DT_BOOL;
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.live(), 0);
  EXPECT_EQ(t.g.vals[w].dtype, APX_DT_BOOL);
  EXPECT_EQ(t.data<uint8_t>(w), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(t.data<float>(f), (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(t.data<uint8_t>(b), (std::vector<uint8_t>{0, 1, 1}));  // NaN is true
}

TEST(FoldConstants, FoldsFloatCastsWithTheCpusHalfSemantics) {
  // fp32 -> fp16 rounds to nearest even once (overflow is inf); fp16 * fp16 is computed in
  // fp32 and rounded once on store; bf16 likewise.
  G t;
  std::vector<float> xs = {1.0f, 1.0f + 1.0f / 2048.0f, 70000.0f, -3.14159265f, 1e-8f};
  int x = t.cst<float>("x", APX_DT_F32, {5}, xs), h = t.value("h"), hh = t.value("hh"), bh = t.value("bh");
  int cast = t.node(APX_OP_Cast, "tohalf", {x}, {h});
  t.attr(cast, "to", APX_ATTR_INT)->i = APX_DT_F16;
  std::vector<float> ys = {3.0f, 1.0f / 3.0f, 0.5f, 2.0f, 1e4f};
  int y16 = t.cst<uint16_t>("y16", APX_DT_F16, {5}, Halves(ys, false));
  t.node(APX_OP_Mul, "mul16", {h, y16}, {hh});
  int xb = t.cst<uint16_t>("xb", APX_DT_BF16, {5}, Halves(xs, true)), yb = t.cst<uint16_t>("yb", APX_DT_BF16, {5}, Halves(ys, true));
  t.node(APX_OP_Div, "divbf", {xb, yb}, {bh});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.live(), 0);
  std::vector<uint16_t> want_h, want_hh, want_bh;
  for (int i = 0; i < 5; i++) {
    uint16_t hi = apx_f32_to_f16(xs[i]);
    want_h.push_back(hi);
    want_hh.push_back(apx_f32_to_f16(apx_f16_to_f32(hi) * apx_f16_to_f32(apx_f32_to_f16(ys[i]))));
    want_bh.push_back(apx_f32_to_bf16(apx_bf16_to_f32(apx_f32_to_bf16(xs[i])) /
                                      apx_bf16_to_f32(apx_f32_to_bf16(ys[i]))));
  }
  EXPECT_EQ(t.data<uint16_t>(h), want_h);
  EXPECT_EQ(t.data<uint16_t>(h)[2], 0x7c00);  // 70000 overflows fp16 to +inf
  EXPECT_EQ(t.data<uint16_t>(hh), want_hh);
  EXPECT_EQ(t.g.vals[bh].dtype, APX_DT_BF16);
  EXPECT_EQ(t.data<uint16_t>(bh), want_bh);
}

TEST(FoldConstants, FoldsACausalMaskBuiltFromRangeComparisons) {
  // GPT-2's causal mask without Trilu: cols - rows of Range(T), positive where the key is
  // in the future, then Where(future, -inf, 0) added to the scores (a data input).
  const int64_t T = 4;
  G t;
  int x = t.input("scores", APX_DT_F32, {T, T});
  int r = t.value("r"), rows = t.value("rows"), cols = t.value("cols"), diff = t.value("diff");
  int df = t.value("df"), pos = t.value("pos"), fut = t.value("fut"), mask = t.value("mask"), y = t.value("y");
  int diag = t.value("diag");
  t.node(APX_OP_Range, "range", {t.cst<int64_t>("s0", APX_DT_I64, {}, {0}), t.cst<int64_t>("T", APX_DT_I64, {}, {T}),
                                 t.cst<int64_t>("d1", APX_DT_I64, {}, {1})}, {r});
  t.node(APX_OP_Unsqueeze, "rows", {r, t.ints("ax1", {1})}, {rows});
  t.node(APX_OP_Unsqueeze, "cols", {r, t.ints("ax0", {0})}, {cols});
  t.node(APX_OP_Sub, "sub", {cols, rows}, {diff});
  int c1 = t.node(APX_OP_Cast, "cast", {diff}, {df});
  t.attr(c1, "to", APX_ATTR_INT)->i = APX_DT_F32;
  t.node(APX_OP_Relu, "relu", {df}, {pos});
  int c2 = t.node(APX_OP_Cast, "future", {pos}, {fut});
  t.attr(c2, "to", APX_ATTR_INT)->i = APX_DT_BOOL;
  t.node(APX_OP_Where, "where", {fut, t.cst<float>("ninf", APX_DT_F32, {}, {-INFINITY}), t.cst<float>("zero", APX_DT_F32, {}, {0.0f})}, {mask});
  t.node(APX_OP_Equal, "diag", {rows, cols}, {diag});
  int add = t.node(APX_OP_Add, "add", {x, mask}, {y});
  t.output(y);
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.live(), 1);
  EXPECT_FALSE(t.dead(add));
  ASSERT_TRUE(t.is_const(mask));
  std::vector<float> m = t.data<float>(mask);
  std::vector<uint8_t> dg = t.data<uint8_t>(diag);
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) {
      EXPECT_EQ(m[i * T + j], j > i ? -INFINITY : 0.0f) << i << "," << j;
      EXPECT_EQ(dg[i * T + j], i == j) << i << "," << j;
    }
}

// The same mask through the ops GPT-2's exports use (Trilu, LessOrEqual), once they have CPU
// kernels: nothing in the pass names them.
TEST(FoldConstants, FoldsTriluAndLessOrEqualCausalMasksOnceTheyHaveKernels) {
  ApxOp trilu = apx_op_from_name("Trilu"), le = apx_op_from_name("LessOrEqual");
  bool has_trilu = trilu != APX_OP_INVALID && apx_cpu_supports(trilu, APX_DT_F32);
  bool has_le = le != APX_OP_INVALID && apx_cpu_supports(le, APX_DT_I64);
  if (!has_trilu && !has_le) GTEST_SKIP() << "Trilu and LessOrEqual have no CPU kernel yet";
  const int64_t T = 3;
  G t;
  int tri = t.value("tri"), r = t.value("r"), rows = t.value("rows"), cols = t.value("cols"), leq = t.value("leq");
  if (has_trilu) {
    int tn = t.node(trilu, "trilu", {t.cst<float>("ones", APX_DT_F32, {T, T}, std::vector<float>(T * T, 1.0f))}, {tri});
    t.attr(tn, "upper", APX_ATTR_INT)->i = 0;
  }
  if (has_le) {
    t.node(APX_OP_Range, "range", {t.cst<int64_t>("s0", APX_DT_I64, {}, {0}), t.cst<int64_t>("T", APX_DT_I64, {}, {T}),
                                   t.cst<int64_t>("d1", APX_DT_I64, {}, {1})}, {r});
    t.node(APX_OP_Unsqueeze, "rows", {r, t.ints("ax1", {1})}, {rows});
    t.node(APX_OP_Unsqueeze, "cols", {r, t.ints("ax0", {0})}, {cols});
    t.node(le, "le", {cols, rows}, {leq});
  }
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.live(), 0);
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) {
      if (has_trilu) {
        EXPECT_EQ(t.data<float>(tri)[i * T + j], j <= i ? 1.0f : 0.0f);  // lower (upper = 0)
      }
      if (has_le) {
        EXPECT_EQ(t.data<uint8_t>(leq)[i * T + j], j <= i);
      }
    }
}

// CastLike(constant, data): its canonicalization makes it a Cast of the constant alone, which
// then folds (the dynamo exporter's scalars); once CastLike exists in the op table.
TEST(FoldConstants, FoldsCastLikeOfAConstantOnceItExists) {
  ApxOp cast_like = apx_op_from_name("CastLike");
  if (cast_like == APX_OP_INVALID) GTEST_SKIP() << "CastLike is not in the op table yet";
  G t;
  int x = t.input("x", APX_DT_F16, {2}), y = t.value("y"), s = t.value("s");
  int n = t.node(cast_like, "castlike", {t.cst<float>("half", APX_DT_F32, {}, {0.1f}), x}, {y});
  int mul = t.node(APX_OP_Mul, "mul", {x, y}, {s});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_TRUE(t.dead(n));
  EXPECT_FALSE(t.dead(mul));
  EXPECT_EQ(t.g.vals[y].dtype, APX_DT_F16);
  EXPECT_EQ(t.data<uint16_t>(y), (std::vector<uint16_t>{apx_f32_to_f16(0.1f)}));
}

TEST(FoldConstants, FoldsConcatOfManyInputs) {
  G t;
  std::vector<int> ins;
  std::vector<int64_t> want;
  for (int i = 0; i < 40; i++) {
    ins.push_back(t.ints(("k" + std::to_string(i)).c_str(), {i}));
    want.push_back(i);
  }
  int c = t.value("c");
  int n = t.node(APX_OP_Concat, "cat", ins, {c});
  t.attr(n, "axis", APX_ATTR_INT)->i = 0;
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int64_t>(c), want);
}

TEST(FoldConstants, FoldsNormalizationAndSoftmaxOnAFrozenInitializer) {
  // a frozen float initializer (--frozen, or absent from apexc.trainable) is a constant
  G t;
  int w = t.cst<float>("w", APX_DT_F32, {2, 3}, {1, 2, 3, -1, 0, 1});
  t.g.vals[w].flags |= APX_VALF_FROZEN;
  int sm = t.value("sm"), mm = t.value("mm"), tr = t.value("tr");
  int s = t.node(APX_OP_Softmax, "softmax", {w}, {sm});
  t.attr(s, "axis", APX_ATTR_INT)->i = -1;
  int tp = t.node(APX_OP_Transpose, "tr", {w}, {tr});
  int64_t perm[2] = {1, 0};
  ApxAttr *pa = t.attr(tp, "perm", APX_ATTR_INTS);
  pa->n = 2;
  pa->ints = (int64_t *)apx_arena_memdup(&t.g.arena, perm, sizeof perm);
  t.node(APX_OP_MatMul, "mm", {sm, tr}, {mm});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.live(), 0);
  EXPECT_EQ(t.shape(mm), (Dims{2, 2}));
  std::vector<float> p = t.data<float>(sm);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0f, 1e-6f);
  EXPECT_NEAR(p[2], std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
}

// ---- what stays a runtime node -------------------------------------------------------

TEST(FoldConstants, NothingDownstreamOfADataInputFolds) {
  G t;
  int x = t.input("x", APX_DT_F32, {2}), c = t.cst<float>("c", APX_DT_F32, {2}, {1, 2});
  int s = t.value("s"), m = t.value("m"), k = t.value("k");
  int add = t.node(APX_OP_Add, "add", {x, c}, {s});
  int mul = t.node(APX_OP_Mul, "mul", {s, c}, {m});
  int cc = t.node(APX_OP_Mul, "cc", {c, c}, {k});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_FALSE(t.dead(add));
  EXPECT_FALSE(t.dead(mul));
  EXPECT_TRUE(t.dead(cc));
  EXPECT_EQ(t.data<float>(k), (std::vector<float>{1, 4}));
}

TEST(FoldConstants, NeverFoldsRandomDropoutInTrainingMode) {
  G t;
  int c = t.cst<float>("c", APX_DT_F32, {4}, {1, 2, 3, 4});
  int y = t.value("y"), m = t.value("m"), y0 = t.value("y0");
  int train = t.node(APX_OP_Dropout, "drop", {c, t.cst<float>("r", APX_DT_F32, {}, {0.5f}), t.cst<uint8_t>("on", APX_DT_BOOL, {}, {1})}, {y, m});
  int eval = t.node(APX_OP_Dropout, "drop_eval", {c, t.cst<float>("r0", APX_DT_F32, {}, {0.5f}), t.cst<uint8_t>("off", APX_DT_BOOL, {}, {0})}, {y0});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_FALSE(t.dead(train));  // a fresh mask every step
  EXPECT_EQ(t.g.vals[y].kind, APX_VAL_ACTIVATION);
  EXPECT_TRUE(t.dead(eval));    // inference mode: the identity
  EXPECT_EQ(t.data<float>(y0), (std::vector<float>{1, 2, 3, 4}));
}

TEST(FoldConstants, EveryRandomOpIsMarkedInTheOpTable) {
  // what keeps a random op from folding is its RANDOM flag: every op drawing from a Philox
  // stream (an rng_stream attribute) or named Random* must carry it
  for (int op = 1; op < APX_OP_COUNT; op++) {
    const ApxOpInfo *info = apx_op_info((ApxOp)op);
    const ApxAttrDesc *ad = apx_op_attrs((ApxOp)op);
    bool rng = std::string(info->name).rfind("Random", 0) == 0;
    for (int f = 0; f < ad->n_fields; f++) rng |= std::string(ad->fields[f].name) == "rng_stream";
    if (rng && !(info->flags & APX_OPF_INTERNAL)) {
      EXPECT_TRUE(info->flags & APX_OPF_RANDOM) << info->name << " draws random numbers";
    }
  }
  EXPECT_TRUE(apx_op_info(APX_OP_Dropout)->flags & APX_OPF_RANDOM);
}

TEST(FoldConstants, NeverFoldsTrainingModeBatchNormalization) {
  // its running statistics are state updated every step
  G t;
  t.g.opset = 15;
  int x = t.cst<float>("x", APX_DT_F32, {2, 1, 1, 1}, {1, 3});
  int sc = t.cst<float>("sc", APX_DT_F32, {1}, {1}), b = t.cst<float>("b", APX_DT_F32, {1}, {0});
  int mu = t.cst<float>("mu", APX_DT_F32, {1}, {0}), var = t.cst<float>("var", APX_DT_F32, {1}, {1});
  int y = t.value("y"), rm = t.value("rm"), rv = t.value("rv"), y0 = t.value("y0");
  int bn = t.node(APX_OP_BatchNormalization, "bn", {x, sc, b, mu, var}, {y, rm, rv});
  t.attr(bn, "training_mode", APX_ATTR_INT)->i = 1;
  int bn0 = t.node(APX_OP_BatchNormalization, "bn_eval", {x, sc, b, mu, var}, {y0});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_FALSE(t.dead(bn));
  EXPECT_TRUE(t.dead(bn0));
  EXPECT_NEAR(t.data<float>(y0)[1], 3.0f / std::sqrt(1.0f + 1e-5f), 1e-6f);
}

// ---- the cap -------------------------------------------------------------------------

TEST(FoldConstants, StopsAtTheCapAndSaysWhy) {
  G t;
  t.o.fold_max_mb = 1.0;  // 1 MiB: the first Expand (512 KiB) fits, the second does not
  int e1 = t.value("e1"), e2 = t.value("e2"), s = t.value("s");
  int n1 = t.node(APX_OP_Expand, "expand1", {t.cst<float>("one", APX_DT_F32, {}, {1}), t.ints("shp1", {128 * 1024})}, {e1});
  int n2 = t.node(APX_OP_Expand, "expand2", {t.cst<float>("two", APX_DT_F32, {}, {2}), t.ints("shp2", {192 * 1024})}, {e2});
  int n3 = t.node(APX_OP_Add, "add", {e2, e2}, {s});
  int sh = t.value("sh");
  int shape = t.node(APX_OP_Shape, "shape", {s}, {sh});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_TRUE(t.dead(n1));
  EXPECT_FALSE(t.dead(n2));
  EXPECT_FALSE(t.dead(n3));     // its input is now computed at run time
  EXPECT_TRUE(t.dead(shape));  // compile-time only ops still fold
  EXPECT_EQ(t.data<int64_t>(sh), (std::vector<int64_t>{192 * 1024}));
  ASSERT_NE(t.g.nodes[n2].note, nullptr);
  EXPECT_EQ(std::string(t.g.nodes[n2].note),
            "not folded: its constant outputs (786432 bytes) would take folded constants past "
            "--fold-max-mb=1 (524288 bytes folded already)");
  EXPECT_EQ(t.g.nodes[n3].note, nullptr);
  EXPECT_EQ(t.warnings, "warning: m.onnx: 1 node on constants left to run at run time: folded constants "
                        "reached --fold-max-mb=1 (first: node 'expand2' (Expand))\n");
}

TEST(FoldConstants, TheCapsNoteOutlivesThePrecisionPasses) {
  // --explain shows the note after cast_cleanup: overflow_check, which recomputes its notes,
  // and precision must keep it
  G t;
  t.o.fold_max_mb = 0;
  t.o.opt_level = APX_O2;
  char err[256];
  ASSERT_EQ(apx_options_apply_preset(&t.o, err, sizeof err), 0) << err;
  int x = t.input("x", APX_DT_F32, {2}), m = t.value("m"), y = t.value("y");
  int mul = t.node(APX_OP_Mul, "scale", {t.cst<float>("a", APX_DT_F32, {2}, {1, 2}), t.cst<float>("b", APX_DT_F32, {2}, {3, 1e6f})}, {m});
  t.node(APX_OP_Add, "add", {x, m}, {y});
  t.output(y);
  ASSERT_EQ(t.fold(), APX_PASS_UNCHANGED) << t.d.msg;
  const std::string note = "not folded: its constant outputs (8 bytes) would take folded constants past "
                           "--fold-max-mb=0 (0 bytes folded already)";
  ASSERT_NE(t.g.nodes[mul].note, nullptr);
  EXPECT_EQ(std::string(t.g.nodes[mul].note), note);
  for (int rerun = 0; rerun < 2; rerun++) {  // passes may run again (tests, --policy)
    ASSERT_GE(pass_infer_shapes(&t.g, &t.o, &t.d), 0) << t.d.msg;
    ASSERT_GE(pass_overflow_check(&t.g, &t.o, &t.d), 0) << t.d.msg;
    ASSERT_GE(pass_precision(&t.g, &t.o, &t.d), 0) << t.d.msg;
    ASSERT_NE(t.g.nodes[mul].note, nullptr);
    EXPECT_EQ(std::string(t.g.nodes[mul].note).rfind(note, 0), 0u) << t.g.nodes[mul].note;
  }
}

TEST(FoldConstants, CapZeroFoldsOnlyTheCompileTimeOps) {
  G t;
  t.o.fold_max_mb = 0;
  int x = t.input("x", APX_DT_F32, {2, 3}), s = t.value("s"), r = t.value("r"), m = t.value("m");
  t.node(APX_OP_Shape, "shape", {x}, {s});
  t.node(APX_OP_Range, "range", {t.cst<int64_t>("a", APX_DT_I64, {}, {0}), t.cst<int64_t>("b", APX_DT_I64, {}, {3}),
                                 t.cst<int64_t>("c", APX_DT_I64, {}, {1})}, {r});
  int mul = t.node(APX_OP_Mul, "mul", {r, r}, {m});
  ASSERT_EQ(t.fold(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.data<int64_t>(s), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.data<int64_t>(r), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_FALSE(t.dead(mul));
  EXPECT_TRUE(has(t.warnings, "1 node on constants left to run at run time")) << t.warnings;
}

// ---- errors --------------------------------------------------------------------------

TEST(FoldConstants, AKernelErrorOnConstantsIsABadInputError) {
  G t;
  int q = t.value("q");
  t.node(APX_OP_Div, "div", {t.ints("a", {6, 7}), t.ints("b", {2, 0})}, {q});
  EXPECT_EQ(t.fold(), APX_PASS_ERROR);
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
  EXPECT_EQ(std::string(t.d.msg), "m.onnx: node 'div' (Div): cannot be evaluated on its constant inputs: Div: "
                                  "integer division by zero");
}
