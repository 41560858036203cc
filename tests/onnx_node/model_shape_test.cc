// model_shape_test.cc - whole-model inference against onnxruntime: every node output of
// the multi-node models in tests/onnx_node/models (generated with make_models.py, which
// records the dtype and shape onnxruntime produces for each value) must get exactly that
// dtype and shape from load -> pass_fold_constants -> pass_infer_shapes, with the --dim
// bindings recorded in NAME.shapes. The models cover the torch-export shape subgraph
// (Shape/Gather/Unsqueeze/Concat -> Reshape with a symbolic batch), the compile-time ops,
// Conv/pooling auto_pad and ceil mode, BatchNorm training outputs, the loss, and the opset-11
// attribute forms.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "compiler/onnx_load.h"
#include "ir/options.h"
#include "passes/fold_constants.h"
#include "passes/infer_shapes.h"
}

namespace {

const char kDir[] = "tests/onnx_node/models/";

class ModelShape : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelShape, EveryValueMatchesOnnxRuntime) {
  const std::string base = std::string(kDir) + GetParam();
  std::ifstream in(base + ".shapes");
  ASSERT_TRUE(in.good()) << "missing " << base << ".shapes";
  ApxOptions o;
  apx_options_init(&o);
  o.training = 0;
  std::vector<std::string> names;  // keep the strings alive for o.dim_names
  names.reserve(APX_MAX_DIMS_BOUND);
  struct Want {
    std::string name, dtype, shape;
  };
  std::vector<Want> want;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# dim ", 0) == 0) {
      std::string kv = line.substr(6);
      size_t eq = kv.find('=');
      ASSERT_NE(eq, std::string::npos) << line;
      names.push_back(kv.substr(0, eq));
      o.dim_names[o.n_dims] = names.back().c_str();
      o.dim_values[o.n_dims++] = std::stoll(kv.substr(eq + 1));
    } else if (line.rfind("# opset_min ", 0) == 0) {
      o.opset_min = std::stoi(line.substr(12));
      o.ir_version_min = 3;
    } else if (!line.empty() && line[0] != '#') {
      std::istringstream ls(line);
      Want w;
      ls >> w.name >> w.dtype >> w.shape;
      want.push_back(w);
    }
  }
  ASSERT_FALSE(want.empty());

  ApxGraph g;
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  const std::string model = base + ".onnx";
  apx_graph_init(&g, model.c_str());
  ASSERT_EQ(apx_onnx_load_file(&g, model.c_str(), &o, &d), 0) << d.msg;
  ASSERT_GE(pass_fold_constants(&g, &o, &d), 0) << d.msg;
  ASSERT_EQ(apx_graph_toposort(&g, &d), 0) << d.msg;
  ASSERT_GE(pass_infer_shapes(&g, &o, &d), 0) << d.msg;
  ASSERT_EQ(apx_graph_verify(&g, &d), 0) << d.msg;
  for (const Want &w : want) {
    int v = apx_graph_find_value(&g, w.name.c_str());
    ASSERT_GE(v, 0) << w.name;
    char buf[256];
    apx_value_shape_str(&g.vals[v], buf, sizeof buf);
    EXPECT_EQ(std::string(apx_dtype_name(g.vals[v].dtype)) + " " + buf, w.dtype + " " + w.shape)
        << GetParam() << ": value '" << w.name << "'";
  }
  apx_graph_free(&g);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelShape, ::testing::Values("attention", "cnn", "old_opset"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

}  // namespace
