// onnx_node_test.cc - the CPU kernels against ONNX's own backend node tests (Debian
// libonnx-testdata, STYLE.md 12): values, not just shapes.
//
// For every test directory whose model uses only apexc v1 / compile-time ops: load the model
// (apx_onnx_load_file), bind test_data_set_0's inputs with the harness rule of
// tests/onnx_node/node_harness.h (inputs feeding static-input slots or compile-time ops
// become constants), fold constants, infer shapes, run the graph on the CPU reference
// kernels (tests/testing/graph_eval) and compare every output with output_K.pb:
//   integers and bool exactly; floats with ONNX's backend-test tolerance
//   |got - want| <= atol + rtol |want|, rtol = 1e-3, atol = 1e-7 (fp32/fp64), rtol = 4 eps
//   of the type for fp16/bf16 (one rounding of ours plus one of the generator's), and NaN
//   where NaN is expected.
// Tests rejected by the loader / inference are the shape test's business and are skipped
// here (counted in the summary). Tests whose reference outputs cannot be reproduced by
// design are listed in kDifferent with the reason.
// tests/onnx_node:node_conformance_test runs the same tests through the whole compiler
// (fusion included) and the executor; this one runs each graph's own nodes on the kernels,
// unfused and without a plan (the *_expanded tests' LayerNorm / Softmax subgraphs, for
// instance, which the pipeline fuses).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "ir/infer.h"
#include "ir/ir.h"
#include "compiler/onnx_load.h"
#include "ir/options.h"
#include "passes/fold_constants.h"
#include "passes/infer_shapes.h"
#include "tests/testing/graph_eval.h"
}

#include "tests/onnx_node/node_harness.h"

