// precision_testing.h - graph builder for the precision pass tests (overflow_check,
// precision, cast_insert, cast_cleanup, explain, policy): graphs are built by hand with
// dtypes and shapes set directly (no loader), and every pass run is followed by
// apx_graph_toposort + apx_graph_verify (STYLE.md 13).
#ifndef APX_PRECISION_TESTING_H
#define APX_PRECISION_TESTING_H

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "ir/options.h"
#include "ir/pass.h"
#include "compiler/policy_file.h"
#include "passes/precision_rules.h"
#include "passes/cast_cleanup.h"
#include "passes/cast_insert.h"
#include "passes/overflow_check.h"
#include "passes/precision.h"
}

namespace apxtest {

using Dims = std::vector<int64_t>;

struct PGraph {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  char *warn_buf = nullptr;
  size_t warn_len = 0;
  ApxPolicy policy;
  bool policy_loaded = false;

  explicit PGraph(ApxOptLevel level, ApxDType half = APX_DT_F16) {
    apx_graph_init(&g, "m.onnx");
    apx_diag_init(&d);
    d.warn_stream = open_memstream(&warn_buf, &warn_len);
    apx_options_init(&o);
    o.opt_level = level;
    o.half = half;
    o.verify_each_pass = 1;
  }
  ~PGraph() {
    if (policy_loaded) apx_policy_free(&policy);
    if (d.warn_stream) fclose(d.warn_stream);
    free(warn_buf);
    apx_graph_free(&g);
  }
  PGraph(const PGraph &) = delete;
  PGraph &operator=(const PGraph &) = delete;

  // Reads o.policy_path as the driver does (compiler/policy_file.h) into o.policy.
  // Returns 0, or -1 with the reader's message in d.
  int load_policy() {
    if (!policy_loaded) apx_policy_init(&policy);
    policy_loaded = true;
    if (apx_policy_load_file(&policy, o.policy_path, &d)) return -1;
    o.policy = &policy;
    return 0;
  }
  // Applies the opt-level preset (call after setting flags, before running passes); reads
  // o.policy_path when set.
  void preset() {
    char err[256];
    ASSERT_EQ(apx_options_apply_preset(&o, err, sizeof err), 0) << err;
    if (o.policy_path && !o.policy) {
      ASSERT_EQ(load_policy(), 0) << d.msg;
    }
  }

