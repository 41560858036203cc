// resample_test.cc - Resize, ResizeGrad and Einsum on the CPU: Resize against a per-axis
// reference written here from ONNX's formulas (every coordinate mode, every nearest mode,
// linear; up, down and non-integer scales) in every float dtype; ResizeGrad as the adjoint
// of Resize (<dY, R(x)> = <R^T(dY), x> in float64, R linear in x) for every mode, which also
// checks that its candidate ranges (resample_plan.h) miss no contribution; Einsum against a
// naive sum over all label values (products, diagonals, trace, the gradient rule's forms with
// a broadcast label and a repeated output label) and as its own adjoint; results identical
// at every thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/test_util.h"

extern "C" {
#include "kernels/resample_plan.h"
}

using namespace apxtest;

namespace {

double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); i++) s += a.get(i) * b.get(i);
  return s;
}

ApxAttrResize Rs(int mode, int coord, int nearest, std::vector<double> scales) {
  ApxAttrResize a;
  memset(&a, 0, sizeof a);
  a.mode = mode, a.coord = coord, a.nearest_mode = nearest, a.rank = (int32_t)scales.size();
  for (size_t i = 0; i < scales.size(); i++) a.scales[i] = scales[i];
  return a;
}

// ONNX's 1-D weights of output coordinate o (in -> out at scale s): (index, weight) pairs.
std::vector<std::pair<int64_t, double>> ref_weights(int mode, int coord, int nearest, int64_t in, int64_t out,
                                                    double s, int64_t o) {
  double of = s * (double)in, y = (double)o, x;
  if (in == out && std::fabs(s - 1) < 1e-12) return {{o, 1.0}};
  switch (coord) {
    case APX_RESIZE_HALF_PIXEL: x = (y + 0.5) / s - 0.5; break;
    case APX_RESIZE_HALF_PIXEL_SYMMETRIC:
      x = (double)in / 2 * (1 - (double)out / of) + (y + 0.5) / s - 0.5;
      break;
    case APX_RESIZE_PYTORCH_HALF_PIXEL: x = of == 1 ? -0.5 : (y + 0.5) / s - 0.5; break;
    case APX_RESIZE_ALIGN_CORNERS: x = of == 1 ? 0 : y * (double)(in - 1) / (of - 1); break;
    case APX_RESIZE_TF_HALF_PIXEL_FOR_NN: x = (y + 0.5) / s; break;
    default: x = y / s;
  }
  auto clamp = [&](int64_t i) { return i < 0 ? (int64_t)0 : i >= in ? in - 1 : i; };
  int64_t fl = (int64_t)std::floor(x);
  double f = x - (double)fl;
  if (mode == APX_RESIZE_NEAREST) {
    int64_t i = fl;  // integer x: itself
    if (f != 0) {
      if (nearest == APX_RESIZE_CEIL) i = fl + 1;
      else if (nearest == APX_RESIZE_ROUND_PREFER_CEIL) i = f >= 0.5 ? fl + 1 : fl;
      else if (nearest == APX_RESIZE_ROUND_PREFER_FLOOR) i = f > 0.5 ? fl + 1 : fl;
    }
    return {{clamp(i), 1.0}};
  }
  return {{clamp(fl), 1 - f}, {clamp(fl + 1), f}};
}

Tensor ref_resize(const Tensor &x, const ApxAttrResize &a, const std::vector<int64_t> &od) {
  Tensor y(APX_DT_F64, od);
  int r = (int)od.size();
  std::vector<int64_t> xs = strides_of(x.dims);
  for (int64_t o = 0; o < y.numel(); o++) {
    std::vector<std::vector<std::pair<int64_t, double>>> w(r);
    int64_t q = o;
    for (int d = r - 1; d >= 0; d--) {
      w[d] = ref_weights(a.mode, a.coord, a.nearest_mode, x.dims[d], od[d], a.scales[d], q % od[d]);
      q /= od[d];
    }
    double acc = 0;
    std::vector<size_t> k(r, 0);
    for (;;) {
      double wt = 1;
      int64_t off = 0;
      for (int d = 0; d < r; d++) wt *= w[d][k[d]].second, off += w[d][k[d]].first * xs[d];
      acc += wt * x.get(off);
      int d = r - 1;
      for (; d >= 0 && ++k[d] == w[d].size(); d--) k[d] = 0;
      if (d < 0) break;
    }
    y.set(o, acc);
  }
  return y;
}

struct ResizeCase {
  const char *name;
  ApxAttrResize a;
  std::vector<int64_t> in, out;
};

