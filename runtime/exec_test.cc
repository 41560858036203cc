// exec_test.cc - the executor on hand-built graphs through memplan, emit_plan and the CPU
// backend: results against plain double loops, in-place reuse and skipped views give the
// same numbers, sections run separately, errors name the kernel / input / device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "passes/memplan.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}

namespace {

struct G {
  ApxGraph g;
  ApxDiag d;
  // a copy of v in the graph's arena (one spare slot so an empty list is a valid pointer)
  int *ids(const std::vector<int> &v) {
    int *p = (int *)apx_arena_alloc(&g.arena, (v.size() + 1) * sizeof(int));
    if (!v.empty()) memcpy(p, v.data(), v.size() * sizeof(int));
    return p;
  }
  std::vector<int> ins;
  G() {
    apx_graph_init(&g, "test.onnx");
    apx_diag_init(&d);
    d.quiet = 1;
  }
  ~G() { apx_graph_free(&g); }
  int value(const char *name, ApxValueKind kind, std::vector<int64_t> dims,
            ApxDType dt = APX_DT_F32, const std::vector<float> *init = nullptr) {
    int v = apx_graph_add_value(&g, &d, name, kind, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    if (kind == APX_VAL_PARAM || kind == APX_VAL_CONST || kind == APX_VAL_STATE) {
      int64_t b = apx_value_bytes(&g.vals[v]);
      g.vals[v].data = apx_arena_alloc(&g.arena, (size_t)b + 1);
      if (init) memcpy(g.vals[v].data, init->data(), (size_t)b);
    }
    if (kind == APX_VAL_INPUT) ins.push_back(v);
    return v;
  }
  int node(ApxOp op, std::vector<int> in, std::vector<int> out, const char *name,
           ApxSection sec = APX_SEC_FORWARD) {
    int n = apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
    EXPECT_GE(n, 0) << d.msg;
    g.nodes[n].section = sec;
    return n;
  }
  void finish(std::vector<int> outs) {
    g.inputs = ids(ins);
    g.n_inputs = (int32_t)ins.size();
    g.outputs = ids(outs);
    g.n_outputs = (int32_t)outs.size();
    for (int v : outs) g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
    ASSERT_EQ(apx_graph_toposort(&g, &d), 0) << d.msg;
    ASSERT_EQ(apx_graph_verify(&g, &d), 0) << d.msg;
    ASSERT_EQ(pass_memplan(&g, nullptr, &d), 0) << d.msg;
  }
};

std::vector<float> ramp(size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = scale * (float)((i * 37) % 17) + shift;
  return v;
}

// x[4,8] -> Gemm(W1[8,16], b1) -> Relu (in place) -> Flatten (view) -> Gemm(W2^T, b2)
//        -> Softmax(axis 1) -> y[4,3]
struct Mlp {
  G t;
  std::vector<float> w1 = ramp(8 * 16, 0.05f, -0.4f), b1 = ramp(16, 0.1f, -0.5f);
  std::vector<float> w2 = ramp(3 * 16, -0.07f, 0.5f), b2 = ramp(3, 0.2f, 0.1f);
  int x, h, a, f, z, y, relu_node;
  Mlp() {
    x = t.value("x", APX_VAL_INPUT, {4, 8});
    int W1 = t.value("W1", APX_VAL_PARAM, {8, 16}, APX_DT_F32, &w1);
    int B1 = t.value("b1", APX_VAL_PARAM, {16}, APX_DT_F32, &b1);
    int W2 = t.value("W2", APX_VAL_PARAM, {3, 16}, APX_DT_F32, &w2);
    int B2 = t.value("b2", APX_VAL_PARAM, {3}, APX_DT_F32, &b2);
    h = t.value("h", APX_VAL_ACTIVATION, {4, 16});
    a = t.value("a", APX_VAL_ACTIVATION, {4, 16});
    f = t.value("f", APX_VAL_ACTIVATION, {4, 16});
    z = t.value("z", APX_VAL_ACTIVATION, {4, 3});
    y = t.value("y", APX_VAL_ACTIVATION, {4, 3});
    int g1 = t.node(APX_OP_Gemm, {x, W1, B1}, {h}, "fc1");
    *APX_NODE_ATTRS(&t.g, g1, ApxAttrGemm) = {1.f, 1.f, 0, 0};
    relu_node = t.node(APX_OP_Relu, {h}, {a}, "relu");
    int fl = t.node(APX_OP_Flatten, {a}, {f}, "flatten");
    APX_NODE_ATTRS(&t.g, fl, ApxAttrAxis)->axis = 1;
    int g2 = t.node(APX_OP_Gemm, {f, W2, B2}, {z}, "fc2");
    *APX_NODE_ATTRS(&t.g, g2, ApxAttrGemm) = {1.f, 1.f, 0, 1};
    int sm = t.node(APX_OP_Softmax, {z}, {y}, "softmax");
    APX_NODE_ATTRS(&t.g, sm, ApxAttrAxis)->axis = 1;
    t.finish({y});
  }
  std::vector<double> reference(const std::vector<float> &xv) const {
    std::vector<double> out(12);
    for (int i = 0; i < 4; i++) {
      double act[16];
      for (int j = 0; j < 16; j++) {
        double s = b1[j];
        for (int k = 0; k < 8; k++) s += (double)xv[i * 8 + k] * w1[k * 16 + j];
        act[j] = s > 0 ? s : 0;
      }
      double zz[3], mx = -1e300, sum = 0;
      for (int c = 0; c < 3; c++) {
        double s = b2[c];
        for (int j = 0; j < 16; j++) s += act[j] * w2[c * 16 + j];
        zz[c] = s;
        mx = std::max(mx, s);
      }
      for (int c = 0; c < 3; c++) sum += std::exp(zz[c] - mx);
      for (int c = 0; c < 3; c++) out[i * 3 + c] = std::exp(zz[c] - mx) / sum;
    }
    return out;
  }
};

ApxTensor host_tensor(std::vector<float> &v, std::vector<int64_t> dims, ApxDType dt = APX_DT_F32) {
  ApxTensor t = {};
  t.data = v.data();
  t.dtype = dt;
  t.rank = (int32_t)dims.size();
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

void run_and_check(Mlp &m, ApxPlan &plan) {
  ApxDiag d;
  apx_diag_init(&d);
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  for (int round = 0; round < 2; round++) {  // the arena is reused between runs
    std::vector<float> xv = ramp(32, round ? -0.3f : 0.25f, round ? 1.0f : -1.0f);
    ApxTensor xt = host_tensor(xv, {4, 8});
    ASSERT_EQ(apx_exec_set_input(&ex, 0, &xt, &d), 0) << d.msg;
    ASSERT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), 0) << d.msg;
    EXPECT_EQ(ex.n_launched, plan.n_kernels - 1);  // the Flatten view is skipped
    std::vector<float> y(12);
    ASSERT_EQ(apx_exec_read(&ex, plan.outputs[0], y.data(), 12 * sizeof(float), &d), 0) << d.msg;
    std::vector<double> ref = m.reference(xv);
    for (int i = 0; i < 12; i++) EXPECT_NEAR(y[i], ref[i], 1e-5) << i;
  }
  apx_exec_free(&ex);
}

}  // namespace

