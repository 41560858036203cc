// autodiff_gradcheck_test.cc - every v1 op's gradient rule checked against central finite
// differences in float64 (STYLE.md 12, ggml test-backend-ops).
//
// Each case builds a tiny float64 graph: parameters with random data (kept away from kinks
// and singularities), the op under test with one attribute variant, and the scalar loss
// L = ReduceSum(y * W) with fixed random W. pass_autodiff builds the backward graph; the
// test-only evaluator (tests/testing/graph_eval.h) runs it on the CPU reference kernels.
// For every parameter p the analytic gradient grad/<p> (divided by the loss scale, a power
// of two, so exactly) is compared with
//     n_i = (L(p + h e_i) - L(p - h e_i)) / (2 h),   h = eps^(1/3) * max(1, |p_i|)
// with eps = 2^-52: the central difference's truncation error (h^2 |L'''| / 6) and
// rounding error (eps |L| / h) balance there, so n_i is accurate to about
// eps^(2/3) ~ 4e-11 relative to the size of L and its derivatives (all O(1) here).
// Pass criterion: ||a - n||_2 <= 1e-6 * max(||n||_2, 1e-3), four to five orders above the
// expected finite-difference error and far below what a wrong rule gives (O(1)).
// The Cast case rounds through float32: it uses h = 1/16 on a graph linear in p (no
// truncation error) and tol = 2 eps_f32 / h, twice the bound of float32 rounding of p +- h
// (see CastRoundTrip).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
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

struct Case {
  const char *name;
  std::function<void(GraphBuilder &)> build; // adds params + op(s) and calls WeightedSumLoss
  double h = 0;    // 0: eps^(1/3) scaled by max(1, |p|)
  double tol = 0;  // 0: 1e-6
};

constexpr double kEps64 = 2.220446049250313e-16;
constexpr double kTol = 1e-6;
constexpr float kLossScale = 1024.0f;

// ---- the cases ------------------------------------------------------------------------

