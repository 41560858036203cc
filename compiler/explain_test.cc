// explain_test.cc - --explain text and JSON rows and summary, and --policy: the JSON read
// back reproduces the decisions; unknown names and ops are errors naming them.
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/precision_testing.h"

extern "C" {
#include "compiler/explain.h"
#include "compiler/json.h"
#include "compiler/policy_file.h"
}

using apxtest::PGraph;

namespace {

std::string explain(PGraph &t, ApxExplainFormat fmt) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  EXPECT_EQ(apx_explain_write(&t.g, &t.o, fmt, f, &t.d), 0) << t.d.msg;
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

// x[2,4] -> MatMul(W[4,8]) -> Softmax -> out
void tiny(PGraph &t) {
  int x = t.input("x", {2, 4});
  int w = t.param("W", {4, 8});
  int y = t.op(APX_OP_MatMul, "mm", {x, w}, {2, 8});
  int s = t.op(APX_OP_Softmax, "sm", {y}, {2, 8});
  t.output(s);
}

// A small transformer-ish block with a masked softmax, a LayerNorm, an MLP with bias,
// integer shape math, a loss and a few backward nodes.
void block(PGraph &t) {
  int x = t.input("x", {8, 64});
  int wq = t.param("Wq", {64, 64}), wk = t.param("Wk", {64, 64});
  int q = t.op(APX_OP_MatMul, "attn_q", {x, wq}, {8, 64});
  int k = t.op(APX_OP_MatMul, "attn_k", {x, wk}, {8, 64});
  int kt = t.op(APX_OP_Transpose, "attn_kT", {k}, {64, 8});
  int sc = t.op(APX_OP_MatMul, "attn_scores", {q, kt}, {8, 8});
  int mask = t.constant("mask", {8, 8}, {0.0f, -1e9f});
  int ms = t.op(APX_OP_Add, "attn_mask", {sc, mask}, {8, 8});
  int p = t.op(APX_OP_Softmax, "attn_softmax", {ms}, {8, 8});
  int ctx = t.op(APX_OP_MatMul, "attn_ctx", {p, x}, {8, 64});
  int res = t.op(APX_OP_Add, "residual", {ctx, x}, {8, 64});
  int g = t.param("ln_g", {64}, {1.0f}), b = t.param("ln_b", {64}, {0.0f});
  int ln = t.op(APX_OP_LayerNormalization, "ln", {res, g, b}, {8, 64});
  int w1 = t.param("W1", {64, 100}), b1 = t.param("b1", {100});
  int h = t.op(APX_OP_Gemm, "mlp_fc", {ln, w1, b1}, {8, 100});
  apxtest::attrs<ApxAttrGemm>(t, t.find_node("mlp_fc"))->alpha = 1.0f;
  int a = t.op(APX_OP_Gelu, "mlp_act", {h}, {8, 100});
  int labels = t.input("labels", {8}, APX_DT_I64);
  int loss = t.op(APX_OP_SoftmaxCrossEntropyLoss, "loss", {a, labels}, {});
  t.loss(loss);
  int shp = t.int_const("shape", {2}, {8, 64});
  int i0 = t.int_const("i0", {}, {0});
  int d0 = t.op(APX_OP_Gather, "dim0", {shp, i0}, {}, APX_DT_I64);
  t.output(d0);
  int dl = t.input("dloss", {});
  int da = t.op(APX_OP_SoftmaxCrossEntropyLossGrad, "loss_grad", {dl, a, labels}, {8, 100}, APX_DT_F32,
                APX_SEC_BACKWARD, t.find_node("loss"));
  int dh = t.op(APX_OP_GeluGrad, "mlp_act_grad", {da, h}, {8, 100}, APX_DT_F32, APX_SEC_BACKWARD,
                t.find_node("mlp_act"));
  int dw = t.op(APX_OP_FusedMatMul, "mlp_fc_grad_w", {ln, dh}, {64, 100}, APX_DT_F32, APX_SEC_BACKWARD,
                t.find_node("mlp_fc"));
  t.output(dw);
}

std::string tmpfile_path() {
  char tmpl[] = "/tmp/apx_policy_XXXXXX";
  int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  return tmpl;
}

std::map<std::string, ApxDType> decisions(const PGraph &t) {
  std::map<std::string, ApxDType> m;
  for (int k = 0; k < t.g.n_order; k++) {
    const ApxNode &n = t.g.nodes[t.g.order[k]];
    if (!apx_prec_is_inserted_cast(&t.g, t.g.order[k])) m[n.name] = n.compute;
  }
  return m;
}

bool has(const std::string &s, const std::string &sub) { return s.find(sub) != std::string::npos; }

// The text of one row of the text explanation: its first line (starting "  NAME ") and the
// continuation lines below it (wrapped types and reason, casts:, note:), up to the next row.
std::string row_block(const std::string &s, const std::string &name) {
  size_t at = s.find("\n  " + name + " ");
  if (at == std::string::npos) at = s.find("\n  " + name + "\n");
  if (at == std::string::npos) return "";
  size_t end = at + 1;
  for (;;) {
    end = s.find('\n', end);
    if (end == std::string::npos || end + 3 >= s.size()) return s.substr(at + 1);
    if (s.compare(end + 1, 3, "   ") != 0) return s.substr(at + 1, end - at - 1);  // next row
    end++;
  }
}

// Every line of s fits the report width (120 columns).
void expect_fits(const std::string &s) {
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) EXPECT_LE(line.size(), 120u) << line;
}

}  // namespace

