// exec_graph_test.cc - the --cuda-graph training step's orchestration, on the cpu backend (no
// GPU) with a recording stand-in for the capture slots that behaves as CUDA's do where the
// trainer depends on it:
//   capture_begin .. capture_end  launches, device-to-device copies and memsets are recorded,
//                                 not run; a host copy or a synchronization fails the capture
//                                 (as cudaStreamCaptureModeThreadLocal / the staging ring would);
//                                 a launch whose step is not the device-side one is refused
//   graph_launch                  replays the record; launches draw with the device-side step
//                                 (Dropout's counter read from device memory)
//   step_write                    sets the device-side step
// Checked: the plain cpu backend refuses capture (exit 2); host copies are refused by the
// executor while capturing; N training steps with the graph path (step 1 uncaptured, step 2
// captured and launched, later steps replayed) log the same losses, grad norms and loss scales
// as the plain path, bit for bit, for the MLP and a Dropout model (whose masks depend on the
// step: a graph that froze step 2's value would diverge at step 3).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "runtime/exec.h"
#include "runtime/train.h"
}
#include "tests/testing/compile_plan.h"

struct ApxDevGraph;

namespace {

std::string Tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Compile(const std::string &src, const std::string &out, ApxOptLevel level) {
  ApxOptions o;
  apx_options_init(&o);
  o.model_path = src.c_str();
  o.opt_level = level;
  o.quiet = 1;
  std::string err;
  EXPECT_TRUE(apx_testing::CompileToPlanFile(o, out, &err)) << err;
  return out;
}

enum Kind { LAUNCH, D2D, MEMSET };
struct Rec {
  Kind kind;
  ApxKernelCall call;
  void *dst;
  const void *src;
  size_t n;
  int value;
};

struct Mock {
  ApxBackendI inner;
  bool capturing = false;
  std::vector<Rec> rec;
  int64_t dev_step = 0;
  int violations = 0;      // host copies / syncs / stale steps during capture
  int graph_launches = 0;
  int step_writes = 0;
  int64_t replayed = 0;    // launches run by graph replays
  int64_t eager = 0;       // launches run outside any graph
} g;

}  // namespace

struct ApxDevGraph {
  std::vector<Rec> rec;
};

