// emit_plan_test.cc - graph -> plan: buffers, kernels (static inputs dropped), decisions with
// casts, buckets, inputs/outputs/loss and memory summary survive a write/read round trip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "passes/precision_rules.h"
#include "passes/memplan.h"
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
    apx_graph_init(&g, "model.onnx");
    apx_diag_init(&d);
    d.quiet = 1;
  }
  ~G() { apx_graph_free(&g); }
  int value(const char *name, ApxValueKind kind, std::vector<int64_t> dims, ApxDType dt = APX_DT_F32) {
    int v = apx_graph_add_value(&g, &d, name, kind, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    if (kind != APX_VAL_ACTIVATION && kind != APX_VAL_INPUT) {
      int64_t b = apx_value_bytes(&g.vals[v]);
      uint8_t *p = (uint8_t *)apx_arena_alloc(&g.arena, (size_t)b + 1);
      for (int64_t i = 0; i < b; i++) p[i] = (uint8_t)(i * 13 + v);
      g.vals[v].data = p;
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
  void finish(std::vector<int> outs, int loss) {
    g.inputs = ids(ins);
    g.n_inputs = (int32_t)ins.size();
    g.outputs = ids(outs);
    g.n_outputs = (int32_t)outs.size();
    for (int v : outs) g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
    g.loss = loss;
    if (loss >= 0) g.vals[loss].flags |= APX_VALF_LOSS;
    ASSERT_EQ(apx_graph_toposort(&g, &d), 0) << d.msg;
    ASSERT_EQ(apx_graph_verify(&g, &d), 0) << d.msg;
  }
};

// x[4,8] -Cast(fp16)-> xh; W fp16; MatMul -> h; Relu; Reshape(static shape) -> r;
// ReduceMean -> loss; backward-ish grad + Allreduce bucket.
struct Model {
  G t;
  int x, xh, w, h, a, shape, r, loss, gw, bias;
  int n_cast, n_mm;
  Model() {
    x = t.value("x", APX_VAL_INPUT, {4, 8});
    w = t.value("W", APX_VAL_PARAM, {8, 8}, APX_DT_F16);
    bias = t.value("bias", APX_VAL_CONST, {8}, APX_DT_F16);
    shape = t.value("shape", APX_VAL_CONST, {1}, APX_DT_I64);
    xh = t.value("x_fp16", APX_VAL_ACTIVATION, {4, 8}, APX_DT_F16);
    h = t.value("h", APX_VAL_ACTIVATION, {4, 8}, APX_DT_F16);
    a = t.value("a", APX_VAL_ACTIVATION, {4, 8}, APX_DT_F16);
    r = t.value("r", APX_VAL_ACTIVATION, {32}, APX_DT_F16);
    loss = t.value("loss", APX_VAL_ACTIVATION, {});
    gw = t.value("W_grad", APX_VAL_ACTIVATION, {8, 8}, APX_DT_F16);
    t.g.vals[gw].flags |= APX_VALF_GRAD;
    t.g.vals[gw].origin = w;
    n_cast = t.node(APX_OP_Cast, {x}, {xh}, "Cast_x");
    APX_NODE_ATTRS(&t.g, n_cast, ApxAttrCast)->to = APX_DT_F16;
    n_mm = t.node(APX_OP_Gemm, {xh, w, bias}, {h}, "gemm");
    ApxAttrGemm *ga = APX_NODE_ATTRS(&t.g, n_mm, ApxAttrGemm);
    ga->alpha = 2.f;
    ga->beta = 1.f;
    t.g.nodes[n_mm].compute = APX_DT_F16;
    t.g.nodes[n_mm].reason = APX_REASON_LIST_HALF;
    t.g.nodes[n_mm].reason_detail = "Gemm is on the half list";
    t.g.nodes[n_cast].origin = n_mm;  // cast_insert's convention: origin = first user
    t.g.nodes[n_cast].compute = APX_DT_F16;
    t.node(APX_OP_Relu, {h}, {a}, "relu");
    t.node(APX_OP_Reshape, {a, shape}, {r}, "flat");
    int nr = t.node(APX_OP_ReduceMean, {r, -1}, {loss}, "mean");
    t.g.nodes[nr].compute = APX_DT_F32;
    int ng = t.node(APX_OP_FusedMatMul, {xh, a}, {gw}, "gemm_grad", APX_SEC_BACKWARD);
    *APX_NODE_ATTRS(&t.g, ng, ApxAttrFusedMatMul) = ApxAttrFusedMatMul{1, 0, 1.0f};  // xh^T a
    int ar = t.node(APX_OP_Allreduce, {gw}, {}, "bucket0", APX_SEC_BACKWARD);
    APX_NODE_ATTRS(&t.g, ar, ApxAttrAllreduce)->bucket = 0;
    t.finish({loss, a}, loss);
  }
};

}  // namespace

TEST(EmitPlan, GraphBecomesAPlanThatRoundTrips) {
  Model m;
  ApxGraph &g = m.t.g;
  ApxDiag &d = m.t.d;
  ASSERT_EQ(pass_memplan(&g, nullptr, &d), 0) << d.msg;
  ApxOptions o;
  apx_options_init(&o);
  o.opt_level = APX_O2;
  o.half = APX_DT_F16;
  o.lr = 0.5f;
  std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/emit.apx";
  ASSERT_EQ(apx_emit_plan_file(&g, &o, path.c_str(), &d), 0) << d.msg;
  ApxPlan p;
  apx_plan_init(&p);
  ASSERT_EQ(apx_plan_read(&p, path.c_str(), &d), 0) << d.msg;

  // one buffer per runtime value; the static shape operand has none
  EXPECT_EQ(apx_plan_find_buffer(&p, "shape"), -1);
  int nrt = 0;
  for (int v = 0; v < g.n_vals; v++) nrt += g.vals[v].mem_region != APX_MEM_NONE;
  EXPECT_EQ(p.n_bufs, nrt);
  for (int v = 0; v < g.n_vals; v++) {
    if (g.vals[v].mem_region == APX_MEM_NONE) continue;
    int b = apx_plan_find_buffer(&p, g.vals[v].name);
    ASSERT_GE(b, 0) << g.vals[v].name;
    EXPECT_EQ(p.bufs[b].offset, g.vals[v].mem_offset);
    EXPECT_EQ((int)p.bufs[b].region, g.vals[v].mem_region);
    EXPECT_EQ(p.bufs[b].bytes, apx_value_bytes(&g.vals[v]));
    EXPECT_EQ(p.bufs[b].dtype, g.vals[v].dtype);
    EXPECT_EQ(p.bufs[b].kind, g.vals[v].kind);
    if (g.vals[v].mem_alias >= 0) {
      EXPECT_STREQ(p.bufs[p.bufs[b].alias_of].name, g.vals[g.vals[v].mem_alias].name);
    }
    if (g.vals[v].data) {
      ASSERT_NE(p.bufs[b].data, nullptr);
      EXPECT_EQ(0, memcmp(p.bufs[b].data, g.vals[v].data, p.bufs[b].bytes));
    }
  }
  int bw = apx_plan_find_buffer(&p, "W"), bg = apx_plan_find_buffer(&p, "W_grad");
  EXPECT_EQ(p.bufs[bg].origin, bw);
  EXPECT_TRUE(p.bufs[bg].flags & APX_VALF_GRAD);
  EXPECT_EQ(p.bufs[apx_plan_find_buffer(&p, "r")].alias_of, apx_plan_find_buffer(&p, "a"));

  // kernels in schedule order with attributes; static input -> -1
  ASSERT_EQ(p.n_kernels, g.n_order);
  for (int k = 0; k < p.n_kernels; k++) {
    const ApxNode *n = &g.nodes[g.order[k]];
    EXPECT_STREQ(p.kernels[k].node, n->name);
    EXPECT_EQ(p.kernels[k].op, n->op);
    EXPECT_EQ(p.kernels[k].section, n->section);
    EXPECT_EQ(0, memcmp(p.kernels[k].attrs, n->typed, apx_op_info(n->op)->attrs_size));
  }
  int kflat = -1;
  for (int k = 0; k < p.n_kernels; k++)
    if (!strcmp(p.kernels[k].node, "flat")) kflat = k;
  ASSERT_GE(kflat, 0);
  EXPECT_EQ(p.kernels[kflat].in[1], -1);
  EXPECT_EQ(p.sec_end[APX_SEC_FORWARD], 5);
  EXPECT_EQ(p.sec_end[APX_SEC_BACKWARD], 7);

  // decisions: gemm (1 cast made for it), Cast_x, mean
  ASSERT_EQ(p.n_decisions, 3);
  bool seen = false;
  for (int i = 0; i < p.n_decisions; i++)
    if (!strcmp(p.decisions[i].node, "gemm")) {
      seen = true;
      EXPECT_EQ(p.decisions[i].casts_added, 1);
      EXPECT_EQ(p.decisions[i].decision, APX_DT_F16);
      EXPECT_EQ(p.decisions[i].rule_code, APX_REASON_LIST_HALF);
      EXPECT_STREQ(p.decisions[i].rule, apx_reason_id(APX_REASON_LIST_HALF));
      EXPECT_STREQ(p.decisions[i].detail, "Gemm is on the half list");
    }
  EXPECT_TRUE(seen);

  // bucket from the Allreduce node
  ASSERT_EQ(p.n_buckets, 1);
  EXPECT_EQ(p.buckets[0].n_members, 1);
  EXPECT_EQ(p.buckets[0].members[0], bg);
  EXPECT_EQ(p.buckets[0].bytes, 8 * 8 * 2);
  EXPECT_EQ(p.buckets[0].dtype, APX_DT_F16);
  EXPECT_STREQ(p.kernels[p.buckets[0].ready_at].node, "gemm_grad");

  ASSERT_EQ(p.n_inputs, 1);
  EXPECT_STREQ(p.bufs[p.inputs[0]].name, "x");
  ASSERT_EQ(p.n_outputs, 2);
  EXPECT_STREQ(p.bufs[p.outputs[0]].name, "loss");
  EXPECT_STREQ(p.bufs[p.outputs[1]].name, "a");
  EXPECT_STREQ(p.bufs[p.loss].name, "loss");
  EXPECT_EQ(p.mem.arena_bytes, g.arena_bytes);
  EXPECT_EQ(p.mem.peak_live_bytes, g.peak_live_bytes);
  EXPECT_EQ(p.mem.no_reuse_bytes, g.no_reuse_bytes);
  EXPECT_EQ(p.mem.persistent_bytes, g.persistent_bytes);
  EXPECT_EQ(p.opts.opt_level, 2);
  EXPECT_EQ(p.opts.lr, 0.5f);
  EXPECT_STREQ(p.model_name, "model.onnx");
  apx_plan_free(&p);
}

// With the arena packing left on a thread (ApxOptions.memplan_background, apexc's way) the
// plan file is byte for byte the one made after a finished memory plan, and building it
// settles the graph.
TEST(EmitPlan, PackingBesidePlanBuildingWritesTheSameFile) {
  std::string dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  std::string files[2] = {dir + "/sync.apx", dir + "/background.apx"};
  for (int background = 0; background < 2; background++) {
    Model m;
    ApxOptions o;
    apx_options_init(&o);
    o.memplan_background = background;
    ASSERT_EQ(pass_memplan(&m.t.g, &o, &m.t.d), 0) << m.t.d.msg;
    EXPECT_EQ(m.t.g.settle_fn != nullptr, background == 1);
    ASSERT_EQ(apx_emit_plan_file(&m.t.g, &o, files[background].c_str(), &m.t.d), 0) << m.t.d.msg;
    EXPECT_TRUE(m.t.g.settle_fn == nullptr);
    EXPECT_GT(m.t.g.arena_bytes, 0);
  }
  std::string bytes[2];
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i].c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes[i].append(buf, n);
    fclose(f);
  }
  EXPECT_GT(bytes[0].size(), 0u);
  EXPECT_TRUE(bytes[0] == bytes[1]) << bytes[0].size() << " vs " << bytes[1].size() << " bytes";
}

