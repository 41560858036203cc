// onnx_node_test.cc - the CPU kernels against ONNX's own backend node tests (Debian
// libonnx-testdata, STYLE.md 12): values, not just shapes.
//
// For every test directory whose model uses only apexc v1 / compile-time ops: load the model
// (apx_onnx_load_file), bind test_data_set_0's inputs with the harness rule of
// tests/onnx_node/node_shape_test.cc (inputs feeding static-input slots or compile-time ops
// become constants), fold constants, infer shapes, run the graph on the CPU reference
// kernels (tests/testing/graph_eval) and compare every output with output_K.pb:
//   integers and bool exactly; floats with ONNX's backend-test tolerance
//   |got - want| <= atol + rtol |want|, rtol = 1e-3, atol = 1e-7 (fp32/fp64), rtol = 4 eps
//   of the type for fp16/bf16 (one rounding of ours plus one of the generator's), and NaN
//   where NaN is expected.
// Tests rejected by the loader / inference are the shape test's business and are skipped
// here (counted in the summary). Tests whose reference outputs cannot be reproduced by
// design are listed in kDifferent with the reason.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "compiler/infer.h"
#include "compiler/ir.h"
#include "compiler/onnx_load.h"
#include "compiler/options.h"
#include "kernels/half.h"
#include "onnx.pb-c.h"
#include "passes/fold_constants.h"
#include "passes/infer_shapes.h"
#include "tests/testing/graph_eval.h"
}

namespace {

const char *node_dir() {
  const char *e = getenv("APX_NODE_DIR");
  return e && *e ? e : "/usr/share/libonnx-testdata/data/node";
}

// Reference outputs that apexc does not reproduce by design.
const std::map<std::string, std::string> kDifferent = {
    {"test_training_dropout", "training-mode Dropout draws from Philox (philox.h), not numpy"},
    {"test_training_dropout_default", "training-mode Dropout draws from Philox, not numpy"},
    {"test_training_dropout_default_mask", "training-mode Dropout draws from Philox, not numpy"},
    {"test_training_dropout_mask", "training-mode Dropout draws from Philox, not numpy"},
};

struct Summary {
  int v1 = 0, evaluated = 0, matched = 0, skipped_load = 0, different = 0;
  std::map<std::string, int> per_op_matched;
};
Summary g_sum;

std::vector<std::string> list_tests() {
  std::vector<std::string> out;
  DIR *dir = opendir(node_dir());
  if (!dir) return out;
  while (struct dirent *e = readdir(dir)) {
    std::string n = e->d_name;
    if (n.rfind("test_", 0) != 0) continue;
    struct stat st;
    std::string model = std::string(node_dir()) + "/" + n + "/model.onnx";
    if (stat(model.c_str(), &st) == 0) out.push_back(n);
  }
  closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

bool read_file(const std::string &path, std::vector<uint8_t> *buf) {
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) return false;
  uint8_t tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) buf->insert(buf->end(), tmp, tmp + n);
  fclose(f);
  return true;
}

// v1 when every node is an ai.onnx op with ops.def V1 or FOLD; *ops lists the op types.
bool model_is_v1(const std::string &path, std::string *ops) {
  std::vector<uint8_t> buf;
  if (!read_file(path, &buf)) return false;
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, buf.size(), buf.data());
  if (!m) return false;
  bool v1 = m->graph != nullptr;
  std::set<std::string> seen;
  for (size_t k = 0; m->graph && k < m->graph->n_node; k++) {
    const Onnx__NodeProto *n = m->graph->node[k];
    std::string dom = n->domain ? n->domain : "";
    std::string ot = n->op_type ? n->op_type : "";
    if (seen.insert(ot).second) *ops += (ops->empty() ? "" : ",") + ot;
    ApxOp op = apx_op_from_name(ot.c_str());
    if (!((dom.empty() || dom == "ai.onnx") && op != APX_OP_INVALID &&
          (apx_op_info(op)->flags & (APX_OPF_V1 | APX_OPF_FOLD))))
      v1 = false;
  }
  onnx__model_proto__free_unpacked(m, nullptr);
  return v1;
}

double elem(const void *p, ApxDType dt, int64_t i) {
  switch (dt) {
    case APX_DT_F32: return ((const float *)p)[i];
    case APX_DT_F64: return ((const double *)p)[i];
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)p)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)p)[i]);
    case APX_DT_I64: return (double)((const int64_t *)p)[i];
    case APX_DT_I32: return ((const int32_t *)p)[i];
    case APX_DT_I16: return ((const int16_t *)p)[i];
    case APX_DT_I8: return ((const int8_t *)p)[i];
    case APX_DT_U8: case APX_DT_BOOL: return ((const uint8_t *)p)[i];
    case APX_DT_U16: return ((const uint16_t *)p)[i];
    case APX_DT_U32: return ((const uint32_t *)p)[i];
    case APX_DT_U64: return (double)((const uint64_t *)p)[i];
    default: return NAN;
  }
}

