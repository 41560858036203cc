// window3d_test.cc - 3-D Conv, ConvGrad, ConvTranspose, ConvTransposeGrad, MaxPool (values and
// Indices), AveragePool and their gradients against naive double loops over (d, h, w): groups,
// asymmetric pads, strides, dilations, output_padding, ceil mode, count_include_pad; every
// float dtype for the forwards. Also: a 3-D window whose depth is trivial gives the 2-D
// kernels' bits, and rank 6 is "not supported yet".
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

struct Win {
  int64_t k[3], s[3], d[3], p0[3], p1[3];
};

int64_t out_floor(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
  return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

template <typename A>
void set_window(A *a, const Win &w) {
  for (int i = 0; i < 3; i++) {
    a->kernel[i] = w.k[i];
    a->strides[i] = w.s[i];
    a->dilations[i] = w.d[i];
    a->pads[i] = w.p0[i];
    a->pads[i + 3] = w.p1[i];
  }
}

struct ConvCase {
  int64_t N, C, M, G, in[3];
  Win w;
};

const ConvCase kConv[] = {
    {2, 3, 4, 1, {5, 6, 7}, {{3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}},
    {1, 4, 6, 2, {6, 5, 7}, {{2, 3, 2}, {2, 1, 2}, {1, 2, 1}, {1, 0, 1}, {0, 2, 1}}},  // asym, strided
    {2, 4, 4, 4, {4, 4, 4}, {{3, 1, 3}, {1, 1, 1}, {2, 1, 1}, {2, 0, 1}, {2, 0, 1}}},  // depthwise
    {1, 3, 5, 1, {3, 4, 5}, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}}},  // pointwise
};

// y (N, M, O...) = conv(x, w) + b; sc the error scale sum |x w| + |b|; also the adjoint sums
// dx = sum dy w, dw = sum dy x, db = sum dy for a given dy (nullptr: not computed).
struct ConvRef {
  std::vector<double> y, sc, dx, dw, db;
  std::vector<double> adx, adw, adb;  // their error scales: sums of |terms|
};

ConvRef ref_conv(const ConvCase &c, const int64_t o[3], const std::vector<double> &x,
                 const std::vector<double> &w, const std::vector<double> *b,
                 const std::vector<double> *dy) {
  int64_t Cg = c.C / c.G, Mg = c.M / c.G, D = c.in[0], H = c.in[1], W = c.in[2];
  const Win &v = c.w;
  ConvRef r;
  int64_t ny = c.N * c.M * o[0] * o[1] * o[2];
  r.y.assign(ny, 0.0);
  r.sc.assign(ny, 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(c.M, 0.0);
  r.adx = r.dx;
  r.adw = r.dw;
  r.adb = r.db;
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t m = 0; m < c.M; m++)
      for (int64_t od = 0; od < o[0]; od++)
        for (int64_t oh = 0; oh < o[1]; oh++)
          for (int64_t ow = 0; ow < o[2]; ow++) {
            int64_t yo = (((n * c.M + m) * o[0] + od) * o[1] + oh) * o[2] + ow;
            double s = b ? (*b)[m] : 0.0, a = b ? std::fabs((*b)[m]) : 0.0;
            double g = dy ? (*dy)[yo] : 0.0;
            r.db[m] += g;
            r.adb[m] += std::fabs(g);
            int64_t grp = m / Mg;
            for (int64_t ci = 0; ci < Cg; ci++)
              for (int64_t ka = 0; ka < v.k[0]; ka++)
                for (int64_t ki = 0; ki < v.k[1]; ki++)
                  for (int64_t kj = 0; kj < v.k[2]; kj++) {
                    int64_t z = od * v.s[0] - v.p0[0] + ka * v.d[0];
                    int64_t h = oh * v.s[1] - v.p0[1] + ki * v.d[1];
                    int64_t q = ow * v.s[2] - v.p0[2] + kj * v.d[2];
                    if (z < 0 || z >= D || h < 0 || h >= H || q < 0 || q >= W) continue;
                    int64_t xi = (((n * c.C + grp * Cg + ci) * D + z) * H + h) * W + q;
                    int64_t wi = (((m * Cg + ci) * v.k[0] + ka) * v.k[1] + ki) * v.k[2] + kj;
                    s += x[xi] * w[wi];
                    a += std::fabs(x[xi] * w[wi]);
                    r.dx[xi] += g * w[wi];
                    r.dw[wi] += g * x[xi];
                    r.adx[xi] += std::fabs(g * w[wi]);
                    r.adw[wi] += std::fabs(g * x[xi]);
                  }
            r.y[yo] = s;
            r.sc[yo] = a;
          }
  return r;
}

