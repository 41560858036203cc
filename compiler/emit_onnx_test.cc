// emit_onnx_test.cc - --emit-onnx on hand-built mixed-precision IR graphs: what the written
// ModelProto holds (read back with protobuf-c), and the errors for what ONNX cannot express.
// The onnxruntime cross-check of emitted models lives in tests/ort/.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/emit_onnx.h"
#include "ir/ir.h"
#include "kernels/half.h"
#include "onnx.pb-c.h"
}

namespace {

struct Graph {
  ApxGraph g;
  ApxDiag d;
  Graph() {
    apx_graph_init(&g, "t.onnx");
    apx_diag_init(&d);
    g.opset = 17;
    g.ir_version = 8;
    g.name = "t";
  }
  ~Graph() { apx_graph_free(&g); }
  int val(const char *name, ApxValueKind k, ApxDType dt, std::vector<int64_t> dims) {
    return apx_graph_add_value(&g, &d, name, k, dt, (int)dims.size(), dims.data());
  }
  int input(const char *name, ApxDType dt, std::vector<int64_t> dims) {
    int v = val(name, APX_VAL_INPUT, dt, dims);
    g.inputs = (int *)apx_arena_memdup(&g.arena, grow(g.inputs, g.n_inputs, v).data(),
                                       sizeof(int) * (g.n_inputs + 1));
    g.n_inputs++;
    return v;
  }
  void output(int v) {
    g.outputs = (int *)apx_arena_memdup(&g.arena, grow(g.outputs, g.n_outputs, v).data(),
                                        sizeof(int) * (g.n_outputs + 1));
    g.n_outputs++;
    g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
  }
  static std::vector<int> grow(const int *a, int n, int v) {
    std::vector<int> r(a, a + n);
    r.push_back(v);
    return r;
  }
  // A constant or parameter with data of its dtype (float values converted).
  int data_val(const char *name, ApxValueKind k, ApxDType dt, std::vector<int64_t> dims,
               std::vector<float> f) {
    int v = val(name, k, dt, dims);
    size_t es = apx_dtype_size(dt);
    void *p = apx_arena_alloc(&g.arena, f.size() * es);
    for (size_t i = 0; i < f.size(); i++) {
      if (dt == APX_DT_F32) ((float *)p)[i] = f[i];
      else if (dt == APX_DT_F16) ((uint16_t *)p)[i] = apx_f32_to_f16(f[i]);
      else if (dt == APX_DT_BF16) ((uint16_t *)p)[i] = apx_f32_to_bf16(f[i]);
      else if (dt == APX_DT_I64) ((int64_t *)p)[i] = (int64_t)f[i];
    }
    g.vals[v].data = p;
    return v;
  }
  int node(ApxOp op, const char *name, std::vector<int> in, std::vector<int> out) {
    return apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
  }
  // A node as the loader makes it: model index and generic attributes.
  void loaded(int n, int index, std::vector<ApxAttr> attrs) {
    g.nodes[n].onnx_index = index;
    g.nodes[n].n_attrs = (int32_t)attrs.size();
    g.nodes[n].attrs = attrs.empty() ? nullptr : (ApxAttr *)apx_arena_memdup(&g.arena, attrs.data(), sizeof(ApxAttr) * attrs.size());
  }
  int cast(const char *name, int in, int out, ApxDType to) {
    int n = node(APX_OP_Cast, name, {in}, {out});
    APX_NODE_ATTRS(&g, n, ApxAttrCast)->to = to;
    return n;
  }
};

ApxAttr int_attr(const char *name, int64_t v) {
  ApxAttr a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.type = APX_ATTR_INT;
  a.i = v;
  return a;
}

ApxAttr string_attr(const char *name, const char *s) {
  ApxAttr a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.type = APX_ATTR_STRING;
  a.s = s;
  return a;
}

// The emitted model, unpacked.
struct Model {
  Onnx__ModelProto *m = nullptr;
  explicit Model(Graph &t) {
    void *buf = nullptr;
    size_t len = 0;
    if (apx_emit_onnx_memory(&t.g, &buf, &len, &t.d) == 0) {
      m = onnx__model_proto__unpack(nullptr, len, (const uint8_t *)buf);
      free(buf);
    }
  }
  ~Model() {
    if (m) onnx__model_proto__free_unpacked(m, nullptr);
  }
  const Onnx__NodeProto *node(const char *name) const {
    for (size_t i = 0; i < m->graph->n_node; i++)
      if (!strcmp(m->graph->node[i]->name, name)) return m->graph->node[i];
    return nullptr;
  }
  const Onnx__TensorProto *init(const char *name) const {
    for (size_t i = 0; i < m->graph->n_initializer; i++)
      if (!strcmp(m->graph->initializer[i]->name, name)) return m->graph->initializer[i];
    return nullptr;
  }
  static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
      if (!strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return nullptr;
  }
};

// x [2,4] fp32 -> Cast fp16 -> Gemm(W fp16 [3,4], b fp16 [3], transB=1) -> Relu -> Cast fp32
// -> y [2,3]: the shape of an O2 forward after cast insertion.
struct MixedMlp : Graph {
  int x, xh, w, b, h, r, y;
  int n_cast_in, n_gemm, n_relu, n_cast_out;
  MixedMlp() {
    x = input("x", APX_DT_F32, {2, 4});
    xh = val("x_fp16", APX_VAL_ACTIVATION, APX_DT_F16, {2, 4});
    w = data_val("fc.weight", APX_VAL_PARAM, APX_DT_F16, {3, 4},
                 {0.1f, -0.2f, 0.3f, 1e-5f, 65504.f, 1.f / 3, 2, 3, 4, 5, 6, 7});
    b = data_val("fc.bias", APX_VAL_PARAM, APX_DT_F16, {3}, {0.5f, -0.5f, 0.25f});
    h = val("fc_out", APX_VAL_ACTIVATION, APX_DT_F16, {2, 3});
    r = val("relu_out", APX_VAL_ACTIVATION, APX_DT_F16, {2, 3});
    y = val("y", APX_VAL_ACTIVATION, APX_DT_F32, {2, 3});
    n_cast_in = cast("x_cast", x, xh, APX_DT_F16);
    n_gemm = node(APX_OP_Gemm, "fc", {xh, w, b}, {h});
    loaded(n_gemm, 0, {int_attr("transB", 1)});
    n_relu = node(APX_OP_Relu, "relu", {h}, {r});
    loaded(n_relu, 1, {});
    n_cast_out = cast("y_cast", r, y, APX_DT_F32);
    output(y);
    g.loss = -1;
  }
};

TEST(EmitOnnx, WritesCastsFp16InitializersAndTypes) {
  MixedMlp t;
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
  ASSERT_EQ(apx_graph_verify(&t.g, &t.d), 0) << t.d.msg;
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_EQ(m.m->ir_version, 8);
  ASSERT_EQ(m.m->n_opset_import, 1u);
  EXPECT_STREQ(m.m->opset_import[0]->domain, "");
  EXPECT_EQ(m.m->opset_import[0]->version, 17);

  const Onnx__GraphProto *g = m.m->graph;
  ASSERT_EQ(g->n_node, 4u);
  const char *ops[] = {"Cast", "Gemm", "Relu", "Cast"};
  for (int i = 0; i < 4; i++) EXPECT_STREQ(g->node[i]->op_type, ops[i]) << i;
  const Onnx__AttributeProto *to = Model::attr(m.node("x_cast"), "to");
  ASSERT_NE(to, nullptr);
  EXPECT_EQ(to->type, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  EXPECT_EQ(to->i, 10);  // FLOAT16
  EXPECT_EQ(Model::attr(m.node("y_cast"), "to")->i, 1);
  const Onnx__AttributeProto *tb = Model::attr(m.node("fc"), "transB");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->i, 1);
  EXPECT_EQ(m.node("relu")->n_attribute, 0u);
  ASSERT_EQ(m.node("fc")->n_input, 3u);
  EXPECT_STREQ(m.node("fc")->input[0], "x_fp16");
  EXPECT_STREQ(m.node("fc")->input[1], "fc.weight");

  // initializers: the fp16 bit patterns as stored in the IR
  ASSERT_EQ(g->n_initializer, 2u);
  const Onnx__TensorProto *w = m.init("fc.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->data_type, 10);
  ASSERT_EQ(w->n_dims, 2u);
  EXPECT_EQ(w->dims[0], 3);
  EXPECT_EQ(w->dims[1], 4);
  ASSERT_TRUE(w->has_raw_data);
  ASSERT_EQ(w->raw_data.len, 24u);
  EXPECT_EQ(memcmp(w->raw_data.data, t.g.vals[t.w].data, 24), 0);
  uint16_t big;
  memcpy(&big, w->raw_data.data + 8, 2);
  EXPECT_EQ(apx_f16_to_f32(big), 65504.f);

  // graph inputs / outputs / value_info with current dtypes and shapes
  ASSERT_EQ(g->n_input, 1u);
  EXPECT_STREQ(g->input[0]->name, "x");
  EXPECT_EQ(g->input[0]->type->tensor_type->elem_type, 1);
  ASSERT_EQ(g->input[0]->type->tensor_type->shape->n_dim, 2u);
  EXPECT_EQ(g->input[0]->type->tensor_type->shape->dim[1]->dim_value, 4);
  ASSERT_EQ(g->n_output, 1u);
  EXPECT_STREQ(g->output[0]->name, "y");
  EXPECT_EQ(g->output[0]->type->tensor_type->elem_type, 1);
  ASSERT_EQ(g->n_value_info, 3u);  // x_fp16, fc_out, relu_out
  for (size_t i = 0; i < g->n_value_info; i++)
    EXPECT_EQ(g->value_info[i]->type->tensor_type->elem_type, 10) << g->value_info[i]->name;
}

TEST(EmitOnnx, CastTargetComesFromTheTypedAttribute) {
  // A model Cast (to=FLOAT) whose target the precision pass changed to bf16.
  Graph t;
  int x = t.input("x", APX_DT_F32, {4});
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_BF16, {4});
  int n = t.cast("c", x, y, APX_DT_BF16);
  t.loaded(n, 0, {int_attr("to", 1)});
  t.output(y);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  const Onnx__NodeProto *c = m.node("c");
  ASSERT_EQ(c->n_attribute, 1u);
  EXPECT_EQ(Model::attr(c, "to")->i, 16);  // BFLOAT16
  EXPECT_EQ(m.m->graph->output[0]->type->tensor_type->elem_type, 16);
}

TEST(EmitOnnx, HalfCopyOfAParameterIsConvertedFromItsOrigin) {
  Graph t;
  int x = t.input("x", APX_DT_F16, {2});
  int master = t.data_val("w", APX_VAL_STATE, APX_DT_F32, {2}, {0.1f, 70000.f});
  int wh = t.val("w_fp16", APX_VAL_PARAM, APX_DT_F16, {2});
  t.g.vals[wh].origin = master;
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_F16, {2});
  t.node(APX_OP_Mul, "mul", {x, wh}, {y});
  t.output(y);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  const Onnx__TensorProto *w = m.init("w_fp16");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->raw_data.len, 4u);
  uint16_t h[2];
  memcpy(h, w->raw_data.data, 4);
  EXPECT_EQ(h[0], apx_f32_to_f16(0.1f));
  EXPECT_EQ(h[1], 0x7c00);  // 70000 overflows fp16 to +inf, as on the GPU
  EXPECT_EQ(m.init("w"), nullptr);  // the master itself is not read by the forward graph
}