namespace {

// Reference outputs that apexc does not reproduce by design.
const std::map<std::string, std::string> kDifferent = {
    {"test_training_dropout", "training-mode Dropout draws from Philox (philox.h), not numpy"},
    {"test_training_dropout_default", "training-mode Dropout draws from Philox, not numpy"},
    {"test_training_dropout_default_mask", "training-mode Dropout draws from Philox, not numpy"},
    {"test_training_dropout_mask", "training-mode Dropout draws from Philox, not numpy"},
    {"test_bernoulli_expanded", "RandomUniformLike draws from Philox, not numpy (checked by definition in node_conformance_test)"},
    {"test_bernoulli_double_expanded", "RandomUniformLike draws from Philox, not numpy"},
    {"test_bernoulli_seed_expanded", "RandomUniformLike draws from Philox, not numpy"},
    {"test_castlike_BFLOAT16_to_FLOAT", "ONNX 1.12 test-data defect: input 'like' declared [3,4] holds 1 value"},
    {"test_castlike_FLOAT_to_BFLOAT16", "ONNX 1.12 test-data defect: input 'like' declared [3,4] holds 1 value"},
};

struct Summary {
  int v1 = 0, evaluated = 0, matched = 0, skipped_load = 0, different = 0;
  std::map<std::string, int> per_op_matched;
};
Summary g_sum;

double rtol_of(ApxDType t) {
  if (t == APX_DT_F16) return 4 * std::ldexp(1.0, -10);
  if (t == APX_DT_BF16) return 4 * std::ldexp(1.0, -7);
  return 1e-3;
}

// The test directories whose models use only v1 / compile-time ops.
std::vector<std::string> list_v1_tests() {
  std::vector<std::string> out;
  for (const std::string &n : apx_node::list_tests()) {
    std::string ops;
    if (apx_node::model_is_v1(std::string(apx_node::node_dir()) + "/" + n + "/model.onnx", &ops))
      out.push_back(n);
  }
  return out;
}

class NodeValue : public ::testing::TestWithParam<std::string> {};

TEST_P(NodeValue, CpuKernelsReproduceTheReferenceOutputs) {
  const std::string name = GetParam();
  const std::string dir = std::string(apx_node::node_dir()) + "/" + name;
  std::string ops;
  ASSERT_TRUE(apx_node::model_is_v1(dir + "/model.onnx", &ops));
  g_sum.v1++;
  if (kDifferent.count(name)) {
    g_sum.different++;
    GTEST_SKIP() << kDifferent.at(name);
  }
  ApxGraph g;
  apx_graph_init(&g, (dir + "/model.onnx").c_str());
  ApxOptions o;
  apx_node::options_init(&o);
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  if (apx_onnx_load_file(&g, (dir + "/model.onnx").c_str(), &o, &d) != 0) {
    g_sum.skipped_load++;
    apx_graph_free(&g);
    GTEST_SKIP() << "rejected by the loader: " << d.msg;
  }
  std::vector<ApxTensorConst> data;  // the data inputs' tensors, g.inputs order
  std::string err;
  ASSERT_TRUE(apx_node::bind_inputs(&g, dir + "/test_data_set_0", &data, &err)) << err;
  int rc = pass_fold_constants(&g, &o, &d);
  if (rc >= 0 && apx_graph_toposort(&g, &d) == 0) rc = pass_infer_shapes(&g, &o, &d);
  else rc = -1;
  if (rc < 0) {
    g_sum.skipped_load++;
    apx_graph_free(&g);
    GTEST_SKIP() << "rejected by folding / inference: " << d.msg;
  }
  ApxEval e;
  ASSERT_EQ(apx_eval_init(&e, &g), 0) << e.err;
  for (int i = 0; i < g.n_inputs; i++) {
    size_t bytes = (size_t)apx_value_bytes(&g.vals[g.inputs[i]]);
    if (bytes) memcpy(apx_eval_buf(&e, g.inputs[i]), data[(size_t)i].data, bytes);
  }
  g_sum.evaluated++;
  bool ok = apx_eval_run(&e, APX_EVAL_FORWARD) == 0;
  EXPECT_TRUE(ok) << name << " (" << ops << "): " << e.err;
  for (int k = 0; ok && k < g.n_outputs; k++) {
    int v = g.outputs[k];
    const ApxValue *val = &g.vals[v];
    std::string path = dir + "/test_data_set_0/output_" + std::to_string(k) + ".pb";
    ApxTensorConst t;
    ASSERT_TRUE(apx_node::read_tensor(path, &g.arena, &t, &err)) << err;
    ApxDType want = apx_node::data_dtype(t.dtype, val->dtype);
    ASSERT_EQ(val->dtype, want) << name << " output " << k;
    int64_t n = apx_value_numel(val);
    const void *got = apx_eval_buf(&e, v);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 3; i++) {
      double a = apx_node::elem(got, val->dtype, i), b = apx_node::elem(t.data, want, i);
      bool eq;
      if (apx_dtype_is_float(want))
        eq = (std::isnan(a) && std::isnan(b)) || a == b ||
             std::fabs(a - b) <= 1e-7 + rtol_of(want) * std::fabs(b);
      else
        eq = a == b;
      if (!eq) {
        ok = false;
        bad++;
        ADD_FAILURE() << name << " (" << ops << ") output " << k << " element " << i << ": got " << a
                      << ", want " << b;
      }
    }
  }
  if (ok) {
    g_sum.matched++;
    g_sum.per_op_matched[ops]++;
  }
  apx_eval_free(&e);
  apx_graph_free(&g);
}

std::string param_name(const ::testing::TestParamInfo<std::string> &info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Onnx, NodeValue, ::testing::ValuesIn(list_v1_tests()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeValue);

TEST(NodeValueData, TestDataIsInstalled) {
  EXPECT_GT(apx_node::list_tests().size(), 100u)
      << "libonnx-testdata not found at " << apx_node::node_dir();
  EXPECT_GT(list_v1_tests().size(), 300u);
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("\nONNX node tests on the CPU kernels: %d v1 models, %d not reproducible by design, "
                "%d rejected before evaluation, %d evaluated, %d matched\n",
                g_sum.v1, g_sum.different, g_sum.skipped_load, g_sum.evaluated, g_sum.matched);
  }
};

const ::testing::Environment *const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

}  // namespace
