// conv_lab.cc - cuDNN convolutions on CUDA against the CPU reference (im2col + sgemm):
// Conv with bias, groups, strides, dilations and symmetric pads, ConvBiasRelu, ConvGrad (dX,
// dW, dB) and ConvBiasReluGrad, 1-D and 3-D Conv/ConvGrad; ConvTranspose (output_padding, groups, 3-D) and ConvTransposeGrad.
#include "kernels/cuda/lab/lab.h"

using lab::LabCase;

namespace {

ApxAttrConv Conv(int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t group) {
  ApxAttrConv a;
  memset(&a, 0, sizeof a);
  a.kernel[0] = 1;
  a.kernel[1] = a.kernel[2] = k;
  a.strides[1] = a.strides[2] = stride;
  a.pads[1] = a.pads[2] = a.pads[4] = a.pads[5] = pad;
  a.dilations[1] = a.dilations[2] = dil;
  a.group = group;
  return a;
}

ApxAttrConvTranspose ConvT(int64_t k, int64_t stride, int64_t pad, int64_t out_pad, int64_t group) {
  ApxAttrConvTranspose a;
  memset(&a, 0, sizeof a);
  a.kernel[0] = 1;
  a.kernel[1] = a.kernel[2] = k;
  a.strides[1] = a.strides[2] = stride;
  a.pads[1] = a.pads[2] = a.pads[4] = a.pads[5] = pad;
  a.dilations[1] = a.dilations[2] = 1;
  a.output_padding[1] = a.output_padding[2] = out_pad;
  a.group = group;
  return a;
}

// 3-D: k, stride and pad the same in every slot
ApxAttrConv Conv3D(int64_t k, int64_t stride, int64_t pad) {
  ApxAttrConv a;
  memset(&a, 0, sizeof a);
  lab::CubicWindow(&a, k, stride, pad);
  a.group = 1;
  return a;
}

ApxAttrConvTranspose ConvT3D(int64_t k, int64_t stride) {
  ApxAttrConvTranspose a;
  memset(&a, 0, sizeof a);
  lab::CubicWindow(&a, k, stride, 0);
  a.group = 1;
  return a;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Conv3x3_pad1_bias" + s, APX_OP_Conv).Attrs(Conv(3, 1, 1, 1, 1))
                    .In(dt, {2, 8, 13, 11}).In(dt, {16, 8, 3, 3}).In(dt, {16}).Out(dt, {2, 16, 13, 11}).Reduce(72));
    v.push_back(LabCase("Conv3x3_s2_d2_g2" + s, APX_OP_Conv).Attrs(Conv(3, 2, 2, 2, 2))
                    .In(dt, {2, 8, 15, 15}).In(dt, {12, 4, 3, 3}).Absent().Out(dt, {2, 12, 8, 8}).Reduce(36));
    v.push_back(LabCase("ConvBiasRelu_1x1" + s, APX_OP_ConvBiasRelu).Attrs(Conv(1, 1, 0, 1, 1))
                    .In(dt, {4, 16, 7, 7}).In(dt, {32, 16, 1, 1}).In(dt, {32}).Out(dt, {4, 32, 7, 7}).Reduce(16));
    v.push_back(LabCase("ConvGrad_3x3" + s, APX_OP_ConvGrad).Attrs(Conv(3, 1, 1, 1, 1))
                    .In(dt, {2, 16, 13, 11}).In(dt, {2, 8, 13, 11}).In(dt, {16, 8, 3, 3})
                    .Out(dt, {2, 8, 13, 11}).Out(dt, {16, 8, 3, 3}).Out(dt, {16}).Reduce(2 * 13 * 11));
    v.push_back(LabCase("ConvGrad_s2_g2" + s, APX_OP_ConvGrad).Attrs(Conv(3, 2, 2, 2, 2))
                    .In(dt, {2, 12, 8, 8}).In(dt, {2, 8, 15, 15}).In(dt, {12, 4, 3, 3})
                    .Out(dt, {2, 8, 15, 15}).Out(dt, {12, 4, 3, 3}).Absent(true).Reduce(2 * 64));
    v.push_back(LabCase("ConvBiasReluGrad" + s, APX_OP_ConvBiasReluGrad).Attrs(Conv(3, 1, 1, 1, 1))
                    .In(dt, {2, 16, 9, 9}).In(dt, {2, 16, 9, 9}).In(dt, {2, 8, 9, 9}).In(dt, {16, 8, 3, 3})
                    .Out(dt, {2, 8, 9, 9}).Out(dt, {16, 8, 3, 3}).Out(dt, {16}).Reduce(2 * 81));
    // 1-D (N, C, L): height 1, the attributes' first entries unit; L: (33 + 2 - 3) / 2 + 1 = 17
    ApxAttrConv c1 = Conv(3, 2, 1, 1, 1);
    c1.kernel[1] = c1.strides[1] = 1;
    c1.pads[1] = c1.pads[4] = 0;
    v.push_back(LabCase("Conv1D_s2_pad1_bias" + s, APX_OP_Conv).Attrs(c1)
                    .In(dt, {2, 8, 33}).In(dt, {16, 8, 3}).In(dt, {16}).Out(dt, {2, 16, 17}).Reduce(24));
    v.push_back(LabCase("ConvGrad1D_s2" + s, APX_OP_ConvGrad).Attrs(c1)
                    .In(dt, {2, 16, 17}).In(dt, {2, 8, 33}).In(dt, {16, 8, 3})
                    .Out(dt, {2, 8, 33}).Out(dt, {16, 8, 3}).Out(dt, {16}).Reduce(2 * 17));
    // 3-D (N, C, D, H, W): 5-d cuDNN descriptors
    v.push_back(LabCase("Conv3D_3x3x3_pad1_bias" + s, APX_OP_Conv).Attrs(Conv3D(3, 1, 1))
                    .In(dt, {2, 4, 5, 6, 7}).In(dt, {8, 4, 3, 3, 3}).In(dt, {8}).Out(dt, {2, 8, 5, 6, 7}).Reduce(108));
    v.push_back(LabCase("ConvGrad3D_3x3x3" + s, APX_OP_ConvGrad).Attrs(Conv3D(3, 1, 1))
                    .In(dt, {2, 8, 5, 6, 7}).In(dt, {2, 4, 5, 6, 7}).In(dt, {8, 4, 3, 3, 3})
                    .Out(dt, {2, 4, 5, 6, 7}).Out(dt, {8, 4, 3, 3, 3}).Out(dt, {8}).Reduce(2 * 5 * 6 * 7));
    // Y: 2 (I - 1) + 2 = 2 I
    v.push_back(LabCase("ConvTranspose3D_k2s2_bias" + s, APX_OP_ConvTranspose).Attrs(ConvT3D(2, 2))
                    .In(dt, {2, 4, 3, 4, 3}).In(dt, {4, 6, 2, 2, 2}).In(dt, {6}).Out(dt, {2, 6, 6, 8, 6}).Reduce(32));
    v.push_back(LabCase("ConvTransposeGrad3D_k2s2" + s, APX_OP_ConvTransposeGrad).Attrs(ConvT3D(2, 2))
                    .In(dt, {2, 6, 6, 8, 6}).In(dt, {2, 4, 3, 4, 3}).In(dt, {4, 6, 2, 2, 2})
                    .Out(dt, {2, 4, 3, 4, 3}).Out(dt, {4, 6, 2, 2, 2}).Out(dt, {6}).Reduce(2 * 36));
    // Y: 2 (7 - 1) + 1 + 3 - 2 = 14
    v.push_back(LabCase("ConvTranspose_s2_outpad1_bias" + s, APX_OP_ConvTranspose).Attrs(ConvT(3, 2, 1, 1, 1))
                    .In(dt, {2, 8, 7, 7}).In(dt, {8, 6, 3, 3}).In(dt, {6}).Out(dt, {2, 6, 14, 14}).Reduce(72));
    v.push_back(LabCase("ConvTranspose_g2" + s, APX_OP_ConvTranspose).Attrs(ConvT(3, 1, 1, 0, 2))
                    .In(dt, {2, 8, 9, 9}).In(dt, {8, 3, 3, 3}).Absent().Out(dt, {2, 6, 9, 9}).Reduce(36));
    v.push_back(LabCase("ConvTransposeGrad_s2_outpad1" + s, APX_OP_ConvTransposeGrad).Attrs(ConvT(3, 2, 1, 1, 1))
                    .In(dt, {2, 6, 14, 14}).In(dt, {2, 8, 7, 7}).In(dt, {8, 6, 3, 3})
                    .Out(dt, {2, 8, 7, 7}).Out(dt, {8, 6, 3, 3}).Out(dt, {6}).Reduce(2 * 196));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Conv3x3_64x128x56x56" + s, APX_OP_ConvBiasRelu).Attrs(Conv(3, 1, 1, 1, 1))
                    .In(dt, {64, 128, 56, 56}).In(dt, {128, 128, 3, 3}).In(dt, {128}).Out(dt, {64, 128, 56, 56}));
    v.push_back(LabCase("ConvGrad3x3_64x128x56x56" + s, APX_OP_ConvGrad).Attrs(Conv(3, 1, 1, 1, 1))
                    .In(dt, {64, 128, 56, 56}).In(dt, {64, 128, 56, 56}).In(dt, {128, 128, 3, 3})
                    .Out(dt, {64, 128, 56, 56}).Out(dt, {128, 128, 3, 3}).Out(dt, {128}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabConv, Cases, BenchCases)
