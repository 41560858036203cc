// matmul_test.cc - Gemm, MatMul (1-D operands, batched, broadcast) and FusedMatMul
// (transposes, alpha, batch reduction) against naive double products in every float dtype;
// fp32 accumulation for half tensors; thread-count independence.
#include <cmath>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

namespace {

// Naive reference of alpha * op(A) @ op(B) for 2-D matrices stored row-major; also
// returns sum |a||b| per element (the error scale of a K-term dot product).
void ref_gemm(const std::vector<double> &A, const std::vector<double> &B, int64_t M, int64_t N,
              int64_t K, bool ta, bool tb, double alpha, double *Y, double *S) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; k++) {
        double a = ta ? A[k * M + i] : A[i * K + k], b = tb ? B[j * K + k] : B[k * N + j];
        s += a * b;
        sa += std::fabs(a * b);
      }
      Y[i * N + j] += alpha * s;
      S[i * N + j] += std::fabs(alpha) * sa;
    }
}

}  // namespace

TEST(Gemm, TransposesBiasShapesEveryFloatType) {
  const int64_t M = 5, N = 7, K = 9;
  const std::vector<std::vector<int64_t>> cshapes = {{}, {N}, {M, 1}, {M, N}, {1, N}};
  for (ApxDType dt : kFloatTypes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int ci = -1; ci < (int)cshapes.size(); ci++) {
          ApxAttrGemm g = {0.5f, ci < 0 ? 0.0f : 2.0f, ta, tb};
          Tensor A = rand(dt, ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}, -1, 1, 1);
          Tensor B = rand(dt, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, -1, 1, 2);
          Tensor C = ci < 0 ? Tensor() : rand(dt, cshapes[ci], -1, 1, 3);
          Tensor Y(dt, {M, N});
          run_ok(APX_OP_Gemm, &g, {&A, &B, ci < 0 ? nullptr : &C}, {&Y});
          std::vector<double> ref(M * N, 0.0), sc(M * N, 0.0);
          if (ci >= 0)
            for (int64_t i = 0; i < M * N; i++) {
              ref[i] = 2.0 * C.get(broadcast_index({M, N}, C.dims, i));
              sc[i] = std::fabs(ref[i]);
            }
          ref_gemm(A.values(), B.values(), M, N, K, ta, tb, 0.5, ref.data(), sc.data());
          expect_close(Y, ref, K + 2, &sc, "Gemm");
        }
}

TEST(Gemm, ShapeMismatchIsRejected) {
  ApxAttrGemm g = {1, 0, 0, 0};
  Tensor A(APX_DT_F32, {2, 3}), B(APX_DT_F32, {4, 5}), Y(APX_DT_F32, {2, 5});
  std::string err;
  EXPECT_EQ(run(APX_OP_Gemm, &g, {&A, &B}, {&Y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("shapes do not match"), std::string::npos) << err;
}

namespace {

struct MMCase {
  std::vector<int64_t> a, b, y;
  int ta, tb;
  float alpha;
};

// Reference for batched (optionally transposed, optionally batch-reduced) products.
void check_matmul(ApxOp op, const MMCase &c, ApxDType dt) {
  Tensor A = rand(dt, c.a, -1, 1, 21), B = rand(dt, c.b, -1, 1, 22), Y(dt, c.y);
  ApxAttrFusedMatMul f = {c.ta, c.tb, c.alpha};
  run_ok(op, op == APX_OP_FusedMatMul ? &f : nullptr, {&A, &B}, {&Y});
  // promote 1-D operands
  std::vector<int64_t> ad = c.a, bd = c.b;
  bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), 1);
  if (b1) bd.push_back(1);
  int64_t M = c.ta ? ad[ad.size() - 1] : ad[ad.size() - 2];
  int64_t K = c.ta ? ad[ad.size() - 2] : ad[ad.size() - 1];
  int64_t N = c.tb ? bd[bd.size() - 2] : bd[bd.size() - 1];
  std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  size_t rf = std::max(ab.size(), bb.size());
  std::vector<int64_t> full(rf);
  for (size_t d = 0; d < rf; d++) {
    int64_t x = d + ab.size() >= rf ? ab[d + ab.size() - rf] : 1;
    int64_t y = d + bb.size() >= rf ? bb[d + bb.size() - rf] : 1;
    full[d] = std::max(x, y);
  }
  int nmy = (!a1) + (!b1);
  std::vector<int64_t> yb(c.y.begin(), c.y.end() - nmy);
  int64_t nb = numel_of(full), ny = numel_of(yb);
  std::vector<double> av = A.values(), bv = B.values();
  std::vector<double> ref((size_t)(ny * M * N), 0.0), sc(ref.size(), 0.0);
  for (int64_t b = 0; b < nb; b++) {
    int64_t ia = broadcast_index(full, ab, b), ib = broadcast_index(full, bb, b);
    int64_t iy = broadcast_index(full, yb, b);
    std::vector<double> am(av.begin() + ia * M * K, av.begin() + (ia + 1) * M * K);
    std::vector<double> bm(bv.begin() + ib * K * N, bv.begin() + (ib + 1) * K * N);
    ref_gemm(am, bm, M, N, K, c.ta, c.tb, c.alpha, ref.data() + iy * M * N, sc.data() + iy * M * N);
  }
  expect_close(Y, ref, (double)K * (nb / ny) + 2, &sc, apx_op_name(op));
}

}  // namespace

