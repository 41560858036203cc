// grad_test.cc - every gradient kernel against central finite differences of its forward
// kernel, in fp64; then each gradient kernel in fp32/fp16/bf16 against its fp64 result.
//
// Finite differences: L(x) = sum_k <R_k, out_k(x)> with fixed random R_k; the analytic
// gradient is the gradient op run with dY = R. With step h = 1e-5 on O(1) inputs the central
// difference has truncation error h^2/6 |L'''| (about 2e-11 |L'''|) and rounding error about
// eps64 * S / h (S = sum |R_k out_k|, so about 2e-11 S). We allow
//   |fd - analytic| <= 1e-7 (1 + |analytic|) + 8 eps64 S / h,
// at least 50x those bounds for |L'''| <= 100, while any real bug (a wrong term) is off by
// orders of magnitude more. Non-smooth ops (Relu, LeakyRelu, MaxPool) use inputs at least
// 1e-2 (>> h) away from their kinks and ties.
#include <cmath>
#include <functional>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

constexpr double kStep = 1e-5;

using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;
// Analytic gradients of L w.r.t. the inputs listed in `wrt`, given the forward inputs and
// the seeds R (one per forward output that enters L).
using Backward =
    std::function<std::vector<Tensor>(const std::vector<Tensor> &, const std::vector<Tensor> &)>;

double loss_of(const std::vector<Tensor> &outs, const std::vector<Tensor> &R, double *S) {
  double L = 0, s = 0;
  for (size_t k = 0; k < R.size(); k++)
    for (int64_t i = 0; i < R[k].numel(); i++) {
      double t = R[k].get(i) * outs[k].get(i);
      L += t;
      s += std::fabs(t);
    }
  if (S) *S = s;
  return L;
}

void fd_check(const char *what, std::vector<Tensor> ins, const std::vector<int> &wrt,
              const Forward &fwd, const Backward &bwd, int n_loss_outs = 1) {
  SCOPED_TRACE(what);
  std::vector<Tensor> outs = fwd(ins);
  ASSERT_GE((int)outs.size(), n_loss_outs);
  std::vector<Tensor> R;
  for (int k = 0; k < n_loss_outs; k++) R.push_back(rand(APX_DT_F64, outs[k].dims, -1, 1, 900 + k));
  std::vector<Tensor> g = bwd(ins, R);
  ASSERT_EQ(g.size(), wrt.size());
  int bad = 0;
  for (size_t w = 0; w < wrt.size(); w++) {
    Tensor &x = ins[wrt[w]];
    ASSERT_EQ(g[w].numel(), x.numel()) << "gradient " << w;
    for (int64_t j = 0; j < x.numel() && bad < 5; j++) {
      double x0 = x.get(j), S1, S2;
      x.set(j, x0 + kStep);
      double lp = loss_of(fwd(ins), R, &S1);
      x.set(j, x0 - kStep);
      double lm = loss_of(fwd(ins), R, &S2);
      x.set(j, x0);
      double fd = (lp - lm) / (2 * kStep), an = g[w].get(j);
      double tol = 1e-7 * (1 + std::fabs(an)) + 8 * eps_of(APX_DT_F64) * std::max(S1, S2) / kStep;
      if (!(std::fabs(fd - an) <= tol)) {
        ADD_FAILURE() << what << ": d/d input " << wrt[w] << " element " << j << ": analytic "
                      << an << ", finite difference " << fd << " (tol " << tol << ")";
        bad++;
      }
    }
  }
}

Tensor out_like(const Tensor &t) { return Tensor(t.dt, t.dims); }

// Runs op in F64 on `ins` and in dt on the same inputs rounded to dt (float inputs only);
// compares every output with tolerance eps(dt)|ref| + c eps(math) max|ref| + tiny.
void dtype_sweep(const char *what, ApxOp op, const void *attrs, const std::vector<Tensor> &ins,
                 const std::vector<std::vector<int64_t>> &out_dims, double c) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16, APX_DT_BF16}) {
    SCOPED_TRACE(std::string(what) + " " + apx_dtype_short(dt));
    std::vector<Tensor> low, ref_in;
    for (const Tensor &t : ins) {
      bool fl = apx_dtype_is_float(t.dt);
      low.push_back(fl ? cast(t, dt) : t);
      ref_in.push_back(fl ? cast(low.back(), APX_DT_F64) : t);
    }
    std::vector<Tensor> lo_out, ref_out;
    for (const auto &d : out_dims) {
      lo_out.emplace_back(dt, d);
      ref_out.emplace_back(APX_DT_F64, d);
    }
    std::vector<const Tensor *> pi, pr;
    std::vector<Tensor *> po, pro;
    for (size_t i = 0; i < ins.size(); i++) {
      pi.push_back(&low[i]);
      pr.push_back(&ref_in[i]);
    }
    for (size_t i = 0; i < out_dims.size(); i++) {
      po.push_back(&lo_out[i]);
      pro.push_back(&ref_out[i]);
    }
    run_ok(op, attrs, pi, po);
    run_ok(op, attrs, pr, pro);
    for (size_t k = 0; k < out_dims.size(); k++) {
      std::vector<double> r = ref_out[k].values();
      double mx = 0;
      for (double v : r) mx = std::max(mx, std::fabs(v));
      std::vector<double> sc(r.size(), mx);
      expect_close(lo_out[k], r, c, &sc, what);
    }
  }
}

