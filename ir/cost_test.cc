// cost_test.cc - FLOP and byte estimates (ir/cost.h), checked against the formulas
// worked out by hand for each shape.
#include <gtest/gtest.h>

#include <vector>

extern "C" {
#include "ir/cost.h"
}

namespace {

struct G {
  ApxGraph g;
  ApxDiag d;
  G() {
    apx_graph_init(&g, "c.onnx");
    apx_diag_init(&d);
  }
  ~G() { apx_graph_free(&g); }
  int val(const char *n, std::vector<int64_t> dims, ApxDType dt = APX_DT_F32) {
    return apx_graph_add_value(&g, &d, n, APX_VAL_ACTIVATION, dt, (int32_t)dims.size(), dims.data());
  }
  int node(ApxOp op, std::vector<int> in, std::vector<int> out) {
    return apx_graph_add_node(&g, &d, op, nullptr, (int)in.size(), in.data(), (int)out.size(), out.data());
  }
};

}  // namespace

TEST(Cost, MatMulIsTwoMNK) {
  G t;
  int a = t.val("a", {3, 64, 100}), b = t.val("b", {100, 30}), y = t.val("y", {3, 64, 30});
  int n = t.node(APX_OP_MatMul, {a, b}, {y});
  EXPECT_EQ(apx_node_flops(&t.g, n), 2LL * 3 * 64 * 30 * 100);
  EXPECT_EQ(apx_node_bytes_read(&t.g, n), (3LL * 64 * 100 + 100 * 30) * 4);
  EXPECT_EQ(apx_node_bytes_written(&t.g, n), 3LL * 64 * 30 * 4);
}

TEST(Cost, GemmWithTransposeAndBias) {
  G t;
  int a = t.val("a", {100, 64}), b = t.val("b", {30, 100}), c = t.val("c", {30}), y = t.val("y", {64, 30});
  int n = t.node(APX_OP_Gemm, {a, b, c}, {y});
  ApxAttrGemm *at = APX_NODE_ATTRS(&t.g, n, ApxAttrGemm);
  at->trans_a = 1;
  at->trans_b = 1;
  EXPECT_EQ(apx_node_flops(&t.g, n), 2LL * 64 * 30 * 100 + 64 * 30);
}

TEST(Cost, ConvCountsKernelWindowAndChannelsPerGroup) {
  G t;
  int x = t.val("x", {2, 8, 10, 10}), w = t.val("w", {16, 4, 3, 3}), y = t.val("y", {2, 16, 8, 8});
  int n = t.node(APX_OP_Conv, {x, w}, {y});
  APX_NODE_ATTRS(&t.g, n, ApxAttrConv)->group = 2;
  EXPECT_EQ(apx_node_flops(&t.g, n), 2LL * (2 * 16 * 8 * 8) * (4 * 3 * 3));
}

TEST(Cost, ElementwiseShapeOnlyAndUnknown) {
  G t;
  int x = t.val("x", {4, 5}), y = t.val("y", {4, 5}), z = t.val("z", {20});
  int u = apx_graph_add_value(&t.g, &t.d, "u", APX_VAL_ACTIVATION, APX_DT_F32, -1, nullptr);
  EXPECT_EQ(apx_node_flops(&t.g, t.node(APX_OP_Relu, {x}, {y})), 20);
  EXPECT_EQ(apx_node_flops(&t.g, t.node(APX_OP_Softmax, {x}, {y})), 100);
  EXPECT_EQ(apx_node_flops(&t.g, t.node(APX_OP_Reshape, {x}, {z})), 0);
  EXPECT_EQ(apx_node_flops(&t.g, t.node(APX_OP_Relu, {x}, {u})), -1);
  int h = t.val("h", {4, 5}, APX_DT_F16);
  int c = t.node(APX_OP_Cast, {x}, {h});
  EXPECT_EQ(apx_node_bytes_read(&t.g, c), 80);
  EXPECT_EQ(apx_node_bytes_written(&t.g, c), 40);
}
