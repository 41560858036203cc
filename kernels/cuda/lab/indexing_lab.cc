// indexing_lab.cc - the v1.1 data-movement, indexing and reduction kernels on CUDA against the
// CPU reference: Pad in its three modes (negative pads, reflection wider than the input),
// PadGrad, Tile, Trilu, GatherElements and GatherND (negative indices, batch_dims) with their
// scatter-add gradients (repeated indices: the CUDA sums must equal the CPU's in-order fp32
// sums), ReduceMax (rows, columns, all, NaN), ReduceMaxGrad (ties share the gradient) and
// RandomUniformLike (the same Philox draws on both backends).
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

ApxAttrPad Pads(int mode, std::vector<int64_t> begins, std::vector<int64_t> ends) {
  ApxAttrPad a;
  memset(&a, 0, sizeof a);
  a.mode = mode;
  a.rank = (int32_t)begins.size();
  for (size_t i = 0; i < begins.size(); i++) a.begins[i] = begins[i], a.ends[i] = ends[i];
  a.value = 1;  // the element with bytes 01 00 ..: small but distinct in every dtype
  return a;
}

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
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16, APX_DT_BF16, APX_DT_I64, APX_DT_BOOL, APX_DT_F64}) {
    std::string s = "_" + lab::Short(dt);
    Init in = dt == APX_DT_BOOL ? Init::kBool : dt == APX_DT_I64 ? Init::kIndices : Init::kUniform;
    int64_t p = 1000;
    const char *modes[] = {"constant", "reflect", "edge"};
    for (int m = 0; m < 3; m++)
      v.push_back(LabCase(std::string("Pad_") + modes[m] + s, APX_OP_Pad).Attrs(Pads(m, {1, -2, 40}, {2, 3, 35}))
                      .In(dt, {5, 67, 33}, in, 0, 0, p).Out(dt, {8, 68, 108}));
    ApxAttrTile t;
    memset(&t, 0, sizeof t);
    t.rank = 3, t.repeats[0] = 2, t.repeats[1] = 3, t.repeats[2] = 1;
    v.push_back(LabCase("Tile" + s, APX_OP_Tile).Attrs(t).In(dt, {3, 50, 7}, in, 0, 0, p).Out(dt, {6, 150, 7}));
    ApxAttrTrilu up = {1, 3}, lo = {0, -5};
    v.push_back(LabCase("Trilu_upper" + s, APX_OP_Trilu).Attrs(up).In(dt, {4, 67, 129}, in, 0, 0, p).Out(dt, {4, 67, 129}));
    v.push_back(LabCase("Trilu_lower" + s, APX_OP_Trilu).Attrs(lo).In(dt, {67, 129}, in, 0, 0, p).Out(dt, {67, 129}));
    ApxAttrAxis ax1 = {1};
    v.push_back(LabCase("GatherElements_axis1" + s, APX_OP_GatherElements).Attrs(ax1).In(dt, {6, 50, 7}, in, 0, 0, p)
                    .In(APX_DT_I64, {6, 80, 5}, Init::kIndices, 0, 0, 50).Out(dt, {6, 80, 5}));
    ApxAttrGatherND b1 = {1};
    v.push_back(LabCase("GatherND_batch1" + s, APX_OP_GatherND).Attrs(b1).In(dt, {8, 6, 6, 33}, in, 0, 0, p)
                    .In(APX_DT_I64, {8, 40, 2}, Init::kIndices, 0, 0, 6).Out(dt, {8, 40, 33}));
  }
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("PadGrad_reflect_wide" + s, APX_OP_PadGrad).Attrs(Pads(APX_PAD_REFLECT, {2, 9}, {1, 12}))
                    .In(dt, {11, 28}).Out(dt, {8, 7}).Reduce(8));
    v.push_back(LabCase("PadGrad_edge" + s, APX_OP_PadGrad).Attrs(Pads(APX_PAD_EDGE, {3, -1}, {4, 20}))
                    .In(dt, {37, 79}).Out(dt, {30, 60}).Reduce(64));
    v.push_back(LabCase("PadGrad_constant" + s, APX_OP_PadGrad).Attrs(Pads(APX_PAD_CONSTANT, {1, 0, -3}, {0, 2, 5}))
                    .In(dt, {5, 9, 66}).Out(dt, {4, 7, 64}));
    ApxAttrAxis ax1 = {1};
    v.push_back(LabCase("GatherElementsGrad_axis1" + s, APX_OP_GatherElementsGrad).Attrs(ax1).In(dt, {6, 80, 5})
                    .In(APX_DT_I64, {6, 80, 5}, Init::kIndices, 0, 0, 50).Out(dt, {6, 50, 7}).Reduce(80));
    ApxAttrGatherND b0 = {0}, b1 = {1};
    v.push_back(LabCase("GatherNDGrad_rows" + s, APX_OP_GatherNDGrad).Attrs(b0).In(dt, {300, 48})
                    .In(APX_DT_I64, {300, 1}, Init::kIndices, 0, 0, 20).Out(dt, {20, 48}).Reduce(300));
    v.push_back(LabCase("GatherNDGrad_batch1" + s, APX_OP_GatherNDGrad).Attrs(b1).In(dt, {8, 40, 33})
                    .In(APX_DT_I64, {8, 40, 2}, Init::kIndices, 0, 0, 6).Out(dt, {8, 6, 6, 33}).Reduce(40));
    v.push_back(LabCase("ReduceMax_rows" + s, APX_OP_ReduceMax).Attrs(Axes({1})).In(dt, {77, 1000}).Out(dt, {77, 1}));
    v.push_back(LabCase("ReduceMax_cols" + s, APX_OP_ReduceMax).Attrs(Axes({0})).In(dt, {1000, 77}).Out(dt, {1, 77}));
    v.push_back(LabCase("ReduceMax_mixed" + s, APX_OP_ReduceMax).Attrs(Axes({0, 2}, 0)).In(dt, {8, 16, 32, 5})
                    .Out(dt, {16, 5}));
    v.push_back(LabCase("ReduceMax_all_nan" + s, APX_OP_ReduceMax).Attrs(Axes({})).In(dt, {300001}, Init::kWithNaN)
                    .Out(dt, {1}));
    // integer-valued X in [-3, 3) and Y = 2: most groups have several maxima sharing dY
    v.push_back(LabCase("ReduceMaxGrad_ties" + s, APX_OP_ReduceMaxGrad).Attrs(Axes({1})).In(dt, {77, 1})
                    .In(dt, {77, 1000}, Init::kSmallInts, 0, 0, 3).In(dt, {77, 1}, Init::kConst, 2, 2)
                    .Out(dt, {77, 1000}));
    v.push_back(LabCase("ReduceMaxGrad_cols" + s, APX_OP_ReduceMaxGrad).Attrs(Axes({0}, 0)).In(dt, {77})
                    .In(dt, {40, 77}, Init::kSmallInts, 0, 0, 2).In(dt, {77}, Init::kConst, 1, 1).Out(dt, {40, 77}));
    ApxAttrRandomUniform r;
    memset(&r, 0, sizeof r);
    r.dtype = dt, r.low = -1.5f, r.high = 4.0f, r.rng_stream = 12;
    v.push_back(LabCase("RandomUniformLike_run_seed" + s, APX_OP_RandomUniformLike).Attrs(r).In(APX_DT_I64, {4097}, Init::kZero)
                    .Out(dt, {4097}));
    r.has_seed = 1, r.seed = 42.0f;
    v.push_back(LabCase("RandomUniformLike_seed_attr" + s, APX_OP_RandomUniformLike).Attrs(r).In(dt, {3, 1001})
                    .Out(dt, {3, 1001}));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Pad_constant_8x512x768" + s, APX_OP_Pad).Attrs(Pads(APX_PAD_CONSTANT, {0, 0, 0}, {0, 1, 0}))
                    .In(dt, {8, 512, 768}).Out(dt, {8, 513, 768}));
    v.push_back(LabCase("ReduceMax_rows_8192x4096" + s, APX_OP_ReduceMax).Attrs(Axes({1})).In(dt, {8192, 4096})
                    .Out(dt, {8192, 1}));
    ApxAttrAxis ax1 = {1};
    v.push_back(LabCase("GatherElements_8x512x768" + s, APX_OP_GatherElements).Attrs(ax1).In(dt, {8, 512, 768})
                    .In(APX_DT_I64, {8, 512, 768}, Init::kIndices, 0, 0, 512).Out(dt, {8, 512, 768}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabIndexing, Cases, BenchCases)