TEST(EmitOnnx, PassCreatedNodesGetOnnxAttributesFromTypedOnes) {
  Graph t;
  int x = t.input("x", APX_DT_F32, {2, 3});
  int s = t.val("s", APX_VAL_ACTIVATION, APX_DT_F32, {2, 3});
  int l = t.val("l", APX_VAL_ACTIVATION, APX_DT_F32, {});
  int lab = t.input("labels", APX_DT_I64, {2});
  int n_sm = t.node(APX_OP_Softmax, "sm", {x}, {s});
  APX_NODE_ATTRS(&t.g, n_sm, ApxAttrAxis)->axis = 1;
  int n_loss = t.node(APX_OP_SoftmaxCrossEntropyLoss, "loss", {s, lab}, {l});
  APX_NODE_ATTRS(&t.g, n_loss, ApxAttrLoss)->reduction = APX_RED_SUM;
  t.output(l);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_EQ(Model::attr(m.node("sm"), "axis")->i, 1);
  const Onnx__AttributeProto *red = Model::attr(m.node("loss"), "reduction");
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(std::string((const char *)red->s.data, red->s.len), "sum");
}

TEST(EmitOnnx, KeepsGenericAttributesAndStaticInputsOfLoadedNodes) {
  Graph t;
  int x = t.input("x", APX_DT_F16, {2, 6});
  int shape = t.data_val("shape", APX_VAL_CONST, APX_DT_I64, {3}, {2, 3, 2});
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_F16, {2, 3, 2});
  int l = t.val("l", APX_VAL_ACTIVATION, APX_DT_F32, {});
  int lab = t.input("labels", APX_DT_I64, {2});
  int yf = t.val("yf", APX_VAL_ACTIVATION, APX_DT_F32, {2, 6});
  t.loaded(t.node(APX_OP_Reshape, "r", {x, shape}, {y}), 0, {});
  t.cast("c", x, yf, APX_DT_F32);
  t.loaded(t.node(APX_OP_SoftmaxCrossEntropyLoss, "loss", {yf, lab}, {l}), 2,
           {string_attr("reduction", "mean"), int_attr("ignore_index", -1)});
  t.output(l);
  t.output(y);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  const Onnx__TensorProto *s = m.init("shape");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->data_type, 7);
  int64_t dims[3];
  ASSERT_EQ(s->raw_data.len, sizeof dims);
  memcpy(dims, s->raw_data.data, sizeof dims);
  EXPECT_EQ(dims[2], 2);
  const Onnx__NodeProto *loss = m.node("loss");
  ASSERT_EQ(loss->n_attribute, 2u);
  EXPECT_EQ(std::string((const char *)loss->attribute[0]->s.data, loss->attribute[0]->s.len), "mean");
  EXPECT_EQ(loss->attribute[1]->i, -1);
  ASSERT_EQ(m.m->graph->n_output, 2u);
  EXPECT_STREQ(m.m->graph->output[0]->name, "l");
  EXPECT_EQ(m.m->graph->output[1]->type->tensor_type->elem_type, 10);
  EXPECT_EQ(m.m->graph->input[1]->type->tensor_type->elem_type, 7);
}

