// sampler_test.cc - batch composition (sampler.h): file order and wrapping, shuffled epochs
// are permutations drawn deterministically from (seed, epoch), and K ranks with batch B see
// exactly what one process with batch K*B sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "runtime/sampler.h"
}

namespace {

std::vector<int64_t> batch(ApxSampler *s, int64_t k) {
  std::vector<int64_t> out((size_t)s->cfg.batch);
  ApxDiag d;
  apx_diag_init(&d);
  EXPECT_EQ(apx_sampler_batch(s, k, out.data(), &d), 0);
  return out;
}

ApxSampler make(int64_t n, int64_t b, ApxSampleOrder order, uint64_t seed, int rank = 0, int world = 1) {
  ApxSamplerConfig c = {n, b, rank, world, seed, order};
  ApxSampler s;
  ApxDiag d;
  apx_diag_init(&d);
  EXPECT_EQ(apx_sampler_init(&s, &c, &d), 0) << d.msg;
  return s;
}

}  // namespace

TEST(Sampler, FileOrderIsConsecutiveAndWraps) {
  ApxSampler s = make(10, 4, APX_ORDER_FILE, 0);
  EXPECT_EQ(batch(&s, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batch(&s, 1), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(batch(&s, 2), (std::vector<int64_t>{8, 9, 0, 1}));  // wraps into epoch 1
  EXPECT_EQ(batch(&s, 3), (std::vector<int64_t>{2, 3, 4, 5}));
  for (int64_t k = 0; k < 50; k++) {
    std::vector<int64_t> b = batch(&s, k);
    for (int64_t j = 0; j < 4; j++) EXPECT_EQ(b[(size_t)j], (k * 4 + j) % 10);
  }
  int64_t e, p;
  apx_sampler_position(&s, 3, &e, &p);
  EXPECT_EQ(e, 1);
  EXPECT_EQ(p, 2);
  apx_sampler_free(&s);
}

TEST(Sampler, BatchLargerThanTheDataRepeatsSamples) {
  ApxSampler s = make(3, 7, APX_ORDER_FILE, 0);
  EXPECT_EQ(batch(&s, 0), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(batch(&s, 1), (std::vector<int64_t>{1, 2, 0, 1, 2, 0, 1}));
  apx_sampler_free(&s);
}

TEST(Sampler, ShuffledEpochsArePermutationsAndDeterministic) {
  const int64_t n = 97, b = 8;
  ApxSampler s = make(n, b, APX_ORDER_SHUFFLE, 1234);
  ApxSampler again = make(n, b, APX_ORDER_SHUFFLE, 1234);
  ApxSampler other = make(n, b, APX_ORDER_SHUFFLE, 1235);
  std::vector<int64_t> stream, stream2, stream3;
  for (int64_t k = 0; k < 3 * n; k++) {  // 24 epochs' worth, crossing boundaries mid-batch
    std::vector<int64_t> x = batch(&s, k), y = batch(&again, k), z = batch(&other, k);
    stream.insert(stream.end(), x.begin(), x.end());
    stream2.insert(stream2.end(), y.begin(), y.end());
    stream3.insert(stream3.end(), z.begin(), z.end());
  }
  EXPECT_EQ(stream, stream2);
  EXPECT_NE(stream, stream3);
  std::vector<int64_t> ident(n);
  for (int64_t i = 0; i < n; i++) ident[(size_t)i] = i;
  std::vector<int64_t> prev;
  for (int64_t e = 0; e < 24; e++) {
    std::vector<int64_t> ep(stream.begin() + e * n, stream.begin() + (e + 1) * n);
    std::vector<int64_t> sorted = ep;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, ident) << "epoch " << e << " is a permutation";
    EXPECT_NE(ep, ident) << "epoch " << e << " is shuffled";
    EXPECT_NE(ep, prev) << "epoch " << e << " differs from the previous one";
    std::vector<int64_t> p(n);
    apx_sampler_permutation(1234, e, n, p.data());
    EXPECT_EQ(ep, p);
    prev = ep;
  }
  // random access (a resumed run) gives the same batches as the sequential walk
  ApxSampler late = make(n, b, APX_ORDER_SHUFFLE, 1234);
  for (int64_t k : {200, 13, 150, 0, 290})
    EXPECT_EQ(batch(&late, k), std::vector<int64_t>(stream.begin() + k * b, stream.begin() + (k + 1) * b));
  apx_sampler_free(&s);
  apx_sampler_free(&again);
  apx_sampler_free(&other);
  apx_sampler_free(&late);
}

TEST(Sampler, RanksSplitTheGlobalBatchOfOneLargerProcess) {
  for (ApxSampleOrder order : {APX_ORDER_FILE, APX_ORDER_SHUFFLE}) {
    const int K = 3;
    const int64_t n = 50, b = 4;
    ApxSampler one = make(n, K * b, order, 77);
    std::vector<ApxSampler> ranks;
    for (int r = 0; r < K; r++) ranks.push_back(make(n, b, order, 77, r, K));
    for (int64_t k = 0; k < 40; k++) {
      std::vector<int64_t> all = batch(&one, k), joined;
      for (int r = 0; r < K; r++) {
        std::vector<int64_t> part = batch(&ranks[(size_t)r], k);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, all) << "global batch " << k;
    }
    apx_sampler_free(&one);
    for (auto &r : ranks) apx_sampler_free(&r);
  }
}

TEST(Sampler, BadConfigurationIsAnError) {
  ApxSamplerConfig bad[] = {{0, 4, 0, 1, 0, APX_ORDER_FILE},
                            {10, 0, 0, 1, 0, APX_ORDER_FILE},
                            {10, 4, 1, 1, 0, APX_ORDER_FILE},
                            {10, 4, 0, 0, 0, APX_ORDER_FILE}};
  for (auto &c : bad) {
    ApxSampler s;
    ApxDiag d;
    apx_diag_init(&d);
    EXPECT_EQ(apx_sampler_init(&s, &c, &d), -1);
    EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
    apx_sampler_free(&s);
  }
}
