/* explain.c - --explain text and JSON: one row per node with its precision decision and
 * reason, then the summary (see explain.h; JSON schema in docs/explain-schema.md). */
#include "compiler/explain.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/cost.h"
#include "ir/text.h"
#include "passes/fusion.h"
#include "passes/bucketing.h"
#include "compiler/json.h"
#include "compiler/onnx_opset.h"
#include "compiler/policy_file.h"
#include "passes/precision_rules.h"

static const char *section_name(ApxSection s) {
  return s == APX_SEC_FORWARD ? "forward" : s == APX_SEC_BACKWARD ? "backward" : "optimizer";
}

static int is_row(const ApxGraph *g, int id) {
  return !(g->nodes[id].flags & APX_NODEF_DEAD) && !apx_prec_is_inserted_cast(g, id);
}

/* ---- casts feeding a node ----------------------------------------------------------- */

typedef struct CastRef {
  int output;       /* 0: input slot, 1: output slot */
  int slot;
  int src, dst;     /* value ids: before and after the conversion */
  const char *kind; /* "cast", "param-copy", "folded", "output", "grad" */
  int node;         /* the Cast node, -1 for folded constants */
} CastRef;

static int collect_casts(const ApxGraph *g, int id, CastRef *refs, int cap) {
  const ApxNode *n = &g->nodes[id];
  int k = 0;
  for (int i = 0; i < n->n_in && k < cap; i++) {
    int v = n->in[i];
    if (v < 0) continue;
    const ApxValue *val = &g->vals[v];
    int p = val->producer;
    if (p >= 0 && apx_prec_is_inserted_cast(g, p) && g->nodes[p].n_in > 0 && g->nodes[p].in[0] >= 0) {
      int src = g->nodes[p].in[0];
      if (g->vals[src].origin == v && (val->flags & APX_VALF_GRAD)) continue; /* on its producer's row */
      CastRef r = {0, i, src, v, g->vals[src].kind == APX_VAL_PARAM ? "param-copy" : "cast", p};
      refs[k++] = r;
    } else if (p < 0 && val->kind == APX_VAL_CONST && val->origin >= 0 && val->origin < g->n_vals &&
               g->vals[val->origin].dtype != val->dtype) {
      CastRef r = {0, i, val->origin, v, "folded", -1};
      refs[k++] = r;
    }
  }
  for (int o = 0; o < n->n_out && k < cap; o++) {
    int w = n->out[o];
    if (w < 0) continue;
    int orig = g->vals[w].origin;
    if (orig < 0 || orig >= g->n_vals) continue;
    int p = g->vals[orig].producer;
    if (p >= 0 && apx_prec_is_inserted_cast(g, p) && g->nodes[p].n_in > 0 && g->nodes[p].in[0] == w &&
        !(g->nodes[p].flags & APX_NODEF_DEAD)) {
      CastRef r = {1, o, w, orig, (g->vals[orig].flags & APX_VALF_GRAD) ? "grad" : "output", p};
      refs[k++] = r;
    }
  }
  return k;
}

/* ---- summary ------------------------------------------------------------------------ */

void apx_explain_summarize(const ApxGraph *g, ApxPrecisionSummary *s) {
  memset(s, 0, sizeof *s);
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    if (!is_row(g, id)) continue;
    const ApxNode *n = &g->nodes[id];
    if (n->section >= APX_SEC_FORWARD && n->section <= APX_SEC_OPTIMIZER) s->rows[n->section]++;
    if (apx_dtype_is_half(n->compute)) s->n_half++;
    else if (n->compute == APX_DT_F32) s->n_fp32++;
    else s->n_other++;
    if (n->note) s->notes++;
    int64_t f = apx_node_flops(g, id);
    if (f < 0) {
      s->flops_unknown++;
    } else {
      s->flops_total += f;
      if (apx_dtype_is_half(n->compute)) s->flops_half += f;
    }
  }
  for (int i = 0; i < g->n_nodes; i++)
    s->casts_live += g->nodes[i].op == APX_OP_Cast && !(g->nodes[i].flags & APX_NODEF_DEAD);
  s->casts_inserted = g->casts.inserted;
  s->casts_folded = g->casts.folded;
  s->casts_before_cleanup = g->casts.before_cleanup;
  s->casts_after_cleanup = g->casts.after_cleanup;
  for (int v = 0; v < g->n_vals; v++) {
    const ApxValue *val = &g->vals[v];
    if (val->kind != APX_VAL_ACTIVATION || val->producer < 0) continue;
    if (g->nodes[val->producer].flags & APX_NODEF_DEAD) continue;
    int64_t b = apx_value_bytes(val), ne = apx_value_numel(val);
    if (b < 0 || ne < 0) continue;
    s->act_bytes_mixed += b;
    if (apx_prec_is_inserted_cast(g, val->producer)) continue;
    s->act_bytes_fp32 += (val->dtype == APX_DT_F16 || val->dtype == APX_DT_BF16) ? ne * 4 : b;
  }
}