TEST(Explain, TextRowsShowDecisionReasonAndCasts) {
  PGraph t(APX_O1);
  tiny(t);
  t.preset();
  t.compile();
  std::string s = explain(t, APX_EXPLAIN_TEXT);
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    EXPECT_NE(line.rfind("  Cast_", 0), 0u) << "inserted casts are not rows: " << line;
  std::string mm = row_block(s, "mm"), sm = row_block(s, "sm");
  EXPECT_TRUE(has(s, "apexc --explain: m.onnx\n  -O1  half=fp16  loss scaling: dynamic, initial scale "
                     "65536, growth interval 2000 steps\n  lists=on")) << s;
  EXPECT_TRUE(has(s, "\nforward (2 nodes)\n")) << s;
  EXPECT_TRUE(has(mm, " MatMul ")) << mm;
  EXPECT_TRUE(has(mm, "fp16x2 -> fp16")) << mm;
  EXPECT_TRUE(has(mm, "list: fp16 (allow) -- MatMul")) << mm;
  EXPECT_TRUE(has(mm, "casts: in0 x fp32->fp16, in1 W fp32->fp16 (per-step copy)")) << mm;
  EXPECT_TRUE(has(sm, "list: fp32 (deny) -- Softmax")) << sm;
  EXPECT_TRUE(has(sm, "casts: in0 mm:0 fp16->fp32")) << sm;
  EXPECT_TRUE(has(s, "FLOPs in half precision: 61.5% (128 FLOP of 208 FLOP)")) << s;
  EXPECT_TRUE(has(s, "casts inserted: 3 Cast node(s), 0 constant(s) converted at compile time; "
                     "live Cast nodes before cleanup 3, after 3")) << s;
}

TEST(Explain, TextFitsOneHundredTwentyColumns) {
  for (ApxOptLevel level : {APX_O1, APX_O2}) {
    PGraph t(level);
    block(t);
    // a long reason (the node override names its pattern) and a name wider than its column
    t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "mlp_act*";
    t.preset();
    t.compile();
    std::string s = explain(t, APX_EXPLAIN_TEXT);
    expect_fits(s);
    std::string ln = row_block(s, "ln");
    EXPECT_TRUE(has(ln, "LayerNormalization")) << s;
  }
}

