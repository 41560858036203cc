// training_test.cc - the training-step ops: LossScaleSeed, AssignState, UnscaleCheck
// (unscale, inf/nan detection with the first bad gradient, squared norm) and OptimizerStep
// (SGD with momentum / nesterov / dampening / weight decay, AdamW, LAMB, clipping, skipped
// steps, master weights with half copies, half parameters) against double references
// written from attrs.h's formulas.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

TEST(LossScaleSeed, FillsScaleTimesMultiplier) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F64}) {
    Tensor loss(dt, {}), scale = make(dt, {1}, {65536}), d(dt, {});
    ApxAttrLossScaleSeed a = {0.25f};
    run_ok(APX_OP_LossScaleSeed, &a, {&loss, &scale}, {&d});
    EXPECT_EQ(d.get(0), 16384.0);
  }
}

TEST(AssignState, CopyConvertAndFill) {
  Tensor src = make(APX_DT_F32, {3}, {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20), 2, 70000});
  Tensor dst(APX_DT_F16, {3});
  run_ok(APX_OP_AssignState, nullptr, {&src, &dst}, {});
  EXPECT_EQ(dst.values(), (std::vector<double>{1.0 + std::ldexp(1.0, -10), 2, INFINITY}));
  Tensor zero = make(APX_DT_F32, {}, {0}), acc = rand(APX_DT_F32, {2, 3}, 1, 2, 1);
  run_ok(APX_OP_AssignState, nullptr, {&zero, &acc}, {});
  EXPECT_EQ(acc.values(), std::vector<double>(6, 0.0));
  Tensor bad(APX_DT_F32, {4});
  std::string err;
  EXPECT_EQ(run(APX_OP_AssignState, nullptr, {&src, &bad}, {}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "AssignState: src has 3 elements, dst 4");
}

TEST(UnscaleCheck, UnscalesDetectsAndNorms) {
  Tensor scale = make(APX_DT_F32, {1}, {1024});
  Tensor g0 = rand(APX_DT_F16, {5, 7}, -1000, 1000, 2), g1 = rand(APX_DT_BF16, {9}, -100, 100, 3),
         g2 = rand(APX_DT_F32, {4}, -10, 10, 4);
  Tensor found(APX_DT_F32, {1}), first(APX_DT_I32, {1}), norm(APX_DT_F32, {1});
  Tensor u0(APX_DT_F32, {5, 7}), u1(APX_DT_F32, {9});
  // u2 is g2's own buffer (in place)
  ApxTensor ins[4] = {scale.view(), g0.view(), g1.view(), g2.view()};
  ApxTensor outs[6] = {found.view(), first.view(), norm.view(), u0.view(), u1.view(), g2.view()};
  std::vector<double> want;
  double sq = 0;
  for (const Tensor *g : {&g0, &g1, &g2})
    for (int64_t i = 0; i < g->numel(); i++) {
      want.push_back(g->get(i) / 1024);
      sq += want.back() * want.back();
    }
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  ASSERT_EQ(apx_cpu_run(&ctx, APX_OP_UnscaleCheck, nullptr, ins, 4, outs, 6), APX_STATUS_OK) << ctx.err;
  EXPECT_EQ(found.get(0), 0.0);
  EXPECT_EQ(first.get(0), -1.0);
  // a sum of 48 squares accumulated in double, rounded once to fp32
  EXPECT_NEAR(norm.get(0), sq, sq * eps_of(APX_DT_F32));
  size_t k = 0;
  for (const Tensor *u : {&u0, &u1, &g2})
    for (int64_t i = 0; i < u->numel(); i++, k++) ASSERT_EQ(u->get(i), want[k]) << k;  // exact: 1024 = 2^10
  // inf in g1 and an overflowing unscale of g2 (scale < 1): first_bad is 1
  g1.set(3, INFINITY);
  Tensor small = make(APX_DT_F32, {1}, {1e-38}), g3 = make(APX_DT_F32, {2}, {1e3, 1});
  ApxTensor ins2[4] = {small.view(), g0.view(), g1.view(), g3.view()};
  Tensor v0(APX_DT_F32, {5, 7}), v1(APX_DT_F32, {9}), v3(APX_DT_F32, {2});
  ApxTensor outs2[6] = {found.view(), first.view(), norm.view(), v0.view(), v1.view(), v3.view()};
  ASSERT_EQ(apx_cpu_run(&ctx, APX_OP_UnscaleCheck, nullptr, ins2, 4, outs2, 6), APX_STATUS_OK);
  EXPECT_EQ(found.get(0), 1.0);
  EXPECT_EQ(first.get(0), 0.0);  // g0 / 1e-38 overflows fp32 already
  ApxTensor ins3[4] = {scale.view(), g3.view(), g1.view(), g0.view()};
  Tensor w0(APX_DT_F32, {2}), w1(APX_DT_F32, {9}), w2(APX_DT_F32, {5, 7});
  ApxTensor outs3[6] = {found.view(), first.view(), norm.view(), w0.view(), w1.view(), w2.view()};
  ASSERT_EQ(apx_cpu_run(&ctx, APX_OP_UnscaleCheck, nullptr, ins3, 4, outs3, 6), APX_STATUS_OK);
  EXPECT_EQ(found.get(0), 1.0);
  EXPECT_EQ(first.get(0), 1.0);
}