void out_dims(const ConvCase &c, int64_t o[3]) {
  for (int i = 0; i < 3; i++) o[i] = out_floor(c.in[i], c.w.k[i], c.w.s[i], c.w.d[i], c.w.p0[i], c.w.p1[i]);
}

std::vector<int64_t> dims5(int64_t a, int64_t b, const int64_t s[3]) { return {a, b, s[0], s[1], s[2]}; }

}  // namespace

TEST(Conv3D, ForwardEveryCaseEveryFloatType) {
  for (const ConvCase &c : kConv)
    for (ApxDType dt : kFloatTypes) {
      int64_t o[3], k[3] = {c.w.k[0], c.w.k[1], c.w.k[2]};
      out_dims(c, o);
      Tensor x = rand(dt, dims5(c.N, c.C, c.in), -1, 1, 41);
      Tensor w = rand(dt, dims5(c.M, c.C / c.G, k), -1, 1, 42);
      Tensor b = rand(dt, {c.M}, -1, 1, 43);
      Tensor y(dt, dims5(c.N, c.M, o));
      ApxAttrConv a = {};
      set_window(&a, c.w);
      a.group = c.G;
      run_ok(APX_OP_Conv, &a, {&x, &w, &b}, {&y});
      std::vector<double> bv = b.values();
      ConvRef r = ref_conv(c, o, x.values(), w.values(), &bv, nullptr);
      expect_close(y, r.y, (double)(c.C / c.G * k[0] * k[1] * k[2]) + 2, &r.sc, "Conv3D");
    }
}

TEST(Conv3D, GradientsMatchTheAdjointSums) {
  for (const ConvCase &c : kConv) {
    int64_t o[3], k[3] = {c.w.k[0], c.w.k[1], c.w.k[2]};
    out_dims(c, o);
    ApxDType dt = APX_DT_F64;
    Tensor x = rand(dt, dims5(c.N, c.C, c.in), -1, 1, 51);
    Tensor w = rand(dt, dims5(c.M, c.C / c.G, k), -1, 1, 52);
    Tensor dy = rand(dt, dims5(c.N, c.M, o), -1, 1, 53);
    Tensor dx(dt, x.dims), dw(dt, w.dims), db(dt, {c.M});
    ApxAttrConv a = {};
    set_window(&a, c.w);
    a.group = c.G;
    run_ok(APX_OP_ConvGrad, &a, {&dy, &x, &w}, {&dx, &dw, &db});
    std::vector<double> g = dy.values();
    ConvRef r = ref_conv(c, o, x.values(), w.values(), nullptr, &g);
    expect_close(dx, r.dx, 64, &r.adx, "ConvGrad3D dX");
    expect_close(dw, r.dw, 256, &r.adw, "ConvGrad3D dW");
    expect_close(db, r.db, 256, &r.adb, "ConvGrad3D dB");
  }
}