std::vector<Case> Cases() {
  std::vector<Case> c;
  auto unary = [&](const char *name, const char *op, double lo, double hi, double min_abs,
                   std::vector<Attr> attrs = {}) {
    c.push_back({name, [=](GraphBuilder &b) {
                   int x = b.Param("x", {2, 3, 4}, lo, hi, min_abs);
                   b.WeightedSumLoss(b.Op(op, {x}, attrs));
                 }});
  };
  auto binary = [&](const char *name, const char *op, std::vector<int64_t> da, std::vector<int64_t> db,
                    double blo = -1, double bhi = 1) {
    c.push_back({name, [=](GraphBuilder &b) {
                   int a = b.Param("a", da);
                   int bb = b.Param("b", db, blo, bhi, 0.3);
                   b.WeightedSumLoss(b.Op(op, {a, bb}));
                 }});
  };

  // Gemm: transposes, alpha, beta, C broadcast or absent
  c.push_back({"Gemm_Plain_BiasRow", [](GraphBuilder &b) {
                 int a = b.Param("A", {3, 4}), w = b.Param("B", {4, 5}), bias = b.Param("C", {5});
                 b.WeightedSumLoss(b.Op("Gemm", {a, w, bias}));
               }});
  c.push_back({"Gemm_TransATransB_AlphaBeta", [](GraphBuilder &b) {
                 int a = b.Param("A", {4, 3}), w = b.Param("B", {5, 4}), bias = b.Param("C", {3, 5});
                 b.WeightedSumLoss(b.Op("Gemm", {a, w, bias},
                                        {Attr::Int("transA", 1), Attr::Int("transB", 1),
                                         Attr::Float("alpha", 0.75f), Attr::Float("beta", 0.5f)}));
               }});
  c.push_back({"Gemm_TransB_BiasColumn", [](GraphBuilder &b) {
                 int a = b.Param("A", {3, 4}), w = b.Param("B", {5, 4}), bias = b.Param("C", {3, 1});
                 b.WeightedSumLoss(b.Op("Gemm", {a, w, bias}, {Attr::Int("transB", 1)}));
               }});
  c.push_back({"Gemm_TransB_Alpha_BetaScalarBias", [](GraphBuilder &b) {
                 int a = b.Param("A", {3, 4}), w = b.Param("B", {2, 4}), bias = b.Param("C", {});
                 b.WeightedSumLoss(b.Op("Gemm", {a, w, bias},
                                        {Attr::Int("transB", 1), Attr::Float("alpha", 1.5f),
                                         Attr::Float("beta", 2.0f)}));
               }});
  c.push_back({"Gemm_TransA_NoBias", [](GraphBuilder &b) {
                 int a = b.Param("A", {4, 3}), w = b.Param("B", {4, 2});
                 b.WeightedSumLoss(b.Op("Gemm", {a, w}, {Attr::Int("transA", 1)}));
               }});
  // MatMul: batched with broadcast, 1-D operands
  c.push_back({"MatMul_BatchedBroadcastB", [](GraphBuilder &b) {
                 int a = b.Param("A", {2, 3, 4}), w = b.Param("B", {4, 5});
                 b.WeightedSumLoss(b.Op("MatMul", {a, w}));
               }});
  c.push_back({"MatMul_BroadcastBatchDims", [](GraphBuilder &b) {
                 int a = b.Param("A", {2, 1, 3, 4}), w = b.Param("B", {3, 4, 2});
                 b.WeightedSumLoss(b.Op("MatMul", {a, w}));
               }});
  c.push_back({"MatMul_VectorLeft", [](GraphBuilder &b) {
                 int a = b.Param("A", {4}), w = b.Param("B", {2, 4, 3});
                 b.WeightedSumLoss(b.Op("MatMul", {a, w}));
               }});
  c.push_back({"MatMul_VectorRight", [](GraphBuilder &b) {
                 int a = b.Param("A", {2, 3, 4}), w = b.Param("B", {4});
                 b.WeightedSumLoss(b.Op("MatMul", {a, w}));
               }});
  c.push_back({"MatMul_Dot", [](GraphBuilder &b) {
                 int a = b.Param("A", {5}), w = b.Param("B", {5});
                 b.WeightedSumLoss(b.Op("MatMul", {a, w}));
               }});
  // broadcasting binary ops
  binary("Add_Broadcast", "Add", {2, 3}, {3});
  binary("Add_BothBroadcast", "Add", {2, 1, 4}, {3, 1});
  binary("Sub_Broadcast", "Sub", {2, 3}, {2, 1});
  binary("Sub_SameShape", "Sub", {2, 3}, {2, 3});
  binary("Mul_Broadcast", "Mul", {2, 3, 4}, {4});
  binary("Mul_ScalarRhs", "Mul", {2, 3}, {});
  binary("Div_Broadcast", "Div", {2, 3}, {3}, 0.5, 2.0);
  binary("Div_BothBroadcast", "Div", {3, 1}, {1, 4}, -2.0, -0.5);
  c.push_back({"Pow_Broadcast", [](GraphBuilder &b) {
                 int a = b.Param("a", {2, 3}, 0.5, 2.0), e = b.Param("e", {3}, -1.5, 1.5);
                 b.WeightedSumLoss(b.Op("Pow", {a, e}));
               }});
  c.push_back({"Pow_ConstExponent", [](GraphBuilder &b) {
                 int a = b.Param("a", {2, 3}, -2.0, 2.0, 0.2);
                 int e = b.Const("two", {}, {2.0});
                 b.WeightedSumLoss(b.Op("Pow", {a, e}));
               }});
  c.push_back({"Pow_IntegerExponent", [](GraphBuilder &b) {
                 int a = b.Param("a", {2, 3}, -2.0, 2.0, 0.2);
                 int e = b.Data("three", APX_VAL_CONST, APX_DT_I64, {}, {3});
                 b.WeightedSumLoss(b.Op("Pow", {a, e}));
               }});
  // unary
  unary("Neg", "Neg", -1, 1, 0);
  unary("Relu", "Relu", -1, 1, 0.1);
  unary("LeakyRelu", "LeakyRelu", -1, 1, 0.1, {Attr::Float("alpha", 0.1f)});
  unary("Sigmoid", "Sigmoid", -3, 3, 0);
  unary("Tanh", "Tanh", -2, 2, 0);
  unary("Gelu", "Gelu", -3, 3, 0);
  unary("Gelu_Tanh", "Gelu", -3, 3, 0, {Attr::Str("approximate", "tanh")});
  unary("Erf", "Erf", -2, 2, 0);
  unary("Sqrt", "Sqrt", 0.5, 2, 0);
  unary("Exp", "Exp", -1, 1, 0);
  unary("Log", "Log", 0.5, 2, 0);
  unary("HardSigmoid", "HardSigmoid", -4, 4, 0);  // both clipped ends and the line
  unary("HardSigmoid_AlphaBeta", "HardSigmoid", -1, 2, 0,
        {Attr::Float("alpha", 0.7f), Attr::Float("beta", 0.1f)});
  unary("Identity", "Identity", -1, 1, 0);
  // v1.1 elementwise ops
  unary("HardSwish", "HardSwish", -5, 5, 0);  // both flat ends, the curve and the line
  unary("Softplus", "Softplus", -4, 4, 0);
  c.push_back({"Clip_ConstBounds", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4}, -1, 1);
                 int lo = b.Const("lo", {}, {-0.5}), hi = b.Const("hi", {}, {0.4});
                 b.WeightedSumLoss(b.Op("Clip", {x, lo, hi}));
               }});
  c.push_back({"Clip_TrainableBounds", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4}, -1, 1);
                 int lo = b.Data("lo", APX_VAL_PARAM, APX_DT_F64, {}, {-0.45});
                 int hi = b.Data("hi", APX_VAL_PARAM, APX_DT_F64, {1}, {0.35});
                 b.WeightedSumLoss(b.Op("Clip", {x, lo, hi}));
               }});
  c.push_back({"Clip_MaxOnly", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 5}, -1, 1);
                 int hi = b.Data("hi", APX_VAL_PARAM, APX_DT_F64, {}, {0.25});
                 b.WeightedSumLoss(b.Op("Clip", {x, -1, hi}));
               }});
  c.push_back({"Clip_MinAboveMax", [](GraphBuilder &b) {  // the output is max everywhere
                 int x = b.Param("x", {2, 3}, -1, 1);
                 int lo = b.Data("lo", APX_VAL_PARAM, APX_DT_F64, {}, {0.5});
                 int hi = b.Data("hi", APX_VAL_PARAM, APX_DT_F64, {}, {-0.5});
                 b.WeightedSumLoss(b.Op("Clip", {x, lo, hi}));
               }});
  binary("Max_Broadcast", "Max", {2, 3}, {3});
  binary("Min_BothBroadcast", "Min", {2, 1, 4}, {3, 1});
  c.push_back({"Max_ThreeInputs", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3}), y = b.Param("y", {3}), z = b.Param("z", {2, 1}, 0.2, 0.9);
                 b.WeightedSumLoss(b.Op("Max", {x, y, z}));
               }});
  c.push_back({"Max_Ties", [](GraphBuilder &b) {  // max(x, x) = x: each operand gets dy / 2
                 int x = b.Param("x", {2, 3});
                 b.WeightedSumLoss(b.Op("Max", {x, x}));
               }});
  c.push_back({"Min_WithConstant", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 2});
                 b.WeightedSumLoss(b.Op("Min", {x, b.Const("c", {}, {0.1})}));
               }});
  c.push_back({"Mod_Fmod_Broadcast", [](GraphBuilder &b) {
                 int a = b.Param("a", {2, 3}, -3, 3), d = b.Param("d", {3}, 0.7, 1.3);
                 b.WeightedSumLoss(b.Op("Mod", {a, d}, {Attr::Int("fmod", 1)}));
               }});
  // comparison and logic ops only build masks: the gradient flows through Where
  c.push_back({"Where_LessOrGreaterOrEqual", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 4}, -1, 1);
                 int m = b.Op("Or", {b.Op("Less", {x, b.Const("lo", {}, {-0.3})}),
                                     b.Op("GreaterOrEqual", {x, b.Const("hi", {}, {0.4})})});
                 b.WeightedSumLoss(b.Op("Where", {m, x, b.Op("Tanh", {x})}));
               }});
  c.push_back({"Where_AndNotGreater_LessOrEqual", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 4}, -1, 1);
                 int m = b.Op("And", {b.Op("LessOrEqual", {x, b.Const("hi", {}, {0.5})}),
                                      b.Op("Not", {b.Op("Greater", {x, b.Const("lo", {}, {-0.2})})})});
                 b.WeightedSumLoss(b.Op("Where", {m, b.Op("Sigmoid", {x}), x}));
               }});
  c.push_back({"Where_IsNaNOrIsInf", [](GraphBuilder &b) {  // masks out nothing here
                 int x = b.Param("x", {2, 5});
                 int m = b.Op("Or", {b.Op("IsNaN", {x}), b.Op("IsInf", {x}, {Attr::Int("detect_negative", 0)})});
                 b.WeightedSumLoss(b.Op("Where", {m, b.Const("zero", {}, {0.0}), x}));
               }});
  // softmax family
  unary("Softmax_Axis1", "Softmax", -2, 2, 0, {Attr::Int("axis", 1)});
  unary("Softmax_LastAxis", "Softmax", -2, 2, 0, {Attr::Int("axis", -1)});
  unary("LogSoftmax_Axis0", "LogSoftmax", -2, 2, 0, {Attr::Int("axis", 0)});
  unary("LogSoftmax_LastAxis", "LogSoftmax", -2, 2, 0);
  // normalization
  c.push_back({"LayerNorm_LastAxis", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4}, -2, 2), s = b.Param("scale", {4}), bias = b.Param("bias", {4});
                 b.WeightedSumLoss(b.Op("LayerNormalization", {x, s, bias},
                                        {Attr::Int("stash_type", APX_DT_F64)}));
               }});
  c.push_back({"LayerNorm_Axis1_NoBias", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4}, -2, 2), s = b.Param("scale", {3, 4});
                 b.WeightedSumLoss(b.Op("LayerNormalization", {x, s},
                                        {Attr::Int("axis", 1), Attr::Float("epsilon", 1e-3f),
                                         Attr::Int("stash_type", APX_DT_F64)}));
               }});
  c.push_back({"BatchNorm_Training", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 2, 2, 2}, -2, 2), s = b.Param("scale", {2}), bias = b.Param("bias", {2});
                 int mean = b.Param("running_mean", {2}), var = b.Param("running_var", {2}, 0.5, 1.5);
                 auto y = b.Node("BatchNormalization", {x, s, bias, mean, var}, 3,
                                 {Attr::Int("training_mode", 1), Attr::Float("momentum", 0.9f)});
                 b.WeightedSumLoss(y[0]);
               }});
  c.push_back({"BatchNorm_Training_Rank2", [](GraphBuilder &b) {
                 int x = b.Param("x", {5, 3}, -2, 2), s = b.Param("scale", {3}), bias = b.Param("bias", {3});
                 int mean = b.Const("running_mean", {3}, {0, 0, 0}), var = b.Const("running_var", {3}, {1, 1, 1});
                 auto y = b.Node("BatchNormalization", {x, s, bias, mean, var}, 1, {Attr::Int("training_mode", 1)});
                 b.WeightedSumLoss(y[0]);
               }});
  c.push_back({"BatchNorm_Inference", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 2, 2}, -2, 2), s = b.Param("scale", {3}), bias = b.Param("bias", {3});
                 int mean = b.Param("running_mean", {3}), var = b.Param("running_var", {3}, 0.5, 1.5);
                 b.WeightedSumLoss(b.Op("BatchNormalization", {x, s, bias, mean, var}));
               }});
  c.push_back({"Dropout_Training_FixedSeed", [](GraphBuilder &b) {
                 int x = b.Param("x", {4, 5});
                 int ratio = b.Const("ratio", {}, {0.3}, APX_DT_F32);
                 int tm = b.Data("training_mode", APX_VAL_CONST, APX_DT_BOOL, {}, {1});
                 auto y = b.Node("Dropout", {x, ratio, tm}, 1, {Attr::Int("seed", 7)});
                 b.WeightedSumLoss(y[0]);
               }});
  c.push_back({"Dropout_Inference", [](GraphBuilder &b) {
                 int x = b.Param("x", {4, 5});
                 b.WeightedSumLoss(b.Op("Dropout", {x}));
               }});
  // convolution and pooling
  c.push_back({"Conv_Groups_Strides_Pads", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 4, 5, 5}), w = b.Param("w", {4, 2, 3, 3});
                 b.WeightedSumLoss(b.Op("Conv", {x, w},
                                        {Attr::Int("group", 2), Attr::Ints("strides", {2, 2}),
                                         Attr::Ints("pads", {1, 1, 1, 1})}));
               }});
  c.push_back({"Conv_Depthwise_Multiplier_Strides_AsymPads_Bias", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 6, 5}), w = b.Param("w", {6, 1, 3, 3}), bias = b.Param("bias", {6});
                 b.WeightedSumLoss(b.Op("Conv", {x, w, bias},
                                        {Attr::Int("group", 3), Attr::Ints("strides", {2, 1}),
                                         Attr::Ints("pads", {1, 0, 1, 2})}));
               }});
  c.push_back({"Conv_Dilations_AsymPads_Bias", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 2, 6, 6}), w = b.Param("w", {3, 2, 2, 2}), bias = b.Param("bias", {3});
                 b.WeightedSumLoss(b.Op("Conv", {x, w, bias},
                                        {Attr::Ints("dilations", {2, 2}), Attr::Ints("pads", {0, 1, 1, 0}),
                                         Attr::Ints("strides", {1, 2})}));
               }});
  c.push_back({"ConvTranspose_Groups_Strides_Pads_OutputPadding_Bias", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 4, 3, 3}), w = b.Param("w", {4, 1, 3, 3}), bias = b.Param("bias", {2});
                 b.WeightedSumLoss(b.Op("ConvTranspose", {x, w, bias},
                                        {Attr::Int("group", 2), Attr::Ints("strides", {2, 2}),
                                         Attr::Ints("pads", {1, 1, 1, 1}), Attr::Ints("output_padding", {1, 1})}));
               }});
  c.push_back({"ConvTranspose_Dilations_AsymPads", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 2, 3, 4}), w = b.Param("w", {2, 3, 2, 2});
                 b.WeightedSumLoss(b.Op("ConvTranspose", {x, w},
                                        {Attr::Ints("dilations", {2, 1}), Attr::Ints("pads", {0, 1, 1, 0}),
                                         Attr::Ints("strides", {1, 2}), Attr::Ints("output_padding", {0, 1})}));
               }});
  c.push_back({"ConvTranspose_OutputShape_Larger", [](GraphBuilder &b) {
                 // natural size (5, 5); output_shape (7, 6): the extra rows/columns see no window
                 int x = b.Param("x", {1, 2, 3, 3}), w = b.Param("w", {2, 2, 3, 3}), bias = b.Param("bias", {2});
                 b.WeightedSumLoss(b.Op("ConvTranspose", {x, w, bias}, {Attr::Ints("output_shape", {7, 6})}));
               }});
  c.push_back({"ConvTranspose_Depthwise_Dilations_OutputShape_Larger", [](GraphBuilder &b) {
                 // group == C_in == C_out: the depthwise CPU loops (conv.c); natural size (7, 7)
                 int x = b.Param("x", {2, 3, 3, 3}), w = b.Param("w", {3, 1, 3, 2}), bias = b.Param("bias", {3});
                 b.WeightedSumLoss(b.Op("ConvTranspose", {x, w, bias},
                                        {Attr::Int("group", 3), Attr::Ints("strides", {2, 2}),
                                         Attr::Ints("dilations", {1, 2}), Attr::Ints("output_shape", {8, 8})}));
               }});
  c.push_back({"MaxPool_2x2_Stride2", [](GraphBuilder &b) {
                 int x = b.Data("x", APX_VAL_PARAM, APX_DT_F64, {1, 2, 4, 4}, b.Distinct(32));
                 b.WeightedSumLoss(b.Op("MaxPool", {x}, {Attr::Ints("kernel_shape", {2, 2}), Attr::Ints("strides", {2, 2})}));
               }});
  c.push_back({"MaxPool_3x3_Pads_Stride2", [](GraphBuilder &b) {
                 int x = b.Data("x", APX_VAL_PARAM, APX_DT_F64, {1, 1, 5, 5}, b.Distinct(25));
                 b.WeightedSumLoss(b.Op("MaxPool", {x}, {Attr::Ints("kernel_shape", {3, 3}), Attr::Ints("strides", {2, 2}),
                                                        Attr::Ints("pads", {1, 1, 1, 1})}));
               }});
  // 1-D windows (X (N, C, L)): run as 2-D ones of height 1
  c.push_back({"Conv1D_Groups_Strides_Dilations_AsymPads_Bias", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 4, 9}), w = b.Param("w", {6, 2, 3}), bias = b.Param("bias", {6});
                 b.WeightedSumLoss(b.Op("Conv", {x, w, bias},
                                        {Attr::Int("group", 2), Attr::Ints("strides", {2}),
                                         Attr::Ints("dilations", {2}), Attr::Ints("pads", {1, 2})}));
               }});
  c.push_back({"ConvTranspose1D_Strides_Pads_OutputPadding", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 2, 4}), w = b.Param("w", {2, 3, 3}), bias = b.Param("bias", {3});
                 b.WeightedSumLoss(b.Op("ConvTranspose", {x, w, bias},
                                        {Attr::Ints("strides", {2}), Attr::Ints("pads", {1, 0}),
                                         Attr::Ints("output_padding", {1})}));
               }});
  c.push_back({"MaxPool1D_Pads_Stride2", [](GraphBuilder &b) {
                 int x = b.Data("x", APX_VAL_PARAM, APX_DT_F64, {1, 2, 7}, b.Distinct(14));
                 b.WeightedSumLoss(b.Op("MaxPool", {x}, {Attr::Ints("kernel_shape", {3}), Attr::Ints("strides", {2}),
                                                        Attr::Ints("pads", {1, 1})}));
               }});
  c.push_back({"AveragePool1D_Pads_IncludePad", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 2, 6});
                 b.WeightedSumLoss(b.Op("AveragePool", {x}, {Attr::Ints("kernel_shape", {3}), Attr::Ints("strides", {2}),
                                                            Attr::Ints("pads", {1, 0}), Attr::Int("count_include_pad", 1)}));
               }});
  c.push_back({"GlobalAveragePool1D", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 5});
                 b.WeightedSumLoss(b.Op("GlobalAveragePool", {x}));
               }});
  // 3-D windows (X (N, C, D, H, W)): every slot of the window attributes
  c.push_back({"Conv3D_Groups_Strides_Dilations_AsymPads_Bias", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 4, 5, 4, 5}), w = b.Param("w", {4, 2, 2, 3, 2}), bias = b.Param("bias", {4});
                 b.WeightedSumLoss(b.Op("Conv", {x, w, bias},
                                        {Attr::Int("group", 2), Attr::Ints("strides", {2, 1, 2}),
                                         Attr::Ints("dilations", {1, 1, 2}), Attr::Ints("pads", {1, 0, 1, 0, 1, 1})}));
               }});
  c.push_back({"ConvTranspose3D_Strides_Pads_OutputPadding_Bias", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 2, 3, 2, 3}), w = b.Param("w", {2, 3, 2, 2, 3}), bias = b.Param("bias", {3});
                 b.WeightedSumLoss(b.Op("ConvTranspose", {x, w, bias},
                                        {Attr::Ints("strides", {2, 1, 2}), Attr::Ints("pads", {1, 0, 1, 0, 1, 0}),
                                         Attr::Ints("output_padding", {1, 0, 1})}));
               }});
  c.push_back({"MaxPool3D_Pads_Stride2", [](GraphBuilder &b) {
                 int x = b.Data("x", APX_VAL_PARAM, APX_DT_F64, {1, 2, 4, 5, 4}, b.Distinct(160));
                 b.WeightedSumLoss(b.Op("MaxPool", {x}, {Attr::Ints("kernel_shape", {2, 3, 2}), Attr::Ints("strides", {2, 2, 1}),
                                                        Attr::Ints("pads", {0, 1, 1, 1, 1, 0})}));
               }});
  c.push_back({"AveragePool3D_Pads_IncludePad", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 2, 4, 3, 5});
                 b.WeightedSumLoss(b.Op("AveragePool", {x}, {Attr::Ints("kernel_shape", {2, 2, 3}), Attr::Ints("strides", {1, 2, 2}),
                                                            Attr::Ints("pads", {1, 0, 1, 0, 1, 1}), Attr::Int("count_include_pad", 1)}));
               }});
  c.push_back({"AveragePool3D_Ceil_ExcludePad", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 1, 5, 4, 4});
                 b.WeightedSumLoss(b.Op("AveragePool", {x}, {Attr::Ints("kernel_shape", {3, 2, 2}), Attr::Ints("strides", {2, 2, 2}),
                                                            Attr::Ints("pads", {1, 1, 0, 0, 0, 1}), Attr::Int("ceil_mode", 1)}));
               }});
  c.push_back({"AveragePool_Pads_ExcludePad", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 2, 5, 5});
                 b.WeightedSumLoss(b.Op("AveragePool", {x}, {Attr::Ints("kernel_shape", {3, 3}), Attr::Ints("strides", {2, 2}),
                                                            Attr::Ints("pads", {1, 1, 1, 1})}));
               }});
  c.push_back({"AveragePool_Pads_IncludePad", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 2, 5, 4});
                 b.WeightedSumLoss(b.Op("AveragePool", {x}, {Attr::Ints("kernel_shape", {2, 3}), Attr::Ints("strides", {1, 2}),
                                                            Attr::Ints("pads", {1, 0, 0, 1}), Attr::Int("count_include_pad", 1)}));
               }});
  c.push_back({"GlobalAveragePool", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 3, 2});
                 b.WeightedSumLoss(b.Op("GlobalAveragePool", {x}));
               }});
  // shape ops
  unary("Flatten_Axis2", "Flatten", -1, 1, 0, {Attr::Int("axis", 2)});
  c.push_back({"Reshape", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 b.WeightedSumLoss(b.Op("Reshape", {x, b.Ints("shape", {4, -1})}));
               }});
  unary("Transpose_Perm201", "Transpose", -1, 1, 0, {Attr::Ints("perm", {2, 0, 1})});
  c.push_back({"Squeeze_Axis1", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 1, 3});
                 b.WeightedSumLoss(b.Op("Squeeze", {x, b.Ints("axes", {1})}));
               }});
  c.push_back({"Unsqueeze_Axes0And3", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3});
                 b.WeightedSumLoss(b.Op("Unsqueeze", {x, b.Ints("axes", {0, 3})}));
               }});
  c.push_back({"Concat_Axis1", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 1, 3}), y = b.Param("y", {2, 2, 3}), z = b.Param("z", {2, 3, 3});
                 b.WeightedSumLoss(b.Op("Concat", {x, y, z}, {Attr::Int("axis", 1)}));
               }});
  c.push_back({"Split_UnusedMiddleOutput", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 6});
                 auto ys = b.Node("Split", {x, b.Ints("split", {1, 2, 3})}, 3, {Attr::Int("axis", 1)});
                 // only outputs 0 and 2 reach the loss: output 1's gradient is zero
                 int w0 = b.Const("w0", {2, 1}, b.Random(2)), w2 = b.Const("w2", {2, 3}, b.Random(6));
                 int s0 = b.Op("ReduceSum", {b.Op("Mul", {ys[0], w0})}, {Attr::Int("keepdims", 0)});
                 int s2 = b.Op("ReduceSum", {b.Op("Mul", {ys[2], w2})}, {Attr::Int("keepdims", 0)});
                 b.SetLoss(b.Op("Add", {s0, s2}));
               }});
  c.push_back({"Slice_Steps", [](GraphBuilder &b) {
                 int x = b.Param("x", {5, 6});
                 b.WeightedSumLoss(b.Op("Slice", {x, b.Ints("starts", {1, 0}), b.Ints("ends", {5, 6}),
                                                  b.Ints("axes", {0, 1}), b.Ints("steps", {2, 2})}));
               }});
  c.push_back({"Slice_NegativeStep", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 7});
                 b.WeightedSumLoss(b.Op("Slice", {x, b.Ints("starts", {-1}), b.Ints("ends", {-6}),
                                                  b.Ints("axes", {1}), b.Ints("steps", {-2})}));
               }});
  c.push_back({"Gather_Axis0_Embedding", [](GraphBuilder &b) {
                 int e = b.Param("emb", {5, 3});
                 int idx = b.Data("idx", APX_VAL_CONST, APX_DT_I64, {2, 3}, {0, 3, 3, 4, 0, 1});
                 b.WeightedSumLoss(b.Op("Gather", {e, idx}));
               }});
  c.push_back({"Gather_Axis1", [](GraphBuilder &b) {
                 int e = b.Param("x", {3, 5});
                 int idx = b.Data("idx", APX_VAL_CONST, APX_DT_I64, {4}, {4, 1, 1, -1});
                 b.WeightedSumLoss(b.Op("Gather", {e, idx}, {Attr::Int("axis", 1)}));
               }});
  c.push_back({"Expand", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 1});
                 b.WeightedSumLoss(b.Op("Expand", {x, b.Ints("shape", {2, 3, 4})}));
               }});
  c.push_back({"ReduceSum_Axis1_NoKeep", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 b.WeightedSumLoss(b.Op("ReduceSum", {x, b.Ints("axes", {1})}, {Attr::Int("keepdims", 0)}));
               }});
  c.push_back({"ReduceSum_Axes02_Keep", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 b.WeightedSumLoss(b.Op("ReduceSum", {x, b.Ints("axes", {0, -1})}));
               }});
  c.push_back({"ReduceMean_LastAxis_Keep", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 b.WeightedSumLoss(b.Op("ReduceMean", {x}, {Attr::Ints("axes", {-1})}));
               }});
  c.push_back({"ReduceMean_AllAxes_NoKeep", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 b.WeightedSumLoss(b.Op("ReduceMean", {x}, {Attr::Int("keepdims", 0)}));
               }});
  c.push_back({"Where_Broadcast", [](GraphBuilder &b) {
                 int cond = b.Data("cond", APX_VAL_CONST, APX_DT_BOOL, {2, 3}, {1, 0, 0, 1, 1, 0});
                 int x = b.Param("x", {3}), y = b.Param("y", {2, 1});
                 b.WeightedSumLoss(b.Op("Where", {cond, x, y}));
               }});
  c.push_back({"CastRoundTrip", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3});
                 int y = b.Op("Cast", {x}, {Attr::Int("to", APX_DT_F32)});
                 b.WeightedSumLoss(b.Op("Cast", {y}, {Attr::Int("to", APX_DT_F64)}));
               },
               /* h */ 1.0 / 16,
               /* tol: L is linear in x, so only the float32 rounding of x +- h (|x| <= 1)
                  counts: per element |n_i - W_i| <= eps_f32 (1 + h) |W_i| / (2 h) */
               2 * 1.1920929e-07 * 16});
  c.push_back({"CastLikeRoundTrip", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3});
                 int y = b.Op("CastLike", {x, b.Const("like32", {1}, {0.0}, APX_DT_F32)});
                 b.WeightedSumLoss(b.Op("CastLike", {y, b.Const("like64", {}, {0.0})}));
               },
               /* h, tol: as CastRoundTrip */ 1.0 / 16, 2 * 1.1920929e-07 * 16});
  // v1.1 data movement, indexing and reductions
  c.push_back({"Pad_Constant_CropAndValue", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 4, 5});
                 int cv = b.Const("value", {}, {0.75});
                 b.WeightedSumLoss(b.Op("Pad", {x, b.Ints("pads", {1, -1, 2, 0, 2, -2}), cv}));
               }});
  c.push_back({"Pad_Reflect_Axes_WiderThanInput", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 // 5 > 4 - 1 on the last axis: the mirror wraps around (numpy's reflect)
                 b.WeightedSumLoss(b.Op("Pad", {x, b.Ints("pads", {2, 5, 1, 3}), -1, b.Ints("axes", {1, -1})},
                                        {Attr::Str("mode", "reflect")}));
               }});
  c.push_back({"Pad_Edge", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 4});
                 b.WeightedSumLoss(b.Op("Pad", {x, b.Ints("pads", {2, 0, 1, 3})}, {Attr::Str("mode", "edge")}));
               }});
  c.push_back({"Tile_Repeats213", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 2});
                 b.WeightedSumLoss(b.Op("Tile", {x, b.Ints("repeats", {2, 1, 3})}));
               }});
  c.push_back({"Trilu_Upper_K1", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 4, 5});
                 b.WeightedSumLoss(b.Op("Trilu", {x, b.Data("k", APX_VAL_CONST, APX_DT_I64, {}, {1})}));
               }});
  c.push_back({"Trilu_Lower_KMinus1", [](GraphBuilder &b) {
                 int x = b.Param("x", {5, 4});
                 b.WeightedSumLoss(b.Op("Trilu", {x, b.Data("k", APX_VAL_CONST, APX_DT_I64, {}, {-1})},
                                        {Attr::Int("upper", 0)}));
               }});
  c.push_back({"GatherElements_Axis1_RepeatedNegative", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 4});
                 int idx = b.Data("idx", APX_VAL_CONST, APX_DT_I64, {2, 5}, {0, 3, 3, -1, 1, 2, 2, 0, -4, 1});
                 b.WeightedSumLoss(b.Op("GatherElements", {x, idx}, {Attr::Int("axis", 1)}));
               }});
  c.push_back({"GatherElements_Axis0_SmallerIndices", [](GraphBuilder &b) {
                 int x = b.Param("x", {4, 3, 2});
                 int idx = b.Data("idx", APX_VAL_CONST, APX_DT_I32, {3, 2, 2}, {0, 1, 3, 3, 2, 2, -1, 0, 1, 1, 0, 3});
                 b.WeightedSumLoss(b.Op("GatherElements", {x, idx}));
               }});
  c.push_back({"GatherND_RepeatedTuples", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 4, 2});
                 int idx = b.Data("idx", APX_VAL_CONST, APX_DT_I64, {4, 2}, {0, 1, 2, 3, 0, 1, -1, -4});
                 b.WeightedSumLoss(b.Op("GatherND", {x, idx}));
               }});
  c.push_back({"GatherND_BatchDims1", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 int idx = b.Data("idx", APX_VAL_CONST, APX_DT_I64, {2, 3, 1}, {2, 0, 2, 1, 1, -1});
                 b.WeightedSumLoss(b.Op("GatherND", {x, idx}, {Attr::Int("batch_dims", 1)}));
               }});
  c.push_back({"ReduceMax_Axis1_NoKeep", [](GraphBuilder &b) {
                 int x = b.Data("x", APX_VAL_PARAM, APX_DT_F64, {2, 3, 4}, b.Distinct(24));
                 b.WeightedSumLoss(b.Op("ReduceMax", {x}, {Attr::Ints("axes", {1}), Attr::Int("keepdims", 0)}));
               }});
  c.push_back({"ReduceMax_AllAxes_Keep", [](GraphBuilder &b) {
                 int x = b.Data("x", APX_VAL_PARAM, APX_DT_F64, {3, 4}, b.Distinct(12));
                 b.WeightedSumLoss(b.Op("ReduceMax", {x}));
               }});
  c.push_back({"RandomUniformLike_TimesInput", [](GraphBuilder &b) {
                 int x = b.Param("x", {3, 5});
                 int u = b.Op("RandomUniformLike", {x}, {Attr::Float("seed", 3.0f), Attr::Float("low", -1.0f),
                                                         Attr::Float("high", 2.0f)});
                 b.WeightedSumLoss(b.Op("Mul", {x, u}));  // d/dx = u: the draw itself has no gradient
               }});
  // v1.1 resampling and contraction: ResizeGrad scatters the forward's weights back; the
  // gradients of Einsum are Einsums (summed-away labels broadcast, diagonals written)
  c.push_back({"Resize_Linear_HalfPixel_Scales", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 2, 3, 4});
                 int sc = b.Const("scales", {4}, {1, 1, 2, 1.5}, APX_DT_F32);
                 b.WeightedSumLoss(b.Op("Resize", {x, -1, sc}, {Attr::Str("mode", "linear")}));
               }});
  c.push_back({"Resize_Linear_AlignCorners_DownSizes", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 1, 5, 6});
                 b.WeightedSumLoss(b.Op("Resize", {x, -1, -1, b.Ints("sizes", {1, 1, 3, 4})},
                                        {Attr::Str("mode", "linear"),
                                         Attr::Str("coordinate_transformation_mode", "align_corners")}));
               }});
  c.push_back({"Resize_Linear_PytorchHalfPixel_Up", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 1, 3, 3});
                 b.WeightedSumLoss(b.Op("Resize", {x, -1, -1, b.Ints("sizes", {2, 1, 7, 5})},
                                        {Attr::Str("mode", "linear"),
                                         Attr::Str("coordinate_transformation_mode", "pytorch_half_pixel")}));
               }});
  c.push_back({"Resize_Nearest_Asymmetric_Floor", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3, 4});
                 int sc = b.Const("scales", {3}, {1, 2.5, 0.5}, APX_DT_F32);
                 b.WeightedSumLoss(b.Op("Resize", {x, -1, sc},
                                        {Attr::Str("coordinate_transformation_mode", "asymmetric"),
                                         Attr::Str("nearest_mode", "floor")}));
               }});
  c.push_back({"Resize_Nearest_HalfPixel_RoundPreferCeil", [](GraphBuilder &b) {
                 int x = b.Param("x", {1, 1, 3, 2});
                 int sc = b.Const("scales", {4}, {1, 1, 3, 2}, APX_DT_F32);
                 b.WeightedSumLoss(b.Op("Resize", {x, -1, sc}, {Attr::Str("nearest_mode", "round_prefer_ceil")}));
               }});
  auto einsum = [&](const char *name, const char *eq, std::vector<int64_t> da, std::vector<int64_t> db) {
    c.push_back({name, [=](GraphBuilder &b) {
                   std::vector<int> in = {b.Param("a", da)};
                   if (!db.empty()) in.push_back(b.Param("b", db));
                   b.WeightedSumLoss(b.Op("Einsum", in, {Attr::Str("equation", eq)}));
                 }});
  };
  einsum("Einsum_BatchMatMul", "bij,bjk->bik", {2, 3, 4}, {2, 4, 5});
  einsum("Einsum_AttentionScores", "bhid,bhjd->bhij", {2, 2, 3, 4}, {2, 2, 5, 4});
  einsum("Einsum_Transpose", "ij->ji", {3, 4}, {});
  einsum("Einsum_RowDot", "bi,bi->b", {3, 5}, {3, 5});
  einsum("Einsum_Outer", "i,j->ij", {3}, {4});
  einsum("Einsum_SumAway_Broadcast", "ij,k->ik", {3, 4}, {2});
  einsum("Einsum_Diagonal", "ii->i", {4, 4}, {});
  einsum("Einsum_Implicit_Spaces", "ij, jk", {2, 3}, {3, 4});
  auto sequence = [&](const char *name, std::vector<int> split, int keepdims, std::vector<int64_t> positions) {
    c.push_back({name, [=](GraphBuilder &b) {
                   int x = b.Param("x", {2, 5, 3});
                   std::vector<int> in = {x};
                   if (split.size() == 1) in.push_back(b.Data("split", APX_VAL_CONST, APX_DT_I64, {}, {(double)split[0]}));
                   if (split.size() > 1) in.push_back(b.Ints("split", std::vector<int64_t>(split.begin(), split.end())));
                   int seq = b.Op("SplitToSequence", in, {Attr::Int("axis", 1), Attr::Int("keepdims", keepdims)});
                   int acc = -1;
                   for (int64_t p : positions) {
                     int piece = b.Op("SequenceAt", {seq, b.Data("pos" + std::to_string(acc), APX_VAL_CONST, APX_DT_I64, {}, {(double)p})});
                     int w = b.Const("w" + std::to_string(acc + 2), std::vector<int64_t>(b.g.vals[piece].dims, b.g.vals[piece].dims + b.g.vals[piece].rank),
                                     b.Random(apx_value_numel(&b.g.vals[piece])));
                     int s = b.Op("ReduceSum", {b.Op("Mul", {piece, w})}, {Attr::Int("keepdims", 0)});
                     acc = acc < 0 ? s : b.Op("Add", {acc, s});
                   }
                   b.SetLoss(acc);
                   // the rewrite into Split outputs (passes/split_sequences.c), as the pipeline does
                   ASSERT_TRUE(b.SortAndVerify());
                   ASSERT_EQ(b.RunPass(pass_split_sequences), APX_PASS_CHANGED) << b.d.msg;
                 }});
  };
  sequence("SplitToSequence_ScalarSplit_ReadTwiceAndNegative", {2}, 1, {0, 2, -3, -1});
  sequence("SplitToSequence_Sizes", {1, 3, 1}, 1, {1, 2});
  sequence("SplitToSequence_NoSplit_KeepdimsZero", {}, 0, {4, 0, 0});
  // losses
  auto sce = [&](const char *name, const char *reduction, bool weights, bool ignore, std::vector<int64_t> sdims) {
    c.push_back({name, [=](GraphBuilder &b) {
                   int s = b.Param("scores", sdims, -2, 2);
                   std::vector<int64_t> ldims = sdims;
                   ldims.erase(ldims.begin() + 1);
                   int64_t n = GraphBuilder::Numel(ldims);
                   std::vector<double> lab;
                   for (int64_t k = 0; k < n; k++) lab.push_back((double)((k * 3 + 1) % sdims[1]));
                   if (ignore) lab[1] = 2;
                   int labels = b.Data("labels", APX_VAL_CONST, APX_DT_I64, ldims, lab);
                   std::vector<int> in = {s, labels};
                   if (weights) in.push_back(b.Const("class_weights", {sdims[1]}, b.Random(sdims[1], 0.5, 1.5)));
                   std::vector<Attr> at = {Attr::Str("reduction", reduction)};
                   if (ignore) at.push_back(Attr::Int("ignore_index", 2));
                   b.WeightedSumLoss(b.Node("SoftmaxCrossEntropyLoss", in, 1, at)[0]);
                 }});
  };
  sce("SCE_Mean", "mean", false, false, {4, 5});
  sce("SCE_Mean_Weights_IgnoreIndex", "mean", true, true, {4, 5});
  sce("SCE_Sum_Weights", "sum", true, false, {4, 5});
  sce("SCE_None_IgnoreIndex_Spatial", "none", false, true, {2, 3, 4});
  c.push_back({"SCE_LogProbUsedDownstream", [](GraphBuilder &b) {
                 int s = b.Param("scores", {3, 4}, -2, 2);
                 int labels = b.Data("labels", APX_VAL_CONST, APX_DT_I64, {3}, {1, 0, 3});
                 auto out = b.Node("SoftmaxCrossEntropyLoss", {s, labels}, 2);
                 int w = b.Const("w", {3, 4}, b.Random(12));
                 int extra = b.Op("ReduceSum", {b.Op("Mul", {out[1], w})}, {Attr::Int("keepdims", 0)});
                 b.SetLoss(b.Op("Add", {out[0], extra}));
               }});
  auto nll = [&](const char *name, const char *reduction, bool weights, bool ignore) {
    c.push_back({name, [=](GraphBuilder &b) {
                   int x = b.Param("x", {4, 5}, -2, 2);
                   int lp = b.Op("LogSoftmax", {x}, {Attr::Int("axis", 1)});
                   int target = b.Data("target", APX_VAL_CONST, APX_DT_I64, {4}, {1, 2, 4, 0});
                   std::vector<int> in = {lp, target};
                   if (weights) in.push_back(b.Const("class_weights", {5}, b.Random(5, 0.5, 1.5)));
                   std::vector<Attr> at = {Attr::Str("reduction", reduction)};
                   if (ignore) at.push_back(Attr::Int("ignore_index", 2));
                   b.WeightedSumLoss(b.Op("NegativeLogLikelihoodLoss", in, at));
                 }});
  };
  nll("NLL_Mean", "mean", false, false);
  nll("NLL_Mean_Weights_IgnoreIndex", "mean", true, true);
  nll("NLL_Sum", "sum", false, false);
  nll("NLL_None_Weights", "none", true, false);
  // a value with several consumers (accumulation through Add and Sum)
  c.push_back({"SharedValue_ThreeConsumers", [](GraphBuilder &b) {
                 int x = b.Param("x", {2, 3});
                 int t = b.Op("Tanh", {x});
                 int y = b.Op("Mul", {t, t});
                 b.WeightedSumLoss(b.Op("Add", {y, b.Op("Sigmoid", {t})}));
               }});
  return c;
}