// Single-output forward op run in F64.
std::vector<Tensor> run1(ApxOp op, const void *attrs, const std::vector<const Tensor *> &ins,
                         std::vector<int64_t> out_dims) {
  std::vector<Tensor> o;
  o.emplace_back(APX_DT_F64, out_dims);
  run_ok(op, attrs, ins, {&o[0]});
  return o;
}

// Values at least `gap` away from zero (kinks of Relu / LeakyRelu).
Tensor away_from_zero(std::vector<int64_t> dims, uint64_t seed, double gap) {
  Tensor t = rand(APX_DT_F64, dims, -2, 2, seed);
  for (int64_t i = 0; i < t.numel(); i++) {
    double v = t.get(i);
    if (std::fabs(v) < gap) t.set(i, v < 0 ? -gap : gap);
  }
  return t;
}

}  // namespace

// ---- elementwise ------------------------------------------------------------------------

TEST(Grad, UnaryOps) {
  const ApxAttrLeakyRelu lk = {0.2f};
  const ApxAttrGelu ge = {APX_GELU_NONE}, gt = {APX_GELU_TANH};
  struct U {
    ApxOp fwd, grad;
    const void *attrs;
    bool uses_y;  // the gradient op takes the forward output instead of the input
    double lo, hi;
  };
  const U cases[] = {
      {APX_OP_Relu, APX_OP_ReluGrad, nullptr, true, -2, 2},  // attrs.h: ReluGrad(dY, Y)
      {APX_OP_LeakyRelu, APX_OP_LeakyReluGrad, &lk, false, -2, 2},
      {APX_OP_Sigmoid, APX_OP_SigmoidGrad, nullptr, true, -4, 4},
      {APX_OP_Tanh, APX_OP_TanhGrad, nullptr, true, -2, 2},
      {APX_OP_Gelu, APX_OP_GeluGrad, &ge, false, -3, 3},
      {APX_OP_Gelu, APX_OP_GeluGrad, &gt, false, -3, 3},
      {APX_OP_Erf, APX_OP_ErfGrad, nullptr, false, -2, 2},
      {APX_OP_Sqrt, APX_OP_SqrtGrad, nullptr, true, 0.2, 3},
      {APX_OP_HardSwish, APX_OP_HardSwishGrad, nullptr, false, -5, 5},  // kinks at +-3
      {APX_OP_Softplus, APX_OP_SoftplusGrad, nullptr, false, -4, 4},
  };
  for (const U &u : cases) {
    Tensor x = u.lo < 0 ? away_from_zero({3, 7}, 1, 1e-2) : rand(APX_DT_F64, {3, 7}, u.lo, u.hi, 1);
    Forward f = [&](const std::vector<Tensor> &in) { return run1(u.fwd, u.attrs, {&in[0]}, in[0].dims); };
    Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> y = f(in), g;
      g.push_back(out_like(in[0]));
      run_ok(u.grad, u.attrs, {&R[0], u.uses_y ? &y[0] : &in[0]}, {&g[0]});
      return g;
    };
    fd_check(apx_op_name(u.grad), {x}, {0}, f, b);
    Tensor dy = rand(APX_DT_F64, {3, 7}, -1, 1, 2);
    std::vector<Tensor> y = f({x});
    dtype_sweep(apx_op_name(u.grad), u.grad, u.attrs, {dy, u.uses_y ? y[0] : x}, {{3, 7}}, 8);
  }
}

TEST(Grad, PowWithBroadcast) {
  Tensor a = rand(APX_DT_F64, {2, 3}, 0.5, 2, 3), b = rand(APX_DT_F64, {3}, -1.5, 2.5, 4);
  Forward f = [](const std::vector<Tensor> &in) { return run1(APX_OP_Pow, nullptr, {&in[0], &in[1]}, {2, 3}); };
  Backward bw = [](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> g = {out_like(in[0]), out_like(in[1])};
    run_ok(APX_OP_PowGrad, nullptr, {&R[0], &in[0], &in[1]}, {&g[0], &g[1]});
    return g;
  };
  fd_check("PowGrad", {a, b}, {0, 1}, f, bw);
  Tensor dy = rand(APX_DT_F64, {2, 3}, -1, 1, 5);
  dtype_sweep("PowGrad", APX_OP_PowGrad, nullptr, {dy, a, b}, {{2, 3}, {3}}, 16);
  // base 0 with a non-negative exponent: dB is 0 (not NaN)
  Tensor z = make(APX_DT_F64, {1}, {0}), e = make(APX_DT_F64, {1}, {2}), g1(APX_DT_F64, {1}),
         g2(APX_DT_F64, {1}), one = make(APX_DT_F64, {1}, {1});
  run_ok(APX_OP_PowGrad, nullptr, {&one, &z, &e}, {&g1, &g2});
  EXPECT_EQ(g1.get(0), 0.0);
  EXPECT_EQ(g2.get(0), 0.0);
}

