// fold_constants_exec_test.cc - folded constants are bit-identical to running the same nodes
// at run time: one small graph of nodes on constants (fp16, bf16, fp32, int64 and bool; math,
// normalization, products, data movement, casts, masks) built twice, folded once with the
// default cap and once with --fold-max-mb=0 (only the compile-time ops fold, every other
// node stays a runtime node), the second planned and run on the CPU backend (runtime/exec.h);
// every folded value must equal the runtime output byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "passes/infer_shapes.h"
#include "passes/memplan.h"
#include "plan/plan.h"
#include "runtime/exec.h"
}

#include "passes/fold_testing.h"

namespace {

using G = apx_testing::FoldGraph;

using apx_testing::Halves;

std::vector<float> ramp(int n, float scale, float shift) {
  std::vector<float> v;
  for (int i = 0; i < n; i++) v.push_back(scale * (float)((i * 37) % 17) + shift);
  return v;
}

// The graph: outputs are each a chain of nodes on constants; "y" also reads the data input.
void build(G &t) {
  t.g.opset = 18;
  int x = t.input("x", APX_DT_F32, {4, 4});
  // fp16: Mul, Sqrt, Tanh, Cast to fp32, Softmax
  int a16 = t.cst<uint16_t>("a16", APX_DT_F16, {4, 4}, Halves(ramp(16, 0.37f, 0.01f), false));
  int b16 = t.cst<uint16_t>("b16", APX_DT_F16, {4}, Halves(ramp(4, -1.3f, 3.3f), false));
  int m16 = t.value("m16"), s16 = t.value("s16"), th = t.value("th"), f32 = t.value("f32"), sm = t.value("sm");
  t.node(APX_OP_Mul, "mul16", {a16, b16}, {m16});
  t.node(APX_OP_Sqrt, "sqrt16", {m16}, {s16});
  t.node(APX_OP_Tanh, "tanh16", {s16}, {th});
  t.output(th);
  int c = t.node(APX_OP_Cast, "cast32", {s16}, {f32});
  t.attr(c, "to", APX_ATTR_INT)->i = APX_DT_F32;
  int s = t.node(APX_OP_Softmax, "softmax", {f32}, {sm});
  t.attr(s, "axis", APX_ATTR_INT)->i = -1;
  t.output(sm);
  // bf16: MatMul, LayerNormalization, Gelu, Erf
  int wb = t.cst<uint16_t>("wb", APX_DT_BF16, {4, 3}, Halves(ramp(12, 0.21f, -1.7f), true));
  int ab = t.cst<uint16_t>("ab", APX_DT_BF16, {2, 4}, Halves(ramp(8, -0.33f, 2.1f), true));
  int mm = t.value("mm"), ln = t.value("ln"), ge = t.value("ge"), er = t.value("er");
  t.node(APX_OP_MatMul, "matmul_bf16", {ab, wb}, {mm});
  int lnn = t.node(APX_OP_LayerNormalization, "layernorm", {mm, t.cst<uint16_t>("lns", APX_DT_BF16, {3}, Halves({1.5f, 0.7f, -1.1f}, true)),
                                                           t.cst<uint16_t>("lnb", APX_DT_BF16, {3}, Halves({0.1f, 0.2f, 0.3f}, true))}, {ln});
  t.attr(lnn, "axis", APX_ATTR_INT)->i = -1;
  t.node(APX_OP_Gelu, "gelu", {ln}, {ge});
  t.node(APX_OP_Erf, "erf", {mm}, {er});
  t.output(ge);
  t.output(er);
  // fp32: Pow, Exp, Log, ReduceMean, Transpose, Expand, Div
  int p = t.cst<float>("p", APX_DT_F32, {2, 3}, ramp(6, 0.11f, 0.3f));
  int pw = t.value("pw"), ex = t.value("ex"), lg = t.value("lg"), rm = t.value("rm"), tr = t.value("tr");
  int xp = t.value("xp"), dv = t.value("dv");
  t.node(APX_OP_Pow, "pow", {p, t.cst<float>("three", APX_DT_F32, {}, {3.0f})}, {pw});
  t.node(APX_OP_Exp, "exp", {pw}, {ex});
  t.node(APX_OP_Log, "log", {ex}, {lg});
  int r = t.node(APX_OP_ReduceMean, "reducemean", {lg, t.ints("rax", {1})}, {rm});
  t.attr(r, "keepdims", APX_ATTR_INT)->i = 1;
  t.node(APX_OP_Transpose, "transpose", {rm}, {tr});
  t.node(APX_OP_Expand, "expand", {tr, t.ints("eshape", {3, 2})}, {xp});
  t.node(APX_OP_Div, "div", {xp, t.cst<float>("seven", APX_DT_F32, {}, {7.0f})}, {dv});
  t.output(dv);
  // int64 and bool: index arithmetic into a mask added to the data input
  int rg = t.value("rg"), rows = t.value("rows"), cols = t.value("cols"), diff = t.value("diff");
  int df = t.value("df"), fut = t.value("fut"), mask = t.value("mask"), q = t.value("q"), y = t.value("y");
  t.node(APX_OP_Range, "range", {t.cst<int64_t>("s0", APX_DT_I64, {}, {0}), t.cst<int64_t>("s4", APX_DT_I64, {}, {4}),
                                 t.cst<int64_t>("s1", APX_DT_I64, {}, {1})}, {rg});
  t.node(APX_OP_Unsqueeze, "rows", {rg, t.ints("ax1", {1})}, {rows});
  t.node(APX_OP_Unsqueeze, "cols", {rg, t.ints("ax0", {0})}, {cols});
  t.node(APX_OP_Sub, "sub", {cols, rows}, {diff});
  t.node(APX_OP_Div, "idiv", {diff, t.cst<int64_t>("two", APX_DT_I64, {}, {2})}, {q});
  t.output(q);
  int c1 = t.node(APX_OP_Cast, "tofloat", {diff}, {df});
  t.attr(c1, "to", APX_ATTR_INT)->i = APX_DT_F32;
  int rl = t.value("rl");
  t.node(APX_OP_Relu, "relu", {df}, {rl});
  int c2 = t.node(APX_OP_Cast, "tobool", {rl}, {fut});
  t.attr(c2, "to", APX_ATTR_INT)->i = APX_DT_BOOL;
  t.output(fut);
  t.node(APX_OP_Where, "where", {fut, t.cst<float>("neg", APX_DT_F32, {}, {-1e9f}), t.cst<float>("zero", APX_DT_F32, {}, {0.0f})}, {mask});
  t.output(mask);
  t.node(APX_OP_Add, "add", {x, mask}, {y});
  t.output(y);
}

// Folds with fold_max_mb, infers, plans; 0 or a message.
std::string compile(G &t, double fold_max_mb) {
  t.o.training = 0;
  t.o.fold_max_mb = fold_max_mb;
  if (t.fold() < 0) return t.d.msg;
  if (pass_infer_shapes(&t.g, &t.o, &t.d) < 0 || apx_graph_verify(&t.g, &t.d)) return t.d.msg;
  if (pass_memplan(&t.g, &t.o, &t.d) < 0) return t.d.msg;
  return "";
}

}  // namespace

