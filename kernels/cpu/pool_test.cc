// pool_test.cc - MaxPool (with ONNX Indices, both storage orders), AveragePool
// (count_include_pad, ceil_mode, dilations), GlobalAveragePool against naive double
// references in every float dtype.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

struct PoolCase {
  int64_t N, C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int ceil_mode;
};

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1, int ceil) {
  int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
  if (!ceil) return span / s + 1;
  int64_t o = (span + s - 1) / s + 1;
  if ((o - 1) * s >= in + p0) o--;  // last window must start inside input or left pad
  return o;
}

ApxAttrPool attrs_of(const PoolCase &c, int cip, int order) {
  ApxAttrPool a = {};
  a.kernel[0] = 1;
  a.kernel[1] = c.kh;
  a.kernel[2] = c.kw;
  a.strides[1] = c.sh;
  a.strides[2] = c.sw;
  a.dilations[1] = c.dh;
  a.dilations[2] = c.dw;
  a.pads[1] = c.pt;
  a.pads[2] = c.pl;
  a.pads[4] = c.pb;
  a.pads[5] = c.pr;
  a.ceil_mode = c.ceil_mode;
  a.count_include_pad = cip;
  a.storage_order = order;
  return a;
}

const std::vector<PoolCase> kCases = {
    {2, 3, 6, 7, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0},
    {1, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},
    {1, 2, 7, 8, 3, 2, 2, 3, 1, 1, 1, 0, 1, 1, 1},  // ceil mode, asymmetric
    {2, 1, 9, 9, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 0},  // dilated
    {1, 1, 5, 5, 5, 5, 1, 1, 1, 1, 0, 0, 0, 0, 0},
    {1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1},  // ceil, window past the end
};

}  // namespace

TEST(MaxPool, ValuesAndIndicesEveryFloatType) {
  for (const PoolCase &c : kCases)
    for (ApxDType dt : kFloatTypes)
      for (int order = 0; order < 2; order++) {
        int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb, c.ceil_mode);
        int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr, c.ceil_mode);
        Tensor x = rand(dt, {c.N, c.C, c.H, c.W}, -4, 4, 41), y(dt, {c.N, c.C, OH, OW});
        Tensor idx(APX_DT_I64, {c.N, c.C, OH, OW});
        ApxAttrPool a = attrs_of(c, 0, order);
        run_ok(APX_OP_MaxPool, &a, {&x}, {&y, &idx});
        std::vector<double> xv = x.values();
        for (int64_t p = 0; p < c.N * c.C; p++)
          for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
              double best = -INFINITY;
              int64_t bi = -1;
              for (int64_t i = 0; i < c.kh; i++)
                for (int64_t j = 0; j < c.kw; j++) {
                  int64_t h = oh * c.sh - c.pt + i * c.dh, w = ow * c.sw - c.pl + j * c.dw;
                  if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
                  double v = xv[(p * c.H + h) * c.W + w];
                  if (bi < 0 || v > best) {
                    best = v;
                    bi = order ? p * c.H * c.W + w * c.H + h : p * c.H * c.W + h * c.W + w;
                  }
                }
              int64_t o = (p * OH + oh) * OW + ow;
              ASSERT_EQ(y.get(o), best) << o;
              ASSERT_EQ(idx.as<int64_t>()[o], bi) << o;
            }
      }
}

