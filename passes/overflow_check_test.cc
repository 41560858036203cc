// overflow_check_test.cc - pass_overflow_check with pass_precision: constants outside the
// half range, --clamp-constants, risky patterns from interval analysis, bf16, alignment
// notes.
#include <cmath>

#include "tests/testing/precision_testing.h"

extern "C" {
#include "kernels/half.h"
}

using apxtest::PGraph;

namespace {

bool has(const std::string &s, const char *sub) { return s.find(sub) != std::string::npos; }
bool has(const char *s, const char *sub) { return s && strstr(s, sub) != nullptr; }

// Attention scores with an additive -1e9 mask: q @ k -> Add(mask) -> Softmax.
struct MaskedScores {
  int q, k, scores, mask, masked, sm;
  MaskedScores(PGraph &t, float mask_value) {
    q = t.input("q", {4, 16});
    k = t.param("kT", {16, 4});
    scores = t.op(APX_OP_MatMul, "scores", {q, k}, {4, 4});
    mask = t.constant("mask", {4, 4}, {0.0f, mask_value, mask_value, mask_value});
    masked = t.op(APX_OP_Add, "add_mask", {scores, mask}, {4, 4});
    sm = t.op(APX_OP_Softmax, "softmax", {masked}, {4, 4});
    t.output(sm);
  }
};

// Hand-written LayerNorm over [4, 768]: mean, x - mean, Pow(.,2) or Mul(d,d), mean,
// + eps, Sqrt, Div.
struct HandLayerNorm {
  int x, mean, d, sq, var, veps, sd, y;
  HandLayerNorm(PGraph &t, float eps, bool use_mul) {
    x = t.input("x", {4, 768});
    mean = t.op(APX_OP_ReduceMean, "mean", {x}, {4, 1});
    d = t.op(APX_OP_Sub, "center", {x, mean}, {4, 768});
    if (use_mul) {
      sq = t.op(APX_OP_Mul, "square", {d, d}, {4, 768});
    } else {
      int two = t.constant("two", {}, {2.0f});
      sq = t.op(APX_OP_Pow, "square", {d, two}, {4, 768});
    }
    var = t.op(APX_OP_ReduceMean, "var", {sq}, {4, 1});
    int e = t.constant("eps", {}, {eps});
    veps = t.op(APX_OP_Add, "var_eps", {var, e}, {4, 1});
    sd = t.op(APX_OP_Sqrt, "std", {veps}, {4, 1});
    y = t.op(APX_OP_Div, "normalize", {d, sd}, {4, 768});
    t.output(y);
    for (const char *n : {"mean", "var"}) {
      ApxAttrReduce *r = apxtest::attrs<ApxAttrReduce>(t, t.find_node(n));
      r->n_axes = 1;
      r->axes[0] = 1;
      r->keepdims = 1;
    }
  }
};

}  // namespace

TEST(OverflowCheck, ConstantBelowHalfMinKeepsFp32) {
  PGraph t(APX_O2);
  HandLayerNorm ln(t, 1e-12f, false);
  t.preset();
  t.decide();
  const ApxNode &n = t.n("var_eps");
  EXPECT_EQ(n.compute, APX_DT_F32);
  EXPECT_EQ(n.reason, APX_REASON_OVERFLOW_CONST);
  EXPECT_TRUE(has(n.reason_detail, "overflow: constant 'eps' value 1e-12 below fp16 smallest normal"))
      << n.reason_detail;
  std::string w = t.warnings();
  EXPECT_TRUE(has(w, "node 'var_eps' (Add)")) << w;
  EXPECT_TRUE(has(w, "1e-12")) << w;
  EXPECT_TRUE(has(w, "kept in fp32 instead of fp16")) << w;
  // the rest of the normalization runs in half
  EXPECT_EQ(t.n("std").compute, APX_DT_F16);
  EXPECT_EQ(t.n("normalize").compute, APX_DT_F16);
}

