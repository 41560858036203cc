// loss_lab.cc - SoftmaxCrossEntropyLoss (mean / sum / none, weights, ignore_index, log_prob,
// (N, C, D) scores), NegativeLogLikelihoodLoss, FusedXentropy and the gradients on CUDA
// against the CPU reference; short rows (warp per line) and a vocabulary-sized one (block).
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

ApxAttrLoss Loss(int red, int ignore = -1) {
  ApxAttrLoss a;
  memset(&a, 0, sizeof a);
  a.reduction = red;
  a.has_ignore_index = ignore >= 0;
  a.ignore_index = ignore;
  return a;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    const char *rn[] = {"mean", "sum", "none"};
    for (int red : {APX_RED_MEAN, APX_RED_SUM, APX_RED_NONE}) {
      std::vector<int64_t> ls = red == APX_RED_NONE ? std::vector<int64_t>{257} : std::vector<int64_t>{};
      v.push_back(LabCase(std::string("SCE_") + rn[red] + s, APX_OP_SoftmaxCrossEntropyLoss).Attrs(Loss(red, 3))
                      .In(dt, {257, 10}, Init::kUniform, -6, 6).In(APX_DT_I64, {257}, Init::kLabels, 0, 0, 10)
                      .Out(dt, ls).Out(dt, {257, 10}).Reduce(257 * 10));
      v.push_back(LabCase(std::string("SCEGrad_") + rn[red] + s, APX_OP_SoftmaxCrossEntropyLossGrad).Attrs(Loss(red, 3))
                      .In(dt, ls, Init::kPositive, 0, 2).In(dt, {257, 10}, Init::kUniform, -5, -0.1)
                      .In(APX_DT_I64, {257}, Init::kLabels, 0, 0, 10).Out(dt, {257, 10}).Reduce(257));
    }
    v.push_back(LabCase("SCE_weights_NCD" + s, APX_OP_SoftmaxCrossEntropyLoss).Attrs(Loss(APX_RED_MEAN))
                    .In(dt, {6, 7, 13}, Init::kUniform, -6, 6).In(APX_DT_I32, {6, 13}, Init::kLabels, 0, 0, 7)
                    .In(dt, {7}, Init::kPositive, 0, 2).Out(dt, {}).Reduce(6 * 13 * 7));
    v.push_back(LabCase("SCEGrad_weights_NCD" + s, APX_OP_SoftmaxCrossEntropyLossGrad).Attrs(Loss(APX_RED_MEAN))
                    .In(dt, {}, Init::kConst, 1, 1).In(dt, {6, 7, 13}, Init::kUniform, -5, -0.1)
                    .In(APX_DT_I32, {6, 13}, Init::kLabels, 0, 0, 7).In(dt, {7}, Init::kPositive, 0, 2)
                    .Out(dt, {6, 7, 13}).Reduce(6 * 13));
    v.push_back(LabCase("SCE_vocab5000" + s, APX_OP_SoftmaxCrossEntropyLoss).Attrs(Loss(APX_RED_MEAN))
                    .In(dt, {33, 5000}, Init::kUniform, -6, 6).In(APX_DT_I64, {33}, Init::kLabels, 0, 0, 5000)
                    .Out(dt, {}).Reduce(33 * 5000));
    v.push_back(LabCase("NLL_mean" + s, APX_OP_NegativeLogLikelihoodLoss).Attrs(Loss(APX_RED_MEAN, 2))
                    .In(dt, {100, 9}, Init::kUniform, -5, -0.1).In(APX_DT_I64, {100}, Init::kLabels, 0, 0, 9)
                    .Out(dt, {}).Reduce(100));
    v.push_back(LabCase("NLLGrad_sum" + s, APX_OP_NegativeLogLikelihoodLossGrad).Attrs(Loss(APX_RED_SUM))
                    .In(dt, {}, Init::kConst, 0.5, 0.5).In(APX_DT_I64, {100}, Init::kLabels, 0, 0, 9)
                    .Out(dt, {100, 9}));
    v.push_back(LabCase("FusedXentropy" + s, APX_OP_FusedXentropy).Attrs(Loss(APX_RED_MEAN, 1))
                    .In(dt, {129, 1000}, Init::kUniform, -6, 6).In(APX_DT_I64, {129}, Init::kLabels, 0, 0, 1000)
                    .Out(dt, {}).Out(dt, {129}).Reduce(129 * 1000));
    v.push_back(LabCase("FusedXentropyGrad" + s, APX_OP_FusedXentropyGrad).Attrs(Loss(APX_RED_MEAN, 1))
                    .In(dt, {}, Init::kConst, 1, 1).In(dt, {129, 1000}, Init::kUniform, -6, 6)
                    .In(APX_DT_I64, {129}, Init::kLabels, 0, 0, 1000).In(dt, {129}, Init::kUniform, 6, 8)
                    .Out(dt, {129, 1000}).Reduce(129));
  }
  v.push_back(LabCase("FusedXentropy_f16_scores_f32_loss", APX_OP_FusedXentropy).Attrs(Loss(APX_RED_MEAN))
                  .In(APX_DT_F16, {65, 700}, Init::kUniform, -6, 6).In(APX_DT_I64, {65}, Init::kLabels, 0, 0, 700)
                  .Out(APX_DT_F32, {}).Out(APX_DT_F32, {65}).Reduce(65 * 700));
  v.push_back(LabCase("FusedXentropyGrad_f16_scores_f32_dx", APX_OP_FusedXentropyGrad).Attrs(Loss(APX_RED_MEAN))
                  .In(APX_DT_F32, {}, Init::kConst, 1, 1).In(APX_DT_F16, {65, 700}, Init::kUniform, -6, 6)
                  .In(APX_DT_I64, {65}, Init::kLabels, 0, 0, 700).In(APX_DT_F32, {65}, Init::kUniform, 6, 8)
                  .Out(APX_DT_F32, {65, 700}).Reduce(65));
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("FusedXentropy_4096x50257" + s, APX_OP_FusedXentropy).Attrs(Loss(APX_RED_MEAN))
                    .In(dt, {4096, 50257}).In(APX_DT_I64, {4096}, Init::kLabels, 0, 0, 50257).Out(dt, {}).Out(dt, {4096}));
    v.push_back(LabCase("FusedXentropyGrad_4096x50257" + s, APX_OP_FusedXentropyGrad).Attrs(Loss(APX_RED_MEAN))
                    .In(dt, {}, Init::kConst, 1, 1).In(dt, {4096, 50257}).In(APX_DT_I64, {4096}, Init::kLabels, 0, 0, 50257)
                    .In(dt, {4096}, Init::kUniform, 10, 12).Out(dt, {4096, 50257}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabLoss, Cases, BenchCases)
