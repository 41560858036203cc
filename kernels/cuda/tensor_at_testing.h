// tensor_at_testing.h - a tensor descriptor at a made-up device address, for the host-side
// tests of the CUDA libraries' plans (lt_plan_test, cudalibs_test): what they check is the
// shapes, types and alignments the descriptors carry, never the bytes.
#ifndef APX_KERNELS_CUDA_TENSOR_AT_TESTING_H
#define APX_KERNELS_CUDA_TENSOR_AT_TESTING_H

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/tensor.h"

namespace apx_testing {

inline ApxTensor TensorAt(uintptr_t addr, ApxDType dt, const std::vector<int64_t> &dims) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void *>(addr);
  t.dtype = dt;
  t.rank = static_cast<int32_t>(dims.size());
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

}  // namespace apx_testing

#endif