TEST(OverflowCheck, EpsilonAboveHalfMinRunsHalf) {
  PGraph t(APX_O2);
  HandLayerNorm ln(t, 1e-3f, false);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("var_eps").compute, APX_DT_F16);
  EXPECT_EQ(t.n("var_eps").reason, APX_REASON_DEFAULT_HALF);
}

TEST(OverflowCheck, MaskMinusOneE9KeepsFp32) {
  PGraph t(APX_O1);
  MaskedScores m(t, -1e9f);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("scores").compute, APX_DT_F16);
  const ApxNode &add = t.n("add_mask");
  EXPECT_EQ(add.compute, APX_DT_F32);
  EXPECT_EQ(add.reason, APX_REASON_OVERFLOW_CONST);
  EXPECT_STREQ(add.reason_detail, "overflow: constant 'mask' value -1e+09 outside fp16 range (max 65504)");
  std::string w = t.warnings();
  EXPECT_TRUE(has(w, "m.onnx: node 'add_mask' (Add): overflow: constant 'mask' value -1e+09")) << w;
  EXPECT_TRUE(has(w, "--clamp-constants")) << w;
  // the mask reaches the Add unconverted
  EXPECT_EQ(t.n("add_mask").in[1], m.mask);
}

TEST(OverflowCheck, ClampConstantsClampsAndWarns) {
  PGraph t(APX_O1);
  MaskedScores m(t, -1e9f);
  t.o.clamp_constants = 1;
  t.preset();
  t.compile();
  const ApxNode &add = t.n("add_mask");
  EXPECT_EQ(add.compute, APX_DT_F16);
  EXPECT_EQ(add.reason, APX_REASON_LIST_PROMOTE);
  EXPECT_TRUE(has(add.note, "clamped constant 'mask'")) << (add.note ? add.note : "(null)");
  std::string w = t.warnings();
  EXPECT_TRUE(has(w, "node 'add_mask' (Add): clamped constant 'mask' (value -1e+09 outside fp16 range "
                     "(max 65504)) to -65504 for fp16")) << w;
  // the Add now reads an fp16 constant holding the clamped values (folded at compile time)
  const ApxValue &c = t.v(add.in[1]);
  EXPECT_EQ(c.dtype, APX_DT_F16);
  EXPECT_EQ(c.producer, -1);
  const uint16_t *h = (const uint16_t *)c.data;
  EXPECT_EQ(apx_f16_to_f32(h[0]), 0.0f);
  EXPECT_EQ(apx_f16_to_f32(h[1]), -65504.0f);
  // the original constant is unchanged
  EXPECT_EQ(((const float *)t.v(m.mask).data)[1], -1e9f);
}

TEST(OverflowCheck, ClampRaisesTinyConstantsToSmallestNormal) {
  PGraph t(APX_O2);
  HandLayerNorm ln(t, 1e-12f, false);
  t.o.clamp_constants = 1;
  t.preset();
  t.compile();
  const ApxNode &n = t.n("var_eps");
  EXPECT_EQ(n.compute, APX_DT_F16);
  EXPECT_EQ(n.reason, APX_REASON_DEFAULT_HALF);
  const ApxValue &c = t.v(n.in[1]);
  EXPECT_EQ(c.dtype, APX_DT_F16);
  EXPECT_EQ(apx_f16_to_f32(((const uint16_t *)c.data)[0]), APX_F16_MIN_NORMAL);
  EXPECT_TRUE(has(t.warnings(), "clamped constant 'eps' (value 1e-12 below fp16 smallest normal")) << t.warnings();
}

TEST(OverflowCheck, HandWrittenLayerNormVarianceKeptFp32) {
  for (bool use_mul : {false, true}) {
    PGraph t(APX_O2);
    HandLayerNorm ln(t, 1e-3f, use_mul);
    t.preset();
    t.decide();
    EXPECT_EQ(t.n("square").compute, APX_DT_F32) << use_mul;
    EXPECT_EQ(t.n("square").reason, APX_REASON_OVERFLOW_PATTERN);
    EXPECT_TRUE(has(t.n("square").reason_detail, "feeds ReduceMean 'var' (hand-written LayerNorm variance)"))
        << t.n("square").reason_detail;
    EXPECT_EQ(t.n("var").compute, APX_DT_F32);
    EXPECT_EQ(t.n("var").reason, APX_REASON_OVERFLOW_PATTERN);
    EXPECT_TRUE(has(t.n("var").reason_detail, "ReduceMean of squares")) << t.n("var").reason_detail;
    // the mean over 768 unit-scale values cannot overflow: half
    EXPECT_EQ(t.n("mean").compute, APX_DT_F16);
    EXPECT_EQ(t.n("center").compute, APX_DT_F16);
  }
}

