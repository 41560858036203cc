// pool_lab.cc - MaxPool (Indices, storage order, ceil mode, dilation, pads), AveragePool
// (count_include_pad), their gradients (2-D and 3-D) and GlobalAveragePool on CUDA against the CPU.
#include "kernels/cuda/lab/lab.h"

using lab::LabCase;

namespace {

ApxAttrPool Pool(int64_t k, int64_t stride, int64_t pad, int64_t dil, int ceil, int cip, int so) {
  ApxAttrPool a;
  memset(&a, 0, sizeof a);
  a.kernel[0] = 1;
  a.kernel[1] = a.kernel[2] = k;
  a.strides[1] = a.strides[2] = stride;
  a.pads[1] = a.pads[2] = a.pads[4] = a.pads[5] = pad;
  a.dilations[1] = a.dilations[2] = dil;
  a.ceil_mode = ceil;
  a.count_include_pad = cip;
  a.storage_order = so;
  return a;
}

// 3-D: k, stride and pad the same in every slot
ApxAttrPool Pool3D(int64_t k, int64_t stride, int64_t pad, int cip) {
  ApxAttrPool a;
  memset(&a, 0, sizeof a);
  lab::CubicWindow(&a, k, stride, pad);
  a.count_include_pad = cip;
  return a;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("MaxPool3s2p1_idx" + s, APX_OP_MaxPool).Attrs(Pool(3, 2, 1, 1, 0, 0, 0))
                    .In(dt, {2, 5, 13, 12}).Out(dt, {2, 5, 7, 6}).Out(APX_DT_I64, {2, 5, 7, 6}));
    v.push_back(LabCase("MaxPool_ceil_dil_so1" + s, APX_OP_MaxPool).Attrs(Pool(2, 2, 0, 2, 1, 0, 1))
                    .In(dt, {1, 3, 10, 9}).Out(dt, {1, 3, 5, 4}).Out(APX_DT_I64, {1, 3, 5, 4}));
    v.push_back(LabCase("AveragePool_cip" + s, APX_OP_AveragePool).Attrs(Pool(3, 2, 1, 1, 0, 1, 0))
                    .In(dt, {2, 5, 13, 12}).Out(dt, {2, 5, 7, 6}).Reduce(9));
    v.push_back(LabCase("AveragePool_nocip" + s, APX_OP_AveragePool).Attrs(Pool(3, 2, 1, 1, 0, 0, 0))
                    .In(dt, {2, 5, 13, 12}).Out(dt, {2, 5, 7, 6}).Reduce(9));
    v.push_back(LabCase("MaxPoolGrad_overlap" + s, APX_OP_MaxPoolGrad).Attrs(Pool(3, 1, 1, 1, 0, 0, 0))
                    .In(dt, {2, 4, 9, 8}).In(dt, {2, 4, 9, 8}).Out(dt, {2, 4, 9, 8}).Reduce(9));
    v.push_back(LabCase("AveragePoolGrad" + s, APX_OP_AveragePoolGrad).Attrs(Pool(3, 2, 1, 1, 0, 0, 0))
                    .In(dt, {2, 5, 7, 6}).Out(dt, {2, 5, 13, 12}).Reduce(4));
    // 3-D (N, C, D, H, W): D, H, W (7, 8, 9) -> (4, 4, 5) with k3 s2 p1
    v.push_back(LabCase("MaxPool3D_idx" + s, APX_OP_MaxPool).Attrs(Pool3D(3, 2, 1, 0))
                    .In(dt, {2, 3, 7, 8, 9}).Out(dt, {2, 3, 4, 4, 5}).Out(APX_DT_I64, {2, 3, 4, 4, 5}));
    v.push_back(LabCase("AveragePool3D_cip" + s, APX_OP_AveragePool).Attrs(Pool3D(3, 2, 1, 1))
                    .In(dt, {2, 3, 7, 8, 9}).Out(dt, {2, 3, 4, 4, 5}).Reduce(27));
    v.push_back(LabCase("MaxPoolGrad3D" + s, APX_OP_MaxPoolGrad).Attrs(Pool3D(3, 2, 1, 0))
                    .In(dt, {2, 3, 4, 4, 5}).In(dt, {2, 3, 7, 8, 9}).Out(dt, {2, 3, 7, 8, 9}).Reduce(8));
    v.push_back(LabCase("AveragePoolGrad3D" + s, APX_OP_AveragePoolGrad).Attrs(Pool3D(3, 2, 1, 0))
                    .In(dt, {2, 3, 4, 4, 5}).Out(dt, {2, 3, 7, 8, 9}).Reduce(8));
    v.push_back(LabCase("GlobalAveragePool" + s, APX_OP_GlobalAveragePool).In(dt, {4, 16, 9, 7}).Out(dt, {4, 16, 1, 1}).Reduce(63));
    v.push_back(LabCase("GlobalAveragePoolGrad" + s, APX_OP_GlobalAveragePoolGrad).In(dt, {4, 16, 1, 1}).Out(dt, {4, 16, 9, 7}));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("MaxPool3s2_64x64x112x112" + s, APX_OP_MaxPool).Attrs(Pool(3, 2, 1, 1, 0, 0, 0))
                    .In(dt, {64, 64, 112, 112}).Out(dt, {64, 64, 56, 56}));
    v.push_back(LabCase("MaxPoolGrad3s2_64x64x112x112" + s, APX_OP_MaxPoolGrad).Attrs(Pool(3, 2, 1, 1, 0, 0, 0))
                    .In(dt, {64, 64, 56, 56}).In(dt, {64, 64, 112, 112}).Out(dt, {64, 64, 112, 112}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabPool, Cases, BenchCases)