TEST(EmitOnnx, BatchNormSavedStatisticsAndOtherSectionsAreLeftOut) {
  Graph t;
  int x = t.input("x", APX_DT_F32, {2, 3, 2, 2});
  std::vector<int> in = {x};
  const char *names[] = {"scale", "bias", "mean", "var"};
  for (const char *n : names) in.push_back(t.data_val(n, APX_VAL_PARAM, APX_DT_F32, {3}, {1, 1, 1}));
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_F32, {2, 3, 2, 2});
  int rm = t.val("rm", APX_VAL_ACTIVATION, APX_DT_F32, {3});
  int rv = t.val("rv", APX_VAL_ACTIVATION, APX_DT_F32, {3});
  int sm = t.val("saved_mean", APX_VAL_ACTIVATION, APX_DT_F32, {3});
  int si = t.val("saved_invstd", APX_VAL_ACTIVATION, APX_DT_F32, {3});
  int bn = t.node(APX_OP_BatchNormalization, "bn", in, {y, rm, rv, sm, si});
  t.loaded(bn, 0, {int_attr("training_mode", 1)});
  // a backward node reading the saved statistics: not written
  int dy = t.input("dy", APX_DT_F32, {2, 3, 2, 2});
  int dx = t.val("dx", APX_VAL_ACTIVATION, APX_DT_F32, {2, 3, 2, 2});
  int grad = t.node(APX_OP_BatchNormGrad, "bn_grad", {dy, x, in[1], sm, si}, {dx});
  t.g.nodes[grad].section = APX_SEC_BACKWARD;
  t.output(y);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  ASSERT_EQ(m.m->graph->n_node, 1u);
  const Onnx__NodeProto *n = m.node("bn");
  ASSERT_EQ(n->n_output, 3u);
  EXPECT_STREQ(n->output[2], "rv");
  for (size_t i = 0; i < m.m->graph->n_value_info; i++)
    EXPECT_NE(std::string(m.m->graph->value_info[i]->name), "saved_mean");
}