std::set<int> static_fed_inputs(const ApxGraph *g) {
  std::set<int> s;
  for (int i = 0; i < g->n_nodes; i++) {
    const ApxNode *n = &g->nodes[i];
    const ApxOpInfo *info = apx_op_info(n->op);
    bool fold = (info->flags & APX_OPF_FOLD) && n->op != APX_OP_Shape;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && (fold || (k < 32 && (info->static_inputs >> k) & 1))) s.insert(n->in[k]);
  }
  return s;
}

double rtol_of(ApxDType t) {
  if (t == APX_DT_F16) return 4 * std::ldexp(1.0, -10);
  if (t == APX_DT_BF16) return 4 * std::ldexp(1.0, -7);
  return 1e-3;
}

// The test directories whose models use only v1 / compile-time ops.
std::vector<std::string> list_v1_tests() {
  std::vector<std::string> out;
  for (const std::string &n : list_tests()) {
    std::string ops;
    if (model_is_v1(std::string(node_dir()) + "/" + n + "/model.onnx", &ops)) out.push_back(n);
  }
  return out;
}

class NodeValue : public ::testing::TestWithParam<std::string> {};

TEST_P(NodeValue, CpuKernelsReproduceTheReferenceOutputs) {
  const std::string name = GetParam();
  const std::string dir = std::string(node_dir()) + "/" + name;
  std::string ops;
  ASSERT_TRUE(model_is_v1(dir + "/model.onnx", &ops));
  g_sum.v1++;
  if (kDifferent.count(name)) {
    g_sum.different++;
    GTEST_SKIP() << kDifferent.at(name);
  }
  ApxGraph g;
  apx_graph_init(&g, (dir + "/model.onnx").c_str());
  ApxOptions o;
  apx_options_init(&o);
  o.opset_min = 7;
  o.ir_version_min = 3;
  o.training = 0;
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  if (apx_onnx_load_file(&g, (dir + "/model.onnx").c_str(), &o, &d) != 0) {
    g_sum.skipped_load++;
    apx_graph_free(&g);
    GTEST_SKIP() << "rejected by the loader: " << d.msg;
  }
  std::set<int> stat = static_fed_inputs(&g);
  std::vector<int> keep;
  std::vector<ApxTensorConst> data;
  for (int k = 0; k < g.n_inputs; k++) {
    int v = g.inputs[k];
    std::string path = dir + "/test_data_set_0/input_" + std::to_string(k) + ".pb";
    ApxTensorConst t;
    ApxDiag rd;
    apx_diag_init(&rd);
    ASSERT_EQ(apx_onnx_read_tensor_file(path.c_str(), &g.arena, &t, nullptr, &rd), 0) << rd.msg;
    ApxValue *val = &g.vals[v];
    if (!(t.dtype == APX_DT_U16 && val->dtype == APX_DT_BF16)) val->dtype = t.dtype;
    val->dim_params = nullptr;
    apx_value_set_shape(val, t.rank, t.dims);
    if (stat.count(v)) {
      val->kind = APX_VAL_CONST;
      val->data = t.data;
    } else {
      keep.push_back(v);
      data.push_back(t);
    }
  }
  for (size_t i = 0; i < keep.size(); i++) g.inputs[i] = keep[i];
  g.n_inputs = (int32_t)keep.size();
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
  for (size_t i = 0; i < keep.size(); i++) {
    size_t bytes = (size_t)apx_value_bytes(&g.vals[keep[i]]);
    if (bytes) memcpy(apx_eval_buf(&e, keep[i]), data[i].data, bytes);
  }
  g_sum.evaluated++;
  bool ok = apx_eval_run(&e, APX_EVAL_FORWARD) == 0;
  EXPECT_TRUE(ok) << name << " (" << ops << "): " << e.err;
  for (int k = 0; ok && k < g.n_outputs; k++) {
    int v = g.outputs[k];
    const ApxValue *val = &g.vals[v];
    std::string path = dir + "/test_data_set_0/output_" + std::to_string(k) + ".pb";
    ApxTensorConst t;
    ApxDiag rd;
    apx_diag_init(&rd);
    ASSERT_EQ(apx_onnx_read_tensor_file(path.c_str(), &g.arena, &t, nullptr, &rd), 0) << rd.msg;
    ApxDType want = (t.dtype == APX_DT_U16 && val->dtype == APX_DT_BF16) ? APX_DT_BF16 : t.dtype;
    ASSERT_EQ(val->dtype, want) << name << " output " << k;
    int64_t n = apx_value_numel(val);
    const void *got = apx_eval_buf(&e, v);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 3; i++) {
      double a = elem(got, val->dtype, i), b = elem(t.data, want, i);
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
  EXPECT_GT(list_tests().size(), 100u) << "libonnx-testdata not found at " << node_dir();
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
