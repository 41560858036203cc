// split_sequences_test.cc - pass_split_sequences: SplitToSequence + SequenceAt become the
// outputs of one Split (the SequenceAt values themselves), Identity for a piece read twice,
// Reshape for pieces that drop the axis; other uses of a sequence are refused; the rewritten
// graph computes the pieces (graph_eval on the CPU kernels) and trains (Split's gradient).
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "passes/autodiff.h"
#include "passes/split_sequences.h"
#include "tests/testing/graph_eval.h"
}
#include "tests/testing/graph_builder.h"

namespace {

using apx_testing::Attr;
using apx_testing::GraphBuilder;

struct Seq {
  int x, seq;
  std::vector<int> pieces;
};

// x (2, dim, 3) split along axis 1; split: {} absent, {c} a scalar, else 1-D sizes.
Seq Build(GraphBuilder &b, int64_t dim, std::vector<int64_t> split, int keepdims, std::vector<int64_t> positions) {
  Seq s;
  s.x = b.Input("x", {2, dim, 3});
  std::vector<int> in = {s.x};
  if (split.size() == 1) in.push_back(b.Data("split", APX_VAL_CONST, APX_DT_I64, {}, {(double)split[0]}));
  if (split.size() > 1) in.push_back(b.Ints("split", split));
  s.seq = b.Op("SplitToSequence", in, {Attr::Int("axis", 1), Attr::Int("keepdims", keepdims)});
  for (size_t k = 0; k < positions.size(); k++)
    s.pieces.push_back(b.Op("SequenceAt", {s.seq, b.Data("pos" + std::to_string(k), APX_VAL_CONST, APX_DT_I64, {},
                                                         {(double)positions[k]})}));
  return s;
}

std::vector<int64_t> DimsOf(const GraphBuilder &b, int v) {
  return std::vector<int64_t>(b.g.vals[v].dims, b.g.vals[v].dims + b.g.vals[v].rank);
}

// Runs the graph forward with x[i] = i and checks piece k against the slice [start, start+len)
// of axis 1 (the axis dropped when squeezed).
void ExpectPieces(GraphBuilder &b, const Seq &s, int64_t dim, std::vector<int64_t> starts) {
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &b.g), 0) << ev.err;
  for (int64_t i = 0; i < 2 * dim * 3; i++) apx_eval_set(&ev, s.x, i, (double)i);
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD), 0) << ev.err;
  for (size_t k = 0; k < s.pieces.size(); k++) {
    const ApxValue &v = b.g.vals[s.pieces[k]];
    int64_t len = v.rank == 3 ? v.dims[1] : 1, n = apx_value_numel(&v);
    for (int64_t e = 0; e < n; e++) {
      int64_t i0 = e / (len * 3), j = e / 3 % len, c = e % 3;
      EXPECT_EQ(apx_eval_get(&ev, s.pieces[k], e), (double)((i0 * dim + starts[k] + j) * 3 + c))
          << "piece " << k << " element " << e;
    }
  }
  apx_eval_free(&ev);
}