std::vector<ResizeCase> resize_cases() {
  std::vector<ResizeCase> v;
  const char *coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                          "asymmetric", "tf_half_pixel_for_nn"};
  struct Geo {
    std::vector<double> s;
    std::vector<int64_t> in, out;
  } geos[] = {{{1, 2, 3}, {2, 3, 4}, {2, 6, 12}},           // integer upsampling
              {{1, 0.6, 0.5}, {2, 5, 9}, {2, 3, 4}},        // downsampling, floor(in * s)
              {{1, 7.0 / 3, 1.75}, {1, 3, 4}, {1, 7, 7}},   // non-integer (sizes-like)
              {{1, 1, 1.0 / 4}, {3, 2, 4}, {3, 2, 1}}};     // to one element
  for (int c = 0; c < 6; c++)
    for (auto &g : geos) {
      for (int nm = 0; nm < 4; nm++) v.push_back({coords[c], Rs(APX_RESIZE_NEAREST, c, nm, g.s), g.in, g.out});
      v.push_back({coords[c], Rs(APX_RESIZE_LINEAR, c, 0, g.s), g.in, g.out});
    }
  return v;
}

TEST(Resize, MatchesOnnxFormulasInEveryFloatType) {
  for (const ResizeCase &c : resize_cases())
    for (ApxDType dt : {APX_DT_F64, APX_DT_F32, APX_DT_F16, APX_DT_BF16}) {
      Tensor x = rand(dt, c.in, -2, 2, 11), y(dt, c.out);
      run_ok(APX_OP_Resize, &c.a, {&x}, {&y});
      Tensor ref = ref_resize(x, c.a, c.out);
      for (int64_t i = 0; i < y.numel(); i++)
        ASSERT_LE(std::fabs(y.get(i) - ref.get(i)), tol(dt, ref.get(i), 4.0, 8))
            << c.name << " mode " << c.a.mode << " nearest " << c.a.nearest_mode << " " << apx_dtype_name(dt)
            << " element " << i;
    }
}

TEST(Resize, GradIsTheAdjointAtEveryThreadCount) {
  for (const ResizeCase &c : resize_cases()) {
    Tensor x = rand(APX_DT_F64, c.in, -1, 1, 3), dy = rand(APX_DT_F64, c.out, -1, 1, 4), y(APX_DT_F64, c.out),
           dx(APX_DT_F64, c.in), dx4(APX_DT_F64, c.in);
    run_ok(APX_OP_Resize, &c.a, {&x}, {&y});
    run_ok(APX_OP_ResizeGrad, &c.a, {&dy}, {&dx});
    RunOpts four;
    four.threads = 4;
    run_ok(APX_OP_ResizeGrad, &c.a, {&dy}, {&dx4}, four);
    double l = dot(dy, y), r = dot(dx, x);
    EXPECT_NEAR(l, r, 1e-12 * (1 + std::fabs(l))) << c.name << " mode " << c.a.mode << " nearest " << c.a.nearest_mode;
    EXPECT_EQ(dx.bytes, dx4.bytes) << c.name;
  }
}

