// onnx_load_test.cc - the ONNX loader against its contract (onnx_load.h): tensors of every
// dtype from raw_data and typed fields, initializers vs inputs, Constant nodes, external data,
// --dim/--frozen/--loss, out-of-order graphs, versions, the bad-input corpus
// (tests/corpus/bad/MANIFEST.tsv), every ONNX node-test model, tensor files, and load time
// of a 100k-node model. Models are built here with the protobuf-c structs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" {
#include "compiler/onnx_load.h"
#include "compiler/onnx_wire.h"
#include "ir/infer.h"
#include "kernels/half.h"
#include "onnx.pb-c.h"
}

namespace {

// ---- protobuf-c model builder ----------------------------------------------------------

// Owns every struct and array the builder hands to protobuf-c.
class Pool {
 public:
  ~Pool() {
    for (auto it = frees_.rbegin(); it != frees_.rend(); ++it) (*it)();
  }
  template <class T>
  T *make() {
    T *p = new T();
    frees_.push_back([p] { delete p; });
    return p;
  }
  template <class T>
  T *arr(const std::vector<T> &v) {
    T *p = new T[v.size() + 1]();
    for (size_t i = 0; i < v.size(); i++) p[i] = v[i];
    frees_.push_back([p] { delete[] p; });
    return p;
  }
  char *str(const std::string &s) {
    strs_.push_back(s);
    return const_cast<char *>(strs_.back().c_str());
  }

 private:
  std::vector<std::function<void()>> frees_;
  std::deque<std::string> strs_;
};

// A dim: numeric (>= 0), symbolic (param non-empty), or absent (value -1, empty param).
struct Dim {
  int64_t value;
  std::string param;
  Dim(int64_t v) : value(v) {}  // NOLINT
  Dim(const char *p) : value(-1), param(p) {}  // NOLINT
  static Dim none() { return Dim(int64_t(-1)); }
};

struct Model {
  Pool pool;
  Onnx__ModelProto m;
  Onnx__GraphProto gr;
  std::vector<Onnx__OperatorSetIdProto *> opsets;
  std::vector<Onnx__NodeProto *> nodes;
  std::vector<Onnx__TensorProto *> inits;
  std::vector<Onnx__ValueInfoProto *> inputs, outputs, value_info;
  std::vector<Onnx__StringStringEntryProto *> metadata;

  explicit Model(int64_t ir = 8, int64_t opset = 17) {
    onnx__model_proto__init(&m);
    onnx__graph_proto__init(&gr);
    m.has_ir_version = 1;
    m.ir_version = ir;
    add_opset("", opset);
    gr.name = pool.str("g");
  }
  void add_opset(const std::string &domain, int64_t v) {
    auto *o = pool.make<Onnx__OperatorSetIdProto>();
    onnx__operator_set_id_proto__init(o);
    o->domain = pool.str(domain);
    o->has_version = 1;
    o->version = v;
    opsets.push_back(o);
  }
  Onnx__NodeProto *node(const std::string &op, std::vector<std::string> in,
                        std::vector<std::string> out, const std::string &name = "",
                        std::vector<Onnx__AttributeProto *> attrs = {}) {
    auto *n = pool.make<Onnx__NodeProto>();
    onnx__node_proto__init(n);
    n->op_type = pool.str(op);
    n->name = pool.str(name);
    std::vector<char *> i, o;
    for (auto &s : in) i.push_back(pool.str(s));
    for (auto &s : out) o.push_back(pool.str(s));
    n->n_input = i.size();
    n->input = pool.arr(i);
    n->n_output = o.size();
    n->output = pool.arr(o);
    n->n_attribute = attrs.size();
    n->attribute = pool.arr(attrs);
    nodes.push_back(n);
    return n;
  }
  Onnx__TypeProto *tensor_type(int elem, const std::vector<Dim> *dims) {
    auto *tp = pool.make<Onnx__TypeProto>();
    onnx__type_proto__init(tp);
    auto *tt = pool.make<Onnx__TypeProto__Tensor>();
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    if (dims) {
      auto *sh = pool.make<Onnx__TensorShapeProto>();
      onnx__tensor_shape_proto__init(sh);
      std::vector<Onnx__TensorShapeProto__Dimension *> ds;
      for (const Dim &d : *dims) {
        auto *dm = pool.make<Onnx__TensorShapeProto__Dimension>();
        onnx__tensor_shape_proto__dimension__init(dm);
        if (!d.param.empty()) {
          dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
          dm->dim_param = pool.str(d.param);
        } else if (d.value >= 0) {
          dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
          dm->dim_value = d.value;
        }
        ds.push_back(dm);
      }
      sh->n_dim = ds.size();
      sh->dim = pool.arr(ds);
      tt->shape = sh;
    }
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    return tp;
  }
  Onnx__ValueInfoProto *vi(const std::string &name, int elem, std::vector<Dim> dims,
                           bool shaped = true) {
    auto *v = pool.make<Onnx__ValueInfoProto>();
    onnx__value_info_proto__init(v);
    v->name = pool.str(name);
    v->type = tensor_type(elem, shaped ? &dims : nullptr);
    return v;
  }
  void input(const std::string &n, std::vector<Dim> dims, int elem = APX_DT_F32) {
    inputs.push_back(vi(n, elem, dims));
  }
  void output(const std::string &n, std::vector<Dim> dims = {}, int elem = APX_DT_F32) {
    outputs.push_back(vi(n, elem, dims, false));
  }
  Onnx__TensorProto *tensor(const std::string &name, int dt, std::vector<int64_t> dims) {
    auto *t = pool.make<Onnx__TensorProto>();
    onnx__tensor_proto__init(t);
    t->name = pool.str(name);
    t->has_data_type = 1;
    t->data_type = dt;
    t->n_dims = dims.size();
    t->dims = pool.arr(dims);
    return t;
  }
  void raw(Onnx__TensorProto *t, const std::string &bytes) {
    t->has_raw_data = 1;
    t->raw_data.len = bytes.size();
    t->raw_data.data = reinterpret_cast<uint8_t *>(pool.str(bytes));
  }
  Onnx__TensorProto *init_raw(const std::string &name, int dt, std::vector<int64_t> dims,
                              const std::string &bytes) {
    auto *t = tensor(name, dt, dims);
    raw(t, bytes);
    inits.push_back(t);
    return t;
  }
  void external(Onnx__TensorProto *t, std::vector<std::pair<std::string, std::string>> kv) {
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    std::vector<Onnx__StringStringEntryProto *> es;
    for (auto &p : kv) {
      auto *e = pool.make<Onnx__StringStringEntryProto>();
      onnx__string_string_entry_proto__init(e);
      e->key = pool.str(p.first);
      e->value = pool.str(p.second);
      es.push_back(e);
    }
    t->n_external_data = es.size();
    t->external_data = pool.arr(es);
  }
  void meta(const std::string &key, const std::string &value) {  // metadata_props entry
    auto *e = pool.make<Onnx__StringStringEntryProto>();
    onnx__string_string_entry_proto__init(e);
    e->key = pool.str(key);
    e->value = pool.str(value);
    metadata.push_back(e);
  }
  Onnx__AttributeProto *attr(const std::string &name, Onnx__AttributeProto__AttributeType type) {
    auto *a = pool.make<Onnx__AttributeProto>();
    onnx__attribute_proto__init(a);
    a->name = pool.str(name);
    a->has_type = 1;
    a->type = type;
    return a;
  }
  Onnx__AttributeProto *attr_f(const std::string &name, float f) {
    auto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = f;
    return a;
  }
  Onnx__AttributeProto *attr_i(const std::string &name, int64_t i) {
    auto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = i;
    return a;
  }
  Onnx__AttributeProto *attr_s(const std::string &name, const std::string &s) {
    auto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = s.size();
    a->s.data = reinterpret_cast<uint8_t *>(pool.str(s));
    return a;
  }
  Onnx__AttributeProto *attr_ints(const std::string &name, std::vector<int64_t> v) {
    auto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = v.size();
    a->ints = pool.arr(v);
    return a;
  }
  Onnx__AttributeProto *attr_floats(const std::string &name, std::vector<float> v) {
    auto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a->n_floats = v.size();
    a->floats = pool.arr(v);
    return a;
  }
  Onnx__AttributeProto *attr_t(const std::string &name, Onnx__TensorProto *t) {
    auto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = t;
    return a;
  }
  std::string bytes() {
    m.n_opset_import = opsets.size();
    m.opset_import = pool.arr(opsets);
    gr.n_node = nodes.size();
    gr.node = pool.arr(nodes);
    gr.n_initializer = inits.size();
    gr.initializer = pool.arr(inits);
    gr.n_input = inputs.size();
    gr.input = pool.arr(inputs);
    gr.n_output = outputs.size();
    gr.output = pool.arr(outputs);
    m.n_metadata_props = metadata.size();
    m.metadata_props = pool.arr(metadata);
    gr.n_value_info = value_info.size();
    gr.value_info = pool.arr(value_info);
    m.graph = &gr;
    std::string s(onnx__model_proto__get_packed_size(&m), '\0');
    onnx__model_proto__pack(&m, reinterpret_cast<uint8_t *>(&s[0]));
    return s;
  }
};

// ---- loading helpers --------------------------------------------------------------------

struct Loaded {
  ApxGraph g;
  ApxDiag d;
  int rc;
  Loaded() {
    apx_graph_init(&g, "m.onnx");
    apx_diag_init(&d);
    d.quiet = 1;
  }
  ~Loaded() { apx_graph_free(&g); }
  const ApxValue *val(const char *name) const {
    int v = apx_graph_find_value(&g, name);
    return v < 0 ? nullptr : &g.vals[v];
  }
  int node(const char *name) const {
    for (int i = 0; i < g.n_nodes; i++)
      if (strcmp(g.nodes[i].name, name) == 0) return i;
    return -1;
  }
};

ApxOptions default_options() {
  ApxOptions o;
  apx_options_init(&o);
  return o;
}

std::unique_ptr<Loaded> load(Model &m, const ApxOptions *o = nullptr, const char *base = nullptr) {
  auto L = std::make_unique<Loaded>();
  std::string b = m.bytes();
  L->rc = apx_onnx_load_memory(&L->g, b.data(), b.size(), base, o, &L->d);
  return L;
}

std::unique_ptr<Loaded> load_file(const std::string &path, const ApxOptions *o = nullptr) {
  auto L = std::make_unique<Loaded>();
  apx_graph_free(&L->g);
  apx_graph_init(&L->g, path.c_str());
  L->rc = apx_onnx_load_file(&L->g, path.c_str(), o, &L->d);
  return L;
}

#define EXPECT_LOADS(L)                                    \
  do {                                                     \
    ASSERT_EQ((L)->rc, 0) << (L)->d.msg;                   \
    ApxDiag vd_;                                           \
    apx_diag_init(&vd_);                                   \
    EXPECT_EQ(apx_graph_verify(&(L)->g, &vd_), 0) << vd_.msg; \
  } while (0)

#define EXPECT_REJECTS(L, substr)                                              \
  do {                                                                         \
    EXPECT_EQ((L)->rc, -1);                                                    \
    EXPECT_EQ((L)->d.code, APX_EXIT_BAD_INPUT) << (L)->d.msg;                  \
    EXPECT_NE(std::string((L)->d.msg).find(substr), std::string::npos)         \
        << "message: " << (L)->d.msg << "\nexpected to contain: " << (substr); \
  } while (0)

std::string temp_dir() {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/onnx_load_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return "";
  return std::string(buf.data());
}

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), (std::streamsize)bytes.size());
}