/* ---- text --------------------------------------------------------------------------- */

/* Grows-as-needed string builder for one cell. */
typedef struct Buf {
  char *p;
  size_t len, cap;
} Buf;

static void buf_add(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_add(Buf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->len + (size_t)n + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return;
    b->p = np;
    b->cap = nc;
  }
}

/* A dtype list with runs compacted: fp32,fp32,fp32,i64 -> "fp32x3,i64" (ASCII 'x', so
 * columns count bytes); an absent optional slot is "-". */
static void dtypes_compact(const ApxGraph *g, const int *ids, int n, Buf *b) {
  if (!n) buf_add(b, "-");
  for (int i = 0; i < n;) {
    const char *t = ids[i] >= 0 ? apx_dtype_short(g->vals[ids[i]].dtype) : "-";
    int run = 1;
    while (i + run < n && !strcmp(ids[i + run] >= 0 ? apx_dtype_short(g->vals[ids[i + run]].dtype) : "-", t))
      run++;
    buf_add(b, "%s%s", i ? "," : "", t);
    if (run > 1) buf_add(b, "x%d", run);
    i += run;
  }
}

/* The "types" cell: input dtypes -> output dtypes, as wired after cast insertion. */
static void types_cell(const ApxGraph *g, const ApxNode *n, Buf *b) {
  b->len = 0;
  if (b->p) b->p[0] = 0;
  dtypes_compact(g, n->in, n->n_in, b);
  buf_add(b, " -> ");
  dtypes_compact(g, n->out, n->n_out, b);
}

static const char *decision_str(ApxDType t) {
  return t == APX_DT_UNDEFINED ? "undecided" : apx_dtype_short(t);
}

/* The casts feeding node id, as one text ("" when none). */
static void casts_cell(const ApxGraph *g, int id, Buf *b, CastRef *refs, int cap) {
  b->len = 0;
  if (b->p) b->p[0] = 0;
  int k = collect_casts(g, id, refs, cap);
  for (int i = 0; i < k; i++) {
    const CastRef *r = &refs[i];
    const char *suffix = !strcmp(r->kind, "param-copy") ? " (per-step copy)"
                         : !strcmp(r->kind, "folded")   ? " (folded)"
                         : !strcmp(r->kind, "output")   ? " (graph output)"
                         : !strcmp(r->kind, "grad")     ? " (parameter's gradient in its type)"
                                                        : "";
    buf_add(b, "%s%s%d %s %s->%s%s", i ? ", " : "", r->output ? "out" : "in", r->slot,
            g->vals[r->output ? r->dst : r->src].name, apx_dtype_short(g->vals[r->src].dtype),
            apx_dtype_short(g->vals[r->dst].dtype), suffix);
  }
}

