// fusion_testing.h - helpers for the fusion pass tests (passes/fuse_*_test.cc).
//
// A test describes a model as a function that fills an apx_testing::GraphBuilder (nodes
// added the way the loader adds them, canonicalized and inferred). Compile() builds it and
// runs the passes that come before fusion in the pipeline (autodiff, optimizer,
// overflow_check, precision, cast_insert, cast_cleanup, master_weights) at an opt level,
// then the fusion passes asked for, with toposort + apx_graph_verify after every pass
// (STYLE.md 13). ExpectSameResults() runs forward and backward of a fused and an unfused
// compilation of the same model on the CPU reference kernels (tests/testing/graph_eval.h)
// and compares graph outputs and parameter gradients within K eps of the compute type.
#ifndef APX_FUSION_TESTING_H
#define APX_FUSION_TESTING_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/graph_builder.h"

extern "C" {
#include "passes/fusion.h"
#include "passes/precision_rules.h"
#include "passes/autodiff.h"
#include "passes/cast_cleanup.h"
#include "passes/cast_insert.h"
#include "passes/fuse_bn_relu.h"
#include "passes/fuse_casts.h"
#include "passes/fuse_conv.h"
#include "passes/fuse_dense.h"
#include "passes/fuse_layernorm.h"
#include "passes/fuse_softmax.h"
#include "passes/fuse_xentropy.h"
#include "passes/master_weights.h"
#include "passes/optimizer.h"
#include "passes/overflow_check.h"
#include "passes/precision.h"
#include "tests/testing/graph_eval.h"
}

namespace apx_fusion_testing {

using apx_testing::Attr;
using apx_testing::GraphBuilder;
using PassFn = int (*)(ApxGraph *, const ApxOptions *, ApxDiag *);
using BuildFn = std::function<void(GraphBuilder &)>;

// All fusion passes in pipeline order (compiler/pipeline.c).
inline std::vector<PassFn> AllFusions() {
  return {pass_fuse_xentropy, pass_fuse_softmax, pass_fuse_layernorm, pass_fuse_dense,
          pass_fuse_bn_relu,  pass_fuse_conv,    pass_fuse_casts};
}

struct Options {
  ApxOptLevel level = APX_O0;
  ApxDType half = APX_DT_F16;
  bool no_fuse = false;
  std::vector<std::string> fp32_ops;  // --fp32-ops
};

// A data input registered in g.inputs (as the loader does).
inline int AddInput(GraphBuilder &b, const std::string &name, const std::vector<int64_t> &dims,
                    ApxDType dt = APX_DT_F32) {
  int v = b.Input(name, dims, dt);
  int *in = (int *)apx_arena_alloc(&b.g.arena, sizeof(int) * (size_t)(b.g.n_inputs + 1));
  for (int i = 0; i < b.g.n_inputs; i++) in[i] = b.g.inputs[i];
  in[b.g.n_inputs++] = v;
  b.g.inputs = in;
  return v;
}
// A float32 parameter with values uniform in [lo, hi].
inline int F32Param(GraphBuilder &b, const std::string &name, const std::vector<int64_t> &dims, double lo = -1,
                    double hi = 1) {
  return b.Param(name, dims, lo, hi, 0, APX_DT_F32);
}
inline int F32Const(GraphBuilder &b, const std::string &name, const std::vector<int64_t> &dims,
                    const std::vector<double> &vals) {
  return b.Const(name, dims, vals, APX_DT_F32);
}
inline int Scalar(GraphBuilder &b, const std::string &name, double x) { return F32Const(b, name, {}, {x}); }

// One compiled model.
struct Compiled {
  std::unique_ptr<GraphBuilder> b;
  bool ok = false;
  ApxGraph &g() { return b->g; }

