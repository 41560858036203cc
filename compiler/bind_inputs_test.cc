// bind_inputs_test.cc - graph inputs bound to data before compiling (apexrun infer's rule,
// also the node-test harness's): static-input operands become constants and fold, other
// inputs stay runtime inputs with checked dtype and shape; errors name the file and input.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "compiler/bind_inputs.h"
#include "compiler/onnx_load.h"
#include "compiler/pipeline.h"
#include "ir/ir.h"
}

namespace {

const std::string kReshape = "/usr/share/libonnx-testdata/data/node/test_reshape_extended_dims";

struct Compiled {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  ApxArena a;
  std::vector<ApxInputBinding> b;
  Compiled() {
    apx_diag_init(&d);
    d.quiet = 1;
    apx_arena_init(&a);
    apx_options_init(&o);
    o.training = 0;
    o.opset_min = 7;
    o.ir_version_min = 3;
    o.quiet = 1;
    o.model_path = nullptr;
  }
  ~Compiled() {
    apx_graph_free(&g);
    apx_arena_free(&a);
  }
  // Binding K from <test>/test_data_set_0/input_K.pb, by index.
  void add_pb(const std::string &test, int k) {
    ApxInputBinding x = {};
    std::string *path = new std::string(test + "/test_data_set_0/input_" + std::to_string(k) + ".pb");
    paths.emplace_back(path);
    x.index = k;
    x.file = path->c_str();
    ASSERT_EQ(apx_onnx_read_tensor_file(x.file, &a, &x.t, nullptr, &d), 0) << d.msg;
    b.push_back(x);
  }
  int compile(const std::string &test) {
    model = test + "/model.onnx";
    o.model_path = model.c_str();
    o.bind = b.data();
    o.n_bind = (int32_t)b.size();
    return apx_compile_file(&g, &o, &d);
  }
  std::string model;
  std::vector<std::unique_ptr<std::string>> paths;
};

TEST(BindInputs, StaticOperandBecomesAConstantAndFolds) {
  Compiled c;
  c.add_pb(kReshape, 0);
  c.add_pb(kReshape, 1);
  ASSERT_EQ(c.compile(kReshape), 0) << c.d.msg;
  EXPECT_EQ(c.g.n_inputs, 1);  // 'shape' is now a constant
  EXPECT_STREQ(c.g.vals[c.g.inputs[0]].name, "data");
  EXPECT_STREQ(c.b[0].name, "data");  // index bindings get their names
  EXPECT_STREQ(c.b[1].name, "shape");
  EXPECT_EQ(c.b[0].constant, 0);
  EXPECT_EQ(c.b[1].constant, 1);
}

TEST(BindInputs, WithoutTheBindingTheStaticOperandIsAnError) {
  Compiled c;
  EXPECT_NE(c.compile(kReshape), 0);
  EXPECT_NE(std::string(c.d.msg).find("must be a compile-time constant"), std::string::npos) << c.d.msg;
}

TEST(BindInputs, RuleNamesStaticSlotsOnly) {
  Compiled c;
  apx_graph_init(&c.g, (kReshape + "/model.onnx").c_str());
  ASSERT_EQ(apx_onnx_load_file(&c.g, (kReshape + "/model.onnx").c_str(), &c.o, &c.d), 0) << c.d.msg;
  EXPECT_EQ(apx_input_must_be_constant(&c.g, c.g.inputs[0]), 0);  // Reshape's data
  EXPECT_EQ(apx_input_must_be_constant(&c.g, c.g.inputs[1]), 1);  // Reshape's shape
}

TEST(BindInputs, MismatchesAreErrorsNamingTheFile) {
  {  // the data input bound with the shape's int64 data: wrong dtype
    Compiled c;
    c.add_pb(kReshape, 1);
    c.b[0].index = 0;
    EXPECT_NE(c.compile(kReshape), 0);
    EXPECT_NE(std::string(c.d.msg).find("input_1.pb: input 'data' holds int64 data, the model declares float32"),
              std::string::npos)
        << c.d.msg;
  }
  {  // static dims must match
    Compiled c;
    c.add_pb(kReshape, 0);
    c.b[0].t.dims[0] = 5;
    EXPECT_NE(c.compile(kReshape), 0);
    EXPECT_NE(std::string(c.d.msg).find("input 'data' has shape [5,3,4], the model declares [2,3,4]"),
              std::string::npos)
        << c.d.msg;
  }
  {  // one input file too many; a name the model does not have; the same input twice
    Compiled c;
    c.add_pb(kReshape, 0);
    c.b[0].index = 2;
    EXPECT_NE(c.compile(kReshape), 0);
    EXPECT_NE(std::string(c.d.msg).find("the model has 2 data inputs, this is one more"), std::string::npos) << c.d.msg;
  }
  {
    Compiled c;
    c.add_pb(kReshape, 0);
    c.b[0].name = "nope";
    EXPECT_NE(c.compile(kReshape), 0);
    EXPECT_NE(std::string(c.d.msg).find("the model has no data input 'nope'"), std::string::npos) << c.d.msg;
    EXPECT_EQ(c.d.code, APX_EXIT_BAD_INPUT);
  }
  {
    Compiled c;
    c.add_pb(kReshape, 0);
    c.add_pb(kReshape, 0);
    EXPECT_NE(c.compile(kReshape), 0);
    EXPECT_NE(std::string(c.d.msg).find("input 'data' is given twice"), std::string::npos) << c.d.msg;
  }
}

TEST(BindInputs, Uint16DataOfABf16InputIsBf16) {
  EXPECT_EQ(apx_bind_data_dtype(APX_DT_U16, APX_DT_BF16), APX_DT_BF16);
  EXPECT_EQ(apx_bind_data_dtype(APX_DT_U16, APX_DT_U16), APX_DT_U16);
  EXPECT_EQ(apx_bind_data_dtype(APX_DT_F32, APX_DT_BF16), APX_DT_F32);
}

}  // namespace
