// validate_test.cc - the host-side contract check every backend and the plan validator share
// (validate.h): what it accepts (the mixes the CPU reference runs), what it refuses with which
// message, and the holes it closes (a bool read as floats, scalars without an element, an
// input count that overflows int). Tensors carry fake addresses: nothing is dereferenced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "kernels/validate.h"
}

namespace {

ApxTensor T(std::vector<int64_t> dims, ApxDType dt = APX_DT_F32, uintptr_t at = 0x10000) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void *>(at);
  t.dtype = dt;
  t.rank = (int32_t)dims.size();
  for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
  return t;
}

ApxTensor Absent() {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  return t;
}

struct Result {
  ApxStatus st;
  std::string err;
};

Result Check(ApxOp op, const void *attrs, std::vector<ApxTensor> ins, std::vector<ApxTensor> outs) {
  char err[512] = "";
  ApxStatus st = apx_kernel_validate(op, attrs, ins.data(), (int)ins.size(), outs.data(),
                                     (int)outs.size(), err, sizeof err);
  return {st, err};
}

TEST(Validate, AcceptsWhatTheKernelsRun) {
  EXPECT_EQ(Check(APX_OP_Add, nullptr, {T({2, 3}), T({3})}, {T({2, 3})}).st, APX_STATUS_OK);
  ApxAttrGemm g = {1.0f, 1.0f, 0, 1};
  EXPECT_EQ(Check(APX_OP_Gemm, &g, {T({4, 5}), T({6, 5}), T({6})}, {T({4, 6})}).st, APX_STATUS_OK);
  ApxAttrConv c;
  memset(&c, 0, sizeof c);
  EXPECT_EQ(Check(APX_OP_Conv, &c, {T({1, 2, 5, 5}), T({3, 2, 3, 3}), T({3})}, {T({1, 3, 3, 3})}).st,
            APX_STATUS_OK);
}

// ConvTranspose: X (1, 2, 3, 3), W (2, 3 / 1, 3, 3), strides 2, pads 1, output_padding 1:
// Y (1, 3, 6, 6) exactly; one row more or less, or a bias of the wrong size, is refused.
TEST(Validate, ConvTransposeContract) {
  ApxAttrConvTranspose a;
  memset(&a, 0, sizeof a);
  a.strides[1] = a.strides[2] = 2;
  for (int i : {1, 2, 4, 5}) a.pads[i] = 1;
  a.output_padding[1] = a.output_padding[2] = 1;
  a.group = 1;
  Result r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3}), T({2, 3, 3, 3}), T({3})}, {T({1, 3, 6, 6})});
  EXPECT_EQ(r.st, APX_STATUS_OK) << r.err;
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3}), T({2, 3, 3, 3})}, {T({1, 3, 7, 6})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "ConvTranspose shapes/attributes do not match: X [1,2,3,3], W [2,3,3,3], Y [1,3,7,6], group 1");
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3}), T({2, 3, 3, 3})}, {T({1, 3, 5, 6})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3}), T({2, 3, 3, 3}), T({2})}, {T({1, 3, 6, 6})});
  EXPECT_EQ(r.err, "B must have M = 3 elements");
  // 3-D: the depth slot (strides 1, pads 0 here): D = 1 (3 - 1) + 3 = 5
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3, 3}), T({2, 3, 3, 3, 3})}, {T({1, 3, 5, 6, 6})});
  EXPECT_EQ(r.st, APX_STATUS_OK) << r.err;
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3, 3}), T({2, 3, 3, 3, 3})}, {T({1, 3, 6, 6, 6})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 1, 3, 3, 3}), T({2, 3, 1, 3, 3, 3})}, {T({1, 3, 1, 5, 6, 6})});
  EXPECT_EQ(r.st, APX_STATUS_UNSUPPORTED);
  EXPECT_EQ(r.err, "not supported yet: ConvTranspose of rank 6 (1-D, 2-D and 3-D only, rank 3, 4 and 5)");
  // 1-D: (N, C, L) as (N, C, 1, L), the attributes' first entries unit
  a.strides[1] = 1;
  a.pads[1] = a.pads[4] = 0;
  a.output_padding[1] = 0;
  a.kernel[0] = 1;
  a.kernel[1] = 1;
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3}), T({2, 3, 3}), T({3})}, {T({1, 3, 6})});
  EXPECT_EQ(r.st, APX_STATUS_OK) << r.err;
  a.strides[1] = 2;
  for (int i : {1, 2, 4, 5}) a.pads[i] = 1;
  a.output_padding[1] = 1;
  a.kernel[0] = 1;
  a.kernel[1] = 0;
  r = Check(APX_OP_ConvTranspose, &a, {T({1, 2, 3, 3}), T({2, 3, 3, 3})}, {T({1, 3, 6})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "operand ranks differ: X 4, W 4, Y 3");
  // the gradient: dX like X, dW like W, dB (C_out)
  r = Check(APX_OP_ConvTransposeGrad, &a, {T({1, 3, 6, 6}), T({1, 2, 3, 3}), T({2, 3, 3, 3})},
            {T({1, 2, 3, 3}), T({2, 3, 3, 3}), T({3})});
  EXPECT_EQ(r.st, APX_STATUS_OK) << r.err;
  r = Check(APX_OP_ConvTransposeGrad, &a, {T({1, 3, 6, 6}), T({1, 2, 3, 3}), T({2, 3, 3, 3})},
            {Absent(), Absent(), T({2})});
  EXPECT_EQ(r.err, "dX / dW / dB must match X / W / (M)");
}