// Clip with trainable bounds: ClipGrad's dX, dMin, dMax at dY's shape (the bounds' gradients
// summed here, as the rule's ReduceSumTo does); inputs kept away from the bounds (kinks).
TEST(Grad, ClipGradAllThreeOutputs) {
  Tensor x = rand(APX_DT_F64, {4, 6}, -1, 1, 13);
  for (int64_t i = 0; i < x.numel(); i++)
    for (double b : {-0.4, 0.3})
      if (std::fabs(x.get(i) - b) < 1e-2) x.set(i, b + 2e-2);
  Tensor lo = make(APX_DT_F64, {}, {-0.4}), hi = make(APX_DT_F64, {}, {0.3});
  Forward f = [](const std::vector<Tensor> &in) { return run1(APX_OP_Clip, nullptr, {&in[0], &in[1], &in[2]}, {4, 6}); };
  Backward bw = [](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> full = {out_like(in[0]), out_like(in[0]), out_like(in[0])};
    run_ok(APX_OP_ClipGrad, nullptr, {&R[0], &in[0], &in[1], &in[2]}, {&full[0], &full[1], &full[2]});
    std::vector<Tensor> g = {full[0], out_like(in[1]), out_like(in[2])};
    run_ok(APX_OP_ReduceSumTo, nullptr, {&full[1]}, {&g[1]});
    run_ok(APX_OP_ReduceSumTo, nullptr, {&full[2]}, {&g[2]});
    return g;
  };
  fd_check("ClipGrad", {x, lo, hi}, {0, 1, 2}, f, bw);
  Tensor dy = rand(APX_DT_F64, {4, 6}, -1, 1, 14);
  dtype_sweep("ClipGrad", APX_OP_ClipGrad, nullptr, {dy, x, lo, hi}, {{4, 6}, {4, 6}, {4, 6}}, 1);
}

// Max of three broadcast operands (distinct values: no ties), then ties: max(x, x) gives
// each operand dY / 2, a NaN result gives dY to both (PyTorch's maximum backward).
TEST(Grad, MinMaxGradRoutesToTheSelectedInputAndSharesTies) {
  Tensor a = rand(APX_DT_F64, {2, 1, 3}, -1, 1, 15), b = rand(APX_DT_F64, {4, 3}, -1, 1, 16),
         c = rand(APX_DT_F64, {4, 1}, -1, 1, 17);
  for (ApxOp op : {APX_OP_Max, APX_OP_Min}) {
    Forward f = [op](const std::vector<Tensor> &in) {
      return run1(op, nullptr, {&in[0], &in[1], &in[2]}, {2, 4, 3});
    };
    Backward bw = [&f](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> y = f(in);
      std::vector<Tensor> full = {out_like(R[0]), out_like(R[0]), out_like(R[0])}, g;
      run_ok(APX_OP_MinMaxGrad, nullptr, {&R[0], &y[0], &in[0], &in[1], &in[2]}, {&full[0], &full[1], &full[2]});
      for (int k = 0; k < 3; k++) {
        g.push_back(out_like(in[k]));
        run_ok(APX_OP_ReduceSumTo, nullptr, {&full[k]}, {&g[k]});
      }
      return g;
    };
    fd_check(apx_op_name(op), {a, b, c}, {0, 1, 2}, f, bw);
  }
  Tensor x = make(APX_DT_F64, {3}, {1, 2, NAN}), z = make(APX_DT_F64, {3}, {1, 5, 0}), y(APX_DT_F64, {3});
  Tensor dy = make(APX_DT_F64, {3}, {4, 4, 4}), g0(APX_DT_F64, {3}), g1(APX_DT_F64, {3});
  run_ok(APX_OP_Max, nullptr, {&x, &z}, {&y});
  run_ok(APX_OP_MinMaxGrad, nullptr, {&dy, &y, &x, &z}, {&g0, &g1});
  EXPECT_EQ(g0.values()[0], 2.0);  // tie: half each
  EXPECT_EQ(g1.values()[0], 2.0);
  EXPECT_EQ(g0.values()[1], 0.0);  // z selected
  EXPECT_EQ(g1.values()[1], 4.0);
  EXPECT_EQ(g0.values()[2], 4.0);  // NaN result: dY to both
  EXPECT_EQ(g1.values()[2], 4.0);
  Tensor dyr = rand(APX_DT_F64, {2, 4, 3}, -1, 1, 18), yr(APX_DT_F64, {2, 4, 3});
  run_ok(APX_OP_Max, nullptr, {&a, &b, &c}, {&yr});
  dtype_sweep("MinMaxGrad", APX_OP_MinMaxGrad, nullptr, {dyr, yr, a, b, c}, {{2, 4, 3}, {2, 4, 3}, {2, 4, 3}}, 1);
}

// Add with broadcasting: the gradients are ReduceSumTo(dY) per operand.
TEST(Grad, ReduceSumToForBroadcastOperands) {
  Tensor a = rand(APX_DT_F64, {3, 1}, -1, 1, 6), b = rand(APX_DT_F64, {2, 1, 4}, -1, 1, 7);
  Forward f = [](const std::vector<Tensor> &in) {
    std::vector<Tensor> y1 = run1(APX_OP_Mul, nullptr, {&in[0], &in[0]}, {3, 1});
    return run1(APX_OP_Add, nullptr, {&y1[0], &in[1]}, {2, 3, 4});
  };
  Backward bw = [](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> g = {out_like(in[0]), out_like(in[1])};
    run_ok(APX_OP_ReduceSumTo, nullptr, {&R[0]}, {&g[0]});
    run_ok(APX_OP_ReduceSumTo, nullptr, {&R[0]}, {&g[1]});
    Tensor two = make(APX_DT_F64, {}, {2}), t(APX_DT_F64, {3, 1});
    run_ok(APX_OP_Mul, nullptr, {&g[0], &in[0]}, {&t});
    run_ok(APX_OP_Mul, nullptr, {&t, &two}, {&g[0]});
    return g;
  };
  fd_check("ReduceSumTo", {a, b}, {0, 1}, f, bw);
}

