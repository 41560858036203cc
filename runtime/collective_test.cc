// collective_test.cc - the collective layer (runtime/collective.h) across processes: each
// case runs runtime/collective_worker under `mpirun -np 2` or `-np 4` (oversubscribed on
// CI's 2 cores) and checks every rank reported "ok"; the fault cases check that a hung rank
// (SIGSTOP) and a dead rank (SIGKILL) end the whole job with a clear error within a bounded
// time instead of hanging. Also the single-process fallback, in this process.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "runtime/collective.h"
}
#include "runtime/mpi_testing.h"
#include "runtime/backend_registry.h"

namespace {

using apx_testing::CountOccurrences;
using apx_testing::Mpirun;

const char *kWorker = "runtime/collective_worker";

void ExpectAllOk(int np, const std::string &scenario) {
  auto r = Mpirun(np, std::string(kWorker) + " " + scenario + " 60");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "ok " + scenario), np) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "FAIL"), 0) << r.out;
}

TEST(Collective, AllreduceEveryDtypeAndLayoutTwoRanks) { ExpectAllOk(2, "dtypes"); }
TEST(Collective, AllreduceEveryDtypeAndLayoutFourRanks) { ExpectAllOk(4, "dtypes"); }
TEST(Collective, BucketSlotsAverageAndPredivideTwoRanks) { ExpectAllOk(2, "buckets"); }
TEST(Collective, BucketSlotsAverageAndPredivideFourRanks) { ExpectAllOk(4, "buckets"); }
TEST(Collective, BroadcastAllgatherBarrierFourRanks) { ExpectAllOk(4, "bcast"); }
TEST(Collective, NonBlockingBucketsTwoRanks) { ExpectAllOk(2, "ibuckets"); }
TEST(Collective, NonBlockingBucketsFourRanks) { ExpectAllOk(4, "ibuckets"); }

// A rank that stops (SIGSTOP) blocks the others in the next barrier; their watchdog ends the
// job after the 3 s deadline with one line naming the operation.
TEST(Collective, HungRankEndsTheJobWithinTheTimeout) {
  auto r = Mpirun(2, std::string(kWorker) + " hang 3");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("collective 'barrier after the fault' did not complete within 3.0 s"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("a peer rank is dead or hung"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 3.0 + 30.0) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "FAIL"), 0) << r.out;
  std::printf("hung rank: job ended after %.1f s (deadline 3 s), exit code %d\n", r.seconds, r.code);
}

// The same for a non-blocking bucket: the wait runs under the deadline.
TEST(Collective, HungRankEndsTheJobDuringABucketWait) {
  auto r = Mpirun(2, std::string(kWorker) + " ihang 3");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("collective 'allreduce bucket 3' did not complete within 3.0 s"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("a peer rank is dead or hung"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 3.0 + 30.0) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "FAIL"), 0) << r.out;
  std::printf("hung rank during a bucket wait: job ended after %.1f s (deadline 3 s), exit code %d\n", r.seconds,
              r.code);
}

// A rank that dies (SIGKILL) is noticed by mpirun, which ends the job.
TEST(Collective, DeadRankEndsTheJob) {
  auto r = Mpirun(4, std::string(kWorker) + " die 30");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("signal 9"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 30.0) << r.out;
  EXPECT_EQ(CountOccurrences(r.out, "FAIL"), 0) << r.out;
  std::printf("dead rank: job ended after %.1f s, exit code %d\n", r.seconds, r.code);
}

// Outside mpirun the layer is one process: sums are the identity (up to the bucket's
// scale factors, which cancel), gathers copy, nothing touches MPI.
TEST(Collective, OneProcessWithoutMpirun) {
  ApxCollConfig cfg;
  apx_coll_config_init(&cfg);
  cfg.mode = APX_COLL_SINGLE;
  ApxDiag d;
  apx_diag_init(&d);
  ApxColl *c = nullptr;
  ASSERT_EQ(apx_coll_init(&c, &cfg, &d), 0) << d.msg;
  EXPECT_EQ(apx_coll_rank(c), 0);
  EXPECT_EQ(apx_coll_world(c), 1);
  EXPECT_FALSE(apx_coll_uses_mpi(c));
  float x[3] = {1.5f, -2.0f, 3.25f};
  ApxTensor t{};
  t.data = x, t.dtype = APX_DT_F32, t.rank = 1, t.dims[0] = 3;
  ApxAttrAllreduce a{};
  a.predivide = 4.0f, a.average = 1;
  float pre, post;
  apx_coll_bucket_scales(&a, 1, &pre, &post);
  EXPECT_FLOAT_EQ(pre, 0.25f);
  EXPECT_FLOAT_EQ(post, 4.0f);
  apx_coll_bucket_scales(&a, 8, &pre, &post);
  EXPECT_FLOAT_EQ(post, 0.5f);  // predivide / world
  ASSERT_EQ(apx_coll_allreduce(c, &t, 1, APX_REDUCE_SUM, 0.25f, 4.0f, "bucket", &d), 0) << d.msg;
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(x[2], 3.25f);
  // non-blocking: staged at the start (the input may change), written at the wait
  float in[3] = {1.5f, -2.0f, 3.25f}, out[3] = {0, 0, 0};
  ApxTensor ti = t, to = t;
  ti.data = in, to.data = out;
  ApxCollRequest *req = nullptr;
  ASSERT_EQ(apx_coll_iallreduce(c, &ti, &to, 1, APX_REDUCE_SUM, 0.25f, 4.0f, "bucket", &req, &d), 0) << d.msg;
  EXPECT_EQ(apx_coll_pending(c), 1);
  in[0] = 100.0f;
  EXPECT_EQ(out[0], 0.0f);
  int done = 0;
  ASSERT_EQ(apx_coll_test(c, req, &done, &d), 0) << d.msg;
  EXPECT_EQ(done, 1);
  ASSERT_EQ(apx_coll_wait(c, req, &d), 0) << d.msg;
  EXPECT_EQ(apx_coll_pending(c), 0);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.25f);
  int64_t mine = 42, all = 0;
  ASSERT_EQ(apx_coll_allgather(c, &mine, sizeof mine, &all, "gather", &d), 0) << d.msg;
  EXPECT_EQ(all, 42);
  EXPECT_EQ(apx_coll_barrier(c, "barrier", &d), 0);
  // one process: nothing to reduce, so attach installs nothing, on any backend (cuda
  // included: `apexrun --device cuda` in one process must not be refused here)
  ApxBackend *be = nullptr;
  char err[256];
  ASSERT_EQ(apx_backend_create("cpu", nullptr, &be, err, sizeof err), APX_STATUS_OK) << err;
  ASSERT_EQ(apx_coll_attach(c, be, &d), 0) << d.msg;
  EXPECT_EQ(be->iface.allreduce_bucket, nullptr);
  EXPECT_EQ(be->world, 1);
  const char *saved = be->iface.name;
  be->iface.name = "cuda";
  EXPECT_EQ(apx_coll_attach(c, be, &d), 0) << d.msg;
  EXPECT_EQ(be->iface.allreduce_bucket, nullptr);
  be->iface.name = saved;
  apx_backend_free(be);
  apx_coll_finalize(c);
}

}  // namespace
