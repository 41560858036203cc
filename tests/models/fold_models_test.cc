// fold_models_test.cc - constant evaluation on the reference PyTorch exports: every node of
// tests/models/*/*/model.onnx whose inputs are all constants is folded by pass_fold_constants
// (random ops and training-mode BatchNormalization excepted: they must stay), nothing is held
// back by the --fold-max-mb cap, and no trainable parameter becomes a constant. Prints, per
// export, the nodes folded. Exports that do not load yet (an op apexc lacks) are listed with
// the loader's first line and checked once they load.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

extern "C" {
#include "compiler/onnx_load.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "passes/fold_constants.h"
}

namespace {

const char *const kModels[] = {"resnet18", "mobilenet_v3_small", "vit", "gpt2", "bert", "mlp"};
const char *const kExports[] = {"readme", "helper_legacy", "helper_dynamo", "dynamo_default"};

// 1 when every present input is a constant with data and there is one.
bool all_inputs_const(const ApxGraph &g, const ApxNode &n) {
  int present = 0;
  for (int k = 0; k < n.n_in; k++) {
    if (n.in[k] < 0) continue;
    const ApxValue &v = g.vals[n.in[k]];
    if (v.kind != APX_VAL_CONST || (!v.data && apx_value_numel(&v) != 0)) return false;
    present++;
  }
  return present > 0;
}

// Nodes on constants that must stay runtime nodes: random draws and training-mode
// BatchNormalization (its running statistics are updated every step).
bool must_stay(const ApxGraph &g, int id) {
  const ApxNode &n = g.nodes[id];
  if (n.op == APX_OP_Dropout) return ((const ApxAttrDropout *)n.typed)->training_mode != 0;
  if (n.op == APX_OP_BatchNormalization) return ((const ApxAttrBatchNorm *)n.typed)->training_mode != 0;
  return (apx_op_info(n.op)->flags & APX_OPF_RANDOM) != 0;
}

}  // namespace

TEST(FoldModels, EveryNodeOnConstantsOfTheReferenceExportsFolds) {
  int loaded = 0;
  std::string table;
  for (const char *m : kModels)
    for (const char *e : kExports) {
      std::string path = std::string("tests/models/") + m + "/" + e + "/model.onnx";
      std::string name = std::string(m) + "/" + e;
      ApxOptions o;
      apx_options_init(&o);
      o.model_path = path.c_str();
      ApxDiag d;
      apx_diag_init(&d);
      d.quiet = 1;
      ApxGraph g;
      apx_graph_init(&g, path.c_str());
      char line[600];
      if (apx_onnx_load_file(&g, path.c_str(), &o, &d) != 0) {
        std::string why = d.msg;
        why = why.substr(0, why.find('\n'));
        snprintf(line, sizeof line, "  %-34s not loaded yet: %s\n", name.c_str(), why.c_str());
        table += line;
        apx_graph_free(&g);
        continue;
      }
      loaded++;
      std::vector<bool> param(g.n_vals);
      for (int v = 0; v < g.n_vals; v++) param[v] = g.vals[v].kind == APX_VAL_PARAM;
      int before = g.n_order;
      int rc = pass_fold_constants(&g, &o, &d);
      EXPECT_GE(rc, 0) << name << ": " << d.msg;
      if (rc < 0) {
        apx_graph_free(&g);
        continue;
      }
      int folded = 0, shapes = 0, left = 0;
      int64_t bytes = 0;
      for (int k = 0; k < g.n_order; k++) {
        int id = g.order[k];
        const ApxNode &n = g.nodes[id];
        if (n.flags & APX_NODEF_DEAD) {
          folded++;
          shapes += n.op == APX_OP_Shape;
          for (int j = 0; j < n.n_out; j++)
            if (n.out[j] >= 0) bytes += apx_value_bytes(&g.vals[n.out[j]]);
          // nothing folds through a trainable parameter (compile-time only ops may read an
          // initializer that is only an operand: a Range bound, never trained)
          for (int j = 0; j < n.n_in; j++)
            if (n.in[j] >= 0 && param[n.in[j]] && !(apx_op_info(n.op)->flags & APX_OPF_FOLD))
              ADD_FAILURE() << name << ": node '" << n.name << "' (" << apx_op_name(n.op)
                            << ") folded through trainable parameter '" << g.vals[n.in[j]].name << "'";
          continue;
        }
        if (all_inputs_const(g, n) && !must_stay(g, id)) {
          left++;
          ADD_FAILURE() << name << ": node '" << n.name << "' (" << apx_op_name(n.op)
                        << ") has only constant inputs and was not folded"
                        << (n.note ? std::string(": ") + n.note : std::string());
        }
      }
      snprintf(line, sizeof line, "  %-34s %5d nodes, %4d folded (%d Shape), %lld bytes folded, %d on constants left\n",
               name.c_str(), before, folded, shapes, (long long)bytes, left);
      table += line;
      apx_graph_free(&g);
    }
  printf("constant folding of the reference exports (%d of %zu load):\n%s", loaded,
         sizeof kModels / sizeof *kModels * (sizeof kExports / sizeof *kExports), table.c_str());
  EXPECT_GT(loaded, 0);
}