// ---- matrix products ----------------------------------------------------------------------

// MatMul(A (2, 3, 4, 5), B (5, 6)): dA = dY @ B^T, dB = sum over batches of A^T @ dY, both
// as FusedMatMul (the second with batch reduction).
TEST(Grad, MatMulViaFusedMatMul) {
  Tensor A = rand(APX_DT_F64, {2, 3, 4, 5}, -1, 1, 8), B = rand(APX_DT_F64, {5, 6}, -1, 1, 9);
  Forward f = [](const std::vector<Tensor> &in) {
    return run1(APX_OP_MatMul, nullptr, {&in[0], &in[1]}, {2, 3, 4, 6});
  };
  Backward bw = [](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> g = {out_like(in[0]), out_like(in[1])};
    ApxAttrFusedMatMul da = {0, 1, 1.0f}, db = {1, 0, 1.0f};
    run_ok(APX_OP_FusedMatMul, &da, {&R[0], &in[1]}, {&g[0]});
    run_ok(APX_OP_FusedMatMul, &db, {&in[0], &R[0]}, {&g[1]});
    return g;
  };
  fd_check("FusedMatMul", {A, B}, {0, 1}, f, bw);
  // Gemm(A^T, B^T, C) with alpha, beta
  Tensor a = rand(APX_DT_F64, {4, 3}, -1, 1, 10), b = rand(APX_DT_F64, {5, 4}, -1, 1, 11),
         c = rand(APX_DT_F64, {5}, -1, 1, 12);
  static const ApxAttrGemm gm = {0.7f, 1.3f, 1, 1};
  Forward fg = [](const std::vector<Tensor> &in) {
    return run1(APX_OP_Gemm, &gm, {&in[0], &in[1], &in[2]}, {3, 5});
  };
  Backward bg = [](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
    ApxAttrFusedMatMul da = {1, 1, gm.alpha}, db = {1, 1, gm.alpha};
    run_ok(APX_OP_FusedMatMul, &da, {&in[1], &R[0]}, {&g[0]});  // dA (K, M) = alpha B^T dY^T
    run_ok(APX_OP_FusedMatMul, &db, {&R[0], &in[0]}, {&g[1]});  // dB (N, K) = alpha dY^T A^T
    Tensor t(APX_DT_F64, {5}), beta = make(APX_DT_F64, {}, {(double)gm.beta});
    run_ok(APX_OP_ReduceSumTo, nullptr, {&R[0]}, {&t});
    run_ok(APX_OP_Mul, nullptr, {&t, &beta}, {&g[2]});
    return g;
  };
  fd_check("Gemm gradients", {a, b, c}, {0, 1, 2}, fg, bg);
}

// ---- softmax, normalization -----------------------------------------------------------------

TEST(Grad, SoftmaxAndLogSoftmax) {
  for (int64_t axis = 0; axis < 3; axis++)
    for (int lg = 0; lg < 2; lg++) {
      ApxAttrAxis a = {axis};
      ApxOp fo = lg ? APX_OP_LogSoftmax : APX_OP_Softmax, go = lg ? APX_OP_LogSoftmaxGrad : APX_OP_SoftmaxGrad;
      Tensor x = rand(APX_DT_F64, {2, 3, 4}, -2, 2, 13);
      Forward f = [&](const std::vector<Tensor> &in) { return run1(fo, &a, {&in[0]}, in[0].dims); };
      Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
        std::vector<Tensor> y = f(in), g = {out_like(in[0])};
        run_ok(go, &a, {&R[0], &y[0]}, {&g[0]});
        return g;
      };
      fd_check(apx_op_name(go), {x}, {0}, f, b);
      Tensor dy = rand(APX_DT_F64, {2, 3, 4}, -1, 1, 14);
      dtype_sweep(apx_op_name(go), go, &a, {dy, f({x})[0]}, {{2, 3, 4}}, 16);
    }
}

TEST(Grad, LayerNorm) {
  for (int64_t axis : {1, 2}) {
    ApxAttrLayerNorm a = {axis, 1e-5f, APX_DT_F64};
    std::vector<int64_t> dims = {3, 4, 5}, pd(dims.begin() + axis, dims.end()), sd = dims;
    for (size_t d = axis; d < 3; d++) sd[d] = 1;
    Tensor x = rand(APX_DT_F64, dims, -2, 2, 15), s = rand(APX_DT_F64, pd, 0.5, 1.5, 16),
           bb = rand(APX_DT_F64, pd, -1, 1, 17);
    Forward f = [&](const std::vector<Tensor> &in) {
      std::vector<Tensor> o;
      o.emplace_back(APX_DT_F64, dims);
      o.emplace_back(APX_DT_F64, sd);
      o.emplace_back(APX_DT_F64, sd);
      run_ok(APX_OP_LayerNormalization, &a, {&in[0], &in[1], &in[2]}, {&o[0], &o[1], &o[2]});
      return o;
    };
    Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> y = f(in), g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
      run_ok(APX_OP_LayerNormGrad, &a, {&R[0], &in[0], &in[1], &y[1], &y[2]}, {&g[0], &g[1], &g[2]});
      return g;
    };
    fd_check("LayerNormGrad", {x, s, bb}, {0, 1, 2}, f, b);
    std::vector<Tensor> y = f({x, s, bb});
    Tensor dy = rand(APX_DT_F64, dims, -1, 1, 18);
    int64_t D = numel_of(pd);
    dtype_sweep("LayerNormGrad", APX_OP_LayerNormGrad, &a, {dy, x, s, y[1], y[2]},
                {dims, pd, pd}, 4.0 * D + 3 * 12);
  }
}

