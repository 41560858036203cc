// training_lab.cc - the training-step ops on CUDA against the CPU reference: LossScaleSeed,
// AssignState (convert, fill), UnscaleCheck over several gradients of mixed types (finite and
// with an inf: found_inf and first_bad must match exactly), OptimizerStep SGD (momentum,
// Nesterov, weight decay), AdamW and LAMB with fp32 masters refreshing fp16 copies, clipping,
// and a skipped (overflow) step that must change nothing.
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

ApxAttrOptimizer Optim(int kind, int n, float momentum, int mw, float clip) {
  ApxAttrOptimizer a;
  memset(&a, 0, sizeof a);
  a.kind = kind;
  a.n_params = n;
  a.lr = 0.01f;
  a.momentum = momentum;
  a.beta1 = 0.9f;
  a.beta2 = 0.999f;
  a.eps = 1e-8f;
  a.weight_decay = 0.01f;
  a.dampening = 0.f;
  a.nesterov = momentum != 0;
  a.master_weights = mw;
  a.max_grad_norm = clip;
  return a;
}

// OptimizerStep(found_inf, norm_sq, lr, step, P[n], G[n], S..., H[n]?) with n parameters of
// the given sizes (one of them spanning several 64K-element chunks).
LabCase Step(const std::string &name, int kind, float momentum, int mw, float clip, float found) {
  std::vector<std::vector<int64_t>> shapes = {{300, 700}, {17}, {64, 64}, {1}, {5000}};
  int n = (int)shapes.size();
  int k = kind == APX_OPTIM_SGD ? (momentum != 0 ? 1 : 0) : 2;
  LabCase c(name, APX_OP_OptimizerStep);
  c.Attrs(Optim(kind, n, momentum, mw, clip));
  c.In(APX_DT_F32, {1}, Init::kConst, found, found)
      .In(APX_DT_F32, {1}, Init::kConst, 40, 40)
      .In(APX_DT_F32, {1}, Init::kConst, 0.01, 0.01)
      .In(APX_DT_I64, {1}, Init::kConst, 4, 4);
  for (auto &s : shapes) c.In(APX_DT_F32, s, Init::kUniform, -1, 1);                  // P
  for (auto &s : shapes) c.In(APX_DT_F32, s, Init::kUniform, -0.1, 0.1);              // G
  for (int j = 0; j < k; j++)
    for (auto &s : shapes) c.In(APX_DT_F32, s, Init::kUniform, j ? 0 : -0.01, 0.01);  // S (v >= 0)
  if (mw)
    for (auto &s : shapes) c.In(APX_DT_F16, s, Init::kZero);                           // H
  c.compare_inputs = true;
  c.K = 300 * 700;  // LAMB's norms
  return c;
}

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  ApxAttrLossScaleSeed seed = {0.25f};
  v.push_back(LabCase("LossScaleSeed", APX_OP_LossScaleSeed).Attrs(seed).In(APX_DT_F32, {})
                  .In(APX_DT_F32, {1}, Init::kConst, 65536, 65536).Out(APX_DT_F32, {}));
  v.push_back(LabCase("AssignState_convert", APX_OP_AssignState).In(APX_DT_F16, {7, 9}).In(APX_DT_F32, {7, 9}, Init::kZero)
                  .compare_inputs_(true));
  v.push_back(LabCase("AssignState_fill", APX_OP_AssignState).In(APX_DT_F32, {1}, Init::kConst, 0, 0)
                  .In(APX_DT_F32, {333}).compare_inputs_(true));
  for (int overflow : {0, 1}) {  // overflow: g_1 holds values near FLT_MAX, g_1 / 0.5 is inf
    float scale = overflow ? 0.5f : 1024.0f;
    double big = overflow ? 3e38 : 2;
    LabCase c(std::string("UnscaleCheck_") + (overflow ? "overflow" : "finite"), APX_OP_UnscaleCheck);
    c.In(APX_DT_F32, {1}, Init::kConst, scale, scale)
        .In(APX_DT_F16, {300, 700}).In(APX_DT_F32, {17}, Init::kUniform, -big, big).In(APX_DT_BF16, {70000})
        .In(APX_DT_F32, {3, 3});
    c.Out(APX_DT_F32, {1}).Out(APX_DT_I32, {1}).Out(APX_DT_F32, {1});
    c.Out(APX_DT_F32, {300, 700}).Out(APX_DT_F32, {17}).Out(APX_DT_F32, {70000}).Out(APX_DT_F32, {3, 3});
    c.K = 300 * 700 + 17 + 70000 + 9;
    v.push_back(c);
  }
  v.push_back(Step("SGD_momentum_nesterov_clip", APX_OPTIM_SGD, 0.9f, 0, 1.0f, 0));
  v.push_back(Step("SGD_plain_masters", APX_OPTIM_SGD, 0.0f, 1, 0.0f, 0));
  v.push_back(Step("AdamW_masters", APX_OPTIM_ADAMW, 0, 1, 0.0f, 0));
  v.push_back(Step("AdamW_clip", APX_OPTIM_ADAMW, 0, 0, 0.5f, 0));
  v.push_back(Step("LAMB_masters", APX_OPTIM_LAMB, 0, 1, 0.0f, 0));
  v.push_back(Step("AdamW_skipped_step", APX_OPTIM_ADAMW, 0, 1, 0.0f, 1));
  return v;
}

std::vector<LabCase> BenchCases() {
  // 8 tensors of 16M parameters: one multi-tensor AdamW step with fp16 copies
  LabCase c("AdamW_masters_128M", APX_OP_OptimizerStep);
  int n = 8;
  c.Attrs(Optim(APX_OPTIM_ADAMW, n, 0, 1, 0));
  c.In(APX_DT_F32, {1}, Init::kZero).In(APX_DT_F32, {1}, Init::kConst, 1, 1).In(APX_DT_F32, {1}, Init::kConst, 1e-3, 1e-3)
      .In(APX_DT_I64, {1}, Init::kZero);
  for (int j = 0; j < 5 * n; j++) c.In(j < 4 * n ? APX_DT_F32 : APX_DT_F16, {1 << 24}, Init::kPositive, 0, 1);
  LabCase u("UnscaleCheck_128M_f16", APX_OP_UnscaleCheck);
  u.In(APX_DT_F32, {1}, Init::kConst, 1024, 1024);
  for (int j = 0; j < n; j++) u.In(APX_DT_F16, {1 << 24});
  u.Out(APX_DT_F32, {1}).Out(APX_DT_I32, {1}).Out(APX_DT_F32, {1});
  for (int j = 0; j < n; j++) u.Out(APX_DT_F32, {1 << 24});
  return {c, u};
}

}  // namespace

LAB_FAMILY(LabTraining, Cases, BenchCases)