// Math kernels see every float tensor in one type: fp16 X with fp32 statistics is a contract
// the CPU runs (and fp16 X with an fp32 Y, a Cast folded into the op).
TEST(Validate, MixedFloatTypesOfOneKindPass) {
  ApxAttrLayerNorm a = {1, 1e-5f, 1};
  Result r = Check(APX_OP_LayerNormalization, &a, {T({4, 8}, APX_DT_F16), T({8}, APX_DT_F32)},
                   {T({4, 8}, APX_DT_F32), T({4, 1}, APX_DT_F32), T({4, 1}, APX_DT_F32)});
  EXPECT_EQ(r.st, APX_STATUS_OK) << r.err;
}

TEST(Validate, MessagesAreTheCpuReferences) {
  Result r = Check(APX_OP_Add, nullptr, {T({2, 2}), Absent()}, {T({2, 2})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "input 1 missing");
  r = Check(APX_OP_Add, nullptr, {T({2, 2}), T({3})}, {T({2, 2})});
  EXPECT_EQ(r.err, "input 1 shape [3] does not broadcast to [2,2]");
  ApxAttrLayerNorm a = {1, 1e-5f, 1};
  r = Check(APX_OP_LayerNormalization, &a, {T({2, 4}), T({3})}, {T({2, 4})});
  EXPECT_EQ(r.err, "Scale has 3 elements, expected 4");
  ApxAttrAxis ax = {3};
  r = Check(APX_OP_Softmax, &ax, {T({2, 3})}, {T({2, 3})});
  EXPECT_EQ(r.err, "axis 3 out of range for rank 2");
  r = Check(APX_OP_Softmax, nullptr, {T({2})}, {T({2})});
  EXPECT_EQ(r.err, "missing attributes (ApxAttrAxis)");
}

TEST(Validate, TensorsThemselves) {
  ApxTensor neg = T({2, -1});
  Result r = Check(APX_OP_Relu, nullptr, {neg}, {T({2})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "input 0: negative dim -1");
  ApxTensor huge = T({1ll << 40, 1ll << 40});
  r = Check(APX_OP_Relu, nullptr, {huge}, {huge});
  EXPECT_EQ(r.err, "input 0: size overflows");
  r = Check(APX_OP_Relu, nullptr, {T({2}, APX_DT_STRING)}, {T({2})});
  EXPECT_EQ(r.st, APX_STATUS_UNSUPPORTED);
  r = Check((ApxOp)9999, nullptr, {}, {});
  EXPECT_EQ(r.err, "invalid op 9999");
}

// A kernel that computes in floats reads a bool of n elements as n floats: past its end.
TEST(Validate, RefusesABoolWhereAKernelReadsFloats) {
  Result r = Check(APX_OP_ReluGrad, nullptr, {T({8}), T({8}, APX_DT_BOOL)}, {T({8})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "input 1 has type bool, expected a float type");
  ApxAttrDropout d;
  memset(&d, 0, sizeof d);
  r = Check(APX_OP_DropoutGrad, &d, {T({8}, APX_DT_BOOL), T({8}, APX_DT_BOOL)}, {T({8})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
}

TEST(Validate, UnscaleCheckScalarsNeedAnElement) {
  std::vector<ApxTensor> outs = {T({0}), T({1}, APX_DT_I32), T({1}), T({4})};
  Result r = Check(APX_OP_UnscaleCheck, nullptr, {T({1}), T({4})}, outs);
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "loss_scale, found_inf, first_bad and norm_sq must have an element each");
  outs[0] = T({1});
  EXPECT_EQ(Check(APX_OP_UnscaleCheck, nullptr, {T({1}), T({4})}, outs).st, APX_STATUS_OK);
}

TEST(Validate, OptimizerInputCountDoesNotOverflow) {
  ApxAttrOptimizer a;
  memset(&a, 0, sizeof a);
  a.kind = APX_OPTIM_ADAMW;
  a.n_params = 0x7fffffff;
  EXPECT_EQ(apx_optimizer_n_inputs(&a), 4 + 4ll * 0x7fffffff);
  Result r = Check(APX_OP_OptimizerStep, &a, {T({1}), T({1}), T({1}), T({1}, APX_DT_I64)}, {});
  EXPECT_EQ(r.err, "2147483647 parameters need 8589934592 inputs, got 4");
  a.n_params = 1;
  a.master_weights = 1;
  EXPECT_EQ(apx_optimizer_n_inputs(&a), 4 + 1 * (2 + 2 + 1));
  std::vector<ApxTensor> ins = {T({1}), T({1}), T({1}), T({1}, APX_DT_I64), T({3}), T({3}),
                                T({3}), T({3}), Absent()};
  EXPECT_EQ(Check(APX_OP_OptimizerStep, &a, ins, {}).st, APX_STATUS_OK);  // no half copy
  ins[7] = Absent();
  EXPECT_EQ(Check(APX_OP_OptimizerStep, &a, ins, {}).err, "parameter 0: tensors differ in size");
  ins[7] = T({3});
  ins[3] = T({0}, APX_DT_I64);
  EXPECT_EQ(Check(APX_OP_OptimizerStep, &a, ins, {}).err,
            "found_inf, norm_sq, lr and step must have an element each");
}

TEST(Validate, ArityFromTheOpsTable) {
  Result r = Check(APX_OP_Relu, nullptr, {T({2}), T({2})}, {T({2})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "2 inputs, the op takes at most 1");
  ApxAttrReshape rs = {0};  // static shape operand passed absent
  EXPECT_EQ(Check(APX_OP_Reshape, &rs, {T({6}), Absent()}, {T({2, 3})}).st, APX_STATUS_OK);
}

TEST(Validate, SumOnlyTakesItsOutputOverInputZero) {
  ApxTensor o = T({4}, APX_DT_F32, 0x20000);
  EXPECT_EQ(Check(APX_OP_Sum, nullptr, {T({4}, APX_DT_F32, 0x20000), T({4})}, {o}).st, APX_STATUS_OK);
  Result r = Check(APX_OP_Sum, nullptr, {T({4}), T({4}, APX_DT_F32, 0x20000)}, {o});
  EXPECT_EQ(r.err, "input 1 aliases the output");
}

TEST(Validate, AllreduceOutputsMirrorInputs) {
  ApxAttrAllreduce a = {0, 0, 1.0f, 1};
  EXPECT_EQ(Check(APX_OP_Allreduce, &a, {T({4}), T({2})}, {T({4}), T({2})}).st, APX_STATUS_OK);
  EXPECT_EQ(Check(APX_OP_Allreduce, &a, {T({4})}, {}).st, APX_STATUS_OK);  // in place
  Result r = Check(APX_OP_Allreduce, &a, {T({4})}, {T({8})});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "output 0 does not mirror input 0 (dtype and shape)");
  r = Check(APX_OP_Allreduce, &a, {T({4})}, {T({4}, APX_DT_F16)});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
}

TEST(Validate, CopyOpsNeedOneDtype) {
  ApxAttrAxis ax = {1};
  Result r = Check(APX_OP_Flatten, &ax, {T({2, 3}, APX_DT_F16)}, {T({2, 3}, APX_DT_F32)});
  EXPECT_EQ(r.err, "input and output: types differ (float16, float32)");
  ApxAttrCast c = {APX_DT_F16, 1};
  r = Check(APX_OP_Cast, &c, {T({4})}, {T({4}, APX_DT_F32)});
  EXPECT_EQ(r.err, "attribute to=10 but output dtype is float32");
}

TEST(Validate, ErrorPrefixNamesTheOp) {
  char err[64] = "input 1 missing";
  apx_kernel_error_prefix(APX_OP_Add, err, sizeof err);
  EXPECT_STREQ(err, "Add: input 1 missing");
  err[0] = '\0';
  apx_kernel_error_prefix(APX_OP_Relu, err, sizeof err);
  EXPECT_STREQ(err, "Relu: failed");
}

}  // namespace

// Found by scripts/fuzz_plan.sh: a Min/Max (or MinMaxGrad) whose later input is absent in the
// plan reached the kernel, which read through a null pointer.
TEST(Validate, MinMaxNeedEveryInput) {
  ApxTensor o = T({4}, APX_DT_F32, 0x20000);
  EXPECT_EQ(Check(APX_OP_Max, nullptr, {T({4}), T({4}, APX_DT_F32, 0x30000)}, {o}).st, APX_STATUS_OK);
  Result r = Check(APX_OP_Max, nullptr, {T({4}), Absent()}, {o});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_EQ(r.err, "input 1 missing");
  r = Check(APX_OP_MinMaxGrad, nullptr, {T({4}), T({4}), T({4}), Absent()}, {T({4}, APX_DT_F32, 0x40000), Absent()});
  EXPECT_EQ(r.err, "input 3 missing");
}

// Found by scripts/fuzz_plan.sh: a NaN seed reached the float -> int64 conversion of the key.
TEST(Validate, RandomUniformSeedMustBeInInt64Range) {
  ApxAttrRandomUniform a;
  memset(&a, 0, sizeof a);
  a.high = 1.0f;
  a.has_seed = 1;
  a.seed = 7.0f;
  EXPECT_EQ(Check(APX_OP_RandomUniformLike, &a, {T({4})}, {T({4}, APX_DT_F32, 0x20000)}).st, APX_STATUS_OK);
  a.seed = NAN;
  Result r = Check(APX_OP_RandomUniformLike, &a, {T({4})}, {T({4}, APX_DT_F32, 0x20000)});
  EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT);
  EXPECT_NE(r.err.find("is not an integer in int64's range"), std::string::npos) << r.err;
  a.seed = 1e30f;
  EXPECT_EQ(Check(APX_OP_RandomUniformLike, &a, {T({4})}, {T({4}, APX_DT_F32, 0x20000)}).st, APX_STATUS_BAD_INPUT);
}

// Found by scripts/fuzz_plan.sh: HardSwish (a formula op added after the contract table was
// written) had no contract, and an output smaller than its input reached the kernel. Every
// op of kind EW_UNARY / EW_UNARY_GRAD now gets the unary contracts from ops.def.
TEST(Validate, EveryFormulaOpGetsTheUnaryContract) {
  static const double zeros[32] = {0};  // attributes of any formula op: all zero
  for (ApxOp op : {APX_OP_HardSwish, APX_OP_HardSigmoid, APX_OP_Softplus}) {
    EXPECT_EQ(Check(op, zeros, {T({4})}, {T({4}, APX_DT_F32, 0x20000)}).st, APX_STATUS_OK) << apx_op_name(op);
    Result r = Check(op, zeros, {T({4})}, {T({1}, APX_DT_F32, 0x20000)});
    EXPECT_EQ(r.st, APX_STATUS_BAD_INPUT) << apx_op_name(op);
    EXPECT_EQ(r.err, "output shape/dtype differs from input") << apx_op_name(op);
  }
  Result g = Check(APX_OP_HardSwishGrad, nullptr, {T({4}), T({4})}, {T({2}, APX_DT_F32, 0x20000)});
  EXPECT_EQ(g.st, APX_STATUS_BAD_INPUT);
}
