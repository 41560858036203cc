/* explain_dot.c - --explain=dot: the decided graph as Graphviz, one box per node filled by
 * the precision it computes in, the Casts apexc inserted marked (yellow, red dashed border),
 * edges coloured by the dtype they carry, one cluster per section (forward, backward,
 * optimizer) and a legend. Each node's tooltip (shown on hover in the SVG) is the reason of
 * its decision and its note. Render with `dot -Tsvg graph.dot -o graph.svg`.
 *
 * Drawn: every live node (inserted Casts included) and the graph's data inputs; parameters
 * and constants are left out (they would outnumber the nodes), so a per-step half copy of a
 * parameter shows as a Cast with no incoming edge. */
#include <stdio.h>
#include <string.h>

#include "compiler/explain.h"
#include "passes/precision_rules.h"

/* Fill colours by decision (also the edge colours by dtype). */
static const char *dtype_colour(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return "#8fd694";  /* green */
    case APX_DT_BF16: return "#8ec5f0"; /* blue */
    case APX_DT_F32: return "#f7b267";  /* orange */
    case APX_DT_F64: return "#e98b8b";  /* red */
    case APX_DT_UNDEFINED: return "#ffffff";
    default: return "#d9d9d9"; /* integer, bool: grey */
  }
}

static const char *const cast_fill = "#fff176", *const cast_border = "#d32f2f";

/* A DOT string literal's contents: quotes and backslashes escaped, newlines as \n. */
static void dot_str(FILE *f, const char *s) {
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if (*s == '\n') {
      fputs("\\n", f);
      continue;
    }
    fputc(*s, f);
  }
}

static const char *section_title(int sec) {
  return sec == APX_SEC_FORWARD ? "forward" : sec == APX_SEC_BACKWARD ? "backward" : "optimizer";
}

static void write_node(FILE *f, const ApxGraph *g, int id) {
  const ApxNode *n = &g->nodes[id];
  if (apx_prec_is_inserted_cast(g, id)) {
    int src = n->n_in > 0 ? n->in[0] : -1, dst = n->n_out > 0 ? n->out[0] : -1;
    fprintf(f, "    n%d [shape=box, style=\"filled,dashed\", penwidth=2, color=\"%s\", fillcolor=\"%s\", "
               "label=\"Cast %s->%s\", tooltip=\"",
            id, cast_border, cast_fill, src >= 0 ? apx_dtype_short(g->vals[src].dtype) : "?",
            dst >= 0 ? apx_dtype_short(g->vals[dst].dtype) : "?");
    fputs("inserted by apexc: ", f);
    dot_str(f, src >= 0 ? g->vals[src].name : "?");
    fputs("\"];\n", f);
    return;
  }
  fprintf(f, "    n%d [fillcolor=\"%s\", label=\"", id, dtype_colour(n->compute));
  dot_str(f, n->name);
  fprintf(f, "\\n%s  %s\", tooltip=\"", apx_op_name(n->op),
          n->compute == APX_DT_UNDEFINED ? "undecided" : apx_dtype_short(n->compute));
  dot_str(f, n->reason_detail ? n->reason_detail : "undecided");
  if (n->note) {
    fputs("; note: ", f);
    dot_str(f, n->note);
  }
  fputs("\"];\n", f);
}

int apx_explain_write_dot(const ApxGraph *g, const ApxOptions *o, FILE *f) {
  char prec[256];
  apx_explain_precision_line(o, prec, sizeof prec);
  fputs("digraph apexc_explain {\n  rankdir=TB;\n  labelloc=t;\n  label=\"", f);
  dot_str(f, g->file);
  fputs("\\n", f);
  dot_str(f, prec);
  fputs("\";\n  node [shape=box, style=filled, fontname=\"Helvetica\", fontsize=10];\n"
        "  edge [arrowsize=0.6];\n",
        f);
  for (int i = 0; i < g->n_inputs; i++) {
    const ApxValue *v = &g->vals[g->inputs[i]];
    fprintf(f, "  v%d [shape=ellipse, fillcolor=\"%s\", label=\"", g->inputs[i], dtype_colour(v->dtype));
    dot_str(f, v->name);
    fprintf(f, "\\n%s\"];\n", apx_dtype_short(v->dtype));
  }
  for (int sec = APX_SEC_FORWARD; sec <= APX_SEC_OPTIMIZER; sec++) {
    int any = 0;
    for (int k = 0; k < g->n_order; k++) {
      int id = g->order[k];
      const ApxNode *n = &g->nodes[id];
      if ((n->flags & APX_NODEF_DEAD) || (int)n->section != sec) continue;
      if (!any) fprintf(f, "  subgraph cluster_%s {\n    label=\"%s\";\n    style=rounded;\n",
                        section_title(sec), section_title(sec));
      any = 1;
      write_node(f, g, id);
    }
    if (any) fputs("  }\n", f);
  }
  /* edges: producer -> consumer for every value a drawn node reads, coloured by its dtype */
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    if (n->flags & APX_NODEF_DEAD) continue;
    for (int i = 0; i < n->n_in; i++) {
      int v = n->in[i];
      if (v < 0) continue;
      const ApxValue *val = &g->vals[v];
      int p = val->producer;
      const char *colour = dtype_colour(val->dtype);
      if (val->kind == APX_VAL_INPUT && p < 0)
        fprintf(f, "  v%d -> n%d [color=\"%s\"];\n", v, id, colour);
      else if (p >= 0 && !(g->nodes[p].flags & APX_NODEF_DEAD))
        fprintf(f, "  n%d -> n%d [color=\"%s\"];\n", p, id, colour);
    }
  }
  fprintf(f, "  subgraph cluster_legend {\n    label=\"legend\";\n    style=rounded;\n"
             "    legend_f16 [label=\"fp16\", fillcolor=\"%s\"];\n"
             "    legend_bf16 [label=\"bf16\", fillcolor=\"%s\"];\n"
             "    legend_f32 [label=\"fp32\", fillcolor=\"%s\"];\n"
             "    legend_other [label=\"integer / bool\", fillcolor=\"%s\"];\n"
             "    legend_cast [label=\"Cast inserted by apexc\", style=\"filled,dashed\", penwidth=2, "
             "color=\"%s\", fillcolor=\"%s\"];\n"
             "  }\n}\n",
          dtype_colour(APX_DT_F16), dtype_colour(APX_DT_BF16), dtype_colour(APX_DT_F32),
          dtype_colour(APX_DT_I64), cast_border, cast_fill);
  return 0;
}
