// fusion_test.cc - fusion records, the traffic estimate and the fusion report
// (passes/fusion.h), and the fusion section --explain appends.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "tests/testing/compile_plan.h"

extern "C" {
#include "ir/cost.h"
#include "compiler/explain.h"
#include "passes/fusion.h"
#include "compiler/pipeline.h"
}

namespace {

struct G {
  ApxGraph g;
  ApxDiag d;
  G() {
    apx_graph_init(&g, "m.onnx");
    apx_diag_init(&d);
  }
  ~G() { apx_graph_free(&g); }
  int val(const char *name, std::initializer_list<int64_t> dims, ApxValueKind k = APX_VAL_ACTIVATION) {
    std::vector<int64_t> dv(dims);
    int v = apx_graph_add_value(&g, &d, name, k, APX_DT_F32, (int32_t)dv.size(), dv.data());
    EXPECT_GE(v, 0) << d.msg;
    return v;
  }
  int node(ApxOp op, std::vector<int> in, std::vector<int> out, ApxSection s = APX_SEC_FORWARD) {
    int n = apx_graph_add_node(&g, &d, op, nullptr, (int)in.size(), in.data(), (int)out.size(), out.data());
    g.nodes[n].section = s;
    return n;
  }
};

std::string Report(const ApxGraph *g) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  apx_fusion_report_write(g, f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

TEST(Traffic, CountsKernelsAndBytesPerSectionWithoutShapeOnlyViews) {
  G t;
  int x = t.val("x", {4, 8}, APX_VAL_INPUT), w = t.val("w", {8, 2}, APX_VAL_INPUT);
  int y = t.val("y", {4, 2}), r = t.val("r", {8}), dy = t.val("dy", {4, 2}), dx = t.val("dx", {4, 2});
  int mm = t.node(APX_OP_MatMul, {x, w}, {y});
  t.node(APX_OP_Reshape, {y}, {r});  // a view: no kernel
  int rg = t.node(APX_OP_ReluGrad, {dy, y}, {dx}, APX_SEC_BACKWARD);
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0) << t.d.msg;
  ApxTraffic tr;
  apx_graph_traffic(&t.g, &tr);
  EXPECT_EQ(tr.kernels[APX_SEC_FORWARD], 1);
  EXPECT_EQ(tr.kernels[APX_SEC_BACKWARD], 1);
  EXPECT_EQ(tr.kernels[APX_SEC_OPTIMIZER], 0);
  EXPECT_EQ(apx_traffic_kernels(&tr), 2);
  EXPECT_EQ(tr.bytes[APX_SEC_FORWARD], apx_node_bytes_read(&t.g, mm) + apx_node_bytes_written(&t.g, mm));
  EXPECT_EQ(tr.bytes[APX_SEC_FORWARD], (4 * 8 + 8 * 2 + 4 * 2) * 4);
  EXPECT_EQ(tr.bytes[APX_SEC_BACKWARD], 3 * 4 * 2 * 4);
  (void)rg;
  EXPECT_EQ(tr.unknown, 0);
}

TEST(FusionReport, ListsAppliedAndRejectedCandidatesAndTraffic) {
  G t;
  int x = t.val("x", {4, 8}, APX_VAL_INPUT), w = t.val("w", {8, 2}, APX_VAL_INPUT), y = t.val("y", {4, 2});
  t.node(APX_OP_MatMul, {x, w}, {y});
  ASSERT_EQ(apx_graph_toposort(&t.g, &t.d), 0);
  ApxFusionLog *l = apx_fusion_log(&t.g);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(apx_traffic_kernels(&l->before), 1);
  ApxFusionRecord ok = {"fuse_dense", "Gemm+Relu", "FusedDense", "fc1, relu1", "fc1/FusedDense, fc1/FusedDenseGrad",
                        APX_FUSE_APPLIED, nullptr, 2, 4};
  ApxFusionRecord no = {"fuse_dense", "MatMul+Add", "FusedDense", "mm, add", nullptr, APX_FUSE_NOT_CONSUMERS,
                        "intermediate 'mm_out' is also read by 'tanh' (Tanh)", 0, 0};
  ASSERT_EQ(apx_fusion_record(&t.g, &ok), 0);
  ASSERT_EQ(apx_fusion_record(&t.g, &no), 0);
  apx_fusion_log_after(&t.g, 1);
  std::string r = Report(&t.g);
  std::istringstream lines(r);
  std::string line, joined;  // records wrap at 120 columns onto lines indented by 6
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 120u) << line;
    joined += (line.rfind("      ", 0) == 0 ? " " + line.substr(6) : "\n" + line);
  }
  EXPECT_NE(r.find("applied (1)"), std::string::npos) << r;
  EXPECT_NE(joined.find("[fc1, relu1] -> fc1/FusedDense, fc1/FusedDenseGrad (2 forward, 4 backward nodes replaced)"),
            std::string::npos) << r;
  EXPECT_NE(r.find("not fused (1)"), std::string::npos) << r;
  EXPECT_NE(r.find("[mm, add]: consumers: intermediate 'mm_out' is also read by 'tanh' (Tanh)"), std::string::npos)
      << r;
  EXPECT_NE(r.find("no optimizer section"), std::string::npos) << r;
  EXPECT_NE(r.find("summary: kernels 1 -> 1, bytes 224 -> 224 per step"), std::string::npos) << r;
  EXPECT_STREQ(apx_fusion_why_name(APX_FUSE_NOT_DTYPE), "dtype");
  EXPECT_STREQ(apx_fusion_why_name(APX_FUSE_NOT_BACKWARD), "backward");
}

