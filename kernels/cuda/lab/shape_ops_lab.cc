// shape_ops_lab.cc - data movement and Cast on CUDA against the CPU reference: Transpose,
// Concat, Split, Slice (negative steps), SliceGrad, Gather (negative indices), GatherGrad
// (repeated indices: must equal the CPU's in-order sums), Expand, Where, Reshape, and Cast
// between float, integer and bool types (every conversion rounds once).
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

ApxAttrTranspose Perm(std::vector<int64_t> p) {
  ApxAttrTranspose a;
  memset(&a, 0, sizeof a);
  a.rank = (int32_t)p.size();
  for (size_t i = 0; i < p.size(); i++) a.perm[i] = p[i];
  return a;
}

ApxAttrSlice Slice(std::vector<int64_t> starts, std::vector<int64_t> steps) {
  ApxAttrSlice a;
  memset(&a, 0, sizeof a);
  a.rank = (int32_t)starts.size();
  for (size_t i = 0; i < starts.size(); i++) {
    a.starts[i] = starts[i];
    a.steps[i] = steps[i];
  }
  return a;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16, APX_DT_BF16, APX_DT_I64, APX_DT_BOOL, APX_DT_F64}) {
    std::string s = "_" + lab::Short(dt);
    Init in = dt == APX_DT_BOOL ? Init::kBool : dt == APX_DT_I64 ? Init::kIndices : Init::kUniform;
    int64_t p = 1000;
    v.push_back(LabCase("Transpose_021" + s, APX_OP_Transpose).Attrs(Perm({0, 2, 1})).In(dt, {5, 67, 129}, in, 0, 0, p).Out(dt, {5, 129, 67}));
    v.push_back(LabCase("Transpose_3012" + s, APX_OP_Transpose).Attrs(Perm({3, 0, 1, 2})).In(dt, {2, 3, 5, 7}, in, 0, 0, p).Out(dt, {7, 2, 3, 5}));
    ApxAttrAxis ax1 = {1};
    v.push_back(LabCase("Concat_axis1" + s, APX_OP_Concat).Attrs(ax1).In(dt, {4, 3, 5}, in, 0, 0, p).In(dt, {4, 1, 5}, in, 0, 0, p)
                    .In(dt, {4, 7, 5}, in, 0, 0, p).Out(dt, {4, 11, 5}));
    ApxAttrSplit sp = {2};
    v.push_back(LabCase("Split_axis2" + s, APX_OP_Split).Attrs(sp).In(dt, {3, 4, 10}, in, 0, 0, p)
                    .Out(dt, {3, 4, 3}).Out(dt, {3, 4, 7}));
    v.push_back(LabCase("Slice_negstep" + s, APX_OP_Slice).Attrs(Slice({1, 8}, {2, -3})).In(dt, {9, 10}, in, 0, 0, p).Out(dt, {4, 3}));
    ApxAttrReshape rs = {0};
    v.push_back(LabCase("Reshape" + s, APX_OP_Reshape).Attrs(rs).In(dt, {6, 35}, in, 0, 0, p).Out(dt, {210}));
    v.push_back(LabCase("Expand" + s, APX_OP_Expand).In(dt, {3, 1, 5}, in, 0, 0, p).Out(dt, {2, 3, 4, 5}));
    v.push_back(LabCase("Where" + s, APX_OP_Where).In(APX_DT_BOOL, {4, 1, 6}, Init::kBool).In(dt, {5, 6}, in, 0, 0, p)
                    .In(dt, {4, 5, 1}, in, 0, 0, p).Out(dt, {4, 5, 6}));
    ApxAttrAxis ax0 = {0};
    v.push_back(LabCase("Gather_rows" + s, APX_OP_Gather).Attrs(ax0).In(dt, {50, 33}, in, 0, 0, p)
                    .In(APX_DT_I64, {7, 3}, Init::kIndices, 0, 0, 50).Out(dt, {7, 3, 33}));
    v.push_back(LabCase("Gather_axis1" + s, APX_OP_Gather).Attrs(ax1).In(dt, {4, 20, 6}, in, 0, 0, p)
                    .In(APX_DT_I32, {9}, Init::kIndices, 0, 0, 20).Out(dt, {4, 9, 6}));
  }
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("SliceGrad" + s, APX_OP_SliceGrad).Attrs(Slice({1, 8}, {2, -3})).In(dt, {4, 3}).Out(dt, {9, 10}));
    ApxAttrAxis ax0 = {0}, ax1 = {1};
    v.push_back(LabCase("GatherGrad_embedding" + s, APX_OP_GatherGrad).Attrs(ax0).In(dt, {64, 9, 48})
                    .In(APX_DT_I64, {64, 9}, Init::kIndices, 0, 0, 40).Out(dt, {40, 48}).Reduce(64 * 9));
    v.push_back(LabCase("GatherGrad_axis1" + s, APX_OP_GatherGrad).Attrs(ax1).In(dt, {3, 30, 5})
                    .In(APX_DT_I32, {30}, Init::kIndices, 0, 0, 7).Out(dt, {3, 7, 5}).Reduce(30));
  }
  const ApxDType all[] = {APX_DT_F32, APX_DT_F16, APX_DT_BF16, APX_DT_F64, APX_DT_I64, APX_DT_I32,
                          APX_DT_I8, APX_DT_U8, APX_DT_BOOL};
  for (ApxDType from : all)
    for (ApxDType to : all) {
      if (from == to) continue;
      ApxAttrCast c = {(int32_t)to, 1};
      Init in = from == APX_DT_BOOL ? Init::kBool : apx_dtype_is_float(from) ? Init::kUniform : Init::kIndices;
      v.push_back(LabCase("Cast_" + lab::Short(from) + "_" + lab::Short(to), APX_OP_Cast).Attrs(c)
                      .In(from, {1001}, in, -300, 300, 100).Out(to, {1001}));
    }
  ApxAttrCast f16 = {APX_DT_F16, 1}, bf16 = {APX_DT_BF16, 1};
  v.push_back(LabCase("Cast_f32_f16_overflow", APX_OP_Cast).Attrs(f16).In(APX_DT_F32, {4001}, Init::kUniform, -1e5, 1e5)
                  .Out(APX_DT_F16, {4001}));
  v.push_back(LabCase("Cast_f32_f16_subnormal", APX_OP_Cast).Attrs(f16).In(APX_DT_F32, {4001}, Init::kUniform, -1e-6, 1e-6)
                  .Out(APX_DT_F16, {4001}));
  v.push_back(LabCase("Cast_f64_bf16_wide", APX_OP_Cast).Attrs(bf16).In(APX_DT_F64, {4001}, Init::kUniform, -1e30, 1e30)
                  .Out(APX_DT_BF16, {4001}));
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  ApxAttrCast to16 = {APX_DT_F16, 1};
  ApxAttrAxis ax0 = {0};
  v.push_back(LabCase("Cast_f32_f16_64M", APX_OP_Cast).Attrs(to16).In(APX_DT_F32, {1 << 26}).Out(APX_DT_F16, {1 << 26}));
  v.push_back(LabCase("Transpose_f16_4096x4096", APX_OP_Transpose).Attrs(Perm({1, 0})).In(APX_DT_F16, {4096, 4096}).Out(APX_DT_F16, {4096, 4096}));
  v.push_back(LabCase("Gather_embedding_f16", APX_OP_Gather).Attrs(ax0).In(APX_DT_F16, {50257, 768})
                  .In(APX_DT_I64, {8, 1024}, Init::kIndices, 0, 0, 50257).Out(APX_DT_F16, {8, 1024, 768}));
  v.push_back(LabCase("GatherGrad_embedding_f32", APX_OP_GatherGrad).Attrs(ax0).In(APX_DT_F32, {8, 1024, 768})
                  .In(APX_DT_I64, {8, 1024}, Init::kIndices, 0, 0, 50257).Out(APX_DT_F32, {50257, 768}));
  return v;
}

}  // namespace

LAB_FAMILY(LabShapeOps, Cases, BenchCases)