// ConvTranspose is the adjoint convolution's dX (plus bias); ConvTransposeGrad its forward and
// weight gradient: checked against the same sums with the roles of X and Y swapped.
TEST(ConvTranspose3D, ForwardAndGradientsAreTheAdjointConvolution) {
  // X (1, 4, 3, 4, 3), W (4, 3 / group 1 -> C_out 3, 2, 3, 2), strides (2, 1, 2), pads
  // (1, 1, 0 | 0, 1, 1), output_padding (1, 0, 1)
  const int64_t in[3] = {3, 4, 3}, k[3] = {2, 3, 2};
  const int64_t s[3] = {2, 1, 2}, p0[3] = {1, 1, 0}, p1[3] = {0, 1, 1}, op[3] = {1, 0, 1};
  int64_t out[3];
  for (int i = 0; i < 3; i++) out[i] = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) + 1 - p0[i] - p1[i];
  ApxAttrConvTranspose a = {};
  for (int i = 0; i < 3; i++) {
    a.kernel[i] = k[i];
    a.strides[i] = s[i];
    a.dilations[i] = 1;
    a.pads[i] = p0[i];
    a.pads[i + 3] = p1[i];
    a.output_padding[i] = op[i];
  }
  a.group = 1;
  for (ApxDType dt : kFloatTypes) {
    Tensor x = rand(dt, dims5(1, 4, in), -1, 1, 61), w = rand(dt, dims5(4, 3, k), -1, 1, 62);
    Tensor b = rand(dt, {3}, -1, 1, 63), y(dt, dims5(1, 3, out));
    run_ok(APX_OP_ConvTranspose, &a, {&x, &w, &b}, {&y});
    // the adjoint: a Conv with input Y's shape, output X's, weight W (M = 4, C = 3)
    ConvCase c = {1, 3, 4, 1, {out[0], out[1], out[2]}, {{k[0], k[1], k[2]}, {s[0], s[1], s[2]}, {1, 1, 1},
                                                          {p0[0], p0[1], p0[2]}, {p1[0] - op[0], p1[1] - op[1], p1[2] - op[2]}}};
    std::vector<double> g = x.values();
    ConvRef r = ref_conv(c, in, std::vector<double>(numel_of(y.dims), 0.0), w.values(), nullptr, &g);
    std::vector<double> bv = b.values(), ref = r.dx, sc = r.adx;
    for (size_t i = 0; i < ref.size(); i++) {
      ref[i] += bv[(i / (out[0] * out[1] * out[2])) % 3];
      sc[i] += std::fabs(bv[(i / (out[0] * out[1] * out[2])) % 3]);
    }
    expect_close(y, ref, 64, &sc, "ConvTranspose3D");
    if (dt != APX_DT_F64) continue;
    Tensor dy = rand(dt, y.dims, -1, 1, 64), dx(dt, x.dims), dw(dt, w.dims), db(dt, {3});
    run_ok(APX_OP_ConvTransposeGrad, &a, {&dy, &x, &w}, {&dx, &dw, &db});
    // dX = the adjoint's forward on dY; dW = its weight gradient with X as the output gradient
    ConvRef f = ref_conv(c, in, dy.values(), w.values(), nullptr, &g);
    expect_close(dx, f.y, 64, &f.sc, "ConvTransposeGrad3D dX");
    expect_close(dw, f.dw, 256, &f.adw, "ConvTransposeGrad3D dW");
    std::vector<double> dbr(3, 0.0), dba(3, 0.0), dyv = dy.values();
    for (size_t i = 0; i < dyv.size(); i++) {
      dbr[(i / (out[0] * out[1] * out[2])) % 3] += dyv[i];
      dba[(i / (out[0] * out[1] * out[2])) % 3] += std::fabs(dyv[i]);
    }
    expect_close(db, dbr, 256, &dba, "ConvTransposeGrad3D dB");
  }
}

