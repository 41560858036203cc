// bucketing_test.cc - pass_bucketing: gradient buckets in the order gradients become ready,
// one dtype per bucket, a small first bucket, one Allreduce per bucket right after its last
// member's producer, UnscaleCheck reading the reduced gradients (passes/bucketing.h).
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "compiler/explain.h"
#include "compiler/json.h"
#include "compiler/pipeline.h"
#include "passes/autodiff.h"
#include "passes/bucketing.h"
#include "passes/memplan.h"
#include "passes/optimizer.h"
#include "plan/plan.h"
#include "tests/testing/graph_eval.h"
}
#include "tests/testing/graph_builder.h"

namespace {

using apx_testing::Attr;
using apx_testing::GraphBuilder;

constexpr double kMiB = 1024.0 * 1024.0;

// A 4-layer perceptron in fp32: layer k has weight w<k> [256, 256] (256 KiB) and bias b<k>
// [256] (1 KiB). Backward produces the last layer's gradients first.
struct Mlp : GraphBuilder {
  std::vector<int> w, b;
  explicit Mlp(int layers = 4) {
    int x = Input("x", {8, 256}, APX_DT_F32);
    int h = x;
    for (int k = 0; k < layers; k++) {
      w.push_back(Param("w" + std::to_string(k), {256, 256}, -0.1, 0.1, 0, APX_DT_F32));
      b.push_back(Param("b" + std::to_string(k), {256}, -0.1, 0.1, 0, APX_DT_F32));
      h = Op("Add", {Op("MatMul", {h, w.back()}), b.back()});
      if (k + 1 < layers) h = Op("Relu", {h});
    }
    WeightedSumLoss(h);
    SortAndVerify();
    EXPECT_GE(RunPass(pass_autodiff), APX_PASS_CHANGED) << d.msg;
    EXPECT_GE(RunPass(pass_optimizer), APX_PASS_CHANGED) << d.msg;
  }
  int Pos(int node) const {
    for (int t = 0; t < g.n_order; t++)
      if (g.order[t] == node) return t;
    return -1;
  }
  std::vector<ApxBucketInfo> Buckets() const {
    int n = apx_buckets_collect(&g, nullptr, 0);
    std::vector<ApxBucketInfo> v((size_t)n);
    apx_buckets_collect(&g, v.data(), n);
    return v;
  }
  // The parameter whose gradient (or reduced gradient) value v is.
  std::string ParamOf(int v) const {
    int o = g.vals[v].origin;
    return o >= 0 ? g.vals[o].name : "?";
  }
};

TEST(Bucketing, BucketsFollowGradientReadyOrder) {
  Mlp m;
  m.o.bucket_mb = m.o.first_bucket_mb = 1e-6;  // every gradient is a bucket of its own
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  auto bs = m.Buckets();
  ASSERT_EQ(bs.size(), 8u);
  int last_ready = -1;
  for (size_t i = 0; i < bs.size(); i++) {
    EXPECT_EQ(bs[i].id, (int)i) << "ids number the buckets in launch order";
    EXPECT_EQ(bs[i].n_members, 1);
    EXPECT_GE(bs[i].ready_at, last_ready) << "bucket " << i << " is ready before bucket " << i - 1;
    last_ready = bs[i].ready_at;
  }
  // the last layer's gradients are ready first, the first layer's last
  std::set<std::string> first2 = {m.ParamOf(m.g.nodes[bs[0].node].in[0]), m.ParamOf(m.g.nodes[bs[1].node].in[0])};
  EXPECT_EQ(first2, (std::set<std::string>{"w3", "b3"}));
  std::set<std::string> last2 = {m.ParamOf(m.g.nodes[bs[6].node].in[0]), m.ParamOf(m.g.nodes[bs[7].node].in[0])};
  EXPECT_EQ(last2, (std::set<std::string>{"w0", "b0"}));
}

TEST(Bucketing, FirstBucketIsSmall) {
  Mlp m;
  m.o.first_bucket_mb = 0.3;  // one 256 KiB weight + biases
  m.o.bucket_mb = 1.0;        // three weights + biases
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  auto bs = m.Buckets();
  ASSERT_EQ(bs.size(), 2u);
  EXPECT_LE(bs[0].bytes, 0.3 * kMiB);
  EXPECT_GT(bs[0].bytes, 256 * 1024);  // w3 and b3
  EXPECT_LE(bs[1].bytes, 1.0 * kMiB);
  EXPECT_EQ(bs[0].n_members + bs[1].n_members, 8);
  EXPECT_EQ(bs[0].bytes + bs[1].bytes, 4 * (256 * 256 * 4 + 256 * 4));
}

TEST(Bucketing, CapHoldsAndALargerTensorGetsItsOwnBucket) {
  Mlp m;
  m.o.first_bucket_mb = 0.1;  // smaller than one weight: the weight gets a bucket alone
  m.o.bucket_mb = 0.6;        // two weights per bucket at most
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  for (const auto &b : m.Buckets()) {
    if (b.n_members == 1) continue;
    EXPECT_LE(b.bytes, (b.id == 0 ? 0.1 : 0.6) * kMiB) << "bucket " << b.id;
  }
  auto bs = m.Buckets();
  int64_t total = 0;
  for (const auto &b : bs) total += b.bytes;
  EXPECT_EQ(total, 4 * (256 * 256 * 4 + 256 * 4));
  EXPECT_GE(bs.size(), 3u);  // 1.03 MB under a 0.1 MiB first bucket and 0.6 MiB buckets
}

TEST(Bucketing, AllreduceRightAfterItsLastMembersProducer) {
  Mlp m;
  m.o.bucket_mb = m.o.first_bucket_mb = 1e-6;
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  for (const auto &b : m.Buckets()) {
    EXPECT_EQ(m.g.nodes[b.node].section, APX_SEC_BACKWARD);
    EXPECT_GT(b.launch_at, b.ready_at);
    // only other eager nodes (buckets ready at the same kernel) may come in between
    for (int t = b.ready_at + 1; t < b.launch_at; t++)
      EXPECT_TRUE(m.g.nodes[m.g.order[t]].flags & APX_NODEF_EAGER)
          << "node '" << m.g.nodes[m.g.order[t]].name << "' delays bucket " << b.id;
  }
  // the first bucket is launched while most of backward is still to run
  auto bs = m.Buckets();
  EXPECT_GT(bs[0].overlap, bs.back().overlap);
  EXPECT_GT(bs[0].overlap, 5);
}

// A parameter added without broadcasting has the same gradient value as the activation it is
// added to: that value also feeds the rest of backward (here the first weight's gradient).
// Only the optimizer may read the reduced gradient; backward keeps the local one (reading the
// reduced one would be wrong under data parallelism and, at O0/O1, a cycle).
TEST(Bucketing, SharedActivationGradientStaysLocalInBackward) {
  for (int accumulate : {1, 2}) {
    GraphBuilder b;
    int x = b.Input("x", {8, 16}, APX_DT_F32);
    int w0 = b.Param("w0", {16, 16}, -0.5, 0.5, 0, APX_DT_F32);
    int p = b.Param("p", {8, 16}, -0.5, 0.5, 0, APX_DT_F32);  // same shape as x @ w0
    int w1 = b.Param("w1", {16, 4}, -0.5, 0.5, 0, APX_DT_F32);
    int h = b.Op("Relu", {b.Op("Add", {b.Op("MatMul", {x, w0}), p})});
    b.WeightedSumLoss(b.Op("MatMul", {h, w1}));
    ASSERT_TRUE(b.SortAndVerify());
    b.o.accumulate = accumulate;
    ASSERT_GE(b.RunPass(pass_autodiff), APX_PASS_CHANGED) << b.d.msg;
    ASSERT_GE(b.RunPass(pass_optimizer), APX_PASS_CHANGED) << b.d.msg;
    b.o.bucket_mb = b.o.first_bucket_mb = 1e-6;
    ASSERT_EQ(b.RunPass(pass_bucketing), APX_PASS_CHANGED) << "accumulate " << accumulate << ": " << b.d.msg;
    ASSERT_EQ(apx_graph_verify(&b.g, &b.d), 0) << b.d.msg;
    int reduced_reads = 0;
    for (int i = 0; i < b.g.n_nodes; i++) {
      const ApxNode &n = b.g.nodes[i];
      if ((n.flags & APX_NODEF_DEAD) || n.op == APX_OP_Allreduce) continue;
      for (int k = 0; k < n.n_in; k++) {
        int v = n.in[k];
        if (v < 0 || b.g.vals[v].producer < 0 || b.g.nodes[b.g.vals[v].producer].op != APX_OP_Allreduce) continue;
        EXPECT_EQ(n.section, APX_SEC_OPTIMIZER) << "node '" << n.name << "' reads reduced gradient '" << b.g.vals[v].name << "'";
        reduced_reads++;
      }
    }
    EXPECT_GE(reduced_reads, 3) << "UnscaleCheck reads the three reduced gradients";
  }
}

TEST(Bucketing, AllreduceBeforeUnscaleCheck) {
  Mlp m;
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  int uc = m.NodeByOp(APX_OP_UnscaleCheck);
  ASSERT_GE(uc, 0);
  const ApxNode &u = m.g.nodes[uc];
  ASSERT_EQ(u.n_in, 1 + 8);
  std::set<std::string> params;
  for (int i = 1; i < u.n_in; i++) {
    int v = u.in[i];
    int p = m.g.vals[v].producer;
    ASSERT_GE(p, 0);
    EXPECT_EQ(m.g.nodes[p].op, APX_OP_Allreduce) << "UnscaleCheck input " << i << " is not reduced";
    EXPECT_LT(m.Pos(p), m.Pos(uc));
    EXPECT_TRUE(m.g.vals[v].flags & APX_VALF_GRAD);
    params.insert(m.ParamOf(v));  // first_bad still names the parameter
  }
  EXPECT_EQ(params.size(), 8u);
  EXPECT_TRUE(params.count("w0") && params.count("b3"));
}

TEST(Bucketing, AttributesCarryTheOptions) {
  Mlp m;
  m.o.grad_predivide = 4.0f;
  m.o.allreduce_fp32 = 1;  // fp32 gradients: nothing to convert
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  EXPECT_EQ(m.CountOp(APX_OP_Cast), 0);
  for (const auto &b : m.Buckets()) {
    const ApxAttrAllreduce *a = APX_NODE_ATTRS(&m.g, b.node, ApxAttrAllreduce);
    EXPECT_EQ(a->bucket, b.id);
    EXPECT_FLOAT_EQ(a->predivide, 4.0f);
    EXPECT_EQ(a->fp32, 1);
    EXPECT_EQ(a->average, 1);
    EXPECT_EQ(b.dtype, APX_DT_F32);
  }
}

TEST(Bucketing, ReducedInPlaceByTheMemoryPlan) {
  Mlp m;
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED) << m.d.msg;
  ASSERT_EQ(m.RunPass(pass_memplan), APX_PASS_UNCHANGED) << m.d.msg;
  for (const auto &b : m.Buckets()) {
    const ApxNode &n = m.g.nodes[b.node];
    for (int k = 0; k < n.n_in; k++) {
      const ApxValue &in = m.g.vals[n.in[k]], &out = m.g.vals[n.out[k]];
      EXPECT_EQ(out.mem_region, in.mem_region);
      EXPECT_EQ(out.mem_offset, in.mem_offset) << out.name << " is not reduced in place";
    }
  }
}