std::string read_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <class T>
std::string le_bytes(const std::vector<T> &v) {  // host is little-endian (x86-64, aarch64)
  return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

// ---- tensors of every dtype -------------------------------------------------------------

struct DtypeCase {
  ApxDType dt;
  std::string bytes;  // expected payload for dims [2,3]
};

std::vector<DtypeCase> dtype_cases() {
  std::vector<DtypeCase> c;
  c.push_back({APX_DT_F32, le_bytes(std::vector<float>{1.5f, -2, 0, 3.25f, 1e-3f, -1e9f})});
  c.push_back({APX_DT_F64, le_bytes(std::vector<double>{1.5, -2, 0, 3.25, 1e-300, -1e300})});
  std::vector<uint16_t> h, bh;
  for (float f : {1.0f, -2.0f, 0.5f, 65504.0f, 0.0f, -0.25f}) {
    h.push_back(apx_f32_to_f16(f));
    bh.push_back(apx_f32_to_bf16(f));
  }
  c.push_back({APX_DT_F16, le_bytes(h)});
  c.push_back({APX_DT_BF16, le_bytes(bh)});
  c.push_back({APX_DT_I8, le_bytes(std::vector<int8_t>{-128, -1, 0, 1, 2, 127})});
  c.push_back({APX_DT_U8, le_bytes(std::vector<uint8_t>{0, 1, 2, 3, 254, 255})});
  c.push_back({APX_DT_I16, le_bytes(std::vector<int16_t>{-32768, -1, 0, 1, 2, 32767})});
  c.push_back({APX_DT_U16, le_bytes(std::vector<uint16_t>{0, 1, 2, 3, 65534, 65535})});
  c.push_back({APX_DT_I32, le_bytes(std::vector<int32_t>{INT32_MIN, -1, 0, 1, 2, INT32_MAX})});
  c.push_back({APX_DT_U32, le_bytes(std::vector<uint32_t>{0, 1, 2, 3, 4000000000u, UINT32_MAX})});
  c.push_back({APX_DT_I64, le_bytes(std::vector<int64_t>{INT64_MIN, -1, 0, 1, 1LL << 40, INT64_MAX})});
  c.push_back({APX_DT_U64, le_bytes(std::vector<uint64_t>{0, 1, 2, 3, 1ULL << 63, UINT64_MAX})});
  c.push_back({APX_DT_BOOL, le_bytes(std::vector<uint8_t>{1, 0, 0, 1, 1, 0})});
  return c;
}

// Fills t's typed field from the expected little-endian payload (the field ONNX prescribes).
void set_typed(Model &m, Onnx__TensorProto *t, ApxDType dt, const std::string &b) {
  auto elems = [&](size_t es) { return b.size() / es; };
  auto get = [&](size_t i, auto tag) {
    decltype(tag) v;
    memcpy(&v, b.data() + i * sizeof v, sizeof v);
    return v;
  };
  switch (dt) {
    case APX_DT_F32: {
      std::vector<float> v;
      for (size_t i = 0; i < elems(4); i++) v.push_back(get(i, float()));
      t->n_float_data = v.size();
      t->float_data = m.pool.arr(v);
      break;
    }
    case APX_DT_F64: {
      std::vector<double> v;
      for (size_t i = 0; i < elems(8); i++) v.push_back(get(i, double()));
      t->n_double_data = v.size();
      t->double_data = m.pool.arr(v);
      break;
    }
    case APX_DT_I64: {
      std::vector<int64_t> v;
      for (size_t i = 0; i < elems(8); i++) v.push_back(get(i, int64_t()));
      t->n_int64_data = v.size();
      t->int64_data = m.pool.arr(v);
      break;
    }
    case APX_DT_U32: {
      std::vector<uint64_t> v;
      for (size_t i = 0; i < elems(4); i++) v.push_back(get(i, uint32_t()));
      t->n_uint64_data = v.size();
      t->uint64_data = m.pool.arr(v);
      break;
    }
    case APX_DT_U64: {
      std::vector<uint64_t> v;
      for (size_t i = 0; i < elems(8); i++) v.push_back(get(i, uint64_t()));
      t->n_uint64_data = v.size();
      t->uint64_data = m.pool.arr(v);
      break;
    }
    default: {  // int32_data: int32, 16-bit patterns (fp16/bf16/int16/uint16), 8-bit, bool
      std::vector<int32_t> v;
      size_t es = apx_dtype_size(dt);
      for (size_t i = 0; i < elems(es); i++) {
        if (dt == APX_DT_I32) v.push_back(get(i, int32_t()));
        else if (dt == APX_DT_I16) v.push_back(get(i, int16_t()));
        else if (dt == APX_DT_I8) v.push_back(get(i, int8_t()));
        else if (es == 2) v.push_back(get(i, uint16_t()));
        else v.push_back(get(i, uint8_t()));
      }
      t->n_int32_data = v.size();
      t->int32_data = m.pool.arr(v);
    }
  }
}

void check_tensor_value(const Loaded &L, const DtypeCase &c) {
  const ApxValue *w = L.val("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, c.dt) << apx_dtype_name(c.dt);
  EXPECT_EQ(w->kind, apx_dtype_is_float(c.dt) ? APX_VAL_PARAM : APX_VAL_CONST);
  ASSERT_EQ(w->rank, 2);
  EXPECT_EQ(w->dims[0], 2);
  EXPECT_EQ(w->dims[1], 3);
  EXPECT_EQ(w->producer, -1);
  ASSERT_NE(w->data, nullptr);
  EXPECT_EQ(std::string(static_cast<const char *>(w->data), c.bytes.size()), c.bytes)
      << apx_dtype_name(c.dt);
}

TEST(OnnxLoad, EveryDtypeFromRawData) {
  for (const DtypeCase &c : dtype_cases()) {
    Model m;
    m.init_raw("w", c.dt, {2, 3}, c.bytes);
    m.node("Identity", {"w"}, {"y"});
    m.output("y");
    auto L = load(m);
    EXPECT_LOADS(L);
    check_tensor_value(*L, c);
  }
}

TEST(OnnxLoad, EveryDtypeFromTypedFields) {
  for (const DtypeCase &c : dtype_cases()) {
    Model m;
    auto *t = m.tensor("w", c.dt, {2, 3});
    set_typed(m, t, c.dt, c.bytes);
    m.inits.push_back(t);
    m.node("Identity", {"w"}, {"y"});
    m.output("y");
    auto L = load(m);
    EXPECT_LOADS(L);
    check_tensor_value(*L, c);
  }
}

TEST(OnnxLoad, TypedFieldCountMustMatchDims) {
  Model m;
  auto *t = m.tensor("w", APX_DT_I64, {2, 3});
  set_typed(m, t, APX_DT_I64, le_bytes(std::vector<int64_t>{1, 2, 3, 4, 5}));
  m.inits.push_back(t);
  m.node("Identity", {"w"}, {"y"});
  m.output("y");
  auto L = load(m);
  EXPECT_REJECTS(L, "m.onnx: initializer 'w': int64_data has 5 elements, dims [2,3] (int64) need 6");
}

TEST(OnnxLoad, ScalarAndEmptyTensors) {
  Model m;
  m.init_raw("s", APX_DT_F32, {}, le_bytes(std::vector<float>{4.0f}));
  m.init_raw("e", APX_DT_I64, {0, 3}, "");
  m.node("Add", {"s", "s"}, {"y"});
  m.node("Identity", {"e"}, {"z"});
  m.output("y");
  m.output("z");
  auto L = load(m);
  EXPECT_LOADS(L);
  EXPECT_EQ(L->val("s")->rank, 0);
  EXPECT_EQ(apx_value_numel(L->val("s")), 1);
  EXPECT_EQ(*static_cast<const float *>(L->val("s")->data), 4.0f);
  EXPECT_EQ(apx_value_numel(L->val("e")), 0);
}

TEST(OnnxLoad, RawDataLengthMustMatchExactly) {
  for (int n : {20, 28}) {
    Model m;
    m.init_raw("w", APX_DT_F32, {2, 3}, std::string(n, '\0'));
    m.node("Identity", {"w"}, {"y"});
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: initializer 'w': raw_data has " + std::to_string(n) +
                          " bytes, dims [2,3] (float32) need 24 bytes");
  }
}

TEST(OnnxLoad, BadDimsAreRejected) {
  struct Case {
    std::vector<int64_t> dims;
    const char *msg;
  } cases[] = {
      {{-1, 3}, "negative dim -1 at axis 0"},
      {{1 << 20, 1 << 20, 2}, "absurd dims [1048576,1048576,2] (more than 2^40 elements)"},
      {{INT64_MAX, INT64_MAX}, "absurd dims"},
      {{1, 1, 1, 1, 1, 1, 1, 1, 1}, "rank 9 is more than 8"},
  };
  for (auto &c : cases) {
    Model m;
    m.init_raw("w", APX_DT_F32, c.dims, "");
    m.node("Identity", {"w"}, {"y"});
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, c.msg);
  }
}

// ---- values: initializers, inputs, outputs ----------------------------------------------

TEST(OnnxLoad, InitializerListedAsInputIsTheInitializer) {
  Model m(3, 9);  // IR 3 lists initializers among the graph inputs
  m.input("x", {2, 3});
  m.input("w", {2, 3});
  m.init_raw("w", APX_DT_F32, {2, 3}, std::string(24, '\0'));
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y");
  ApxOptions o = default_options();
  o.ir_version_min = 3;
  o.opset_min = 7;
  auto L = load(m, &o);
  EXPECT_LOADS(L);
  ASSERT_EQ(L->g.n_inputs, 1);
  EXPECT_EQ(L->g.inputs[0], apx_graph_find_value(&L->g, "x"));
  EXPECT_EQ(L->val("x")->kind, APX_VAL_INPUT);
  EXPECT_EQ(L->val("w")->kind, APX_VAL_PARAM);
  EXPECT_EQ(L->val("w")->onnx_index, 0);
  EXPECT_EQ(L->g.ir_version, 3);
  EXPECT_EQ(L->g.opset, 9);
}

TEST(OnnxLoad, InputsKeepOrderDtypeAndShape) {
  Model m;
  m.input("b", {4}, APX_DT_I64);
  m.input("a", {2, Dim::none(), 5}, APX_DT_F16);
  m.node("Cast", {"b"}, {"bf"}, "", {m.attr_i("to", 10)});
  m.node("Add", {"a", "bf"}, {"y"});
  m.output("y");
  auto L = load(m);
  EXPECT_LOADS(L);
  ASSERT_EQ(L->g.n_inputs, 2);
  const ApxValue *b = &L->g.vals[L->g.inputs[0]];
  const ApxValue *a = &L->g.vals[L->g.inputs[1]];
  EXPECT_STREQ(b->name, "b");
  EXPECT_EQ(b->dtype, APX_DT_I64);
  EXPECT_EQ(b->onnx_index, 0);
  EXPECT_STREQ(a->name, "a");
  EXPECT_EQ(a->onnx_index, 1);
  EXPECT_EQ(a->dtype, APX_DT_F16);
  ASSERT_EQ(a->rank, 3);
  EXPECT_EQ(a->dims[0], 2);
  EXPECT_EQ(a->dims[1], -1);  // missing dim
  EXPECT_EQ(a->dims[2], 5);
  EXPECT_EQ(a->dim_params, nullptr);
  EXPECT_FALSE(a->flags & APX_VALF_SHAPE_KNOWN);
  EXPECT_TRUE(b->flags & APX_VALF_SHAPE_KNOWN);
}

TEST(OnnxLoad, SymbolicDimsBoundByDimOrLeftUnknown) {
  Model m;
  m.input("x", {"batch", "seq", 16});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  ApxOptions o = default_options();
  o.n_dims = 1;
  o.dim_names[0] = "batch";
  o.dim_values[0] = 32;
  auto L = load(m, &o);
  EXPECT_LOADS(L);
  const ApxValue *x = L->val("x");
  ASSERT_EQ(x->rank, 3);
  EXPECT_EQ(x->dims[0], 32);
  EXPECT_EQ(x->dims[1], -1);
  EXPECT_EQ(x->dims[2], 16);
  ASSERT_NE(x->dim_params, nullptr);
  EXPECT_EQ(x->dim_params[0], nullptr);
  EXPECT_STREQ(x->dim_params[1], "seq");
  EXPECT_EQ(x->dim_params[2], nullptr);
  char buf[64];
  EXPECT_STREQ(apx_value_shape_str(x, buf, sizeof buf), "[32,seq,16]");

  o.n_dims = 2;
  o.dim_names[1] = "seq";
  o.dim_values[1] = 128;
  auto L2 = load(m, &o);
  EXPECT_LOADS(L2);
  EXPECT_EQ(L2->val("x")->dims[1], 128);
  EXPECT_TRUE(L2->val("x")->flags & APX_VALF_SHAPE_KNOWN);
}

TEST(OnnxLoad, NonTensorInputsAreRejected) {
  Model m;
  auto *v = m.pool.make<Onnx__ValueInfoProto>();
  onnx__value_info_proto__init(v);
  v->name = m.pool.str("s");
  auto *tp = m.pool.make<Onnx__TypeProto>();
  onnx__type_proto__init(tp);
  auto *mt = m.pool.make<Onnx__TypeProto__Map>();
  onnx__type_proto__map__init(mt);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
  tp->map_type = mt;
  v->type = tp;
  m.inputs.push_back(v);
  m.node("Identity", {"s"}, {"y"});
  m.output("y");
  auto L = load(m);
  EXPECT_REJECTS(L, "m.onnx: graph input 's': map types are not supported");
}

TEST(OnnxLoad, FrozenInitializersAreConstants) {
  Model m;
  m.input("x", {2});
  m.init_raw("w", APX_DT_F32, {2}, std::string(8, '\0'));
  m.init_raw("b", APX_DT_F32, {2}, std::string(8, '\0'));
  m.init_raw("i", APX_DT_I64, {1}, std::string(8, '\0'));
  m.node("Mul", {"x", "w"}, {"t"});
  m.node("Add", {"t", "b"}, {"y"});
  m.node("Identity", {"i"}, {"z"});
  m.output("y");
  m.output("z");
  ApxOptions o = default_options();
  o.frozen.n = 1;
  o.frozen.items[0] = "b";
  auto L = load(m, &o);
  EXPECT_LOADS(L);
  EXPECT_EQ(L->val("w")->kind, APX_VAL_PARAM);
  EXPECT_FALSE(L->val("w")->flags & APX_VALF_FROZEN);
  EXPECT_EQ(L->val("b")->kind, APX_VAL_CONST);
  EXPECT_TRUE(L->val("b")->flags & APX_VALF_FROZEN);
  EXPECT_EQ(L->val("i")->kind, APX_VAL_CONST);
  EXPECT_FALSE(L->val("i")->flags & APX_VALF_FROZEN);

  o.frozen.items[0] = "nope";
  auto L2 = load(m, &o);
  EXPECT_REJECTS(L2, "m.onnx: --frozen 'nope': no such initializer");
}

TEST(OnnxLoad, LossIsFirstOutputOrNamed) {
  Model m;
  m.input("x", {2});
  m.node("Relu", {"x"}, {"a"});
  m.node("Neg", {"a"}, {"b"});
  m.output("b");
  m.output("a");
  auto L = load(m);
  EXPECT_LOADS(L);
  ASSERT_EQ(L->g.n_outputs, 2);
  EXPECT_EQ(L->g.outputs[0], apx_graph_find_value(&L->g, "b"));
  EXPECT_EQ(L->g.outputs[1], apx_graph_find_value(&L->g, "a"));
  EXPECT_EQ(L->g.loss, L->g.outputs[0]);
  EXPECT_TRUE(L->val("b")->flags & APX_VALF_LOSS);
  EXPECT_TRUE(L->val("a")->flags & APX_VALF_GRAPH_OUTPUT);
  EXPECT_FALSE(L->val("a")->flags & APX_VALF_LOSS);

  ApxOptions o = default_options();
  o.loss_name = "a";
  auto L2 = load(m, &o);
  EXPECT_LOADS(L2);
  EXPECT_EQ(L2->g.loss, apx_graph_find_value(&L2->g, "a"));
  EXPECT_TRUE(L2->val("a")->flags & APX_VALF_LOSS);
  EXPECT_FALSE(L2->val("b")->flags & APX_VALF_LOSS);

  o.loss_name = "zz";
  auto L3 = load(m, &o);
  EXPECT_REJECTS(L3, "m.onnx: --loss 'zz': no such value");
}