TEST(OverflowCheck, SquaresOfBoundedValuesAreSafe) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 64});
  int s = t.op(APX_OP_Tanh, "tanh", {x}, {4, 64});
  int two = t.constant("two", {}, {2.0f});
  int sq = t.op(APX_OP_Pow, "square", {s, two}, {4, 64});
  int m = t.op(APX_OP_ReduceMean, "var", {sq}, {4});
  t.output(m);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("square").compute, APX_DT_F16);
  EXPECT_EQ(t.n("var").compute, APX_DT_F16);
}

TEST(OverflowCheck, ExpWithoutMaxSubtractionKeptFp32) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int e1 = t.op(APX_OP_Exp, "exp_raw", {x}, {4, 8});
  int ls = t.op(APX_OP_LogSoftmax, "logsoftmax", {x}, {4, 8});
  int e2 = t.op(APX_OP_Exp, "exp_shifted", {ls}, {4, 8});
  int sg = t.op(APX_OP_Sigmoid, "sigmoid", {x}, {4, 8});
  int e3 = t.op(APX_OP_Exp, "exp_bounded", {sg}, {4, 8});
  int big = t.constant("twelve", {}, {12.0f});
  int sh = t.op(APX_OP_Add, "plus12", {sg, big}, {4, 8});
  int e4 = t.op(APX_OP_Exp, "exp_big", {sh}, {4, 8});
  for (int v : {e1, e2, e3, e4}) t.output(v);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("exp_raw").compute, APX_DT_F32);
  EXPECT_EQ(t.n("exp_raw").reason, APX_REASON_OVERFLOW_PATTERN);
  EXPECT_TRUE(has(t.n("exp_raw").reason_detail, "Exp without max subtraction")) << t.n("exp_raw").reason_detail;
  EXPECT_EQ(t.n("exp_shifted").compute, APX_DT_F16);  // input <= 0
  EXPECT_EQ(t.n("exp_bounded").compute, APX_DT_F16);  // input in [0, 1]
  EXPECT_EQ(t.n("exp_big").compute, APX_DT_F32);      // input in [12, 13]: e^13 > 65504
  EXPECT_TRUE(has(t.n("exp_big").reason_detail, "Exp of values up to 13")) << t.n("exp_big").reason_detail;
}

// The v1.1 ops bound their outputs: Clip by its bounds, HardSigmoid to [0, 1], Softplus and
// HardSwish follow their input, Min / Max their operands.
TEST(OverflowCheck, ClipAndHardActivationsBoundExp) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int lo = t.constant("lo", {}, {-4.0f}), hi = t.constant("hi", {}, {6.0f});
  int cl = t.op(APX_OP_Clip, "clip", {x, lo, hi}, {4, 8});
  int e1 = t.op(APX_OP_Exp, "exp_clipped", {cl}, {4, 8});
  int big = t.constant("twelve", {}, {12.0f});
  int cl2 = t.op(APX_OP_Clip, "clip_min_only", {x, big}, {4, 8});  // [12, inf)
  int e2 = t.op(APX_OP_Exp, "exp_min_only", {cl2}, {4, 8});
  int hs = t.op(APX_OP_HardSwish, "hardswish", {cl}, {4, 8});      // [-0.375, 6]
  int e3 = t.op(APX_OP_Exp, "exp_hardswish", {hs}, {4, 8});
  int sp = t.op(APX_OP_Softplus, "softplus", {hs}, {4, 8});        // [0.52, 6.0025]
  int mn = t.op(APX_OP_Min, "min", {sp, t.constant("three", {}, {3.0f})}, {4, 8});
  int e4 = t.op(APX_OP_Exp, "exp_min", {mn}, {4, 8});
  int mx = t.op(APX_OP_Max, "max", {x, cl}, {4, 8});                // unbounded above
  int e5 = t.op(APX_OP_Exp, "exp_max", {mx}, {4, 8});
  for (int v : {e1, e2, e3, e4, e5}) t.output(v);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("exp_clipped").compute, APX_DT_F16);
  EXPECT_EQ(t.n("exp_min_only").compute, APX_DT_F32);
  EXPECT_EQ(t.n("exp_hardswish").compute, APX_DT_F16);
  EXPECT_EQ(t.n("exp_min").compute, APX_DT_F16);
  EXPECT_EQ(t.n("exp_max").compute, APX_DT_F32);
  EXPECT_TRUE(has(t.n("exp_max").reason_detail, "Exp without max subtraction")) << t.n("exp_max").reason_detail;
}