TEST(Grad, BatchNormTrainingAndInference) {
  for (int training = 0; training < 2; training++) {
    ApxAttrBatchNorm a = {1e-5f, 0.9f, training, 0};
    std::vector<int64_t> dims = {3, 2, 2, 3};
    Tensor x = rand(APX_DT_F64, dims, -2, 2, 19), s = rand(APX_DT_F64, {2}, 0.5, 1.5, 20),
           bb = rand(APX_DT_F64, {2}, -1, 1, 21), m = rand(APX_DT_F64, {2}, -0.5, 0.5, 22),
           v = rand(APX_DT_F64, {2}, 0.5, 2, 23);
    Forward f = [&](const std::vector<Tensor> &in) {
      std::vector<Tensor> o;
      o.emplace_back(APX_DT_F64, dims);
      for (int k = 0; k < 4; k++) o.emplace_back(APX_DT_F64, std::vector<int64_t>{2});
      run_ok(APX_OP_BatchNormalization, &a, {&in[0], &in[1], &in[2], &in[3], &in[4]},
             {&o[0], &o[1], &o[2], &o[3], &o[4]});
      return o;
    };
    Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> y = f(in), g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
      const Tensor *s1 = training ? &y[3] : &in[3], *s2 = training ? &y[4] : &in[4];
      run_ok(APX_OP_BatchNormGrad, &a, {&R[0], &in[0], &in[1], s1, s2}, {&g[0], &g[1], &g[2]});
      return g;
    };
    fd_check(training ? "BatchNormGrad (training)" : "BatchNormGrad (inference)", {x, s, bb, m, v},
             {0, 1, 2}, f, b);
    std::vector<Tensor> y = f({x, s, bb, m, v});
    Tensor dy = rand(APX_DT_F64, dims, -1, 1, 24);
    dtype_sweep("BatchNormGrad", APX_OP_BatchNormGrad, &a,
                {dy, x, s, training ? y[3] : m, training ? y[4] : v}, {dims, {2}, {2}}, 4.0 * 18 + 36);
  }
}

TEST(Grad, Dropout) {
  ApxAttrDropout a = {0.4f, 1, 0, 0, 2};
  RunOpts o;
  o.seed = 5;
  Tensor x = rand(APX_DT_F64, {40}, -1, 1, 25);
  Forward f = [&](const std::vector<Tensor> &in) {
    std::vector<Tensor> r;
    r.emplace_back(APX_DT_F64, in[0].dims);
    r.emplace_back(APX_DT_BOOL, in[0].dims);
    run_ok(APX_OP_Dropout, &a, {&in[0]}, {&r[0], &r[1]}, o);
    return r;
  };
  Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> y = f(in), g = {out_like(in[0])};
    run_ok(APX_OP_DropoutGrad, &a, {&R[0], &y[1]}, {&g[0]});
    return g;
  };
  fd_check("DropoutGrad", {x}, {0}, f, b);
}

// ---- convolution and pooling -----------------------------------------------------------------