TEST(EmitOnnx, AbsentOptionalInputsAreEmptyNames) {
  Graph t;
  int x = t.input("x", APX_DT_F32, {2, 2});
  int w = t.data_val("w", APX_VAL_PARAM, APX_DT_F32, {2, 2}, {1, 2, 3, 4});
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_F32, {2, 2});
  int mask = t.input("mask", APX_DT_BOOL, {2, 2});
  int z = t.val("z", APX_VAL_ACTIVATION, APX_DT_F32, {2, 2});
  t.loaded(t.node(APX_OP_Gemm, "g", {x, w, -1}, {y}), 0, {});
  t.loaded(t.node(APX_OP_Where, "wh", {mask, y, x}, {z}), 1, {});
  t.output(z);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_EQ(m.node("g")->n_input, 2u);  // trailing absent C dropped
}

TEST(EmitOnnx, InternalOpsAreNotSupportedYet) {
  Graph t;
  int x = t.input("x", APX_DT_F16, {2, 4});
  int w = t.data_val("w", APX_VAL_PARAM, APX_DT_F16, {4, 4}, std::vector<float>(16, 0.5f));
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_F16, {2, 4});
  t.node(APX_OP_FusedDense, "fc_fused", {x, w}, {y});
  t.output(y);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  void *buf = nullptr;
  size_t len = 0;
  EXPECT_EQ(apx_emit_onnx_memory(&t.g, &buf, &len, &t.d), -1);
  EXPECT_EQ(buf, nullptr);
  EXPECT_STREQ(t.d.msg,
               "t.onnx: node 'fc_fused' (FusedDense): not supported yet: --emit-onnx of internal op FusedDense");
  EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
}

