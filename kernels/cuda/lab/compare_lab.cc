// compare_lab.cc - the v1.1 comparison, logic and selection ops (compare.cu: Less,
// LessOrEqual, Greater, GreaterOrEqual, Not, And, Or, IsNaN, IsInf, Min, Max, Clip, Mod) and
// their gradients (ClipGrad, MinMaxGrad) on CUDA against the CPU reference (lab.h), in every
// type the CUDA kernels take, with broadcasts, odd sizes, NaN inputs and integer ties. The
// forward ops are exact on both backends, so they match bit for bit (tolerance 2 eps of the
// output type covers nothing but equal values; bool outputs compare exactly).
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  const ApxOp cmp[] = {APX_OP_Less, APX_OP_LessOrEqual, APX_OP_Greater, APX_OP_GreaterOrEqual};
  const ApxOp minmax[] = {APX_OP_Min, APX_OP_Max};
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    for (ApxOp op : cmp) {
      std::string n = apx_op_name(op);
      v.push_back(LabCase(n + "_contig" + s, op).In(dt, {513, 129}).In(dt, {513, 129}).Out(APX_DT_BOOL, {513, 129}));
      v.push_back(LabCase(n + "_bcast_nan" + s, op)
                      .In(dt, {4, 1, 33}, Init::kWithNaN).In(dt, {5, 33}).Out(APX_DT_BOOL, {4, 5, 33}));
    }
    for (ApxOp op : minmax) {
      std::string n = apx_op_name(op);
      v.push_back(LabCase(n + "_bcast_nan" + s, op)
                      .In(dt, {4, 1, 33}, Init::kWithNaN).In(dt, {5, 33}).Out(dt, {4, 5, 33}));
      v.push_back(LabCase(n + "3_bcast" + s, op)
                      .In(dt, {16, 33}).In(dt, {33}, Init::kWithNaN).In(dt, {16, 1}).Out(dt, {16, 33}));
      v.push_back(LabCase(n + "1_bcast" + s, op).In(dt, {33}).Out(dt, {7, 33}));
    }
    v.push_back(LabCase("Clip_both" + s, APX_OP_Clip)
                    .In(dt, {333, 257}, Init::kWithNaN).In(dt, {}, Init::kConst, -0.5).In(dt, {1}, Init::kConst, 0.75)
                    .Out(dt, {333, 257}));
    v.push_back(LabCase("Clip_min_only" + s, APX_OP_Clip)
                    .In(dt, {1001}).In(dt, {}, Init::kConst, 0.25).Out(dt, {1001}));
    v.push_back(LabCase("Clip_max_only" + s, APX_OP_Clip)
                    .In(dt, {1001}).Absent().In(dt, {}, Init::kConst, -0.25).Out(dt, {1001}));
    v.push_back(LabCase("Clip_min_above_max" + s, APX_OP_Clip)
                    .In(dt, {1001}).In(dt, {}, Init::kConst, 0.5).In(dt, {}, Init::kConst, -0.5).Out(dt, {1001}));
    ApxAttrMod fm = {1};
    v.push_back(LabCase("Mod_fmod_bcast" + s, APX_OP_Mod).Attrs(fm)
                    .In(dt, {7, 65}, Init::kUniform, -9, 9).In(dt, {65}, Init::kPositive, 0, 3).Out(dt, {7, 65}));
    ApxAttrIsInf both = {1, 1}, neg = {1, 0}, pos = {0, 1};
    v.push_back(LabCase("IsNaN" + s, APX_OP_IsNaN).In(dt, {999}, Init::kWithNaN).Out(APX_DT_BOOL, {999}));
    // fp16's largest value is 65504: uniform values up to 1e5 overflow to +-inf there
    for (auto at : {both, neg, pos})
      v.push_back(LabCase(std::string("IsInf_") + (at.detect_negative ? "n" : "") + (at.detect_positive ? "p" : "") + s,
                          APX_OP_IsInf)
                      .Attrs(at).In(dt, {999}, Init::kUniform, -1e5, 1e5).Out(APX_DT_BOOL, {999}));
    v.push_back(LabCase("ClipGrad_all" + s, APX_OP_ClipGrad)
                    .In(dt, {129, 65}).In(dt, {129, 65}).In(dt, {}, Init::kConst, -0.5).In(dt, {}, Init::kConst, 0.75)
                    .Out(dt, {129, 65}).Out(dt, {129, 65}).Out(dt, {129, 65}));
    v.push_back(LabCase("ClipGrad_dx_max" + s, APX_OP_ClipGrad)
                    .In(dt, {1001}).In(dt, {1001}).Absent().In(dt, {}, Init::kConst, 0.1)
                    .Out(dt, {1001}).Absent(true).Out(dt, {1001}));
    // MinMaxGrad of Max(x (16, 33), x' (33)) with y computed as the forward would: ties where
    // both are constants
    v.push_back(LabCase("MinMaxGrad_ties" + s, APX_OP_MinMaxGrad)
                    .In(dt, {16, 33}).In(dt, {16, 33}, Init::kConst, 0.5).In(dt, {16, 33}, Init::kConst, 0.5)
                    .In(dt, {33}, Init::kConst, 0.5).Out(dt, {16, 33}).Out(dt, {16, 33}));
    v.push_back(LabCase("MinMaxGrad_nan" + s, APX_OP_MinMaxGrad)
                    .In(dt, {16, 33}).In(dt, {16, 33}, Init::kWithNaN).In(dt, {16, 33}).In(dt, {16, 1})
                    .Out(dt, {16, 33}).Absent(true));
  }
  // integer types: exact remainders and selections, ties everywhere
  for (ApxDType dt : {APX_DT_I8, APX_DT_U8, APX_DT_I32, APX_DT_I64}) {
    std::string s = std::string("_") + apx_dtype_short(dt);
    bool sgn = dt != APX_DT_U8;
    Init a = sgn ? Init::kIndices : Init::kLabels;
    for (ApxOp op : cmp)
      v.push_back(LabCase(std::string(apx_op_name(op)) + "_bcast" + s, op)
                      .In(dt, {9, 1, 17}, a, 0, 0, 5).In(dt, {4, 17}, a, 0, 0, 5).Out(APX_DT_BOOL, {9, 4, 17}));
    for (ApxOp op : minmax)
      v.push_back(LabCase(std::string(apx_op_name(op)) + "3" + s, op)
                      .In(dt, {9, 17}, a, 0, 0, 5).In(dt, {17}, a, 0, 0, 5).In(dt, {9, 1}, a, 0, 0, 5).Out(dt, {9, 17}));
    v.push_back(LabCase("Clip" + s, APX_OP_Clip)
                    .In(dt, {1001}, a, 0, 0, 20).In(dt, {}, Init::kConst, sgn ? -3 : 2).In(dt, {}, Init::kConst, 7)
                    .Out(dt, {1001}));
    for (int fmod : {0, 1}) {
      ApxAttrMod m = {fmod};
      // divisors without zero: labels in [0, 9) shifted by a constant through Clip is not
      // available here, so the divisor is a constant
      v.push_back(LabCase("Mod_fmod" + std::to_string(fmod) + s, APX_OP_Mod).Attrs(m)
                      .In(dt, {33, 17}, a, 0, 0, 40).In(dt, {17}, Init::kConst, sgn ? -7 : 7).Out(dt, {33, 17}));
    }
  }
  for (ApxOp op : {APX_OP_And, APX_OP_Or})
    v.push_back(LabCase(std::string(apx_op_name(op)) + "_bcast", op)
                    .In(APX_DT_BOOL, {9, 1, 33}, Init::kBool).In(APX_DT_BOOL, {5, 33}, Init::kBool)
                    .Out(APX_DT_BOOL, {9, 5, 33}));
  v.push_back(LabCase("Not", APX_OP_Not).In(APX_DT_BOOL, {1001}, Init::kBool).Out(APX_DT_BOOL, {1001}));
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Less_16M" + s, APX_OP_Less).In(dt, {4096, 4096}).In(dt, {4096, 4096}).Out(APX_DT_BOOL, {4096, 4096}));
    v.push_back(LabCase("Max_16M" + s, APX_OP_Max).In(dt, {4096, 4096}).In(dt, {4096, 4096}).Out(dt, {4096, 4096}));
    v.push_back(LabCase("Clip_16M" + s, APX_OP_Clip)
                    .In(dt, {4096, 4096}).In(dt, {}, Init::kConst, 0).In(dt, {}, Init::kConst, 6).Out(dt, {4096, 4096}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabCompare, Cases, BenchCases)