TEST(Explain, LongNamesTakeALineAndLongReasonsWrap) {
  PGraph t(APX_O1);
  const std::string name = "encoder/layer_11/attention/self/query/MatMul_with_a_long_name";
  int x = t.input("x", {2, 4});
  int w = t.param("W", {4, 8});
  int y = t.op(APX_OP_MatMul, name.c_str(), {x, w}, {2, 8});
  int s0 = t.op(APX_OP_Softmax, "sm", {y}, {2, 8});
  t.output(s0);
  t.o.fp32_nodes.items[t.o.fp32_nodes.n++] =
      "encoder/layer_11/attention/self/query/MatMul_with_a_long_name*";
  t.preset();
  t.compile();
  std::string s = explain(t, APX_EXPLAIN_TEXT);
  expect_fits(s);
  EXPECT_TRUE(has(s, "\n  " + name + "\n ")) << "the long name is alone on its line:\n" << s;
  std::string row = row_block(s, name);
  // the reason (node override with the pattern) continues on the row's next line
  size_t first_nl = row.find('\n', row.find('\n') + 1);
  EXPECT_NE(first_nl, std::string::npos) << row;
  EXPECT_TRUE(has(row, "MatMul")) << row;
}

TEST(Explain, DtypeRunsAreCompacted) {
  PGraph t(APX_O0);
  std::vector<int> ins;
  for (int i = 0; i < 5; i++) ins.push_back(t.input(("x" + std::to_string(i)).c_str(), {2, 3}));
  ins.push_back(t.input("idx", {2, 3}, APX_DT_I64));
  int c = t.op(APX_OP_Concat, "cat", {ins[0], ins[1], ins[2], ins[3], ins[4]}, {10, 3});
  apxtest::attrs<ApxAttrAxis>(t, t.find_node("cat"))->axis = 0;
  t.output(c);
  t.output(ins[5]);
  t.preset();
  t.compile();
  std::string s = explain(t, APX_EXPLAIN_TEXT);
  EXPECT_TRUE(has(row_block(s, "cat"), "fp32x5 -> fp32")) << s;
}

TEST(Explain, HeaderStatesHalfTypeAndLossScaling) {
  struct Case {
    ApxOptLevel level;
    ApxDType half;
    int training;
    const char *want;
  } cases[] = {
      {APX_O2, APX_DT_F16, 1, "-O2  half=fp16  loss scaling: dynamic, initial scale 65536, growth interval 2000 steps"},
      {APX_O2, APX_DT_BF16, 1, "-O2  half=bf16  loss scaling: static, scale 1"},
      {APX_O0, APX_DT_F16, 1, "-O0  half=none (fp32 throughout)  loss scaling: static, scale 1"},
      {APX_O1, APX_DT_F16, 0, "-O1  half=fp16  loss scaling: none (inference)"},
  };
  for (const Case &c : cases) {
    PGraph t(c.level, c.half);
    tiny(t);
    t.o.half_set = 1;
    t.o.training = c.training;
    t.preset();
    t.compile();
    std::string s = explain(t, APX_EXPLAIN_TEXT);
    EXPECT_TRUE(has(s, std::string("\n  ") + c.want + "\n")) << s;
    char line[256];
    apx_explain_precision_line(&t.o, line, sizeof line);
    EXPECT_EQ(std::string(line), c.want);
  }
}

TEST(Explain, EmitOnnxNotesTheBf16NodesWrittenAsFp32) {
  PGraph t(APX_O2, APX_DT_BF16);
  int x = t.input("x", {1, 1, 4, 4});
  int w = t.param("w", {1, 1, 3, 3});
  int y = t.op(APX_OP_Conv, "conv", {x, w}, {1, 1, 2, 2});
  int m = t.op(APX_OP_ReduceMean, "rm", {y}, {1, 1, 1, 1});
  t.output(m);
  // ReduceMean as an opset-17 model writes it: axes as an attribute (an input from opset 18)
  static int64_t axes[2] = {2, 3};
  ApxAttr a;
  memset(&a, 0, sizeof a);
  a.name = "axes";
  a.type = APX_ATTR_INTS;
  a.n = 2;
  a.ints = axes;
  ApxNode *rm = &t.g.nodes[t.find_node("rm")];
  rm->n_attrs = 1;
  rm->attrs = &a;
  t.g.opset = 17;
  t.o.half_set = 1;
  t.o.emit_onnx = "out.onnx";
  t.preset();
  t.compile();
  std::string row = row_block(explain(t, APX_EXPLAIN_TEXT), "conv");
  EXPECT_TRUE(has(row, "note: --emit-onnx: ONNX Conv admits bfloat16 from opset 22, but the model's"))
      << row;
  t.o.emit_onnx = nullptr;  // without --emit-onnx: no such note
  EXPECT_FALSE(has(row_block(explain(t, APX_EXPLAIN_TEXT), "conv"), "--emit-onnx"));
  rm->n_attrs = 0;
}