TEST(Grad, Conv) {
  struct C {
    int64_t N, C, H, W, M, k, group, stride, dil, pad;
  } cases[] = {{2, 2, 5, 4, 3, 3, 1, 1, 1, 1}, {1, 4, 6, 6, 2, 2, 2, 2, 1, 0},
               {1, 2, 7, 5, 2, 3, 2, 1, 2, 2}, {2, 3, 3, 3, 2, 1, 1, 1, 1, 0},
               {1, 2, 2, 5, 2, 5, 1, 1, 1, 2},   // "same" path with taps off the image
               {2, 3, 5, 6, 3, 3, 3, 1, 1, 1},   // depthwise (direct path)
               {1, 2, 7, 6, 4, 3, 2, 2, 2, 2}};  // depthwise, multiplier 2, strides, dilations
  for (const C &c : cases) {
    ApxAttrConv a = {};
    a.kernel[0] = 1;
    a.kernel[1] = a.kernel[2] = c.k;
    a.strides[1] = a.strides[2] = c.stride;
    a.dilations[1] = a.dilations[2] = c.dil;
    for (int i : {1, 2, 4, 5}) a.pads[i] = c.pad;
    a.group = c.group;
    int64_t OH = (c.H + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
    int64_t OW = (c.W + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
    std::vector<int64_t> yd = {c.N, c.M, OH, OW};
    Tensor x = rand(APX_DT_F64, {c.N, c.C, c.H, c.W}, -1, 1, 26),
           w = rand(APX_DT_F64, {c.M, c.C / c.group, c.k, c.k}, -1, 1, 27),
           bb = rand(APX_DT_F64, {c.M}, -1, 1, 28);
    Forward f = [&](const std::vector<Tensor> &in) {
      return run1(APX_OP_Conv, &a, {&in[0], &in[1], &in[2]}, yd);
    };
    Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
      run_ok(APX_OP_ConvGrad, &a, {&R[0], &in[0], &in[1]}, {&g[0], &g[1], &g[2]});
      return g;
    };
    fd_check("ConvGrad", {x, w, bb}, {0, 1, 2}, f, b);
    Tensor dy = rand(APX_DT_F64, yd, -1, 1, 29);
    dtype_sweep("ConvGrad", APX_OP_ConvGrad, &a, {dy, x, w}, {x.dims, w.dims, {c.M}},
                (double)(c.N * OH * OW * c.M * c.k * c.k) + 4);
  }
}

TEST(Grad, Pooling) {
  struct P {
    int64_t H, W, k, s, pad;
    int ceil, cip;
  } cases[] = {{5, 5, 2, 2, 0, 0, 0}, {6, 5, 3, 2, 1, 0, 1}, {6, 6, 3, 2, 1, 1, 0}, {4, 4, 3, 1, 1, 0, 0}};
  for (const P &p : cases)
    for (ApxOp op : {APX_OP_MaxPool, APX_OP_AveragePool}) {
      ApxAttrPool a = {};
      a.kernel[0] = 1;
      a.kernel[1] = a.kernel[2] = p.k;
      a.strides[1] = a.strides[2] = p.s;
      a.dilations[1] = a.dilations[2] = 1;
      for (int i : {1, 2, 4, 5}) a.pads[i] = p.pad;
      a.ceil_mode = p.ceil;
      a.count_include_pad = p.cip;
      auto od = [&](int64_t in) {
        int64_t span = in + 2 * p.pad - p.k;
        int64_t o = p.ceil ? (span + p.s - 1) / p.s + 1 : span / p.s + 1;
        if (p.ceil && (o - 1) * p.s >= in + p.pad) o--;
        return o;
      };
      std::vector<int64_t> xd = {2, 2, p.H, p.W}, yd = {2, 2, od(p.H), od(p.W)};
      // distinct values 0.01 apart (max-pool ties never within the step)
      Tensor x(APX_DT_F64, xd);
      for (int64_t i = 0; i < x.numel(); i++) x.set(i, 0.01 * (double)((i * 37) % x.numel()));
      Forward f = [&](const std::vector<Tensor> &in) { return run1(op, &a, {&in[0]}, yd); };
      ApxOp go = op == APX_OP_MaxPool ? APX_OP_MaxPoolGrad : APX_OP_AveragePoolGrad;
      Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
        std::vector<Tensor> g = {out_like(in[0])};
        if (go == APX_OP_MaxPoolGrad)
          run_ok(go, &a, {&R[0], &in[0]}, {&g[0]});
        else
          run_ok(go, &a, {&R[0]}, {&g[0]});
        return g;
      };
      fd_check(apx_op_name(go), {x}, {0}, f, b);
    }
  Tensor x = rand(APX_DT_F64, {2, 3, 4, 5}, -1, 1, 30);
  Forward f = [](const std::vector<Tensor> &in) {
    return run1(APX_OP_GlobalAveragePool, nullptr, {&in[0]}, {2, 3, 1, 1});
  };
  Backward b = [](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> g = {out_like(in[0])};
    run_ok(APX_OP_GlobalAveragePoolGrad, nullptr, {&R[0]}, {&g[0]});
    return g;
  };
  fd_check("GlobalAveragePoolGrad", {x}, {0}, f, b);
}

// ---- data movement ----------------------------------------------------------------------------

TEST(Grad, SliceAndGather) {
  ApxAttrSlice s = {};
  s.rank = 2;
  s.starts[0] = 3;
  s.steps[0] = -2;
  s.starts[1] = 1;
  s.steps[1] = 2;
  Tensor x = rand(APX_DT_F64, {4, 5}, -1, 1, 31);
  Forward f = [&](const std::vector<Tensor> &in) { return run1(APX_OP_Slice, &s, {&in[0]}, {2, 2}); };
  Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> g = {out_like(in[0])};
    run_ok(APX_OP_SliceGrad, &s, {&R[0]}, {&g[0]});
    return g;
  };
  fd_check("SliceGrad", {x}, {0}, f, b);
  for (int64_t axis = 0; axis < 2; axis++) {
    ApxAttrAxis a = {axis};
    Tensor idx = make(APX_DT_I64, {2, 2}, {1, 0, 1, -1});  // repeated index: gradients add
    std::vector<int64_t> od = axis == 0 ? std::vector<int64_t>{2, 2, 5} : std::vector<int64_t>{4, 2, 2};
    Forward fg = [&](const std::vector<Tensor> &in) { return run1(APX_OP_Gather, &a, {&in[0], &idx}, od); };
    Backward bg = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> g = {out_like(in[0])};
      run_ok(APX_OP_GatherGrad, &a, {&R[0], &idx}, {&g[0]});
      return g;
    };
    fd_check("GatherGrad", {x}, {0}, fg, bg);
  }
}

// ---- losses -----------------------------------------------------------------------------------

