// cli_test.cc - apexc argument parsing: opt-level presets, explicit overrides, Apex's invalid
// combinations, and usage errors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compiler/cli.h"
}

namespace {

struct Parsed {
  ApxOptions o;
  ApxCliArgs a;
  char err[1024];
  int rc;
  Parsed() { memset(&a, 0, sizeof a); }
  Parsed(Parsed &&other) : o(other.o), a(other.a), rc(other.rc) {
    memcpy(err, other.err, sizeof err);
    memset(&other.a, 0, sizeof other.a);  // the strings arena moves with it
  }
  Parsed(const Parsed &) = delete;
  ~Parsed() { apx_cli_args_free(&a); }
};

Parsed parse(std::vector<const char *> args) {
  args.insert(args.begin(), "apexc");
  Parsed p;
  p.rc = apx_cli_parse((int)args.size(), const_cast<char **>(args.data()), &p.o, &p.a, p.err,
                       sizeof p.err);
  return p;
}

}  // namespace

TEST(Cli, O0IsFp32WithUnitLossScale) {
  Parsed p = parse({"m.onnx", "-O0"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.cast_model_type, APX_DT_F32);
  EXPECT_EQ(p.o.patch_lists, APX_TRI_OFF);
  EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(p.o.loss_scale, 1.0f);
}

TEST(Cli, O1PatchesListsWithDynamicScale) {
  Parsed p = parse({"m.onnx"});  // O1 is the default
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.opt_level, APX_O1);
  EXPECT_EQ(p.o.patch_lists, APX_TRI_ON);
  EXPECT_EQ(p.o.cast_model_type, APX_DT_F32);
  EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
  EXPECT_EQ(p.o.loss_scale, 65536.0f);
  EXPECT_EQ(p.a.write_plan, 1);
  EXPECT_EQ(p.a.summary, 1);
}