namespace {

ApxStatus Launch(ApxBackend *be, ApxQueue *q, const ApxKernelCall *c) {
  if (g.capturing) {
    if (c->step != g.dev_step) {
      g.violations++;
      return apx_backend_fail(be, APX_STATUS_RUNTIME, "stale step %lld in capture", (long long)c->step);
    }
    g.rec.push_back({LAUNCH, *c, nullptr, nullptr, 0, 0});
    return APX_STATUS_OK;
  }
  g.eager++;
  return g.inner.launch(be, q, c);
}

ApxStatus D2d(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  if (g.capturing) {
    g.rec.push_back({D2D, {}, dst, src, n, 0});
    return APX_STATUS_OK;
  }
  return g.inner.copy_d2d(be, q, dst, src, n);
}

ApxStatus Memset(ApxBackend *be, ApxQueue *q, void *dst, int v, size_t n) {
  if (g.capturing) {
    g.rec.push_back({MEMSET, {}, dst, nullptr, n, v});
    return APX_STATUS_OK;
  }
  return g.inner.memset(be, q, dst, v, n);
}

ApxStatus H2d(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  if (g.capturing) {
    g.violations++;
    return apx_backend_fail(be, APX_STATUS_RUNTIME, "host copy in capture");
  }
  return g.inner.copy_h2d(be, q, dst, src, n);
}

ApxStatus D2h(ApxBackend *be, ApxQueue *q, void *dst, const void *src, size_t n) {
  if (g.capturing) {
    g.violations++;
    return apx_backend_fail(be, APX_STATUS_RUNTIME, "host copy in capture");
  }
  return g.inner.copy_d2h(be, q, dst, src, n);
}

ApxStatus Sync(ApxBackend *be, ApxQueue *q) {
  if (g.capturing) {
    g.violations++;
    return apx_backend_fail(be, APX_STATUS_RUNTIME, "sync in capture");
  }
  return g.inner.queue_sync(be, q);
}

ApxStatus StepWrite(ApxBackend *be, ApxQueue *, int64_t step) {
  if (g.capturing) {
    g.violations++;
    return apx_backend_fail(be, APX_STATUS_RUNTIME, "step_write in capture");
  }
  g.dev_step = step;
  g.step_writes++;
  return APX_STATUS_OK;
}

ApxStatus Begin(ApxBackend *, ApxQueue *) {
  g.capturing = true;
  g.rec.clear();
  return APX_STATUS_OK;
}

ApxStatus End(ApxBackend *, ApxQueue *, ApxDevGraph **out) {
  g.capturing = false;
  *out = new ApxDevGraph{g.rec};
  g.rec.clear();
  return APX_STATUS_OK;
}

ApxStatus Replay(ApxBackend *be, ApxQueue *q, ApxDevGraph *gr) {
  g.graph_launches++;
  for (const Rec &r : gr->rec) {
    ApxStatus st = APX_STATUS_OK;
    if (r.kind == LAUNCH) {
      ApxKernelCall c = r.call;
      c.step = g.dev_step;  // read from "device memory" at replay time
      st = g.inner.launch(be, q, &c);
      g.replayed++;
    } else if (r.kind == D2D) {
      st = g.inner.copy_d2d(be, q, r.dst, r.src, r.n);
    } else {
      st = g.inner.memset(be, q, r.dst, r.value, r.n);
    }
    if (st != APX_STATUS_OK) return st;
  }
  return APX_STATUS_OK;
}

void Free(ApxBackend *, ApxDevGraph *gr) { delete gr; }

void Install(ApxBackend *be) {
  g = Mock();
  g.inner = be->iface;
  be->iface.launch = Launch;
  be->iface.copy_d2d = D2d;
  be->iface.memset = Memset;
  be->iface.copy_h2d = H2d;
  be->iface.copy_d2h = D2h;
  be->iface.queue_sync = Sync;
  be->iface.step_write = StepWrite;
  be->iface.capture_begin = Begin;
  be->iface.capture_end = End;
  be->iface.graph_launch = Replay;
  be->iface.graph_free = Free;
}

// step:loss:loss_scale:grad_norm:skipped of each step, graph path or plain
std::vector<std::string> Train(const std::string &plan_path, const std::string &data, int steps, bool graph) {
  ApxDiag d;
  apx_diag_init(&d);
  ApxPlan plan;
  apx_plan_init(&plan);
  std::vector<std::string> out;
  EXPECT_EQ(apx_plan_read(&plan, plan_path.c_str(), &d), 0) << d.msg;
  ApxTrainConfig cfg;
  apx_train_config_init(&cfg);
  cfg.data_dir = data.c_str();
  cfg.steps = steps;
  cfg.exec.n_threads = 1;
  ApxTrainer t;
  if (apx_trainer_init(&t, &plan, &cfg, &d) != 0) {
    ADD_FAILURE() << d.msg;
    apx_trainer_free(&t);
    apx_plan_free(&plan);
    return out;
  }
  if (graph) {
    Install(t.ex.be);
    EXPECT_TRUE(apx_exec_can_capture(&t.ex));
    t.graph_state = 1;  // what apexrun --cuda-graph sets on the cuda backend
  }
  for (int s = 0; s < steps; s++) {
    ApxStepRecord r;
    if (apx_trainer_step(&t, &r, &d) != 0) {
      ADD_FAILURE() << "step " << s << ": " << d.msg;
      break;
    }
    char line[256];
    snprintf(line, sizeof line, "%lld:%.17g:%.17g:%.17g:%d", (long long)r.step, r.loss, r.loss_scale, r.grad_norm,
             r.skipped);
    out.push_back(line);
    if (graph) {
      EXPECT_EQ(t.graph_state, s == 0 ? 2 : 3) << "step " << s;
    }
  }
  apx_trainer_free(&t);
  apx_plan_free(&plan);
  return out;
}

void CheckSame(const std::string &plan, const std::string &data) {
  const int steps = 6;
  std::vector<std::string> plain = Train(plan, data, steps, false);
  int64_t launches_per_step = 0;
  std::vector<std::string> graph = Train(plan, data, steps, true);
  ASSERT_EQ(plain.size(), (size_t)steps);
  EXPECT_EQ(graph, plain) << plan << ": the graph path differs from the plain one";
  EXPECT_EQ(g.violations, 0) << "host copies, syncs or stale steps while capturing";
  EXPECT_EQ(g.graph_launches, steps - 1) << "steps 2.. are graph launches";
  launches_per_step = g.eager;  // step 1 ran uncaptured: every later step replays as many
  EXPECT_GT(launches_per_step, 0);
  EXPECT_EQ(g.replayed, launches_per_step * (steps - 1));
  EXPECT_EQ(g.step_writes, steps - 1) << "the device-side step is written once per step after step 0";
}

// The MLP's plan on the cpu backend.
struct MlpExec : ::testing::Test {
  ApxDiag d;
  ApxPlan plan;
  ApxExec ex;
  bool ready = false;
  void SetUp() override {
    std::string path = Compile("examples/mlp/model.onnx", Tmp() + "/mlp_o0.apx", APX_O0);
    apx_diag_init(&d);
    apx_plan_init(&plan);
    ASSERT_EQ(apx_plan_read(&plan, path.c_str(), &d), 0) << d.msg;
    ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
    ready = true;
  }
  void TearDown() override {
    if (ready) apx_exec_free(&ex);
    apx_plan_free(&plan);
  }
};

TEST_F(MlpExec, CpuBackendRefusesCapture) {
  EXPECT_FALSE(apx_exec_can_capture(&ex));
  EXPECT_EQ(apx_exec_capture_begin(&ex, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(d.msg).find("not supported yet: graph capture on the cpu backend"), std::string::npos) << d.msg;
  EXPECT_EQ(apx_exec_graph_launch(&ex, &d), -1);
}

TEST_F(MlpExec, HostCopiesAreRefusedWhileCapturing) {
  Install(ex.be);
  apx_exec_set_step(&ex, 7);
  ASSERT_EQ(apx_exec_capture_begin(&ex, &d), 0) << d.msg;
  EXPECT_EQ(g.dev_step, 7) << "the step is written before the capture starts";
  int32_t in = plan.inputs[0];
  std::vector<uint8_t> host((size_t)plan.bufs[in].bytes);
  apx_diag_init(&d);
  EXPECT_EQ(apx_exec_write_async(&ex, in, host.data(), host.size(), &d), -1);
  EXPECT_NE(std::string(d.msg).find("during graph capture"), std::string::npos) << d.msg;
  apx_diag_init(&d);
  EXPECT_EQ(apx_exec_sync(&ex, &d), -1);
  apx_diag_init(&d);
  apx_exec_set_step(&ex, 8);  // a new step inside the capture would be frozen into the graph
  EXPECT_EQ(apx_exec_write_step(&ex, &d), -1);
  apx_exec_set_step(&ex, 7);
  apx_diag_init(&d);
  EXPECT_EQ(apx_exec_capture_end(&ex, &d), 0) << d.msg;
  EXPECT_EQ(g.violations, 0) << "the executor refused them before the backend saw them";
  apx_exec_set_step(&ex, 9);
  EXPECT_EQ(apx_exec_graph_launch(&ex, &d), 0) << d.msg;
  EXPECT_EQ(g.dev_step, 9) << "the step is written before the launch";
}

TEST(ExecGraph, GraphPathEqualsPlainPathMlp) {
  CheckSame(Compile("examples/mlp/model.onnx", Tmp() + "/mlp_o2.apx", APX_O2), "examples/mlp/data");
}

TEST(ExecGraph, GraphPathEqualsPlainPathDropout) {
  std::string dir = Tmp() + "/dropout";
  FILE *p = popen(("scripts/py runtime/testdata/make_dropout_model.py " + dir + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512];
  while (fgets(buf, sizeof buf, p)) fputs(buf, stdout);
  ASSERT_EQ(pclose(p), 0);
  CheckSame(Compile(dir + "/model.onnx", dir + "/model.apx", APX_O0), dir + "/data");
}

}  // namespace