TEST(FusionReport, NoFusionPassSaysSo) {
  G t;
  EXPECT_NE(Report(&t.g).find("no fusion pass ran"), std::string::npos);
}

// The example MLP through the pipeline: --explain text gets a fusion section after the
// rows, and the report names the fused nodes and the one multi-tensor optimizer kernel.
TEST(FusionReport, ExplainTextEndsWithTheFusionSection) {
  ApxGraph g;
  ApxDiag d;
  ApxOptions o;
  apx_diag_init(&d);
  d.quiet = 1;
  apx_options_init(&o);
  o.model_path = "examples/mlp/model.onnx";
  o.opt_level = APX_O2;
  o.explain = 1;
  char path[] = "/tmp/apx_fusion_explain_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  o.explain_path = path;
  char err[256];
  ASSERT_EQ(apx_options_apply_preset(&o, err, sizeof err), 0) << err;
  ASSERT_EQ(apx_compile_file_inspected(&g, &o, apx_inspect_write, &d), 0) << d.msg;
  ASSERT_EQ(apx_explain_fusion_emit(&g, &o, &d), 0) << d.msg;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  remove(path);
  size_t rows = text.find("fc1"), sec = text.find("== fusion ==");
  ASSERT_NE(sec, std::string::npos) << text;
  EXPECT_LT(rows, sec);  // the rows (written before fusion) come first
  EXPECT_NE(text.find("Gemm+Relu", sec), std::string::npos);
  EXPECT_NE(text.find("SoftmaxCrossEntropyLoss", sec), std::string::npos);
  EXPECT_NE(text.find("1 OptimizerStep kernel updating 6 parameters"), std::string::npos);
  EXPECT_NE(text.find("1 UnscaleCheck kernel over 6 gradients"), std::string::npos);
  apx_graph_free(&g);
}

// A compile that asked for no report (ApxOptions.fusion_traffic 0, what apexc sets without
// --fusion-report or --explain) fuses exactly the same nodes and records the same candidates;
// only the per-step counts, which walk the graph, are left out, and the report says so.
TEST(FusionReport, TrafficIsCountedOnlyWhenAsked) {
  std::string reports[2];
  int32_t n_nodes[2], n_recs[2];
  for (int count = 0; count < 2; count++) {
    ApxGraph g;
    ApxDiag d;
    ApxOptions o;
    apx_options_init(&o);
    EXPECT_EQ(o.fusion_traffic, 1);  // the default: counted
    o.model_path = "examples/transformer/model.onnx";
    o.opt_level = APX_O2;
    o.fusion_traffic = count;
    std::string err;
    ASSERT_TRUE(apx_testing::CompileGraph(o, &g, &d, &err)) << err;
    ASSERT_NE(g.fusion, nullptr);
    EXPECT_EQ(g.fusion->no_traffic, !count);
    if (!count) {  // never current: nothing to keep
      EXPECT_EQ(apx_fusion_log_current(&g), 0);
    }
    reports[count] = Report(&g);
    n_nodes[count] = g.n_order;
    n_recs[count] = g.fusion->n;
    if (count) {  // fusion took kernels out of the kept counts
      ASSERT_TRUE(g.fusion->have_after);
      EXPECT_GT(apx_traffic_kernels(&g.fusion->before), apx_traffic_kernels(&g.fusion->after));
    }
    apx_graph_free(&g);
  }
  EXPECT_EQ(n_nodes[0], n_nodes[1]);
  EXPECT_EQ(n_recs[0], n_recs[1]);
  EXPECT_NE(reports[0].find("per training step: not counted"), std::string::npos) << reports[0];
  EXPECT_EQ(reports[0].find("summary: kernels"), std::string::npos) << reports[0];
  EXPECT_NE(reports[1].find("summary: kernels"), std::string::npos) << reports[1];
  // everything above the counts is the same
  size_t cut0 = reports[0].find("  per training step"), cut1 = reports[1].find("  per training step");
  EXPECT_EQ(reports[0].substr(0, cut0), reports[1].substr(0, cut1));
}

}  // namespace
