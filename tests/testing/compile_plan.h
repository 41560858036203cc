// compile_plan.h - test-only C++ helpers that compile a model file the way apexc does (the
// opt-level preset applied, then every pass of compiler/pipeline.h) into a graph, an
// in-memory plan or a plan file. Header-only; a failure returns false with the one-line
// message in *err, so each test keeps its own ASSERT/EXPECT.
#ifndef APX_TESTING_COMPILE_PLAN_H
#define APX_TESTING_COMPILE_PLAN_H

#include <string>

extern "C" {
#include "ir/diag.h"
#include "compiler/emit_plan.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "compiler/pipeline.h"
#include "plan/plan.h"
}

namespace apx_testing {

// Applies o's opt-level preset (apx_options_apply_preset); false with its message in *err.
inline bool ApplyPreset(ApxOptions &o, std::string *err) {
  char buf[512];
  if (apx_options_apply_preset(&o, buf, sizeof buf) == 0) return true;
  *err = buf;
  return false;
}

// ApplyPreset, then o.model_path compiled into *g, with *d initialized here (quiet) and left
// to the caller. Once apx_compile_file ran (true, or false with d->code set) the caller frees
// g with apx_graph_free.
inline bool CompileGraph(ApxOptions &o, ApxGraph *g, ApxDiag *d, std::string *err) {
  if (!ApplyPreset(o, err)) return false;
  apx_diag_init(d);
  d->quiet = 1;
  if (apx_compile_file(g, &o, d) == 0) return true;
  *err = d->msg;
  return false;
}

// CompileGraph, then *plan (apx_plan_init()ed here) from the graph. The plan points into
// *g: the caller frees plan, then g.
inline bool CompileToPlan(ApxOptions &o, ApxGraph *g, ApxPlan *plan, ApxDiag *d, std::string *err) {
  if (!CompileGraph(o, g, d, err)) return false;
  apx_plan_init(plan);
  if (apx_plan_from_graph(g, &o, plan, d) != 0) {
    *err = d->msg;
    return false;
  }
  return true;
}

// As CompileGraph, then the plan written to path (apx_emit_plan_file); the graph is freed
// here.
inline bool CompileToPlanFile(ApxOptions &o, const std::string &path, std::string *err) {
  if (!ApplyPreset(o, err)) return false;
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  ApxGraph g;
  bool ok = apx_compile_file(&g, &o, &d) == 0 && apx_emit_plan_file(&g, &o, path.c_str(), &d) == 0;
  if (!ok) *err = d.msg;
  apx_graph_free(&g);
  return ok;
}

}  // namespace apx_testing

#endif
