// node_harness.h - shared test-only helpers for the ONNX backend node tests (Debian
// libonnx-testdata): listing the test folders, classifying a model as "v1" without the
// loader, the list of v1 tests out of scope for apexc v1, reading test-data tensors, the
// harness rule that binds a loaded graph's inputs to a test data set, and compiling a test
// like `apexrun infer` and feeding its plan.
//
// Harness rule for inputs (used by node_shape_test, node_conformance_test,
// kernels/cpu:onnx_node_test and kernels/cuda:onnx_node_cuda_test): the product's rule,
// compiler/bind_inputs.h, as `apexrun infer` applies it: each APX_VAL_INPUT K (index among
// the non-initializer graph inputs) is bound to <data set>/input_K.pb. An input that feeds
// a static-input slot (ops.def STATIC_INPUTS: Reshape's shape, Slice's starts ...) or any
// input of a compile-time op other than Shape (Range, Equal, ConstantOfShape) becomes an
// APX_VAL_CONST with that data, as an exporter's constant would be; the other inputs stay
// runtime data inputs, in order, their dtype and shape checked against (and unknown dims
// taken from) the data (Shape must fold from the static shape alone). ONNX 1.12's test
// data stores bfloat16 tensors as uint16 bit patterns: a uint16 tensor feeding (or
// expected from) a bfloat16 value is taken as bfloat16 with the same bits.
#ifndef APX_TESTS_ONNX_NODE_NODE_HARNESS_H
#define APX_TESTS_ONNX_NODE_NODE_HARNESS_H

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "compiler/bind_inputs.h"
#include "ir/arena.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}

namespace apx_node {

// The node-test folder: $APX_NODE_DIR if set (ad-hoc runs over data/pytorch-converted and
// friends), else /usr/share/libonnx-testdata/data/node.
const char *node_dir();

// Names of the test_* folders of node_dir() that hold a model.onnx, sorted.
std::vector<std::string> list_tests();

// Names of the test_data_set_* folders of test_dir, sorted.
std::vector<std::string> list_data_sets(const std::string &test_dir);

bool read_file(const std::string &path, std::vector<uint8_t> *buf);

// Reads the model's node op types without the loader (protobuf-c). True ("v1") when every
// node is an ai.onnx op that apexc supports (ops.def V1 or FOLD). *ops receives the op types
// in first-use order, comma separated; op_set (optional) the same as a set.
bool model_is_v1(const std::string &model_path, std::string *ops,
                 std::set<std::string> *op_set = nullptr);

// v1 tests that are out of scope for apexc v1, with the reason. The loader or inference
// must reject each cleanly (node_shape_test checks that; one that starts passing must leave
// the list).
const std::map<std::string, std::string> &excluded_tests();

// Element i of a host buffer of dtype dt as a double (NaN for types without a number).
double elem(const void *p, ApxDType dt, int64_t i);

std::string dims_str(int32_t rank, const int64_t *dims);

// The dtype a test-data tensor stored as `file` stands for when the graph declares
// `declared` (uint16 -> bfloat16, see the file comment).
ApxDType data_dtype(ApxDType file, ApxDType declared);

// Value ids that must become compile-time constants under the harness rule.
std::set<int> static_fed_inputs(const ApxGraph *g);

// apx_options_init plus what every node test loads with: opset 7 and IR version 3 and newer
// (the node tests' models are older than apexc's defaults), training off.
void options_init(ApxOptions *o);

// Reads a TensorProto file into arena; false with the reason in *err.
bool read_tensor(const std::string &path, ApxArena *arena, ApxTensorConst *t, std::string *err);

// Applies the harness rule to a freshly loaded graph with the tensors of data_dir
// (input_K.pb): sets dtype and shape of every graph input, turns static-fed inputs into
// constants (data in g's arena) and keeps the others as g->inputs, in order; their tensors
// are appended to *data (same order). False with the reason in *err.
bool bind_inputs(ApxGraph *g, const std::string &data_dir, std::vector<ApxTensorConst> *data,
                 std::string *err);

// Reads output_0.pb, output_1.pb ... of data_dir (as many as exist) into arena.
bool read_outputs(const std::string &data_dir, ApxArena *arena, std::vector<ApxTensorConst> *out,
                  std::string *err);

// ---- compiling a node test like `apexrun infer` (node_conformance_test, onnx_node_cuda_test)

// Fp32: -O0; Fp16 / Bf16: -O3 --half=fp16|bf16 --half-ops=<the model's op types>, without a
// loss (node_conformance_test.cc's file comment says why). Training off in every mode.
enum Mode { kFp32 = 0, kFp16 = 1, kBf16 = 2 };
extern const char *const kModeName[3];

// A compiled node test: the graph, its plan and the data set's tensors of the plan's data
// inputs; ex is the executor when the test starts one (have_ex).
struct Compiled {
  ApxGraph g;
  ApxPlan plan;
  ApxExec ex;
  bool have_ex = false;
  std::vector<ApxTensorConst> data;  // the data inputs' tensors, g.inputs order
  std::vector<std::string> data_names;
  explicit Compiled(const std::string &model);
  ~Compiled();
  Compiled(const Compiled &) = delete;
  Compiled &operator=(const Compiled &) = delete;
};

// Loads model (opset_min 7, ir_version_min 3), binds the inputs of data_dir (bind_inputs),
// compiles in `mode` (apx_compile_graph; the verifier after every pass with
// verify_each_pass), runs pass_memplan when the pipeline left it out and emits the plan.
// opset: the model's op types (model_is_v1). False with the stage and message in *err.
bool compile(const std::string &model, const std::string &data_dir, Mode mode,
             const std::set<std::string> &opset, bool verify_each_pass, Compiled *c,
             std::string *err);

// Feeds every plan data input of ex from c's data set (matched by name). False with the
// reason in *err.
bool set_inputs(ApxExec *ex, const Compiled &c, std::string *err);

}  // namespace apx_node

#endif