TEST(FoldConstantsExec, FoldedValuesEqualTheRuntimeBitForBit) {
  G folded, runtime;
  build(folded);
  build(runtime);
  ASSERT_EQ(compile(folded, APX_FOLD_MAX_MB_DEFAULT), "");
  ASSERT_EQ(compile(runtime, 0.0), "");
  EXPECT_EQ(folded.live(), 1);                    // only y = x + mask runs
  EXPECT_GE(runtime.live(), 25);                  // every node but Range (compile-time only)
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&runtime.g, nullptr, &plan, &runtime.d), 0) << runtime.d.msg;
  ApxDiag d;
  apx_diag_init(&d);
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  std::vector<float> xv = ramp(16, 0.5f, -2.0f);
  ApxTensor xt = {};
  xt.data = xv.data();
  xt.dtype = APX_DT_F32;
  xt.rank = 2;
  xt.dims[0] = xt.dims[1] = 4;
  ASSERT_EQ(apx_exec_set_input(&ex, 0, &xt, &d), 0) << d.msg;
  ASSERT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), 0) << d.msg;
  ASSERT_EQ(plan.n_outputs, (int32_t)folded.outs.size());
  int compared = 0;
  for (size_t i = 0; i + 1 < folded.outs.size(); i++) {  // the last output, y, reads x
    const ApxValue *fv = &folded.g.vals[folded.outs[i]];
    const ApxValue *rv = &runtime.g.vals[runtime.outs[i]];
    ASSERT_EQ(fv->kind, APX_VAL_CONST) << fv->name;
    ASSERT_EQ(rv->kind, APX_VAL_ACTIVATION) << rv->name;  // computed at run time
    ASSERT_EQ(fv->dtype, rv->dtype) << fv->name;
    size_t bytes = (size_t)apx_value_bytes(fv);
    ASSERT_EQ(bytes, (size_t)apx_value_bytes(rv)) << fv->name;
    std::vector<unsigned char> got(bytes);
    ASSERT_EQ(apx_exec_read(&ex, plan.outputs[i], got.data(), bytes, &d), 0) << d.msg;
    EXPECT_EQ(memcmp(got.data(), fv->data, bytes), 0) << fv->name << " (" << apx_dtype_name(fv->dtype) << ")";
    compared++;
  }
  EXPECT_EQ(compared, 8);
  apx_exec_free(&ex);
  apx_plan_free(&plan);
}
