// elementwise_lab.cc - unary ops, their gradients, broadcast binary ops, Sum and PowGrad on
// CUDA against the CPU reference (lab.h), in fp32 / fp16 / bf16, odd sizes and broadcasts.
#include "kernels/cuda/lab/lab.h"

using lab::Init;
using lab::LabCase;

namespace {

std::vector<LabCase> Cases() {
  std::vector<LabCase> v;
  for (ApxDType dt : lab::FloatTypes()) {
    std::string s = "_" + lab::Short(dt);
    ApxAttrLeakyRelu leaky = {0.1f};
    ApxAttrGelu gelu_erf = {APX_GELU_NONE}, gelu_tanh = {APX_GELU_TANH};
    struct U {
      ApxOp op;
      const char *name;
      Init init;
      const void *attrs;
      size_t attrs_size;
    } unary[] = {
        {APX_OP_Neg, "Neg", Init::kUniform, nullptr, 0},
        {APX_OP_Relu, "Relu", Init::kUniform, nullptr, 0},
        {APX_OP_LeakyRelu, "LeakyRelu", Init::kUniform, &leaky, sizeof leaky},
        {APX_OP_Sigmoid, "Sigmoid", Init::kUniform, nullptr, 0},
        {APX_OP_Tanh, "Tanh", Init::kUniform, nullptr, 0},
        {APX_OP_Gelu, "Gelu", Init::kUniform, &gelu_erf, sizeof gelu_erf},
        {APX_OP_Gelu, "GeluTanh", Init::kUniform, &gelu_tanh, sizeof gelu_tanh},
        {APX_OP_Erf, "Erf", Init::kUniform, nullptr, 0},
        {APX_OP_Sqrt, "Sqrt", Init::kPositive, nullptr, 0},
        {APX_OP_Exp, "Exp", Init::kUniform, nullptr, 0},
        {APX_OP_Log, "Log", Init::kPositive, nullptr, 0},
    };
    for (auto &u : unary) {
      LabCase c(std::string(u.name) + s, u.op);
      if (u.attrs) c.attrs.assign((const uint8_t *)u.attrs, (const uint8_t *)u.attrs + u.attrs_size);
      c.In(dt, {333, 257}, u.init).Out(dt, {333, 257});
      v.push_back(c);
    }
    struct G {
      ApxOp op;
      const char *name;
      Init t_init;
      const void *attrs;
      size_t attrs_size;
    } grads[] = {
        {APX_OP_ReluGrad, "ReluGrad", Init::kUniform, nullptr, 0},
        {APX_OP_LeakyReluGrad, "LeakyReluGrad", Init::kUniform, &leaky, sizeof leaky},
        {APX_OP_SigmoidGrad, "SigmoidGrad", Init::kPositive, nullptr, 0},
        {APX_OP_TanhGrad, "TanhGrad", Init::kUniform, nullptr, 0},
        {APX_OP_GeluGrad, "GeluGrad", Init::kUniform, &gelu_erf, sizeof gelu_erf},
        {APX_OP_GeluGrad, "GeluTanhGrad", Init::kUniform, &gelu_tanh, sizeof gelu_tanh},
        {APX_OP_ErfGrad, "ErfGrad", Init::kUniform, nullptr, 0},
        {APX_OP_SqrtGrad, "SqrtGrad", Init::kPositive, nullptr, 0},
    };
    for (auto &g : grads) {
      LabCase c(std::string(g.name) + s, g.op);
      if (g.attrs) c.attrs.assign((const uint8_t *)g.attrs, (const uint8_t *)g.attrs + g.attrs_size);
      c.In(dt, {1001, 129}).In(dt, {1001, 129}, g.t_init).Out(dt, {1001, 129});
      v.push_back(c);
    }
    const ApxOp bin[] = {APX_OP_Add, APX_OP_Sub, APX_OP_Mul, APX_OP_Div, APX_OP_Pow};
    for (ApxOp op : bin) {
      Init a = op == APX_OP_Pow ? Init::kPositive : Init::kUniform;
      Init b = op == APX_OP_Div ? Init::kPositive : Init::kUniform;
      v.push_back(LabCase(std::string(apx_op_name(op)) + "_contig" + s, op)
                      .In(dt, {513, 129}, a).In(dt, {513, 129}, b).Out(dt, {513, 129}));
      v.push_back(LabCase(std::string(apx_op_name(op)) + "_bcast" + s, op)
                      .In(dt, {4, 1, 33}, a).In(dt, {5, 33}, b).Out(dt, {4, 5, 33}));
      v.push_back(LabCase(std::string(apx_op_name(op)) + "_scalar" + s, op)
                      .In(dt, {3, 7, 65}, a).In(dt, {}, b).Out(dt, {3, 7, 65}));
    }
    v.push_back(LabCase("Pow_int_exponent" + s, APX_OP_Pow)
                    .In(dt, {7, 65}, Init::kPositive, 0, 3).In(APX_DT_I64, {65}, Init::kIndices, 0, 0, 4)
                    .Out(dt, {7, 65}));
    v.push_back(LabCase("Sum3_bcast" + s, APX_OP_Sum)
                    .In(dt, {16, 33}).In(dt, {33}).In(dt, {16, 1}).Out(dt, {16, 33}));
    v.push_back(LabCase("PowGrad_reduced" + s, APX_OP_PowGrad)
                    .In(dt, {8, 16, 33})
                    .In(dt, {16, 33}, Init::kPositive)
                    .In(dt, {33}, Init::kUniform, -2, 2)
                    .Out(dt, {16, 33})
                    .Out(dt, {33})
                    .Reduce(8 * 16));
  }
  return v;
}

std::vector<LabCase> BenchCases() {
  std::vector<LabCase> v;
  for (ApxDType dt : {APX_DT_F32, APX_DT_F16}) {
    std::string s = "_" + lab::Short(dt);
    v.push_back(LabCase("Add_contig_16M" + s, APX_OP_Add).In(dt, {4096, 4096}).In(dt, {4096, 4096}).Out(dt, {4096, 4096}));
    v.push_back(LabCase("Add_bias_16M" + s, APX_OP_Add).In(dt, {4096, 4096}).In(dt, {4096}).Out(dt, {4096, 4096}));
    v.push_back(LabCase("Relu_16M" + s, APX_OP_Relu).In(dt, {4096, 4096}).Out(dt, {4096, 4096}));
    ApxAttrGelu g = {APX_GELU_NONE};
    v.push_back(LabCase("GeluGrad_16M" + s, APX_OP_GeluGrad).Attrs(g).In(dt, {4096, 4096}).In(dt, {4096, 4096}).Out(dt, {4096, 4096}));
  }
  return v;
}

}  // namespace

LAB_FAMILY(LabElementwise, Cases, BenchCases)