  int Count(ApxOp op) const { return b->CountOp(op); }
  int Node(ApxOp op, int nth = 0) const { return b->NodeByOp(op, nth); }
  const ApxFusionLog *Log() const { return b->g.fusion; }
  // Records of the log with the given outcome.
  std::vector<const ApxFusionRecord *> Records(ApxFusionWhy why) const {
    std::vector<const ApxFusionRecord *> r;
    if (!b->g.fusion) return r;
    for (int i = 0; i < b->g.fusion->n; i++)
      if (b->g.fusion->recs[i].why == why) r.push_back(&b->g.fusion->recs[i]);
    return r;
  }
  int Records() const { return b->g.fusion ? b->g.fusion->n : 0; }
};

inline bool RunChecked(GraphBuilder &b, PassFn fn, const char *what) {
  int rc = fn(&b.g, &b.o, &b.d);
  if (rc < 0) {
    ADD_FAILURE() << what << ": " << b.d.msg;
    return false;
  }
  if (rc > 0 && apx_graph_toposort(&b.g, &b.d)) {
    ADD_FAILURE() << what << ": toposort: " << b.d.msg;
    return false;
  }
  if (apx_graph_verify(&b.g, &b.d)) {
    ADD_FAILURE() << "verify after " << what << ": " << b.d.msg;
    return false;
  }
  return true;
}

// Builds the model and runs the pipeline up to fusion, then `fusions`.
inline Compiled Compile(const BuildFn &build, const Options &opt, const std::vector<PassFn> &fusions = AllFusions()) {
  Compiled c;
  c.b.reset(new GraphBuilder());
  GraphBuilder &b = *c.b;
  build(b);
  if (::testing::Test::HasFailure()) return c;
  b.o.opt_level = opt.level;
  b.o.half = opt.half;
  b.o.half_set = 1;
  b.o.no_fuse = opt.no_fuse;
  /* a static loss scale of 1: the gradients compared stay finite in fp16 */
  b.o.loss_scale_mode = APX_LOSS_SCALE_STATIC;
  b.o.loss_scale = 1.0f;
  b.o.loss_scale_set = 1;
  for (const std::string &s : opt.fp32_ops)
    b.o.fp32_ops.items[b.o.fp32_ops.n++] = apx_arena_strdup(&b.g.arena, s.c_str());
  char err[256];
  if (apx_options_apply_preset(&b.o, err, sizeof err)) {
    ADD_FAILURE() << err;
    return c;
  }
  if (!b.SortAndVerify()) return c;
  const std::pair<PassFn, const char *> before[] = {
      {pass_autodiff, "autodiff"},   {pass_optimizer, "optimizer"},       {pass_overflow_check, "overflow_check"},
      {pass_precision, "precision"}, {pass_cast_insert, "cast_insert"},   {pass_cast_cleanup, "cast_cleanup"},
      {pass_master_weights, "master_weights"}};
  for (const auto &p : before)
    if (!RunChecked(b, p.first, p.second)) return c;
  for (PassFn f : fusions)
    if (!RunChecked(b, f, "fusion pass")) return c;
  // the traffic after fusion the passes kept up to date (passes/fusion.h) is the whole graph's
  if (b.g.fusion && b.g.fusion->have_after) {
    ApxTraffic t;
    apx_graph_traffic(&b.g, &t);
    const ApxTraffic &a = b.g.fusion->after;
    for (int s = 0; s < 3; s++) {
      EXPECT_EQ(a.kernels[s], t.kernels[s]) << "section " << s;
      EXPECT_EQ(a.bytes[s], t.bytes[s]) << "section " << s;
    }
    EXPECT_EQ(a.unknown, t.unknown);
  }
  c.ok = true;
  return c;
}

// Deterministic inputs: floats uniform in [-1, 1]; integers in [0, int_range).
inline void FillInputs(ApxEval *e, const ApxGraph *g, int int_range) {
  uint64_t s = 0x2545f4914f6cdd1dull;
  auto next = [&s]() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return (double)(s >> 11) / 9007199254740992.0;
  };
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue &val = g->vals[v];
    if (val.kind != APX_VAL_INPUT) continue;
    for (int64_t k = 0; k < apx_value_numel(&val); k++)
      apx_eval_set(e, v, k, apx_dtype_is_float(val.dtype) ? 2 * next() - 1 : (double)(int)(next() * int_range));
  }
}

