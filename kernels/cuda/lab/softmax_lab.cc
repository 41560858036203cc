// softmax_lab.cc - Softmax / LogSoftmax (last and middle axis, short rows, long rows) and their
// gradients, FusedSoftmax with a broadcast mask and its gradient, on CUDA against the CPU.
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    for (ApxOp op : {APX_OP_Softmax, APX_OP_LogSoftmax}) {
      std::string n = apx_op_name(op);
      ApxAttrAxis last = {1}, mid = {1}, last3 = {2};
      v.push_back(LabCase(n + "_L10" + s, op).Attrs(last).In(dt, {513, 10}, Init::kUniform, -8, 8).Out(dt, {513, 10}).Reduce(10));
      v.push_back(LabCase(n + "_L1000" + s, op).Attrs(last).In(dt, {64, 1000}, Init::kUniform, -8, 8).Out(dt, {64, 1000}).Reduce(1000));
      v.push_back(LabCase(n + "_L5000" + s, op).Attrs(last3).In(dt, {2, 8, 5000}, Init::kUniform, -8, 8).Out(dt, {2, 8, 5000}).Reduce(5000));
      v.push_back(LabCase(n + "_mid_axis" + s, op).Attrs(mid).In(dt, {6, 37, 19}, Init::kUniform, -8, 8).Out(dt, {6, 37, 19}).Reduce(37));
      ApxOp g = op == APX_OP_Softmax ? APX_OP_SoftmaxGrad : APX_OP_LogSoftmaxGrad;
      Init yi = op == APX_OP_Softmax ? Init::kPositive : Init::kUniform;
      double ylo = op == APX_OP_Softmax ? 0 : -6, yhi = op == APX_OP_Softmax ? 0.2 : -0.1;
      v.push_back(LabCase(std::string(apx_op_name(g)) + "_L1000" + s, g).Attrs(last)
                      .In(dt, {64, 1000}).In(dt, {64, 1000}, yi, ylo, yhi).Out(dt, {64, 1000}).Reduce(1000));
      v.push_back(LabCase(std::string(apx_op_name(g)) + "_mid_axis" + s, g).Attrs(mid)
                      .In(dt, {6, 37, 19}).In(dt, {6, 37, 19}, yi, ylo, yhi).Out(dt, {6, 37, 19}).Reduce(37));
    }
    ApxAttrFusedSoftmax fs = {0.125f, 1};
    v.push_back(LabCase("FusedSoftmax_mask" + s, APX_OP_FusedSoftmax).Attrs(fs)
                    .In(dt, {4, 3, 65, 65}, Init::kUniform, -20, 20).In(dt, {4, 1, 1, 65}, Init::kUniform, -3, 0)
                    .Out(dt, {4, 3, 65, 65}).Reduce(65));
    ApxAttrFusedSoftmax nomask = {0.5f, 0};
    v.push_back(LabCase("FusedSoftmax_nomask_long" + s, APX_OP_FusedSoftmax).Attrs(nomask)
                    .In(dt, {3, 2049}, Init::kUniform, -20, 20).Out(dt, {3, 2049}).Reduce(2049));
    v.push_back(LabCase("FusedSoftmaxGrad" + s, APX_OP_FusedSoftmaxGrad).Attrs(fs)
                    .In(dt, {4, 3, 65, 65}).In(dt, {4, 3, 65, 65}, Init::kUniform, 0, 0.05)
                    .Out(dt, {4, 3, 65, 65}).Reduce(65));
  }
  ApxAttrFusedSoftmax fs = {0.125f, 1};
  v.push_back(LabCase("FusedSoftmax_f32_to_f16", APX_OP_FusedSoftmax).Attrs(fs)
                  .In(APX_DT_F32, {2, 4, 33, 33}, Init::kUniform, -20, 20).In(APX_DT_F32, {2, 1, 1, 33})
                  .Out(APX_DT_F16, {2, 4, 33, 33}).Reduce(33));
  v.push_back(LabCase("FusedSoftmaxGrad_f16_to_f32", APX_OP_FusedSoftmaxGrad).Attrs(fs)
                  .In(APX_DT_F16, {2, 4, 33, 33}).In(APX_DT_F32, {2, 4, 33, 33}, Init::kUniform, 0, 0.05)
                  .Out(APX_DT_BF16, {2, 4, 33, 33}).Reduce(33));
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  ApxAttrAxis last = {1};
  ApxAttrFusedSoftmax fs = {0.125f, 1};
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Softmax_16384x1024" + s, APX_OP_Softmax).Attrs(last).In(dt, {16384, 1024}).Out(dt, {16384, 1024}));
    v.push_back(LabCase("LogSoftmax_1024x50257" + s, APX_OP_LogSoftmax).Attrs(last).In(dt, {1024, 50257}).Out(dt, {1024, 50257}));
    v.push_back(LabCase("FusedSoftmax_attn_8x16x512x512" + s, APX_OP_FusedSoftmax).Attrs(fs)
                    .In(dt, {8, 16, 512, 512}).In(dt, {8, 1, 1, 512}).Out(dt, {8, 16, 512, 512}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabSoftmax, Cases, BenchCases)