TEST(EmitOnnx, ValueComputedOutsideTheForwardGraphIsAnError) {
  Graph t;
  int x = t.input("x", APX_DT_F32, {2});
  int a = t.val("a", APX_VAL_ACTIVATION, APX_DT_F32, {2});
  int y = t.val("y", APX_VAL_ACTIVATION, APX_DT_F32, {2});
  int n = t.node(APX_OP_Relu, "opt_relu", {x}, {a});
  t.g.nodes[n].section = APX_SEC_OPTIMIZER;
  t.node(APX_OP_Relu, "fwd_relu", {a}, {y});
  t.output(y);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  void *buf = nullptr;
  size_t len = 0;
  EXPECT_EQ(apx_emit_onnx_memory(&t.g, &buf, &len, &t.d), -1);
  EXPECT_NE(std::string(t.d.msg).find("value 'a'"), std::string::npos) << t.d.msg;
  EXPECT_NE(std::string(t.d.msg).find("neither computed there"), std::string::npos) << t.d.msg;
}

TEST(EmitOnnx, WritesAFileAndReportsUnwritablePaths) {
  MixedMlp t;
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  std::string dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  std::string path = dir + "/emit_onnx_test.onnx";
  ASSERT_EQ(apx_emit_onnx(&t.g, path.c_str(), &t.d), 0) << t.d.msg;
  FILE *f = fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::vector<uint8_t> bytes(1 << 16);
  size_t n = fread(bytes.data(), 1, bytes.size(), f);
  fclose(f);
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, n, bytes.data());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->graph->n_node, 4u);
  onnx__model_proto__free_unpacked(m, nullptr);

  EXPECT_EQ(apx_emit_onnx(&t.g, (dir + "/no/such/dir/m.onnx").c_str(), &t.d), -1);
  EXPECT_NE(std::string(t.d.msg).find("cannot write"), std::string::npos) << t.d.msg;
  EXPECT_EQ(t.d.code, APX_EXIT_RUNTIME);
}