TEST(Grad, Losses) {
  const std::vector<std::vector<int64_t>> shapes = {{5, 4}, {2, 3, 2, 2}};
  for (const auto &sh : shapes)
    for (int sce = 0; sce < 2; sce++)
      for (int red = 0; red < 3; red++)
        for (int weighted = 0; weighted < 2; weighted++) {
          std::vector<int64_t> ld = {sh[0]};
          ld.insert(ld.end(), sh.begin() + 2, sh.end());
          Tensor x = rand(APX_DT_F64, sh, -2, 2, 32), lab = rand(APX_DT_I64, ld, 0, (double)sh[1], 33),
                 w = rand(APX_DT_F64, {sh[1]}, 0.5, 2, 34);
          lab.set(0, 1);  // ignore_index 1 appears
          ApxAttrLoss a = {red, 1, 1};
          std::vector<int64_t> lossd = red == APX_RED_NONE ? ld : std::vector<int64_t>{};
          ApxOp fo = sce ? APX_OP_SoftmaxCrossEntropyLoss : APX_OP_NegativeLogLikelihoodLoss;
          ApxOp go = sce ? APX_OP_SoftmaxCrossEntropyLossGrad : APX_OP_NegativeLogLikelihoodLossGrad;
          Forward f = [&](const std::vector<Tensor> &in) {
            std::vector<Tensor> o;
            o.emplace_back(APX_DT_F64, lossd);
            o.emplace_back(APX_DT_F64, sh);
            std::vector<Tensor *> outs = {&o[0]};
            if (sce) outs.push_back(&o[1]);
            run_ok(fo, &a, {&in[0], &lab, weighted ? &w : nullptr}, outs);
            return o;
          };
          Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
            std::vector<Tensor> y = f(in), g = {out_like(in[0])};
            if (sce)
              run_ok(go, &a, {&R[0], &y[1], &lab, weighted ? &w : nullptr}, {&g[0]});
            else
              run_ok(go, &a, {&R[0], &lab, weighted ? &w : nullptr}, {&g[0]});
            return g;
          };
          fd_check(apx_op_name(go), {x}, {0}, f, b);
          Tensor dl = rand(APX_DT_F64, lossd, -1, 1, 35);
          std::vector<Tensor> y = f({x});
          if (sce)
            dtype_sweep(apx_op_name(go), go, &a, weighted ? std::vector<Tensor>{dl, y[1], lab, w}
                                                          : std::vector<Tensor>{dl, y[1], lab},
                        {sh}, 2.0 * numel_of(ld) + 8);
          else
            dtype_sweep(apx_op_name(go), go, &a, weighted ? std::vector<Tensor>{dl, lab, w}
                                                          : std::vector<Tensor>{dl, lab},
                        {sh}, 2.0 * numel_of(ld) + 8);
        }
}

// ---- fused kernels -----------------------------------------------------------------------------

TEST(Grad, FusedDense) {
  for (int act = APX_ACT_NONE; act <= APX_ACT_GELU_TANH; act++)
    for (int tw = 0; tw < 2; tw++) {
      ApxAttrFusedDense a = {tw, act, 0.75f, 1.5f};
      Tensor x = rand(APX_DT_F64, {2, 3, 4}, -2, 2, 40);
      Tensor w = rand(APX_DT_F64, tw ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}, -1, 1, 41);
      Tensor bb = rand(APX_DT_F64, {5}, -1, 1, 42);
      if (act == APX_ACT_RELU) { /* keep pre-activations away from the kink */
        for (int it = 0; it < 50; it++) {
          Tensor pre(APX_DT_F64, {2, 3, 5}), y(APX_DT_F64, {2, 3, 5});
          run_ok(APX_OP_FusedDense, &a, {&x, &w, &bb}, {&y, &pre});
          bool ok = true;
          for (int64_t i = 0; i < pre.numel(); i++) ok = ok && std::fabs(pre.get(i)) > 1e-3;
          if (ok) break;
          bb = rand(APX_DT_F64, {5}, -1, 1, 43 + it);
        }
      }
      Forward f = [&](const std::vector<Tensor> &in) {
        std::vector<Tensor> o;
        o.emplace_back(APX_DT_F64, std::vector<int64_t>{2, 3, 5});
        o.emplace_back(APX_DT_F64, std::vector<int64_t>{2, 3, 5});
        run_ok(APX_OP_FusedDense, &a, {&in[0], &in[1], &in[2]}, {&o[0], &o[1]});
        return o;
      };
      Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
        std::vector<Tensor> y = f(in), g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
        const Tensor *t = act == APX_ACT_GELU || act == APX_ACT_GELU_TANH ? &y[1] : &y[0];
        run_ok(APX_OP_FusedDenseGrad, &a, {&R[0], &in[0], &in[1], t}, {&g[0], &g[1], &g[2]});
        return g;
      };
      fd_check("FusedDenseGrad", {x, w, bb}, {0, 1, 2}, f, b);
      std::vector<Tensor> y = f({x, w, bb});
      Tensor dy = rand(APX_DT_F64, {2, 3, 5}, -1, 1, 44);
      dtype_sweep("FusedDenseGrad", APX_OP_FusedDenseGrad, &a,
                  {dy, x, w, act >= APX_ACT_GELU ? y[1] : y[0]}, {x.dims, w.dims, {5}}, 40);
    }
}

TEST(Grad, FusedSoftmax) {
  ApxAttrFusedSoftmax a = {0.5f, 1};
  Tensor x = rand(APX_DT_F64, {2, 3, 4}, -2, 2, 45), m = rand(APX_DT_F64, {3, 4}, -1, 0, 46);
  Forward f = [&](const std::vector<Tensor> &in) {
    return run1(APX_OP_FusedSoftmax, &a, {&in[0], &in[1]}, {2, 3, 4});
  };
  Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> y = f(in), g = {out_like(in[0])};
    run_ok(APX_OP_FusedSoftmaxGrad, &a, {&R[0], &y[0]}, {&g[0]});
    return g;
  };
  fd_check("FusedSoftmaxGrad", {x, m}, {0}, f, b);
  Tensor dy = rand(APX_DT_F64, {2, 3, 4}, -1, 1, 47);
  dtype_sweep("FusedSoftmaxGrad", APX_OP_FusedSoftmaxGrad, &a, {dy, f({x, m})[0]}, {{2, 3, 4}}, 16);
}