TEST(MatMul, NumpySemanticsEveryFloatType) {
  const std::vector<MMCase> cases = {
      {{4, 6}, {6, 5}, {4, 5}, 0, 0, 1},          {{3, 4, 6}, {3, 6, 5}, {3, 4, 5}, 0, 0, 1},
      {{2, 1, 4, 6}, {3, 6, 5}, {2, 3, 4, 5}, 0, 0, 1},
      {{3, 4, 6}, {6, 5}, {3, 4, 5}, 0, 0, 1},    // shared B: one tall product
      {{6}, {6, 5}, {5}, 0, 0, 1},                {{4, 6}, {6}, {4}, 0, 0, 1},
      {{6}, {6}, {}, 0, 0, 1},                    {{2, 3, 6}, {6}, {2, 3}, 0, 0, 1},
      {{6}, {2, 6, 5}, {2, 5}, 0, 0, 1},          {{4, 0}, {0, 5}, {4, 5}, 0, 0, 1},
  };
  for (ApxDType dt : kFloatTypes)
    for (const MMCase &c : cases) check_matmul(APX_OP_MatMul, c, dt);
}

TEST(FusedMatMul, TransposesAlphaAndBatchReduction) {
  const std::vector<MMCase> cases = {
      {{6, 4}, {6, 5}, {4, 5}, 1, 0, 1},          {{4, 6}, {5, 6}, {4, 5}, 0, 1, 0.5f},
      {{3, 6, 4}, {3, 5, 6}, {3, 4, 5}, 1, 1, -2}, {{2, 3, 4, 6}, {6, 5}, {2, 3, 4, 5}, 0, 0, 3},
      // gradient of a shared weight: sum over the batch into (K, N)
      {{3, 4, 6}, {3, 4, 5}, {6, 5}, 1, 0, 1},    {{2, 3, 4, 6}, {2, 3, 4, 5}, {1, 6, 5}, 1, 0, 1},
      {{2, 3, 4, 6}, {2, 3, 4, 5}, {3, 6, 5}, 1, 0, 1},
  };
  for (ApxDType dt : kFloatTypes)
    for (const MMCase &c : cases) check_matmul(APX_OP_FusedMatMul, c, dt);
}

TEST(MatMul, HalfAccumulatesInFp32) {
  // 250*250 + 250*250 - 250*250: an fp16 running sum would overflow (125000 > 65504); the
  // fp32 accumulation gives 62500, rounded once to 62496.
  Tensor A = make(APX_DT_F16, {1, 3}, {250, 250, -250}), B = make(APX_DT_F16, {3, 1}, {250, 250, 250});
  Tensor Y(APX_DT_F16, {1, 1});
  run_ok(APX_OP_MatMul, nullptr, {&A, &B}, {&Y});
  EXPECT_EQ(Y.get(0), 62496.0);
  // and the final rounding overflows to inf like the GPU's
  Tensor B2 = make(APX_DT_F16, {3, 1}, {250, 250, 0});
  run_ok(APX_OP_MatMul, nullptr, {&A, &B2}, {&Y});
  EXPECT_EQ(Y.get(0), INFINITY);
}

TEST(MatMul, RejectsBadShapes) {
  Tensor A(APX_DT_F32, {2, 3}), B(APX_DT_F32, {4, 5}), Y(APX_DT_F32, {2, 5});
  std::string err;
  EXPECT_EQ(run(APX_OP_MatMul, nullptr, {&A, &B}, {&Y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "MatMul: inner dims differ: A [2,3], B [4,5]");
  Tensor A2(APX_DT_F32, {2, 2, 3}), B2(APX_DT_F32, {3, 3, 5}), Y2(APX_DT_F32, {3, 2, 5});
  EXPECT_EQ(run(APX_OP_MatMul, nullptr, {&A2, &B2}, {&Y2}, &err), APX_STATUS_BAD_INPUT) << err;
}

TEST(MatMul, ThreadCountDoesNotChangeBits) {
  for (ApxDType dt : {APX_DT_F32, APX_DT_F64, APX_DT_BF16}) {
    Tensor A = rand(dt, {4, 130, 257}, -1, 1, 1), B = rand(dt, {257, 190}, -1, 1, 2);
    Tensor y1(dt, {4, 130, 190}), y2(dt, {4, 130, 190});
    RunOpts one, two;
    two.threads = 2;
    run_ok(APX_OP_MatMul, nullptr, {&A, &B}, {&y1}, one);
    run_ok(APX_OP_MatMul, nullptr, {&A, &B}, {&y2}, two);
    expect_same_bits(y1, y2, "MatMul 1 vs 2 threads");
  }
}
