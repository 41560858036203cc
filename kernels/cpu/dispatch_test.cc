// dispatch_test.cc - the op table: supported dtypes, error reporting, unknown ops.
#include <cstdlib>

#include "kernels/cpu/test_util.h"

using namespace apxtest;

TEST(Dispatch, SupportsQuery) {
  EXPECT_TRUE(apx_cpu_supports(APX_OP_MatMul, APX_DT_F16));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_MatMul, APX_DT_BF16));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_MatMul, APX_DT_F64));
  EXPECT_FALSE(apx_cpu_supports(APX_OP_MatMul, APX_DT_I64));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_Add, APX_DT_I64));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_Add, APX_DT_I32));
  EXPECT_FALSE(apx_cpu_supports(APX_OP_Add, APX_DT_BOOL));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_Equal, APX_DT_BOOL));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_Reshape, APX_DT_BOOL));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_Gather, APX_DT_I64));
  EXPECT_FALSE(apx_cpu_supports(APX_OP_Relu, APX_DT_I64));
  EXPECT_FALSE(apx_cpu_supports(APX_OP_Upsample, APX_DT_F32));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_ConvTranspose, APX_DT_F32));
  EXPECT_TRUE(apx_cpu_supports(APX_OP_ConvTransposeGrad, APX_DT_F64));
  EXPECT_FALSE(apx_cpu_supports(APX_OP_INVALID, APX_DT_F32));
  EXPECT_FALSE(apx_cpu_supports((ApxOp)100000, APX_DT_F32));
}

// The query constant folding asks before allocating outputs: the op's type T taken from the
// tensors as apx_cpu_run takes it (Equal's inputs, else the first present output).
TEST(Dispatch, SupportsCallTakesTheTypeFromTheTensors) {
  static const char present = 0;
  auto t = [](ApxDType dt) {
    ApxTensor x = {};
    x.data = (void *)&present;
    x.dtype = dt;
    return x;
  };
  ApxTensor absent = {};
  ApxTensor i64[2] = {t(APX_DT_I64), t(APX_DT_I64)}, b = t(APX_DT_BOOL), f32 = t(APX_DT_F32);
  EXPECT_TRUE(apx_cpu_supports_call(APX_OP_Equal, i64, 2, &b, 1));
  EXPECT_TRUE(apx_cpu_supports_call(APX_OP_Add, i64, 2, &i64[0], 1));
  EXPECT_FALSE(apx_cpu_supports_call(APX_OP_Relu, i64, 1, &i64[0], 1));
  EXPECT_TRUE(apx_cpu_supports_call(APX_OP_Relu, &f32, 1, &f32, 1));
  EXPECT_TRUE(apx_cpu_supports_call(APX_OP_Cast, &b, 1, &f32, 1));  // any type
  ApxTensor outs[2] = {absent, f32};  // the first present output decides
  EXPECT_TRUE(apx_cpu_supports_call(APX_OP_Split, &f32, 1, outs, 2));
  EXPECT_FALSE(apx_cpu_supports_call(APX_OP_Constant, nullptr, 0, &f32, 1));  // no kernel
  EXPECT_FALSE(apx_cpu_supports_call(APX_OP_Upsample, &f32, 1, &f32, 1));
  EXPECT_FALSE(apx_cpu_supports_call(APX_OP_INVALID, &f32, 1, &f32, 1));
}

// Every v1 forward op, every gradient op, the fused and the training-step ops (except the
// collective Allreduce, which the runtime owns, and the ops a pass rewrites away: REWRITE)
// have a CPU kernel in fp32.
TEST(Dispatch, EveryV1AndGradientOpHasAKernel) {
  for (int i = 1; i < APX_OP_COUNT; i++) {
    const ApxOpInfo *info = apx_op_info((ApxOp)i);
    bool needed = (info->flags & (APX_OPF_V1 | APX_OPF_INTERNAL)) && !(info->flags & APX_OPF_REWRITE) &&
                  i != APX_OP_Allreduce;
    std::string name = info->name;
    if (needed) {
      EXPECT_TRUE(apx_cpu_supports((ApxOp)i, APX_DT_F32)) << name;
    }
  }
}

TEST(Dispatch, NotSupportedYetNamesTheOp) {
  Tensor x(APX_DT_F32, {2}), y(APX_DT_F32, {2});
  std::string err;
  EXPECT_EQ(run(APX_OP_Upsample, nullptr, {&x}, {&y}, &err), APX_STATUS_UNSUPPORTED);
  EXPECT_EQ(err, "Upsample: not supported yet on the CPU backend");
  EXPECT_EQ(run(APX_OP_INVALID, nullptr, {&x}, {&y}, &err), APX_STATUS_BAD_INPUT);
}

TEST(Dispatch, MissingAttrsAndInputsAreErrors) {
  Tensor x(APX_DT_F32, {2, 2}), y(APX_DT_F32, {2, 2});
  std::string err;
  EXPECT_EQ(run(APX_OP_Softmax, nullptr, {&x}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_NE(err.find("missing attributes"), std::string::npos) << err;
  EXPECT_EQ(run(APX_OP_Add, nullptr, {&x, nullptr}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Add: input 1 missing");
  Tensor bad(APX_DT_F32, {3});
  EXPECT_EQ(run(APX_OP_Add, nullptr, {&x, &bad}, {&y}, &err), APX_STATUS_BAD_INPUT);
  EXPECT_EQ(err, "Add: input 1 shape [3] does not broadcast to [2,2]");
}

TEST(Dispatch, UnsupportedTypesAreRejectedBeforeTheKernel) {
  Tensor x = make(APX_DT_I32, {1, 1, 2, 2}, {1, 2, 3, 4}), y(APX_DT_I32, {1, 1, 1, 1});
  ApxAttrPool a = {};
  a.kernel[0] = 1;
  a.kernel[1] = a.kernel[2] = 2;
  std::string err;
  EXPECT_EQ(run(APX_OP_AveragePool, &a, {&x}, {&y}, &err), APX_STATUS_UNSUPPORTED);
  EXPECT_EQ(err, "AveragePool: not supported yet: type int32");
  run_ok(APX_OP_MaxPool, &a, {&x}, {&y});  // MaxPool takes integers
  EXPECT_EQ(y.get(0), 4.0);
  Tensor b(APX_DT_BOOL, {2}), c(APX_DT_BOOL, {2});
  EXPECT_EQ(run(APX_OP_Sigmoid, nullptr, {&b}, {&c}, &err), APX_STATUS_UNSUPPORTED);
  EXPECT_EQ(err, "Sigmoid: not supported yet: type bool");
}

TEST(Dispatch, StatusNames) {
  EXPECT_STREQ(apx_status_name(APX_STATUS_UNSUPPORTED), "not supported yet");
  EXPECT_STREQ(apx_status_name(APX_STATUS_OK), "ok");
}

// On a CPU this OpenBLAS does not know, the hint names a core type (the report and the
// runtime use it); when OPENBLAS_CORETYPE is set, there is nothing to suggest.
TEST(Dispatch, BlasCoretypeHint) {
  const char *h = apx_cpu_blas_coretype_hint();
  if (getenv("OPENBLAS_CORETYPE")) {
    EXPECT_EQ(h, nullptr);
  } else if (h) {
    EXPECT_TRUE(std::string(h) == "SkylakeX" || std::string(h) == "Haswell") << h;
  }
}