TEST(Explain, DotColoursNodesByPrecisionAndMarksCasts) {
  PGraph t(APX_O1);
  tiny(t);
  t.preset();
  t.compile();
  std::string s = explain(t, APX_EXPLAIN_DOT);
  EXPECT_EQ(s.rfind("digraph apexc_explain {", 0), 0u) << s;
  EXPECT_TRUE(has(s, "subgraph cluster_forward")) << s;
  // mm computes in fp16 (green), sm in fp32 (orange); reasons are tooltips
  EXPECT_TRUE(has(s, "fillcolor=\"#8fd694\", label=\"mm\\nMatMul  fp16\", tooltip=\"list: fp16 (allow) -- MatMul; note: tensor cores"))
      << s;
  EXPECT_TRUE(has(s, "fillcolor=\"#f7b267\", label=\"sm\\nSoftmax  fp32\"")) << s;
  EXPECT_TRUE(has(s, "label=\"Cast fp32->fp16\"")) << s;
  EXPECT_TRUE(has(s, "label=\"Cast fp16->fp32\"")) << s;
  EXPECT_TRUE(has(s, "style=\"filled,dashed\"")) << s;
  EXPECT_TRUE(has(s, "cluster_legend")) << s;
  EXPECT_EQ(s.substr(s.size() - 2), "}\n");
}

TEST(Explain, SummaryCountsFlopsCastsAndBytes) {
  PGraph t(APX_O1);
  tiny(t);
  t.preset();
  t.compile();
  ApxPrecisionSummary s;
  apx_explain_summarize(&t.g, &s);
  EXPECT_EQ(s.rows[0], 2);
  EXPECT_EQ(s.flops_total, 2 * 2 * 8 * 4 + 5 * 16);  // MatMul 2MNK, Softmax 5 per element
  EXPECT_EQ(s.flops_half, 2 * 2 * 8 * 4);
  EXPECT_EQ(s.n_half, 1);
  EXPECT_EQ(s.n_fp32, 1);
  EXPECT_EQ(s.casts_inserted, 3);
  // fp32 baseline: mm:0 [2,8] + sm:0 [2,8] at 4 bytes
  EXPECT_EQ(s.act_bytes_fp32, (16 + 16) * 4);
  // mixed: x copy [2,4] fp16 + W copy [4,8] fp16 + mm:0 fp16 + its fp32 cast + sm:0 fp32
  EXPECT_EQ(s.act_bytes_mixed, 8 * 2 + 32 * 2 + 16 * 2 + 16 * 4 + 16 * 4);
}

