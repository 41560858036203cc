// plan_check.h - test-only helpers that hold a plan's kernels to the CUDA kernels without a
// GPU (onnx_node_cuda_test, runtime/exec_cuda_test): the type a kernel's support is looked
// up by, and a kernel through its CUDA entry's host-side checks. Header-only.
#ifndef APX_CUDA_PLAN_CHECK_H
#define APX_CUDA_PLAN_CHECK_H

#include <cstdint>
#include <cstring>
#include <vector>

extern "C" {
#include "kernels/cuda/cuda_kernels.h"
#include "plan/plan.h"
}

namespace apx_cuda_test {

// The dtype apx_cuda_supports is asked about: the first present output's, else the first
// present input's (UNDEFINED without either).
inline ApxDType KernelType(const ApxPlan &p, const ApxPlanKernel &kn) {
  for (int32_t i = 0; i < kn.n_out; i++)
    if (kn.out[i] >= 0) return p.bufs[kn.out[i]].dtype;
  for (int32_t i = 0; i < kn.n_in; i++)
    if (kn.in[i] >= 0) return p.bufs[kn.in[i]].dtype;
  return APX_DT_UNDEFINED;
}

// Runs kn's CUDA entry on its real shapes, types and attributes with fake device addresses
// (one per buffer id): the host-side checks must accept the kernel, which may then only fail
// at its first CUDA call (RUNTIME or OOM without a GPU). Only without a GPU: on one the
// kernel would launch on the fake addresses. Returns the status; the message is ctx->err.
inline ApxStatus HostCheck(const ApxPlan &p, const ApxPlanKernel &kn, ApxCudaCtx *ctx) {
  std::vector<ApxTensor> args((size_t)(kn.n_in + kn.n_out) + 1);
  for (int32_t i = 0; i < kn.n_in + kn.n_out; i++) {
    int32_t id = i < kn.n_in ? kn.in[i] : kn.out[i - kn.n_in];
    ApxTensor &a = args[(size_t)i];
    memset(&a, 0, sizeof a);
    if (id < 0) continue;
    const ApxPlanBuffer *pb = &p.bufs[id];
    a.data = reinterpret_cast<void *>(0x7f0000000000ull + ((uint64_t)id << 24));
    a.dtype = pb->dtype;
    a.rank = pb->rank;
    memcpy(a.dims, pb->dims, sizeof a.dims);
  }
  memset(ctx, 0, sizeof *ctx);
  return apx_cuda_run(ctx, kn.op, kn.attrs, args.data(), kn.n_in, args.data() + kn.n_in, kn.n_out);
}

}  // namespace apx_cuda_test

#endif