TEST(Resize, ContractErrorsAreOneLine) {
  ApxAttrResize a = Rs(APX_RESIZE_LINEAR, APX_RESIZE_HALF_PIXEL, 0, {1, 2});
  Tensor x(APX_DT_F32, {2, 3}), y(APX_DT_F32, {2, 3, 1}), yi(APX_DT_I64, {2, 6});
  std::string err;
  EXPECT_EQ(run(APX_OP_Resize, &a, {&x}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("scales for rank 2, input [2,3], output [2,3,1]"), std::string::npos) << err;
  EXPECT_NE(run(APX_OP_Resize, &a, {&x}, {&yi}, &err), APX_STATUS_OK);
  a.scales[1] = 0;
  Tensor y2(APX_DT_F32, {2, 6});
  EXPECT_EQ(run(APX_OP_Resize, &a, {&x}, {&y2}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("scale 0 of dim 1 is not positive"), std::string::npos) << err;
}

// ---- Einsum ------------------------------------------------------------------------------

ApxAttrEinsum Terms(const std::string &a, const std::string &b, const std::string &y) {
  ApxAttrEinsum e;
  memset(&e, 0, sizeof e);
  for (char c : a) e.a[e.n_a++] = c;
  for (char c : b) e.b[e.n_b++] = c;
  for (char c : y) e.y[e.n_y++] = c;
  return e;
}

// y[...] = sum over every assignment of all labels consistent with y's coordinates.
Tensor ref_einsum(const std::string &ta, const std::string &tb, const std::string &ty, const Tensor &a,
                  const Tensor *b, const std::vector<int64_t> &yd) {
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ta.size(); i++) size[ta[i]] = a.dims[i];
  for (size_t i = 0; b && i < tb.size(); i++) size[tb[i]] = b->dims[i];
  for (size_t i = 0; i < ty.size(); i++) size[ty[i]] = yd[i];
  std::vector<char> labels;
  for (auto &kv : size) labels.push_back(kv.first);
  Tensor y(APX_DT_F64, yd);
  std::vector<int64_t> v(labels.size(), 0);
  auto at = [&](const std::string &t, const std::vector<int64_t> &dims) {
    int64_t off = 0;
    for (size_t i = 0; i < t.size(); i++) {
      size_t k = 0;
      while (labels[k] != t[i]) k++;
      off = off * dims[i] + v[k];
    }
    return off;
  };
  for (;;) {
    double p = a.get(at(ta, a.dims)) * (b ? b->get(at(tb, b->dims)) : 1.0);
    int64_t o = at(ty, yd);
    y.set(o, y.get(o) + p);
    int k = (int)labels.size() - 1;
    for (; k >= 0 && ++v[k] == size[labels[k]]; k--) v[k] = 0;
    if (k < 0) break;
  }
  // a repeated output label: only its diagonal is written
  for (int64_t o = 0; o < y.numel(); o++) {
    std::vector<int64_t> c(yd.size());
    int64_t q = o;
    for (int d = (int)yd.size() - 1; d >= 0; d--) c[d] = q % yd[d], q /= yd[d];
    for (size_t i = 0; i < ty.size(); i++)
      for (size_t j = 0; j < i; j++)
        if (ty[i] == ty[j] && c[i] != c[j]) y.set(o, 0);
  }
  return y;
}

struct EinsumCase {
  std::string a, b, y;
  std::vector<int64_t> da, db, dy;
};

std::vector<EinsumCase> einsum_cases() {
  return {{"bij", "bjk", "bik", {2, 3, 4}, {2, 4, 5}, {2, 3, 5}},
          {"bhid", "bhjd", "bhij", {2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 3, 5}},
          {"ij", "", "ji", {3, 4}, {}, {4, 3}},
          {"bi", "bi", "b", {3, 5}, {3, 5}, {3}},
          {"i", "j", "ij", {3}, {4}, {3, 4}},
          {"ii", "", "i", {4, 4}, {}, {4}},
          {"bii", "", "b", {2, 3, 3}, {}, {2}},
          {"ij", "", "", {3, 4}, {}, {}},
          {"i", "", "iij", {3}, {}, {3, 3, 2}},      // gradient form: diagonal + broadcast label
          {"ik", "k", "ij", {3, 2}, {2}, {3, 4}}};  // gradient form: broadcast label j
}

TEST(Einsum, MatchesTheNaiveSumAtEveryThreadCount) {
  for (const EinsumCase &c : einsum_cases())
    for (ApxDType dt : {APX_DT_F64, APX_DT_F32, APX_DT_F16, APX_DT_BF16}) {
      ApxAttrEinsum e = Terms(c.a, c.b, c.y);
      Tensor a = rand(dt, c.da, -2, 2, 5), b = c.b.empty() ? Tensor() : rand(dt, c.db, -2, 2, 6);
      Tensor y(dt, c.dy), y4(dt, c.dy);
      std::vector<const Tensor *> ins = {&a};
      if (!c.b.empty()) ins.push_back(&b);
      run_ok(APX_OP_Einsum, &e, ins, {&y});
      RunOpts four;
      four.threads = 4;
      run_ok(APX_OP_Einsum, &e, ins, {&y4}, four);
      EXPECT_EQ(y.bytes, y4.bytes) << c.a << "," << c.b << "->" << c.y;
      Tensor ref = ref_einsum(c.a, c.b, c.y, a, c.b.empty() ? nullptr : &b, c.dy);
      for (int64_t i = 0; i < y.numel(); i++)
        ASSERT_LE(std::fabs(y.get(i) - ref.get(i)), tol(dt, ref.get(i), 4.0 * 16, 16))
            << c.a << "," << c.b << "->" << c.y << " " << apx_dtype_name(dt) << " element " << i;
    }
}

TEST(Einsum, ContractErrorsAreOneLine) {
  ApxAttrEinsum e = Terms("ij", "jk", "ik");
  Tensor a(APX_DT_F32, {2, 3}), b(APX_DT_F32, {4, 5}), y(APX_DT_F32, {2, 5}), b16(APX_DT_F16, {3, 5});
  std::string err;
  EXPECT_EQ(run(APX_OP_Einsum, &e, {&a, &b}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("label 'j' has two sizes"), std::string::npos) << err;
  EXPECT_EQ(run(APX_OP_Einsum, &e, {&a, &b16}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("types differ"), std::string::npos) << err;
  EXPECT_EQ(run(APX_OP_Einsum, &e, {&a}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("the equation has two operands, the call one"), std::string::npos) << err;
}

TEST(Einsum, ParserRefusesWhatIsNotSupported) {
  ApxAttrEinsum e;
  int n;
  char err[128];
  EXPECT_EQ(apx_einsum_parse("...ij,...jk->...ik", &e, &n, err, sizeof err), -2);
  EXPECT_STREQ(err, "not supported yet: Einsum with ellipsis ('...')");
  EXPECT_EQ(apx_einsum_parse("ij,jk,kl->il", &e, &n, err, sizeof err), -2);
  EXPECT_STREQ(err, "not supported yet: Einsum with 3 operands (one or two are)");
  ASSERT_EQ(apx_einsum_parse(" ba , ac ", &e, &n, err, sizeof err), 0) << err;
  EXPECT_EQ(n, 2);
  EXPECT_EQ(e.n_y, 2);  // implicit: b and c, sorted
  EXPECT_EQ(e.y[0], 'b');
  EXPECT_EQ(e.y[1], 'c');
}

}  // namespace
