// node_shape_test.cc - ONNX backend node tests (Debian libonnx-testdata) as a shape and dtype
// conformance check of the loader, canonicalization, constant folding and inference.
//
// One test per directory of /usr/share/libonnx-testdata/data/node:
//  1. The model's ops are read independently of the loader (protobuf-c): a test is "v1"
//     when every node is an ai.onnx op that apexc supports (ops.def V1 or FOLD).
//  2. model.onnx is loaded with apx_onnx_load_file (opset_min 7, ir_version_min 3: the old
//     attribute forms are exercised).
//  3. Harness rule for inputs: each APX_VAL_INPUT K (index among non-initializer graph
//     inputs) takes dtype and shape from test_data_set_0/input_K.pb. An input that feeds a
//     static-input slot (ops.def STATIC_INPUTS: Reshape's shape, Slice's starts ...) or any
//     input of a compile-time op other than Shape (Range, Equal, ConstantOfShape) becomes an
//     APX_VAL_CONST with that data, as an exporter's constant would be; other inputs stay
//     runtime inputs (Shape must fold from the static shape alone).
//  4. pass_fold_constants, apx_graph_toposort, pass_infer_shapes, apx_graph_verify.
//  5. Every graph output K must match output_K.pb in dtype and shape; outputs that folded
//     to constants are also compared by value (exact for integers and bool, 1e-5 relative
//     for floats).
// A v1 test must load and match (else it fails). Any other test must be rejected cleanly
// (exit code 2, one-line message) by the loader or by canonicalization/inference: that is
// counted as "rejected", not as a failure; if it loads and infers, its outputs are compared
// too. v1 tests that are out of scope for apexc v1 are listed in apx_node::excluded_tests()
// (node_harness.cc) with the reason;
// they too must be rejected cleanly (one that starts passing must leave the list).
// A summary (loaded, rejected by reason class, checked, matched, mismatched) is printed at
// the end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
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
}

#include "tests/onnx_node/node_harness.h"

namespace {

using apx_node::node_dir;

struct Summary {
  int total = 0, v1 = 0, loaded = 0, rejected = 0, checked = 0, matched = 0, mismatched = 0;
  int excluded = 0, values_compared = 0, values_matched = 0, failures = 0;
  std::map<std::string, int> reasons;  // rejection class -> count
};
Summary g_sum;

std::string reason_class(const std::string &msg) {
  if (msg.find("not supported yet") != std::string::npos) return "not supported yet";
  if (msg.find("unknown op") != std::string::npos) return "unknown op";
  if (msg.find("domain") != std::string::npos) return "other domain";
  if (msg.find("types are not supported") != std::string::npos ||
      msg.find("string tensors") != std::string::npos ||
      msg.find("data type") != std::string::npos)
    return "unsupported type";
  if (msg.find("opset") != std::string::npos || msg.find("ir_version") != std::string::npos)
    return "version";
  if (msg.find("compile-time") != std::string::npos) return "not a compile-time constant";
  if (msg.find("control flow") != std::string::npos) return "control flow";
  return "other";
}

class NodeShape : public ::testing::TestWithParam<std::string> {};

// A clean rejection: exit code 2 and one non-empty line per problem (a model with several
// unsupported op types gets one line each), every line naming the file as the first does.
void expect_clean(const ApxDiag &d, const std::string &stage) {
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT) << stage << ": " << d.msg;
  EXPECT_GT(strlen(d.msg), 0u) << stage;
  const std::string msg(d.msg), file = msg.substr(0, msg.find(": ") + 2);
  for (size_t at = 0; at < msg.size();) {
    size_t nl = msg.find('\n', at);
    std::string line = msg.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    EXPECT_EQ(line.rfind(file, 0), 0u) << stage << ": " << d.msg;
    at = nl == std::string::npos ? msg.size() : nl + 1;
  }
}

