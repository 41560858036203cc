// matmul_lab.cc - cuBLASLt products on CUDA against the CPU reference (OpenBLAS sgemm on fp32
// copies): Gemm (transposes, bias row through the BIAS epilogue, full C with beta), MatMul
// with broadcast batches and 1-D operands, FusedMatMul gradients (stacked along K and the
// general fp32-accumulated reduction), FusedDense with every activation with and without
// cuBLASLt epilogues (and NaN inputs, which the ReLU epilogue must keep like the CPU), and
// FusedDenseGrad.
#include <cmath>

#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    ApxAttrGemm g = {1.0f, 1.0f, 0, 0}, gt = {0.5f, 0.25f, 1, 1};
    v.push_back(LabCase("Gemm_bias_row" + s, APX_OP_Gemm).Attrs(g).In(dt, {67, 129}).In(dt, {129, 33}).In(dt, {33})
                    .Out(dt, {67, 33}).Reduce(129));
    v.push_back(LabCase("Gemm_trans_beta" + s, APX_OP_Gemm).Attrs(gt).In(dt, {129, 67}).In(dt, {33, 129}).In(dt, {67, 33})
                    .Out(dt, {67, 33}).Reduce(129));
    v.push_back(LabCase("Gemm_col_bias" + s, APX_OP_Gemm).Attrs(g).In(dt, {64, 32}).In(dt, {32, 48}).In(dt, {64, 1})
                    .Out(dt, {64, 48}).Reduce(32));
    v.push_back(LabCase("MatMul_fold" + s, APX_OP_MatMul).In(dt, {4, 33, 65}).In(dt, {65, 17}).Out(dt, {4, 33, 17}).Reduce(65));
    v.push_back(LabCase("MatMul_batched" + s, APX_OP_MatMul).In(dt, {3, 33, 65}).In(dt, {3, 65, 17}).Out(dt, {3, 33, 17}).Reduce(65));
    v.push_back(LabCase("MatMul_bcast2d" + s, APX_OP_MatMul).In(dt, {2, 1, 9, 40}).In(dt, {1, 3, 40, 11})
                    .Out(dt, {2, 3, 9, 11}).Reduce(40));
    v.push_back(LabCase("MatMul_vec_left" + s, APX_OP_MatMul).In(dt, {40}).In(dt, {3, 40, 11}).Out(dt, {3, 11}).Reduce(40));
    v.push_back(LabCase("MatMul_vec_right" + s, APX_OP_MatMul).In(dt, {3, 9, 40}).In(dt, {40}).Out(dt, {3, 9}).Reduce(40));
    ApxAttrFusedMatMul ta = {1, 0, 0.5f}, tb = {0, 1, 1.0f}, nn = {0, 0, 2.0f};
    v.push_back(LabCase("FusedMatMul_dW_stacked" + s, APX_OP_FusedMatMul).Attrs(ta).In(dt, {4, 16, 32}).In(dt, {4, 16, 8})
                    .Out(dt, {32, 8}).Reduce(64));
    v.push_back(LabCase("FusedMatMul_dX_transB" + s, APX_OP_FusedMatMul).Attrs(tb).In(dt, {4, 16, 8}).In(dt, {32, 8})
                    .Out(dt, {4, 16, 32}).Reduce(8));
    v.push_back(LabCase("FusedMatMul_reduce_general" + s, APX_OP_FusedMatMul).Attrs(nn).In(dt, {5, 12, 20}).In(dt, {5, 20, 7})
                    .Out(dt, {12, 7}).Reduce(100));
    const char *an[] = {"none", "relu", "gelu", "gelu_tanh"};
    for (int act = APX_ACT_NONE; act <= APX_ACT_GELU_TANH; act++)
      for (int epi_off : {0, 1}) {
        std::string n = std::string("FusedDense_") + an[act] + (epi_off ? "_plain" : "_lt");
        ApxAttrFusedDense a = {0, act, 1.0f, 1.0f};
        LabCase c(n + s, APX_OP_FusedDense);
        c.Attrs(a).In(dt, {3, 22, 96}).In(dt, {96, 64}).In(dt, {64}).Out(dt, {3, 22, 64}).Reduce(96);
        if (act >= APX_ACT_GELU) c.Out(dt, {3, 22, 64});  // Aux for the GELU gradients
        c.no_epilogue = epi_off;
        v.push_back(c);
        ApxAttrFusedDense tw = {1, act, 0.5f, 2.0f};
        LabCase d(n + "_transw_beta" + s, APX_OP_FusedDense);
        d.Attrs(tw).In(dt, {45, 96}).In(dt, {64, 96}).In(dt, {64}).Out(dt, {45, 64}).Out(dt, {45, 64}).Reduce(96);
        d.no_epilogue = epi_off;
        v.push_back(d);
        ApxAttrFusedDense g = {act % 2, act, 1.0f, 1.0f};
        std::vector<int64_t> wd = act % 2 ? std::vector<int64_t>{64, 96} : std::vector<int64_t>{96, 64};
        LabCase gr(std::string("FusedDenseGrad_") + an[act] + (epi_off ? "_b" : "_a") + s, APX_OP_FusedDenseGrad);
        gr.Attrs(g).In(dt, {70, 64}).In(dt, {70, 96}).In(dt, wd).In(dt, {70, 64})
            .Out(dt, {70, 96}).Out(dt, wd).Out(dt, {64}).Reduce(70);
        if (!epi_off) v.push_back(gr);
      }
    for (int act : {APX_ACT_NONE, APX_ACT_RELU, APX_ACT_GELU_TANH}) {  // NaN must propagate
      ApxAttrFusedDense a = {0, act, 1.0f, 1.0f};
      v.push_back(LabCase(std::string("FusedDense_nan_") + an[act] + s, APX_OP_FusedDense).Attrs(a)
                      .In(dt, {40, 32}, Init::kWithNaN).In(dt, {32, 16}).In(dt, {16}).Out(dt, {40, 16}).Reduce(32));
    }
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("MatMul_4096^3" + s, APX_OP_MatMul).In(dt, {4096, 4096}).In(dt, {4096, 4096}).Out(dt, {4096, 4096}));
    for (int act : {APX_ACT_RELU, APX_ACT_GELU_TANH, APX_ACT_GELU}) {
      ApxAttrFusedDense a = {1, act, 1.0f, 1.0f};
      LabCase c("FusedDense_8192x3072x768_act" + std::to_string(act) + s, APX_OP_FusedDense);
      c.Attrs(a).In(dt, {8192, 768}).In(dt, {3072, 768}).In(dt, {3072}).Out(dt, {8192, 3072});
      if (act != APX_ACT_RELU) c.Out(dt, {8192, 3072});
      v.push_back(c);
    }
    ApxAttrFusedDense g = {1, APX_ACT_GELU, 1.0f, 1.0f};
    v.push_back(LabCase("FusedDenseGrad_8192x3072x768" + s, APX_OP_FusedDenseGrad).Attrs(g)
                    .In(dt, {8192, 3072}).In(dt, {8192, 768}).In(dt, {3072, 768}).In(dt, {8192, 3072})
                    .Out(dt, {8192, 768}).Out(dt, {3072, 768}).Out(dt, {3072}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabMatMul, Cases, BenchCases)