namespace {

struct OptRef {  // double reference of attrs.h's formulas, one parameter
  std::vector<double> p, s0, s1;
};

void opt_ref_step(const ApxAttrOptimizer &a, OptRef &r, const std::vector<double> &G, double lr,
                  double clip, int64_t t) {
  size_t n = r.p.size();
  double wd = a.weight_decay;
  if (a.kind == APX_OPTIM_SGD) {
    for (size_t i = 0; i < n; i++) {
      double d = G[i] * clip + wd * r.p[i];
      if (a.momentum != 0) {
        double buf = t == 1 ? d : a.momentum * r.s0[i] + (1 - (double)a.dampening) * d;
        r.s0[i] = buf;
        d = a.nesterov ? d + a.momentum * buf : buf;
      }
      r.p[i] -= lr * d;
    }
    return;
  }
  double b1 = a.beta1, b2 = a.beta2, bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  std::vector<double> u(n);
  for (size_t i = 0; i < n; i++) {
    double g = G[i] * clip;
    r.s0[i] = b1 * r.s0[i] + (1 - b1) * g;
    r.s1[i] = b2 * r.s1[i] + (1 - b2) * g * g;
  }
  if (a.kind == APX_OPTIM_ADAMW) {
    for (size_t i = 0; i < n; i++) {
      r.p[i] *= 1 - lr * wd;
      r.p[i] -= lr / bc1 * r.s0[i] / (std::sqrt(r.s1[i]) / std::sqrt(bc2) + (double)a.eps);
    }
    return;
  }
  double pn = 0, un = 0;
  for (size_t i = 0; i < n; i++) {
    u[i] = (r.s0[i] / bc1) / (std::sqrt(r.s1[i] / bc2) + (double)a.eps) + wd * r.p[i];
    pn += r.p[i] * r.p[i];
    un += u[i] * u[i];
  }
  double ratio = (wd != 0 && pn > 0 && un > 0) ? std::sqrt(pn) / std::sqrt(un) : 1;
  for (size_t i = 0; i < n; i++) r.p[i] -= lr * ratio * u[i];
}

struct OptCase {
  const char *name;
  ApxAttrOptimizer a;
};

std::vector<OptCase> opt_cases() {
  auto base = [](int kind) {
    ApxAttrOptimizer a = {};
    a.kind = kind;
    a.lr = 0.01f;
    a.beta1 = 0.9f;
    a.beta2 = 0.999f;
    a.eps = 1e-8f;
    return a;
  };
  std::vector<OptCase> c;
  ApxAttrOptimizer s = base(APX_OPTIM_SGD);
  c.push_back({"sgd", s});
  s.momentum = 0.9f;
  s.weight_decay = 0.01f;
  c.push_back({"sgd momentum wd", s});
  s.dampening = 0.1f;
  c.push_back({"sgd dampening", s});
  s.dampening = 0;
  s.nesterov = 1;
  c.push_back({"sgd nesterov", s});
  ApxAttrOptimizer w = base(APX_OPTIM_ADAMW);
  w.weight_decay = 0.01f;
  c.push_back({"adamw", w});
  w.max_grad_norm = 0.5f;
  c.push_back({"adamw clipped", w});
  ApxAttrOptimizer l = base(APX_OPTIM_LAMB);
  l.weight_decay = 0.01f;
  c.push_back({"lamb", l});
  l.weight_decay = 0;
  c.push_back({"lamb no wd", l});
  return c;
}

}  // namespace

TEST(OptimizerStep, ThreeStepsMatchTheFormulas) {
  for (const OptCase &oc : opt_cases())
    for (ApxDType pt : {APX_DT_F32, APX_DT_F64}) {
      SCOPED_TRACE(std::string(oc.name) + " " + apx_dtype_short(pt));
      ApxAttrOptimizer a = oc.a;
      const int n = 2;
      a.n_params = n;
      int k = a.kind == APX_OPTIM_SGD ? (a.momentum != 0 ? 1 : 0) : 2;
      std::vector<Tensor> P, G, S;
      std::vector<OptRef> ref(n);
      for (int i = 0; i < n; i++) {
        P.push_back(rand(pt, {3 + i, 4}, -1, 1, 10 + i));
        ref[i].p = P.back().values();
        ref[i].s0.assign(ref[i].p.size(), 0.0);
        ref[i].s1.assign(ref[i].p.size(), 0.0);
      }
      for (int j = 0; j < k; j++)
        for (int i = 0; i < n; i++) S.emplace_back(pt, P[i].dims);
      Tensor found = make(APX_DT_F32, {1}, {0}), norm(APX_DT_F32, {1}),
             lr = make(APX_DT_F32, {1}, {a.lr}), step(APX_DT_I64, {1});
      for (int64_t t = 1; t <= 3; t++) {
        G.clear();
        double sq = 0;
        for (int i = 0; i < n; i++) {
          G.push_back(rand(pt, P[i].dims, -2, 2, 100 * t + i));
          for (double v : G.back().values()) sq += v * v;
        }
        norm.set(0, sq);
        double clip = a.max_grad_norm > 0 ? std::min(1.0, a.max_grad_norm / (std::sqrt(norm.get(0)) + 1e-6)) : 1;
        for (int i = 0; i < n; i++) opt_ref_step(a, ref[i], G[i].values(), lr.get(0), clip, t);
        std::vector<const Tensor *> ins = {&found, &norm, &lr, &step};
        for (auto &x : P) ins.push_back(&x);
        for (auto &x : G) ins.push_back(&x);
        for (auto &x : S) ins.push_back(&x);
        run_ok(APX_OP_OptimizerStep, &a, ins, {});
        EXPECT_EQ(step.get(0), (double)t);
      }
      for (int i = 0; i < n; i++) {
        // fp32 math: a few roundings per step, three steps; normwise scale 1 (|p| ~ 1)
        std::vector<double> sc(ref[i].p.size(), 1.0);
        expect_close(P[i], ref[i].p, 60, &sc, "parameter");
        if (k > 0) expect_close(S[i], ref[i].s0, 60, &sc, "state 0");
        if (k > 1) expect_close(S[n + i], ref[i].s1, 60, &sc, "state 1");
      }
    }
}