TEST(EmitPlan, RefusesAGraphWithoutMemoryPlan) {
  Model m;
  ApxPlan p;
  apx_plan_init(&p);
  EXPECT_EQ(apx_plan_from_graph(&m.t.g, nullptr, &p, &m.t.d), -1);
  EXPECT_NE(std::string(m.t.d.msg).find("memplan"), std::string::npos) << m.t.d.msg;
  apx_plan_free(&p);
}

TEST(EmitPlan, UnfoldedCompileTimeOpIsNamed) {
  G t;
  int x = t.value("x", APX_VAL_INPUT, {2, 3});
  int s = t.value("s", APX_VAL_ACTIVATION, {2}, APX_DT_I64);
  t.node(APX_OP_Shape, {x}, {s}, "shape_of_x");
  t.finish({s}, -1);
  ASSERT_EQ(pass_memplan(&t.g, nullptr, &t.d), 0) << t.d.msg;
  ApxPlan p;
  apx_plan_init(&p);
  EXPECT_EQ(apx_plan_from_graph(&t.g, nullptr, &p, &t.d), -1);
  EXPECT_NE(std::string(t.d.msg).find("node 'shape_of_x' (Shape)"), std::string::npos) << t.d.msg;
  apx_plan_free(&p);
}

// A half parameter marked APX_VALF_DATA_FROM_MASTER has no bytes in the graph: the plan
// derives it from an fp32 master (init_from), or holds its master's bytes converted when the
// plan cannot derive them (an fp64 master).
TEST(EmitPlan, HalfParameterWithoutBytesIsMadeFromItsMaster) {
  for (ApxDType mdt : {APX_DT_F32, APX_DT_F64}) {
    Model m;
    ApxGraph &g = m.t.g;
    ApxDiag &d = m.t.d;
    int master = m.t.value("W_fp32_master", APX_VAL_STATE, {8, 8}, mdt);
    g.vals[master].flags |= APX_VALF_MASTER;
    g.vals[master].origin = m.w;
    for (int i = 0; i < 64; i++) {
      double x = (i - 32) * 0.37;
      if (mdt == APX_DT_F32) ((float *)g.vals[master].data)[i] = (float)x;
      else ((double *)g.vals[master].data)[i] = x;
    }
    // the master is read by the optimizer in a real plan: here by a state assignment
    int assign = m.t.node(APX_OP_AssignState, {m.w, master}, {}, "refresh", APX_SEC_OPTIMIZER);
    (void)assign;
    g.vals[m.w].data = nullptr;
    g.vals[m.w].flags |= APX_VALF_DATA_FROM_MASTER;
    ASSERT_EQ(apx_graph_toposort(&g, &d), 0) << d.msg;
    ASSERT_EQ(apx_graph_verify(&g, &d), 0) << d.msg;
    ASSERT_EQ(pass_memplan(&g, nullptr, &d), 0) << d.msg;
    ApxPlan p;
    apx_plan_init(&p);
    ASSERT_EQ(apx_plan_from_graph(&g, nullptr, &p, &d), 0) << d.msg;
    int b = apx_plan_find_buffer(&p, "W"), mb = apx_plan_find_buffer(&p, "W_fp32_master");
    ASSERT_GE(b, 0);
    ASSERT_GE(mb, 0);
    std::vector<uint16_t> want(64);
    ASSERT_EQ(apx_convert_floats(g.vals[master].data, mdt, want.data(), APX_DT_F16, 64), 0);
    if (mdt == APX_DT_F32) {
      EXPECT_EQ(p.bufs[b].init_from, mb);
      EXPECT_EQ(p.bufs[b].data, nullptr);
    } else {
      EXPECT_EQ(p.bufs[b].init_from, -1);
      ASSERT_NE(p.bufs[b].data, nullptr);
      EXPECT_EQ(memcmp(p.bufs[b].data, want.data(), 128), 0);
    }
    apx_plan_free(&p);
  }
}