TEST(Exec, MlpForwardMatchesReference) {
  Mlp m;
  // relu ran in place and the view aliases: the memory plan is exercised
  EXPECT_EQ(m.t.g.vals[m.a].mem_alias, m.h);
  EXPECT_EQ(m.t.g.vals[m.f].mem_alias, m.a);
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&m.t.g, nullptr, &plan, &m.t.d), 0) << m.t.d.msg;
  run_and_check(m, plan);
  apx_plan_free(&plan);
}

TEST(Exec, MlpForwardFromAPlanFile) {
  Mlp m;
  std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/mlp.apx";
  ASSERT_EQ(apx_emit_plan_file(&m.t.g, nullptr, path.c_str(), &m.t.d), 0) << m.t.d.msg;
  ApxPlan plan;
  apx_plan_init(&plan);
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_plan_read(&plan, path.c_str(), &d), 0) << d.msg;
  run_and_check(m, plan);
  apx_plan_free(&plan);
}

TEST(Exec, PersistentBuffersCanBeWrittenAndRead) {
  Mlp m;
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&m.t.g, nullptr, &plan, &m.t.d), 0) << m.t.d.msg;
  ApxDiag d;
  apx_diag_init(&d);
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  int32_t b2 = apx_plan_find_buffer(&plan, "b2");
  std::vector<float> got(3);
  ASSERT_EQ(apx_exec_read(&ex, b2, got.data(), 12, &d), 0) << d.msg;
  EXPECT_EQ(got, m.b2);
  m.b2 = {5.f, -5.f, 0.f};  // new bias: the output follows it
  ASSERT_EQ(apx_exec_write(&ex, b2, m.b2.data(), 12, &d), 0) << d.msg;
  std::vector<float> xv = ramp(32, 0.1f, 0.f);
  ApxTensor xt = host_tensor(xv, {4, 8});
  ASSERT_EQ(apx_exec_set_input(&ex, 0, &xt, &d), 0) << d.msg;
  ASSERT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), 0) << d.msg;
  std::vector<float> y(12);
  ASSERT_EQ(apx_exec_read(&ex, plan.outputs[0], y.data(), 48, &d), 0) << d.msg;
  std::vector<double> ref = m.reference(xv);
  for (int i = 0; i < 12; i++) EXPECT_NEAR(y[i], ref[i], 1e-5) << i;
  // reset restores the plan's initial data
  ASSERT_EQ(apx_exec_reset_persistent(&ex, &d), 0) << d.msg;
  ASSERT_EQ(apx_exec_read(&ex, b2, got.data(), 12, &d), 0) << d.msg;
  EXPECT_NE(got, m.b2);
  // wrong sizes are refused
  EXPECT_EQ(apx_exec_read(&ex, b2, got.data(), 8, &d), -1);
  apx_exec_free(&ex);
  apx_plan_free(&plan);
}

