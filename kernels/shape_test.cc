// shape_test.cc - the host-side shape planning every backend shares (shape.h), checked
// against naive definitions: every offset a kernel will compute from a plan is compared with
// the offset computed directly from the unplanned shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "kernels/shape.h"
}

namespace {

ApxTensor T(std::vector<int64_t> dims, ApxDType dt = APX_DT_F32) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void *>(0x1000);
  t.dtype = dt;
  t.rank = (int32_t)dims.size();
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

std::vector<int64_t> Strides(const ApxTensor &t) {
  std::vector<int64_t> s(t.rank);
  int64_t v = 1;
  for (int i = t.rank - 1; i >= 0; i--) {
    s[i] = v;
    v *= t.dims[i];
  }
  return s;
}

// Index of input `in` read for output multi-index idx (right-aligned numpy broadcasting).
int64_t NaiveBcastOffset(const ApxTensor &in, const ApxTensor &out, const std::vector<int64_t> &idx) {
  std::vector<int64_t> s = Strides(in);
  int64_t off = 0;
  int lead = out.rank - in.rank;
  for (int d = 0; d < in.rank; d++)
    if (in.dims[d] != 1) off += idx[d + lead] * s[d];
  return off;
}

std::vector<int64_t> Unflatten(int64_t i, const ApxTensor &t) {
  std::vector<int64_t> idx(t.rank);
  for (int d = t.rank - 1; d >= 0; d--) {
    idx[d] = i % t.dims[d];
    i /= t.dims[d];
  }
  return idx;
}

void ExpectBcastMatchesNaive(const ApxTensor &out, std::vector<ApxTensor> ins) {
  std::vector<const ApxTensor *> p;
  for (auto &t : ins) p.push_back(&t);
  ApxBcast b;
  int bad = -1;
  ASSERT_EQ(apx_bcast_init_t(&b, &out, p.data(), (int32_t)p.size(), &bad), 0);
  int64_t n = apx_tensor_numel(&out);
  ASSERT_EQ(b.numel, n);
  for (int64_t i = 0; i < n; i++) {
    int64_t off[APX_BCAST_MAX_IN];
    apx_bcast_offsets(&b, i, off);
    auto idx = Unflatten(i, out);
    for (size_t k = 0; k < ins.size(); k++)
      ASSERT_EQ(off[k], NaiveBcastOffset(ins[k], out, idx)) << "element " << i << " input " << k;
  }
}

TEST(Shape, BroadcastOffsetsMatchNumpyRules) {
  ExpectBcastMatchesNaive(T({2, 3, 4}), {T({2, 3, 4}), T({4})});
  ExpectBcastMatchesNaive(T({2, 3, 4}), {T({3, 1}), T({2, 1, 4})});
  ExpectBcastMatchesNaive(T({5, 1, 7}), {T({1}), T({5, 1, 7}), T({7})});
  ExpectBcastMatchesNaive(T({2, 1, 3, 1, 4}), {T({2, 1, 3, 1, 4}), T({3, 1, 1})});
  ExpectBcastMatchesNaive(T({1}), {T({}), T({1})});
  ExpectBcastMatchesNaive(T({}), {T({}), T({})});
}

TEST(Shape, BroadcastCollapsesContiguousDims) {
  ApxTensor out = T({2, 3, 4}), a = T({2, 3, 4}), b = T({2, 3, 4});
  const ApxTensor *p[2] = {&a, &b};
  ApxBcast bc;
  ASSERT_EQ(apx_bcast_init_t(&bc, &out, p, 2, nullptr), 0);
  EXPECT_EQ(bc.rank, 1);
  EXPECT_TRUE(apx_bcast_is_contig(&bc, 0));
  EXPECT_TRUE(apx_bcast_is_contig(&bc, 1));
  ApxTensor row = T({4});
  const ApxTensor *q[2] = {&a, &row};
  ASSERT_EQ(apx_bcast_init_t(&bc, &out, q, 2, nullptr), 0);
  EXPECT_EQ(bc.rank, 2);
  EXPECT_FALSE(apx_bcast_is_contig(&bc, 1));
}

TEST(Shape, BroadcastRejectsIncompatibleShapes) {
  ApxTensor out = T({2, 3}), a = T({2, 3}), b = T({2});
  const ApxTensor *p[2] = {&a, &b};
  ApxBcast bc;
  int bad = -1;
  EXPECT_EQ(apx_bcast_init_t(&bc, &out, p, 2, &bad), -1);
  EXPECT_EQ(bad, 1);
}

// Every (output, reduced index) pair of a plan reads exactly the elements a naive reduction
// over the masked axes reads, and each input element is read once.
void ExpectReducePlanCovers(std::vector<int64_t> dims, uint32_t mask) {
  ApxTensor x = T(dims);
  ApxReducePlan p;
  apx_reduce_plan(&p, x.dims, x.rank, mask);
  int64_t n = apx_tensor_numel(&x);
  // naive: output index of each element = row-major index over the kept axes
  std::map<int64_t, std::multiset<int64_t>> want;
  for (int64_t i = 0; i < n; i++) {
    auto idx = Unflatten(i, x);
    int64_t o = 0;
    for (int d = 0; d < x.rank; d++)
      if (!(mask >> d & 1u)) o = o * x.dims[d] + idx[d];
    want[o].insert(i);
  }
  ASSERT_EQ(p.ny * p.nred, n);
  for (int64_t o = 0; o < p.ny; o++) {
    std::multiset<int64_t> got;
    int64_t base = apx_group_offset(o, p.kd, p.ks, p.nk);
    for (int64_t r = 0; r < p.nred; r++) got.insert(base + apx_group_offset(r, p.rd, p.rs, p.nr));
    EXPECT_EQ(got, want[o]) << "output " << o;
  }
}

TEST(Shape, ReducePlanReadsEachElementOnceForItsOutput) {
  ExpectReducePlanCovers({2, 3, 4}, 0x1);
  ExpectReducePlanCovers({2, 3, 4}, 0x2);
  ExpectReducePlanCovers({2, 3, 4}, 0x4);
  ExpectReducePlanCovers({2, 3, 4}, 0x5);
  ExpectReducePlanCovers({2, 3, 4}, 0x7);
  ExpectReducePlanCovers({2, 1, 3, 1, 5}, 0x14);
  ExpectReducePlanCovers({4, 3, 2, 2}, 0xd);  // conv bias gradient: axes 0, 2, 3
  ExpectReducePlanCovers({6}, 0x0);
}

TEST(Shape, ReducePlanLayoutFollowsTheInnermostGroup) {
  ApxReducePlan p;
  int64_t d[2] = {8, 16};
  apx_reduce_plan(&p, d, 2, 0x2);
  EXPECT_TRUE(p.inner_reduced);  // rows: sum along the contiguous axis
  apx_reduce_plan(&p, d, 2, 0x1);
  EXPECT_FALSE(p.inner_reduced);  // columns: outputs contiguous
  int64_t e[2] = {8, 0};
  apx_reduce_plan(&p, e, 2, 0x2);
  EXPECT_TRUE(p.empty);
  EXPECT_EQ(p.ny, 8);
}

TEST(Shape, SumToMaskMatchesBroadcastAxes) {
  ApxTensor from = T({2, 3, 4}), to = T({3, 1}), bad = T({2});
  EXPECT_EQ(apx_sum_to_mask(&from, &to), 0x1 | 0x4);
  EXPECT_EQ(apx_sum_to_mask(&from, &bad), -1);
  ApxTensor same = T({2, 3, 4});
  EXPECT_EQ(apx_sum_to_mask(&from, &same), 0);
}

TEST(Shape, ReduceMaskFromAttributes) {
  ApxAttrReduce a;
  memset(&a, 0, sizeof a);
  uint32_t m = 0;
  char err[128];
  ASSERT_EQ(apx_reduce_mask(&a, 3, &m, err, sizeof err), 0);
  EXPECT_EQ(m, 0x7u);
  a.noop_with_empty_axes = 1;
  ASSERT_EQ(apx_reduce_mask(&a, 3, &m, err, sizeof err), 0);
  EXPECT_EQ(m, 0u);
  a.n_axes = 1;
  a.axes[0] = 3;
  EXPECT_EQ(apx_reduce_mask(&a, 3, &m, err, sizeof err), -1);
  EXPECT_NE(std::string(err).find("out of range"), std::string::npos);
}

TEST(Shape, MatMulRejectsMismatchedInnerDims) {
  ApxTensor A = T({4, 5}), B = T({6, 7}), Y = T({4, 7});
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  char err[256] = "";
  EXPECT_EQ(apx_matmul_plan(&p, &A, &B, &Y, err, sizeof err), -1);
  EXPECT_NE(std::string(err).find("inner dims differ"), std::string::npos);
}

TEST(Shape, SliceViewGivesBaseAndStrides) {
  ApxAttrSlice a;
  memset(&a, 0, sizeof a);
  a.rank = 2;
  a.starts[0] = 1;
  a.steps[0] = 2;
  a.starts[1] = 4;
  a.steps[1] = -1;
  ApxTensor full = T({5, 6}), part = T({2, 3});
  int64_t base = 0, st[APX_MAX_RANK];
  char err[256];
  ASSERT_EQ(apx_slice_view(&a, &full, &part, &base, st, err, sizeof err), 0) << err;
  EXPECT_EQ(base, 1 * 6 + 4);
  EXPECT_EQ(st[0], 12);
  EXPECT_EQ(st[1], -1);
  a.starts[0] = 4;  // 4 + 1 * 2 = 6 is outside [0, 5)
  EXPECT_EQ(apx_slice_view(&a, &full, &part, &base, st, err, sizeof err), -1);
}

TEST(Shape, TransposeSourceStrides) {
  ApxAttrTranspose a;
  memset(&a, 0, sizeof a);
  a.rank = 3;
  a.perm[0] = 2;
  a.perm[1] = 0;
  a.perm[2] = 1;
  ApxTensor x = T({2, 3, 4}), y = T({4, 2, 3});
  int64_t st[APX_MAX_RANK];
  char err[128];
  ASSERT_EQ(apx_transpose_plan(&a, &x, &y, st, err, sizeof err), 0);
  EXPECT_EQ(st[0], 1);
  EXPECT_EQ(st[1], 12);
  EXPECT_EQ(st[2], 4);
  a.perm[2] = 0;  // repeated axis
  EXPECT_EQ(apx_transpose_plan(&a, &x, &y, st, err, sizeof err), -1);
}

TEST(Shape, ConvAndPoolGeometry) {
  ApxAttrConv c;
  memset(&c, 0, sizeof c);
  c.pads[1] = c.pads[2] = c.pads[4] = c.pads[5] = 1;
  c.strides[1] = c.strides[2] = 2;
  ApxTensor x = T({2, 4, 9, 9}), w = T({8, 2, 3, 3}), y = T({2, 8, 5, 5});
  c.group = 2;
  ApxConvGeom g;
  char err[256];
  ASSERT_EQ(apx_conv_geom(&c, &x, &w, &y, &g, err, sizeof err), 0) << err;
  EXPECT_EQ(g.G, 2);
  ApxTensor ybad = T({2, 8, 4, 5});
  EXPECT_EQ(apx_conv_geom(&c, &x, &w, &ybad, &g, err, sizeof err), -1);

  ApxAttrPool p;
  memset(&p, 0, sizeof p);
  p.kernel[0] = 1;
  p.kernel[1] = p.kernel[2] = 3;
  p.strides[1] = p.strides[2] = 2;
  p.ceil_mode = 1;
  ApxTensor px = T({1, 1, 6, 6}), py = T({1, 1, 3, 3});
  ApxPoolGeom pg;
  ASSERT_EQ(apx_pool_geom(&p, &px, &py, &pg, err, sizeof err), 0) << err;
  p.ceil_mode = 0;
  ApxTensor pyf = T({1, 1, 2, 2});
  EXPECT_EQ(apx_pool_geom(&p, &px, &pyf, &pg, err, sizeof err), 0) << err;
}

// One window rule for inference and kernels: floor, ceil without a window that starts in the
// end padding (PyTorch), ceil with every window; -1 when the kernel does not fit.
TEST(Shape, WindowOutputSizeModes) {
  EXPECT_EQ(apx_window_out(6, 3, 2, 1, 0, 0, APX_WINDOW_FLOOR), 2);
  EXPECT_EQ(apx_window_out(6, 3, 2, 1, 0, 0, APX_WINDOW_CEIL), 3);
  EXPECT_EQ(apx_window_out(9, 3, 2, 1, 1, 1, APX_WINDOW_FLOOR), 5);
  EXPECT_EQ(apx_window_out(9, 3, 3, 2, 0, 0, APX_WINDOW_FLOOR), 2);  // dilated extent 5
  // in 4, k 2, s 2, end pad 1: the last ceil window would start in the end padding
  EXPECT_EQ(apx_window_out(4, 2, 2, 1, 0, 1, APX_WINDOW_CEIL_ALL), 3);
  EXPECT_EQ(apx_window_out(4, 2, 2, 1, 0, 1, APX_WINDOW_CEIL), 2);
  EXPECT_EQ(apx_window_out(4, 2, 2, 1, 0, 1, APX_WINDOW_FLOOR), 2);
  EXPECT_EQ(apx_window_out(2, 5, 1, 1, 1, 1, APX_WINDOW_FLOOR), -1);
  EXPECT_EQ(apx_window_out(4, 2, 0, 1, 0, 0, APX_WINDOW_FLOOR), -1);  // stride 0
  // fuzz_plan finding: crafted dilations / pads overflowed int64 (UB); now refused
  EXPECT_EQ(apx_window_out(8, 3, 1, INT64_MAX / 2 + 1, 0, 0, APX_WINDOW_FLOOR), -1);
  EXPECT_EQ(apx_window_out(8, 3, 1, 1, INT64_MAX, 1, APX_WINDOW_CEIL), -1);
  EXPECT_EQ(apx_window_out(0, 1, 1, 1, 0, 1, APX_WINDOW_CEIL), 0);  // as before: starts in the pad
}

TEST(Shape, WindowAttributesBeyondIntAreRefused) {
  ApxAttrConv c;
  memset(&c, 0, sizeof c);
  c.dilations[1] = (int64_t)1 << 40;
  ApxTensor x = T({1, 1, 8, 8}), w = T({1, 1, 3, 3}), y = T({1, 1, 6, 6});
  ApxConvGeom g;
  char err[256];
  EXPECT_EQ(apx_conv_geom(&c, &x, &w, &y, &g, err, sizeof err), APX_SHAPE_UNSUPPORTED);
  EXPECT_STREQ(err, "not supported yet: convolution attributes beyond 2^31");
  ApxAttrPool p;
  memset(&p, 0, sizeof p);
  p.kernel[0] = 1;
  p.kernel[1] = p.kernel[2] = 2;
  p.pads[4] = INT64_MAX;
  ApxPoolGeom pg;
  EXPECT_EQ(apx_pool_geom(&p, &x, &y, &pg, err, sizeof err), APX_SHAPE_UNSUPPORTED);
}

TEST(Shape, BroadcastRuleForShapes) {
  const int64_t a[3] = {2, 1, 4}, b[2] = {3, 1}, c[1] = {5};
  int64_t out[APX_MAX_RANK];
  int32_t r = 0;
  ASSERT_EQ(apx_broadcast_shape(3, a, 2, b, &r, out), 0);
  EXPECT_EQ(std::vector<int64_t>(out, out + r), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(apx_broadcast_shape(3, a, 1, c, &r, out), 1);  // last dims 4 and 5
  const int64_t big[3] = {2, 3, 4};
  EXPECT_TRUE(apx_broadcasts_to(2, b, 3, big));   // [3,1] -> [2,3,4]
  EXPECT_TRUE(apx_broadcasts_to(3, a, 3, big));   // [2,1,4] -> [2,3,4]
  EXPECT_FALSE(apx_broadcasts_to(3, big, 2, b));  // more dims than the target
  EXPECT_FALSE(apx_broadcasts_to(1, c, 3, big));
}

}  // namespace