TEST(OptimizerStep, SkippedStepChangesNothing) {
  ApxAttrOptimizer a = opt_cases()[4].a;  // adamw
  a.n_params = 1;
  Tensor found = make(APX_DT_F32, {1}, {1}), norm(APX_DT_F32, {1}), lr = make(APX_DT_F32, {1}, {0.1}),
         step = make(APX_DT_I64, {1}, {5});
  Tensor p = rand(APX_DT_F32, {8}, -1, 1, 1), g = rand(APX_DT_F32, {8}, -1, 1, 2), m(APX_DT_F32, {8}),
         v(APX_DT_F32, {8});
  Tensor p0 = p;
  run_ok(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &step, &p, &g, &m, &v}, {});
  expect_same_bits(p, p0, "parameter after a skipped step");
  EXPECT_EQ(step.get(0), 5.0);
  EXPECT_EQ(m.values(), std::vector<double>(8, 0.0));
}

TEST(OptimizerStep, MasterWeightsRefreshHalfCopiesAndHalfParams) {
  ApxAttrOptimizer a = opt_cases()[1].a;  // sgd momentum wd
  a.n_params = 1;
  a.master_weights = 1;
  Tensor found = make(APX_DT_F32, {1}, {0}), norm(APX_DT_F32, {1}), lr = make(APX_DT_F32, {1}, {0.1}),
         step(APX_DT_I64, {1});
  Tensor p = rand(APX_DT_F32, {16}, -1, 1, 1), g = rand(APX_DT_F32, {16}, -1, 1, 2),
         buf(APX_DT_F32, {16}), h(APX_DT_F16, {16});
  run_ok(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &step, &p, &g, &buf, &h}, {});
  expect_same_bits(h, cast(p, APX_DT_F16), "half copy = RNE(master)");
  // O3: a half parameter without master is updated in fp32 math and rounded once
  a.master_weights = 0;
  Tensor ph = rand(APX_DT_BF16, {16}, -1, 1, 3), pf = cast(ph, APX_DT_F32), b2(APX_DT_F32, {16}),
         b3(APX_DT_F32, {16}), s2 = make(APX_DT_I64, {1}, {0}), s3 = make(APX_DT_I64, {1}, {0});
  run_ok(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &s2, &ph, &g, &b2}, {});
  run_ok(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &s3, &pf, &g, &b3}, {});
  expect_same_bits(ph, cast(pf, APX_DT_BF16), "bf16 parameter");
  // wrong input count
  std::string err;
  EXPECT_EQ(run(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &s2, &ph, &g}, {}, &err),
            APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "OptimizerStep: 1 parameters need 7 inputs, got 6");
}

TEST(OptimizerStep, ThreadCountDoesNotChangeBits) {
  ApxAttrOptimizer a = opt_cases()[6].a;  // lamb: tensor norms
  a.n_params = 1;
  Tensor found = make(APX_DT_F32, {1}, {0}), norm(APX_DT_F32, {1}), lr = make(APX_DT_F32, {1}, {0.01});
  Tensor g = rand(APX_DT_F32, {300000}, -1, 1, 2);  // above APX_CPU_PAR_WORK
  Tensor p1 = rand(APX_DT_F32, {300000}, -1, 1, 1), p2 = p1;
  Tensor m1(APX_DT_F32, {300000}), v1(APX_DT_F32, {300000}), m2 = m1, v2 = v1;
  Tensor s1(APX_DT_I64, {1}), s2(APX_DT_I64, {1});
  RunOpts two;
  two.threads = 2;
  run_ok(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &s1, &p1, &g, &m1, &v1}, {});
  run_ok(APX_OP_OptimizerStep, &a, {&found, &norm, &lr, &s2, &p2, &g, &m2, &v2}, {}, two);
  expect_same_bits(p1, p2, "LAMB 1 vs 2 threads");
}
