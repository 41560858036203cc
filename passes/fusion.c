/* fusion.c - fusion records, traffic estimates and the fusion report (see fusion.h). */
#include "passes/fusion.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/cost.h"
#include "ir/text.h"

static const char *why_names[APX_FUSE_WHY_COUNT] = {
    "applied", "dtype", "shape", "consumers", "legality", "backward",
};

const char *apx_fusion_why_name(ApxFusionWhy w) {
  return (int)w >= 0 && w < APX_FUSE_WHY_COUNT ? why_names[w] : "?";
}

void apx_traffic_count_node(const ApxGraph *g, int id, ApxTraffic *t, int sign) {
  const ApxNode *n = &g->nodes[id];
  if ((n->flags & APX_NODEF_DEAD) || (apx_op_info(n->op)->flags & APX_OPF_SHAPEONLY)) return;
  int s = n->section >= APX_SEC_FORWARD && n->section <= APX_SEC_OPTIMIZER ? (int)n->section : 0;
  t->kernels[s] += sign;
  int64_t r = apx_node_bytes_read(g, id), w = apx_node_bytes_written(g, id);
  if (r < 0 || w < 0)
    t->unknown += sign;
  else
    t->bytes[s] += sign * (r + w);
}

void apx_traffic_add(ApxTraffic *t, const ApxTraffic *d) {
  for (int s = 0; s < 3; s++) {
    t->kernels[s] += d->kernels[s];
    t->bytes[s] += d->bytes[s];
  }
  t->unknown += d->unknown;
}

void apx_graph_traffic(const ApxGraph *g, ApxTraffic *t) {
  memset(t, 0, sizeof *t);
  /* every live node (a pass may have changed the graph without re-sorting g->order yet) */
  for (int id = 0; id < g->n_nodes; id++) apx_traffic_count_node(g, id, t, 1);
}

ApxFusionLog *apx_fusion_log(ApxGraph *g) { return apx_fusion_log_start(g, 1); }

ApxFusionLog *apx_fusion_log_start(ApxGraph *g, int count_traffic) {
  if (g->fusion) return g->fusion;
  ApxFusionLog *l = apx_arena_alloc(&g->arena, sizeof *l);
  if (!l) return NULL;
  l->no_traffic = !count_traffic;
  if (count_traffic) apx_graph_traffic(g, &l->before);
  l->before_nodes = g->n_nodes;
  l->before_vals = g->n_vals;
  g->fusion = l;
  return l;
}

static void set_after(ApxGraph *g, ApxFusionLog *l, const ApxTraffic *t) {
  l->after = *t;
  l->have_after = 1;
  l->after_nodes = g->n_nodes;
  l->after_vals = g->n_vals;
}

void apx_fusion_log_after(ApxGraph *g, int changed) {
  ApxFusionLog *l = apx_fusion_log(g);
  if (!l || l->no_traffic) return;
  if (!changed && l->have_after && l->after_nodes == g->n_nodes && l->after_vals == g->n_vals)
    return;
  if (!changed && !l->have_after && l->before_nodes == g->n_nodes && l->before_vals == g->n_vals) {
    set_after(g, l, &l->before); /* the first fusion pass, and it changed nothing */
    return;
  }
  ApxTraffic t;
  apx_graph_traffic(g, &t);
  set_after(g, l, &t);
}

int apx_fusion_log_current(const ApxGraph *g) {
  const ApxFusionLog *l = g->fusion;
  if (!l || l->no_traffic) return 0;
  return l->have_after ? l->after_nodes == g->n_nodes && l->after_vals == g->n_vals
                       : l->before_nodes == g->n_nodes && l->before_vals == g->n_vals;
}

void apx_fusion_log_after_delta(ApxGraph *g, const ApxTraffic *delta) {
  ApxFusionLog *l = g->fusion;
  if (!l) return;
  ApxTraffic t = l->have_after ? l->after : l->before;
  apx_traffic_add(&t, delta);
  set_after(g, l, &t);
}

static const char *dup(ApxGraph *g, const char *s) { return s ? apx_arena_strdup(&g->arena, s) : NULL; }

int apx_fusion_record(ApxGraph *g, const ApxFusionRecord *r) {
  ApxFusionLog *l = apx_fusion_log(g);
  if (!l) return -1;
  if (l->n == l->cap) {
    int32_t nc = l->cap ? l->cap * 2 : 32;
    ApxFusionRecord *p = apx_arena_alloc(&g->arena, (size_t)nc * sizeof *p);
    if (!p) return -1;
    if (l->n) memcpy(p, l->recs, (size_t)l->n * sizeof *p);
    l->recs = p;
    l->cap = nc;
  }
  ApxFusionRecord *e = &l->recs[l->n++];
  *e = *r;
  e->pass = dup(g, r->pass);
  e->pattern = dup(g, r->pattern);
  e->fused_op = dup(g, r->fused_op);
  e->nodes = dup(g, r->nodes);
  e->fused = dup(g, r->fused);
  e->detail = dup(g, r->detail);
  return 0;
}

static void human_bytes(char *buf, size_t cap, int64_t b) {
  if (b >= (int64_t)1 << 30)
    snprintf(buf, cap, "%.2f GiB", (double)b / (double)((int64_t)1 << 30));
  else if (b >= 1 << 20)
    snprintf(buf, cap, "%.2f MiB", (double)b / (double)(1 << 20));
  else if (b >= 1 << 10)
    snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
  else
    snprintf(buf, cap, "%" PRId64 " B", b);
}

