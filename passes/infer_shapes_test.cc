// infer_shapes_test.cc - pass_infer_shapes on hand-built graphs: a chain is inferred, a
// second run is a no-op, errors keep the one-line contract, dead nodes are skipped. Every
// run is followed by apx_graph_toposort + apx_graph_verify.
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "ir/options.h"
#include "passes/infer_shapes.h"
}

namespace {

using Dims = std::vector<int64_t>;

struct G {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  G() {
    apx_graph_init(&g, "model.onnx");
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    g.opset = 17;
  }
  ~G() { apx_graph_free(&g); }
  int input(const char *name, ApxDType dt, Dims dims, ApxValueKind k = APX_VAL_INPUT) {
    int v = apx_graph_add_value(&g, &d, name, k, dt, (int32_t)dims.size(), dims.data());
    if (k == APX_VAL_PARAM)
      g.vals[v].data = apx_arena_alloc(&g.arena, (size_t)apx_value_bytes(&g.vals[v]));
    return v;
  }
  int value(const char *name) {
    return apx_graph_add_value(&g, &d, name, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, nullptr);
  }
  int node(ApxOp op, const char *name, std::vector<int> in, std::vector<int> out) {
    int n = apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
    g.nodes[n].onnx_index = n;
    return n;
  }
  void output(int v) {
    if (!g.outputs) g.outputs = (int *)apx_arena_alloc(&g.arena, sizeof(int) * 8);
    g.outputs[g.n_outputs++] = v;
    g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
  }
  int infer() {
    if (apx_graph_toposort(&g, &d)) return -2;
    int r = pass_infer_shapes(&g, &o, &d);
    if (r < 0) return r;
    if (apx_graph_verify(&g, &d)) return -3;
    return r;
  }
  Dims shape(int v) { return Dims(g.vals[v].dims, g.vals[v].dims + g.vals[v].rank); }
};

}  // namespace

TEST(InferShapes, InfersAChainThenIsANoop) {
  G t;
  int x = t.input("x", APX_DT_F16, {8, 32}), w = t.input("w", APX_DT_F16, {32, 16}, APX_VAL_PARAM);
  int b = t.input("b", APX_DT_F16, {16}, APX_VAL_PARAM);
  int h = t.value("h"), hb = t.value("hb"), y = t.value("y");
  t.node(APX_OP_Relu, "relu", {hb}, {y});  // listed before its producers: toposort fixes it
  t.node(APX_OP_MatMul, "mm", {x, w}, {h});
  t.node(APX_OP_Add, "add", {h, b}, {hb});
  t.output(y);
  ASSERT_EQ(t.infer(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.shape(y), (Dims{8, 16}));
  EXPECT_EQ(t.g.vals[y].dtype, APX_DT_F16);
  EXPECT_TRUE(t.g.vals[h].flags & APX_VALF_SHAPE_KNOWN);
  EXPECT_EQ(t.infer(), APX_PASS_UNCHANGED) << t.d.msg;
}

TEST(InferShapes, ShapeMismatchGivesTheOneLineContract) {
  G t;
  int a = t.input("a", APX_DT_F32, {32, 64}), b = t.input("b", APX_DT_F32, {65, 128}), y = t.value("y");
  t.node(APX_OP_Gemm, "Gemm_12", {a, b}, {y});
  EXPECT_EQ(t.infer(), APX_PASS_ERROR);
  EXPECT_EQ(std::string(t.d.msg), "model.onnx: node 'Gemm_12' (Gemm) input 1: expected [64,128], got [65,128]");
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
}

TEST(InferShapes, RejectsUnboundSymbolicDim) {
  G t;
  int x = t.input("ids", APX_DT_F32, {-1, 4}), y = t.value("y");
  const char **dp = (const char **)apx_arena_alloc(&t.g.arena, 2 * sizeof(char *));
  dp[0] = "batch";
  t.g.vals[x].dim_params = dp;
  t.node(APX_OP_Tanh, "tanh", {x}, {y});
  EXPECT_EQ(t.infer(), APX_PASS_ERROR);
  EXPECT_EQ(std::string(t.d.msg), "model.onnx: node 'tanh' (Tanh) input 0 'ids': dimension 0 ('batch') is "
                                  "not bound: pass --dim batch=V");
}

TEST(InferShapes, SkipsDeadNodes) {
  G t;
  int x = t.input("x", APX_DT_F32, {3}), bad = t.input("bad", APX_DT_F32, {4});
  int y = t.value("y"), z = t.value("z");
  t.node(APX_OP_Relu, "relu", {x}, {y});
  int dead = t.node(APX_OP_Add, "add", {x, bad}, {z});  // would not broadcast
  t.g.nodes[dead].flags |= APX_NODEF_DEAD;
  ASSERT_EQ(t.infer(), APX_PASS_CHANGED) << t.d.msg;
  EXPECT_EQ(t.g.vals[z].rank, -1);
}

TEST(InferShapes, GraphOutputWithoutShapeIsAnError) {
  G t;
  int x = t.input("x", APX_DT_F32, {3}), y = t.value("y"), z = t.value("z");
  int n = t.node(APX_OP_Relu, "relu", {x}, {y});
  t.node(APX_OP_Relu, "relu2", {x}, {z});
  t.output(y);
  t.g.nodes[n].flags |= APX_NODEF_DEAD;
  EXPECT_EQ(t.infer(), APX_PASS_ERROR);
  EXPECT_EQ(std::string(t.d.msg), "model.onnx: value 'y': graph output has no known dtype and shape (no live "
                                  "node produces it and the model does not declare it)");
}

TEST(InferShapes, DeclaredShapeConflictNamesTheValue) {
  G t;
  int x = t.input("x", APX_DT_F32, {2, 3}), y = t.value("y");
  int64_t dims[2] = {3, 2};
  apx_value_set_shape(&t.g.vals[y], 2, dims);  // value_info says [3,2]
  t.node(APX_OP_Sigmoid, "sig", {x}, {y});
  EXPECT_EQ(t.infer(), APX_PASS_ERROR);
  EXPECT_EQ(std::string(t.d.msg), "model.onnx: value 'y': declared with shape [3,2], but node 'sig' (Sigmoid) "
                                  "output 0 has shape [2,3]");
}