ApxAttr ints_attr(const char *name, const std::vector<int64_t> &v) {
  ApxAttr a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.type = APX_ATTR_INTS;
  a.n = (int32_t)v.size();
  static std::vector<std::vector<int64_t>> keep;  // outlives the graph of the test
  keep.push_back(v);
  a.ints = keep.back().data();
  return a;
}

// x [1,1,4,4] -> Cast(dt) -> Conv(W dt [1,1,3,3]) -> Cast fp32 -> y, decided in dt; with
// reduce_mean, also ReduceMean(y, axes attribute) in the opset-17 form.
struct ConvGraph : Graph {
  int conv;
  ConvGraph(ApxDType dt, bool reduce_mean) {
    int x = input("x", APX_DT_F32, {1, 1, 4, 4});
    int xh = val("x_h", APX_VAL_ACTIVATION, dt, {1, 1, 4, 4});
    int w = data_val("w", APX_VAL_PARAM, dt, {1, 1, 3, 3}, {1, 0, -1, 2, 0, -2, 1, 0, -1});
    int yh = val("y_h", APX_VAL_ACTIVATION, dt, {1, 1, 2, 2});
    int y = val("y", APX_VAL_ACTIVATION, APX_DT_F32, {1, 1, 2, 2});
    cast("x_cast", x, xh, dt);
    conv = node(APX_OP_Conv, "conv", {xh, w}, {yh});
    loaded(conv, 0, {});
    g.nodes[conv].compute = dt;
    g.nodes[conv].reason_detail = "default: O2 runs float ops in the half type";
    g.nodes[conv].note = "tensor cores: C=1 not a multiple of 8";
    cast("y_cast", yh, y, APX_DT_F32);
    if (reduce_mean) {
      int m = val("m", APX_VAL_ACTIVATION, APX_DT_F32, {1, 1, 1, 1});
      int rm = node(APX_OP_ReduceMean, "rm", {y}, {m});
      loaded(rm, 1, {ints_attr("axes", {2, 3})});
      output(m);
    } else {
      output(y);
    }
    g.loss = -1;
  }
};

TEST(EmitOnnx, Bf16ConvRaisesTheOpsetToTheFirstWithBf16Conv) {
  ConvGraph t(APX_DT_BF16, false);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_EQ(m.m->opset_import[0]->version, 22);  // Conv admits tensor(bfloat16) from opset 22
  EXPECT_EQ(m.m->ir_version, 10);
  EXPECT_NE(std::string(m.m->doc_string).find("raised from 17 to 22 for bfloat16"), std::string::npos)
      << m.m->doc_string;
  EXPECT_EQ(m.node("conv")->input[0], std::string("x_h"));  // written in bf16 as decided
}