TEST(Grad, FusedXentropy) {
  for (int red = 0; red < 3; red++) {
    ApxAttrLoss a = {red, 1, 2};
    Tensor x = rand(APX_DT_F64, {6, 5}, -2, 2, 48), lab = rand(APX_DT_I64, {6}, 0, 5, 49);
    lab.set(0, 2);
    std::vector<int64_t> ld = red == APX_RED_NONE ? std::vector<int64_t>{6} : std::vector<int64_t>{};
    Forward f = [&](const std::vector<Tensor> &in) {
      std::vector<Tensor> o;
      o.emplace_back(APX_DT_F64, ld);
      o.emplace_back(APX_DT_F64, std::vector<int64_t>{6});
      run_ok(APX_OP_FusedXentropy, &a, {&in[0], &lab}, {&o[0], &o[1]});
      return o;
    };
    Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
      std::vector<Tensor> y = f(in), g = {out_like(in[0])};
      run_ok(APX_OP_FusedXentropyGrad, &a, {&R[0], &in[0], &lab, &y[1]}, {&g[0]});
      return g;
    };
    fd_check("FusedXentropyGrad", {x}, {0}, f, b);
  }
}

TEST(Grad, BatchNormReluAndConvBiasRelu) {
  ApxAttrBatchNorm bn = {1e-5f, 0.9f, 1, 0};
  std::vector<int64_t> dims = {3, 2, 2, 3};
  Tensor x = rand(APX_DT_F64, dims, -2, 2, 50), s = rand(APX_DT_F64, {2}, 0.5, 1.5, 51),
         bb = rand(APX_DT_F64, {2}, -0.2, 0.2, 52), m(APX_DT_F64, {2}), v = rand(APX_DT_F64, {2}, 1, 2, 53);
  Forward f = [&](const std::vector<Tensor> &in) {
    std::vector<Tensor> o;
    o.emplace_back(APX_DT_F64, dims);
    for (int k = 0; k < 4; k++) o.emplace_back(APX_DT_F64, std::vector<int64_t>{2});
    run_ok(APX_OP_BatchNormRelu, &bn, {&in[0], &in[1], &in[2], &in[3], &in[4]},
           {&o[0], &o[1], &o[2], &o[3], &o[4]});
    return o;
  };
  Backward b = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> y = f(in), g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
    run_ok(APX_OP_BatchNormReluGrad, &bn, {&R[0], &y[0], &in[0], &in[1], &y[3], &y[4]},
           {&g[0], &g[1], &g[2]});
    return g;
  };
  // pre-activations near 0 would sit on Relu's kink: nudge x until all are 1e-3 away
  for (int it = 0; it < 100; it++) {
    std::vector<Tensor> y = f({x, s, bb, m, v});
    Tensor pre(APX_DT_F64, dims);
    ApxAttrBatchNorm plain = bn;
    run_ok(APX_OP_BatchNormalization, &plain, {&x, &s, &bb, &m, &v}, {&pre});
    bool ok = true;
    for (int64_t i = 0; i < pre.numel(); i++) ok = ok && std::fabs(pre.get(i)) > 1e-3;
    if (ok) break;
    x = rand(APX_DT_F64, dims, -2, 2, 60 + it);
  }
  fd_check("BatchNormReluGrad", {x, s, bb, m, v}, {0, 1, 2}, f, b);

  ApxAttrConv a = {};
  a.kernel[0] = 1;
  a.kernel[1] = a.kernel[2] = 3;
  a.strides[1] = a.strides[2] = 1;
  a.dilations[1] = a.dilations[2] = 1;
  for (int i : {1, 2, 4, 5}) a.pads[i] = 1;
  a.group = 1;
  Tensor cx = rand(APX_DT_F64, {2, 2, 4, 4}, -1, 1, 54), cw = rand(APX_DT_F64, {3, 2, 3, 3}, -1, 1, 55),
         cb = rand(APX_DT_F64, {3}, -0.5, 0.5, 56);
  Forward fc = [&](const std::vector<Tensor> &in) {
    return run1(APX_OP_ConvBiasRelu, &a, {&in[0], &in[1], &in[2]}, {2, 3, 4, 4});
  };
  Backward bc = [&](const std::vector<Tensor> &in, const std::vector<Tensor> &R) {
    std::vector<Tensor> y = fc(in), g = {out_like(in[0]), out_like(in[1]), out_like(in[2])};
    run_ok(APX_OP_ConvBiasReluGrad, &a, {&R[0], &y[0], &in[0], &in[1]}, {&g[0], &g[1], &g[2]});
    return g;
  };
  for (int it = 0; it < 100; it++) {
    std::vector<Tensor> pre = run1(APX_OP_Conv, &a, {&cx, &cw, &cb}, {2, 3, 4, 4});
    bool ok = true;
    for (int64_t i = 0; i < pre[0].numel(); i++) ok = ok && std::fabs(pre[0].get(i)) > 1e-3;
    if (ok) break;
    cb = rand(APX_DT_F64, {3}, -0.5, 0.5, 200 + it);
  }
  fd_check("ConvBiasReluGrad", {cx, cw, cb}, {0, 1, 2}, fc, bc);
}
