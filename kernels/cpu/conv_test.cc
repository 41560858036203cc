// conv_test.cc - 2-D Conv / ConvBiasRelu against a naive double convolution: groups
// (including depthwise), asymmetric pads, strides, dilations, 1x1 fast path, every float
// dtype; shape checks; thread-count independence.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

struct ConvCase {
  int64_t N, C, H, W, M, kh, kw, group;
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
  bool bias;
};

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
  return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

ApxAttrConv attrs_of(const ConvCase &c) {
  ApxAttrConv a = {};
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
  a.group = c.group;
  return a;
}

// y and the error scale sum |x w| + |b|
void ref_conv(const ConvCase &c, const std::vector<double> &x, const std::vector<double> &w,
              const std::vector<double> *b, int64_t OH, int64_t OW, std::vector<double> &y,
              std::vector<double> &sc) {
  int64_t Cg = c.C / c.group, Mg = c.M / c.group;
  y.assign(c.N * c.M * OH * OW, 0.0);
  sc.assign(y.size(), 0.0);
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t m = 0; m < c.M; m++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double s = b ? (*b)[m] : 0, a = b ? std::fabs((*b)[m]) : 0;
          int64_t g = m / Mg;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t i = 0; i < c.kh; i++)
              for (int64_t j = 0; j < c.kw; j++) {
                int64_t h = oh * c.sh - c.pt + i * c.dh, ww = ow * c.sw - c.pl + j * c.dw;
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                double xv = x[((n * c.C + g * Cg + ci) * c.H + h) * c.W + ww];
                double wv = w[((m * Cg + ci) * c.kh + i) * c.kw + j];
                s += xv * wv;
                a += std::fabs(xv * wv);
              }
          size_t o = ((n * c.M + m) * OH + oh) * OW + ow;
          y[o] = s;
          sc[o] = a;
        }
}

const std::vector<ConvCase> kCases = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
    {1, 4, 9, 8, 6, 3, 2, 2, 2, 1, 1, 2, 0, 1, 2, 0, false},   // groups, strides, dilation, asym pads
    {2, 6, 5, 5, 6, 3, 3, 6, 1, 2, 1, 1, 1, 1, 1, 1, true},    // depthwise
    {3, 5, 4, 4, 7, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true},    // pointwise (no im2col)
    {1, 2, 6, 6, 2, 2, 2, 1, 2, 2, 1, 1, 0, 0, 0, 0, false},
    {1, 1, 3, 3, 1, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2, true},    // dilation larger than input
    {2, 2, 2, 5, 3, 5, 3, 1, 1, 1, 1, 1, 2, 1, 2, 1, false},   // "same" path, taps off the image
};

}  // namespace

TEST(Conv, EveryShapeCaseEveryFloatType) {
  for (const ConvCase &c : kCases)
    for (ApxDType dt : kFloatTypes)
      for (int relu = 0; relu < 2; relu++) {
        int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb);
        int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr);
        Tensor x = rand(dt, {c.N, c.C, c.H, c.W}, -1, 1, 31);
        Tensor w = rand(dt, {c.M, c.C / c.group, c.kh, c.kw}, -1, 1, 32);
        Tensor b = rand(dt, {c.M}, -1, 1, 33);
        Tensor y(dt, {c.N, c.M, OH, OW});
        ApxAttrConv a = attrs_of(c);
        run_ok(relu ? APX_OP_ConvBiasRelu : APX_OP_Conv, &a, {&x, &w, c.bias ? &b : nullptr}, {&y});
        std::vector<double> bv = b.values(), ref, sc;
        ref_conv(c, x.values(), w.values(), c.bias ? &bv : nullptr, OH, OW, ref, sc);
        if (relu)
          for (double &r : ref) r = r > 0 ? r : 0;
        expect_close(y, ref, (double)(c.C / c.group * c.kh * c.kw) + 2, &sc,
                     relu ? "ConvBiasRelu" : "Conv");
      }
}

TEST(Conv, RejectsMismatchedShapes) {
  ConvCase c = kCases[0];
  ApxAttrConv a = attrs_of(c);
  Tensor x(APX_DT_F32, {2, 3, 7, 6}), w(APX_DT_F32, {4, 2, 3, 3}), y(APX_DT_F32, {2, 4, 7, 6});
  std::string err;
  EXPECT_EQ(run(APX_OP_Conv, &a, {&x, &w}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("Conv: shapes/attributes do not match"), std::string::npos) << err;
  Tensor w3(APX_DT_F32, {4, 3, 3, 3}), ybad(APX_DT_F32, {2, 4, 6, 6});
  EXPECT_EQ(run(APX_OP_Conv, &a, {&x, &w3}, {&ybad}, &err), APX_STATUS_BAD_INPUT) << err;
  // 1-D (rank 3) runs as height 1: a 3x3 kernel attribute does not fit it
  Tensor x3(APX_DT_F32, {2, 3, 7}), w1(APX_DT_F32, {4, 3, 3}), y3(APX_DT_F32, {2, 4, 7});
  EXPECT_EQ(run(APX_OP_Conv, &a, {&x3, &w1}, {&y3}, &err), APX_STATUS_BAD_INPUT) << err;
  // 3-D operands with 2-D attributes (unit depth kernel) do not fit a 3x3x3 weight
  Tensor x5(APX_DT_F32, {2, 3, 7, 7, 7}), w5(APX_DT_F32, {4, 3, 3, 3, 3}), y5(APX_DT_F32, {2, 4, 7, 7, 7});
  EXPECT_EQ(run(APX_OP_Conv, &a, {&x5, &w5}, {&y5}, &err), APX_STATUS_BAD_INPUT) << err;
}

// Large products are tiled over the threads; many small ones (64 images, also grouped) run
// one (image, group) pair per thread (conv_pairs_parallel): the same bits either way.
TEST(Conv, ThreadCountDoesNotChangeBits) {
  const ConvCase cases[] = {{2, 32, 24, 24, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
                            {64, 8, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
                            {64, 8, 16, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, false}};
  for (const ConvCase &c : cases)
    for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
      ApxAttrConv a = attrs_of(c);
      int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb);
      int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr);
      Tensor x = rand(dt, {c.N, c.C, c.H, c.W}, -1, 1, 1),
             w = rand(dt, {c.M, c.C / c.group, c.kh, c.kw}, -1, 1, 2);
      Tensor b = rand(dt, {c.M}, -1, 1, 3), y1(dt, {c.N, c.M, OH, OW}), y2(dt, y1.dims);
      RunOpts two;
      two.threads = 2;
      run_ok(APX_OP_Conv, &a, {&x, &w, c.bias ? &b : nullptr}, {&y1});
      run_ok(APX_OP_Conv, &a, {&x, &w, c.bias ? &b : nullptr}, {&y2}, two);
      expect_same_bits(y1, y2, "Conv 1 vs 2 threads");
    }
}

