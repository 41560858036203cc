// graph_builder.h - test-only C++ helper that builds small graphs the way the ONNX loader
// does (generic attributes, constant static inputs, onnx_index set) and canonicalizes and
// infers each node as it is added. Header-only; errors fail the current GoogleTest test.
#ifndef APX_TESTING_GRAPH_BUILDER_H
#define APX_TESTING_GRAPH_BUILDER_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "ir/infer.h"
#include "ir/ir.h"
#include "ir/options.h"
}

namespace apx_testing {

// One generic ONNX attribute.
struct Attr {
  std::string name;
  ApxAttrType type = APX_ATTR_UNDEFINED;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
  std::string s;
  static Attr Int(const std::string &n, int64_t v) {
    Attr a;
    a.name = n, a.type = APX_ATTR_INT, a.i = v;
    return a;
  }
  static Attr Float(const std::string &n, float v) {
    Attr a;
    a.name = n, a.type = APX_ATTR_FLOAT, a.f = v;
    return a;
  }
  static Attr Ints(const std::string &n, std::vector<int64_t> v) {
    Attr a;
    a.name = n, a.type = APX_ATTR_INTS, a.ints = std::move(v);
    return a;
  }
  static Attr Str(const std::string &n, const std::string &v) {
    Attr a;
    a.name = n, a.type = APX_ATTR_STRING, a.s = v;
    return a;
  }
};

class GraphBuilder {
 public:
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  std::mt19937_64 rng{12345};

  explicit GraphBuilder(int64_t opset = 17) {
    apx_graph_init(&g, "model.onnx");
    g.opset = opset;
    g.ir_version = 8;
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    o.verify_each_pass = 1;
  }
  ~GraphBuilder() { apx_graph_free(&g); }
  GraphBuilder(const GraphBuilder &) = delete;
  GraphBuilder &operator=(const GraphBuilder &) = delete;

  static int64_t Numel(const std::vector<int64_t> &dims) {
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    return n;
  }

  // A value with data (PARAM / CONST / STATE) of the given dtype from doubles.
  int Data(const std::string &name, ApxValueKind kind, ApxDType dt, const std::vector<int64_t> &dims,
           const std::vector<double> &vals) {
    int v = apx_graph_add_value(&g, &d, name.c_str(), kind, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    if (v < 0) return v;
    int64_t n = Numel(dims);
    EXPECT_EQ((int64_t)vals.size(), n) << name;
    size_t es = apx_dtype_size(dt);
    void *p = apx_arena_alloc(&g.arena, (size_t)n * es + 1);
    for (int64_t k = 0; k < n && k < (int64_t)vals.size(); k++) {
      switch (dt) {
        case APX_DT_F64: ((double *)p)[k] = vals[k]; break;
        case APX_DT_F32: ((float *)p)[k] = (float)vals[k]; break;
        case APX_DT_I64: ((int64_t *)p)[k] = (int64_t)vals[k]; break;
        case APX_DT_I32: ((int32_t *)p)[k] = (int32_t)vals[k]; break;
        case APX_DT_BOOL: ((uint8_t *)p)[k] = vals[k] != 0.0; break;
        default: ADD_FAILURE() << "Data: dtype " << apx_dtype_name(dt); break;
      }
    }
    g.vals[v].data = p;
    return v;
  }

  // Uniform values in [lo, hi]; with min_abs > 0 the magnitude is at least min_abs
  // (random sign when lo < 0), keeping inputs away from kinks.
  std::vector<double> Random(int64_t n, double lo = -1, double hi = 1, double min_abs = 0) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> r((size_t)n);
    for (auto &x : r) {
      do x = u(rng);
      while (std::fabs(x) < min_abs);
    }
    return r;
  }
  // n distinct values spaced >= spacing apart, shuffled (max-pool windows without ties).
  std::vector<double> Distinct(int64_t n, double spacing = 0.05) {
    std::vector<double> r((size_t)n);
    for (int64_t k = 0; k < n; k++) r[(size_t)k] = (double)k * spacing - (double)n * spacing / 2;
    std::shuffle(r.begin(), r.end(), rng);
    return r;
  }