// A rank-5 window with depth 1 and a unit depth kernel runs the 2-D kernels: the same bits as
// the rank-4 operands.
TEST(Conv3D, TrivialDepthGivesTheTwoDimensionalBits) {
  ApxAttrConv a = {};
  Win v = {{1, 3, 3}, {1, 2, 1}, {1, 1, 2}, {0, 1, 2}, {0, 0, 2}};
  set_window(&a, v);
  a.group = 1;
  Tensor x5 = rand(APX_DT_F32, {2, 3, 1, 9, 8}, -1, 1, 71), w5 = rand(APX_DT_F32, {4, 3, 1, 3, 3}, -1, 1, 72);
  Tensor x4 = x5, w4 = w5;
  x4.dims = {2, 3, 9, 8};
  w4.dims = {4, 3, 3, 3};
  int64_t oh = out_floor(9, 3, 2, 1, 1, 0), ow = out_floor(8, 3, 1, 2, 2, 2);
  Tensor y5(APX_DT_F32, {2, 4, 1, oh, ow}), y4(APX_DT_F32, {2, 4, oh, ow});
  run_ok(APX_OP_Conv, &a, {&x5, &w5}, {&y5});
  run_ok(APX_OP_Conv, &a, {&x4, &w4}, {&y4});
  y5.dims = y4.dims;
  expect_same_bits(y5, y4, "Conv depth 1");
  Tensor x6(APX_DT_F32, {1, 1, 2, 2, 2, 2}), w6(APX_DT_F32, {1, 1, 1, 1, 1, 1}), y6(APX_DT_F32, {1, 1, 2, 2, 2, 2});
  std::string err;
  EXPECT_EQ(run(APX_OP_Conv, &a, {&x6, &w6}, {&y6}, &err), APX_STATUS_UNSUPPORTED) << err;
}

namespace {

struct PoolCase {
  int64_t N, C, in[3];
  Win w;
  int ceil, cip;
};

const PoolCase kPool[] = {
    {2, 3, {4, 5, 6}, {{2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}}, 0, 0},
    {1, 2, {5, 5, 4}, {{3, 2, 3}, {2, 1, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 1}}, 0, 1},
    {1, 2, {5, 6, 5}, {{3, 3, 2}, {2, 2, 2}, {1, 1, 2}, {1, 1, 0}, {0, 1, 0}}, 1, 0},  // ceil
    {2, 1, {3, 4, 5}, {{2, 3, 3}, {1, 2, 1}, {2, 1, 1}, {0, 1, 1}, {1, 1, 1}}, 0, 0},  // dilated depth
};

int64_t out_pool(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1, int ceil) {
  int64_t span = in + p0 + p1 - d * (k - 1) - 1;
  if (!ceil) return span / s + 1;
  int64_t o = (span + s - 1) / s + 1;
  if ((o - 1) * s >= in + p0) o--;
  return o;
}

struct PoolRef {
  std::vector<double> max, avg, dmax, davg;
  std::vector<int64_t> idx;
};

PoolRef ref_pool(const PoolCase &c, const int64_t o[3], const std::vector<double> &x,
                 const std::vector<double> &dy) {
  const Win &v = c.w;
  int64_t D = c.in[0], H = c.in[1], W = c.in[2], S = D * H * W, OS = o[0] * o[1] * o[2];
  PoolRef r;
  r.max.assign(c.N * c.C * OS, 0.0);
  r.avg = r.max;
  r.idx.assign(r.max.size(), -1);
  r.dmax.assign(x.size(), 0.0);
  r.davg = r.dmax;
  for (int64_t p = 0; p < c.N * c.C; p++)
    for (int64_t od = 0; od < o[0]; od++)
      for (int64_t oh = 0; oh < o[1]; oh++)
        for (int64_t ow = 0; ow < o[2]; ow++) {
          int64_t yo = p * OS + (od * o[1] + oh) * o[2] + ow, best = -1, cnt[3] = {0, 0, 0};
          int64_t st[3] = {od * v.s[0] - v.p0[0], oh * v.s[1] - v.p0[1], ow * v.s[2] - v.p0[2]};
          for (int t = 0; t < 3; t++)
            for (int64_t i = 0; i < v.k[t]; i++) {
              int64_t e = st[t] + i * v.d[t], lo = c.cip ? -v.p0[t] : 0, hi = c.in[t] + (c.cip ? v.p1[t] : 0);
              cnt[t] += e >= lo && e < hi;
            }
          double sum = 0, n = (double)(cnt[0] * cnt[1] * cnt[2]);
          std::vector<int64_t> inside;
          for (int64_t a = 0; a < v.k[0]; a++)
            for (int64_t i = 0; i < v.k[1]; i++)
              for (int64_t j = 0; j < v.k[2]; j++) {
                int64_t z = st[0] + a * v.d[0], h = st[1] + i * v.d[1], q = st[2] + j * v.d[2];
                if (z < 0 || z >= D || h < 0 || h >= H || q < 0 || q >= W) continue;
                int64_t k = (z * H + h) * W + q;
                inside.push_back(k);
                sum += x[p * S + k];
                if (best < 0 || x[p * S + k] > x[p * S + best]) best = k;
              }
          r.max[yo] = best < 0 ? -INFINITY : x[p * S + best];
          r.idx[yo] = best < 0 ? -1 : p * S + best;
          if (best >= 0) r.dmax[p * S + best] += dy[yo];
          r.avg[yo] = n ? sum / n : 0.0;
          for (int64_t k : inside) r.davg[p * S + k] += n ? dy[yo] / n : 0.0;
        }
  return r;
}

ApxAttrPool pool_attrs(const PoolCase &c) {
  ApxAttrPool a = {};
  set_window(&a, c.w);
  a.ceil_mode = c.ceil;
  a.count_include_pad = c.cip;
  return a;
}

}  // namespace

