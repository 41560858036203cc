// exec_overlap_test.cc - the executor's overlapped gradient buckets (exec.h, DESIGN.md 11)
// without MPI: a fake collective layer on the cpu backend (world 2) whose reduction is "two
// identical replicas summed" (r = 2 m, in fp32, narrowed to nearest even) records when
// every bucket starts, is polled and is waited for, and a wrapper around the backend's
// launch checks that no kernel touches the bytes of a bucket still in flight. The MLP and
// the CNN with --sync-bn (whose BatchNorm statistics are reduced and read inside the same
// section) train a few steps with overlap and with no_overlap (the blocking slot, same
// math): parameters, states and losses agree bit for bit, kernels really ran while buckets
// were in flight, and no bucket outlives a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_plan.h"
#include "compiler/onnx_load.h"
#include "compiler/pipeline.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}
#include "tests/testing/compile_plan.h"

// The fake layer's request: the staged fp32 sums and the outputs to write at the wait.
struct ApxCollRequest {
  std::vector<ApxTensor> outs;
  std::vector<std::vector<float>> vals;
  bool polled_done = false;
};

namespace {

struct Fake {
  std::vector<ApxCollRequest *> live;
  int started = 0, waited = 0, polls = 0, blocking = 0, max_live = 0;
  std::vector<std::string> violations;
  ApxStatus (*launch)(ApxBackend *, ApxQueue *, const ApxKernelCall *) = nullptr;
};
Fake *g_fake = nullptr;

bool Overlaps(const ApxTensor &a, const ApxTensor &b) {
  if (!a.data || !b.data) return false;
  uintptr_t a0 = (uintptr_t)a.data, a1 = a0 + apx_tensor_bytes(&a);
  uintptr_t b0 = (uintptr_t)b.data, b1 = b0 + apx_tensor_bytes(&b);
  return a0 < b1 && b0 < a1;
}

void CheckUntouched(const ApxTensor *t, int32_t n, const char *who) {
  for (int32_t i = 0; i < n; i++)
    for (ApxCollRequest *r : g_fake->live)
      for (const ApxTensor &o : r->outs)
        if (Overlaps(t[i], o)) g_fake->violations.push_back(std::string(who) + " touches a bucket in flight");
}

std::vector<float> Stage(const ApxTensor &t) {
  std::vector<float> v((size_t)apx_tensor_numel(&t));
  EXPECT_EQ(apx_cpu_convert(t.data, t.dtype, v.data(), APX_DT_F32, (int64_t)v.size()), APX_STATUS_OK);
  for (float &x : v) x = x + x;  // two identical replicas summed
  return v;
}

void Unstage(const std::vector<float> &v, ApxTensor *t) {
  EXPECT_EQ(apx_cpu_convert(v.data(), APX_DT_F32, t->data, t->dtype, (int64_t)v.size()), APX_STATUS_OK);
}

ApxStatus FakeLaunch(ApxBackend *be, ApxQueue *q, const ApxKernelCall *c) {
  CheckUntouched(c->ins, c->n_in, c->node);
  CheckUntouched(c->outs, c->n_out, c->node);
  return g_fake->launch(be, q, c);
}

ApxStatus FakeStart(ApxBackend *be, ApxQueue *q, const ApxTensor *ins, const ApxTensor *outs, int32_t n,
                    const ApxAttrAllreduce *a, ApxCollRequest **req) {
  CheckUntouched(ins, n, "a bucket's inputs");
  CheckUntouched(outs, n, "a bucket's outputs");
  auto *r = new ApxCollRequest;
  for (int32_t i = 0; i < n; i++) {
    if (!ins[i].data) continue;
    r->outs.push_back(outs[i]);
    r->vals.push_back(Stage(ins[i]));
  }
  g_fake->live.push_back(r);
  g_fake->started++;
  g_fake->max_live = std::max(g_fake->max_live, (int)g_fake->live.size());
  *req = r;
  return APX_STATUS_OK;
}

ApxStatus FakeTest(ApxBackend *be, ApxCollRequest *r, int *done) {
  g_fake->polls++;
  *done = r->polled_done;
  r->polled_done = true;  // "completes" after one poll: the executor must still wait for it
  return APX_STATUS_OK;
}

ApxStatus FakeWait(ApxBackend *be, ApxQueue *q, ApxCollRequest *r) {
  auto &l = g_fake->live;
  auto it = std::find(l.begin(), l.end(), r);
  EXPECT_NE(it, l.end()) << "wait for a request not in flight";
  if (it != l.end()) l.erase(it);
  for (size_t i = 0; i < r->outs.size(); i++) Unstage(r->vals[i], &r->outs[i]);
  g_fake->waited++;
  delete r;
  return APX_STATUS_OK;
}

ApxStatus FakeBlocking(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, const ApxAttrAllreduce *a) {
  g_fake->blocking++;
  for (int32_t i = 0; i < n; i++)
    if (t[i].data) Unstage(Stage(t[i]), &t[i]);
  return APX_STATUS_OK;
}

struct Run {
  std::vector<std::vector<uint8_t>> bufs;  // every PARAM and STATE buffer after the steps
  std::vector<std::vector<uint8_t>> losses;
  std::vector<int32_t> overlapped;         // per step, backward run
  Fake fake;
};

// Compiles tests/fixtures/ort/<model> (small buckets), trains `steps` steps on the fake
// 2-rank layer with or without overlap.
void Train(const char *model, ApxOptLevel level, bool sync_bn, bool no_overlap, int steps, Run *out) {
  std::string dir = std::string("tests/fixtures/ort/") + model;
  ApxOptions o;
  apx_options_init(&o);
  std::string path = dir + "/model.onnx";
  o.model_path = path.c_str();
  o.opt_level = level;
  o.optimizer = APX_OPTIM_SGD;
  o.lr = 0.05f;
  o.lr_set = 1;
  o.bucket_mb = 0.01;
  o.first_bucket_mb = 0.01;
  o.sync_bn = sync_bn;
  o.quiet = 1;
  ApxDiag d;
  ApxGraph g;
  ApxPlan plan;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileToPlan(o, &g, &plan, &d, &err)) << err;
  int n_allreduce = 0;
  for (int32_t k = 0; k < plan.n_kernels; k++) n_allreduce += plan.kernels[k].op == APX_OP_Allreduce;
  ASSERT_GE(n_allreduce, 2);

  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  cfg.n_threads = 1;
  cfg.no_overlap = no_overlap;
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, &cfg, &d), 0) << d.msg;
  g_fake = &out->fake;
  ApxBackendI slots;
  memset(&slots, 0, sizeof slots);
  slots.allreduce_bucket = FakeBlocking;
  slots.allreduce_bucket_start = FakeStart;
  slots.request_test = FakeTest;
  slots.request_wait = FakeWait;
  apx_backend_set_collectives(ex.be, &slots, nullptr, nullptr, 0, 2);
  out->fake.launch = ex.be->iface.launch;
  ex.be->iface.launch = FakeLaunch;

  ApxArena a;
  apx_arena_init(&a);
  for (int i = 0; i < plan.n_inputs; i++) {
    std::string in = dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb";
    ApxTensorConst tc;
    const char *name = nullptr;
    ASSERT_EQ(apx_onnx_read_tensor_file(in.c_str(), &a, &tc, &name, &d), 0) << d.msg;
    ApxTensor t = {(void *)tc.data, tc.dtype, tc.rank, {0}};
    memcpy(t.dims, tc.dims, sizeof t.dims);
    ASSERT_EQ(apx_exec_set_input(&ex, i, &t, &d), 0) << d.msg;
  }
  for (int s = 0; s < steps; s++) {
    apx_exec_set_step(&ex, s);
    for (ApxSection sec : {APX_SEC_FORWARD, APX_SEC_BACKWARD, APX_SEC_OPTIMIZER}) {
      ASSERT_EQ(apx_exec_run(&ex, sec, &d), 0) << d.msg;
      EXPECT_TRUE(out->fake.live.empty()) << "a bucket outlived the run of section " << sec;
      if (sec == APX_SEC_BACKWARD) out->overlapped.push_back(ex.n_overlapped);
    }
    std::vector<uint8_t> l((size_t)plan.bufs[plan.loss].bytes);
    ASSERT_EQ(apx_exec_read(&ex, plan.loss, l.data(), l.size(), &d), 0) << d.msg;
    out->losses.push_back(l);
  }
  for (int32_t b = 0; b < plan.n_bufs; b++) {
    const ApxPlanBuffer *pb = &plan.bufs[b];
    if (pb->kind != APX_VAL_PARAM && pb->kind != APX_VAL_STATE) continue;
    std::vector<uint8_t> v((size_t)pb->bytes);
    ASSERT_EQ(apx_exec_read(&ex, b, v.data(), v.size(), &d), 0) << d.msg;
    out->bufs.push_back(v);
  }
  g_fake = nullptr;
  apx_arena_free(&a);
  apx_exec_free(&ex);
  apx_plan_free(&plan);
  apx_graph_free(&g);
}

