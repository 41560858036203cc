// model_blob_test.cc - the embedded model without the initializers the plan restores: the
// wire-format walk gives the model protobuf-c would give after emptying exactly those
// initializers' data fields (compared after a normalizing unpack + pack), keeps every other
// byte, and leaves a model it does not restore anything of as it is.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "onnx.pb-c.h"
#include "plan/model_blob.h"
#include "plan/plan.h"
}

namespace {

std::vector<uint8_t> Slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> Pack(const Onnx__ModelProto *m) {
  std::vector<uint8_t> b(onnx__model_proto__get_packed_size(m));
  onnx__model_proto__pack(m, b.data());
  return b;
}

// A plan with one fp32 PARAM buffer per initializer of m whose index is in `keep` (the
// others are not in the plan, so they stay in the model).
void PlanFor(const Onnx__ModelProto *m, const std::vector<size_t> &keep, ApxPlan *p) {
  apx_plan_init(p);
  ApxPlanBuffer *b = apx_plan_alloc_buffers(p, (int32_t)keep.size());
  for (size_t k = 0; k < keep.size(); k++) {
    const Onnx__TensorProto *t = m->graph->initializer[keep[k]];
    b[k].name = t->name;
    b[k].kind = APX_VAL_PARAM;
    b[k].dtype = APX_DT_F32;
    b[k].rank = (int32_t)t->n_dims;
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; i++) b[k].dims[i] = t->dims[i], n *= t->dims[i];
    b[k].bytes = 4 * n;
    b[k].region = APX_MEM_PERSISTENT;
  }
  apx_plan_index(p);
}

TEST(ModelBlob, WireStripEqualsEmptyingTheRestoredInitializers) {
  std::vector<uint8_t> model = Slurp("examples/mlp/model.onnx");
  ASSERT_GT(model.size(), 1000u);
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, model.size(), model.data());
  ASSERT_NE(m, nullptr);
  ASSERT_GE(m->graph->n_initializer, 3u);
  std::vector<size_t> keep;  // every initializer but the last one
  for (size_t i = 0; i + 1 < m->graph->n_initializer; i++) keep.push_back(i);
  ApxPlan p;
  PlanFor(m, keep, &p);
  ApxArena a;
  apx_arena_init(&a);
  const void *out;
  size_t out_len;
  ASSERT_EQ(apx_model_blob_strip(&p, model.data(), model.size(), &a, &out, &out_len), 0);
  EXPECT_LT(out_len, model.size() / 2);
  Onnx__ModelProto *s = onnx__model_proto__unpack(nullptr, out_len, (const uint8_t *)out);
  ASSERT_NE(s, nullptr);
  for (size_t i : keep) {  // what protobuf-c gives with those data fields emptied
    Onnx__TensorProto *t = m->graph->initializer[i];
    t->has_raw_data = 0;
    t->raw_data.len = 0;
    t->n_float_data = 0;
  }
  EXPECT_TRUE(Pack(m) == Pack(s));
  const Onnx__TensorProto *last = s->graph->initializer[s->graph->n_initializer - 1];
  EXPECT_GT(last->raw_data.len + last->n_float_data, 0u) << "an initializer the plan lacks lost its data";
  onnx__model_proto__free_unpacked(s, nullptr);
  onnx__model_proto__free_unpacked(m, nullptr);
  apx_arena_free(&a);
  apx_plan_free(&p);
}

TEST(ModelBlob, NothingRestoredKeepsTheModelAndGarbageIsNotParsed) {
  std::vector<uint8_t> model = Slurp("examples/mlp/model.onnx");
  ApxPlan p;
  apx_plan_init(&p);
  ApxArena a;
  apx_arena_init(&a);
  const void *out;
  size_t out_len;
  ASSERT_EQ(apx_model_blob_strip(&p, model.data(), model.size(), &a, &out, &out_len), 0);
  EXPECT_EQ(out, (const void *)model.data());
  EXPECT_EQ(out_len, model.size());
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x07};  // not protobuf
  ASSERT_EQ(apx_model_blob_strip(&p, junk, sizeof junk, &a, &out, &out_len), 0);
  EXPECT_EQ(out, (const void *)junk);
  apx_arena_free(&a);
  apx_plan_free(&p);
}

}  // namespace