  // graph input/output lists live in the arena like the loader's
  int *grow(int *old, int32_t n) {
    int *p = (int *)apx_arena_alloc(&g.arena, sizeof(int) * (size_t)(n + 1));
    if (n) memcpy(p, old, sizeof(int) * (size_t)n);
    return p;
  }
  int value(const char *name, ApxValueKind kind, const Dims &dims, ApxDType dt = APX_DT_F32) {
    int v = apx_graph_add_value(&g, &d, name, kind, dt, (int32_t)dims.size(), dims.data());
    EXPECT_GE(v, 0) << d.msg;
    return v;
  }
  int input(const char *name, const Dims &dims, ApxDType dt = APX_DT_F32) {
    int v = value(name, APX_VAL_INPUT, dims, dt);
    g.inputs = grow(g.inputs, g.n_inputs);
    g.inputs[g.n_inputs++] = v;
    return v;
  }
  // A float32 constant (kind CONST or PARAM) filled with `vals` repeated to numel.
  int constant(const char *name, const Dims &dims, std::vector<float> vals,
               ApxValueKind kind = APX_VAL_CONST) {
    int v = value(name, kind, dims);
    int64_t n = apx_value_numel(&g.vals[v]);
    float *data = (float *)apx_arena_alloc(&g.arena, sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) data[i] = vals.empty() ? 0.0f : vals[(size_t)i % vals.size()];
    g.vals[v].data = data;
    return v;
  }
  int param(const char *name, const Dims &dims, std::vector<float> vals = {0.5f, -0.25f}) {
    return constant(name, dims, vals, APX_VAL_PARAM);
  }
  int int_const(const char *name, const Dims &dims, std::vector<int64_t> vals) {
    int v = value(name, APX_VAL_CONST, dims, APX_DT_I64);
    int64_t n = apx_value_numel(&g.vals[v]);
    int64_t *data = (int64_t *)apx_arena_alloc(&g.arena, sizeof(int64_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) data[i] = vals[(size_t)i % vals.size()];
    g.vals[v].data = data;
    return v;
  }
  // Node with explicit value ids; returns the node id.
  int node(ApxOp op, const char *name, std::vector<int> in, std::vector<int> out,
           ApxSection sec = APX_SEC_FORWARD, int origin = -1) {
    int id = apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
    EXPECT_GE(id, 0) << d.msg;
    g.nodes[id].section = sec;
    g.nodes[id].origin = origin;
    return id;
  }
  // Node with one new float activation output "<name>:0" of the given shape; returns the
  // output value id.
  int op(ApxOp op, const char *name, std::vector<int> in, const Dims &dims,
         ApxDType dt = APX_DT_F32, ApxSection sec = APX_SEC_FORWARD, int origin = -1) {
    std::string out = std::string(name) + ":0";
    int v = value(out.c_str(), APX_VAL_ACTIVATION, dims, dt);
    node(op, name, in, {v}, sec, origin);
    return v;
  }
  void output(int v) {
    g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
    g.outputs = grow(g.outputs, g.n_outputs);
    g.outputs[g.n_outputs++] = v;
  }
  void loss(int v) {
    output(v);
    g.vals[v].flags |= APX_VALF_LOSS;
    g.loss = v;
  }

  int find_node(const char *name) const {
    for (int i = 0; i < g.n_nodes; i++)
      if (!strcmp(g.nodes[i].name, name)) return i;
    return -1;
  }
  const ApxNode &n(const char *name) const {
    int id = find_node(name);
    EXPECT_GE(id, 0) << "no node " << name;
    return g.nodes[id < 0 ? 0 : id];
  }
  const ApxValue &v(int id) const { return g.vals[id]; }
  int val(const char *name) const { return apx_graph_find_value(&g, name); }

  // Runs pass fn, then toposort + verify. Returns the pass's result.
  int run(ApxPassFn fn) {
    if (g.n_order == 0 && g.n_nodes > 0) {
      EXPECT_EQ(apx_graph_toposort(&g, &d), 0) << d.msg;
    }
    int rc = fn(&g, &o, &d);
    if (rc >= 0) {
      EXPECT_EQ(apx_graph_toposort(&g, &d), 0) << d.msg;
      EXPECT_EQ(apx_graph_verify(&g, &d), 0) << d.msg;
    }
    return rc;
  }
  // overflow_check + precision: every node decided.
  void decide() {
    ASSERT_GE(run(pass_overflow_check), 0) << d.msg;
    ASSERT_GE(run(pass_precision), 0) << d.msg;
  }
  // All four precision passes, in pipeline order.
  void compile() {
    decide();
    ASSERT_GE(run(pass_cast_insert), 0) << d.msg;
    ASSERT_GE(run(pass_cast_cleanup), 0) << d.msg;
    check_consistent();
  }

  std::string warnings() {
    fflush(d.warn_stream);
    return warn_buf ? std::string(warn_buf, warn_len) : std::string();
  }

  // After cast insertion: every data input of a float node is in its compute type, every
  // following float output too (the invariant cast_insert establishes).
  void check_consistent() {
    for (int k = 0; k < g.n_order; k++) {
      int id = g.order[k];
      const ApxNode &nd = g.nodes[id];
      if (nd.op == APX_OP_Cast || apx_prec_is_fixed_node(&g, id) || !apx_prec_is_float_node(&g, id))
        continue;
      for (int i = 0; i < nd.n_in; i++) {
        if (nd.in[i] < 0 || apx_prec_input_role(&g, id, i) != APX_IN_DATA) continue;
        ApxDType t = g.vals[nd.in[i]].dtype;
        if (apx_dtype_is_float(t)) {
          EXPECT_EQ(t, nd.compute) << nd.name << " input " << i << " " << g.vals[nd.in[i]].name;
        }
      }
      for (int i = 0; i < nd.n_out; i++) {
        if (nd.out[i] < 0 || !apx_prec_output_follows(&g, id, i)) continue;
        ApxDType t = g.vals[nd.out[i]].dtype;
        if (apx_dtype_is_float(t)) {
          EXPECT_EQ(t, nd.compute) << nd.name << " output " << i;
        }
      }
    }
  }

  int count_live(ApxOp op) const {
    int c = 0;
    for (int i = 0; i < g.n_nodes; i++) c += g.nodes[i].op == op && !(g.nodes[i].flags & APX_NODEF_DEAD);
    return c;
  }
  // Live Cast node reading value v, or -1.
  int cast_of(int v) const {
    for (int i = 0; i < g.n_nodes; i++)
      if (g.nodes[i].op == APX_OP_Cast && !(g.nodes[i].flags & APX_NODEF_DEAD) && g.nodes[i].in[0] == v)
        return i;
    return -1;
  }
};

// Typed attribute access by node id.
template <typename T>
T *attrs(PGraph &t, int node) {
  return (T *)t.g.nodes[node].typed;
}

}  // namespace apxtest

#endif