static void human(char *buf, size_t cap, double x, const char *unit) {
  const char *pre[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  double base = !strcmp(unit, "B") ? 1024.0 : 1000.0;
  while (x >= base && i < 5) {
    x /= base;
    i++;
  }
  if (!strcmp(unit, "B") && i) snprintf(buf, cap, "%.2f %siB", x, pre[i]);
  else snprintf(buf, cap, "%.3g %s%s", x, pre[i], unit);
}

/* One summary line, wrapped to the report width with a hanging indent. */
static void summary_line(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void summary_line(FILE *f, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  apx_text_wrap(f, "  ", 4, line, APX_TEXT_WIDTH);
}

static void write_summary_text(const ApxPrecisionSummary *s, FILE *f) {
  char a[32], b[32], unknown[64] = "";
  fprintf(f, "\nsummary\n");
  human(a, sizeof a, (double)s->flops_half, "FLOP");
  human(b, sizeof b, (double)s->flops_total, "FLOP");
  if (s->flops_unknown) snprintf(unknown, sizeof unknown, "; %d node(s) of unknown cost", s->flops_unknown);
  summary_line(f, "FLOPs in half precision: %.1f%% (%s of %s)%s",
               s->flops_total ? 100.0 * (double)s->flops_half / (double)s->flops_total : 0.0, a, b, unknown);
  summary_line(f, "casts inserted: %d Cast node(s), %d constant(s) converted at compile time; "
                  "live Cast nodes before cleanup %d, after %d",
               s->casts_inserted, s->casts_folded, s->casts_before_cleanup, s->casts_after_cleanup);
  human(a, sizeof a, (double)s->act_bytes_fp32, "B");
  human(b, sizeof b, (double)s->act_bytes_mixed, "B");
  summary_line(f, "activation bytes: %s at fp32, %s mixed (%.1f%%)", a, b,
               s->act_bytes_fp32 ? 100.0 * (double)s->act_bytes_mixed / (double)s->act_bytes_fp32 : 100.0);
  summary_line(f, "decisions: %d half, %d fp32, %d other (%d forward, %d backward, %d optimizer rows)",
               s->n_half, s->n_fp32, s->n_other, s->rows[0], s->rows[1], s->rows[2]);
}

void apx_explain_loss_scaling(const ApxOptions *o, char *buf, size_t cap) {
  if (!o->training)
    snprintf(buf, cap, "none (inference)");
  else if (o->loss_scale_mode == APX_LOSS_SCALE_DYNAMIC)
    snprintf(buf, cap, "dynamic, initial scale %g, growth interval %d steps", (double)o->loss_scale,
             (int)o->scale_window);
  else
    snprintf(buf, cap, "static, scale %g", (double)o->loss_scale);
  /* --loss A,B: one scaler per loss (passes/autodiff.h), each with these settings */
  size_t k = strlen(buf);
  if (o->training && o->loss_name && strchr(o->loss_name, ',') && k < cap)
    snprintf(buf + k, cap - k, "; one scaler per loss: %s", o->loss_name);
}

void apx_explain_precision_line(const ApxOptions *o, char *buf, size_t cap) {
  ApxPrecSettings s = apx_prec_settings(o);
  char ls[600];
  apx_explain_loss_scaling(o, ls, sizeof ls);
  snprintf(buf, cap, "-O%d  half=%s  loss scaling: %s", (int)s.level,
           s.level == APX_O0 ? "none (fp32 throughout)" : apx_dtype_short(s.half), ls);
}

const char *apx_explain_bn_running_var(const ApxGraph *g, const ApxOptions *o, char *buf, size_t cap) {
  int n = 0, unbiased = 0;
  for (int id = 0; id < g->n_nodes; id++) { /* dead ones too: --sync-bn rewrites them */
    const ApxNode *nd = &g->nodes[id];
    if ((nd->op != APX_OP_BatchNormalization && nd->op != APX_OP_BatchNormRelu) || !nd->typed) continue;
    const ApxAttrBatchNorm *a = nd->typed;
    if (!a->training_mode) continue;
    n++;
    unbiased |= a->unbiased_running_var != 0;
  }
  if (!n || !cap) return NULL;
  const char *prod = g->producer_name ? g->producer_name : "";
  char why[160];
  if (o->bn_running_var != APX_BN_VAR_AUTO)
    snprintf(why, sizeof why, "--bn-running-var=%s", unbiased ? "unbiased" : "population");
  else
    snprintf(why, sizeof why, "producer_name '%s'; --bn-running-var=%s for %s", prod,
             unbiased ? "population" : "unbiased", unbiased ? "ONNX's definition" : "PyTorch's");
  snprintf(buf, cap, "%s (%s; %s)",
           unbiased ? "unbiased, batch variance x n/(n-1)" : "population, the batch variance",
           unbiased ? "PyTorch's BatchNorm" : "ONNX's BatchNormalization", why);
  return buf;
}

static void header_text(const ApxGraph *g, const ApxOptions *o, FILE *f) {
  ApxPrecSettings s = apx_prec_settings(o);
  char line[512];
  apx_text_wrap(f, "apexc --explain: ", 2, g->file, APX_TEXT_WIDTH);
  apx_explain_precision_line(o, line, sizeof line);
  apx_text_wrap(f, "  ", 4, line, APX_TEXT_WIDTH);
  snprintf(line, sizeof line, "lists=%s  keep_batchnorm_fp32=%s  master_weights=%s  cast_model_type=%s",
           s.lists ? "on" : "off", s.keep_bn_fp32 ? "on" : "off", s.master_weights ? "on" : "off",
           s.model_half ? apx_dtype_short(s.half) : "fp32");
  apx_text_wrap(f, "  ", 4, line, APX_TEXT_WIDTH);
  char bn[320];
  if (apx_explain_bn_running_var(g, o, bn, sizeof bn)) apx_text_wrap(f, "  batchnorm running_var: ", 4, bn, APX_TEXT_WIDTH);
}

/* Column widths of one section's table (the report is APX_TEXT_WIDTH wide). A name wider
 * than its column gets a line of its own; types and reasons wrap inside their columns. */
enum { NAME_MAX_W = 28, TYPES_MAX_W = 22, REASON_MIN_W = 24 };
typedef struct Cols {
  int name, op, types, dec, reason;
} Cols;

static Cols section_cols(const ApxGraph *g, int sec, Buf *b) {
  Cols c = {4, 2, 5, 8, 0};
  for (int k = 0; k < g->n_order; k++) {
    int id = g->order[k];
    const ApxNode *n = &g->nodes[id];
    if (!is_row(g, id) || (int)n->section != sec) continue;
    int l = (int)strlen(n->name);
    if (l > c.name) c.name = l;
    l = (int)strlen(apx_op_name(n->op));
    if (l > c.op) c.op = l;
    types_cell(g, n, b);
    if ((int)b->len > c.types) c.types = (int)b->len;
    l = (int)strlen(decision_str(n->compute));
    if (l > c.dec) c.dec = l;
  }
  if (c.name > NAME_MAX_W) c.name = NAME_MAX_W;
  if (c.types > TYPES_MAX_W) c.types = TYPES_MAX_W;
  c.reason = APX_TEXT_WIDTH - (2 + c.name + 2 + c.op + 2 + c.types + 2 + c.dec + 2);
  if (c.reason < REASON_MIN_W) c.reason = REASON_MIN_W;
  return c;
}

/* Writes one table line: cells padded to their columns, trailing blanks dropped. */
static void table_line(FILE *f, const Cols *c, const char *name, const char *op, const char *types,
                       size_t ntypes, const char *dec, const char *reason, size_t nreason) {
  char line[4 * APX_TEXT_WIDTH];
  int len = snprintf(line, sizeof line, "  %-*s  %-*s  %-*.*s  %-*s  %.*s", c->name, name, c->op, op,
                     c->types, (int)ntypes, types, c->dec, dec, (int)nreason, reason);
  if (len < 0) return;
  if (len >= (int)sizeof line) len = (int)sizeof line - 1;
  while (len > 0 && line[len - 1] == ' ') len--;
  fwrite(line, 1, (size_t)len, f);
  fputc('\n', f);
}

/* One node row: the first line holds name, op and decision; types and reason continue on
 * further lines within their columns; casts and the note follow as "casts:"/"note:" lines
 * starting at the op column. */
static void write_row(FILE *f, const Cols *c, const ApxNode *n, const char *types, const char *reason,
                      const char *casts, const char *onnx_note) {
  const char *name = n->name;
  if ((int)strlen(name) > c->name) {
    fprintf(f, "  %s\n", name);
    name = "";
  }
  const char *op = apx_op_name(n->op), *dec = decision_str(n->compute);
  while (*types || *reason || op) {
    size_t at, ar;
    size_t lt = apx_text_wrap_next(types, c->types, &at);
    size_t lr = apx_text_wrap_next(reason, c->reason, &ar);
    table_line(f, c, name, op ? op : "", types, lt, op ? dec : "", reason, lr);
    types += at;
    reason += ar;
    name = "";
    op = NULL;
  }
  int indent = 2 + c->name + 2;
  char prefix[NAME_MAX_W + 16];
  if (*casts) {
    snprintf(prefix, sizeof prefix, "%*scasts: ", indent, "");
    apx_text_wrap(f, prefix, indent + 7, casts, APX_TEXT_WIDTH);
  }
  const char *notes[2] = {n->note, onnx_note};
  for (int i = 0; i < 2; i++) {
    if (!notes[i]) continue;
    snprintf(prefix, sizeof prefix, "%*snote: ", indent, "");
    apx_text_wrap(f, prefix, indent + 6, notes[i], APX_TEXT_WIDTH);
  }
}

static int write_text(const ApxGraph *g, const ApxOptions *o, FILE *f) {
  header_text(g, o, f);
  /* with --emit-onnx: the bf16 nodes the ONNX model holds as fp32 compute (onnx_opset.h) */
  ApxArena plan_arena;
  apx_arena_init(&plan_arena);
  ApxOnnxOpsetPlan plan = {0};
  if (o->emit_onnx && apx_onnx_opset_plan(g, &plan_arena, &plan)) plan.widen = NULL;
  int cap = 16;
  CastRef *refs = malloc(sizeof *refs * (size_t)cap);
  Buf types = {0}, casts = {0};
  for (int sec = APX_SEC_FORWARD; sec <= APX_SEC_OPTIMIZER; sec++) {
    int count = 0;
    for (int k = 0; k < g->n_order; k++)
      count += is_row(g, g->order[k]) && (int)g->nodes[g->order[k]].section == sec;
    if (!count) continue;
    Cols c = section_cols(g, sec, &types);
    fprintf(f, "\n%s (%d node%s)\n", section_name((ApxSection)sec), count, count == 1 ? "" : "s");
    table_line(f, &c, "node", "op", "types", 5, "decision", "reason", 6);
    for (int k = 0; k < g->n_order; k++) {
      int id = g->order[k];
      const ApxNode *n = &g->nodes[id];
      if (!is_row(g, id) || (int)n->section != sec) continue;
      int need = n->n_in + n->n_out;
      if (need > cap) {
        CastRef *nr = realloc(refs, sizeof *refs * (size_t)need);
        if (nr) {
          refs = nr;
          cap = need;
        }
      }
      types_cell(g, n, &types);
      casts_cell(g, id, &casts, refs, refs ? cap : 0);
      write_row(f, &c, n, types.p ? types.p : "", n->reason_detail ? n->reason_detail : "undecided",
                casts.p ? casts.p : "", plan.widen && plan.widen[id] ? plan.why[id] : NULL);
    }
  }
  free(refs);
  free(types.p);
  free(casts.p);
  apx_arena_free(&plan_arena);
  ApxPrecisionSummary s;
  apx_explain_summarize(g, &s);
  write_summary_text(&s, f);
  return 0;
}

/* ---- json --------------------------------------------------------------------------- */

static void json_values(ApxJsonWriter *w, const ApxGraph *g, const int *ids, int n) {
  apx_json_begin_array(w);
  for (int i = 0; i < n; i++) {
    if (ids[i] < 0) {
      apx_json_null(w);
      continue;
    }
    apx_json_begin_object(w);
    apx_json_kv_string(w, "name", g->vals[ids[i]].name);
    apx_json_kv_string(w, "dtype", apx_dtype_short(g->vals[ids[i]].dtype));
    apx_json_end_object(w);
  }
  apx_json_end_array(w);
}

static int write_json(const ApxGraph *g, const ApxOptions *o, FILE *f) {
  ApxPrecSettings s = apx_prec_settings(o);
  ApxJsonWriter w;
  apx_json_writer_init(&w, f);
  apx_json_begin_object(&w);
  apx_json_kv_string(&w, "schema", APX_EXPLAIN_SCHEMA);
  apx_json_kv_string(&w, "model", g->file);
  apx_json_key(&w, "options");
  apx_json_begin_object_inline(&w);
  char lvl[4] = {'O', (char)('0' + (int)s.level), 0, 0};
  apx_json_kv_string(&w, "opt_level", lvl);
  apx_json_kv_string(&w, "half", apx_dtype_short(s.half));
  apx_json_key(&w, "lists");
  apx_json_bool(&w, s.lists);
  apx_json_key(&w, "keep_batchnorm_fp32");
  apx_json_bool(&w, s.keep_bn_fp32);
  apx_json_key(&w, "master_weights");
  apx_json_bool(&w, s.master_weights);
  apx_json_kv_string(&w, "cast_model_type", s.model_half ? apx_dtype_short(s.half) : "fp32");
  apx_json_key(&w, "clamp_constants");
  apx_json_bool(&w, o->clamp_constants != 0);
  apx_json_kv_string(&w, "loss_scaling", !o->training ? "none"
                                         : o->loss_scale_mode == APX_LOSS_SCALE_DYNAMIC ? "dynamic"
                                                                                         : "static");
  apx_json_kv_number(&w, "loss_scale", o->training ? o->loss_scale : 1.0);
  if (o->training && o->loss_scale_mode == APX_LOSS_SCALE_DYNAMIC)
    apx_json_kv_int(&w, "growth_interval", o->scale_window);
  if (o->training && o->loss_name && strchr(o->loss_name, ','))
    apx_json_kv_string(&w, "losses", o->loss_name); /* one scaler each, the settings above */
  char bn[320];
  if (apx_explain_bn_running_var(g, o, bn, sizeof bn))
    apx_json_kv_string(&w, "bn_running_var", !strncmp(bn, "unbiased", 8) ? "unbiased" : "population");
  apx_json_end_object(&w);
  apx_json_key(&w, "nodes");
  apx_json_begin_array(&w);
  int cap = 16;
  CastRef *refs = malloc(sizeof *refs * (size_t)cap);
  for (int sec = APX_SEC_FORWARD; sec <= APX_SEC_OPTIMIZER; sec++)
    for (int k = 0; k < g->n_order; k++) {
      int id = g->order[k];
      const ApxNode *n = &g->nodes[id];
      if (!is_row(g, id) || (int)n->section != sec) continue;
      apx_json_begin_object_inline(&w);
      apx_json_kv_string(&w, "name", n->name);
      apx_json_kv_string(&w, "op", apx_op_name(n->op));
      apx_json_kv_string(&w, "section", section_name(n->section));
      apx_json_kv_string(&w, "decision", n->compute == APX_DT_UNDEFINED ? NULL : apx_dtype_short(n->compute));
      apx_json_kv_string(&w, "rule", apx_reason_id(n->reason));
      apx_json_kv_string(&w, "reason", n->reason_detail);
      apx_json_key(&w, "inputs");
      json_values(&w, g, n->in, n->n_in);
      apx_json_key(&w, "outputs");
      json_values(&w, g, n->out, n->n_out);
      apx_json_key(&w, "casts");
      int need = n->n_in + n->n_out;
      if (need > cap) {
        CastRef *nr = realloc(refs, sizeof *refs * (size_t)need);
        if (nr) {
          refs = nr;
          cap = need;
        }
      }
      int nc = refs ? collect_casts(g, id, refs, cap) : 0;
      apx_json_begin_array(&w);
      for (int i = 0; i < nc; i++) {
        const CastRef *r = &refs[i];
        apx_json_begin_object(&w);
        apx_json_kv_string(&w, "slot", r->output ? "output" : "input");
        apx_json_kv_int(&w, "index", r->slot);
        apx_json_kv_string(&w, "value", g->vals[r->output ? r->dst : r->src].name);
        apx_json_kv_string(&w, "from", apx_dtype_short(g->vals[r->src].dtype));
        apx_json_kv_string(&w, "to", apx_dtype_short(g->vals[r->dst].dtype));
        apx_json_kv_string(&w, "kind", r->kind);
        apx_json_kv_string(&w, "node", r->node >= 0 ? g->nodes[r->node].name : NULL);
        apx_json_end_object(&w);
      }
      apx_json_end_array(&w);
      apx_json_kv_string(&w, "origin", n->origin >= 0 && n->origin < g->n_nodes ? g->nodes[n->origin].name : NULL);
      apx_json_kv_string(&w, "note", n->note);
      int64_t fl = apx_node_flops(g, id);
      apx_json_key(&w, "flops");
      if (fl < 0) apx_json_null(&w);
      else apx_json_int(&w, fl);
      apx_json_end_object(&w);
    }
  free(refs);
  apx_json_end_array(&w);
  ApxPrecisionSummary sm;
  apx_explain_summarize(g, &sm);
  apx_json_key(&w, "summary");
  apx_json_begin_object(&w);
  apx_json_key(&w, "rows");
  apx_json_begin_object_inline(&w);
  apx_json_kv_int(&w, "forward", sm.rows[0]);
  apx_json_kv_int(&w, "backward", sm.rows[1]);
  apx_json_kv_int(&w, "optimizer", sm.rows[2]);
  apx_json_end_object(&w);
  apx_json_key(&w, "decisions");
  apx_json_begin_object_inline(&w);
  apx_json_kv_int(&w, "half", sm.n_half);
  apx_json_kv_int(&w, "fp32", sm.n_fp32);
  apx_json_kv_int(&w, "other", sm.n_other);
  apx_json_end_object(&w);
  apx_json_kv_int(&w, "flops_total", sm.flops_total);
  apx_json_kv_int(&w, "flops_half", sm.flops_half);
  apx_json_kv_number(&w, "half_flops_share", sm.flops_total ? (double)sm.flops_half / (double)sm.flops_total : 0.0);
  apx_json_kv_int(&w, "flops_unknown_nodes", sm.flops_unknown);
  apx_json_key(&w, "casts");
  apx_json_begin_object_inline(&w);
  apx_json_kv_int(&w, "inserted", sm.casts_inserted);
  apx_json_kv_int(&w, "folded", sm.casts_folded);
  apx_json_kv_int(&w, "before_cleanup", sm.casts_before_cleanup);
  apx_json_kv_int(&w, "after_cleanup", sm.casts_after_cleanup);
  apx_json_kv_int(&w, "live", sm.casts_live);
  apx_json_end_object(&w);
  apx_json_kv_int(&w, "activation_bytes_fp32", sm.act_bytes_fp32);
  apx_json_kv_int(&w, "activation_bytes_mixed", sm.act_bytes_mixed);
  apx_json_kv_int(&w, "notes", sm.notes);
  apx_json_end_object(&w);
  apx_json_end_object(&w);
  return 0;
}

int apx_explain_write(const ApxGraph *g, const ApxOptions *o, ApxExplainFormat fmt, FILE *f, ApxDiag *d) {
  int rc = fmt == APX_EXPLAIN_JSON  ? write_json(g, o, f)
           : fmt == APX_EXPLAIN_DOT ? apx_explain_write_dot(g, o, f)
                                    : write_text(g, o, f);
  if (rc == 0 && (fflush(f) != 0 || ferror(f)))
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write the explanation: %s",
                          f == stdout ? "stdout" : o->explain_path ? o->explain_path : g->file,
                          strerror(errno));
  return rc;
}

int apx_explain_emit(const ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  if (!o->explain) return 0;
  ApxExplainFormat fmt = o->explain == 2 ? APX_EXPLAIN_JSON : o->explain == 3 ? APX_EXPLAIN_DOT : APX_EXPLAIN_TEXT;
  if (!o->explain_path) return apx_explain_write(g, o, fmt, stdout, d);
  FILE *f = fopen(o->explain_path, "w");
  if (!f)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot open for writing: %s", o->explain_path, strerror(errno));
  int rc = apx_explain_write(g, o, fmt, f, d);
  if (fclose(f) != 0 && rc == 0)
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write: %s", o->explain_path, strerror(errno));
  return rc;
}

static int emit_section(const ApxGraph *g, const ApxOptions *o, ApxDiag *d, const char *title,
                        void (*write)(const ApxGraph *, const ApxOptions *, FILE *));

static void write_fusion(const ApxGraph *g, const ApxOptions *o, FILE *f) {
  (void)o;
  apx_fusion_report_write(g, f);
}

/* The parameter a gradient belongs to (origin chain), or NULL. */
static const char *param_of(const ApxGraph *g, int v) {
  for (int hops = 0; v >= 0 && hops < 8; hops++) {
    const ApxValue *val = &g->vals[v];
    if (val->kind == APX_VAL_PARAM) return val->name;
    if (val->kind == APX_VAL_STATE && (val->flags & APX_VALF_MASTER)) return val->name;
    v = val->origin;
  }
  return NULL;
}

void apx_buckets_report_write(const ApxGraph *g, const ApxOptions *o, int json, FILE *f) {
  int n = apx_buckets_collect(g, NULL, 0);
  ApxBucketInfo *bs = calloc((size_t)n + 1, sizeof *bs);
  if (!bs) return;
  apx_buckets_collect(g, bs, n);
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += bs[i].bytes;
  int32_t bwd = 0;
  for (int32_t t = 0; t < g->n_order; t++) bwd += g->nodes[g->order[t]].section == APX_SEC_BACKWARD;
  double cap = o ? o->bucket_mb : 25.0, first = o ? o->first_bucket_mb : 1.0;
  if (json) {
    ApxJsonWriter w;
    apx_json_writer_init(&w, f);
    apx_json_begin_object(&w);
    apx_json_kv_string(&w, "schema", "apexc-buckets/1");
    apx_json_kv_string(&w, "model", g->file);
    apx_json_key(&w, "options");
    apx_json_begin_object_inline(&w);
    apx_json_kv_number(&w, "bucket_mb", cap);
    apx_json_kv_number(&w, "first_bucket_mb", first);
    apx_json_key(&w, "allreduce_fp32");
    apx_json_bool(&w, o && o->allreduce_fp32);
    apx_json_kv_number(&w, "grad_predivide", o ? o->grad_predivide : 1.0);
    apx_json_end_object(&w);
    apx_json_key(&w, "buckets");
    apx_json_begin_array(&w);
    for (int i = 0; i < n; i++) {
      const ApxNode *nd = &g->nodes[bs[i].node];
      apx_json_begin_object_inline(&w);
      apx_json_kv_int(&w, "id", bs[i].id);
      apx_json_kv_string(&w, "node", nd->name);
      apx_json_kv_string(&w, "section", nd->section == APX_SEC_BACKWARD ? "backward" : "optimizer");
      apx_json_kv_string(&w, "dtype", apx_dtype_short(bs[i].dtype));
      apx_json_kv_int(&w, "bytes", bs[i].bytes);
      apx_json_kv_int(&w, "ready_at", bs[i].ready_at);
      apx_json_kv_int(&w, "launch_at", bs[i].launch_at);
      apx_json_kv_int(&w, "overlap_kernels", bs[i].overlap);
      apx_json_key(&w, "members");
      apx_json_begin_array_inline(&w);
      for (int k = 0; k < nd->n_in; k++) {
        int v = nd->in[k];
        if (v < 0) continue;
        apx_json_begin_object_inline(&w);
        apx_json_kv_string(&w, "gradient", g->vals[v].name);
        apx_json_kv_string(&w, "param", param_of(g, v));
        apx_json_kv_int(&w, "bytes", apx_value_bytes(&g->vals[v]));
        apx_json_end_object(&w);
      }
      apx_json_end_array(&w);
      apx_json_end_object(&w);
    }
    apx_json_end_array(&w);
    apx_json_key(&w, "summary");
    apx_json_begin_object_inline(&w);
    apx_json_kv_int(&w, "buckets", n);
    apx_json_kv_int(&w, "bytes", total);
    apx_json_kv_int(&w, "backward_kernels", bwd);
    apx_json_end_object(&w);
    apx_json_end_object(&w);
    fputc('\n', f);
  } else {
    fprintf(f, "gradient buckets: %d, %" PRId64 " bytes (cap %g MiB, first %g MiB%s, predivide %g)\n", n,
            total, cap, first, o && o->allreduce_fp32 ? ", allreduce in fp32" : "",
            o ? (double)o->grad_predivide : 1.0);
    if (n == 0) fputs("  (none: not a training graph, or bucketing disabled)\n", f);
    for (int i = 0; i < n; i++) {
      const ApxNode *nd = &g->nodes[bs[i].node];
      char line[256];
      snprintf(line, sizeof line, "bucket %d  %-4s %10" PRId64 " bytes  %3d tensors  ready after kernel %d, "
               "launched at %d (%s), %d kernels left to overlap",
               bs[i].id, apx_dtype_short(bs[i].dtype), bs[i].bytes, bs[i].n_members, bs[i].ready_at,
               bs[i].launch_at, nd->section == APX_SEC_BACKWARD ? "backward" : "optimizer",
               bs[i].overlap);
      apx_text_wrap(f, "  ", 4, line, APX_TEXT_WIDTH);
      for (int k = 0; k < nd->n_in; k++) {
        int v = nd->in[k];
        if (v < 0) continue;
        const char *p = param_of(g, v);
        fprintf(f, "      %-40s %10" PRId64 " bytes%s%s\n", g->vals[v].name,
                apx_value_bytes(&g->vals[v]), p ? "  param " : "", p ? p : "");
      }
    }
  }
  free(bs);
}

static void write_buckets(const ApxGraph *g, const ApxOptions *o, FILE *f) {
  apx_buckets_report_write(g, o, 0, f);
}

int apx_explain_fusion_emit(const ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return emit_section(g, o, d, "fusion", write_fusion);
}

int apx_explain_buckets_emit(const ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  return emit_section(g, o, d, "gradient buckets", write_buckets);
}

static int emit_section(const ApxGraph *g, const ApxOptions *o, ApxDiag *d, const char *title,
                        void (*write)(const ApxGraph *, const ApxOptions *, FILE *)) {
  if (o->explain != 1) return 0;
  FILE *f = o->explain_path ? fopen(o->explain_path, "a") : stdout;
  if (!f)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot open for writing: %s", o->explain_path, strerror(errno));
  fprintf(f, "\n== %s ==\n", title);
  write(g, o, f);
  int bad = fflush(f) != 0 || ferror(f);
  if (o->explain_path && fclose(f) != 0) bad = 1;
  if (bad)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write the explanation: %s",
                          o->explain_path ? o->explain_path : "stdout", strerror(errno));
  return 0;
}