TEST(AveragePool, CountIncludePadAndCeilEveryFloatType) {
  for (const PoolCase &c : kCases)
    for (ApxDType dt : kFloatTypes)
      for (int cip = 0; cip < 2; cip++) {
        int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb, c.ceil_mode);
        int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr, c.ceil_mode);
        Tensor x = rand(dt, {c.N, c.C, c.H, c.W}, -4, 4, 42), y(dt, {c.N, c.C, OH, OW});
        ApxAttrPool a = attrs_of(c, cip, 0);
        run_ok(APX_OP_AveragePool, &a, {&x}, {&y});
        std::vector<double> xv = x.values(), ref(y.numel()), sc(y.numel());
        for (int64_t p = 0; p < c.N * c.C; p++)
          for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
              double s = 0, as = 0;
              int64_t cnt = 0;
              for (int64_t i = 0; i < c.kh; i++)
                for (int64_t j = 0; j < c.kw; j++) {
                  int64_t h = oh * c.sh - c.pt + i * c.dh, w = ow * c.sw - c.pl + j * c.dw;
                  bool in = h >= 0 && h < c.H && w >= 0 && w < c.W;
                  // count_include_pad counts positions inside the padded extent
                  bool padded = h >= -c.pt && h < c.H + c.pb && w >= -c.pl && w < c.W + c.pr;
                  if (cip ? padded : in) cnt++;
                  if (in) {
                    s += xv[(p * c.H + h) * c.W + w];
                    as += std::fabs(xv[(p * c.H + h) * c.W + w]);
                  }
                }
              int64_t o = (p * OH + oh) * OW + ow;
              ref[o] = cnt ? s / cnt : 0;
              sc[o] = cnt ? as / cnt : 0;
            }
        expect_close(y, ref, (double)(c.kh * c.kw) + 1, &sc, "AveragePool");
      }
}

TEST(Pool, RejectsWrongOutputSize) {
  PoolCase c = kCases[0];
  ApxAttrPool a = attrs_of(c, 0, 0);
  Tensor x(APX_DT_F32, {2, 3, 6, 7}), y(APX_DT_F32, {2, 3, 4, 3});
  std::string err;
  EXPECT_EQ(run(APX_OP_MaxPool, &a, {&x}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "MaxPool: output [2,3,4,3] does not match input [2,3,6,7]");
}

TEST(GlobalAveragePool, AnySpatialRankEveryFloatType) {
  const std::vector<std::vector<int64_t>> shapes = {{2, 3, 5, 4}, {3, 2, 7}, {1, 2, 3, 2, 2}};
  for (const auto &sh : shapes)
    for (ApxDType dt : kFloatTypes) {
      std::vector<int64_t> od = sh;
      for (size_t d = 2; d < od.size(); d++) od[d] = 1;
      Tensor x = rand(dt, sh, -2, 2, 43), y(dt, od);
      run_ok(APX_OP_GlobalAveragePool, nullptr, {&x}, {&y});
      int64_t planes = sh[0] * sh[1], S = x.numel() / planes;
      std::vector<double> xv = x.values(), ref(planes), sc(planes);
      for (int64_t p = 0; p < planes; p++) {
        double s = 0, a = 0;
        for (int64_t i = 0; i < S; i++) {
          s += xv[p * S + i];
          a += std::fabs(xv[p * S + i]);
        }
        ref[p] = s / S;
        sc[p] = a / S;
      }
      expect_close(y, ref, (double)S + 1, &sc, "GlobalAveragePool");
    }
}

TEST(Pool, ThreadCountDoesNotChangeBits) {
  PoolCase c = {8, 8, 48, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0};  // above APX_CPU_PAR_WORK
  int64_t O = out_dim(48, 3, 2, 1, 1, 1, 0);
  for (ApxOp op : {APX_OP_MaxPool, APX_OP_AveragePool}) {
    ApxAttrPool a = attrs_of(c, 1, 0);
    Tensor x = rand(APX_DT_F32, {8, 8, 48, 48}, -1, 1, 5), y1(APX_DT_F32, {8, 8, O, O}),
           y2(APX_DT_F32, {8, 8, O, O});
    RunOpts two;
    two.threads = 2;
    run_ok(op, &a, {&x}, {&y1});
    run_ok(op, &a, {&x}, {&y2}, two);
    expect_same_bits(y1, y2, apx_op_name(op));
  }
}

namespace {

// Inputs full of ties, signed zeros, infinities and NaNs: the first maximum of a window's
// row-major scan wins, a NaN wins over numbers and then stays.
Tensor special_input(ApxDType dt, std::vector<int64_t> dims, uint64_t seed) {
  const double vals[] = {-INFINITY, -1, -0.0, 0.0, 1, 1, 2, 2, NAN, INFINITY, 0.5, -0.5};
  Tensor x(dt, dims);
  uint64_t s = seed;
  for (int64_t i = 0; i < x.numel(); i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x.set(i, vals[(s >> 33) % 12]);
  }
  return x;
}

// The scan the kernels define: flat argmax per output (-1 if the window is all padding).
std::vector<int64_t> argmax_scan(const PoolCase &c, const Tensor &x, int64_t OH, int64_t OW) {
  std::vector<double> xv = x.values();
  std::vector<int64_t> arg;
  for (int64_t p = 0; p < c.N * c.C; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int64_t i = 0; i < c.kh; i++)
          for (int64_t j = 0; j < c.kw; j++) {
            int64_t h = oh * c.sh - c.pt + i * c.dh, w = ow * c.sw - c.pl + j * c.dw;
            if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
            double v = xv[(p * c.H + h) * c.W + w];
            if (bi < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              bi = (p * c.H + h) * c.W + w;
            }
          }
        arg.push_back(bi);
      }
  return arg;
}

std::vector<PoolCase> special_cases() {
  std::vector<PoolCase> cs = kCases;
  cs.push_back({1, 2, 5, 300, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0});  // rows wider than a block
  cs.push_back({1, 1, 4, 9, 2, 3, 1, 2, 1, 2, 0, 3, 0, 3, 0});    // pads wider than the window
  return cs;
}

}  // namespace