TEST(OverflowCheck, LargeSumsKeptFp32) {
  PGraph t(APX_O2);
  int x = t.input("x", {100000});
  int small = t.input("small", {1000});
  int s1 = t.op(APX_OP_ReduceSum, "sum_big", {x}, {});
  int s2 = t.op(APX_OP_ReduceSum, "sum_small", {small}, {});
  int sg = t.op(APX_OP_Sigmoid, "sig", {small}, {1000});
  int s3 = t.op(APX_OP_ReduceSum, "sum_sig", {sg}, {});
  for (int v : {s1, s2, s3}) t.output(v);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("sum_big").compute, APX_DT_F32);
  EXPECT_TRUE(has(t.n("sum_big").reason_detail, "ReduceSum over 100000 elements")) << t.n("sum_big").reason_detail;
  EXPECT_EQ(t.n("sum_small").compute, APX_DT_F16);
  EXPECT_EQ(t.n("sum_sig").compute, APX_DT_F16);  // 1000 values in [0, 1]
}

// The mean of many values is no larger than the largest of them (the sum accumulates in
// fp32 or wider in every kernel): not an overflow risk, unlike the sum.
TEST(OverflowCheck, MeanOfManyElementsRunsHalf) {
  PGraph t(APX_O2);
  int x = t.input("x", {100000});
  int m = t.op(APX_OP_ReduceMean, "mean_big", {x}, {});
  int s = t.op(APX_OP_ReduceSum, "sum_big", {x}, {});
  for (int v : {m, s}) t.output(v);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("mean_big").compute, APX_DT_F16);
  EXPECT_NE(t.n("mean_big").reason, APX_REASON_OVERFLOW_PATTERN)
      << (t.n("mean_big").reason_detail ? t.n("mean_big").reason_detail : "");
  EXPECT_EQ(t.n("sum_big").compute, APX_DT_F32);
  EXPECT_EQ(t.n("sum_big").reason, APX_REASON_OVERFLOW_PATTERN);
}

TEST(OverflowCheck, Bf16AllowsLargeConstants) {
  PGraph t(APX_O1, APX_DT_BF16);
  MaskedScores m(t, -1e9f);
  int x = t.input("x", {4, 8});
  int e = t.op(APX_OP_Exp, "exp_raw", {x}, {4, 8});
  t.output(e);
  t.o.half_ops.items[t.o.half_ops.n++] = "Exp";
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("add_mask").compute, APX_DT_BF16);
  EXPECT_EQ(t.n("add_mask").reason, APX_REASON_LIST_PROMOTE);
  EXPECT_EQ(t.n("exp_raw").compute, APX_DT_BF16);  // bf16 overflows where fp32 does
  EXPECT_EQ(t.warnings(), "");
  // the mask was converted to bf16 without loss of its meaning
  const ApxValue &c = t.v(t.n("add_mask").in[1]);
  EXPECT_EQ(c.dtype, APX_DT_BF16);
  EXPECT_NEAR(apx_bf16_to_f32(((const uint16_t *)c.data)[1]), -1e9f, 1e7f);
}