TEST(Pool3D, MaxAndAverageEveryCaseEveryFloatType) {
  for (const PoolCase &c : kPool)
    for (ApxDType dt : kFloatTypes) {
      int64_t o[3];
      for (int i = 0; i < 3; i++) o[i] = out_pool(c.in[i], c.w.k[i], c.w.s[i], c.w.d[i], c.w.p0[i], c.w.p1[i], c.ceil);
      Tensor x = rand(dt, dims5(c.N, c.C, c.in), -1, 1, 81);
      Tensor ym(dt, dims5(c.N, c.C, o)), ya(dt, ym.dims), idx(APX_DT_I64, ym.dims);
      ApxAttrPool a = pool_attrs(c);
      run_ok(APX_OP_MaxPool, &a, {&x}, {&ym, &idx});
      run_ok(APX_OP_AveragePool, &a, {&x}, {&ya});
      PoolRef r = ref_pool(c, o, x.values(), std::vector<double>(numel_of(ym.dims), 0.0));
      expect_close(ym, r.max, 0, nullptr, "MaxPool3D");
      expect_close(ya, r.avg, 32, nullptr, "AveragePool3D");
      for (int64_t i = 0; i < idx.numel(); i++) ASSERT_EQ(idx.as<int64_t>()[i], r.idx[i]) << "Indices " << i;
    }
}

TEST(Pool3D, GradientsRouteAsTheForward) {
  for (const PoolCase &c : kPool) {
    int64_t o[3];
    for (int i = 0; i < 3; i++) o[i] = out_pool(c.in[i], c.w.k[i], c.w.s[i], c.w.d[i], c.w.p0[i], c.w.p1[i], c.ceil);
    ApxDType dt = APX_DT_F64;
    Tensor x = rand(dt, dims5(c.N, c.C, c.in), -1, 1, 91), dy = rand(dt, dims5(c.N, c.C, o), -1, 1, 92);
    Tensor dxm(dt, x.dims), dxa(dt, x.dims);
    ApxAttrPool a = pool_attrs(c);
    run_ok(APX_OP_MaxPoolGrad, &a, {&dy, &x}, {&dxm});
    run_ok(APX_OP_AveragePoolGrad, &a, {&dy}, {&dxa});
    PoolRef r = ref_pool(c, o, x.values(), dy.values());
    expect_close(dxm, r.dmax, 16, nullptr, "MaxPoolGrad3D");
    expect_close(dxa, r.davg, 64, nullptr, "AveragePoolGrad3D");
  }
}
