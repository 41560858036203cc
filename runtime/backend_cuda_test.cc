// backend_cuda_test.cc - the cuda backend through the vtable (backend.h): buffers, copies
// through the pinned staging ring (sizes across several slots), the async-copy contract,
// events between queues, a kernel launch, and a device-side error naming its node; a plan's
// cuBLASLt product prepared before its launch (no heuristic query at the launch); Dropout
// reading the device-side step, also from a captured CUDA Graph replayed with a later step
// (masks equal to the CPU's philox.h for each step). Needs a GPU (tags requires-gpu,
// no-sandbox); without one only the refusal message is checked.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "kernels/attrs.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/philox.h"
#include "runtime/backend.h"
#include "runtime/backend_registry.h"
#include "runtime/backend_cuda.h"
}

namespace {

bool HaveGpu(std::string *why) {
  char buf[256] = "";
  int n = apx_cuda_device_count(buf, sizeof buf);
  *why = buf;
  return n > 0;
}

TEST(CudaBackend, WithoutADeviceTheRefusalSaysWhy) {
  std::string why;
  if (HaveGpu(&why)) GTEST_SKIP() << "a GPU is present";
  ApxBackend *be = nullptr;
  char err[512] = "";
  EXPECT_EQ(apx_backend_create("cuda", nullptr, &be, err, sizeof err), APX_STATUS_RUNTIME);
  EXPECT_EQ(be, nullptr);
  EXPECT_NE(std::string(err).find("cannot start the cuda backend: no CUDA device found (cudaGetDeviceCount: "),
            std::string::npos)
      << err;
  EXPECT_STREQ(apx_backend_names(), "cpu,cuda");
}

class CudaBackendGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!HaveGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    char err[512] = "";
    ApxBackendConfig cfg = {0, 0, 1234};
    ASSERT_EQ(apx_backend_create("cuda", &cfg, &be_, err, sizeof err), APX_STATUS_OK) << err;
    ASSERT_EQ(be_->iface.queue_create(be_, &q_), APX_STATUS_OK) << be_->err;
  }
  void TearDown() override {
    if (!be_) return;
    for (auto &b : bufs_) be_->iface.buffer_free(be_, &b);
    if (q_) be_->iface.queue_destroy(be_, q_);
    apx_backend_free(be_);
  }
  void *Alloc(size_t n) {
    ApxDevBuffer b;
    EXPECT_EQ(be_->iface.buffer_alloc(be_, n, &b), APX_STATUS_OK) << be_->err;
    bufs_.push_back(b);
    return b.base;
  }
  ApxBackend *be_ = nullptr;
  ApxQueue *q_ = nullptr;
  std::vector<ApxDevBuffer> bufs_;
};

TEST_F(CudaBackendGpu, CopiesRoundTripThroughTheStagingRing) {
  std::mt19937 rng(7);
  for (size_t n : {size_t(1), size_t(4097), size_t(4) << 20, (size_t(37) << 20) + 13}) {
    std::vector<uint8_t> src(n), back(n, 0xab);
    for (auto &v : src) v = (uint8_t)rng();
    void *d1 = Alloc(n), *d2 = Alloc(n);
    ASSERT_EQ(be_->iface.copy_h2d(be_, q_, d1, src.data(), n), APX_STATUS_OK) << be_->err;
    ASSERT_EQ(be_->iface.copy_d2d(be_, q_, d2, d1, n), APX_STATUS_OK) << be_->err;
    ASSERT_EQ(be_->iface.copy_d2h(be_, q_, back.data(), d2, n), APX_STATUS_OK) << be_->err;
    ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
    EXPECT_EQ(0, memcmp(src.data(), back.data(), n)) << n << " bytes";
  }
}