// MaxPool without Indices takes its own (vectorized) path: same values, signed zeros and
// NaNs included, as the scan.
TEST(MaxPool, ValuesWithoutIndicesFollowTheScan) {
  for (const PoolCase &c : special_cases())
    for (ApxDType dt : kFloatTypes) {
      int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb, c.ceil_mode);
      int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr, c.ceil_mode);
      Tensor x = special_input(dt, {c.N, c.C, c.H, c.W}, 7), y(dt, {c.N, c.C, OH, OW});
      Tensor y2(dt, y.dims), idx(APX_DT_I64, y.dims);
      ApxAttrPool a = attrs_of(c, 0, 0);
      run_ok(APX_OP_MaxPool, &a, {&x}, {&y});
      run_ok(APX_OP_MaxPool, &a, {&x}, {&y2, &idx});
      std::vector<int64_t> arg = argmax_scan(c, x, OH, OW);
      Tensor want(dt, y.dims);
      for (int64_t o = 0; o < want.numel(); o++)
        want.set(o, arg[o] < 0 ? -INFINITY : x.get(arg[o]));
      expect_same_bits(y, want, "MaxPool values");
      expect_same_bits(y2, want, "MaxPool values with Indices");
    }
}

// MaxPoolGrad adds dY at each window's argmax in output order (small integers: exact sums).
TEST(MaxPoolGrad, RoutesToTheScansArgmax) {
  for (const PoolCase &c : special_cases())
    for (ApxDType dt : kFloatTypes) {
      int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb, c.ceil_mode);
      int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr, c.ceil_mode);
      Tensor x = special_input(dt, {c.N, c.C, c.H, c.W}, 9), dy(dt, {c.N, c.C, OH, OW});
      for (int64_t o = 0; o < dy.numel(); o++) dy.set(o, (double)(o % 7) - 3);
      Tensor dx(dt, x.dims);
      ApxAttrPool a = attrs_of(c, 0, 0);
      run_ok(APX_OP_MaxPoolGrad, &a, {&dy, &x}, {&dx});
      std::vector<int64_t> arg = argmax_scan(c, x, OH, OW);
      std::vector<double> want(x.numel(), 0.0);
      for (int64_t o = 0; o < dy.numel(); o++)
        if (arg[o] >= 0) want[arg[o]] += dy.get(o);
      expect_close(dx, want, 0, nullptr, "MaxPoolGrad");
    }
}