TEST(Exec, InputsAreCheckedAndFloatInputsConverted) {
  G t;
  int x = t.value("x", APX_VAL_INPUT, {2, 3}, APX_DT_F16);
  int y = t.value("y", APX_VAL_ACTIVATION, {2, 3}, APX_DT_F16);
  t.node(APX_OP_Neg, {x}, {y}, "neg");
  t.finish({y});
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&t.g, nullptr, &plan, &t.d), 0) << t.d.msg;
  ApxExec ex;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  std::vector<float> xv = {1.f, -2.f, 0.5f, 65504.f, 1e-8f, -3.25f};
  ApxTensor bad = host_tensor(xv, {3, 2});
  EXPECT_EQ(apx_exec_set_input(&ex, 0, &bad, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(d.msg).find("input 0 ('x'): expected float16 [2,3], got float32 [3,2]"),
            std::string::npos) << d.msg;
  apx_diag_init(&d);
  ApxTensor good = host_tensor(xv, {2, 3});  // fp32 into an fp16 input: converted
  ASSERT_EQ(apx_exec_set_input(&ex, 0, &good, &d), 0) << d.msg;
  ASSERT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), 0) << d.msg;
  uint16_t out[6];
  ASSERT_EQ(apx_exec_read(&ex, plan.outputs[0], out, sizeof out, &d), 0) << d.msg;
  uint16_t expect[6] = {0xbc00, 0x4000, 0xb800, 0xfbff, 0x8000, 0x4280};  // -x in fp16
  for (int i = 0; i < 6; i++) EXPECT_EQ(out[i], expect[i]) << i;
  apx_exec_free(&ex);
  apx_plan_free(&plan);
}

TEST(Exec, KernelFailureNamesTheNodeAndReason) {
  G t;
  int a = t.value("a", APX_VAL_INPUT, {2, 3});
  int b = t.value("b", APX_VAL_INPUT, {4, 5});  // inner dims disagree: the kernel refuses
  int y = t.value("y", APX_VAL_ACTIVATION, {2, 5});
  t.node(APX_OP_MatMul, {a, b}, {y}, "mm_bad");
  t.finish({y});
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&t.g, nullptr, &plan, &t.d), 0) << t.d.msg;
  ApxExec ex;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  EXPECT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_RUNTIME);
  EXPECT_NE(std::string(d.msg).find("kernel 0 node 'mm_bad' (MatMul): bad input:"), std::string::npos)
      << d.msg;
  EXPECT_EQ(strchr(d.msg, '\n'), nullptr);
  apx_exec_free(&ex);
  apx_plan_free(&plan);
}