// Depthwise convolutions (one input channel per group, multiplier up to 4) run directly,
// without im2col (conv.c); the same convolution written as a dense one (group 1, the weight
// block-diagonal with zeros elsewhere) goes through im2col + GEMM. Forward, dX and dW agree
// to the accumulation tolerances, over strides, dilations, asymmetric pads, multipliers 1
// and 2 and the "same" im2col path; results do not depend on the thread count.
TEST(Conv, DepthwiseMatchesGeneralPath) {
  const ConvCase cases[] = {{2, 6, 9, 8, 6, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1, false},
                            {3, 4, 11, 10, 8, 3, 3, 4, 2, 2, 1, 1, 1, 1, 1, 1, false},
                            {1, 3, 12, 9, 6, 5, 3, 3, 2, 1, 2, 1, 2, 0, 1, 3, false},
                            {2, 5, 6, 7, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, false},
                            {1, 2, 5, 5, 2, 3, 3, 2, 3, 3, 1, 1, 0, 0, 0, 0, false}};
  for (const ConvCase &c : cases)
    for (ApxDType dt : {APX_DT_F32, APX_DT_F64}) {
      int64_t OH = out_dim(c.H, c.kh, c.sh, c.dh, c.pt, c.pb);
      int64_t OW = out_dim(c.W, c.kw, c.sw, c.dw, c.pl, c.pr);
      int64_t Mg = c.M / c.group, T = c.kh * c.kw;
      Tensor x = rand(dt, {c.N, c.C, c.H, c.W}, -1, 1, 41);
      Tensor w = rand(dt, {c.M, 1, c.kh, c.kw}, -1, 1, 42);
      Tensor dy = rand(dt, {c.N, c.M, OH, OW}, -1, 1, 43);
      Tensor wd(dt, {c.M, c.C, c.kh, c.kw});  // dense: filter m reads only channel m / Mg
      for (int64_t m = 0; m < c.M; m++)
        for (int64_t t = 0; t < T; t++) wd.set((m * c.C + m / Mg) * T + t, w.get(m * T + t));
      ApxAttrConv a = attrs_of(c), ad = a;
      ad.group = 1;
      Tensor y(dt, {c.N, c.M, OH, OW}), yd(dt, y.dims), y2(dt, y.dims);
      run_ok(APX_OP_Conv, &a, {&x, &w}, {&y});
      run_ok(APX_OP_Conv, &ad, {&x, &wd}, {&yd});
      std::vector<double> sc(y.numel(), (double)T);  // |x|, |w| < 1
      expect_close(y, yd.values(), (double)T + 2, &sc, "depthwise Conv");
      RunOpts two;
      two.threads = 2;
      run_ok(APX_OP_Conv, &a, {&x, &w}, {&y2}, two);
      expect_same_bits(y, y2, "depthwise Conv 1 vs 2 threads");

      Tensor dx(dt, x.dims), dw(dt, w.dims), dxd(dt, x.dims), dwd(dt, wd.dims);
      Tensor dx2(dt, x.dims), dw2(dt, w.dims);
      run_ok(APX_OP_ConvGrad, &a, {&dy, &x, &w}, {&dx, &dw, nullptr});
      run_ok(APX_OP_ConvGrad, &ad, {&dy, &x, &wd}, {&dxd, &dwd, nullptr});
      std::vector<double> scx(dx.numel(), (double)(Mg * T));
      expect_close(dx, dxd.values(), (double)(Mg * T) + 2, &scx, "depthwise ConvGrad dX");
      std::vector<double> dwref(dw.numel()), scw(dw.numel(), (double)(c.N * OH * OW));
      for (int64_t m = 0; m < c.M; m++)
        for (int64_t t = 0; t < T; t++) dwref[m * T + t] = dwd.get((m * c.C + m / Mg) * T + t);
      expect_close(dw, dwref, (double)(c.N * OH * OW) + 2, &scw, "depthwise ConvGrad dW");
      run_ok(APX_OP_ConvGrad, &a, {&dy, &x, &w}, {&dx2, &dw2, nullptr}, two);
      expect_same_bits(dx, dx2, "depthwise ConvGrad dX 1 vs 2 threads");
      expect_same_bits(dw, dw2, "depthwise ConvGrad dW 1 vs 2 threads");
    }
}