static void traffic_line(FILE *f, const char *what, int64_t before, int64_t after, int bytes) {
  char b1[32], b2[32];
  if (bytes) {
    human_bytes(b1, sizeof b1, before);
    human_bytes(b2, sizeof b2, after);
  } else {
    snprintf(b1, sizeof b1, "%" PRId64, before);
    snprintf(b2, sizeof b2, "%" PRId64, after);
  }
  double pct = before > 0 ? 100.0 * (double)(after - before) / (double)before : 0.0;
  fprintf(f, "    %-10s %12s -> %-12s (%+.1f%%)", what, b1, b2, pct);
  if (bytes) fprintf(f, "  [%" PRId64 " -> %" PRId64 " bytes]", before, after);
  fputc('\n', f);
}

static void multi_tensor_lines(const ApxGraph *g, FILE *f) {
  int n_step = 0, n_unscale = 0;
  int64_t params = 0, grads = 0;
  const char *kind = "";
  for (int k = 0; k < g->n_order; k++) {
    const ApxNode *n = &g->nodes[g->order[k]];
    if (n->op == APX_OP_OptimizerStep) {
      const ApxAttrOptimizer *a = n->typed;
      n_step++;
      params += a->n_params;
      kind = a->kind == APX_OPTIM_SGD ? "sgd" : a->kind == APX_OPTIM_ADAMW ? "adamw" : "lamb";
    } else if (n->op == APX_OP_UnscaleCheck) {
      n_unscale++;
      grads += n->n_in - 1;
    }
  }
  if (!n_step && !n_unscale) {
    fprintf(f, "  multi-tensor: no optimizer section (inference graph)\n");
    return;
  }
  fprintf(f, "  multi-tensor: %d OptimizerStep kernel%s updating %" PRId64 " parameters (%s%s)\n",
          n_step, n_step == 1 ? "" : "s", params, kind,
          n_step == 1 ? ", all updates in one kernel" : "");
  fprintf(f, "  multi-tensor: %d UnscaleCheck kernel%s over %" PRId64 " gradients (unscale + inf/nan "
          "check + grad norm%s)\n", n_unscale, n_unscale == 1 ? "" : "s", grads,
          n_unscale == 1 ? " in one pass" : "");
}

/* One applied / rejected record, wrapped to the report width (node lists run long). */
static void record_line(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record_line(FILE *f, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *line = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (line) vsnprintf(line, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  va_end(ap);
  apx_text_wrap(f, "    ", 6, line ? line : "(out of memory)", APX_TEXT_WIDTH);
  free(line);
}

void apx_fusion_report_write(const ApxGraph *g, FILE *f) {
  const ApxFusionLog *l = g->fusion;
  fprintf(f, "fusion report: %s\n", g->file);
  if (!l) {
    fprintf(f, "  no fusion pass ran\n");
    return;
  }
  if (l->disabled) fprintf(f, "  fusion disabled (--no-fuse)\n");
  int applied = 0, rejected = 0;
  for (int i = 0; i < l->n; i++) {
    if (l->recs[i].why == APX_FUSE_APPLIED)
      applied++;
    else
      rejected++;
  }
  fprintf(f, "  applied (%d):\n", applied);
  for (int i = 0; i < l->n; i++) {
    const ApxFusionRecord *r = &l->recs[i];
    if (r->why != APX_FUSE_APPLIED) continue;
    record_line(f, "%-16s %-22s [%s] -> %s (%d forward, %d backward nodes replaced)%s%s", r->fused_op,
                r->pattern, r->nodes, r->fused ? r->fused : "?", r->n_fwd, r->n_bwd,
                r->detail ? "; " : "", r->detail ? r->detail : "");
  }
  fprintf(f, "  not fused (%d):\n", rejected);
  for (int i = 0; i < l->n; i++) {
    const ApxFusionRecord *r = &l->recs[i];
    if (r->why == APX_FUSE_APPLIED) continue;
    record_line(f, "%-16s %-22s [%s]: %s: %s", r->fused_op, r->pattern, r->nodes,
                apx_fusion_why_name(r->why), r->detail ? r->detail : "");
  }
  multi_tensor_lines(g, f);
  if (l->no_traffic) { /* a compile that asked for no report (ApxOptions.fusion_traffic) */
    fprintf(f, "  per training step: not counted\n");
    return;
  }
  ApxTraffic now;
  if (l->have_after)
    now = l->after;
  else
    apx_graph_traffic(g, &now);
  fprintf(f, "  per training step, before -> after fusion:\n");
  static const char *sec[3] = {"forward", "backward", "optimizer"};
  traffic_line(f, "kernels", apx_traffic_kernels(&l->before), apx_traffic_kernels(&now), 0);
  for (int s = 0; s < 3; s++) traffic_line(f, sec[s], l->before.kernels[s], now.kernels[s], 0);
  traffic_line(f, "bytes", apx_traffic_bytes(&l->before), apx_traffic_bytes(&now), 1);
  for (int s = 0; s < 3; s++) traffic_line(f, sec[s], l->before.bytes[s], now.bytes[s], 1);
  fprintf(f, "  summary: kernels %d -> %d, bytes %" PRId64 " -> %" PRId64 " per step\n",
          apx_traffic_kernels(&l->before), apx_traffic_kernels(&now), apx_traffic_bytes(&l->before),
          apx_traffic_bytes(&now));
  if (l->before.unknown || now.unknown)
    fprintf(f, "    (%d / %d nodes with unknown shapes not counted)\n", l->before.unknown, now.unknown);
}