TEST(Explain, JsonFollowsTheSchema) {
  PGraph t(APX_O2);
  block(t);
  t.preset();
  t.compile();
  std::string s = explain(t, APX_EXPLAIN_JSON);
  ApxArena a;
  apx_arena_init(&a);
  char err[256];
  ApxJson *j = apx_json_parse(&a, s.data(), s.size(), err, sizeof err);
  ASSERT_NE(j, nullptr) << err << "\n" << s;
  EXPECT_STREQ(apx_json_get(j, "schema")->str, "apexc-explain/1");
  EXPECT_STREQ(apx_json_get(apx_json_get(j, "options"), "opt_level")->str, "O2");
  EXPECT_STREQ(apx_json_get(apx_json_get(j, "options"), "loss_scaling")->str, "dynamic");
  EXPECT_EQ(apx_json_get(apx_json_get(j, "options"), "loss_scale")->number, 65536.0);
  EXPECT_EQ(apx_json_get(apx_json_get(j, "options"), "growth_interval")->number, 2000.0);
  const ApxJson *nodes = apx_json_get(j, "nodes");
  ASSERT_NE(nodes, nullptr);
  ApxPrecisionSummary sm;
  apx_explain_summarize(&t.g, &sm);
  EXPECT_EQ(nodes->n, sm.rows[0] + sm.rows[1] + sm.rows[2]);
  std::map<std::string, const ApxJson *> by;
  int last_section = 0;
  const std::map<std::string, int> order = {{"forward", 0}, {"backward", 1}, {"optimizer", 2}};
  for (int i = 0; i < nodes->n; i++) {
    const ApxJson *n = &nodes->items[i];
    for (const char *key : {"name", "op", "section", "decision", "rule", "reason", "inputs", "outputs",
                            "casts", "origin", "note", "flops"})
      EXPECT_NE(apx_json_get(n, key), nullptr) << key;
    by[apx_json_get(n, "name")->str] = n;
    int sec = order.at(apx_json_get(n, "section")->str);
    EXPECT_GE(sec, last_section);  // forward rows, then backward, then optimizer
    last_section = sec;
  }
  ASSERT_TRUE(by.count("attn_mask"));
  EXPECT_STREQ(apx_json_get(by["attn_mask"], "rule")->str, "overflow-constant");
  EXPECT_STREQ(apx_json_get(by["attn_mask"], "decision")->str, "fp32");
  EXPECT_STREQ(apx_json_get(by["mlp_fc_grad_w"], "rule")->str, "inherited");
  EXPECT_STREQ(apx_json_get(by["mlp_fc_grad_w"], "origin")->str, "mlp_fc");
  EXPECT_STREQ(apx_json_get(by["dim0"], "decision")->str, "i64");
  EXPECT_STREQ(apx_json_get(by["loss"], "rule")->str, "loss");
  EXPECT_NE(std::string(apx_json_get(by["mlp_fc"], "note")->str).find("N=100"), std::string::npos);
  const ApxJson *casts = apx_json_get(by["attn_q"], "casts");
  ASSERT_EQ(casts->n, 1);  // x cast to half; Wq is stored in half
  EXPECT_STREQ(apx_json_get(&casts->items[0], "value")->str, "x");
  EXPECT_STREQ(apx_json_get(&casts->items[0], "kind")->str, "cast");
  const ApxJson *summary = apx_json_get(j, "summary");
  EXPECT_EQ(apx_json_get(summary, "flops_total")->number, (double)sm.flops_total);
  EXPECT_EQ(apx_json_get(apx_json_get(summary, "casts"), "inserted")->number, (double)sm.casts_inserted);
  apx_arena_free(&a);
}

TEST(Explain, PolicyRoundTrip) {
  std::string path = tmpfile_path();
  std::map<std::string, ApxDType> first;
  {
    PGraph t(APX_O1);
    block(t);
    t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "attn_q";
    t.o.half_ops.items[t.o.half_ops.n++] = "LayerNormalization";
    t.preset();
    t.compile();
    first = decisions(t);
    std::ofstream(path) << explain(t, APX_EXPLAIN_JSON);
  }
  EXPECT_EQ(first["attn_q"], APX_DT_F32);
  EXPECT_EQ(first["ln"], APX_DT_F16);
  PGraph t(APX_O1);
  block(t);
  t.o.policy_path = path.c_str();
  t.preset();
  t.compile();
  std::map<std::string, ApxDType> second = decisions(t);
  EXPECT_EQ(first, second);
  EXPECT_EQ(t.n("attn_q").reason, APX_REASON_POLICY_NODE);
  EXPECT_EQ(t.n("ln").reason, APX_REASON_POLICY_NODE);
  EXPECT_EQ(t.n("mlp_fc_grad_w").reason, APX_REASON_INHERITED);  // roles are not overridden
  EXPECT_EQ(t.warnings().find("--policy"), std::string::npos) << t.warnings();
  unlink(path.c_str());
}

