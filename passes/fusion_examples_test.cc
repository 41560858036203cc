// fusion_examples_test.cc - the example models (MLP, CNN with BatchNorm, transformer LM)
// compiled through the whole pipeline with and without fusion (--no-fuse), at O0 (fp32),
// O1, O2 (fp16) and O2 with bf16: forward and backward run on the CPU reference kernels
// (tests/testing/graph_eval.h) give the same loss, outputs and parameter gradients within
// the compute type's tolerance; fusion applies where expected; the graph verifies after
// every pass (verify_each_pass).
//
// Tolerance: the normalized error max|fused - unfused| / max|unfused| of every compared
// tensor is at most K eps of the graph's half type: the fused kernels round once where the
// unfused graph rounds after each of up to ~20 nodes (a hand-written LayerNorm and its
// backward), with errors that then pass through the rest of the network; K = 64. At O0
// (fp32 eps) K = 512: there both graphs are exact to the last bit or two, and the largest
// difference seen is the cross-entropy's softmax recomputed as exp(x - lse) instead of
// exp(log_prob) (one ulp) amplified by the cancellation in the BatchNorm bias gradient of
// the CNN (52 eps); 512 fp32 eps is 6e-5, far below what a wrong gradient rule gives.
// Gradients at the rounding-noise level are handled as explained in the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

extern "C" {
#include "passes/fusion.h"
#include "compiler/pipeline.h"
#include "tests/testing/graph_eval.h"
}

namespace {

struct Compiled {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  bool ok = false;
  Compiled(const std::string &model, ApxOptLevel level, ApxDType half, bool no_fuse, int accumulate) {
    apx_diag_init(&d);
    d.quiet = 1;
    apx_options_init(&o);
    o.model_path = model.c_str();
    o.opt_level = level;
    o.half = half;
    o.half_set = 1;
    o.no_fuse = no_fuse;
    o.accumulate = accumulate;
    o.verify_each_pass = 1;
    char err[256];
    EXPECT_EQ(apx_options_apply_preset(&o, err, sizeof err), 0) << err;
    ok = apx_compile_file(&g, &o, &d) == 0;
    EXPECT_TRUE(ok) << d.msg;
  }
  ~Compiled() { apx_graph_free(&g); }
  int Count(ApxOp op) const {
    int c = 0;
    for (int k = 0; k < g.n_order; k++) c += g.nodes[g.order[k]].op == op;
    return c;
  }
};

void FillInputs(ApxEval *e, const ApxGraph *g) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto next = [&s]() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return (double)(s >> 11) / 9007199254740992.0;
  };
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    const ApxValue &val = g->vals[v];
    for (int64_t k = 0; k < apx_value_numel(&val); k++)
      apx_eval_set(e, v, k, apx_dtype_is_float(val.dtype) ? 2 * next() - 1 : (double)(int)(next() * 10));
  }
}

double Eps(ApxDType t) {
  return t == APX_DT_F16 ? std::ldexp(1.0, -10) : t == APX_DT_BF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -23);
}

struct Case {
  const char *model;
  ApxOptLevel level;
  ApxDType half;
  int accumulate;
};

class FusionExamples : public ::testing::TestWithParam<Case> {};

