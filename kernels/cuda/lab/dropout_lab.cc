// dropout_lab.cc - Dropout (training: the Philox stream must give the CPU's mask bit for bit;
// inference: identity) and DropoutGrad on CUDA against the CPU reference.
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    for (float ratio : {0.1f, 0.5f}) {
      ApxAttrDropout a = {ratio, 1, 0, 0, 7};
      v.push_back(LabCase("Dropout_train_" + std::to_string(ratio).substr(0, 3) + s, APX_OP_Dropout).Attrs(a)
                      .In(dt, {1027, 33}).Out(dt, {1027, 33}).Out(APX_DT_BOOL, {1027, 33}));
      v.push_back(LabCase("DropoutGrad_" + std::to_string(ratio).substr(0, 3) + s, APX_OP_DropoutGrad).Attrs(a)
                      .In(dt, {1027, 33}).In(APX_DT_BOOL, {1027, 33}, Init::kBool).Out(dt, {1027, 33}));
    }
    ApxAttrDropout seeded = {0.3f, 1, 1, 123456789012345ll, 2};
    v.push_back(LabCase("Dropout_attr_seed" + s, APX_OP_Dropout).Attrs(seeded).In(dt, {4099}).Out(dt, {4099}).Out(APX_DT_BOOL, {4099}));
    ApxAttrDropout infer = {0.5f, 0, 0, 0, 1};
    v.push_back(LabCase("Dropout_infer" + s, APX_OP_Dropout).Attrs(infer).In(dt, {100}).Out(dt, {100}).Out(APX_DT_BOOL, {100}));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  ApxAttrDropout a = {0.1f, 1, 0, 0, 7};
  std::vector<LabCase> v;
  v.push_back(LabCase("Dropout_f16_64M", APX_OP_Dropout).Attrs(a).In(APX_DT_F16, {1 << 26}).Out(APX_DT_F16, {1 << 26})
                  .Out(APX_DT_BOOL, {1 << 26}));
  return v;
}

}  // namespace

LAB_FAMILY(LabDropout, Cases, BenchCases)