// ---- the check ------------------------------------------------------------------------

double LossValue(ApxEval *ev, const ApxGraph *g) {
  EXPECT_EQ(apx_eval_run(ev, APX_EVAL_FORWARD), 0) << ev->err;
  return apx_eval_get(ev, g->loss, 0);
}

class GradCheck : public ::testing::TestWithParam<Case> {};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

TEST_P(GradCheck, AnalyticMatchesCentralDifferences) {
  const Case &cs = GetParam();
  GraphBuilder b;
  cs.build(b);
  ASSERT_FALSE(apx_diag_failed(&b.d)) << b.d.msg;
  ASSERT_TRUE(b.SortAndVerify());
  b.o.loss_scale = kLossScale;
  ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;

  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &b.g), 0) << ev.err;
  ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ev.err;
  const double tol = cs.tol > 0 ? cs.tol : kTol;
  int checked = 0;
  for (int p = 0; p < b.g.n_vals; p++) {
    const ApxValue &pv = b.g.vals[p];
    if (pv.kind != APX_VAL_PARAM) continue;
    ASSERT_GE(pv.grad, 0) << "parameter '" << pv.name << "' got no gradient";
    int64_t n = apx_value_numel(&pv);
    std::vector<double> analytic((size_t)n), numeric((size_t)n);
    for (int64_t i = 0; i < n; i++) analytic[(size_t)i] = apx_eval_get(&ev, pv.grad, i) / kLossScale;
    for (int64_t i = 0; i < n; i++) {
      double x0 = apx_eval_get(&ev, p, i);
      double h = cs.h > 0 ? cs.h : std::cbrt(kEps64) * std::max(1.0, std::fabs(x0));
      apx_eval_set(&ev, p, i, x0 + h);
      double lp = LossValue(&ev, &b.g);
      apx_eval_set(&ev, p, i, x0 - h);
      double lm = LossValue(&ev, &b.g);
      apx_eval_set(&ev, p, i, x0);
      numeric[(size_t)i] = (lp - lm) / (2 * h);
    }
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = analytic[(size_t)i] - numeric[(size_t)i];
      err += e * e;
      ref += numeric[(size_t)i] * numeric[(size_t)i];
    }
    err = std::sqrt(err), ref = std::sqrt(ref);
    std::string detail;
    for (int64_t i = 0; i < n && i < 8; i++)
      detail += " (" + std::to_string(analytic[(size_t)i]) + " vs " + std::to_string(numeric[(size_t)i]) + ")";
    EXPECT_LE(err, tol * std::max(ref, 1e-3))
        << "parameter '" << pv.name << "': |analytic - numeric| = " << err << ", |numeric| = " << ref
        << "; first elements (analytic vs numeric):" << detail;
    char rel[32];
    snprintf(rel, sizeof rel, "%.3e", err / std::max(ref, 1e-3));
    RecordProperty(std::string("rel_err_") + pv.name, rel);
    checked++;
  }
  EXPECT_GT(checked, 0);
  apx_eval_free(&ev);
}

INSTANTIATE_TEST_SUITE_P(V1Ops, GradCheck, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case> &i) { return std::string(i.param.name); });

// Every v1 op (ops.def flag V1) is the forward op of at least one case above.
TEST(GradCheckCoverage, EveryV1OpHasACase) {
  std::set<int> seen;
  for (const Case &cs : Cases()) {
    GraphBuilder b;
    cs.build(b);
    for (int i = 0; i < b.g.n_nodes; i++) {
      seen.insert(b.g.nodes[i].op);
      if (b.g.nodes[i].op_type)  // CastLike is a Cast once canonicalized
        seen.insert(apx_op_from_name(b.g.nodes[i].op_type));
    }
  }
  int n_v1 = 0;
  for (int op = 1; op < APX_OP_COUNT; op++) {
    if (!(apx_op_info((ApxOp)op)->flags & APX_OPF_V1)) continue;
    n_v1++;
    EXPECT_TRUE(seen.count(op)) << apx_op_name((ApxOp)op) << " has no gradient-check case";
  }
  EXPECT_EQ(n_v1, 72); // DESIGN.md 3: the 43 v1 forward ops and the v1.1 ops added so far
}

}  // namespace
