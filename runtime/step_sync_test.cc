// step_sync_test.cc - the training step's host synchronizations and the single-process path
// through the collective layer, on the cpu backend (no GPU):
//   - one optimizer step synchronizes the queue exactly once (the executor's count and every
//     queue_sync reaching the backend, counted by wrapping the slot), with and without
//     gradient accumulation;
//   - a backend named "cuda" in one process goes through apx_dp_init without the collective
//     layer refusing it (it installs nothing: one process has nothing to reduce) - the
//     `apexrun --device cuda` single-process path; without a GPU the backend itself then
//     fails at its first CUDA call (runtime:apexrun_device_test checks that message).
// What needs a GPU (runtime:exec_cuda_test): the cuda backend's own count of host waits per
// step (apx_backend_cuda_host_waits), which also counts waits for staging slots.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

extern "C" {
#include "runtime/collective.h"
#include "runtime/dp.h"
#include "runtime/train.h"
}
#include "tests/testing/compile_plan.h"

namespace {

std::string Tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Compile(const std::string &model, ApxOptLevel level, int accumulate) {
  std::string path = Tmp() + "/" + model + "_" + std::to_string(level) + "_" + std::to_string(accumulate) + ".apx";
  std::string src = "examples/" + model + "/model.onnx";
  ApxOptions o;
  apx_options_init(&o);
  o.model_path = src.c_str();
  o.opt_level = level;
  o.quiet = 1;
  o.accumulate = accumulate;
  std::string err;
  EXPECT_TRUE(apx_testing::CompileToPlanFile(o, path, &err)) << err;
  return path;
}

// queue_sync calls that reach the backend
int64_t g_syncs = 0;
ApxStatus (*g_inner_sync)(ApxBackend *, ApxQueue *) = nullptr;
ApxStatus CountingSync(ApxBackend *be, ApxQueue *q) {
  g_syncs++;
  return g_inner_sync(be, q);
}

void CheckOneSyncPerStep(const std::string &model, ApxOptLevel level, int accumulate) {
  std::string plan_path = Compile(model, level, accumulate);
  ApxDiag d;
  apx_diag_init(&d);
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_read(&plan, plan_path.c_str(), &d), 0) << d.msg;
  ApxTrainConfig cfg;
  apx_train_config_init(&cfg);
  std::string data = "examples/" + model + "/data";
  cfg.data_dir = data.c_str();
  cfg.steps = 4;
  cfg.order = APX_ORDER_FILE;
  cfg.exec.n_threads = 1;
  ApxTrainer t;
  ASSERT_EQ(apx_trainer_init(&t, &plan, &cfg, &d), 0) << d.msg;
  g_inner_sync = t.ex.be->iface.queue_sync;
  t.ex.be->iface.queue_sync = CountingSync;
  std::vector<double> losses;
  for (int s = 0; s < 4; s++) {
    int64_t ex0 = t.ex.n_syncs, be0 = g_syncs;
    ApxStepRecord r;
    ASSERT_EQ(apx_trainer_step(&t, &r, &d), 0) << d.msg;
    EXPECT_EQ(t.ex.n_syncs - ex0, 1) << model << " step " << s << ": executor synchronizations";
    EXPECT_EQ(g_syncs - be0, 1) << model << " step " << s << ": queue_sync calls reaching the backend";
    EXPECT_TRUE(std::isfinite(r.loss)) << r.loss;
    EXPECT_TRUE(std::isfinite(r.grad_norm) || r.skipped);
    losses.push_back(r.loss);
  }
  // the readback slots' losses move as training does (their exact values are held to the
  // reference runs by train_examples_test and train_test)
  EXPECT_NE(losses.front(), losses.back());
  t.ex.be->iface.queue_sync = g_inner_sync;
  apx_trainer_free(&t);
  apx_plan_free(&plan);
}

TEST(StepSync, OneHostSynchronizationPerStep) {
  CheckOneSyncPerStep("mlp", APX_O2, 1);
  CheckOneSyncPerStep("transformer", APX_O1, 1);
  CheckOneSyncPerStep("cnn", APX_O2, 1);
}

TEST(StepSync, OneHostSynchronizationPerStepWithAccumulation) { CheckOneSyncPerStep("mlp", APX_O2, 3); }

TEST(SingleProcess, CudaBackendPassesTheCollectiveLayer) {
  std::string plan_path = Compile("mlp", APX_O2, 1);
  ApxDiag d;
  apx_diag_init(&d);
  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_read(&plan, plan_path.c_str(), &d), 0) << d.msg;
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, nullptr, &d), 0) << d.msg;
  ex.be->iface.name = "cuda";  // what apexrun --device cuda hands the layer in one process
  ApxCollConfig cc;
  apx_coll_config_init(&cc);
  cc.mode = APX_COLL_SINGLE;
  ApxColl *coll = nullptr;
  ASSERT_EQ(apx_coll_init(&coll, &cc, &d), 0) << d.msg;
  ApxDp dp;
  EXPECT_EQ(apx_dp_init(&dp, coll, &ex, &plan, 0, &d), 0) << d.msg;
  EXPECT_EQ(d.code, 0) << d.msg;
  EXPECT_EQ(ex.be->iface.allreduce_bucket, nullptr) << "one process needs no collective slots";
  EXPECT_EQ(apx_coll_attach(coll, ex.be, &d), 0) << d.msg;
  apx_dp_free(&dp);
  ex.be->iface.name = "cpu";
  apx_exec_free(&ex);
  apx_coll_finalize(coll);
  apx_plan_free(&plan);
}

}  // namespace