TEST(EmitOnnx, Fp16AndBf16GemmKeepTheModelsOpset) {
  ConvGraph t(APX_DT_F16, false);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_EQ(m.m->opset_import[0]->version, 17);
  MixedMlp b;
  for (int v : {b.xh, b.w, b.b, b.h, b.r}) b.g.vals[v].dtype = APX_DT_BF16;
  b.g.vals[b.w].data = apx_arena_alloc(&b.g.arena, 12 * 2);  // bf16 zeros
  b.g.vals[b.b].data = apx_arena_alloc(&b.g.arena, 3 * 2);
  APX_NODE_ATTRS(&b.g, b.n_cast_in, ApxAttrCast)->to = APX_DT_BF16;
  ASSERT_EQ(apx_graph_toposort(&b.g, &b.d), 0);
  Model mb(b);
  ASSERT_NE(mb.m, nullptr) << b.d.msg;
  EXPECT_EQ(mb.m->opset_import[0]->version, 17);  // Gemm and Relu admit bf16 at 13/14
}

TEST(EmitOnnx, Bf16ConvBesideAnOldFormReduceMeanIsWrittenAsFp32Compute) {
  ConvGraph t(APX_DT_BF16, true);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  // ReduceMean's axes attribute is an input from opset 18: the opset stays 17, so the Conv
  // (bf16 only from 22) computes in fp32 between Casts
  EXPECT_EQ(m.m->opset_import[0]->version, 17);
  const Onnx__NodeProto *conv = m.node("conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(std::string(conv->input[0]), "conv__apx_fp32_in0");
  EXPECT_EQ(std::string(conv->input[1]), "conv__apx_fp32_in1");
  EXPECT_EQ(std::string(conv->output[0]), "conv__apx_fp32_out0");
  const Onnx__NodeProto *widen = m.node("conv__apx_widen_in0"), *narrow = m.node("conv__apx_narrow_out0");
  ASSERT_NE(widen, nullptr);
  ASSERT_NE(narrow, nullptr);
  EXPECT_EQ(Model::attr(widen, "to")->i, 1);    // FLOAT
  EXPECT_EQ(Model::attr(narrow, "to")->i, 16);  // BFLOAT16
  EXPECT_EQ(std::string(narrow->output[0]), "y_h");
  std::string doc = conv->doc_string;
  EXPECT_NE(doc.find("apexc: bf16 (default: O2 runs float ops in the half type)"), std::string::npos) << doc;
  EXPECT_NE(doc.find("admits bfloat16 from opset 22, but the model's ReduceMean 'rm' is valid only up to "
                     "opset 17 (its axes attribute becomes an input)"),
            std::string::npos)
      << doc;
  // the nodes are in a valid order: widen, conv, narrow
  size_t iw = 0, ic = 0, in = 0;
  for (size_t i = 0; i < m.m->graph->n_node; i++) {
    if (m.m->graph->node[i] == widen) iw = i;
    if (m.m->graph->node[i] == conv) ic = i;
    if (m.m->graph->node[i] == narrow) in = i;
  }
  EXPECT_LT(iw, ic);
  EXPECT_LT(ic, in);
}

TEST(EmitOnnx, EveryNodeCarriesItsDecisionInDocString) {
  ConvGraph t(APX_DT_F16, false);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_STREQ(m.node("conv")->doc_string,
               "apexc: fp16 (default: O2 runs float ops in the half type); note: tensor cores: C=1 not a "
               "multiple of 8");
  for (size_t i = 0; i < m.m->graph->n_node; i++)
    EXPECT_EQ(std::string(m.m->graph->node[i]->doc_string).rfind("apexc", 0), 0u) << m.m->graph->node[i]->name;
}

TEST(EmitOnnx, IrVersionAdmitsTheOpset) {
  MixedMlp t;
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  t.g.opset = 21;
  Model m(t);
  ASSERT_NE(m.m, nullptr) << t.d.msg;
  EXPECT_EQ(m.m->ir_version, 10);
  EXPECT_EQ(m.m->opset_import[0]->version, 21);
}

}  // namespace
