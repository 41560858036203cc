// resample_lab.cc - the v1.1 resampling and contraction kernels on CUDA against the CPU
// reference (resample.cu vs kernels/cpu/resample.c): Resize nearest (each nearest_mode and
// coordinate mode, upsampling and downsampling) and linear (half_pixel, align_corners,
// pytorch_half_pixel, non-integer scales), ResizeGrad (the scatter of the same weights:
// upsampling sums several dY per dX), and Einsum in the forms exporters emit (batched
// product, attention scores, transpose, row dot, outer product) plus a diagonal and a
// pre-shaped gradient form (a label of no input, a repeated output label).
#include "kernels/cuda/lab/lab.h"
#include "kernels/resample_plan.h"

using lab::LabCase;

namespace {

ApxAttrResize Rs(int mode, int coord, int nearest, std::vector<double> scales) {
  ApxAttrResize a;
  memset(&a, 0, sizeof a);
  a.mode = mode, a.coord = coord, a.nearest_mode = nearest, a.rank = (int32_t)scales.size();
  for (size_t i = 0; i < scales.size(); i++) a.scales[i] = scales[i];
  return a;
}

ApxAttrEinsum Eq(const char *eq) {
  ApxAttrEinsum e;
  int n;
  char err[128];
  memset(&e, 0, sizeof e);
  EXPECT_EQ(apx_einsum_parse(eq, &e, &n, err, sizeof err), 0) << err;
  return e;
}

// A gradient-rule form: terms set directly (labels of no input / repeated output labels).
ApxAttrEinsum Terms(const char *a, const char *b, const char *y) {
  ApxAttrEinsum e;
  memset(&e, 0, sizeof e);
  for (e.n_a = 0; a[e.n_a]; e.n_a++) e.a[e.n_a] = a[e.n_a];
  for (e.n_b = 0; b[e.n_b]; e.n_b++) e.b[e.n_b] = b[e.n_b];
  for (e.n_y = 0; y[e.n_y]; e.n_y++) e.y[e.n_y] = y[e.n_y];
  return e;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Resize_nearest_half_pixel_up" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_NEAREST, APX_RESIZE_HALF_PIXEL, APX_RESIZE_ROUND_PREFER_FLOOR, {1, 3, 2, 3}))
                    .In(dt, {2, 5, 33, 20}).Out(dt, {2, 15, 66, 60}));
    v.push_back(LabCase("Resize_nearest_asymmetric_ceil_down" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_NEAREST, APX_RESIZE_ASYMMETRIC, APX_RESIZE_CEIL, {1, 1, 0.6, 0.5}))
                    .In(dt, {3, 4, 50, 61}).Out(dt, {3, 4, 30, 30}));
    v.push_back(LabCase("Resize_nearest_align_corners_prefer_ceil" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_NEAREST, APX_RESIZE_ALIGN_CORNERS, APX_RESIZE_ROUND_PREFER_CEIL, {1, 1, 2.5, 1.75}))
                    .In(dt, {2, 3, 20, 16}).Out(dt, {2, 3, 50, 28}));
    v.push_back(LabCase("Resize_linear_half_pixel_up2" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_HALF_PIXEL, 0, {1, 1, 2, 2}))
                    .In(dt, {2, 16, 31, 29}).Out(dt, {2, 16, 62, 58}));
    v.push_back(LabCase("Resize_linear_align_corners_down" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_ALIGN_CORNERS, 0, {1, 1, 0.5, 0.75}))
                    .In(dt, {2, 8, 64, 40}).Out(dt, {2, 8, 32, 30}));
    v.push_back(LabCase("Resize_linear_pytorch_half_pixel_1d" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_PYTORCH_HALF_PIXEL, 0, {1, 1, 37.0 / 13.0}))
                    .In(dt, {4, 30, 13}).Out(dt, {4, 30, 37}));
    v.push_back(LabCase("ResizeGrad_linear_half_pixel_up2" + s, APX_OP_ResizeGrad)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_HALF_PIXEL, 0, {1, 1, 2, 2}))
                    .In(dt, {2, 16, 62, 58}).Out(dt, {2, 16, 31, 29}).Reduce(16));
    v.push_back(LabCase("ResizeGrad_linear_align_corners_down" + s, APX_OP_ResizeGrad)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_ALIGN_CORNERS, 0, {1, 1, 0.5, 0.75}))
                    .In(dt, {2, 8, 32, 30}).Out(dt, {2, 8, 64, 40}).Reduce(4));
    v.push_back(LabCase("ResizeGrad_nearest_up3" + s, APX_OP_ResizeGrad)
                    .Attrs(Rs(APX_RESIZE_NEAREST, APX_RESIZE_ASYMMETRIC, APX_RESIZE_FLOOR, {1, 1, 3, 3}))
                    .In(dt, {2, 4, 60, 45}).Out(dt, {2, 4, 20, 15}).Reduce(9));
    v.push_back(LabCase("Einsum_bij_bjk" + s, APX_OP_Einsum).Attrs(Eq("bij,bjk->bik"))
                    .In(dt, {3, 33, 64}).In(dt, {3, 64, 17}).Out(dt, {3, 33, 17}).Reduce(64));
    v.push_back(LabCase("Einsum_bhid_bhjd" + s, APX_OP_Einsum).Attrs(Eq("bhid,bhjd->bhij"))
                    .In(dt, {2, 4, 31, 32}).In(dt, {2, 4, 29, 32}).Out(dt, {2, 4, 31, 29}).Reduce(32));
    v.push_back(LabCase("Einsum_transpose" + s, APX_OP_Einsum).Attrs(Eq("ij->ji"))
                    .In(dt, {67, 129}).Out(dt, {129, 67}));
    v.push_back(LabCase("Einsum_row_dot" + s, APX_OP_Einsum).Attrs(Eq("bi,bi->b"))
                    .In(dt, {77, 300}).In(dt, {77, 300}).Out(dt, {77}).Reduce(300));
    v.push_back(LabCase("Einsum_outer" + s, APX_OP_Einsum).Attrs(Eq("i,j->ij"))
                    .In(dt, {65}).In(dt, {130}).Out(dt, {65, 130}));
    v.push_back(LabCase("Einsum_trace_rows" + s, APX_OP_Einsum).Attrs(Eq("bii->b"))
                    .In(dt, {9, 40, 40}).Out(dt, {9}).Reduce(40));
    v.push_back(LabCase("Einsum_grad_broadcast_diagonal" + s, APX_OP_Einsum).Attrs(Terms("i", "", "iij"))
                    .In(dt, {33}).Out(dt, {33, 33, 5}));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Resize_linear_up2_8x64x128x128" + s, APX_OP_Resize)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_HALF_PIXEL, 0, {1, 1, 2, 2}))
                    .In(dt, {8, 64, 128, 128}).Out(dt, {8, 64, 256, 256}));
    v.push_back(LabCase("ResizeGrad_linear_up2_8x64x128x128" + s, APX_OP_ResizeGrad)
                    .Attrs(Rs(APX_RESIZE_LINEAR, APX_RESIZE_HALF_PIXEL, 0, {1, 1, 2, 2}))
                    .In(dt, {8, 64, 256, 256}).Out(dt, {8, 64, 128, 128}));
    v.push_back(LabCase("Einsum_bhid_bhjd_8x12x128x64" + s, APX_OP_Einsum).Attrs(Eq("bhid,bhjd->bhij"))
                    .In(dt, {8, 12, 128, 64}).In(dt, {8, 12, 128, 64}).Out(dt, {8, 12, 128, 128}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabResample, Cases, BenchCases)