inline double Eps(ApxDType t) {
  return t == APX_DT_F16 ? std::ldexp(1.0, -10) : t == APX_DT_BF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -23);
}

// Forward + backward of both compilations; graph outputs and parameter gradients agree:
// normalized error max|a - b| / max(max|b|, 1e-2 * largest magnitude of the same kind) at
// most k * eps(t). Returns the worst normalized error seen.
// `extra`: names of more values to compare (running statistics ...), counted as outputs.
inline double ExpectSameResults(Compiled &fused, Compiled &plain, ApxDType t, double k, int int_range = 4,
                                const std::vector<std::string> &extra = {}) {
  ApxEval ef, ep;
  if (apx_eval_init(&ef, &fused.g()) || apx_eval_init(&ep, &plain.g())) {
    ADD_FAILURE() << "eval init: " << ef.err << ep.err;
    return 1e30;
  }
  FillInputs(&ef, &fused.g(), int_range);
  FillInputs(&ep, &plain.g(), int_range);
  EXPECT_EQ(apx_eval_run(&ef, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ef.err;
  EXPECT_EQ(apx_eval_run(&ep, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ep.err;
  const ApxGraph &pg = plain.g(), &fg = fused.g();
  std::vector<int> cmp;
  for (int i = 0; i < pg.n_outputs; i++) cmp.push_back(pg.outputs[i]);
  for (const std::string &name : extra) {
    int v = apx_graph_find_value(&pg, name.c_str());
    EXPECT_GE(v, 0) << name;
    if (v >= 0) cmp.push_back(v);
  }
  int n_out = (int)cmp.size();
  for (int p = 0; p < pg.n_vals; p++)
    if (pg.vals[p].kind == APX_VAL_PARAM && pg.vals[p].grad >= 0) cmp.push_back(pg.vals[p].grad);
  EXPECT_GT((int)cmp.size(), n_out) << "no parameter gradients to compare";
  std::vector<double> diff(cmp.size()), mag(cmp.size());
  double top[2] = {0, 0};
  for (size_t i = 0; i < cmp.size(); i++) {
    const ApxValue &pv = pg.vals[cmp[i]];
    int fv = apx_graph_find_value(&fg, pv.name);
    if (fv < 0 || apx_value_numel(&fg.vals[fv]) != apx_value_numel(&pv)) {
      ADD_FAILURE() << "no value " << pv.name << " of that size in the fused graph";
      continue;
    }
    for (int64_t j = 0; j < apx_value_numel(&pv); j++) {
      double a = apx_eval_get(&ef, fv, j), b = apx_eval_get(&ep, cmp[i], j);
      EXPECT_TRUE(std::isfinite(a) && std::isfinite(b)) << pv.name << "[" << j << "]";
      diff[i] = std::max(diff[i], std::fabs(a - b));
      mag[i] = std::max(mag[i], std::fabs(b));
    }
    top[(int)i < n_out ? 0 : 1] = std::max(top[(int)i < n_out ? 0 : 1], mag[i]);
  }
  double eps = Eps(t), worst = 0;
  for (size_t i = 0; i < cmp.size(); i++) {
    double err = diff[i] / std::max({mag[i], 1e-2 * top[(int)i < n_out ? 0 : 1], 1e-30});
    worst = std::max(worst, err);
    EXPECT_LE(err, k * eps) << pg.vals[cmp[i]].name << ": max diff " << diff[i] << ", max magnitude " << mag[i];
  }
  printf("  %zu tensors compared, worst normalized error %.3g = %.2f eps(%s)\n", cmp.size(), worst, worst / eps,
         apx_dtype_short(t));
  apx_eval_free(&ef);
  apx_eval_free(&ep);
  return worst;
}

// The compute type a level gives half nodes.
inline ApxDType ComputeType(const Options &o) { return o.level == APX_O0 ? APX_DT_F32 : o.half; }

}  // namespace apx_fusion_testing

#endif