TEST_P(NodeShape, LoadsAndMatchesOrIsRejectedCleanly) {
  const std::string name = GetParam();
  const std::string dir = std::string(node_dir()) + "/" + name;
  const std::string model = dir + "/model.onnx";
  std::string ops;
  const bool v1 = apx_node::model_is_v1(model, &ops);
  const auto &kExcluded = apx_node::excluded_tests();
  const auto ex = kExcluded.find(name);
  const bool excluded = ex != kExcluded.end();
  const bool must_match = v1 && !excluded;
  g_sum.total++;
  g_sum.v1 += v1;
  g_sum.excluded += excluded;

  ApxGraph g;
  apx_graph_init(&g, model.c_str());
  ApxOptions o;
  apx_node::options_init(&o);
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;

  auto rejected = [&](const std::string &stage) {
    if (getenv("APX_NODE_VERBOSE"))
      std::printf("rejected %s%s at %s: %s\n", name.c_str(), v1 ? (excluded ? " (v1, excluded)" : " (v1)") : "",
                  stage.c_str(), d.msg);
    g_sum.rejected++;
    g_sum.reasons[reason_class(d.msg)]++;
    expect_clean(d, stage);
    if (must_match) {
      g_sum.failures++;
      ADD_FAILURE() << name << " (" << ops << ") is a v1 test but was rejected at " << stage << ": " << d.msg;
    }
  };

  if (apx_onnx_load_file(&g, model.c_str(), &o, &d) != 0) {
    rejected("load");
    apx_graph_free(&g);
    return;
  }
  g_sum.loaded++;

  // Bind the data inputs from test_data_set_0 (harness rule 3).
  std::vector<ApxTensorConst> data;
  std::string err;
  if (!apx_node::bind_inputs(&g, dir + "/test_data_set_0", &data, &err)) {
    if (excluded) { // a defect of the test data itself (excluded_tests() says which)
      g_sum.rejected++;
      g_sum.reasons["test data does not match the model"]++;
      apx_graph_free(&g);
      return;
    }
    g_sum.failures++;
    ADD_FAILURE() << name << ": " << err;
    apx_graph_free(&g);
    return;
  }

  int rc = pass_fold_constants(&g, &o, &d);
  if (rc >= 0 && apx_graph_toposort(&g, &d) == 0) rc = pass_infer_shapes(&g, &o, &d);
  else rc = -1;
  if (rc < 0) {
    rejected("fold/infer");
    apx_graph_free(&g);
    return;
  }
  ApxDiag vd;
  apx_diag_init(&vd);
  EXPECT_EQ(apx_graph_verify(&g, &vd), 0) << name << ": " << vd.msg;

  g_sum.checked++;
  bool ok = true;
  for (int k = 0; k < g.n_outputs; k++) {
    const ApxValue *v = &g.vals[g.outputs[k]];
    std::string path = dir + "/test_data_set_0/output_" + std::to_string(k) + ".pb";
    ApxTensorConst t;
    ApxDiag rd;
    apx_diag_init(&rd);
    if (apx_onnx_read_tensor_file(path.c_str(), &g.arena, &t, nullptr, &rd) != 0) {
      ok = false;
      ADD_FAILURE() << name << ": cannot read " << path << ": " << rd.msg;
      continue;
    }
    // bfloat16 outputs are stored as uint16 bit patterns in ONNX 1.12's test data
    ApxDType want = apx_node::data_dtype(t.dtype, v->dtype);
    bool same = v->dtype == want && v->rank == t.rank;
    for (int i = 0; same && i < t.rank; i++) same = v->dims[i] == t.dims[i];
    if (!same) {
      ok = false;
      ADD_FAILURE() << name << " (" << ops << ") output " << k << " '" << v->name << "': inferred "
                    << apx_dtype_name(v->dtype) << " " << apx_node::dims_str(v->rank, v->dims) << ", expected "
                    << apx_dtype_name(t.dtype) << " " << apx_node::dims_str(t.rank, t.dims);
      continue;
    }
    if (v->kind == APX_VAL_CONST && v->data) {  // folded: compare the values too
      g_sum.values_compared++;
      int64_t n = apx_value_numel(v);
      int64_t bad = -1;
      for (int64_t i = 0; i < n && bad < 0; i++) {
        double a = apx_node::elem(v->data, v->dtype, i), b = apx_node::elem(t.data, want, i);
        bool eq = apx_dtype_is_float(v->dtype) ? (std::isnan(a) && std::isnan(b)) ||
                                                     std::fabs(a - b) <= 1e-5 * (1.0 + std::fabs(b))
                                               : a == b;
        if (!eq) bad = i;
      }
      if (bad >= 0) {
        ok = false;
        ADD_FAILURE() << name << " output " << k << " folded to a wrong value at element " << bad << ": "
                      << apx_node::elem(v->data, v->dtype, bad) << " vs " << apx_node::elem(t.data, want, bad);
      } else {
        g_sum.values_matched++;
      }
    }
  }
  if (ok)
    g_sum.matched++;
  else
    g_sum.mismatched++;
  if (excluded) {
    g_sum.failures++;
    ADD_FAILURE() << name << " is in kExcluded (" << ex->second << ") but loads and infers: remove it";
  }
  apx_graph_free(&g);
}

std::string param_name(const ::testing::TestParamInfo<std::string> &info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Onnx, NodeShape, ::testing::ValuesIn(apx_node::list_tests()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeShape);

TEST(NodeShapeData, TestDataIsInstalled) {
  EXPECT_GT(apx_node::list_tests().size(), 100u) << "libonnx-testdata not found at " << node_dir();
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("\nONNX node tests: %d total, %d v1 (%d of them excluded), %d loaded, %d rejected", g_sum.total,
                g_sum.v1, g_sum.excluded, g_sum.loaded, g_sum.rejected);
    const char *sep = " (";
    for (const auto &r : g_sum.reasons) {
      std::printf("%s%s: %d", sep, r.first.c_str(), r.second);
      sep = ", ";
    }
    std::printf("%s; %d checked, %d matched, %d mismatched; folded outputs compared by value: %d, equal: %d\n",
                g_sum.reasons.empty() ? "" : ")", g_sum.checked, g_sum.matched, g_sum.mismatched,
                g_sum.values_compared, g_sum.values_matched);
  }
};

const ::testing::Environment *const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

}  // namespace
