// shape_test.cc - the planning only the CUDA kernels need (shape.h: strided-batched GEMM
// calls, multi-tensor launches, index types), checked on CPU against naive definitions. The
// shared planning (kernels/shape.h) has its own test, kernels/shape_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

extern "C" {
#include "kernels/cuda/shape.h"
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

// Naive batched product offsets: for each broadcast batch index, the offsets of A, B and Y.
struct Product {
  int64_t a, b, y;
  bool operator<(const Product &o) const { return std::tie(a, b, y) < std::tie(o.a, o.b, o.y); }
  bool operator==(const Product &o) const { return a == o.a && b == o.b && y == o.y; }
};

std::multiset<Product> NaiveProducts(const ApxMatMulPlan &p) {
  std::multiset<Product> s;
  for (int64_t b = 0; b < p.bc.numel; b++) {
    int64_t off[3];
    apx_bcast_offsets(&p.bc, b, off);
    s.insert({off[0] * p.M * p.K, off[1] * p.K * p.N, off[2] * p.M * p.N});
  }
  return s;
}

std::multiset<Product> PlannedProducts(const ApxMatMulPlan &p) {
  std::multiset<Product> s;
  int32_t folded = 0;
  int64_t n = apx_cu_matmul_n_calls(&p, &folded);
  for (int64_t c = 0; c < n; c++) {
    ApxCuGemmCall g;
    apx_cu_matmul_call(&p, c, folded, &g);
    if (folded) {  // one tall product: each M-row block is one batch, B shared
      EXPECT_EQ(g.M % p.M, 0);
      for (int64_t k = 0; k < g.M / p.M; k++) s.insert({k * p.M * p.K, 0, k * p.M * p.N});
      continue;
    }
    EXPECT_EQ(g.M, p.M);
    for (int64_t k = 0; k < g.batch; k++)
      s.insert({g.a_off + k * g.a_stride, g.b_off + k * g.b_stride, g.y_off + k * g.y_stride});
  }
  return s;
}

void ExpectMatMulCallsCoverBatches(std::vector<int64_t> a, std::vector<int64_t> b,
                                   std::vector<int64_t> y, int ta = 0, int tb = 0) {
  ApxTensor A = T(a), B = T(b), Y = T(y);
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  p.ta = ta;
  p.tb = tb;
  char err[256] = "";
  ASSERT_EQ(apx_matmul_plan(&p, &A, &B, &Y, err, sizeof err), 0) << err;
  ASSERT_FALSE(p.reduce);
  EXPECT_EQ(PlannedProducts(p), NaiveProducts(p));
}

TEST(CudaShape, MatMulCallsCoverEveryBatchOnce) {
  ExpectMatMulCallsCoverBatches({4, 5}, {5, 6}, {4, 6});
  ExpectMatMulCallsCoverBatches({3, 4, 5}, {5, 6}, {3, 4, 6});          // folds
  ExpectMatMulCallsCoverBatches({3, 4, 5}, {3, 5, 6}, {3, 4, 6});       // strided batch
  ExpectMatMulCallsCoverBatches({2, 1, 4, 5}, {1, 3, 5, 6}, {2, 3, 4, 6});  // 2-D broadcast
  ExpectMatMulCallsCoverBatches({4, 5}, {3, 5, 6}, {3, 4, 6});          // A shared
  ExpectMatMulCallsCoverBatches({2, 3, 5, 4}, {2, 3, 6, 5}, {2, 3, 4, 6}, 1, 1);
  ExpectMatMulCallsCoverBatches({5}, {3, 5, 6}, {3, 6});                // 1-D left operand
  ExpectMatMulCallsCoverBatches({3, 4, 5}, {5}, {3, 4});                // 1-D right operand
}

TEST(CudaShape, MatMulFoldsASharedRightOperand) {
  ApxTensor A = T({8, 16, 32}), B = T({32, 64}), Y = T({8, 16, 64});
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  char err[256];
  ASSERT_EQ(apx_matmul_plan(&p, &A, &B, &Y, err, sizeof err), 0);
  int32_t folded = 0;
  EXPECT_EQ(apx_cu_matmul_n_calls(&p, &folded), 1);
  EXPECT_TRUE(folded);
  ApxCuGemmCall g;
  apx_cu_matmul_call(&p, 0, folded, &g);
  EXPECT_EQ(g.M, 8 * 16);
}

TEST(CudaShape, WeightGradientStacksBatchesAlongK) {
  // dW = sum_b X_b^T dY_b: X (B, T, C), dY (B, T, D) -> (C, D)
  ApxTensor X = T({4, 16, 32}), G = T({4, 16, 8}), W = T({32, 8});
  ApxMatMulPlan p;
  memset(&p, 0, sizeof p);
  p.ta = 1;
  char err[256];
  ASSERT_EQ(apx_matmul_plan(&p, &X, &G, &W, err, sizeof err), 0) << err;
  EXPECT_TRUE(p.reduce);
  ApxCuGemmCall g;
  ASSERT_TRUE(apx_cu_matmul_stacked(&p, &g));
  EXPECT_EQ(g.M, 32);
  EXPECT_EQ(g.K, 4 * 16);
  // not stackable: no transpose of A
  p.ta = 0;
  ApxTensor A2 = T({4, 32, 16}), W2 = T({32, 8});
  ASSERT_EQ(apx_matmul_plan(&p, &A2, &G, &W2, err, sizeof err), 0) << err;
  EXPECT_TRUE(p.reduce);
  EXPECT_FALSE(apx_cu_matmul_stacked(&p, &g));
}

TEST(CudaShape, MultiTensorLaunchesCoverEveryChunkOnceInOrder) {
  std::vector<int64_t> sizes = {10, 0, 300, 5, 1000, 1, 0, 64};
  const int64_t chunk = 64;
  for (int32_t max_t : {1, 2, 3, 36})
    for (int64_t max_c : {1, 4, 7, 1000}) {
      std::vector<ApxCuMtLaunch> l(1000);
      int64_t nl = apx_cu_mt_plan(sizes.data(), (int32_t)sizes.size(), chunk, max_t, max_c, l.data(),
                                  (int64_t)l.size());
      ASSERT_LE(nl, (int64_t)l.size());
      int64_t next = 0;
      std::vector<int64_t> cstart;
      int64_t c = 0;
      for (int64_t s : sizes) {
        cstart.push_back(c);
        c += (s + chunk - 1) / chunk;
      }
      ASSERT_EQ(apx_cu_mt_total_chunks(sizes.data(), (int32_t)sizes.size(), chunk), c);
      for (int64_t i = 0; i < nl; i++) {
        EXPECT_EQ(l[i].chunk0, next) << "launches are contiguous in chunk order";
        EXPECT_LE(l[i].count, max_t);
        EXPECT_LE(l[i].n_chunks, max_c);
        // every chunk of the launch belongs to one of its tensors
        for (int64_t g = l[i].chunk0; g < l[i].chunk0 + l[i].n_chunks; g++) {
          int owner = -1;
          for (int t = 0; t < (int)sizes.size(); t++)
            if (cstart[t] <= g && g < cstart[t] + (sizes[t] + chunk - 1) / chunk) owner = t;
          EXPECT_GE(owner, l[i].first);
          EXPECT_LT(owner, l[i].first + l[i].count);
        }
        next += l[i].n_chunks;
      }
      EXPECT_EQ(next, c) << "max_t " << max_t << " max_c " << max_c;
    }
}

TEST(CudaShape, GatherShapeAcceptsIntIndicesOnly) {
  ApxTensor data = T({10, 4}), idx = T({2, 3}, APX_DT_I64), out = T({2, 3, 4});
  int64_t outer, A, inner;
  char err[256];
  ASSERT_EQ(apx_cu_gather_shape(0, &data, &idx, &out, &outer, &A, &inner, err, sizeof err), 0);
  EXPECT_EQ(outer, 1);
  EXPECT_EQ(A, 10);
  EXPECT_EQ(inner, 4);
  ApxTensor fidx = T({2, 3}, APX_DT_F32);
  EXPECT_EQ(apx_cu_gather_shape(0, &data, &fidx, &out, &outer, &A, &inner, err, sizeof err), -1);
}

}  // namespace
