// reduce_lab.cc - ReduceSum, ReduceMean and ReduceSumTo on CUDA against the CPU reference:
// row reductions (innermost axis), column reductions, mixed axis sets, everything into one.
#include "kernels/cuda/lab/lab.h"

using lab::LabCase;

namespace {

ApxAttrReduce Axes(std::vector<int64_t> axes, int keepdims = 1) {
  ApxAttrReduce a;
  memset(&a, 0, sizeof a);
  a.n_axes = (int32_t)axes.size();
  for (size_t i = 0; i < axes.size(); i++) a.axes[i] = axes[i];
  a.keepdims = keepdims;
  return a;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    for (ApxOp op : {APX_OP_ReduceSum, APX_OP_ReduceMean}) {
      std::string n = apx_op_name(op);
      v.push_back(LabCase(n + "_rows" + s, op).Attrs(Axes({1})).In(dt, {77, 1000}).Out(dt, {77, 1}).Reduce(1000));
      v.push_back(LabCase(n + "_cols" + s, op).Attrs(Axes({0})).In(dt, {1000, 77}).Out(dt, {1, 77}).Reduce(1000));
      v.push_back(LabCase(n + "_mixed" + s, op).Attrs(Axes({0, 2})).In(dt, {8, 16, 32, 5}).Out(dt, {1, 16, 1, 5}).Reduce(256));
      v.push_back(LabCase(n + "_all" + s, op).Attrs(Axes({})).In(dt, {300001}).Out(dt, {1}).Reduce(300001));
      v.push_back(LabCase(n + "_tall_cols" + s, op).Attrs(Axes({0})).In(dt, {200000, 3}).Out(dt, {1, 3}).Reduce(200000));
    }
    v.push_back(LabCase("ReduceSumTo_bias" + s, APX_OP_ReduceSumTo).In(dt, {64, 10, 96}).Absent().Out(dt, {96}).Reduce(640));
    v.push_back(LabCase("ReduceSumTo_keep1" + s, APX_OP_ReduceSumTo).In(dt, {6, 10, 96}).Absent().Out(dt, {10, 1}).Reduce(576));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("ReduceSum_rows_8192x4096" + s, APX_OP_ReduceSum).Attrs(Axes({1})).In(dt, {8192, 4096}).Out(dt, {8192, 1}));
    v.push_back(LabCase("ReduceSum_cols_8192x4096" + s, APX_OP_ReduceSum).Attrs(Axes({0})).In(dt, {8192, 4096}).Out(dt, {1, 4096}));
    v.push_back(LabCase("ReduceSum_all_32M" + s, APX_OP_ReduceSum).Attrs(Axes({})).In(dt, {1 << 25}).Out(dt, {1}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabReduce, Cases, BenchCases)