TEST(Explain, PolicyUnknownNodesAndOpsAreErrors) {
  std::string path = tmpfile_path();
  {
    std::ofstream(path) << R"({"schema": "apexc-explain/1", "nodes": [
      {"name": "mm", "decision": "fp32"}, {"name": "nope", "decision": "fp16"},
      {"name": "gone", "decision": "fp16"}]})";
    PGraph t(APX_O1);
    tiny(t);
    t.o.policy_path = path.c_str();
    t.preset();
    EXPECT_LT(t.run(pass_precision), 0);
    EXPECT_EQ(std::string(t.d.msg), path + ": unknown nodes 'nope', 'gone' (not in m.onnx)");
    EXPECT_EQ(t.d.code, APX_EXIT_BAD_INPUT);
  }
  {
    std::ofstream(path) << R"({"ops": [{"op": "SoftMax", "decision": "fp16"}]})";
    PGraph t(APX_O1);
    tiny(t);
    t.o.policy_path = path.c_str();
    EXPECT_LT(t.load_policy(), 0);  // op names are checked when the file is read
    EXPECT_EQ(std::string(t.d.msg), path + ": line 1: unknown op 'SoftMax'");
  }
  {
    std::ofstream(path) << R"({"nodes": [{"name": "mm", "op": "Gemm", "decision": "fp16"}]})";
    PGraph t(APX_O1);
    tiny(t);
    t.o.policy_path = path.c_str();
    t.preset();
    EXPECT_LT(t.run(pass_precision), 0);
    EXPECT_EQ(std::string(t.d.msg), path + ": line 1: node 'mm' is a MatMul in m.onnx, the policy says Gemm");
  }
  {
    // fp64 in a training graph: refused naming the node and what to choose instead (the
    // gradients would reach the fp32 optimizer as fp64); an inference graph takes it
    std::ofstream(path) << R"({"nodes": [{"name": "mm", "decision": "fp64"}]})";
    PGraph t(APX_O1);
    tiny(t);
    t.o.policy_path = path.c_str();
    t.preset();
    EXPECT_LT(t.run(pass_precision), 0);
    EXPECT_EQ(std::string(t.d.msg), path + ": line 1: not supported yet: decision fp64 for node 'mm' (MatMul) in a "
                                           "training graph (gradients reach the optimizer in fp32); choose fp32, "
                                           "fp16, bf16 or half, or compile with --inference");
    PGraph inf(APX_O1);
    tiny(inf);
    inf.o.policy_path = path.c_str();
    inf.o.training = 0;
    inf.preset();
    EXPECT_GE(inf.run(pass_precision), 0) << inf.d.msg;
    EXPECT_EQ(inf.n("mm").compute, APX_DT_F64);
  }
  {
    std::ofstream(path) << "{\"nodes\": [";
    PGraph t(APX_O1);
    tiny(t);
    t.o.policy_path = path.c_str();
    EXPECT_LT(t.load_policy(), 0);
    EXPECT_TRUE(has(t.d.msg, ": not valid JSON: line 1, column 12")) << t.d.msg;
  }
  unlink(path.c_str());
}

TEST(Explain, PolicyOpEntriesAndFixedRoles) {
  std::string path = tmpfile_path();
  std::ofstream(path) << R"({"ops": [{"op": "Softmax", "decision": "half"}],
    "nodes": [{"name": "loss", "decision": "fp16"}]})";
  PGraph t(APX_O1);
  block(t);
  t.o.policy_path = path.c_str();
  t.o.fp32_nodes.items[t.o.fp32_nodes.n++] = "attn_softmax";
  t.preset();
  t.decide();
  EXPECT_EQ(t.n("attn_softmax").compute, APX_DT_F32);  // the CLI node override wins
  EXPECT_EQ(t.n("loss").compute, APX_DT_F32);          // loss stays fp32
  EXPECT_TRUE(has(t.warnings(), "node 'loss' (SoftmaxCrossEntropyLoss): --policy")) << t.warnings();
  EXPECT_TRUE(has(t.warnings(), "asks fp16, ignored: loss: SoftmaxCrossEntropyLoss stays fp32")) << t.warnings();
  unlink(path.c_str());

  std::ofstream(path) << R"({"ops": [{"op": "Softmax", "decision": "half"}]})";
  PGraph u(APX_O1);
  tiny(u);
  u.o.policy_path = path.c_str();
  u.preset();
  u.decide();
  EXPECT_EQ(u.n("sm").compute, APX_DT_F16);
  EXPECT_EQ(u.n("sm").reason, APX_REASON_POLICY_OP);
  unlink(path.c_str());
}