void Compare(const char *model, ApxOptLevel level, bool sync_bn, bool expect_overlap) {
  Run ov, bl;
  const int steps = 4;
  Train(model, level, sync_bn, false, steps, &ov);
  Train(model, level, sync_bn, true, steps, &bl);
  // overlapped: every bucket started, polled and waited for; kernels ran meanwhile
  EXPECT_GT(ov.fake.started, 0);
  EXPECT_EQ(ov.fake.started, ov.fake.waited);
  EXPECT_EQ(ov.fake.blocking, 0);
  EXPECT_TRUE(ov.fake.violations.empty()) << ov.fake.violations[0];
  ASSERT_EQ(ov.overlapped.size(), (size_t)steps);
  if (expect_overlap) {
    EXPECT_GT(ov.fake.polls, 0);
    for (int32_t n : ov.overlapped) EXPECT_GT(n, 0);
  }
  // blocking: the same buckets through the blocking slot, nothing in flight
  EXPECT_EQ(bl.fake.started, 0);
  EXPECT_EQ(bl.fake.blocking, ov.fake.started);
  for (int32_t n : bl.overlapped) EXPECT_EQ(n, 0);
  // bit for bit
  ASSERT_EQ(ov.losses.size(), bl.losses.size());
  for (size_t s = 0; s < ov.losses.size(); s++) EXPECT_EQ(ov.losses[s], bl.losses[s]) << "loss of step " << s;
  ASSERT_EQ(ov.bufs.size(), bl.bufs.size());
  ASSERT_GT(ov.bufs.size(), 2u);
  for (size_t b = 0; b < ov.bufs.size(); b++) EXPECT_EQ(ov.bufs[b], bl.bufs[b]) << "persistent buffer " << b;
  std::printf("%s O%d%s: %d buckets started over %d steps, up to %d in flight, %d kernels overlapped in the "
              "first backward, %d polls\n",
              model, (int)level, sync_bn ? " --sync-bn" : "", ov.fake.started, steps, ov.fake.max_live,
              ov.overlapped[0], ov.fake.polls);
}

}  // namespace

TEST(ExecOverlap, MlpO2BucketsOverlapBackwardAndMatchBlocking) { Compare("mlp", APX_O2, false, true); }

TEST(ExecOverlap, MlpO0BucketsOverlapBackwardAndMatchBlocking) { Compare("mlp", APX_O0, false, true); }

// BatchNorm statistics are reduced in forward and backward and read by the very next
// kernel: the executor must wait for them there (a stale read would change every later
// value). The CNN's one gradient bucket is the last kernel of backward: nothing to overlap.
TEST(ExecOverlap, CnnSyncBnWaitsBeforeItsConsumers) { Compare("cnn", APX_O0, true, false); }