TEST(Bucketing, AccumulationReducesOncePerOptimizerStep) {
  GraphBuilder gb;
  gb.o.accumulate = 2;
  int x = gb.Input("x", {4, 3}, APX_DT_F32);
  int w = gb.Param("w", {3, 2}, -1, 1, 0, APX_DT_F32);
  gb.WeightedSumLoss(gb.Op("MatMul", {x, w}));
  gb.SortAndVerify();
  ASSERT_GE(gb.RunPass(pass_autodiff), APX_PASS_CHANGED) << gb.d.msg;
  ASSERT_GE(gb.RunPass(pass_optimizer), APX_PASS_CHANGED) << gb.d.msg;
  ASSERT_EQ(gb.RunPass(pass_bucketing), APX_PASS_CHANGED) << gb.d.msg;
  int ar = gb.NodeByOp(APX_OP_Allreduce);
  ASSERT_GE(ar, 0);
  EXPECT_EQ(gb.g.nodes[ar].section, APX_SEC_OPTIMIZER);
  int sum = gb.g.nodes[ar].in[0];
  // the accumulator update in BACKWARD keeps the unreduced sum
  bool found = false;
  for (int i = 0; i < gb.g.n_nodes; i++) {
    const ApxNode &n = gb.g.nodes[i];
    if (n.op == APX_OP_AssignState && n.section == APX_SEC_BACKWARD) {
      EXPECT_EQ(n.in[0], sum);
      found = true;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(gb.g.nodes[gb.NodeByOp(APX_OP_UnscaleCheck)].in[1], gb.g.nodes[ar].out[0]);
}

TEST(Bucketing, UnchangedWithoutTrainingAndWhenRunTwice) {
  GraphBuilder gb;
  int x = gb.Input("x", {4, 3}, APX_DT_F32);
  int w = gb.Param("w", {3, 2}, -1, 1, 0, APX_DT_F32);
  gb.WeightedSumLoss(gb.Op("MatMul", {x, w}));
  gb.SortAndVerify();
  EXPECT_EQ(gb.RunPass(pass_bucketing), APX_PASS_UNCHANGED);  // no UnscaleCheck
  Mlp m;
  ASSERT_EQ(m.RunPass(pass_bucketing), APX_PASS_CHANGED);
  int n = m.CountOp(APX_OP_Allreduce);
  EXPECT_EQ(m.RunPass(pass_bucketing), APX_PASS_UNCHANGED);
  EXPECT_EQ(m.CountOp(APX_OP_Allreduce), n);
}

// ---- the example models through the whole pipeline --------------------------------------

struct Compiled {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  bool ok = false;
  Compiled(const char *model, ApxOptLevel lvl, void (*tweak)(ApxOptions *) = nullptr) {
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    o.model_path = model;
    o.opt_level = lvl;
    o.verify_each_pass = 1;
    if (tweak) tweak(&o);
    char err[256];
    EXPECT_EQ(apx_options_apply_preset(&o, err, sizeof err), 0) << err;
    ok = apx_compile_file(&g, &o, &d) == 0;
    EXPECT_TRUE(ok) << d.msg;
  }
  ~Compiled() { apx_graph_free(&g); }
  std::vector<ApxBucketInfo> Buckets() const {
    int n = apx_buckets_collect(&g, nullptr, 0);
    std::vector<ApxBucketInfo> v((size_t)n);
    apx_buckets_collect(&g, v.data(), n);
    return v;
  }
};

// At O2 with keep_batchnorm_fp32 the CNN's convolution and dense gradients are fp16 and the
// BatchNorm parameters' gradients fp32: buckets never mix them.
TEST(Bucketing, OneDtypePerBucket) {
  Compiled c("examples/cnn/model.onnx", APX_O2);
  ASSERT_TRUE(c.ok);
  std::set<ApxDType> seen;
  int members = 0;
  for (const auto &b : c.Buckets()) {
    const ApxNode &n = c.g.nodes[b.node];
    for (int k = 0; k < n.n_in; k++) {
      EXPECT_EQ(c.g.vals[n.in[k]].dtype, b.dtype) << "bucket " << b.id << " mixes dtypes";
      members++;
    }
    seen.insert(b.dtype);
  }
  EXPECT_EQ(seen, (std::set<ApxDType>{APX_DT_F16, APX_DT_F32}));
  EXPECT_EQ(members, 10);  // every trainable parameter of the CNN
}

TEST(Bucketing, AllreduceFp32ConvertsHalfGradients) {
  Compiled c("examples/cnn/model.onnx", APX_O2, [](ApxOptions *o) { o->allreduce_fp32 = 1; });
  ASSERT_TRUE(c.ok);
  for (const auto &b : c.Buckets()) EXPECT_EQ(b.dtype, APX_DT_F32) << "bucket " << b.id;
  int casts = 0;
  for (int i = 0; i < c.g.n_nodes; i++) {
    const ApxNode &n = c.g.nodes[i];
    if (n.op == APX_OP_Cast && (n.flags & APX_NODEF_EAGER)) {
      casts++;
      EXPECT_EQ(c.g.vals[n.in[0]].dtype, APX_DT_F16);
    }
  }
  EXPECT_EQ(casts, 6);  // conv1/conv2/fc weight and bias gradients are fp16 at O2
}

// O1 keeps the weights fp32 and casts them per step: the gradient of each weight is fp32
// (the Cast's backward widens, as in Apex and torch AMP), so every bucket is fp32 without
// --allreduce-fp32 and no bucket-side Cast is needed; the half matrix products still write
// half gradients, widened once by a Cast per parameter.
TEST(Bucketing, O1GradientsAndBucketsAreFp32) {
  for (const char *model : {"examples/mlp/model.onnx", "examples/cnn/model.onnx", "examples/transformer/model.onnx"}) {
    Compiled c(model, APX_O1);
    ASSERT_TRUE(c.ok) << model;
    auto bs = c.Buckets();
    ASSERT_GE(bs.size(), 1u) << model;
    int members = 0, widened = 0;
    for (const auto &b : bs) {
      EXPECT_EQ(b.dtype, APX_DT_F32) << model << " bucket " << b.id;
      const ApxNode &n = c.g.nodes[b.node];
      for (int k = 0; k < n.n_in; k++) {
        int v = n.in[k], p = c.g.vals[v].producer;
        EXPECT_EQ(c.g.vals[v].dtype, APX_DT_F32) << model << " " << c.g.vals[v].name;
        EXPECT_FALSE(p >= 0 && (c.g.nodes[p].flags & APX_NODEF_EAGER)) << "no --allreduce-fp32 Cast at O1";
        widened += p >= 0 && c.g.nodes[p].op == APX_OP_Cast && c.g.vals[c.g.nodes[p].in[0]].dtype == APX_DT_F16;
        members++;
      }
    }
    EXPECT_GT(widened, 0) << model << ": the half products' gradients are widened by a Cast";
    for (int v = 0; v < c.g.n_vals; v++) {
      if (c.g.vals[v].kind != APX_VAL_PARAM || c.g.vals[v].grad < 0) continue;
      EXPECT_EQ(c.g.vals[c.g.vals[v].grad].dtype, APX_DT_F32) << model << " grad of " << c.g.vals[v].name;
    }
    EXPECT_GT(members, 0);
  }
}

// --accumulate at O1: the accumulators, their sums and the buckets are fp32.
TEST(Bucketing, O1AccumulationIsFp32) {
  Compiled c("examples/mlp/model.onnx", APX_O1, [](ApxOptions *o) { o->accumulate = 4; });
  ASSERT_TRUE(c.ok);
  for (const auto &b : c.Buckets()) EXPECT_EQ(b.dtype, APX_DT_F32) << "bucket " << b.id;
  int acc = 0;
  for (int v = 0; v < c.g.n_vals; v++)
    if (!strncmp(c.g.vals[v].name, "gradacc/", 8)) {
      acc++;
      EXPECT_EQ(c.g.vals[v].dtype, APX_DT_F32) << c.g.vals[v].name;
    }
  EXPECT_EQ(acc, 6);
}

// At O2/O3 a weight stored in half keeps a half gradient: its bucket is half unless
// --allreduce-fp32 (AllreduceFp32ConvertsHalfGradients).
TEST(Bucketing, HalfWeightsKeepHalfGradientsAtO2AndO3) {
  for (ApxOptLevel lvl : {APX_O2, APX_O3}) {
    Compiled c("examples/mlp/model.onnx", lvl);
    ASSERT_TRUE(c.ok);
    for (const auto &b : c.Buckets()) EXPECT_EQ(b.dtype, APX_DT_F16) << "O" << (int)lvl << " bucket " << b.id;
  }
}

// The plan carries one bucket per Allreduce, ready after the last member's producer kernel.
TEST(Bucketing, PlanBucketsMatchTheGraph) {
  Compiled c("examples/mlp/model.onnx", APX_O2);
  ASSERT_TRUE(c.ok);
  ApxPlan p;
  apx_plan_init(&p);
  ASSERT_EQ(apx_plan_from_graph(&c.g, &c.o, &p, &c.d), 0) << c.d.msg << " arena " << c.g.arena_bytes << " peak " << c.g.peak_live_bytes;
  auto bs = c.Buckets();
  ASSERT_EQ(p.n_buckets, (int)bs.size());
  ASSERT_GE(p.n_buckets, 1);
  for (int i = 0; i < p.n_buckets; i++) {
    EXPECT_EQ(p.buckets[i].id, bs[(size_t)i].id);
    EXPECT_EQ(p.buckets[i].ready_at, bs[(size_t)i].ready_at);
    EXPECT_EQ(p.buckets[i].bytes, bs[(size_t)i].bytes);
    EXPECT_EQ(p.kernels[bs[(size_t)i].launch_at].op, APX_OP_Allreduce);
    EXPECT_EQ(p.kernels[bs[(size_t)i].launch_at].section, APX_SEC_BACKWARD);
  }
  apx_plan_free(&p);
}

// With one process the buckets change nothing: three SGD steps with and without the pass
// give bit-identical weights.
TEST(Bucketing, OneProcessTrainsExactlyAsWithoutBuckets) {
  auto sgd = [](ApxOptions *o) {
    o->optimizer = APX_OPTIM_SGD;
    o->lr = 0.1f;
    o->momentum = 0.9f;
  };
  Compiled with("examples/mlp/model.onnx", APX_O2, sgd);
  Compiled without("examples/mlp/model.onnx", APX_O2, [](ApxOptions *o) {
    o->optimizer = APX_OPTIM_SGD;
    o->lr = 0.1f;
    o->momentum = 0.9f;
    o->disable_pass.items[o->disable_pass.n++] = "bucketing";
  });
  ASSERT_TRUE(with.ok && without.ok);
  ASSERT_GT(with.Buckets().size(), 0u);
  ASSERT_EQ(without.Buckets().size(), 0u);
  ApxEval a, b;
  ASSERT_EQ(apx_eval_init(&a, &with.g), 0) << a.err;
  ASSERT_EQ(apx_eval_init(&b, &without.g), 0) << b.err;
  for (ApxEval *e : {&a, &b}) {
    const ApxGraph *g = e->g;
    int x = apx_graph_find_value(g, "x"), labels = apx_graph_find_value(g, "labels");
    for (int64_t k = 0; k < apx_value_numel(&g->vals[x]); k++) apx_eval_set(e, x, k, std::sin(0.37 * (double)k));
    for (int64_t k = 0; k < apx_value_numel(&g->vals[labels]); k++) apx_eval_set(e, labels, k, (double)(k % 10));
    for (int step = 0; step < 3; step++) ASSERT_EQ(apx_eval_run(e, APX_EVAL_ALL), 0) << e->err;
  }
  int checked = 0;
  for (int v = 0; v < with.g.n_vals; v++) {
    const ApxValue &val = with.g.vals[v];
    if (val.kind != APX_VAL_PARAM && val.kind != APX_VAL_STATE) continue;
    int u = apx_graph_find_value(&without.g, val.name);
    ASSERT_GE(u, 0) << val.name;
    size_t bytes = (size_t)apx_value_bytes(&val);
    EXPECT_EQ(memcmp(apx_eval_buf(&a, v), apx_eval_buf(&b, u), bytes), 0) << val.name;
    checked++;
  }
  EXPECT_GT(checked, 6);
  apx_eval_free(&a);
  apx_eval_free(&b);
}

}  // namespace

namespace {

std::string Report(const ApxGraph *g, const ApxOptions *o, int json) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  apx_buckets_report_write(g, o, json, f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

// --bucket-report=json is valid JSON naming every bucket with its members, bytes and the
// kernel it is ready at; the text form lists the same buckets.
TEST(Bucketing, ReportListsBucketsMembersBytesAndReadyKernel) {
  Compiled c("examples/cnn/model.onnx", APX_O2, [](ApxOptions *o) { o->first_bucket_mb = 0.001; });
  ASSERT_TRUE(c.ok);
  auto bs = c.Buckets();
  ASSERT_GE(bs.size(), 2u);
  std::string js = Report(&c.g, &c.o, 1);
  ApxArena a;
  apx_arena_init(&a);
  char err[256];
  const ApxJson *root = apx_json_parse(&a, js.data(), js.size(), err, sizeof err);
  ASSERT_NE(root, nullptr) << err << "\n" << js;
  const ApxJson *arr = apx_json_get(root, "buckets");
  ASSERT_NE(arr, nullptr);
  ASSERT_EQ(arr->n, (int)bs.size());
  int members = 0;
  for (int i = 0; i < arr->n; i++) {
    const ApxJson *b = &arr->items[i];
    EXPECT_EQ((int)apx_json_get(b, "id")->number, bs[(size_t)i].id);
    EXPECT_EQ((int64_t)apx_json_get(b, "bytes")->number, bs[(size_t)i].bytes);
    EXPECT_EQ((int)apx_json_get(b, "ready_at")->number, bs[(size_t)i].ready_at);
    const ApxJson *ms = apx_json_get(b, "members");
    ASSERT_NE(ms, nullptr);
    members += ms->n;
    for (int k = 0; k < ms->n; k++) EXPECT_EQ(apx_json_get(&ms->items[k], "param")->type, APX_JSON_STRING);
  }
  EXPECT_EQ(members, 10);
  apx_arena_free(&a);
  std::string txt = Report(&c.g, &c.o, 0);
  for (const auto &b : bs)
    EXPECT_NE(txt.find("bucket " + std::to_string(b.id) + " "), std::string::npos) << txt;
  EXPECT_NE(txt.find("param conv1.weight"), std::string::npos) << txt;
}

}  // namespace
