// plan_validate_test.cc - the kernel-level plan checks (plan_validate.h) on small plans built
// in memory: what a compiled plan does (in-place pairs, views, in-place reductions) passes;
// reading what no kernel wrote, unlisted data inputs, outputs over inputs, partial overlaps
// and two outputs over one range are refused with one line naming the kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "plan/plan_validate.h"
}

namespace {

struct P {
  ApxPlan p;
  ApxPlanBuffer *b = nullptr;
  int nb = 0;
  std::vector<int32_t> inputs, outputs;
  P(int n_bufs, int n_kernels) {
    apx_plan_init(&p);
    p.path = "t.apx";
    b = apx_plan_alloc_buffers(&p, n_bufs);
    apx_plan_alloc_kernels(&p, n_kernels);
    p.mem.arena_bytes = 1 << 16;
    p.mem.persistent_bytes = 1 << 16;
  }
  ~P() { apx_plan_free(&p); }
  int buf(const char *name, ApxValueKind kind, std::vector<int64_t> dims, int64_t off,
          ApxDType dt = APX_DT_F32) {
    ApxPlanBuffer &x = b[nb];
    x.name = name;
    x.kind = kind;
    x.dtype = dt;
    x.rank = (int32_t)dims.size();
    int64_t n = 1;
    for (size_t i = 0; i < dims.size(); i++) x.dims[i] = dims[i], n *= dims[i];
    x.bytes = n * (int64_t)apx_dtype_size(dt);
    x.region = kind == APX_VAL_ACTIVATION || kind == APX_VAL_INPUT ? APX_MEM_ARENA : APX_MEM_PERSISTENT;
    x.offset = off;
    if (kind == APX_VAL_INPUT) inputs.push_back(nb);
    return nb++;
  }
  void kernel(int k, ApxOp op, std::vector<int32_t> in, std::vector<int32_t> out,
              const void *attrs = nullptr) {
    apx_plan_set_kernel(&p, k, op, "n", APX_SEC_FORWARD, attrs, (int32_t)in.size(), in.data(),
                        (int32_t)out.size(), out.data());
  }
  std::string Check() {
    p.n_bufs = nb;
    p.inputs = inputs.data();
    p.n_inputs = (int32_t)inputs.size();
    p.outputs = outputs.data();
    p.n_outputs = (int32_t)outputs.size();
    ApxDiag d;
    apx_diag_init(&d);
    d.quiet = 1;
    if (apx_plan_validate(&p, &d) != 0) return std::string("format: ") + d.msg;
    if (apx_plan_check_kernels(&p, &d) == 0) return "";
    EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
    EXPECT_EQ(strchr(d.msg, '\n'), nullptr);
    return d.msg;
  }
};

TEST(PlanValidate, InPlaceAndViewPairsPass) {
  P t(4, 3);
  int x = t.buf("x", APX_VAL_INPUT, {8}, 0);
  int y = t.buf("y", APX_VAL_ACTIVATION, {8}, 64);
  int z = t.buf("z", APX_VAL_ACTIVATION, {8}, 64);     // Relu over its input (INPLACE)
  int v = t.buf("v", APX_VAL_ACTIVATION, {2, 4}, 64);  // Reshape view (SHAPEONLY)
  t.kernel(0, APX_OP_Neg, {x}, {y});
  t.kernel(1, APX_OP_Relu, {y}, {z});
  ApxAttrReshape rs = {0};
  t.kernel(2, APX_OP_Reshape, {z, -1}, {v}, &rs);
  t.outputs = {v};
  EXPECT_EQ(t.Check(), "");
}

TEST(PlanValidate, ReadingWhatNoKernelWroteIsRefused) {
  P t(3, 2);
  int x = t.buf("x", APX_VAL_INPUT, {8}, 0);
  int y = t.buf("y", APX_VAL_ACTIVATION, {8}, 64);
  int z = t.buf("z", APX_VAL_ACTIVATION, {8}, 128);
  t.kernel(0, APX_OP_Relu, {y}, {z});  // y's producer was dropped
  t.kernel(1, APX_OP_Neg, {x}, {y});
  t.outputs = {z};
  EXPECT_EQ(t.Check(),
            "t.apx: invalid plan: kernel 0 ('n' Relu): input 0 reads 'y', which no earlier kernel writes");
}

TEST(PlanValidate, OutputsAndLossNeedAWriter) {
  P t(3, 1);
  int x = t.buf("x", APX_VAL_INPUT, {8}, 0);
  int y = t.buf("y", APX_VAL_ACTIVATION, {8}, 64);
  int l = t.buf("loss", APX_VAL_ACTIVATION, {}, 128);
  t.kernel(0, APX_OP_Neg, {x}, {y});
  t.outputs = {y, l};
  EXPECT_EQ(t.Check(), "t.apx: invalid plan: output 1 ('loss') is written by no kernel");
  t.outputs = {y};
  t.p.loss = l;
  EXPECT_EQ(t.Check(), "t.apx: invalid plan: the loss ('loss') is written by no kernel");
}

TEST(PlanValidate, UnlistedDataInputIsRefused) {
  P t(2, 1);
  int x = t.buf("x", APX_VAL_INPUT, {8}, 0);
  int y = t.buf("y", APX_VAL_ACTIVATION, {8}, 64);
  t.inputs.clear();
  t.kernel(0, APX_OP_Neg, {x}, {y});
  EXPECT_NE(t.Check().find("input 0 reads 'x', a data input the plan does not list"), std::string::npos);
}

TEST(PlanValidate, OutputOverAnInputOfANonInPlaceOpIsRefused) {
  P t(3, 1);
  int a = t.buf("a", APX_VAL_INPUT, {2, 2}, 0);
  int b = t.buf("b", APX_VAL_INPUT, {2, 2}, 64);
  int y = t.buf("y", APX_VAL_ACTIVATION, {2, 2}, 64);  // over b: MatMul reads b after writing y
  t.kernel(0, APX_OP_MatMul, {a, b}, {y});
  t.outputs = {y};
  EXPECT_NE(t.Check().find("output 0 ('y') shares bytes with input 1 ('b')"), std::string::npos);
}

TEST(PlanValidate, PartialOverlapsAndSharedOutputsAreRefused) {
  P t(2, 1);
  int x = t.buf("x", APX_VAL_INPUT, {16}, 0);
  int y = t.buf("y", APX_VAL_ACTIVATION, {16}, 32);  // half over x: even Relu may not
  t.kernel(0, APX_OP_Relu, {x}, {y});
  t.outputs = {y};
  EXPECT_NE(t.Check().find("output 0 ('y') shares bytes with input 0 ('x')"), std::string::npos) << t.Check();

  P u(5, 1);
  int s = u.buf("s", APX_VAL_INPUT, {4, 8}, 0);
  int m = u.buf("mean", APX_VAL_ACTIVATION, {4, 1}, 256);
  int is = u.buf("inv", APX_VAL_ACTIVATION, {4, 1}, 256);  // two outputs, one range
  ApxAttrLayerNorm ln = {1, 1e-5f, 1};
  int sc = u.buf("scale", APX_VAL_PARAM, {8}, 0);
  int yy = u.buf("ln", APX_VAL_ACTIVATION, {4, 8}, 1024);
  u.kernel(0, APX_OP_LayerNormalization, {s, sc}, {yy, m, is}, &ln);
  u.outputs = {yy};
  EXPECT_NE(u.Check().find("output 1 ('mean') shares bytes with output 2 ('inv')"), std::string::npos);
}

TEST(PlanValidate, UnscaleCheckTakesOnlyItsOwnGradient) {
  P t(8, 1);
  int s = t.buf("scale", APX_VAL_STATE, {1}, 0);
  int g0 = t.buf("g0", APX_VAL_INPUT, {4}, 0);
  int g1 = t.buf("g1", APX_VAL_INPUT, {4}, 64);
  int fi = t.buf("found_inf", APX_VAL_ACTIVATION, {1}, 128);
  int fb = t.buf("first_bad", APX_VAL_ACTIVATION, {1}, 192, APX_DT_I32);
  int ns = t.buf("norm_sq", APX_VAL_ACTIVATION, {1}, 256);
  int u0 = t.buf("u0", APX_VAL_ACTIVATION, {4}, 0);   // over g0: allowed
  int u1 = t.buf("u1", APX_VAL_ACTIVATION, {4}, 0);   // over g0 as well: refused
  t.kernel(0, APX_OP_UnscaleCheck, {s, g0, g1}, {fi, fb, ns, u0, u1});
  EXPECT_NE(t.Check().find("shares bytes with output 4 ('u1')"), std::string::npos) << t.Check();
  t.b[u1].offset = 64;  // over g1: allowed
  EXPECT_EQ(t.Check(), "");
}

TEST(PlanValidate, AllreducePairsMirrorInPlace) {
  P t(3, 1);
  int g = t.buf("g", APX_VAL_INPUT, {16}, 0);
  int r = t.buf("r", APX_VAL_ACTIVATION, {16}, 0);  // reduced in place
  t.kernel(0, APX_OP_Allreduce, {g}, {r});
  t.outputs = {r};
  EXPECT_EQ(t.Check(), "");
  t.b[r].rank = 1;
  t.b[r].dims[0] = 32;
  t.b[r].bytes = 128;
  t.b[r].offset = 1024;
  EXPECT_NE(t.Check().find("Allreduce): output 0 does not mirror input 0"), std::string::npos) << t.Check();
}

TEST(PlanValidate, OptimizerStepUpdatesItsInputsAlone) {
  P t(10, 1);
  ApxAttrOptimizer a;
  memset(&a, 0, sizeof a);
  a.kind = APX_OPTIM_SGD;  // momentum 0: no state
  a.n_params = 2;
  int fi = t.buf("found_inf", APX_VAL_STATE, {1}, 0);
  int ns = t.buf("norm_sq", APX_VAL_STATE, {1}, 64);
  int lr = t.buf("lr", APX_VAL_STATE, {1}, 128);
  int st = t.buf("step", APX_VAL_STATE, {1}, 192, APX_DT_I64);
  int p0 = t.buf("p0", APX_VAL_PARAM, {4}, 256);
  int p1 = t.buf("p1", APX_VAL_PARAM, {4}, 256);  // two parameters over one range
  int g0 = t.buf("g0", APX_VAL_STATE, {4}, 512);
  int g1 = t.buf("g1", APX_VAL_STATE, {4}, 576);
  t.kernel(0, APX_OP_OptimizerStep, {fi, ns, lr, st, p0, p1, g0, g1}, {}, &a);
  EXPECT_NE(t.Check().find("input 4 ('p0') shares bytes with input 5 ('p1')"), std::string::npos)
      << t.Check();
  t.b[p1].offset = 320;
  EXPECT_EQ(t.Check(), "");
  t.b[g1].offset = 512;  // gradients are only read: they may share bytes
  EXPECT_EQ(t.Check(), "");
}

// More than 64 ascending runs among a kernel's arguments take the radix sort: parameters
// placed in a shuffled memory order are accepted, and two of them over one range, or one
// reaching into the next, are refused by name as with few arguments.
TEST(PlanValidate, ManyArgumentsInNoMemoryOrderAreCheckedAlike) {
  const int n = 300;
  std::vector<std::string> names;
  for (int i = 0; i < 2 * n; i++) names.push_back((i < n ? "p" : "g") + std::to_string(i % n));
  std::vector<int64_t> slot(n);
  for (int i = 0; i < n; i++) slot[i] = (int64_t)((i * 7919) % n);  // a permutation of 0..n-1
  P t(4 + 2 * n, 1);
  ApxAttrOptimizer a;
  memset(&a, 0, sizeof a);
  a.kind = APX_OPTIM_SGD;
  a.n_params = n;
  std::vector<int32_t> in = {t.buf("found_inf", APX_VAL_STATE, {1}, 0),
                             t.buf("norm_sq", APX_VAL_STATE, {1}, 64),
                             t.buf("lr", APX_VAL_STATE, {1}, 128),
                             t.buf("step", APX_VAL_STATE, {1}, 192, APX_DT_I64)};
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; i++) in.push_back(p[i] = t.buf(names[i].c_str(), APX_VAL_PARAM, {4}, 256 + 64 * slot[i]));
  for (int i = 0; i < n; i++)
    in.push_back(t.buf(names[n + i].c_str(), APX_VAL_STATE, {4}, 256 + 64 * n + 64 * slot[n - 1 - i]));
  t.p.mem.persistent_bytes = 256 + 128 * n;
  t.kernel(0, APX_OP_OptimizerStep, in, {}, &a);
  EXPECT_EQ(t.Check(), "");
  int i = 17, j = 233;  // j over i's bytes
  t.b[p[j]].offset = t.b[p[i]].offset;
  EXPECT_NE(t.Check().find("input " + std::to_string(4 + i) + " ('p17') shares bytes with input " +
                           std::to_string(4 + j) + " ('p233')"),
            std::string::npos)
      << t.Check();
  t.b[p[j]].offset = t.b[p[i]].offset + 8;  // halfway into i's 16 bytes
  EXPECT_NE(t.Check().find("input " + std::to_string(4 + j) + " ('p233') shares bytes with input " +
                           std::to_string(4 + i) + " ('p17')"),
            std::string::npos)
      << t.Check();
  t.b[p[j]].offset = 256 + 64 * slot[j];
  EXPECT_EQ(t.Check(), "");
}

TEST(PlanValidate, TheContractIsTheKernelsOwn) {
  P t(3, 1);
  int x = t.buf("x", APX_VAL_INPUT, {8}, 0);
  int m = t.buf("mask", APX_VAL_INPUT, {8}, 64, APX_DT_BOOL);
  int y = t.buf("y", APX_VAL_ACTIVATION, {8}, 128);
  t.kernel(0, APX_OP_ReluGrad, {x, m}, {y});
  t.outputs = {y};
  EXPECT_EQ(t.Check(), "t.apx: invalid plan: kernel 0 ('n' ReluGrad): input 1 has type bool, "
                       "expected a float type");
}

}  // namespace