TEST(OnnxLoad, ValueInfoAndOutputTypesAreHints) {
  Model m;
  m.input("x", {2, 3});
  m.node("Relu", {"x"}, {"a"});
  m.node("Neg", {"a"}, {"y"});
  m.value_info.push_back(m.vi("a", APX_DT_F32, {2, 3}));
  m.value_info.push_back(m.vi("ghost", APX_DT_F32, {1}));  // names nothing: ignored
  m.outputs.push_back(m.vi("y", APX_DT_F32, {"n", 3}));
  auto L = load(m);
  EXPECT_LOADS(L);
  const ApxValue *a = L->val("a");
  EXPECT_EQ(a->kind, APX_VAL_ACTIVATION);
  EXPECT_EQ(a->dtype, APX_DT_F32);
  ASSERT_EQ(a->rank, 2);
  EXPECT_EQ(a->dims[1], 3);
  const ApxValue *y = L->val("y");
  ASSERT_EQ(y->rank, 2);
  EXPECT_EQ(y->dims[0], -1);
  EXPECT_STREQ(y->dim_params[0], "n");
  EXPECT_EQ(L->val("ghost"), nullptr);
}

// ---- nodes ------------------------------------------------------------------------------

TEST(OnnxLoad, OutOfOrderNodesAreSorted) {
  Model m;
  m.input("x", {2});
  m.node("Neg", {"b"}, {"y"}, "third");
  m.node("Relu", {"a"}, {"b"}, "second");
  m.node("Sigmoid", {"x"}, {"a"}, "first");
  m.output("y");
  auto L = load(m);
  EXPECT_LOADS(L);
  ASSERT_EQ(L->g.n_order, 3);
  EXPECT_STREQ(L->g.nodes[L->g.order[0]].name, "first");
  EXPECT_STREQ(L->g.nodes[L->g.order[1]].name, "second");
  EXPECT_STREQ(L->g.nodes[L->g.order[2]].name, "third");
  EXPECT_EQ(L->g.nodes[L->node("first")].onnx_index, 2);
  EXPECT_EQ(L->val("a")->producer, L->node("first"));
}

TEST(OnnxLoad, NodesKeepProvenanceAndOptionalSlots) {
  Model m;
  m.input("x", {2, 3});
  m.node("Relu", {"x"}, {"r"});                  // unnamed -> Relu_0
  m.node("Dropout", {"r", "", ""}, {"y", ""});   // unnamed -> Dropout_1, empty names -> -1
  m.output("y");
  auto L = load(m);
  EXPECT_LOADS(L);
  int r = L->node("Relu_0"), dr = L->node("Dropout_1");
  ASSERT_GE(r, 0);
  ASSERT_GE(dr, 0);
  const ApxNode &n = L->g.nodes[dr];
  EXPECT_EQ(n.op, APX_OP_Dropout);
  EXPECT_STREQ(n.op_type, "Dropout");
  EXPECT_EQ(n.onnx_index, 1);
  ASSERT_EQ(n.n_in, 3);
  EXPECT_EQ(n.in[0], apx_graph_find_value(&L->g, "r"));
  EXPECT_EQ(n.in[1], -1);
  EXPECT_EQ(n.in[2], -1);
  ASSERT_EQ(n.n_out, 2);
  EXPECT_EQ(n.out[1], -1);
  EXPECT_EQ(L->val("r")->onnx_index, 0);
  EXPECT_NE(n.typed, nullptr);
}

TEST(OnnxLoad, GenericAttributesAreCopied) {
  Model m;
  m.input("a", {2, 3});
  m.input("b", {3, 4});
  auto *val = m.tensor("value", APX_DT_F32, {1});
  m.raw(val, le_bytes(std::vector<float>{7.0f}));
  m.init_raw("shape", APX_DT_I64, {1}, le_bytes(std::vector<int64_t>{4}));
  auto *strs = m.attr("names", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  std::vector<ProtobufCBinaryData> sv(2);
  sv[0].data = reinterpret_cast<uint8_t *>(m.pool.str("p"));
  sv[0].len = 1;
  sv[1].data = reinterpret_cast<uint8_t *>(m.pool.str("qr"));
  sv[1].len = 2;
  strs->n_strings = 2;
  strs->strings = m.pool.arr(sv);
  m.node("Gemm", {"a", "b"}, {"g"}, "gemm",
         {m.attr_f("alpha", 0.5f), m.attr_i("transB", 0), m.attr_s("mode", "fast"),
          m.attr_ints("perm", {1, 0, 2}), m.attr_floats("scales", {1.5f, 2.5f}), strs});
  m.node("ConstantOfShape", {"shape"}, {"c"}, "cos", {m.attr_t("value", val)});
  m.output("g");
  m.output("c");
  auto L = load(m);
  EXPECT_LOADS(L);
  int g = L->node("gemm");
  ASSERT_GE(g, 0);
  EXPECT_EQ(L->g.nodes[g].n_attrs, 6);
  const ApxAttr *alpha = apx_node_attr(&L->g, g, "alpha");
  ASSERT_NE(alpha, nullptr);
  EXPECT_EQ(alpha->type, APX_ATTR_FLOAT);
  EXPECT_EQ(alpha->f, 0.5f);
  const ApxAttr *tb = apx_node_attr(&L->g, g, "transB");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->type, APX_ATTR_INT);
  EXPECT_EQ(tb->i, 0);
  const ApxAttr *mode = apx_node_attr(&L->g, g, "mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->type, APX_ATTR_STRING);
  EXPECT_STREQ(mode->s, "fast");
  const ApxAttr *perm = apx_node_attr(&L->g, g, "perm");
  ASSERT_NE(perm, nullptr);
  EXPECT_EQ(perm->type, APX_ATTR_INTS);
  ASSERT_EQ(perm->n, 3);
  EXPECT_EQ(perm->ints[2], 2);
  const ApxAttr *sc = apx_node_attr(&L->g, g, "scales");
  ASSERT_NE(sc, nullptr);
  ASSERT_EQ(sc->n, 2);
  EXPECT_EQ(sc->floats[1], 2.5f);
  const ApxAttr *nm = apx_node_attr(&L->g, g, "names");
  ASSERT_NE(nm, nullptr);
  EXPECT_EQ(nm->type, APX_ATTR_STRINGS);
  ASSERT_EQ(nm->n, 2);
  EXPECT_STREQ(nm->strings[1], "qr");
  const ApxAttr *tv = apx_node_attr(&L->g, L->node("cos"), "value");
  ASSERT_NE(tv, nullptr);
  EXPECT_EQ(tv->type, APX_ATTR_TENSOR);
  ASSERT_NE(tv->t, nullptr);
  EXPECT_EQ(tv->t->dtype, APX_DT_F32);
  EXPECT_EQ(tv->t->rank, 1);
  EXPECT_EQ(*static_cast<const float *>(tv->t->data), 7.0f);
  EXPECT_EQ(L->val("shape")->kind, APX_VAL_CONST);
}

TEST(OnnxLoad, ConstantNodesBecomeConstValues) {
  Model m;
  auto *t = m.tensor("", APX_DT_I32, {3});
  m.raw(t, le_bytes(std::vector<int32_t>{1, 2, 3}));
  m.node("Constant", {}, {"ct"}, "k0", {m.attr_t("value", t)});
  m.node("Constant", {}, {"cf"}, "k1", {m.attr_f("value_float", 2.5f)});
  m.node("Constant", {}, {"cfs"}, "k2", {m.attr_floats("value_floats", {1, 2})});
  m.node("Constant", {}, {"ci"}, "k3", {m.attr_i("value_int", -7)});
  m.node("Constant", {}, {"cis"}, "k4", {m.attr_ints("value_ints", {4, 5, 6})});
  m.node("Identity", {"ct"}, {"y"});
  m.output("y");
  m.output("cf");
  m.output("cfs");
  m.output("ci");
  m.output("cis");
  auto L = load(m);
  EXPECT_LOADS(L);
  EXPECT_EQ(L->g.n_nodes, 1);  // Constants are values, not nodes
  const ApxValue *ct = L->val("ct");
  EXPECT_EQ(ct->kind, APX_VAL_CONST);
  EXPECT_EQ(ct->dtype, APX_DT_I32);
  EXPECT_EQ(ct->dims[0], 3);
  EXPECT_EQ(static_cast<const int32_t *>(ct->data)[2], 3);
  EXPECT_EQ(L->val("cf")->dtype, APX_DT_F32);
  EXPECT_EQ(L->val("cf")->rank, 0);
  EXPECT_EQ(*static_cast<const float *>(L->val("cf")->data), 2.5f);
  EXPECT_EQ(L->val("cfs")->rank, 1);
  EXPECT_EQ(L->val("cfs")->dims[0], 2);
  EXPECT_EQ(static_cast<const float *>(L->val("cfs")->data)[1], 2.0f);
  EXPECT_EQ(L->val("ci")->dtype, APX_DT_I64);
  EXPECT_EQ(*static_cast<const int64_t *>(L->val("ci")->data), -7);
  EXPECT_EQ(L->val("cis")->dims[0], 3);
  EXPECT_EQ(static_cast<const int64_t *>(L->val("cis")->data)[2], 6);
  EXPECT_EQ(L->g.loss, apx_graph_find_value(&L->g, "y"));
}

TEST(OnnxLoad, ConstantStringAndSparseAreNotSupportedYet) {
  for (const char *a : {"value_string", "value_strings", "sparse_value"}) {
    Model m;
    auto *at = m.attr(a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    at->has_s = 1;
    m.node("Constant", {}, {"c"}, "k", {at});
    m.node("Identity", {"c"}, {"y"});
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, std::string("m.onnx: node 'k' (Constant): not supported yet: Constant with "
                                  "attribute '") + a + "'");
  }
}

TEST(OnnxLoad, NodeErrorsNameNodeAndOp) {
  struct Case {
    std::string op, domain, msg;
  } cases[] = {
      {"Foo", "", "m.onnx: node 'n' (Foo): unknown op 'Foo' (apexc v1 supports"},
      {"Upsample", "", "m.onnx: node 'n' (Upsample): not supported yet: Upsample is a tier-2 op"},
      {"Reciprocal", "", "m.onnx: node 'n' (Reciprocal): not supported yet: Reciprocal"},
      {"ReluGrad", "", "m.onnx: node 'n' (ReluGrad): not supported yet: ReluGrad"},
      {"Relu", "com.example", "m.onnx: node 'n' (Relu): domain 'com.example' is not supported"},
      {"Loop", "", "m.onnx: node 'n' (Loop): control flow is not supported in v1"},
  };
  for (auto &c : cases) {
    Model m;
    m.input("x", {2});
    auto *n = m.node(c.op, {"x"}, {"y"}, "n");
    n->domain = m.pool.str(c.domain);
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, c.msg);
  }
  Model m;  // graph attribute on an op that is otherwise fine
  m.input("x", {2});
  auto *ga = m.attr("body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
  auto *sub = m.pool.make<Onnx__GraphProto>();
  onnx__graph_proto__init(sub);
  ga->g = sub;
  m.node("Relu", {"x"}, {"y"}, "n", {ga});
  m.output("y");
  auto L = load(m);
  EXPECT_REJECTS(L, "m.onnx: node 'n' (Relu): control flow is not supported in v1");
}

TEST(OnnxLoad, GraphStructureErrors) {
  {
    Model m;
    m.input("x", {2});
    m.node("Add", {"x", "q"}, {"y"}, "add");
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: node 'add' (Add) input 1: undefined value 'q'");
  }
  {
    Model m;
    m.input("x", {2});
    m.init_raw("x", APX_DT_F32, {2}, std::string(8, '\0'));  // ok: the initializer
    m.init_raw("w", APX_DT_F32, {2}, std::string(8, '\0'));
    m.init_raw("w", APX_DT_F32, {2}, std::string(8, '\0'));
    m.node("Relu", {"x"}, {"y"});
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: value 'w' is defined twice");
  }
  {
    Model m;
    m.input("x", {2});
    m.init_raw("w", APX_DT_F32, {2}, std::string(8, '\0'));
    m.node("Relu", {"x"}, {"w"});
    m.output("w");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: node 'Relu_0' (Relu): output 'w' is already an initializer");
  }
  {
    Model m;
    m.input("x", {2});
    m.node("Relu", {"y"}, {"z"}, "a");
    m.node("Relu", {"z"}, {"y"}, "b");
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, "(Relu): is part of a cycle");
  }
  {
    Model m;
    m.input("x", {2});
    m.output("x");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: graph has no nodes");
  }
  {
    Model m;
    m.input("x", {2});
    m.node("Relu", {"x"}, {"y"});
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: graph has no outputs");
  }
}

// A value defined twice: the message names the node that redefines it and what defined it
// first.
TEST(OnnxLoad, RedefinedOutputNamesBothDefinitions) {
  {
    Model m;
    m.input("x", {2});
    m.node("Relu", {"x"}, {"y"}, "r1");
    m.node("Neg", {"x"}, {"y"}, "r2");
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: node 'r2' (Neg): output 'y' is already produced by node 'r1' (Relu)");
  }
  {
    Model m;
    m.input("x", {2});
    m.node("Relu", {"x"}, {"x"}, "r");
    m.output("x");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: node 'r' (Relu): output 'x' is already a graph input");
  }
  {
    Model m;
    m.input("x", {2});
    m.node("Relu", {"x"}, {"c"}, "r");
    m.node("Constant", {}, {"c"}, "k", {m.attr_f("value_float", 1.0f)});
    m.node("Add", {"x", "c"}, {"y"}, "add");
    m.output("y");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: node 'k' (Constant): output 'c' is already produced by node 'r' (Relu)");
  }
  {
    Model m;
    m.input("x", {2});
    m.node("Split", {"x"}, {"a", "a"}, "s");
    m.output("a");
    auto L = load(m);
    EXPECT_REJECTS(L, "m.onnx: node 's' (Split): output 'a' is listed twice");
  }
}

TEST(OnnxLoad, PlanFileIsNamedAsSuch) {
  std::string plan("APXPLAN\0\x01\x00\x00\x00 rest of a plan", 28);
  ApxGraph g;
  apx_graph_init(&g, "m.apx");
  ApxDiag d;
  apx_diag_init(&d);
  EXPECT_EQ(apx_onnx_load_memory(&g, plan.data(), plan.size(), nullptr, nullptr, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_STREQ(d.msg, "m.apx: this is an apexc plan, not an ONNX model (run it with apexrun)");
  apx_graph_free(&g);
}

namespace {

std::string le_floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float));
}