TEST(Cli, O2KeepsBatchNormFp32WithMasterWeights) {
  Parsed p = parse({"m.onnx", "-O2"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.cast_model_type, APX_DT_F16);
  EXPECT_EQ(p.o.keep_batchnorm_fp32, APX_TRI_ON);
  EXPECT_EQ(p.o.master_weights, APX_TRI_ON);
  EXPECT_EQ(p.o.patch_lists, APX_TRI_OFF);
}

TEST(Cli, O3IsAllHalfWithUnitScaleAndFlagsOverridePreset) {
  Parsed p = parse({"m.onnx", "-O3"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.keep_batchnorm_fp32, APX_TRI_OFF);
  EXPECT_EQ(p.o.master_weights, APX_TRI_OFF);
  EXPECT_EQ(p.o.loss_scale, 1.0f);
  Parsed q = parse({"m.onnx", "-O3", "--keep-batchnorm-fp32", "--loss-scale=dynamic"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.o.keep_batchnorm_fp32, APX_TRI_ON);
  EXPECT_EQ(q.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
  Parsed r = parse({"m.onnx", "-O2", "--master-weights=false", "--loss-scale", "128"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.o.master_weights, APX_TRI_OFF);
  EXPECT_EQ(r.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(r.o.loss_scale, 128.0f);
}

TEST(Cli, Bf16DefaultsToUnitLossScale) {
  Parsed p = parse({"m.onnx", "-O2", "--half=bf16"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_EQ(p.o.cast_model_type, APX_DT_BF16);
  EXPECT_EQ(p.o.loss_scale_mode, APX_LOSS_SCALE_STATIC);
  EXPECT_EQ(p.o.loss_scale, 1.0f);
  Parsed q = parse({"m.onnx", "-O2", "--half", "bf16", "--loss-scale=dynamic"});
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.o.loss_scale_mode, APX_LOSS_SCALE_DYNAMIC);
}

TEST(Cli, RejectsApexInvalidCombinationsWithO1) {
  Parsed p = parse({"m.onnx", "-O1", "--keep-batchnorm-fp32"});
  EXPECT_EQ(p.rc, -1);
  EXPECT_NE(std::string(p.err).find("keep-batchnorm-fp32"), std::string::npos) << p.err;
  Parsed q = parse({"m.onnx", "-O1", "--master-weights"});
  EXPECT_EQ(q.rc, -1);
  EXPECT_NE(std::string(q.err).find("master weights"), std::string::npos) << q.err;
}

TEST(Cli, UsageErrorsNameTheFlag) {
  struct Case {
    std::vector<const char *> args;
    const char *want;
  } cases[] = {
      {{"m.onnx", "--bogus"}, "unknown option '--bogus'"},
      {{"m.onnx", "--lr"}, "--lr needs a value"},
      {{"m.onnx", "--lr=abc"}, "--lr: 'abc' is not a number"},
      {{"m.onnx", "--half=fp8"}, "--half: expected fp16 or bf16"},
      {{"m.onnx", "-O4"}, "unknown opt level '-O4'"},
      {{"m.onnx", "--dim", "N"}, "--dim: expected NAME=VALUE"},
      {{"m.onnx", "--dim", "N=0"}, "--dim"},
      {{"m.onnx", "--optimizer", "adam"}, "--optimizer: expected sgd, adamw or lamb"},
      {{"m.onnx", "--betas", "0.9"}, "--betas: expected B1,B2"},
      {{"m.onnx", "--accumulate", "0"}, "--accumulate"},
      {{"m.onnx", "--min-loss-scale", "10", "--max-loss-scale", "1"}, "must not exceed"},
      {{"a.onnx", "b.onnx"}, "more than one model"},
      {{"-O2"}, "no model given"},
      {{"m.onnx", "--explain=xml"}, "--explain: expected text or json"},
  };
  for (auto &c : cases) {
    Parsed p = parse(c.args);
    EXPECT_EQ(p.rc, -1) << c.want;
    EXPECT_NE(std::string(p.err).find(c.want), std::string::npos) << p.err;
    EXPECT_EQ(std::string(p.err).find('\n'), std::string::npos);
  }
}

TEST(Cli, ListsAndBindings) {
  Parsed p = parse({"m.onnx", "--fp32-ops", "Gelu,Tanh", "--fp32-ops=Erf", "--fp32-nodes", "attn*",
                    "--dim", "batch=32", "--frozen=w1,w2", "--betas=0.8,0.99", "--explain=json",
                    "--inference"});
  ASSERT_EQ(p.rc, 0) << p.err;
  ASSERT_EQ(p.o.fp32_ops.n, 3);
  EXPECT_STREQ(p.o.fp32_ops.items[2], "Erf");
  EXPECT_STREQ(p.o.fp32_nodes.items[0], "attn*");
  ASSERT_EQ(p.o.n_dims, 1);
  EXPECT_STREQ(p.o.dim_names[0], "batch");
  EXPECT_EQ(p.o.dim_values[0], 32);
  EXPECT_EQ(p.o.frozen.n, 2);
  EXPECT_FLOAT_EQ(p.o.beta1, 0.8f);
  EXPECT_FLOAT_EQ(p.o.beta2, 0.99f);
  EXPECT_EQ(p.o.explain, 2);
  EXPECT_EQ(p.o.training, 0);
  EXPECT_EQ(p.a.summary, 0);   // an inspection flag replaces the summary
  EXPECT_EQ(p.a.write_plan, 0);
}

TEST(Cli, HelpVersionListOps) {
  EXPECT_EQ(parse({"--help"}).a.action, APX_CLI_HELP);
  EXPECT_EQ(parse({"--version"}).a.action, APX_CLI_VERSION);
  EXPECT_EQ(parse({"--list-ops"}).a.action, APX_CLI_LIST_OPS);
  Parsed p = parse({"--dump-plan", "x.apx"});
  EXPECT_EQ(p.a.action, APX_CLI_DUMP_PLAN);
  EXPECT_STREQ(p.a.dump_plan_path, "x.apx");
  EXPECT_NE(std::string(apx_cli_usage()).find("-O2"), std::string::npos);
}