TEST_P(FusionExamples, FusedAndUnfusedGraphsAgree) {
  const Case c = GetParam();
  std::string path = std::string("examples/") + c.model + "/model.onnx";
  Compiled fused(path, c.level, c.half, false, c.accumulate), plain(path, c.level, c.half, true, c.accumulate);
  ASSERT_TRUE(fused.ok && plain.ok);
  // every candidate in the examples fuses, except the dense layers at O1 (a half MatMul with
  // an fp32 bias Add: "dtype") and Casts whose input another node reads in fp32
  int applied = 0, rejected = 0;
  for (int i = 0; i < fused.g.fusion->n; i++) {
    const ApxFusionRecord &r = fused.g.fusion->recs[i];
    if (r.why == APX_FUSE_APPLIED) {
      applied++;
      continue;
    }
    rejected++;
    EXPECT_TRUE(c.level == APX_O1 && (r.why == APX_FUSE_NOT_DTYPE || r.why == APX_FUSE_NOT_CONSUMERS))
        << r.pattern << " [" << r.nodes << "]: " << apx_fusion_why_name(r.why) << ": " << r.detail;
  }
  EXPECT_GE(applied, 4);
  ASSERT_NE(fused.g.fusion, nullptr);
  ASSERT_NE(plain.g.fusion, nullptr);
  const ApxFusionLog &lf = *fused.g.fusion, &lp = *plain.g.fusion;
  ASSERT_TRUE(lf.have_after && lp.have_after);
  EXPECT_TRUE(lp.disabled);
  EXPECT_LT(apx_traffic_kernels(&lf.after), apx_traffic_kernels(&lf.before));
  EXPECT_LT(apx_traffic_bytes(&lf.after), apx_traffic_bytes(&lf.before));
  // before fusion is the --no-fuse graph
  EXPECT_EQ(apx_traffic_kernels(&lf.before), apx_traffic_kernels(&lp.after));
  EXPECT_EQ(apx_traffic_bytes(&lf.before), apx_traffic_bytes(&lp.after));

  ApxEval ef, ep;
  ASSERT_EQ(apx_eval_init(&ef, &fused.g), 0) << ef.err;
  ASSERT_EQ(apx_eval_init(&ep, &plain.g), 0) << ep.err;
  FillInputs(&ef, &fused.g);
  FillInputs(&ep, &plain.g);
  ASSERT_EQ(apx_eval_run(&ef, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ef.err;
  ASSERT_EQ(apx_eval_run(&ep, APX_EVAL_FORWARD | APX_EVAL_BACKWARD), 0) << ep.err;

  double eps = Eps(c.level == APX_O0 ? APX_DT_F32 : c.half), worst = 0;
  double K = c.level == APX_O0 ? 512 : 64;
  std::string worst_name;
  std::vector<int> compare;
  for (int i = 0; i < plain.g.n_outputs; i++) compare.push_back(plain.g.outputs[i]);
  for (int p = 0; p < plain.g.n_vals; p++)
    if (plain.g.vals[p].kind == APX_VAL_PARAM && plain.g.vals[p].grad >= 0) compare.push_back(plain.g.vals[p].grad);
  ASSERT_GT(compare.size(), 3u);
  // magnitudes first. A gradient that is zero in exact arithmetic (a conv bias before
  // BatchNorm, the key bias of attention: softmax ignores a per-row constant) holds only
  // rounding noise amplified by cancellation: tensors whose magnitude is at the noise level
  // of the model (64 eps times the largest magnitude of their kind, outputs or gradients)
  // must stay there; every other tensor's error is measured against its own magnitude, but
  // at least 1% of that largest magnitude.
  std::vector<double> diffs, mags;
  double top[2] = {0, 0};
  for (size_t i = 0; i < compare.size(); i++) {
    int v = compare[i];
    const ApxValue &pv = plain.g.vals[v];
    int fv = apx_graph_find_value(&fused.g, pv.name);
    ASSERT_GE(fv, 0) << pv.name;
    ASSERT_EQ(apx_value_numel(&fused.g.vals[fv]), apx_value_numel(&pv)) << pv.name;
    double diff = 0, mag = 0;
    for (int64_t k = 0; k < apx_value_numel(&pv); k++) {
      double a = apx_eval_get(&ef, fv, k), b = apx_eval_get(&ep, v, k);
      ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << pv.name << "[" << k << "]";
      diff = std::max(diff, std::fabs(a - b));
      mag = std::max(mag, std::fabs(b));
    }
    diffs.push_back(diff);
    mags.push_back(mag);
    int kind = i < (size_t)plain.g.n_outputs ? 0 : 1;
    top[kind] = std::max(top[kind], mag);
  }
  for (size_t i = 0; i < compare.size(); i++) {
    const char *name = plain.g.vals[compare[i]].name;
    double t = top[i < (size_t)plain.g.n_outputs ? 0 : 1];
    if (mags[i] <= K * eps * t) { /* rounding noise on the model's scale: both stay there */
      EXPECT_LE(diffs[i], K * eps * t) << name << " (noise-level): max diff " << diffs[i];
      continue;
    }
    double err = diffs[i] / std::max({mags[i], 1e-2 * t, 1e-30});
    if (err > worst) worst = err, worst_name = name;
    EXPECT_LE(err, K * eps) << name << ": max diff " << diffs[i] << ", max magnitude " << mags[i];
  }
  printf("%s -O%d %s: %zu tensors, worst normalized error %.3g (%.2f eps) in '%s'\n", c.model, (int)c.level,
         apx_dtype_short(c.half), compare.size(), worst, worst / eps, worst_name.c_str());
  apx_eval_free(&ef);
  apx_eval_free(&ep);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, FusionExamples,
    ::testing::Values(Case{"mlp", APX_O0, APX_DT_F16, 1}, Case{"mlp", APX_O1, APX_DT_F16, 1},
                      Case{"mlp", APX_O2, APX_DT_F16, 1}, Case{"mlp", APX_O2, APX_DT_F16, 2},
                      Case{"cnn", APX_O0, APX_DT_F16, 1}, Case{"cnn", APX_O1, APX_DT_F16, 1},
                      Case{"cnn", APX_O2, APX_DT_F16, 1}, Case{"cnn", APX_O3, APX_DT_F16, 1},
                      Case{"transformer", APX_O0, APX_DT_F16, 1}, Case{"transformer", APX_O1, APX_DT_F16, 1},
                      Case{"transformer", APX_O2, APX_DT_F16, 1}, Case{"transformer", APX_O2, APX_DT_BF16, 1},
                      Case{"transformer", APX_O2, APX_DT_F16, 2}),
    [](const ::testing::TestParamInfo<Case> &i) {
      return std::string(i.param.model) + "_O" + std::to_string((int)i.param.level) + "_" +
             apx_dtype_short(i.param.half) + (i.param.accumulate > 1 ? "_accumulate" : "");
    });

}  // namespace