  int Param(const std::string &name, const std::vector<int64_t> &dims, double lo = -1, double hi = 1,
            double min_abs = 0, ApxDType dt = APX_DT_F64) {
    return Data(name, APX_VAL_PARAM, dt, dims, Random(Numel(dims), lo, hi, min_abs));
  }
  int Const(const std::string &name, const std::vector<int64_t> &dims, const std::vector<double> &vals,
            ApxDType dt = APX_DT_F64) {
    return Data(name, APX_VAL_CONST, dt, dims, vals);
  }
  int Ints(const std::string &name, const std::vector<int64_t> &vals) {
    std::vector<double> v(vals.begin(), vals.end());
    return Data(name, APX_VAL_CONST, APX_DT_I64, {(int64_t)vals.size()}, v);
  }
  int Input(const std::string &name, const std::vector<int64_t> &dims, ApxDType dt = APX_DT_F64) {
    int v = apx_graph_add_value(&g, &d, name.c_str(), APX_VAL_INPUT, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    return v;
  }

  // Adds an ONNX node (inputs -1 = absent), canonicalizes and infers it; returns its
  // outputs (n_out new values, or the given output names).
  std::vector<int> Node(const std::string &op, const std::vector<int> &in, int n_out = 1,
                        const std::vector<Attr> &attrs = {}, const std::string &name = "") {
    ApxOp id = apx_op_from_name(op.c_str());
    EXPECT_NE(id, APX_OP_INVALID) << op;
    std::vector<int> out;
    std::string nn = name.empty() ? op + "_" + std::to_string(n_nodes_) : name;
    for (int k = 0; k < n_out; k++) {
      std::string vn = nn + "_out" + std::to_string(k);
      out.push_back(apx_graph_add_value(&g, &d, vn.c_str(), APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, nullptr));
    }
    int node = apx_graph_add_node(&g, &d, id, nn.c_str(), (int)in.size(), in.data(), n_out, out.data());
    EXPECT_GE(node, 0) << d.msg;
    if (node < 0) return out;
    ApxNode *n = &g.nodes[node];
    n->onnx_index = n_nodes_++;
    n->n_attrs = (int32_t)attrs.size();
    n->attrs = (ApxAttr *)apx_arena_alloc(&g.arena, sizeof(ApxAttr) * (attrs.size() + 1));
    for (size_t k = 0; k < attrs.size(); k++) {
      ApxAttr *a = &n->attrs[k];
      a->name = apx_arena_strdup(&g.arena, attrs[k].name.c_str());
      a->type = attrs[k].type;
      a->i = attrs[k].i;
      a->f = attrs[k].f;
      if (attrs[k].type == APX_ATTR_STRING) a->s = apx_arena_strdup(&g.arena, attrs[k].s.c_str());
      if (attrs[k].type == APX_ATTR_INTS) {
        a->n = (int32_t)attrs[k].ints.size();
        a->ints = (int64_t *)apx_arena_memdup(&g.arena, attrs[k].ints.data(), sizeof(int64_t) * attrs[k].ints.size());
      }
    }
    EXPECT_EQ(apx_node_canonicalize(&g, node, &d), 0) << d.msg;
    EXPECT_EQ(apx_node_infer(&g, node, &d), 0) << d.msg;
    last_node = node;
    return out;
  }
  // A node added as the loader would, without canonicalization or inference (ops those do
  // not support): its one output gets dtype dt and shape dims. Returns the output.
  int RawNode(const std::string &op_type, ApxOp op, const std::string &name, const std::vector<int> &in,
              ApxDType dt, const std::vector<int64_t> &dims) {
    int out = apx_graph_add_value(&g, &d, (name + "_out0").c_str(), APX_VAL_ACTIVATION, dt,
                                  (int32_t)dims.size(), dims.data());
    int node = apx_graph_add_node(&g, &d, op, name.c_str(), (int)in.size(), in.data(), 1, &out);
    EXPECT_GE(node, 0) << d.msg;
    g.nodes[node].onnx_index = n_nodes_++;
    g.nodes[node].op_type = apx_arena_strdup(&g.arena, op_type.c_str());
    last_node = node;
    return out;
  }
  int Op(const std::string &op, const std::vector<int> &in, const std::vector<Attr> &attrs = {}) {
    return Node(op, in, 1, attrs)[0];
  }

  // loss = ReduceSum(y * W) over all elements (W fixed random, y's dtype), a scalar.
  int WeightedSumLoss(int y) {
    const ApxValue &v = g.vals[y];
    std::vector<int64_t> dims(v.dims, v.dims + v.rank);
    int w = Const("loss_weights_" + std::to_string(y), dims, Random(Numel(dims), -1, 1), v.dtype);
    int m = Op("Mul", {y, w});
    int l = Op("ReduceSum", {m}, {Attr::Int("keepdims", 0)});
    SetLoss(l);
    return l;
  }
  void SetLoss(int l) {
    g.loss = l;
    g.vals[l].flags |= APX_VALF_LOSS | APX_VALF_GRAPH_OUTPUT;
    g.outputs = (int *)apx_arena_memdup(&g.arena, &l, sizeof l);
    g.n_outputs = 1;
  }

  // Toposort + verify; false (with a test failure) on error.
  bool SortAndVerify() {
    if (apx_graph_toposort(&g, &d) != 0) {
      ADD_FAILURE() << "toposort: " << d.msg;
      return false;
    }
    if (apx_graph_verify(&g, &d) != 0) {
      ADD_FAILURE() << "verify: " << d.msg;
      return false;
    }
    return true;
  }
  // Runs pass fn, then toposort + verify when it changed the graph; returns the pass result.
  // A pass that says it kept the order (2, APX_PASS_CHANGED_KEEPS_ORDER) must have left
  // exactly the order a fresh sort gives.
  int RunPass(int (*fn)(ApxGraph *, const ApxOptions *, ApxDiag *)) {
    int rc = fn(&g, &o, &d);
    if (rc == 2) {
      std::vector<int> kept(g.order, g.order + g.n_order);
      if (SortAndVerify() && kept != std::vector<int>(g.order, g.order + g.n_order))
        ADD_FAILURE() << "the pass said it kept the order, a fresh sort gives another";
    } else if (rc > 0) {
      SortAndVerify();
    } else if (rc == 0 && apx_graph_verify(&g, &d) != 0) {
      ADD_FAILURE() << "verify: " << d.msg;
    }
    return rc;
  }

  int NodeByOp(ApxOp op, int nth = 0) const {
    for (int i = 0; i < g.n_nodes; i++)
      if (g.nodes[i].op == op && !(g.nodes[i].flags & APX_NODEF_DEAD) && nth-- == 0) return i;
    return -1;
  }
  int CountOp(ApxOp op) const {
    int c = 0;
    for (int i = 0; i < g.n_nodes; i++) c += g.nodes[i].op == op && !(g.nodes[i].flags & APX_NODEF_DEAD);
    return c;
  }
  int Value(const std::string &name) const { return apx_graph_find_value(&g, name.c_str()); }

  int last_node = -1;

 private:
  int n_nodes_ = 0;
};

}  // namespace apx_testing

#endif