TEST(OverflowCheck, Bf16StillChecksItsOwnRange) {
  PGraph t(APX_O2, APX_DT_BF16);
  int x = t.input("x", {4});
  int tiny = t.constant("tiny", {}, {1e-39f});
  int y = t.op(APX_OP_Add, "add_tiny", {x, tiny}, {4});
  t.output(y);
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("add_tiny").compute, APX_DT_F32);
  EXPECT_TRUE(has(t.n("add_tiny").reason_detail, "below bf16 smallest normal")) << t.n("add_tiny").reason_detail;
}

TEST(OverflowCheck, FindingOnNodeThatIsFp32AnywayIsANote) {
  PGraph t(APX_O1);
  int x = t.input("x", {4, 4});
  int mask = t.constant("mask", {4, 4}, {0.0f, -1e9f});
  int a = t.op(APX_OP_Add, "add_mask", {x, mask}, {4, 4});  // fp32 input: promote -> fp32
  t.output(a);
  t.preset();
  t.decide();
  const ApxNode &n = t.n("add_mask");
  EXPECT_EQ(n.compute, APX_DT_F32);
  EXPECT_EQ(n.reason, APX_REASON_LIST_PROMOTE);
  EXPECT_TRUE(has(n.note, "(fp32 anyway)")) << (n.note ? n.note : "(null)");
  EXPECT_EQ(t.warnings(), "");
}

TEST(OverflowCheck, OverrideForcingHalfWarns) {
  PGraph t(APX_O1);
  MaskedScores m(t, -1e9f);
  t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "nothing";
  t.o.half_ops.items[t.o.half_ops.n++] = "Add";
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("add_mask").compute, APX_DT_F16);
  EXPECT_EQ(t.n("add_mask").reason, APX_REASON_OP_OVERRIDE);
  EXPECT_TRUE(has(t.warnings(), "runs in fp16 by op override --half-ops Add although overflow: constant 'mask'"))
      << t.warnings();
}

TEST(OverflowCheck, OutOfRangeParameterIsNotClampedAndStaysFp32) {
  PGraph t(APX_O2);
  int x = t.input("x", {4, 8});
  int w = t.param("W", {8, 8}, {0.5f, 1e6f});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {4, 8});
  t.output(y);
  t.o.clamp_constants = 1;
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("mm").compute, APX_DT_F32);
  EXPECT_TRUE(has(t.n("mm").reason_detail, "initializer 'W' value 1e+06 outside fp16 range")) << t.n("mm").reason_detail;
  EXPECT_EQ(t.v(w).dtype, APX_DT_F32);  // stored fp32, no master
  EXPECT_EQ(((const float *)t.v(w).data)[1], 1e6f);
}

TEST(OverflowCheck, AlignmentNoteForDimsNotMultipleOf8) {
  PGraph t(APX_O1);
  int x = t.input("x", {64, 100});
  int w = t.param("W", {100, 30});
  int y = t.op(APX_OP_MatMul, "mm_odd", {x, w}, {64, 30});
  int x2 = t.input("x2", {64, 128});
  int w2 = t.param("W2", {128, 256});
  int y2 = t.op(APX_OP_MatMul, "mm_aligned", {x2, w2}, {64, 256});
  t.output(y);
  t.output(y2);
  t.preset();
  t.decide();
  EXPECT_STREQ(t.n("mm_odd").note, "tensor cores: N=30, K=100 not a multiple of 8 (pad for full "
                                   "half-precision speed)");
  EXPECT_EQ(t.n("mm_odd").compute, APX_DT_F16);  // a note, not a decision
  EXPECT_EQ(t.n("mm_aligned").note, nullptr);
  EXPECT_EQ(t.warnings(), "");
}

TEST(OverflowCheck, NoFindingsAtO0) {
  PGraph t(APX_O0);
  MaskedScores m(t, -1e9f);
  t.preset();
  t.compile();
  EXPECT_EQ(t.n("add_mask").reason, APX_REASON_DEFAULT_FP32);
  EXPECT_EQ(t.n("scores").note, nullptr);  // no alignment notes without half
  EXPECT_EQ(t.warnings(), "");
}