TEST_F(CudaBackendGpu, BuffersAreZeroedAndMemsetWorks) {
  const size_t n = 1 << 16;
  void *d = Alloc(n);
  std::vector<uint8_t> back(n, 1);
  ASSERT_EQ(be_->iface.copy_d2h(be_, q_, back.data(), d, n), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
  EXPECT_EQ(std::vector<uint8_t>(n, 0), back);
  ASSERT_EQ(be_->iface.memset(be_, q_, d, 0x5a, n), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.copy_d2h(be_, q_, back.data(), d, n), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
  EXPECT_EQ(std::vector<uint8_t>(n, 0x5a), back);
}

TEST_F(CudaBackendGpu, HostSourceMayChangeRightAfterAnUpload) {
  std::vector<float> host(1000, 1.0f), back(1000, 0.0f);
  void *d = Alloc(host.size() * sizeof(float));
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, d, host.data(), host.size() * sizeof(float)), APX_STATUS_OK);
  std::fill(host.begin(), host.end(), 2.0f);  // staged already: the device keeps 1.0
  ASSERT_EQ(be_->iface.copy_d2h(be_, q_, back.data(), d, back.size() * sizeof(float)), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
  EXPECT_EQ(std::vector<float>(1000, 1.0f), back);
}

TEST_F(CudaBackendGpu, EventsOrderTwoQueues) {
  ApxQueue *q2 = nullptr;
  ASSERT_EQ(be_->iface.queue_create(be_, &q2), APX_STATUS_OK);
  ApxEvent *ev = nullptr;
  ASSERT_EQ(be_->iface.event_create(be_, &ev), APX_STATUS_OK);
  const size_t n = 64 << 20;
  void *a = Alloc(n), *b = Alloc(n);
  ASSERT_EQ(be_->iface.memset(be_, q_, a, 0x11, n), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.event_record(be_, ev, q_), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.queue_wait(be_, q2, ev), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.copy_d2d(be_, q2, b, a, n), APX_STATUS_OK);
  std::vector<uint8_t> back(16);
  ASSERT_EQ(be_->iface.copy_d2h(be_, q2, back.data(), (char *)b + n - 16, 16), APX_STATUS_OK);
  ApxEvent *done = nullptr;
  ASSERT_EQ(be_->iface.event_create(be_, &done), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.event_record(be_, done, q2), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.event_sync(be_, done), APX_STATUS_OK) << be_->err;
  EXPECT_EQ(std::vector<uint8_t>(16, 0x11), back);
  be_->iface.event_destroy(be_, ev);
  be_->iface.event_destroy(be_, done);
  be_->iface.queue_destroy(be_, q2);
}

ApxTensor View(void *p, ApxDType dt, std::vector<int64_t> dims) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = p;
  t.dtype = dt;
  t.rank = (int32_t)dims.size();
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

TEST_F(CudaBackendGpu, LaunchRunsAKernel) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {10, 20, 30}, y(6);
  void *da = Alloc(24), *db = Alloc(12), *dy = Alloc(24);
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, da, a.data(), 24), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, db, b.data(), 12), APX_STATUS_OK);
  ApxTensor ins[2] = {View(da, APX_DT_F32, {2, 3}), View(db, APX_DT_F32, {3})};
  ApxTensor outs[1] = {View(dy, APX_DT_F32, {2, 3})};
  ApxKernelCall call = {APX_OP_Add, nullptr, ins, 2, outs, 1, 0, "add_1"};
  ASSERT_EQ(be_->iface.launch(be_, q_, &call), APX_STATUS_OK) << be_->err;
  ASSERT_EQ(be_->iface.copy_d2h(be_, q_, y.data(), dy, 24), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
  EXPECT_EQ((std::vector<float>{11, 22, 33, 14, 25, 36}), y);
}

TEST_F(CudaBackendGpu, DeviceSideErrorNamesTheNodeAtTheNextSync) {
  std::vector<int64_t> idx = {3, 12};
  void *data = Alloc(10 * 4 * sizeof(float)), *di = Alloc(16), *dy = Alloc(2 * 4 * sizeof(float));
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, di, idx.data(), 16), APX_STATUS_OK);
  ApxTensor ins[2] = {View(data, APX_DT_F32, {10, 4}), View(di, APX_DT_I64, {2})};
  ApxTensor outs[1] = {View(dy, APX_DT_F32, {2, 4})};
  ApxAttrAxis axis = {0};
  ApxKernelCall call = {APX_OP_Gather, &axis, ins, 2, outs, 1, 0, "embed_tokens"};
  ASSERT_EQ(be_->iface.launch(be_, q_, &call), APX_STATUS_OK) << be_->err;
  EXPECT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(std::string(be_->err),
            "node 'embed_tokens': Gather: index 12 at position 1 outside [-10, 10)");
  // reported once: the record is cleared
  EXPECT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
}