// A single-process Allreduce copies each input into its output: a plan built in memory (never
// through the plan validator) whose output is larger than its input is refused before a byte
// is copied (it was a heap overflow in cpu_copy).
TEST(Exec, AllreduceChecksItsPairsBeforeCopying) {
  G t;
  int g = t.value("g", APX_VAL_INPUT, {4}), r = t.value("r", APX_VAL_ACTIVATION, {4});
  int ar = t.node(APX_OP_Allreduce, {g}, {r}, "bucket0");
  APX_NODE_ATTRS(&t.g, ar, ApxAttrAllreduce)->predivide = 1.0f;
  t.finish({r});
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&t.g, nullptr, &plan, &t.d), 0) << t.d.msg;
  ApxPlanBuffer &gb = plan.bufs[plan.kernels[0].in[0]];
  gb.dims[0] = 1 << 20;  // the input now claims 4 MiB: a copy would run past both buffers
  gb.bytes = 4 << 20;
  ApxExec ex;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  EXPECT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_RUNTIME);
  EXPECT_NE(std::string(d.msg).find("(Allreduce): bad input: output 0 does not mirror input 0"),
            std::string::npos) << d.msg;
  apx_exec_free(&ex);
  apx_plan_free(&plan);
}

TEST(Exec, SectionsRunSeparately) {
  G t;
  int x = t.value("x", APX_VAL_INPUT, {4});
  int y = t.value("y", APX_VAL_ACTIVATION, {4}), z = t.value("z", APX_VAL_ACTIVATION, {4});
  int w = t.value("w", APX_VAL_ACTIVATION, {4});
  t.node(APX_OP_Neg, {x}, {y}, "fwd");
  t.node(APX_OP_Sigmoid, {y}, {z}, "bwd", APX_SEC_BACKWARD);
  t.node(APX_OP_Tanh, {y}, {w}, "opt", APX_SEC_OPTIMIZER);
  t.finish({z, w});
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&t.g, nullptr, &plan, &t.d), 0) << t.d.msg;
  ApxExec ex;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  std::vector<float> xv = {1, 2, 3, 4};
  ApxTensor xt = host_tensor(xv, {4});
  ASSERT_EQ(apx_exec_set_input(&ex, 0, &xt, &d), 0) << d.msg;
  float zv[4], wv[4];
  ASSERT_EQ(apx_exec_run(&ex, APX_SEC_FORWARD, &d), 0) << d.msg;
  EXPECT_EQ(ex.n_launched, 1);
  ASSERT_EQ(apx_exec_run(&ex, APX_SEC_BACKWARD, &d), 0) << d.msg;
  EXPECT_EQ(ex.n_launched, 1);
  ASSERT_EQ(apx_exec_read(&ex, plan.outputs[0], zv, sizeof zv, &d), 0);
  EXPECT_FLOAT_EQ(zv[1], 1.f / (1.f + std::exp(2.f)));
  ASSERT_EQ(apx_exec_run(&ex, APX_SEC_OPTIMIZER, &d), 0) << d.msg;
  ASSERT_EQ(apx_exec_read(&ex, plan.outputs[1], wv, sizeof wv, &d), 0);
  EXPECT_FLOAT_EQ(wv[1], std::tanh(-2.f));
  apx_exec_free(&ex);
  apx_plan_free(&plan);
}

TEST(Exec, UnknownDeviceIsBadUsage) {
  Mlp m;
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&m.t.g, nullptr, &plan, &m.t.d), 0) << m.t.d.msg;
  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  cfg.device = "tpu";
  ApxExec ex;
  ApxDiag d;
  apx_diag_init(&d);
  EXPECT_EQ(apx_exec_init(&ex, &plan, &cfg, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(d.msg).find("unknown device 'tpu'"), std::string::npos) << d.msg;
  apx_plan_free(&plan);
}
