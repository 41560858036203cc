// exec_train_test.cc - training steps of the example models (MLP, CNN+BN, transformer)
// compiled by the whole pipeline, run by the executor on its memory plan (reused arena,
// in-place kernels, views) and by the test-only graph evaluator (every value in its own
// buffer, tests/testing/graph_eval.h). Same kernels, order, seed and step: losses, outputs,
// parameters and optimizer state must agree bit for bit, so any tensor the plan overwrote
// too early would show. The loss must also go down.
#include <gtest/gtest.h>

#include <cmath>
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
#include "tests/testing/graph_eval.h"
}
#include "tests/testing/compile_plan.h"

namespace {

struct Case {
  const char *model;
  ApxOptLevel level;
};

std::string case_name(const ::testing::TestParamInfo<Case> &i) {
  return std::string(i.param.model) + "_O" + std::to_string((int)i.param.level);
}

class TrainSteps : public ::testing::TestWithParam<Case> {};

// Loss value as double (fp32 or half).
double scalar(const void *p, ApxDType t) {
  float f;
  EXPECT_EQ(apx_cpu_convert(p, t, &f, APX_DT_F32, 1), APX_STATUS_OK);
  return f;
}

}  // namespace

TEST_P(TrainSteps, ExecutorMatchesUnplannedEvaluatorBitForBit) {
  const Case &c = GetParam();
  std::string dir = std::string("tests/fixtures/ort/") + c.model;
  ApxOptions o;
  apx_options_init(&o);
  std::string model = dir + "/model.onnx";
  o.model_path = model.c_str();
  o.opt_level = c.level;
  o.optimizer = APX_OPTIM_SGD;
  o.lr = 0.05f;
  o.weight_decay = 0.f;
  o.weight_decay_set = 1;
  o.lr_set = 1;
  o.verify_each_pass = 1;
  o.quiet = 1;
  ApxDiag d;
  ApxGraph g;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileGraph(o, &g, &d, &err)) << err;
  ASSERT_GE(g.loss, 0);

  ApxPlan plan;
  apx_plan_init(&plan);
  ASSERT_EQ(apx_plan_from_graph(&g, &o, &plan, &d), 0) << d.msg;
  ASSERT_GT(plan.sec_end[APX_SEC_OPTIMIZER], plan.sec_begin[APX_SEC_OPTIMIZER]);
  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  cfg.n_threads = 1;
  ApxExec ex;
  ASSERT_EQ(apx_exec_init(&ex, &plan, &cfg, &d), 0) << d.msg;
  ApxEval ev;
  ASSERT_EQ(apx_eval_init(&ev, &g), 0) << ev.err;
  ev.ctx.n_threads = 1;
  ev.ctx.seed = plan.opts.seed;

  // the fixture batch, converted to each input's dtype, into both
  ApxArena a;
  apx_arena_init(&a);
  ASSERT_EQ(plan.n_inputs, g.n_inputs);
  for (int i = 0; i < g.n_inputs; i++) {
    std::string path = dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb";
    ApxTensorConst tc;
    const char *name = nullptr;
    ASSERT_EQ(apx_onnx_read_tensor_file(path.c_str(), &a, &tc, &name, &d), 0) << d.msg;
    const ApxValue *v = &g.vals[g.inputs[i]];
    int64_t n = apx_value_numel(v);
    std::vector<uint8_t> host((size_t)apx_value_bytes(v) + 1);
    ASSERT_EQ(apx_cpu_convert(tc.data, tc.dtype, host.data(), v->dtype, n), APX_STATUS_OK);
    memcpy(apx_eval_buf(&ev, g.inputs[i]), host.data(), (size_t)apx_value_bytes(v));
    ApxTensor t = {host.data(), v->dtype, v->rank, {0}};
    memcpy(t.dims, v->dims, sizeof t.dims);
    ASSERT_EQ(apx_exec_set_input(&ex, i, &t, &d), 0) << d.msg;
  }

  const ApxValue *lv = &g.vals[g.loss];
  std::vector<uint8_t> loss((size_t)apx_value_bytes(lv));
  double first = 0, last = 0;
  const int steps = 6;
  for (int s = 0; s < steps; s++) {
    apx_exec_set_step(&ex, s);
    ev.ctx.step = s;
    for (ApxSection sec : {APX_SEC_FORWARD, APX_SEC_BACKWARD, APX_SEC_OPTIMIZER})
      ASSERT_EQ(apx_exec_run(&ex, sec, &d), 0) << d.msg;
    ASSERT_EQ(apx_eval_run(&ev, APX_EVAL_ALL), 0) << ev.err;
    ASSERT_EQ(apx_exec_read(&ex, plan.loss, loss.data(), loss.size(), &d), 0) << d.msg;
    ASSERT_EQ(0, memcmp(loss.data(), apx_eval_buf(&ev, g.loss), loss.size())) << "step " << s;
    double l = scalar(loss.data(), lv->dtype);
    ASSERT_TRUE(std::isfinite(l)) << "step " << s;
    if (s == 0) first = l;
    last = l;
  }
  printf("%s O%d: loss %.6f -> %.6f over %d SGD steps (arena %lld B, lower bound %lld B)\n",
         c.model, (int)c.level, first, last, steps, (long long)plan.mem.arena_bytes,
         (long long)plan.mem.peak_live_bytes);
  EXPECT_LT(last, first);

  // every output, parameter and state buffer agrees with the unplanned evaluator
  int compared = 0;
  for (int32_t b = 0; b < plan.n_bufs; b++) {
    const ApxPlanBuffer *pb = &plan.bufs[b];
    bool check = pb->kind == APX_VAL_PARAM || pb->kind == APX_VAL_STATE ||
                 (pb->flags & APX_VALF_GRAPH_OUTPUT);
    if (!check || pb->bytes == 0) continue;
    int v = apx_graph_find_value(&g, pb->name);
    ASSERT_GE(v, 0) << pb->name;
    std::vector<uint8_t> got((size_t)pb->bytes);
    ASSERT_EQ(apx_exec_read(&ex, b, got.data(), got.size(), &d), 0) << d.msg;
    EXPECT_EQ(0, memcmp(got.data(), apx_eval_buf(&ev, v), got.size())) << pb->name;
    compared++;
  }
  EXPECT_GT(compared, 4);

  apx_arena_free(&a);
  apx_eval_free(&ev);
  apx_exec_free(&ex);
  apx_plan_free(&plan);
  apx_graph_free(&g);
}

INSTANTIATE_TEST_SUITE_P(Examples, TrainSteps,
                         ::testing::Values(Case{"mlp", APX_O0}, Case{"mlp", APX_O2},
                                           Case{"cnn", APX_O0}, Case{"cnn", APX_O1},
                                           Case{"transformer", APX_O0},
                                           Case{"transformer", APX_O2}),
                         case_name);