TEST_F(CudaBackendGpu, HostChecksFailAtLaunchWithTheReason) {
  void *d = Alloc(64);
  ApxTensor ins[2] = {View(d, APX_DT_F32, {2, 3}), View(d, APX_DT_F32, {2})};
  ApxTensor outs[1] = {View(d, APX_DT_F32, {2, 3})};
  ApxKernelCall call = {APX_OP_Mul, nullptr, ins, 2, outs, 1, 0, "mul_1"};
  EXPECT_EQ(be_->iface.launch(be_, q_, &call), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(std::string(be_->err), "Mul: input 1 shape [2] does not broadcast to [2,3]");
}

TEST_F(CudaBackendGpu, PreparedProductMakesNoHeuristicQueryAtLaunch) {
  std::vector<float> a(4 * 8), b(8 * 16), y(4 * 16);
  for (size_t i = 0; i < a.size(); i++) a[i] = (float)(i % 7) - 3;
  for (size_t i = 0; i < b.size(); i++) b[i] = (float)(i % 5) - 2;
  void *da = Alloc(a.size() * 4), *db = Alloc(b.size() * 4), *dy = Alloc(y.size() * 4);
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, da, a.data(), a.size() * 4), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, db, b.data(), b.size() * 4), APX_STATUS_OK);
  ApxTensor ins[2] = {View(da, APX_DT_F32, {4, 8}), View(db, APX_DT_F32, {8, 16})};
  ApxTensor outs[1] = {View(dy, APX_DT_F32, {4, 16})};
  ApxKernelCall call = {APX_OP_MatMul, nullptr, ins, 2, outs, 1, 0, "matmul_1"};
  ASSERT_NE(be_->iface.prepare, nullptr);
  ASSERT_EQ(be_->iface.prepare(be_, &call, 1), APX_STATUS_OK) << be_->err;
  int64_t pre = 0, all = 0;
  apx_backend_cuda_lt_counts(be_, &pre, &all);
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(all, 1);
  ASSERT_EQ(be_->iface.launch(be_, q_, &call), APX_STATUS_OK) << be_->err;
  ASSERT_EQ(be_->iface.copy_d2h(be_, q_, y.data(), dy, y.size() * 4), APX_STATUS_OK);
  ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
  apx_backend_cuda_lt_counts(be_, &pre, &all);
  EXPECT_EQ(all, 1) << "the launch made a heuristic query of its own";
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 16; j++) {
      float r = 0;
      for (int k = 0; k < 8; k++) r += a[i * 8 + k] * b[k * 16 + j];
      EXPECT_EQ(y[i * 16 + j], r) << i << "," << j;  // small integers: exact
    }
}

TEST_F(CudaBackendGpu, DropoutDrawsTheDeviceSideStepAlsoInAReplayedGraph) {
  const int64_t n = 4096;
  std::vector<float> x(n, 1.0f);
  std::vector<uint8_t> mask(n);
  void *dx = Alloc(n * 4), *dy = Alloc(n * 4), *dm = Alloc(n);
  ASSERT_EQ(be_->iface.copy_h2d(be_, q_, dx, x.data(), n * 4), APX_STATUS_OK);
  ApxAttrDropout a;
  memset(&a, 0, sizeof a);
  a.ratio = 0.5f;
  a.training_mode = 1;
  a.rng_stream = 3;
  ApxTensor ins[1] = {View(dx, APX_DT_F32, {n})};
  ApxTensor outs[2] = {View(dy, APX_DT_F32, {n}), View(dm, APX_DT_BOOL, {n})};
  auto check = [&](int64_t step, const char *what) {
    ASSERT_EQ(be_->iface.copy_d2h(be_, q_, mask.data(), dm, n), APX_STATUS_OK);
    ASSERT_EQ(be_->iface.queue_sync(be_, q_), APX_STATUS_OK) << be_->err;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += mask[i] != (uint8_t)apx_dropout_keep(1234, 3, step, (uint64_t)i, 0.5f);
    EXPECT_EQ(bad, 0) << what << ": mask elements unlike the CPU's at step " << step;
  };
  ApxKernelCall call = {APX_OP_Dropout, &a, ins, 1, outs, 2, 5, "drop"};
  ASSERT_EQ(be_->iface.step_write(be_, q_, 5), APX_STATUS_OK) << be_->err;
  ASSERT_EQ(be_->iface.launch(be_, q_, &call), APX_STATUS_OK) << be_->err;
  check(5, "a plain launch");
  call.step = 6;
  ASSERT_EQ(be_->iface.step_write(be_, q_, 6), APX_STATUS_OK) << be_->err;
  ASSERT_EQ(be_->iface.capture_begin(be_, q_), APX_STATUS_OK) << be_->err;
  ASSERT_EQ(be_->iface.launch(be_, q_, &call), APX_STATUS_OK) << be_->err;
  ApxDevGraph *g = nullptr;
  ASSERT_EQ(be_->iface.capture_end(be_, q_, &g), APX_STATUS_OK) << be_->err;
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(be_->iface.graph_launch(be_, q_, g), APX_STATUS_OK) << be_->err;
  check(6, "the captured graph's first launch");
  ASSERT_EQ(be_->iface.step_write(be_, q_, 7), APX_STATUS_OK) << be_->err;
  ASSERT_EQ(be_->iface.graph_launch(be_, q_, g), APX_STATUS_OK) << be_->err;
  check(7, "the graph replayed after step_write(7)");
  be_->iface.graph_free(be_, g);
}

}  // namespace