// x * w -> ReduceSum -> l1 and ReduceMean -> l2, both declared float scalars.
void two_scalar_outputs(Model &m) {
  m.input("x", {2});
  m.init_raw("w", APX_DT_F32, {2}, le_floats({1, 2}));
  m.node("Mul", {"x", "w"}, {"a"}, "mul");
  m.node("ReduceSum", {"a"}, {"l1"}, "sum", {m.attr_i("keepdims", 0)});
  m.node("ReduceMean", {"a"}, {"l2"}, "mean", {m.attr_i("keepdims", 0)});
  m.outputs.push_back(m.vi("l1", APX_DT_F32, {}));
  m.outputs.push_back(m.vi("l2", APX_DT_F32, {}));
}

}  // namespace


namespace {

// Loads m with o, capturing the warning lines (not quiet).
std::string load_warnings(Model &m, const ApxOptions &o, int *rc) {
  ApxGraph g;
  apx_graph_init(&g, "m.onnx");
  ApxDiag d;
  apx_diag_init(&d);
  char *buf = nullptr;
  size_t len = 0;
  d.warn_stream = open_memstream(&buf, &len);
  std::string b = m.bytes();
  *rc = apx_onnx_load_memory(&g, b.data(), b.size(), nullptr, &o, &d);
  fclose(d.warn_stream);
  std::string out(buf ? buf : "", len);
  free(buf);
  apx_graph_free(&g);
  return out;
}

int count_lines(const std::string &s) { return (int)std::count(s.begin(), s.end(), '\n'); }

// y = Pow(x, p) + eps + mask with p, eps and mask float initializers (trained by default).
void constant_like_model(Model &m, int n_eps) {
  m.input("x", {2});
  m.init_raw("p", APX_DT_F32, {}, le_floats({2.0f}));
  m.init_raw("mask", APX_DT_F32, {2}, le_floats({0.0f, -1e9f}));
  m.init_raw("w", APX_DT_F32, {2}, le_floats({0.5f, -0.25f}));  // a weight
  m.node("Pow", {"x", "p"}, {"t0"}, "pow");
  m.node("Mul", {"t0", "w"}, {"t1"}, "mul");
  std::string cur = "t1";
  for (int i = 0; i < n_eps; i++) {
    std::string e = "eps" + std::to_string(i), out = "u" + std::to_string(i);
    m.init_raw(e, APX_DT_F32, {1}, le_floats({1e-5f}));
    m.node("Add", {cur, e}, {out}, "add_" + e);
    cur = out;
  }
  m.node("Add", {cur, "mask"}, {"y"}, "add_mask");
  m.node("ReduceSum", {"y"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
  m.output("loss");
}

}  // namespace

TEST(OnnxLoad, FirstScalarOutputIsTheLossOthersAreNamed) {
  {
    // DESIGN.md 2: the first output is the loss; the other candidate is named in a warning
    Model m;
    two_scalar_outputs(m);
    int rc = -1;
    std::string w = load_warnings(m, default_options(), &rc);
    EXPECT_EQ(rc, 0);
    EXPECT_NE(w.find("m.onnx: graph outputs 'l1' and 'l2' are both float scalars computed from "
                     "parameters; training the first, 'l1', as the loss"), std::string::npos) << w;
    auto L = load(m);
    EXPECT_LOADS(L);
    EXPECT_EQ(L->g.loss, apx_graph_find_value(&L->g, "l1"));
  }
  {
    Model m;
    two_scalar_outputs(m);
    ApxOptions o = default_options();
    o.loss_name = "l2";  // the user picked one: l1 stays an output
    auto L = load(m, &o);
    EXPECT_LOADS(L);
    EXPECT_EQ(L->g.loss, apx_graph_find_value(&L->g, "l2"));
    // several losses (each its own scaler, passes/autodiff.h): the first is g->loss, all flagged
    o.loss_name = "l1,l2";
    auto L2 = load(m, &o);
    EXPECT_LOADS(L2);
    EXPECT_EQ(L2->g.loss, apx_graph_find_value(&L2->g, "l1"));
    EXPECT_TRUE(L2->g.vals[apx_graph_find_value(&L2->g, "l2")].flags & APX_VALF_LOSS);
    o.loss_name = "l1,nope";
    auto L3 = load(m, &o);
    EXPECT_REJECTS(L3, "m.onnx: --loss 'l1,nope': no such value 'nope'");
    o.loss_name = "l2,l2";
    auto L4 = load(m, &o);
    EXPECT_REJECTS(L4, "m.onnx: --loss 'l2,l2': 'l2' is named twice (each loss once)");
    o.loss_name = ",l2";
    auto L5 = load(m, &o);
    EXPECT_REJECTS(L5, "m.onnx: --loss ',l2': empty name in the list");
  }
  {
    Model m;
    two_scalar_outputs(m);
    ApxOptions o = default_options();
    o.training = 0;  // no loss at all
    auto L = load(m, &o);
    EXPECT_LOADS(L);
  }
  {
    // a scalar computed from the data only (no parameter) is not a loss candidate
    Model m;
    m.input("x", {2});
    m.init_raw("w", APX_DT_F32, {2}, le_floats({1, 2}));
    m.node("Mul", {"x", "w"}, {"a"}, "mul");
    m.node("ReduceSum", {"a"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
    m.node("ReduceMean", {"x"}, {"xmean"}, "mean", {m.attr_i("keepdims", 0)});
    m.outputs.push_back(m.vi("loss", APX_DT_F32, {}));
    m.outputs.push_back(m.vi("xmean", APX_DT_F32, {}));
    auto L = load(m);
    EXPECT_LOADS(L);
  }
}

TEST(OnnxLoad, WarnsAboutInitializersThatLookLikeConstants) {
  {
    Model m;
    constant_like_model(m, 1);
    ApxOptions o = default_options();
    o.opt_level = APX_O2;
    int rc;
    std::string w = load_warnings(m, o, &rc);
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(count_lines(w), 3) << w;
    EXPECT_NE(w.find("warning: m.onnx: initializer 'p' looks like a constant, not a weight: a scalar "
                     "exponent (2) of node 'pow' (Pow) (its gradient is NaN wherever the base is "
                     "negative); it will be trained (add --frozen p if it is a constant)\n"),
              std::string::npos) << w;
    EXPECT_NE(w.find("initializer 'eps0' looks like a constant, not a weight: an epsilon-like scalar "
                     "(1e-05) in node 'add_eps0' (Add)"), std::string::npos) << w;
    EXPECT_NE(w.find("initializer 'mask' looks like a constant, not a weight: an additive mask (it "
                     "holds -1e+09) in node 'add_mask' (Add); it will be trained (add --frozen mask"),
              std::string::npos) << w;
    EXPECT_EQ(w.find("'w'"), std::string::npos) << w;
    // a trained mask is wrong at any level (O1 keeps it fp32, but its gradient still moves it)
    o.opt_level = APX_O1;
    w = load_warnings(m, o, &rc);
    EXPECT_EQ(count_lines(w), 3) << w;
    EXPECT_NE(w.find("'mask'"), std::string::npos) << w;
    // --frozen silences it; --inference has nothing to train
    o.frozen.items[o.frozen.n++] = "p";
    w = load_warnings(m, o, &rc);
    EXPECT_EQ(count_lines(w), 2) << w;
    EXPECT_EQ(w.find("'p'"), std::string::npos) << w;
    o.training = 0;
    EXPECT_EQ(load_warnings(m, o, &rc), "");
  }
  {
    Model m;
    constant_like_model(m, 8);
    ApxOptions o = default_options();
    o.opt_level = APX_O3;
    int rc;
    std::string w = load_warnings(m, o, &rc);
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(count_lines(w), 6) << w;  // 5, then the rest counted
    EXPECT_NE(w.find("warning: m.onnx: and 5 more initializers that look like constants (--frozen "
                     "A,B keeps them constant)\n"), std::string::npos) << w;
  }
  {
    // outside fp16 range, in no constant-like role: reported only when -O2/-O3 casts to fp16
    Model m;
    m.input("x", {2});
    m.init_raw("big", APX_DT_F32, {2}, le_floats({1.0f, 1e5f}));
    m.node("Mul", {"x", "big"}, {"y"}, "mul");
    m.node("ReduceSum", {"y"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
    m.output("loss");
    ApxOptions o = default_options();
    int rc;
    o.opt_level = APX_O1;
    EXPECT_EQ(load_warnings(m, o, &rc), "");
    o.opt_level = APX_O2;
    std::string w = load_warnings(m, o, &rc);
    EXPECT_NE(w.find("initializer 'big' looks like a constant, not a weight: it holds 100000, "
                     "outside fp16 range, and -O2 casts the model to fp16"), std::string::npos) << w;
    o.half = APX_DT_BF16;
    EXPECT_EQ(load_warnings(m, o, &rc), "");
  }
}

// Exporter hazards (DESIGN.md 2, issue 11): scalars the dynamo exporter's optimizer stores as
// float initializers (attention scale, GELU's 0.5 and exponent 3), named with every node.
TEST(OnnxLoad, WarnsAboutTrainedScalesAndExponents) {
  Model m;
  m.input("x", {2, 3});
  m.init_raw("half", APX_DT_F32, {}, le_floats({0.5f}));
  m.init_raw("scale", APX_DT_F32, {1}, le_floats({8.0f}));
  m.init_raw("three", APX_DT_F32, {3}, le_floats({3.0f, 3.0f, 3.0f}));
  m.init_raw("w", APX_DT_F32, {3}, le_floats({0.1f, 0.2f, 0.3f}));
  m.node("Mul", {"x", "half"}, {"a"}, "gelu_0/mul");
  m.node("Mul", {"half", "a"}, {"b"}, "gelu_1/mul");
  m.node("Div", {"b", "scale"}, {"c"}, "attn/div");
  m.node("Pow", {"c", "three"}, {"d"}, "gelu/pow");
  m.node("Mul", {"d", "w"}, {"e"}, "layer/mul");  // a weight vector: no warning
  m.node("ReduceSum", {"e"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
  m.output("loss");
  int rc;
  std::string w = load_warnings(m, default_options(), &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(count_lines(w), 4) << w;  // 'half' is also shared by two layers (merged scalars)
  EXPECT_NE(w.find("initializer 'half' is used by unrelated layers (node 'gelu_0/mul' (Mul) and "
                   "node 'gelu_1/mul' (Mul))"), std::string::npos) << w;
  EXPECT_NE(w.find("warning: m.onnx: initializer 'half' looks like a constant, not a weight: a scalar "
                   "scale (0.5) of node 'gelu_0/mul' (Mul) and 1 more node; it will be trained (add "
                   "--frozen half if it is a constant)\n"), std::string::npos) << w;
  EXPECT_NE(w.find("initializer 'scale' looks like a constant, not a weight: a scalar scale (8) of "
                   "node 'attn/div' (Div);"), std::string::npos) << w;
  EXPECT_NE(w.find("initializer 'three' looks like a constant, not a weight: the exponent of node "
                   "'gelu/pow' (Pow) (its gradient is NaN wherever the base is negative)"),
            std::string::npos) << w;
  EXPECT_EQ(w.find("'w'"), std::string::npos) << w;
}

// A Linear(d, 1) head exported as MatMul + Add: its one-element bias is a weight, even when
// it is small, and must not be reported as an epsilon.
TEST(OnnxLoad, OneOutputBiasAfterMatMulIsNotAnEpsilon) {
  Model m;
  m.input("x", {4, 3});
  m.init_raw("head.weight", APX_DT_F32, {3, 1}, le_floats({0.1f, -0.2f, 0.3f}));
  m.init_raw("head.bias", APX_DT_F32, {1}, le_floats({5e-4f}));
  m.node("MatMul", {"x", "head.weight"}, {"mm"}, "head_matmul");
  m.node("Add", {"mm", "head.bias"}, {"y"}, "head_add");
  m.node("ReduceSum", {"y"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
  m.output("loss");
  ApxOptions o = default_options();
  int rc = -1;
  EXPECT_EQ(load_warnings(m, o, &rc), "");
  EXPECT_EQ(rc, 0);
  // the same bias added to an activation that is not a MatMul/Gemm/Conv output: 5e-4 is
  // still larger than any epsilon (1e-5 .. 1e-12), so no warning either
  Model n;
  n.input("x", {4, 1});
  n.init_raw("b", APX_DT_F32, {1}, le_floats({5e-4f}));
  n.node("Add", {"x", "b"}, {"y"}, "add_b");
  n.node("ReduceSum", {"y"}, {"loss"}, "sum", {n.attr_i("keepdims", 0)});
  n.output("loss");
  EXPECT_EQ(load_warnings(n, o, &rc), "");
  EXPECT_EQ(rc, 0);
  // a bias of 1e-6 after MatMul (a tiny init) is still a bias, not an epsilon
  Model t;
  t.input("x", {4, 3});
  t.init_raw("w", APX_DT_F32, {3, 1}, le_floats({0.1f, -0.2f, 0.3f}));
  t.init_raw("b", APX_DT_F32, {1}, le_floats({1e-6f}));
  t.node("MatMul", {"x", "w"}, {"mm"}, "mm");
  t.node("Add", {"b", "mm"}, {"y"}, "add_b");  // either operand order
  t.node("ReduceSum", {"y"}, {"loss"}, "sum", {t.attr_i("keepdims", 0)});
  t.output("loss");
  EXPECT_EQ(load_warnings(t, o, &rc), "");
  EXPECT_EQ(rc, 0);
  // the epsilon rule still holds elsewhere: 1e-6 added to a Relu output warns
  Model e;
  e.input("x", {4, 3});
  e.init_raw("w", APX_DT_F32, {3, 1}, le_floats({0.1f, -0.2f, 0.3f}));
  e.init_raw("eps", APX_DT_F32, {}, le_floats({1e-6f}));
  e.node("MatMul", {"x", "w"}, {"mm"}, "mm");
  e.node("Relu", {"mm"}, {"r"}, "relu");
  e.node("Add", {"r", "eps"}, {"y"}, "add_eps");
  e.node("ReduceSum", {"y"}, {"loss"}, "sum", {e.attr_i("keepdims", 0)});
  e.output("loss");
  std::string w = load_warnings(e, o, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(w.find("initializer 'eps' looks like a constant, not a weight: an epsilon-like scalar "
                   "(1e-06) in node 'add_eps' (Add)"), std::string::npos) << w;
}

// x * w + b, both float initializers, plus an int64 initializer and a scalar 0.5 scale.
void trainable_model(Model &m, const char *list) {
  m.input("x", {2});
  m.init_raw("w", APX_DT_F32, {2}, le_floats({1, 2}));
  m.init_raw("b", APX_DT_F32, {2}, le_floats({0, 0}));
  m.init_raw("half", APX_DT_F32, {}, le_floats({0.5f}));
  m.init_raw("i", APX_DT_I64, {1}, std::string(8, '\0'));
  m.node("Mul", {"x", "w"}, {"t"}, "mul");
  m.node("Add", {"t", "b"}, {"u"}, "add");
  m.node("Mul", {"u", "half"}, {"y"}, "scale");
  m.node("ReduceSum", {"y"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
  m.node("Identity", {"i"}, {"z"}, "id");
  m.output("loss");
  m.output("z");
  if (list) m.meta("apexc.trainable", list);
}

// DESIGN.md 2: metadata_props apexc.trainable lists the parameters; every other float
// initializer is a constant, as --frozen makes it; --frozen still removes listed names.
TEST(OnnxLoad, TrainableListSelectsTheParameters) {
  Model m;
  trainable_model(m, "[\"w\"]");
  m.meta("producer.note", "other keys are ignored");
  auto L = load(m);
  EXPECT_LOADS(L);
  EXPECT_EQ(L->val("w")->kind, APX_VAL_PARAM);
  EXPECT_EQ(L->val("b")->kind, APX_VAL_CONST);
  EXPECT_TRUE(L->val("b")->flags & APX_VALF_FROZEN);
  EXPECT_EQ(L->val("half")->kind, APX_VAL_CONST);
  EXPECT_EQ(L->val("i")->kind, APX_VAL_CONST);
  EXPECT_FALSE(L->val("i")->flags & APX_VALF_FROZEN);

  Model both;
  trainable_model(both, "[\"w\", \"b\"]");
  ApxOptions o = default_options();
  o.frozen.items[o.frozen.n++] = "w";
  auto L2 = load(both, &o);
  EXPECT_LOADS(L2);
  EXPECT_EQ(L2->val("w")->kind, APX_VAL_CONST);
  EXPECT_TRUE(L2->val("w")->flags & APX_VALF_FROZEN);
  EXPECT_EQ(L2->val("b")->kind, APX_VAL_PARAM);

  Model none;  // an empty list trains nothing
  trainable_model(none, "[]");
  auto L3 = load(none);
  EXPECT_LOADS(L3);
  EXPECT_EQ(L3->val("w")->kind, APX_VAL_CONST);
  EXPECT_EQ(L3->val("b")->kind, APX_VAL_CONST);

  Model plain;  // without the key: every float initializer
  trainable_model(plain, nullptr);
  auto L4 = load(plain);
  EXPECT_LOADS(L4);
  EXPECT_EQ(L4->val("w")->kind, APX_VAL_PARAM);
  EXPECT_EQ(L4->val("b")->kind, APX_VAL_PARAM);
  EXPECT_EQ(L4->val("half")->kind, APX_VAL_PARAM);
}

TEST(OnnxLoad, TrainableListErrorsAreOneLine) {
  struct Case {
    const char *list, *msg;
  } cases[] = {
      {"[\"w\", \"nope\", \"gone\"]",
       "m.onnx: metadata_props 'apexc.trainable' names 'nope', which is not an initializer of the "
       "model (and 1 more listed names)"},
      {"[\"x\"]", "names 'x', which is not an initializer of the model"},  // a graph input
      {"[\"t\"]", "names 't', which is not an initializer of the model"},  // an activation
      {"[\"i\"]", "names 'i', a int64 initializer: only float initializers can be trained"},
      {"{\"w\": 1}", "metadata_props 'apexc.trainable' is a JSON object; expected an array"},
      {"[\"w\", 3]", "metadata_props 'apexc.trainable': element 1 is not a name (a JSON number)"},
      {"[\"w\"", "metadata_props 'apexc.trainable': not JSON (line 1"},
      {"", "metadata_props 'apexc.trainable': not JSON"},
  };
  for (auto &c : cases) {
    Model m;
    trainable_model(m, c.list);
    auto L = load(m);
    EXPECT_REJECTS(L, c.msg);
    EXPECT_EQ(std::string(L->d.msg).find('\n'), std::string::npos) << L->d.msg;
  }
  Model twice;
  trainable_model(twice, "[\"w\"]");
  twice.meta("apexc.trainable", "[\"b\"]");
  auto L = load(twice);
  EXPECT_REJECTS(L, "m.onnx: metadata_props has 'apexc.trainable' twice");
}

// With the list, only listed names are trained: a constant-like initializer outside it is a
// constant and not reported; a listed one still is.
TEST(OnnxLoad, TrainableListLimitsConstantLikeWarnings) {
  int rc;
  Model plain;
  trainable_model(plain, nullptr);
  std::string w = load_warnings(plain, default_options(), &rc);
  EXPECT_NE(w.find("initializer 'half' looks like a constant, not a weight: a scalar scale (0.5) of "
                   "node 'scale' (Mul)"), std::string::npos) << w;
  Model listed;
  trainable_model(listed, "[\"w\", \"b\"]");
  EXPECT_EQ(load_warnings(listed, default_options(), &rc), "");
  EXPECT_EQ(rc, 0);
  Model odd;
  trainable_model(odd, "[\"w\", \"half\"]");
  w = load_warnings(odd, default_options(), &rc);
  EXPECT_NE(w.find("initializer 'half' looks like a constant"), std::string::npos) << w;
}

// DESIGN.md 2: every unsupported op is reported at once, one line per op type (graph order)
// with its node count and first node; exit code 2.
TEST(OnnxLoad, EveryUnsupportedOpIsReportedAtOnce) {
  Model m;
  m.input("x", {2, 2});
  m.node("NonMaxSuppression", {"x"}, {"a"}, "boxes/nms");
  m.node("Relu", {"a"}, {"b"}, "relu");
  m.node("Upsample", {"b"}, {"c"}, "deconv");
  m.node("NonMaxSuppression", {"c"}, {"d"}, "");  // unnamed: shown by op and index
  m.node("FusedGemm", {"d"}, {"e"}, "fg")->domain = m.pool.str("com.microsoft");
  m.node("Reciprocal", {"e"}, {"f"}, "rc");
  m.node("NonMaxSuppression", {"f"}, {"y"}, "t3");
  m.output("y");
  auto L = load(m);
  EXPECT_EQ(L->rc, -1);
  EXPECT_EQ(L->d.code, APX_EXIT_BAD_INPUT);
  std::vector<std::string> lines;
  std::stringstream ss(L->d.msg);
  for (std::string ln; std::getline(ss, ln);) lines.push_back(ln);
  ASSERT_EQ(lines.size(), 4u) << L->d.msg;
  EXPECT_EQ(lines[0].rfind("m.onnx: node 'boxes/nms' (NonMaxSuppression): unknown op 'NonMaxSuppression' "
                           "(apexc v1 supports ",
                           0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" ops: see apexc --list-ops) (first of 3 nodes)"), std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[1], "m.onnx: node 'deconv' (Upsample): not supported yet: Upsample is a tier-2 op "
                      "(1 node)");
  EXPECT_EQ(lines[2], "m.onnx: node 'fg' (FusedGemm): domain 'com.microsoft' is not supported "
                      "(apexc v1 reads ai.onnx ops only) (1 node)");
  EXPECT_EQ(lines[3], "m.onnx: node 'rc' (Reciprocal): not supported yet: Reciprocal (1 node)");
  // one unsupported op type: one line, as before
  Model one;
  one.input("x", {2});
  one.node("Upsample", {"x"}, {"a"}, "r1");
  one.node("Upsample", {"a"}, {"y"}, "r2");
  one.output("y");
  auto L1 = load(one);
  EXPECT_REJECTS(L1, "m.onnx: node 'r1' (Upsample): not supported yet: Upsample is a tier-2 op "
                     "(first of 2 nodes)");
  EXPECT_EQ(std::string(L1->d.msg).find('\n'), std::string::npos) << L1->d.msg;
}

TEST(OnnxLoad, ManyUnsupportedOpTypesStayBounded) {
  Model m;
  m.input("x", {2});
  std::string cur = "x";
  for (int i = 0; i < 60; i++) {
    std::string out = "v" + std::to_string(i);
    m.node("NoSuchOp" + std::to_string(i) + std::string(80, 'x'), {cur}, {out},
           "node_" + std::to_string(i) + std::string(80, 'n'));
    cur = out;
  }
  m.output(cur);
  auto L = load(m);
  EXPECT_EQ(L->rc, -1);
  std::string msg(L->d.msg);
  EXPECT_LT(msg.size(), sizeof L->d.msg);
  EXPECT_EQ(msg.substr(0, 7), "m.onnx:");
  EXPECT_NE(msg.find("(NoSuchOp1"), std::string::npos);
  EXPECT_EQ(msg.substr(msg.size() - 4), "\n...") << msg;  // the report filled the buffer
}

// A float initializer read by nodes of different layers trains tied (the dynamo exporter's
// optimizer merges equal initializers, e.g. every LayerNorm weight into one).
TEST(OnnxLoad, WarnsAboutInitializersSharedAcrossLayers) {
  auto model = [](Model &m, const char *second, const char *list) {
    m.input("x", {2, 3});
    m.init_raw("ln.weight", APX_DT_F32, {3}, le_floats({1, 1, 1}));
    m.node("Mul", {"x", "ln.weight"}, {"a"}, "/model/h.0/ln_1/Mul");
    m.node("Shape", {"ln.weight"}, {"s"}, "/model/other/Shape");  // reads the shape only
    m.node("Mul", {"a", "ln.weight"}, {"b"}, second);
    m.node("ReduceSum", {"b"}, {"loss"}, "/model/sum", {m.attr_i("keepdims", 0)});
    m.output("loss");
    m.output("s", {}, APX_DT_I64);
    if (list) m.meta("apexc.trainable", list);
  };
  int rc;
  Model m;
  model(m, "/model/h.1/ln_1/Mul", nullptr);
  std::string w = load_warnings(m, default_options(), &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(count_lines(w), 1) << w;
  EXPECT_NE(w.find("warning: m.onnx: initializer 'ln.weight' is used by unrelated layers (node "
                   "'/model/h.0/ln_1/Mul' (Mul) and node '/model/h.1/ln_1/Mul' (Mul)): it is trained "
                   "as one tensor, tied."), std::string::npos) << w;
  EXPECT_NE(w.find("export with scripts/apexc_torch.py"), std::string::npos) << w;
  Model same;  // two nodes of one layer: not shared
  model(same, "/model/h.0/ln_1/Mul_1", nullptr);
  EXPECT_EQ(load_warnings(same, default_options(), &rc), "");
  Model listed;  // the list comes from named_parameters(): sharing is PyTorch's own tying
  model(listed, "/model/h.1/ln_1/Mul", "[\"ln.weight\"]");
  EXPECT_EQ(load_warnings(listed, default_options(), &rc), "");
  Model frozen;
  model(frozen, "/model/h.1/ln_1/Mul", nullptr);
  ApxOptions o = default_options();
  o.frozen.items[o.frozen.n++] = "ln.weight";
  EXPECT_EQ(load_warnings(frozen, o, &rc), "");
}

// BatchNormalization without training_mode=1 in a training compile normalizes with running
// statistics and never updates them (the dynamo exporter drops the attribute).
TEST(OnnxLoad, WarnsAboutBatchNormNotInTrainingMode) {
  auto model = [](Model &m, int n_bn, int training) {
    m.input("x", {2, 2, 3, 3});
    std::string cur = "x";
    for (int i = 0; i < n_bn; i++) {
      std::string k = std::to_string(i), out = "y" + k;
      for (const char *n : {"s", "b", "mean", "var"})
        m.init_raw(n + k, APX_DT_F32, {2}, le_floats({1, 1}));
      std::vector<std::string> outs = {out};
      if (training) outs.insert(outs.end(), {out + "_rm", out + "_rv"});
      std::vector<Onnx__AttributeProto *> attrs;
      if (training) attrs.push_back(m.attr_i("training_mode", 1));
      m.node("BatchNormalization", {cur, "s" + k, "b" + k, "mean" + k, "var" + k}, outs, "bn" + k,
             attrs);
      cur = out;
    }
    m.node("ReduceSum", {cur}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
    m.output("loss");
  };
  int rc;
  Model one;
  model(one, 1, 0);
  std::string w = load_warnings(one, default_options(), &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(count_lines(w), 1) << w;
  EXPECT_NE(w.find("warning: m.onnx: 1 BatchNormalization node without training_mode=1 ('bn0'): "
                   "this training compile normalizes it with the running statistics (inference "
                   "mode) and never updates them"), std::string::npos) << w;
  Model five;
  model(five, 5, 0);
  w = load_warnings(five, default_options(), &rc);
  EXPECT_NE(w.find("5 BatchNormalization nodes without training_mode=1 ('bn0', 'bn1', 'bn2', ...)"),
            std::string::npos) << w;
  Model trained;
  model(trained, 2, 1);
  EXPECT_EQ(load_warnings(trained, default_options(), &rc), "");
  ApxOptions inf = default_options();
  inf.training = 0;
  EXPECT_EQ(load_warnings(five, inf, &rc), "");
  // scripts/apexc_torch.py exports each BatchNorm in its module's mode: eval() is frozen
  Model helper;
  model(helper, 1, 0);
  helper.meta("apexc.trainable", "[\"s0\", \"b0\"]");
  EXPECT_EQ(load_warnings(helper, default_options(), &rc), "");
  // before opset 14 the running-statistics outputs mark training mode
  Model old(8, 13);
  old.input("x", {2, 2, 3, 3});
  for (const char *n : {"s", "b", "mean", "var"}) old.init_raw(n, APX_DT_F32, {2}, le_floats({1, 1}));
  old.node("BatchNormalization", {"x", "s", "b", "mean", "var"}, {"y", "rm", "rv"}, "bn");
  old.node("ReduceSum", {"y"}, {"loss"}, "sum", {old.attr_i("keepdims", 0)});
  old.output("loss");
  EXPECT_EQ(load_warnings(old, default_options(), &rc), "");
}

// PyTorch trains BatchNorm's running variance with the unbiased batch variance, ONNX defines
// it with the batch variance: the model's producer_name decides (both PyTorch exporters
// write "pytorch"), --bn-running-var overrides; canonicalization copies the choice into
// every BatchNormalization's typed attributes (kernels/attrs.def ApxAttrBatchNorm).
TEST(OnnxLoad, BatchNormRunningVarFollowsTheProducer) {
  auto run = [](const char *producer, ApxBnRunningVar opt) -> int {
    Model m;
    if (producer) m.m.producer_name = m.pool.str(producer);
    m.input("x", {2, 2, 3, 3});
    for (const char *n : {"s", "b", "mean", "var"}) m.init_raw(n, APX_DT_F32, {2}, le_floats({1, 1}));
    m.node("BatchNormalization", {"x", "s", "b", "mean", "var"}, {"y", "rm", "rv"}, "bn",
           {m.attr_i("training_mode", 1)});
    m.node("ReduceSum", {"y"}, {"loss"}, "sum", {m.attr_i("keepdims", 0)});
    m.output("loss");
    ApxOptions o = default_options();
    o.bn_running_var = opt;
    auto L = load(m, &o);
    EXPECT_EQ(L->rc, 0) << L->d.msg;
    if (L->rc) return -1;
    int bn = L->node("bn");
    EXPECT_EQ(apx_node_canonicalize(&L->g, bn, &L->d), 0) << L->d.msg;
    int flag = L->g.bn_unbiased_running_var;
    EXPECT_EQ(APX_NODE_ATTRS(&L->g, bn, ApxAttrBatchNorm)->unbiased_running_var, flag);
    if (producer) EXPECT_STREQ(L->g.producer_name, producer);
    else EXPECT_EQ(L->g.producer_name, nullptr);
    return flag;
  };
  EXPECT_EQ(run("pytorch", APX_BN_VAR_AUTO), 1);
  EXPECT_EQ(run("tf2onnx", APX_BN_VAR_AUTO), 0);
  EXPECT_EQ(run("backend-test", APX_BN_VAR_AUTO), 0);  // ONNX's own node tests
  EXPECT_EQ(run(nullptr, APX_BN_VAR_AUTO), 0);
  EXPECT_EQ(run("pytorch", APX_BN_VAR_POPULATION), 0);
  EXPECT_EQ(run("tf2onnx", APX_BN_VAR_UNBIASED), 1);
}

TEST(OnnxLoad, VersionRanges) {
  auto relu = [](int64_t ir, int64_t opset) {
    auto m = std::make_unique<Model>(ir, opset);
    m->input("x", {2});
    m->node("Relu", {"x"}, {"y"});
    m->output("y");
    return m;
  };
  {
    auto m = relu(6, 17);
    auto L = load(*m);
    EXPECT_REJECTS(L, "m.onnx: ir_version 6 is too old");
  }
  {
    auto m = relu(11, 17);
    auto L = load(*m);
    EXPECT_LOADS(L);
    EXPECT_EQ(L->d.n_warnings, 1);
    EXPECT_EQ(L->g.ir_version, 11);
  }
  for (int64_t opset : {12, 22}) {
    auto m = relu(8, opset);
    auto L = load(*m);
    EXPECT_REJECTS(L, "m.onnx: unsupported opset " + std::to_string(opset) +
                          " (apexc accepts 13..21; --allow-old-opset accepts 1..12)");
  }
  for (int64_t opset : {13, 21}) {
    auto m = relu(10, opset);
    auto L = load(*m);
    EXPECT_LOADS(L);
    EXPECT_EQ(L->g.opset, opset);
  }
  ApxOptions o = default_options();
  o.opset_min = 7;
  o.ir_version_min = 3;
  {
    auto m = relu(3, 7);
    auto L = load(*m, &o);
    EXPECT_LOADS(L);
  }
  {
    auto m = relu(3, 6);
    auto L = load(*m, &o);
    EXPECT_REJECTS(L, "unsupported opset 6");
  }
  {
    auto m = relu(8, 17);  // "ai.onnx" is the same domain as ""
    m->opsets[0]->domain = m->pool.str("ai.onnx");
    m->nodes[0]->domain = m->pool.str("ai.onnx");
    auto L = load(*m);
    EXPECT_LOADS(L);
  }
}

// ---- files, parse failures ----------------------------------------------------------------

TEST(OnnxLoad, FileErrors) {
  std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty());
  auto L = load_file(dir + "/absent.onnx");
  EXPECT_REJECTS(L, dir + "/absent.onnx: cannot open model: No such file or directory");
  EXPECT_EQ(std::string(L->d.msg).rfind(dir + "/absent.onnx: ", 0), 0u);
  write_file(dir + "/empty.onnx", "");
  auto L2 = load_file(dir + "/empty.onnx");
  EXPECT_REJECTS(L2, dir + "/empty.onnx: not a valid ONNX model (protobuf parse failed, 0 bytes)");
  auto L3 = load_file(dir);  // a folder
  EXPECT_REJECTS(L3, dir + ": cannot read model: not a regular file (a folder)");
  // a FIFO (would block the reader forever) and a symlink to /dev/zero (never ends): refused at
  // open, before a byte is read (the alarm turns a hang into a failure)
  std::string fifo = dir + "/fifo.onnx", zero = dir + "/zero.onnx";
  unlink(fifo.c_str());
  unlink(zero.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0);
  alarm(20);
  auto Lf = load_file(fifo);
  auto Lz = load_file(zero);
  alarm(0);
  EXPECT_REJECTS(Lf, fifo + ": cannot read model: not a regular file (a FIFO)");
  EXPECT_REJECTS(Lz, zero + ": cannot read model: not a regular file (a character device: /dev/zero)");
  // TensorProto files (apexrun infer's input_K.pb) go through the same bounded read
  ApxArena arena;
  apx_arena_init(&arena);
  ApxTensorConst tc;
  for (const std::string &p : {fifo, zero}) {
    ApxDiag d;
    apx_diag_init(&d);
    alarm(20);
    EXPECT_EQ(apx_onnx_read_tensor_file(p.c_str(), &arena, &tc, nullptr, &d), -1);
    alarm(0);
    EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
    EXPECT_EQ(std::string(d.msg).rfind(p + ": cannot read tensor file: not a regular file (a ", 0), 0u) << d.msg;
  }
  apx_arena_free(&arena);
  // g initialized without a file name: the loader names the path
  Loaded L4;
  apx_graph_free(&L4.g);
  apx_graph_init(&L4.g, nullptr);
  EXPECT_EQ(apx_onnx_load_file(&L4.g, (dir + "/empty.onnx").c_str(), nullptr, &L4.d), -1);
  EXPECT_EQ(std::string(L4.d.msg).rfind(dir + "/empty.onnx: ", 0), 0u) << L4.d.msg;
}

// Every prefix and many single-byte corruptions of a valid model: a clean result, no crash
// (ASan/UBSan run this too).
TEST(OnnxLoad, CorruptedBytesNeverCrash) {
  Model m;
  m.input("x", {"n", 3});
  m.init_raw("w", APX_DT_F32, {3, 3}, std::string(36, '\1'));
  m.node("MatMul", {"x", "w"}, {"y"}, "mm", {m.attr_ints("perm", {1, 2})});
  m.node("Constant", {}, {"k"}, "", {m.attr_f("value_float", 1.0f)});
  m.node("Add", {"y", "k"}, {"z"});
  m.output("z");
  std::string good = m.bytes();
  int ok = 0, rejected = 0;
  auto run = [&](const std::string &b) {
    Loaded L;
    int rc = apx_onnx_load_memory(&L.g, b.data(), b.size(), nullptr, nullptr, &L.d);
    if (rc == 0) {
      ok++;
      ApxDiag vd;
      apx_diag_init(&vd);
      EXPECT_EQ(apx_graph_verify(&L.g, &vd), 0) << vd.msg;
    } else {
      rejected++;
      EXPECT_EQ(L.d.code, APX_EXIT_BAD_INPUT) << L.d.msg;
      EXPECT_EQ(std::string(L.d.msg).rfind("m.onnx: ", 0), 0u) << L.d.msg;
    }
  };
  for (size_t n = 0; n < good.size(); n++) run(good.substr(0, n));
  for (size_t i = 0; i < good.size(); i++)
    for (int v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string b = good;
      b[i] = static_cast<char>(v);
      run(b);
    }
  run(good);
  EXPECT_GT(ok, 0);
  EXPECT_GT(rejected, 0);
  printf("corrupted inputs: %d loaded, %d rejected cleanly\n", ok, rejected);
}

// protobuf-c unpacks nested messages recursively: 100k nested TypeProto.sequence_type levels
// (0.8 MB) overflow the stack of a plain onnx__model_proto__unpack (checked by hand: SIGSEGV).
// The loader's wire-format pre-scan rejects them first.
TEST(OnnxLoad, DeepNestingIsRejectedBeforeUnpack) {
  auto varint = [](uint64_t n) {
    std::string o;
    do {
      uint8_t b = n & 0x7f;
      n >>= 7;
      o += static_cast<char>(n ? (b | 0x80) : b);
    } while (n);
    return o;
  };
  auto ld = [&](int field, const std::string &payload) {
    return varint((uint64_t(field) << 3) | 2) + varint(payload.size()) + payload;
  };
  // TypeProto{sequence_type{elem_type{...}}}: prefixes built inside out, joined outside in
  std::vector<std::string> prefix;
  size_t inner = 0;
  for (int i = 0; i < 100000; i++) {
    std::string seq = varint((1 << 3) | 2) + varint(inner);  // Sequence.elem_type
    size_t seq_len = seq.size() + inner;
    std::string tp = varint((4 << 3) | 2) + varint(seq_len);  // TypeProto.sequence_type
    prefix.push_back(tp + seq);
    inner = tp.size() + seq_len;
  }
  std::string t;
  t.reserve(inner);
  for (size_t i = prefix.size(); i-- > 0;) t += prefix[i];
  ASSERT_EQ(t.size(), inner);
  std::string model = varint(1 << 3) + varint(8) + ld(7, ld(11, ld(1, "x") + ld(2, t)));
  Loaded L;
  int rc = apx_onnx_load_memory(&L.g, model.data(), model.size(), nullptr, nullptr, &L.d);
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(L.d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(L.d.msg).find("m.onnx: not a valid ONNX model (messages nested deeper "
                                      "than 100"), std::string::npos) << L.d.msg;
}

// ---- external data ----------------------------------------------------------------------

struct ExtDir {
  std::string dir;
  ExtDir() {
    dir = temp_dir();
    mkdir((dir + "/m").c_str(), 0755);
    mkdir((dir + "/m/data").c_str(), 0755);
  }
};

std::unique_ptr<Loaded> load_ext(const std::string &model_dir,
                                 std::vector<std::pair<std::string, std::string>> kv) {
  Model m;
  m.input("x", {2, 3});
  auto *t = m.tensor("w", APX_DT_F32, {2, 3});
  m.external(t, kv);
  m.inits.push_back(t);
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y");
  write_file(model_dir + "/model.onnx", m.bytes());
  return load_file(model_dir + "/model.onnx");
}

TEST(OnnxLoad, ExternalDataHappyPath) {
  ExtDir e;
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::string payload = std::string(100, 'x') + le_bytes(w) + std::string(10, 'y');
  write_file(e.dir + "/m/data/weights.bin", payload);
  auto L = load_ext(e.dir + "/m", {{"location", "data/weights.bin"}, {"offset", "100"},
                                   {"length", "24"}});
  EXPECT_LOADS(L);
  const ApxValue *v = L->val("w");
  EXPECT_EQ(v->kind, APX_VAL_PARAM);
  EXPECT_EQ(std::string(static_cast<const char *>(v->data), 24), le_bytes(w));
  // no length: the rest of the file from offset
  write_file(e.dir + "/m/w2.bin", le_bytes(w));
  auto L2 = load_ext(e.dir + "/m", {{"location", "./w2.bin"}, {"checksum", "ignored"}});
  EXPECT_LOADS(L2);
  EXPECT_EQ(static_cast<const float *>(L2->val("w")->data)[5], 6.0f);
  // a symlink that stays inside the folder is fine
  ASSERT_EQ(symlink("w2.bin", (e.dir + "/m/inside.bin").c_str()), 0);
  auto L3 = load_ext(e.dir + "/m", {{"location", "inside.bin"}});
  EXPECT_LOADS(L3);
}

// 64-bit offsets: the payload sits 5 GiB into a sparse file (no disk space used).
TEST(OnnxLoad, ExternalDataAtOffsetBeyond4GiB) {
  ExtDir e;
  std::string path = e.dir + "/m/big.bin";
  const int64_t off = (int64_t(5) << 30) + 12;
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  FILE *f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  bool placed = fseeko(f, (off_t)off, SEEK_SET) == 0 && fwrite(w.data(), 4, 6, f) == 6;
  fclose(f);
  if (!placed) GTEST_SKIP() << "cannot create a sparse 5 GiB file here";
  auto L = load_ext(e.dir + "/m", {{"location", "big.bin"}, {"offset", std::to_string(off)},
                                   {"length", "24"}});
  EXPECT_LOADS(L);
  EXPECT_EQ(std::string(static_cast<const char *>(L->val("w")->data), 24), le_bytes(w));
  unlink(path.c_str());
}

TEST(OnnxLoad, ExternalDataErrors) {
  ExtDir e;
  std::string m = e.dir + "/m";
  write_file(e.dir + "/outside.bin", std::string(24, '\0'));
  write_file(m + "/short.bin", std::string(8, '\0'));
  ASSERT_EQ(symlink("../outside.bin", (m + "/link.bin").c_str()), 0);
  ASSERT_EQ(mkfifo((m + "/fifo.bin").c_str(), 0644), 0);  // would block a plain open forever
  struct Case {
    std::vector<std::pair<std::string, std::string>> kv;
    std::string msg;
  } cases[] = {
      {{{"location", "../outside.bin"}},
       "initializer 'w': external data location '../outside.bin' escapes the model's folder"},
      {{{"location", "data/../../outside.bin"}}, "escapes the model's folder"},
      {{{"location", "link.bin"}}, "initializer 'w': external data location 'link.bin' escapes "
                                   "the model's folder"},
      {{{"location", e.dir + "/outside.bin"}}, "is an absolute path"},
      {{{"location", "missing.bin"}},
       "initializer 'w': cannot open external data file 'missing.bin': No such file"},
      {{{"location", "short.bin"}},
       "initializer 'w': external data 'short.bin' holds 8 bytes, dims [2,3] (float32) need 24"},
      {{{"location", "short.bin"}, {"offset", "4"}, {"length", "24"}},
       "external data file 'short.bin' has 8 bytes, offset 4 + length 24 is beyond its end"},
      {{{"location", "short.bin"}, {"offset", "9"}}, "offset 9 is beyond its end"},
      {{{"location", "short.bin"}, {"offset", "-1"}}, "bad offset '-1'"},
      {{{"location", "short.bin"}, {"length", "99999999999999999999999"}}, "bad length"},
      {{{"location", "data"}}, "external data file 'data' is not a regular file (a folder)"},
      {{{"location", "fifo.bin"}}, "initializer 'w': external data file 'fifo.bin' is not a regular file (a FIFO)"},
      {{{"offset", "0"}}, "external data has no location"},
  };
  for (auto &c : cases) {
    alarm(20);
    auto L = load_ext(m, c.kv);
    alarm(0);
    EXPECT_REJECTS(L, c.msg);
    EXPECT_EQ(std::string(L->d.msg).rfind(m + "/model.onnx: ", 0), 0u) << L->d.msg;
  }
  // from memory without a folder, external data is refused
  Model mm;
  auto *t = mm.tensor("w", APX_DT_F32, {2, 3});
  mm.external(t, {{"location", "short.bin"}});
  mm.inits.push_back(t);
  mm.node("Identity", {"w"}, {"y"});
  mm.output("y");
  auto L = load(mm);
  EXPECT_REJECTS(L, "m.onnx: initializer 'w': external data 'short.bin' cannot be read here");
}

// ---- the bad-input corpus ---------------------------------------------------------------

// Copies tests/corpus/bad into a temp folder: Bazel's runfiles are symlinks into the source
// tree, which the external-data containment check would (rightly) call escaping.
TEST(OnnxLoad, BadCorpusIsRejectedCleanly) {
  const std::string src = "tests/corpus/bad";
  std::ifstream man(src + "/MANIFEST.tsv");
  ASSERT_TRUE(man.good()) << "missing " << src << "/MANIFEST.tsv";
  std::string dir = temp_dir() + "/bad";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  DIR *dp = opendir(src.c_str());
  ASSERT_NE(dp, nullptr);
  while (struct dirent *de = readdir(dp))
    if (de->d_name[0] != '.') write_file(dir + "/" + de->d_name, read_file(src + "/" + de->d_name));
  closedir(dp);
  std::string line;
  std::getline(man, line);
  EXPECT_EQ(line, "file\tstage\texpected");
  int checked = 0, skipped = 0;
  while (std::getline(man, line)) {
    if (line.empty()) continue;
    size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    ASSERT_NE(t2, std::string::npos) << line;
    std::string file = line.substr(0, t1), stage = line.substr(t1 + 1, t2 - t1 - 1);
    std::string expect = line.substr(t2 + 1);
    if (stage != "load") {
      skipped++;
      continue;
    }
    std::string path = dir + "/" + file;
    auto L = load_file(path);
    EXPECT_EQ(L->rc, -1) << file;
    EXPECT_EQ(L->d.code, APX_EXIT_BAD_INPUT) << file << ": " << L->d.msg;
    EXPECT_EQ(std::string(L->d.msg).rfind(path + ": ", 0), 0u) << L->d.msg;
    EXPECT_NE(std::string(L->d.msg).find(expect), std::string::npos)
        << file << "\n  message: " << L->d.msg << "\n  expected: " << expect;
    checked++;
  }
  printf("bad corpus: %d load rows checked, %d rows for later stages skipped\n", checked,
         skipped);
  EXPECT_GE(checked, 30);
}

// The fuzzer's seeds (tests/fuzz/seeds, written by make_seeds.py) are valid models that
// reach every dtype, Constant form, attribute type and external data: they must load.
TEST(OnnxLoad, FuzzSeedsLoad) {
  const std::string dir = "tests/fuzz/seeds";
  DIR *dp = opendir(dir.c_str());
  ASSERT_NE(dp, nullptr) << dir;
  std::vector<std::string> names;
  while (struct dirent *de = readdir(dp)) {
    std::string f = de->d_name;
    if (f.size() > 5 && f.substr(f.size() - 5) == ".onnx") names.push_back(f);
  }
  closedir(dp);
  std::string tmp = temp_dir();  // real files, not runfiles symlinks (external data)
  for (const char *f : {"w.bin"}) write_file(tmp + "/" + f, read_file(dir + "/" + f));
  ApxOptions o = default_options();
  o.opset_min = 7;
  o.n_dims = 1;
  o.dim_names[0] = "N";
  o.dim_values[0] = 4;
  for (const std::string &f : names) {
    write_file(tmp + "/" + f, read_file(dir + "/" + f));
    auto L = load_file(tmp + "/" + f, &o);
    EXPECT_LOADS(L);
  }
  EXPECT_GE(names.size(), 4u);
  auto L = load_file(tmp + "/external.onnx", &o);
  ASSERT_EQ(L->rc, 0);
  const ApxValue *w2 = L->val("w2");  // bytes 48..63 of w.bin
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(static_cast<const uint8_t *>(w2->data)[0], 48);
  EXPECT_EQ(L->val("x")->dims[0], 4);
}

// ---- ONNX node tests --------------------------------------------------------------------

// Whether apexc v1 should load this model, decided from the model's own fields and the op
// table (not from the loader): ai.onnx opset 7..21, ai.onnx nodes with V1 or FOLD ops, and
// dense non-string tensors for every graph input and output.
bool node_model_supported(const Onnx__ModelProto *m) {
  int64_t opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const char *d = m->opset_import[i]->domain;
    if (!d || !*d || !strcmp(d, "ai.onnx")) opset = m->opset_import[i]->version;
  }
  if (opset < 7 || opset > 21 || m->ir_version < 3 || !m->graph) return false;
  const Onnx__GraphProto *g = m->graph;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) return false;
    ApxOp op = apx_op_from_name(n->op_type);
    if (!(apx_op_info(op)->flags & (APX_OPF_V1 | APX_OPF_FOLD))) return false;
  }
  auto dense = [](const Onnx__ValueInfoProto *v) {
    return v->type && v->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
           v->type->tensor_type->elem_type != APX_DT_STRING;
  };
  for (size_t i = 0; i < g->n_input; i++)
    if (!dense(g->input[i])) return false;
  for (size_t i = 0; i < g->n_output; i++)
    if (!dense(g->output[i])) return false;
  return true;
}

// The message without file, node and quoted names, up to any parenthesis:
// "unknown op", "not supported yet: Upsample is a tier-2 op", "graph input : string tensors ..."
std::string reason_of(const std::string &msg, const std::string &path) {
  std::string r = msg.substr(path.size() + 2);
  if (r.rfind("node '", 0) == 0) r = r.substr(r.find("): ") + 3);
  std::string out;
  bool quoted = false;
  for (char c : r) {
    if (c == '\'') quoted = !quoted;
    else if (!quoted) out += c;
  }
  size_t cut = out.find(" (");
  if (cut != std::string::npos) out = out.substr(0, cut);
  return out;
}

TEST(OnnxLoad, OnnxNodeTestModels) {
  const std::string root = "/usr/share/libonnx-testdata/data/node";
  DIR *dp = opendir(root.c_str());
  if (!dp) GTEST_SKIP() << root << " not installed (Debian libonnx-testdata)";
  std::vector<std::string> names;
  while (struct dirent *de = readdir(dp))
    if (de->d_name[0] != '.') names.push_back(de->d_name);
  closedir(dp);
  std::sort(names.begin(), names.end());
  ApxOptions o = default_options();
  o.opset_min = 7;
  o.ir_version_min = 3;
  int loaded = 0, expected = 0;
  std::map<std::string, int> reasons;
  for (const std::string &n : names) {
    std::string path = root + "/" + n + "/model.onnx";
    std::string bytes = read_file(path);
    if (bytes.empty()) continue;
    Onnx__ModelProto *m = onnx__model_proto__unpack(
        nullptr, bytes.size(), reinterpret_cast<const uint8_t *>(bytes.data()));
    ASSERT_NE(m, nullptr) << path;
    bool want = node_model_supported(m);
    onnx__model_proto__free_unpacked(m, nullptr);
    expected += want;
    auto L = load_file(path, &o);
    if (want) {
      EXPECT_LOADS(L);
      if (L->rc == 0) {
        loaded++;
        EXPECT_GE(L->g.n_outputs, 1);
        EXPECT_GE(L->g.loss, 0);
      }
    } else {
      EXPECT_EQ(L->rc, -1) << n << " loaded although it uses something v1 lacks";
      EXPECT_EQ(L->d.code, APX_EXIT_BAD_INPUT) << L->d.msg;
      EXPECT_EQ(std::string(L->d.msg).rfind(path + ": ", 0), 0u) << L->d.msg;
      if (L->rc) reasons[reason_of(L->d.msg, path)]++;
    }
  }
  printf("ONNX node tests: %zu models, %d loaded (of %d expected), %zu rejected:\n", names.size(),
         loaded, expected, names.size() - (size_t)loaded);
  for (auto &r : reasons) printf("  %4d  %s\n", r.second, r.first.c_str());
  EXPECT_EQ(loaded, expected);
  EXPECT_GT(loaded, 300);
}

// ---- tensor files -----------------------------------------------------------------------

TEST(OnnxLoad, TensorFilesRoundTrip) {
  std::string dir = temp_dir();
  ApxArena a;
  apx_arena_init(&a);
  ApxDiag d;
  apx_diag_init(&d);
  for (const DtypeCase &c : dtype_cases()) {
    ApxTensor t;
    memset(&t, 0, sizeof t);
    t.data = const_cast<char *>(c.bytes.data());
    t.dtype = c.dt;
    t.rank = 2;
    t.dims[0] = 3;
    t.dims[1] = 2;
    std::string p = dir + "/t.pb";
    ASSERT_EQ(apx_onnx_write_tensor_file(p.c_str(), "input", &t, &d), 0) << d.msg;
    ApxTensorConst back;
    const char *name = nullptr;
    ASSERT_EQ(apx_onnx_read_tensor_file(p.c_str(), &a, &back, &name, &d), 0) << d.msg;
    EXPECT_STREQ(name, "input");
    EXPECT_EQ(back.dtype, c.dt);
    ASSERT_EQ(back.rank, 2);
    EXPECT_EQ(back.dims[0], 3);
    EXPECT_EQ(back.dims[1], 2);
    EXPECT_EQ(std::string(static_cast<const char *>(back.data), c.bytes.size()), c.bytes);
  }
  // the file is a TensorProto protobuf-c itself reads back the same way
  std::string bytes = read_file(dir + "/t.pb");
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(
      nullptr, bytes.size(), reinterpret_cast<const uint8_t *>(bytes.data()));
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->data_type, APX_DT_BOOL);
  EXPECT_EQ(tp->raw_data.len, 6u);
  onnx__tensor_proto__free_unpacked(tp, nullptr);

  write_file(dir + "/bad.pb", "\xff\xff\xff");
  ApxTensorConst x;
  EXPECT_EQ(apx_onnx_read_tensor_file((dir + "/bad.pb").c_str(), &a, &x, nullptr, &d), -1);
  EXPECT_NE(std::string(d.msg).find("bad.pb: not a valid TensorProto file"), std::string::npos)
      << d.msg;
  apx_diag_init(&d);
  ApxTensor scalar;
  memset(&scalar, 0, sizeof scalar);
  float one = 1.0f;
  scalar.data = &one;
  scalar.dtype = APX_DT_F32;
  EXPECT_EQ(apx_onnx_write_tensor_file("/nonexistent-dir/x.pb", nullptr, &scalar, &d), -1);
  EXPECT_NE(std::string(d.msg).find("/nonexistent-dir/x.pb: cannot write"), std::string::npos)
      << d.msg;
  apx_arena_free(&a);
}

TEST(OnnxLoad, ReadsOnnxTestDataFiles) {
  const std::string dir = "/usr/share/libonnx-testdata/data/node/test_add/test_data_set_0";
  if (access((dir + "/input_0.pb").c_str(), R_OK) != 0) GTEST_SKIP() << "no libonnx-testdata";
  ApxArena a;
  apx_arena_init(&a);
  ApxDiag d;
  apx_diag_init(&d);
  ApxTensorConst x, y, z;
  const char *nx, *ny, *nz;
  ASSERT_EQ(apx_onnx_read_tensor_file((dir + "/input_0.pb").c_str(), &a, &x, &nx, &d), 0) << d.msg;
  ASSERT_EQ(apx_onnx_read_tensor_file((dir + "/input_1.pb").c_str(), &a, &y, &ny, &d), 0) << d.msg;
  ASSERT_EQ(apx_onnx_read_tensor_file((dir + "/output_0.pb").c_str(), &a, &z, &nz, &d), 0) << d.msg;
  EXPECT_STREQ(nx, "x");
  EXPECT_STREQ(nz, "sum");
  ASSERT_EQ(x.dtype, APX_DT_F32);
  ASSERT_EQ(x.rank, 3);
  EXPECT_EQ(x.dims[0], 3);
  EXPECT_EQ(x.dims[1], 4);
  EXPECT_EQ(x.dims[2], 5);
  // test_add's output is input_0 + input_1 (ONNX's reference computed it): check a few
  const float *fx = static_cast<const float *>(x.data), *fy = static_cast<const float *>(y.data),
              *fz = static_cast<const float *>(z.data);
  for (int i = 0; i < 60; i++) EXPECT_FLOAT_EQ(fz[i], fx[i] + fy[i]);
  apx_arena_free(&a);

  // every test-data file of every node test: read, or rejected cleanly (sequence, optional
  // and string payloads are not TensorProtos apexc can hold)
  const std::string root = "/usr/share/libonnx-testdata/data/node";
  DIR *dp = opendir(root.c_str());
  ASSERT_NE(dp, nullptr);
  int ok = 0, rejected = 0;
  while (struct dirent *de = readdir(dp)) {
    if (de->d_name[0] == '.') continue;
    std::string ds = root + "/" + de->d_name + "/test_data_set_0";
    DIR *dd = opendir(ds.c_str());
    if (!dd) continue;
    while (struct dirent *fe = readdir(dd)) {
      std::string f = fe->d_name;
      if (f.size() < 3 || f.substr(f.size() - 3) != ".pb") continue;
      ApxArena ar;
      apx_arena_init(&ar);
      ApxDiag dg;
      apx_diag_init(&dg);
      ApxTensorConst t;
      std::string p = ds + "/" + f;
      if (apx_onnx_read_tensor_file(p.c_str(), &ar, &t, nullptr, &dg) == 0) {
        ok++;
        EXPECT_TRUE(apx_dtype_is_supported(t.dtype));
      } else {
        rejected++;
        EXPECT_EQ(dg.code, APX_EXIT_BAD_INPUT) << dg.msg;
        EXPECT_EQ(std::string(dg.msg).rfind(p + ": ", 0), 0u) << dg.msg;
      }
      apx_arena_free(&ar);
    }
    closedir(dd);
  }
  closedir(dp);
  printf("node test data files: %d read, %d rejected cleanly\n", ok, rejected);
  EXPECT_GT(ok, 1000);
}

// ---- size -------------------------------------------------------------------------------
// ---- raw_data taken out before unpacking (compiler/onnx_wire.h) -------------------------

std::string varint_bytes(uint64_t v, size_t min_len = 1) {  // min_len > needed: padded form
  std::string s;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    if (v || s.size() + 1 < min_len) b |= 0x80;
    s.push_back((char)b);
  } while (v || s.size() < min_len);
  return s;
}

std::string ld_field(int num, const std::string &payload, size_t len_bytes = 1) {
  return varint_bytes((uint64_t)num << 3 | 2) + varint_bytes(payload.size(), len_bytes) + payload;
}

// A model "w" (f32 [2]) -> Identity -> y, the initializer written by hand: `tensor` is its
// TensorProto bytes, the graph and model lengths written with graph_len_bytes bytes.
std::string hand_model(const std::string &tensor, size_t graph_len_bytes = 1, size_t init_len_bytes = 1) {
  Model m;
  m.node("Identity", {"w"}, {"y"});
  m.output("y");
  std::string b = m.bytes();
  onnx__graph_proto__init(&m.gr);  // the model without its graph, and the graph alone
  Onnx__ModelProto *mp = onnx__model_proto__unpack(nullptr, b.size(), reinterpret_cast<const uint8_t *>(b.data()));
  EXPECT_NE(mp, nullptr);
  std::string graph(onnx__graph_proto__get_packed_size(mp->graph), '\0');
  onnx__graph_proto__pack(mp->graph, reinterpret_cast<uint8_t *>(&graph[0]));
  Onnx__GraphProto *gp = mp->graph;
  mp->graph = nullptr;
  std::string rest(onnx__model_proto__get_packed_size(mp), '\0');
  onnx__model_proto__pack(mp, reinterpret_cast<uint8_t *>(&rest[0]));
  mp->graph = gp;
  onnx__model_proto__free_unpacked(mp, nullptr);
  graph += ld_field(5, tensor, init_len_bytes);
  return rest + ld_field(7, graph, graph_len_bytes);
}

std::string f32_bytes(std::vector<float> v) { return std::string(reinterpret_cast<const char *>(v.data()), v.size() * 4); }

std::string tensor_head() {  // dims [2], FLOAT, name "w"
  return varint_bytes(1 << 3 | 0) + varint_bytes(2) + varint_bytes(2 << 3 | 0) + varint_bytes(1) +
         ld_field(8, "w");
}

std::unique_ptr<Loaded> load_bytes(const std::string &b) {
  auto L = std::make_unique<Loaded>();
  L->rc = apx_onnx_load_memory(&L->g, b.data(), b.size(), nullptr, nullptr, &L->d);
  return L;
}

TEST(OnnxWire, StripsInitializerRawDataAndPointsIntoTheModel) {
  Model m;
  m.init_raw("a", APX_DT_F32, {2}, f32_bytes({1, 2}));
  auto *t = m.tensor("b", APX_DT_F32, {1});  // typed field: nothing to take out
  t->n_float_data = 1;
  t->float_data = m.pool.arr(std::vector<float>{3});
  m.inits.push_back(t);
  m.init_raw("c", APX_DT_F32, {0}, "");
  m.node("Add", {"a", "b"}, {"y"});
  m.node("Identity", {"c"}, {"z"});
  m.output("y");
  m.output("z");
  std::string b = m.bytes();
  const uint8_t *p = reinterpret_cast<const uint8_t *>(b.data());
  ApxStripped st;
  ASSERT_EQ(apx_onnx_strip_raw(p, b.size(), &st), 1);
  ASSERT_EQ(st.n_raw, 3u);
  EXPECT_TRUE(st.raw[0].present);
  EXPECT_FALSE(st.raw[1].present);
  EXPECT_TRUE(st.raw[2].present);
  EXPECT_EQ(st.raw[2].len, 0u);
  ASSERT_EQ(st.raw[0].len, 8u);
  EXPECT_GE(st.raw[0].data, p);
  EXPECT_LE(st.raw[0].data + 8, p + b.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char *>(st.raw[0].data), 8), f32_bytes({1, 2}));
  EXPECT_EQ(st.len, b.size() - 8 - 2 - 2);  // two raw_data fields (key, length, payload) gone
  Onnx__ModelProto *u = onnx__model_proto__unpack(nullptr, st.len, st.buf);
  ASSERT_NE(u, nullptr);
  ASSERT_EQ(u->graph->n_initializer, 3u);
  for (size_t k = 0; k < 3; k++) EXPECT_FALSE(u->graph->initializer[k]->has_raw_data) << k;
  EXPECT_STREQ(u->graph->initializer[0]->name, "a");
  EXPECT_EQ(u->graph->initializer[1]->n_float_data, 1u);
  EXPECT_EQ(u->graph->n_node, 2u);
  onnx__model_proto__free_unpacked(u, nullptr);
  apx_onnx_stripped_free(&st);
  auto L = load(m);
  EXPECT_LOADS(L);
  const float *a = static_cast<const float *>(L->val("a")->data);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[1], 2.0f);
  EXPECT_EQ(*static_cast<const float *>(L->val("b")->data), 3.0f);
}

TEST(OnnxWire, NothingToStripLeavesTheModel) {
  Model m;
  m.node("Relu", {"x"}, {"y"});
  m.input("x", {2});
  m.output("y");
  std::string b = m.bytes();
  ApxStripped st;
  EXPECT_EQ(apx_onnx_strip_raw(reinterpret_cast<const uint8_t *>(b.data()), b.size(), &st), 0);
  EXPECT_EQ(st.buf, nullptr);
}

TEST(OnnxWire, RepeatedRawDataKeepsTheLastAsProtobufDoes) {
  std::string tensor = tensor_head() + ld_field(9, f32_bytes({1, 2})) + ld_field(9, f32_bytes({5, 6}));
  std::string b = hand_model(tensor);
  ApxStripped st;
  ASSERT_EQ(apx_onnx_strip_raw(reinterpret_cast<const uint8_t *>(b.data()), b.size(), &st), 1);
  apx_onnx_stripped_free(&st);
  auto L = load_bytes(b);
  EXPECT_LOADS(L);
  const float *w = static_cast<const float *>(L->val("w")->data);
  EXPECT_EQ(w[0], 5.0f);
  EXPECT_EQ(w[1], 6.0f);
}

TEST(OnnxWire, PaddedLengthsAreWrittenAgainShort) {
  // lengths in 3 bytes (valid protobuf): the stripped model re-encodes the ones it changes
  std::string tensor = tensor_head() + ld_field(9, f32_bytes({7, 8}), 3);
  std::string b = hand_model(tensor, 3, 3);
  ApxStripped st;
  ASSERT_EQ(apx_onnx_strip_raw(reinterpret_cast<const uint8_t *>(b.data()), b.size(), &st), 1);
  Onnx__ModelProto *u = onnx__model_proto__unpack(nullptr, st.len, st.buf);
  ASSERT_NE(u, nullptr);
  ASSERT_EQ(u->graph->n_initializer, 1u);
  EXPECT_STREQ(u->graph->initializer[0]->name, "w");
  onnx__model_proto__free_unpacked(u, nullptr);
  apx_onnx_stripped_free(&st);
  auto L = load_bytes(b);
  EXPECT_LOADS(L);
  EXPECT_EQ(static_cast<const float *>(L->val("w")->data)[1], 8.0f);
}

TEST(OnnxWire, FramingItCannotReadIsLeftToProtobufC) {
  std::string good = tensor_head() + ld_field(9, f32_bytes({1, 2}));
  struct Case {
    const char *what;
    std::string bytes;
  } cases[] = {
      // a 6-byte length: protobuf-c refuses it; a stripped model would have hidden that
      {"graph length in 6 bytes", hand_model(good, 6)},
      {"initializer length in 6 bytes", hand_model(good, 1, 6)},
      {"raw_data length in 6 bytes", hand_model(tensor_head() + ld_field(9, f32_bytes({1, 2}), 6))},
      {"raw_data as a varint", hand_model(tensor_head() + varint_bytes(9 << 3 | 0) + varint_bytes(3))},
      {"group in a tensor", hand_model(tensor_head() + varint_bytes(12 << 3 | 3))},
      {"truncated raw_data", hand_model(good).substr(0, hand_model(good).size() - 3)},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    ApxStripped st;
    EXPECT_EQ(apx_onnx_strip_raw(reinterpret_cast<const uint8_t *>(c.bytes.data()), c.bytes.size(), &st), 0)
        << c.what;
    EXPECT_EQ(st.buf, nullptr) << c.what;
    auto L = load_bytes(c.bytes);
    EXPECT_REJECTS(L, "not a valid ONNX model (protobuf parse failed");
  }
}

TEST(OnnxWire, LargeInitializersOfAModelFileLoadExactly) {
  // payloads of 1 MiB and more are copied into populated pages (copy_payload), from any
  // offset of the file: same bytes, aligned, and the graph's own
  const size_t n = (3u << 20) / 4 + 123;  // not a whole number of pages
  std::vector<float> big(n), odd(n / 2 + 1);
  for (size_t i = 0; i < n; i++) big[i] = (float)i * 0.5f;
  for (size_t i = 0; i < odd.size(); i++) odd[i] = -(float)i;
  Model m;
  m.init_raw("s", APX_DT_F32, {3}, f32_bytes({1, 2, 3}));  // shifts the big ones off page boundaries
  m.init_raw("big", APX_DT_F32, {(int64_t)n}, f32_bytes(big));
  m.init_raw("odd", APX_DT_F32, {(int64_t)odd.size()}, f32_bytes(odd));
  m.node("Identity", {"big"}, {"y"});
  m.node("Identity", {"odd"}, {"z"});
  m.node("Identity", {"s"}, {"u"});
  m.output("y");
  m.output("z");
  m.output("u");
  std::string dir = temp_dir(), path = dir + "/big.onnx", bytes = m.bytes();
  write_file(path, bytes);
  {
    auto L = load_file(path);
    EXPECT_LOADS(L);
    float *b = static_cast<float *>(L->val("big")->data);
    const float *o = static_cast<const float *>(L->val("odd")->data);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ((uintptr_t)b % 16, 0u);
    EXPECT_EQ((uintptr_t)L->val("odd")->data % 16, 0u);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(b[i], big[i]) << i;
    for (size_t i = 0; i < odd.size(); i++) ASSERT_EQ(o[i], odd[i]) << i;
    for (size_t i = 0; i < n; i++) b[i] = 7.0f;  // the graph's memory: the file keeps its bytes
    EXPECT_EQ(b[n / 2], 7.0f);
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_TRUE(ss.str() == bytes);
  remove(path.c_str());
  rmdir(dir.c_str());
}

// Load speed is measured by scripts/bench_compile.sh (issue 12), not here: no timed unit tests.

TEST(OnnxLoad, HundredThousandNodesLoadInOrder) {
  const int N = 100000;
  Model m;
  m.input("v0", {4, 4});
  for (int i = 0; i < N; i++)  // listed backwards: the sort has real work to do
    m.node("Relu", {"v" + std::to_string(N - 1 - i)}, {"v" + std::to_string(N - i)});
  m.output("v" + std::to_string(N));
  std::string b = m.bytes();
  Loaded L;
  ASSERT_EQ(apx_onnx_load_memory(&L.g, b.data(), b.size(), nullptr, nullptr, &L.d), 0) << L.d.msg;
  EXPECT_EQ(L.g.n_nodes, N);
  EXPECT_EQ(L.g.n_order, N);
  // the chain runs from the last node listed to the first: every node after its producer
  for (int k = 0; k < N; k++)
    ASSERT_STREQ(L.g.nodes[L.g.order[k]].name, ("Relu_" + std::to_string(N - 1 - k)).c_str()) << k;
}

}  // namespace