TEST(SplitSequences, ScalarSplitBecomesOneSplitWhoseOutputsAreTheSequenceAtValues) {
  GraphBuilder b(20);
  Seq s = Build(b, 96, {32}, 1, {0, 1, 2});
  for (int p : s.pieces) b.g.vals[p].flags |= APX_VALF_GRAPH_OUTPUT;
  ASSERT_TRUE(b.SortAndVerify());
  ASSERT_EQ(b.RunPass(pass_split_sequences), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_EQ(b.CountOp(APX_OP_SplitToSequence), 0);
  EXPECT_EQ(b.CountOp(APX_OP_SequenceAt), 0);
  ASSERT_EQ(b.CountOp(APX_OP_Split), 1);
  const ApxNode &n = b.g.nodes[b.NodeByOp(APX_OP_Split)];
  ASSERT_EQ(n.n_out, 3);
  for (int k = 0; k < 3; k++) {
    EXPECT_EQ(n.out[k], s.pieces[k]);  // same value: name, shape and consumers kept
    EXPECT_EQ(DimsOf(b, s.pieces[k]), (std::vector<int64_t>{2, 32, 3}));
  }
  EXPECT_EQ(APX_NODE_ATTRS(&b.g, b.NodeByOp(APX_OP_Split), ApxAttrSplit)->axis, 1);
  EXPECT_EQ(b.g.vals[n.in[1]].kind, APX_VAL_CONST);  // the sizes, an ONNX Split's input
  ExpectPieces(b, s, 96, {0, 32, 64});
}

TEST(SplitSequences, RemainderPieceNegativePositionAndUnreadPieces) {
  GraphBuilder b(17);
  Seq s = Build(b, 10, {4}, 1, {-1, 0, 0});  // pieces 4, 4, 2; piece 0 read twice
  EXPECT_EQ(DimsOf(b, s.pieces[0]), (std::vector<int64_t>{2, 2, 3}));
  ASSERT_TRUE(b.SortAndVerify());
  ASSERT_EQ(b.RunPass(pass_split_sequences), APX_PASS_CHANGED) << b.d.msg;
  const ApxNode &n = b.g.nodes[b.NodeByOp(APX_OP_Split)];
  ASSERT_EQ(n.n_out, 3);
  EXPECT_EQ(n.out[2], s.pieces[0]);
  EXPECT_EQ(n.out[0], s.pieces[1]);
  EXPECT_EQ(DimsOf(b, n.out[1]), (std::vector<int64_t>{2, 4, 3}));  // a fresh value, unread
  EXPECT_EQ(b.CountOp(APX_OP_Identity), 1);                          // the second read of piece 0
  ExpectPieces(b, s, 10, {8, 0, 0});
}

TEST(SplitSequences, PiecesWithoutTheAxisAreReshapedAndOldOpsetsUseTheSplitAttribute) {
  GraphBuilder b(12);
  Seq s = Build(b, 4, {}, 0, {3, 1});  // no split, keepdims 0: pieces (2, 3)
  EXPECT_EQ(DimsOf(b, s.pieces[0]), (std::vector<int64_t>{2, 3}));
  ASSERT_TRUE(b.SortAndVerify());
  ASSERT_EQ(b.RunPass(pass_split_sequences), APX_PASS_CHANGED) << b.d.msg;
  int split = b.NodeByOp(APX_OP_Split);
  ASSERT_GE(split, 0);
  EXPECT_EQ(b.g.nodes[split].n_in, 1);
  EXPECT_NE(apx_node_attr(&b.g, split, "split"), nullptr);
  EXPECT_EQ(b.CountOp(APX_OP_Reshape), 2);
  ExpectPieces(b, s, 4, {3, 1});
}

TEST(SplitSequences, SizesSplitTrainsThroughSplitsGradient) {
  GraphBuilder b(17);
  int x = b.Param("x", {2, 5, 3});
  int seq = b.Op("SplitToSequence", {x, b.Ints("split", {2, 3})}, {Attr::Int("axis", 1)});
  int p = b.Op("SequenceAt", {seq, b.Data("pos", APX_VAL_CONST, APX_DT_I64, {}, {1})});
  b.WeightedSumLoss(p);
  ASSERT_TRUE(b.SortAndVerify());
  ASSERT_EQ(b.RunPass(pass_split_sequences), APX_PASS_CHANGED) << b.d.msg;
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
  EXPECT_GE(b.g.vals[x].grad, 0);
  EXPECT_GE(b.CountOp(APX_OP_Concat), 1);  // Split's gradient
}

TEST(SplitSequences, OtherUsesOfASequenceAreNotSupportedYet) {
  GraphBuilder b(17);
  Seq s = Build(b, 6, {3}, 1, {0});
  int id = b.Op("Identity", {s.seq});  // a sequence into a tensor op (ONNX allows it for Identity)
  (void)id;
  ASSERT_TRUE(b.SortAndVerify());
  EXPECT_EQ(b.RunPass(pass_split_sequences), APX_PASS_ERROR);
  EXPECT_NE(std::string(b.d.msg).find("not supported yet: the sequence 'SplitToSequence_0_out0' is used by "
                                      "node 'Identity_2' (Identity)"), std::string::npos) << b.d.msg;
  // inference refuses it too once the whole graph is loaded (fold_constants' walk)
  GraphBuilder b2(17);
  Seq s2 = Build(b2, 6, {3}, 1, {0});
  b2.Op("Identity", {s2.seq});
  int n = b2.NodeByOp(APX_OP_SplitToSequence);
  EXPECT_EQ(apx_node_infer(&b2.g, n, &b2.d), -1);
  EXPECT_NE(std::string(b2.d.msg).find("apexc has no sequence values"), std::string::npos) << b2.d.msg;
}

TEST(SplitSequences, PositionOutsideTheSequenceIsAnError) {
  GraphBuilder b(17);
  int x = b.Input("x", {2, 6});
  int seq = b.Op("SplitToSequence", {x, b.Data("split", APX_VAL_CONST, APX_DT_I64, {}, {4})}, {Attr::Int("axis", 1)});
  int at = apx_graph_add_value(&b.g, &b.d, "y", APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, nullptr);
  int pos = b.Data("pos", APX_VAL_CONST, APX_DT_I64, {}, {2});
  int in[2] = {seq, pos};
  int node = apx_graph_add_node(&b.g, &b.d, APX_OP_SequenceAt, "at", 2, in, 1, &at);
  b.g.nodes[node].onnx_index = 9;
  EXPECT_EQ(apx_node_canonicalize(&b.g, node, &b.d), -1);
  EXPECT_NE(std::string(b.d.msg).find("position 2 is outside the sequence of 2 pieces"), std::string::npos) << b.d.msg;
}

TEST(SplitSequences, GraphsWithoutSequencesAreUnchanged) {
  GraphBuilder b;
  int x = b.Input("x", {2, 3});
  b.Op("Relu", {x});
  ASSERT_TRUE(b.SortAndVerify());
  EXPECT_EQ(b.RunPass(pass_split_sequences), APX_PASS_UNCHANGED);
}

}  // namespace
