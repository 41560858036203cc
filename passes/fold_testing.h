// fold_testing.h - test-only graph builder for the constant-folding tests
// (fold_constants_test.cc, fold_constants_exec_test.cc): values with raw bytes of any dtype
// (fp16/bf16 included), nodes with generic attributes left for the pass to canonicalize, and
// fold(): the pass followed by apx_graph_toposort + apx_graph_verify, its warnings captured.
// Header-only.
#ifndef APX_FOLD_TESTING_H
#define APX_FOLD_TESTING_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ir/ir.h"
#include "ir/options.h"
#include "kernels/half.h"
#include "passes/fold_constants.h"
}

namespace apx_testing {

using Dims = std::vector<int64_t>;

struct FoldGraph {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  std::string warnings;  // what the last fold() warned
  std::vector<int> ins, outs;
  FoldGraph() {
    apx_graph_init(&g, "m.onnx");
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    g.opset = 17;
  }
  ~FoldGraph() { apx_graph_free(&g); }
  FoldGraph(const FoldGraph &) = delete;
  FoldGraph &operator=(const FoldGraph &) = delete;
  int input(const char *name, ApxDType dt, Dims dims) {
    int v = apx_graph_add_value(&g, &d, name, APX_VAL_INPUT, dt, (int32_t)dims.size(), dims.data());
    ins.push_back(v);
    g.inputs = (int *)apx_arena_memdup(&g.arena, ins.data(), sizeof(int) * ins.size());
    g.n_inputs = (int32_t)ins.size();
    return v;
  }
  int value(const char *name) {
    return apx_graph_add_value(&g, &d, name, APX_VAL_ACTIVATION, APX_DT_UNDEFINED, -1, nullptr);
  }
  // A value of kind k holding data (T's bytes as dtype dt: uint16_t for fp16/bf16).
  template <typename T>
  int cst(const char *name, ApxDType dt, Dims dims, std::vector<T> data, ApxValueKind k = APX_VAL_CONST) {
    int v = apx_graph_add_value(&g, &d, name, k, dt, (int32_t)dims.size(), dims.data());
    g.vals[v].data = apx_arena_alloc(&g.arena, data.size() * sizeof(T) + 1);
    if (!data.empty()) memcpy(g.vals[v].data, data.data(), data.size() * sizeof(T));
    return v;
  }
  int ints(const char *name, std::vector<int64_t> xs) { return cst<int64_t>(name, APX_DT_I64, {(int64_t)xs.size()}, xs); }
  int node(ApxOp op, const char *name, std::vector<int> in, std::vector<int> out) {
    int n = apx_graph_add_node(&g, &d, op, name, (int)in.size(), in.data(), (int)out.size(), out.data());
    g.nodes[n].onnx_index = n;
    return n;
  }
  ApxAttr *attr(int n, const char *name, ApxAttrType t) {
    ApxNode *nd = &g.nodes[n];
    ApxAttr *a = (ApxAttr *)apx_arena_alloc(&g.arena, sizeof(ApxAttr) * (nd->n_attrs + 1));
    if (nd->n_attrs) memcpy(a, nd->attrs, sizeof(ApxAttr) * nd->n_attrs);
    nd->attrs = a;
    ApxAttr *x = &a[nd->n_attrs++];
    memset(x, 0, sizeof *x);
    x->name = apx_arena_strdup(&g.arena, name);
    x->type = t;
    return x;
  }
  void output(int v) {
    outs.push_back(v);
    g.outputs = (int *)apx_arena_memdup(&g.arena, outs.data(), sizeof(int) * outs.size());
    g.n_outputs = (int32_t)outs.size();
    g.vals[v].flags |= APX_VALF_GRAPH_OUTPUT;
  }
  // Runs the pass with o, re-sorts and verifies (as the pipeline does in tests); -2/-3 when
  // the sort or the verifier fails.
  int fold() {
    if (apx_graph_toposort(&g, &d)) return -2;
    char *buf = nullptr;
    size_t len = 0;
    FILE *ws = open_memstream(&buf, &len);
    d.quiet = 0;
    d.warn_stream = ws;
    int r = pass_fold_constants(&g, &o, &d);
    fclose(ws);
    warnings.assign(buf, len);
    free(buf);
    d.quiet = 1;
    d.warn_stream = nullptr;
    if (r < 0) return r;
    if (apx_graph_toposort(&g, &d) || apx_graph_verify(&g, &d)) return -3;
    return r;
  }
  bool dead(int n) const { return g.nodes[n].flags & APX_NODEF_DEAD; }
  bool is_const(int v) const { return g.vals[v].kind == APX_VAL_CONST && g.vals[v].data; }
  template <typename T>
  std::vector<T> data(int v) const {
    const T *p = (const T *)g.vals[v].data;
    return std::vector<T>(p, p + apx_value_numel(&g.vals[v]));
  }
  Dims shape(int v) const { return Dims(g.vals[v].dims, g.vals[v].dims + g.vals[v].rank); }
  int live() const {
    int n = 0;
    for (int i = 0; i < g.n_nodes; i++) n += !dead(i);
    return n;
  }
};

// xs rounded to fp16 (bf16 = false) or bf16 bit patterns.
inline std::vector<uint16_t> Halves(const std::vector<float> &xs, bool bf16) {
  std::vector<uint16_t> h;
  for (float x : xs) h.push_back(bf16 ? apx_f32_to_bf16(x) : apx_f32_to_f16(x));
  return h;
}

}  // namespace apx_testing

#endif
