// norm_lab.cc - LayerNormalization and its gradient, BatchNormalization (training and
// inference, with running statistics), BatchNormRelu and the BatchNorm gradients on CUDA
// against the CPU reference.
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    ApxAttrLayerNorm ln = {1, 1e-5f, 1};
    v.push_back(LabCase("LayerNorm_768" + s, APX_OP_LayerNormalization).Attrs(ln)
                    .In(dt, {67, 768}).In(dt, {768}).In(dt, {768})
                    .Out(dt, {67, 768}).Out(APX_DT_F32, {67, 1}).Out(APX_DT_F32, {67, 1}).Reduce(768));
    ApxAttrLayerNorm ln2 = {2, 1e-5f, 1};
    v.push_back(LabCase("LayerNorm_axis2_nobias" + s, APX_OP_LayerNormalization).Attrs(ln2)
                    .In(dt, {3, 5, 4, 32}).In(dt, {4, 32}).Absent()
                    .Out(dt, {3, 5, 4, 32}).Reduce(128));
    v.push_back(LabCase("LayerNormGrad_768" + s, APX_OP_LayerNormGrad).Attrs(ln)
                    .In(dt, {67, 768}).In(dt, {67, 768}).In(dt, {768})
                    .In(APX_DT_F32, {67, 1}, Init::kUniform, -0.5, 0.5).In(APX_DT_F32, {67, 1}, Init::kPositive, 0, 2)
                    .Out(dt, {67, 768}).Out(dt, {768}).Out(dt, {768}).Reduce(768));
    v.push_back(LabCase("LayerNormGrad_dx_only" + s, APX_OP_LayerNormGrad).Attrs(ln)
                    .In(dt, {16, 4099}).In(dt, {16, 4099}).In(dt, {4099})
                    .In(APX_DT_F32, {16, 1}).In(APX_DT_F32, {16, 1}, Init::kPositive, 0, 2)
                    .Out(dt, {16, 4099}).Reduce(4099));
    for (int train : {1, 0})
      for (ApxOp op : {APX_OP_BatchNormalization, APX_OP_BatchNormRelu}) {
        ApxAttrBatchNorm bn = {1e-5f, 0.9f, train, 0};
        LabCase c(std::string(apx_op_name(op)) + (train ? "_train" : "_infer") + s, op);
        c.Attrs(bn).In(dt, {8, 16, 7, 9}).In(dt, {16}).In(dt, {16}).In(dt, {16}).In(dt, {16}, Init::kPositive, 0, 2)
            .Out(dt, {8, 16, 7, 9}).Out(dt, {16}).Out(dt, {16}).Reduce(8 * 63);
        if (train) c.Out(dt, {16}).Out(dt, {16});
        v.push_back(c);
      }
    ApxAttrBatchNorm bn2d = {1e-5f, 0.9f, 1, 0};
    v.push_back(LabCase("BatchNorm_2d_train" + s, APX_OP_BatchNormalization).Attrs(bn2d)
                    .In(dt, {1000, 24}).In(dt, {24}).In(dt, {24}).In(dt, {24}).In(dt, {24}, Init::kPositive, 0, 2)
                    .Out(dt, {1000, 24}).Out(dt, {24}).Out(dt, {24}).Out(dt, {24}).Out(dt, {24}).Reduce(1000));
    // PyTorch's running variance (x n / (n - 1)), n = 3 * 2 per channel: the factor shows
    ApxAttrBatchNorm bnu = {1e-5f, 0.9f, 1, 1};
    v.push_back(LabCase("BatchNorm_train_unbiased_var" + s, APX_OP_BatchNormalization).Attrs(bnu)
                    .In(dt, {3, 16, 2}).In(dt, {16}).In(dt, {16}).In(dt, {16}).In(dt, {16}, Init::kPositive, 0, 2)
                    .Out(dt, {3, 16, 2}).Out(dt, {16}).Out(dt, {16}).Out(dt, {16}).Out(dt, {16}).Reduce(6));
    for (int train : {1, 0}) {
      ApxAttrBatchNorm bn = {1e-5f, 0.9f, train, 0};
      v.push_back(LabCase(std::string("BatchNormGrad") + (train ? "_train" : "_infer") + s, APX_OP_BatchNormGrad).Attrs(bn)
                      .In(dt, {8, 16, 7, 9}).In(dt, {8, 16, 7, 9}).In(dt, {16}).In(dt, {16}, Init::kUniform, -0.2, 0.2)
                      .In(dt, {16}, Init::kPositive, 0, 2)
                      .Out(dt, {8, 16, 7, 9}).Out(dt, {16}).Out(dt, {16}).Reduce(8 * 63));
    }
    ApxAttrBatchNorm bn = {1e-5f, 0.9f, 1, 0};
    v.push_back(LabCase("BatchNormReluGrad" + s, APX_OP_BatchNormReluGrad).Attrs(bn)
                    .In(dt, {4, 8, 11, 5}).In(dt, {4, 8, 11, 5}).In(dt, {4, 8, 11, 5}).In(dt, {8})
                    .In(dt, {8}, Init::kUniform, -0.2, 0.2).In(dt, {8}, Init::kPositive, 0, 2)
                    .Out(dt, {4, 8, 11, 5}).Out(dt, {8}).Out(dt, {8}).Reduce(4 * 55));
  }
  // outputs rounded to another float type than the inputs (a Cast folded in: fuse_casts)
  ApxAttrLayerNorm ln = {1, 1e-5f, 1};
  v.push_back(LabCase("LayerNorm_f32_to_f16", APX_OP_LayerNormalization).Attrs(ln)
                  .In(APX_DT_F32, {33, 256}).In(APX_DT_F32, {256}).In(APX_DT_F32, {256})
                  .Out(APX_DT_F16, {33, 256}).Out(APX_DT_F32, {33, 1}).Out(APX_DT_F32, {33, 1}).Reduce(256));
  v.push_back(LabCase("LayerNormGrad_f16dy_to_bf16", APX_OP_LayerNormGrad).Attrs(ln)
                  .In(APX_DT_F16, {33, 256}).In(APX_DT_F32, {33, 256}).In(APX_DT_F32, {256})
                  .In(APX_DT_F32, {33, 1}).In(APX_DT_F32, {33, 1}, Init::kPositive, 0, 2)
                  .Out(APX_DT_BF16, {33, 256}).Out(APX_DT_F32, {256}).Out(APX_DT_F32, {256}).Reduce(256));
  ApxAttrBatchNorm bnr = {1e-5f, 0.9f, 1, 0};
  v.push_back(LabCase("BatchNormRelu_f32_to_f16", APX_OP_BatchNormRelu).Attrs(bnr)
                  .In(APX_DT_F32, {4, 8, 5, 5}).In(APX_DT_F32, {8}).In(APX_DT_F32, {8}).In(APX_DT_F32, {8})
                  .In(APX_DT_F32, {8}, Init::kPositive, 0, 2)
                  .Out(APX_DT_F16, {4, 8, 5, 5}).Out(APX_DT_F32, {8}).Out(APX_DT_F32, {8}).Reduce(100));
  v.push_back(LabCase("BatchNormReluGrad_mixed", APX_OP_BatchNormReluGrad).Attrs(bnr)
                  .In(APX_DT_F16, {4, 8, 5, 5}).In(APX_DT_F16, {4, 8, 5, 5}).In(APX_DT_F32, {4, 8, 5, 5})
                  .In(APX_DT_F32, {8}).In(APX_DT_F32, {8}, Init::kUniform, -0.2, 0.2)
                  .In(APX_DT_F32, {8}, Init::kPositive, 0, 2)
                  .Out(APX_DT_F32, {4, 8, 5, 5}).Out(APX_DT_F32, {8}).Out(APX_DT_F32, {8}).Reduce(100));
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  ApxAttrLayerNorm ln = {1, 1e-5f, 1};
  ApxAttrBatchNorm bn = {1e-5f, 0.9f, 1, 0};
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("LayerNorm_16384x1024" + s, APX_OP_LayerNormalization).Attrs(ln)
                    .In(dt, {16384, 1024}).In(dt, {1024}).In(dt, {1024})
                    .Out(dt, {16384, 1024}).Out(APX_DT_F32, {16384, 1}).Out(APX_DT_F32, {16384, 1}));
    v.push_back(LabCase("LayerNormGrad_16384x1024" + s, APX_OP_LayerNormGrad).Attrs(ln)
                    .In(dt, {16384, 1024}).In(dt, {16384, 1024}).In(dt, {1024}).In(APX_DT_F32, {16384, 1})
                    .In(APX_DT_F32, {16384, 1}, Init::kPositive, 0, 2)
                    .Out(dt, {16384, 1024}).Out(dt, {1024}).Out(dt, {1024}));
    v.push_back(LabCase("BatchNorm_train_64x128x56x56" + s, APX_OP_BatchNormalization).Attrs(bn)
                    .In(dt, {64, 128, 56, 56}).In(dt, {128}).In(dt, {128}).In(dt, {128}).In(dt, {128}, Init::kPositive, 0, 2)
                    .Out(dt, {64, 128, 56, 56}).Out(dt, {128}).Out(dt, {128}).Out(dt, {128}).Out(dt, {128}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabNorm, Cases, BenchCases)
