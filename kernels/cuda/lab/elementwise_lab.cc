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
    // Every unary op and unary gradient op the CUDA backend runs by the op table (ops.def
    // kinds EW_UNARY, EW_UNARY_GRAD; Neg and Relu), with default attributes, plus the
    // attribute variants below. Inputs whose domain is restricted start positive.
    auto positive = [](ApxOp op) {
      return op == APX_OP_Sqrt || op == APX_OP_Log || op == APX_OP_SqrtGrad ||
             op == APX_OP_SigmoidGrad;
    };
    auto unary_case = [&](ApxOp op, const std::string &name, const std::vector<uint8_t> &attrs) {
      LabCase c(name + s, op);
      c.attrs = attrs;
      if (apx_op_info(op)->kind == APX_KIND_EW_UNARY_GRAD)
        c.In(dt, {1001, 129}).In(dt, {1001, 129}, positive(op) ? Init::kPositive : Init::kUniform)
            .Out(dt, {1001, 129});
      else
        c.In(dt, {333, 257}, positive(op) ? Init::kPositive : Init::kUniform).Out(dt, {333, 257});
      v.push_back(c);
    };
    for (int i = 1; i < APX_OP_COUNT; i++) {
      ApxOp op = (ApxOp)i;
      uint8_t kind = apx_op_info(op)->kind;
      if (kind != APX_KIND_EW_UNARY && kind != APX_KIND_EW_UNARY_GRAD && op != APX_OP_Neg &&
          op != APX_OP_Relu)
        continue;
      std::vector<uint8_t> attrs(apx_op_attrs(op)->size);
      apx_attrs_defaults(op, attrs.data());
      unary_case(op, apx_op_name(op), attrs);
    }
    ApxAttrLeakyRelu leaky = {0.1f};
    ApxAttrGelu gelu_tanh = {APX_GELU_TANH};
    auto bytes = [](const void *p, size_t n) {
      return std::vector<uint8_t>((const uint8_t *)p, (const uint8_t *)p + n);
    };
    unary_case(APX_OP_LeakyRelu, "LeakyRelu_alpha0.1", bytes(&leaky, sizeof leaky));
    unary_case(APX_OP_LeakyReluGrad, "LeakyReluGrad_alpha0.1", bytes(&leaky, sizeof leaky));
    unary_case(APX_OP_Gelu, "GeluTanh", bytes(&gelu_tanh, sizeof gelu_tanh));
    unary_case(APX_OP_GeluGrad, "GeluTanhGrad", bytes(&gelu_tanh, sizeof gelu_tanh));
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
