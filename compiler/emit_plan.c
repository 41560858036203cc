/* emit_plan.c - compiled graph -> plan (emit_plan.h). */
#include "compiler/emit_plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/pass_timer.h"
#include "ir/fileio.h"
#include "kernels/cpu/cpu_kernels.h"
#include "passes/precision_rules.h"
#include "plan/model_blob.h"
#include "plan/plan_write.h"

/* The plan stores ApxMemRegion and ApxSection values as they are. */
_Static_assert(APX_MEM_ARENA == 1 && APX_MEM_PERSISTENT == 2, "plan.proto region values");
_Static_assert(APX_SEC_FORWARD == 0 && APX_SEC_BACKWARD == 1 && APX_SEC_OPTIMIZER == 2,
               "plan.proto section values");

static void options_to_plan(const ApxOptions *o, ApxPlanOptions *po) {
#define COPY(f) po->f = o->f;
#define TRI_ON(f) po->f = o->f == APX_TRI_ON;
  APX_PLAN_OPTIONS(COPY, TRI_ON)
#undef COPY
#undef TRI_ON
}

/* The model file mapped read-only (NULL, 0 when it cannot be read or is not a regular
 * file): its size and CRC32C identify it in the plan, and training plans embed it. */
typedef struct ModelFile {
  const uint8_t *map;
  size_t len;
} ModelFile;

static void model_map(const char *path, ModelFile *mf) {
  mf->map = NULL;
  mf->len = 0;
  /* a bounded open (ir/fileio.h): only a regular file, never blocking on a FIFO */
  uint64_t size = 0;
  const char *why;
  int fd = path ? apx_open_regular(path, 0, &size, &why) : -1;
  if (fd < 0) return;
  if (size > 0 && size <= ((uint64_t)1 << 40)) {
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      madvise(m, (size_t)size, MADV_SEQUENTIAL);
      mf->map = m;
      mf->len = (size_t)size;
    }
  }
  close(fd);
}

/* CRC32C of the mapped model, in 8 MiB steps each dropped from this process's resident set
 * once summed (MADV_DONTNEED on a read-only file mapping: the page cache keeps the bytes): a
 * 650 MB model no longer adds 650 MB to the compiler's peak. Last use of the mapping. */
static uint32_t model_crc(const ModelFile *mf) {
  enum { STEP = 8 << 20 };
  uint32_t crc = 0;
  for (size_t off = 0; off < mf->len; off += STEP) {
    size_t n = mf->len - off < STEP ? mf->len - off : STEP;
    crc = apx_crc32c(crc, mf->map + off, n);
    if (n == STEP) madvise((void *)(mf->map + off), n, MADV_DONTNEED); /* page-aligned steps */
  }
  return crc;
}

static void model_unmap(ModelFile *mf) {
  if (mf->map) munmap((void *)mf->map, mf->len);
  mf->map = NULL;
}

/* Training plans carry the source model (blob APX_PLAN_BLOB_MODEL) so that
 * `apexrun --export-onnx` can write it back with the trained weights; initializers the plan
 * holds are stripped from it (plan/model_blob.h). An unreadable file embeds nothing (export
 * then says so). Needs the plan's buffers; the blob is in the plan's arena. */
static int embed_model(ApxPlan *plan, const ModelFile *mf, const ApxBlobLookup *by) {
  if (!mf->map) return 0;
  const void *blob;
  size_t blob_len;
  if (apx_model_blob_strip_by(plan, by, mf->map, mf->len, &plan->arena, &blob, &blob_len)) return -1;
  if (blob == mf->map && !(blob = apx_arena_memdup(&plan->arena, mf->map, mf->len))) return -1;
  return apx_plan_add_blob(plan, APX_PLAN_BLOB_MODEL, blob, blob_len);
}

/* 1 when apx_cpu_convert(src: n elements of st -> dt) gives exactly the bytes at want. */
static int converts_to(const void *src, ApxDType st, const void *want, ApxDType dt, int64_t n) {
  enum { CHUNK = 1 << 15 };
  uint8_t tmp[CHUNK * 8];
  size_t ss = apx_dtype_size(st), ds = apx_dtype_size(dt);
  if (!ss || !ds || ds > 8) return 0;
  for (int64_t off = 0; off < n; off += CHUNK) {
    int64_t m = n - off < CHUNK ? n - off : CHUNK;
    if (apx_cpu_convert((const uint8_t *)src + (size_t)off * ss, st, tmp, dt, m) != APX_STATUS_OK ||
        memcmp(tmp, (const uint8_t *)want + (size_t)off * ds, (size_t)m * ds))
      return 0;
  }
  return 1;
}

/* Format 2 (plan.h init_from): a half parameter whose fp32 master holds exactly its bytes once
 * converted is not stored: the runtime makes it from the master at load. A parameter marked
 * APX_VALF_DATA_FROM_MASTER (passes/cast_insert.c) has no bytes in the graph: derived when the
 * plan allows, else converted here from its master. Any other half parameter is derived only
 * when the runtime's conversion gives its bytes exactly; otherwise it keeps them. Returns 0,
 * -1 with an error in d. */
static int derive_half_params(const ApxGraph *g, ApxPlan *plan, const int32_t *buf_of, ApxDiag *d) {
  int *master_of = apx_value_master_map(g);
  if (!master_of) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory writing the plan", g->file);
  int rc = 0;
  for (int p = 0; p < g->n_vals && rc == 0; p++) {
    const ApxValue *pv = &g->vals[p];
    int v = master_of[p];
    int lazy = (pv->flags & APX_VALF_DATA_FROM_MASTER) != 0;
    if (buf_of[p] < 0 || (v < 0 && !lazy)) continue;
    ApxPlanBuffer *b = &plan->bufs[buf_of[p]];
    const ApxPlanBuffer *m = v >= 0 && buf_of[v] >= 0 ? &plan->bufs[buf_of[v]] : NULL;
    int64_t n = b->bytes / (int64_t)apx_dtype_size(b->dtype);
    int derivable = m && b->kind == APX_VAL_PARAM && m->data && b->init_from < 0 &&
                    b->alias_of < 0 && m->alias_of < 0 && b->region == APX_MEM_PERSISTENT &&
                    m->region == APX_MEM_PERSISTENT && apx_plan_derivable(m->dtype, b->dtype) &&
                    n == m->bytes / (int64_t)apx_dtype_size(m->dtype);
    if (lazy) {
      if (derivable) {
        b->data = NULL;
        b->init_from = buf_of[v];
        continue;
      }
      /* the plan must hold the bytes: the master's data converted */
      const ApxValue *mv = v >= 0 ? &g->vals[v] : NULL;
      if (b->alias_of >= 0 || b->region != APX_MEM_PERSISTENT || b->bytes <= 0) continue;
      void *half = mv && mv->data ? apx_arena_alloc_raw(&plan->arena, (size_t)b->bytes) : NULL;
      if (!mv || !mv->data || apx_value_numel(mv) != n)
        rc = apx_value_error(d, g, p, "internal error: half parameter without its master's data");
      else if (!half)
        rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory writing the plan", g->file);
      else if (apx_convert_floats(mv->data, mv->dtype, half, b->dtype, n))
        rc = apx_value_error(d, g, p, "internal error: cannot convert its master to %s", apx_dtype_short(b->dtype));
      else
        b->data = half;
      continue;
    }
    if (!derivable || !b->data || !converts_to(m->data, m->dtype, b->data, b->dtype, n)) continue;
    b->data = NULL;
    b->init_from = buf_of[v];
  }
  free(master_of);
  return rc;
}

/* The strip's lookups answered from the graph (model_blob.h ApxBlobLookup): a buffer's name is
 * its value's, unique in the graph, so the graph's name table finds it and the plan's index
 * is not needed. */
typedef struct GraphLookup {
  const ApxGraph *g;
  const int32_t *buf_of; /* [n_vals] */
  int last;              /* the value the previous lookup found, -1 */
} GraphLookup;

/* The strip asks for the model's initializers in file order, and the loader made their
 * values in that order: the value after the previous answer is tried first (its record and
 * name are next in memory), then the name table (a cache miss or two per name on a large
 * graph). */
static int32_t graph_find_buffer(void *ctx, const char *name) {
  GraphLookup *L = ctx;
  int v = L->last + 1;
  if (!(v > 0 && v < L->g->n_vals && strcmp(L->g->vals[v].name, name) == 0))
    v = apx_graph_find_value(L->g, name);
  if (v >= 0) L->last = v;
  return v >= 0 ? L->buf_of[v] : -1;
}

/* A runtime value the memory plan gave no place (checked when the buffers are made, and for
 * the arena values again once a background packing settled). */
static int no_memory_place(ApxDiag *d, const ApxGraph *g, int v) {
  return apx_value_error(d, g, v, "internal error: runtime tensor without a memory place");
}

static const char *base_name(const char *p) {
  const char *s = p ? strrchr(p, '/') : NULL;
  return s ? s + 1 : (p ? p : "");
}

/* check(plan), its messages naming the graph's file; an invalid plan from a valid graph is our
 * bug, not the user's input (exit code 1). */
static int check_built(ApxPlan *plan, const ApxGraph *g, int (*check)(ApxPlan *, ApxDiag *), ApxDiag *d) {
  const char *saved = plan->path;
  plan->path = g->file;
  int rc = check(plan, d);
  plan->path = saved;
  if (rc) d->code = APX_EXIT_RUNTIME;
  return rc ? -1 : 0;
}

/* index: build the plan's lookup index at the end (for a caller that looks buffers up in the
 * plan; not needed to write it) */
static int plan_from_graph(ApxGraph *g, const ApxOptions *o, ApxPlan *plan, int index,
                           ApxPlanAhead *ahead, ApxDiag *d) {
  static const uint64_t no_attrs[1];
  ApxOptions defaults;
  if (!o) {
    apx_options_init(&defaults);
    o = &defaults;
  }
  if (g->arena_bytes < 0 && !g->settle_fn)
    return apx_diag_error(d, APX_EXIT_RUNTIME,
                          "%s: internal error: no memory plan (pass memplan did not run)", g->file);
  ApxArena *A = &plan->arena;
  options_to_plan(o, &plan->opts);
  const char *model = o->model_path ? o->model_path : g->file;
  plan->model_name = apx_arena_strdup(A, base_name(model));
  ModelFile mf;
  model_map(model, &mf);
  plan->model_bytes = mf.len;
  int rc = -1;
  plan->mem.peak_live_bytes = g->peak_live_bytes;
  plan->mem.no_reuse_bytes = g->no_reuse_bytes;
  plan->mem.persistent_bytes = g->persistent_bytes;

  /* buffers */
  int32_t *buf_of = apx_arena_alloc(A, ((size_t)g->n_vals + 1) * sizeof *buf_of);
  if (!buf_of) goto oom;
  int32_t nb = 0, n_arena = 0;
  for (int v = 0; v < g->n_vals; v++) {
    buf_of[v] = g->vals[v].mem_region != APX_MEM_NONE ? nb++ : -1;
    n_arena += g->vals[v].mem_region == APX_MEM_ARENA;
  }
  /* the arena values, whose offsets come once the packing settled (then only they are read
   * again, not every value) */
  int32_t *arena_vals = apx_arena_alloc_raw(A, ((size_t)n_arena + 1) * sizeof *arena_vals);
  if (!arena_vals) goto oom;
  n_arena = 0;
  if (!apx_plan_alloc_buffers_unset(plan, nb)) goto oom;
  for (int v = 0; v < g->n_vals; v++) {
    if (buf_of[v] < 0) continue;
    const ApxValue *val = &g->vals[v];
    /* each record written once, whole (the table is larger than the caches) */
    ApxPlanBuffer b = {
        .name = val->name,
        .kind = val->kind,
        .flags = val->flags & APX_PLAN_BUF_FLAGS,
        .dtype = val->dtype,
        .rank = val->rank,
        .region = (ApxMemRegion)val->mem_region,
        .offset = val->mem_offset, /* an arena value's once the packing settled (below) */
        .bytes = apx_value_bytes(val),
        .alias_of = val->mem_alias >= 0 ? buf_of[val->mem_alias] : -1,
        .origin = val->origin >= 0 ? buf_of[val->origin] : -1,
        .init_from = -1,
    };
    for (int k = 0; k < val->rank && k < APX_MAX_RANK; k++) b.dims[k] = val->dims[k];
    if ((b.offset < 0 && !(b.region == APX_MEM_ARENA && g->settle_fn)) || b.bytes < 0) {
      rc = no_memory_place(d, g, v);
      goto out;
    }
    if (val->mem_alias < 0 && val->mem_region == APX_MEM_PERSISTENT && val->data && b.bytes > 0)
      b.data = val->data;
    if (val->mem_region == APX_MEM_ARENA) arena_vals[n_arena++] = v;
    plan->bufs[buf_of[v]] = b;
  }

  if (derive_half_params(g, plan, buf_of, d)) goto out;

  /* kernels, in schedule order: node names and attribute structs are the graph's (plan.h:
   * the plan points into the graph it was made from), the in/out lists one array */
  int32_t *kernel_of = apx_arena_alloc(A, ((size_t)g->n_nodes + 1) * sizeof *kernel_of);
  if (!kernel_of || !apx_plan_alloc_kernels(plan, g->n_order)) goto oom;
  for (int i = 0; i < g->n_nodes; i++) kernel_of[i] = -1;
  size_t n_ids = 0;
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    n_ids += (size_t)n->n_in + (size_t)n->n_out;
  }
  int32_t *ids = apx_arena_alloc_raw(A, (n_ids + 1) * sizeof *ids);
  if (!ids) goto oom;
  for (int32_t t = 0; t < g->n_order; t++) {
    int id = g->order[t];
    const ApxNode *n = &g->nodes[id];
    const ApxOpInfo *info = apx_op_info(n->op);
    if (info->flags & APX_OPF_FOLD) {
      rc = apx_node_error(d, g, id, "not supported yet: compile-time op left unfolded "
                                    "(its inputs are not constants)");
      goto out;
    }
    if (info->flags & (APX_OPF_TIER2 | APX_OPF_LISTED)) {
      rc = apx_node_error(d, g, id, "not supported yet: op has no kernel");
      goto out;
    }
    int32_t *in = ids, *out = ids + n->n_in;
    ids += n->n_in + n->n_out;
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      int runtime = v >= 0 && apx_node_input_is_runtime(n, k);
      in[k] = runtime ? buf_of[v] : -1;
      if (runtime && in[k] < 0) {
        rc = apx_node_error(d, g, id, "internal error: input %d has no buffer", k);
        goto out;
      }
    }
    for (int k = 0; k < n->n_out; k++) {
      out[k] = n->out[k] >= 0 ? buf_of[n->out[k]] : -1;
      if (n->out[k] >= 0 && out[k] < 0) {
        rc = apx_node_error(d, g, id, "internal error: output %d has no buffer", k);
        goto out;
      }
    }
    const void *attrs = n->typed; /* (none: zeroed, as apx_plan_set_kernel makes it) */
    if (!attrs && info->attrs_size && !(attrs = apx_arena_alloc(A, info->attrs_size))) goto oom;
    ApxPlanKernel *kn = &plan->kernels[t];
    kn->op = n->op;
    kn->node = n->name ? n->name : "";
    kn->section = n->section;
    kn->compute = n->compute;
    kn->attrs = attrs ? attrs : no_attrs; /* (an op without attributes) */
    kn->n_in = n->n_in;
    kn->n_out = n->n_out;
    kn->in = in;
    kn->out = out;
    kernel_of[id] = t;
  }

  /* precision decisions, with the Casts made for each node */
  int32_t *casts = apx_arena_alloc(A, ((size_t)g->n_nodes + 1) * sizeof *casts);
  if (!casts) goto oom;
  int32_t nd = 0;
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    if (n->op == APX_OP_Cast && n->onnx_index < 0 && n->origin >= 0 && n->origin < g->n_nodes)
      casts[n->origin]++;
    if (n->compute != APX_DT_UNDEFINED) nd++;
  }
  plan->decisions = apx_arena_alloc(A, ((size_t)nd + 1) * sizeof(ApxPlanDecision));
  if (!plan->decisions) goto oom;
  for (int32_t t = 0; t < g->n_order; t++) {
    int id = g->order[t];
    const ApxNode *n = &g->nodes[id];
    if (n->compute == APX_DT_UNDEFINED) continue;
    ApxPlanDecision *dc = &plan->decisions[plan->n_decisions++];
    dc->node = n->name;
    dc->op = apx_op_name(n->op);
    dc->decision = n->compute;
    dc->rule_code = n->reason;
    dc->rule = n->reason > 0 ? apx_reason_id(n->reason) : "";
    dc->detail = n->reason_detail ? n->reason_detail : "";
    dc->casts_added = casts[id];
  }

  /* gradient buckets: one per Allreduce node */
  int32_t nbk = 0;
  for (int32_t t = 0; t < g->n_order; t++) nbk += g->nodes[g->order[t]].op == APX_OP_Allreduce;
  /* (Allreduce nodes with bucket < 0 reduce BatchNorm statistics, passes/sync_bn.h: no bucket) */
  plan->buckets = apx_arena_alloc(A, ((size_t)nbk + 1) * sizeof(ApxPlanBucket));
  if (!plan->buckets) goto oom;
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    if (n->op != APX_OP_Allreduce) continue;
    ApxPlanBucket *bk = &plan->buckets[plan->n_buckets];
    const ApxAttrAllreduce *ar = n->typed;
    if (ar && ar->bucket < 0) continue;
    bk->id = ar ? ar->bucket : plan->n_buckets;
    bk->members = apx_arena_alloc(A, ((size_t)n->n_in + 1) * sizeof(int32_t));
    if (!bk->members) goto oom;
    bk->ready_at = 0;
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0 || buf_of[v] < 0) continue;
      bk->members[bk->n_members++] = buf_of[v];
      bk->bytes += apx_value_bytes(&g->vals[v]);
      if (bk->dtype == APX_DT_UNDEFINED) bk->dtype = g->vals[v].dtype;
      int p = g->vals[v].producer;
      if (p >= 0 && kernel_of[p] > bk->ready_at) bk->ready_at = kernel_of[p];
    }
    plan->n_buckets++;
  }

  /* data inputs, outputs, loss */
  plan->inputs = apx_arena_alloc(A, ((size_t)g->n_inputs + 1) * sizeof(int32_t));
  plan->outputs = apx_arena_alloc(A, ((size_t)g->n_outputs + 1) * sizeof(int32_t));
  if (!plan->inputs || !plan->outputs) goto oom;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    if (v < 0 || v >= g->n_vals || buf_of[v] < 0) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: internal error: graph input %d has no buffer",
                          g->file, i);
      goto out;
    }
    plan->inputs[plan->n_inputs++] = buf_of[v];
  }
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i];
    if (v < 0 || v >= g->n_vals || buf_of[v] < 0) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: internal error: graph output %d has no buffer",
                          g->file, i);
      goto out;
    }
    plan->outputs[plan->n_outputs++] = buf_of[v];
  }
  plan->loss = g->loss >= 0 && g->loss < g->n_vals ? buf_of[g->loss] : -1;

  GraphLookup lookup = {g, buf_of, -1};
  ApxBlobLookup by = {graph_find_buffer, &lookup};
  if (o->training && embed_model(plan, &mf, &by)) goto oom;
  plan->model_crc32c = mf.map ? model_crc(&mf) : 0; /* after the walk over it (embed_model) */
  model_unmap(&mf);
  apx_plan_layout_data(plan);
  /* the arena offsets: the packing ran beside everything above (passes/memplan.h); what
   * they do not change is checked while it runs (the main thread waits for it otherwise) */
  int split = g->settle_fn != NULL;
  if (split) {
    if (check_built(plan, g, apx_plan_validate_unplaced, d)) return -1;
    /* while the packing still runs, the file's kernel and decision records are encoded
     * (a thousand at a time: the settle waits at most one step longer) */
    while (ahead && !apx_graph_settle_ready(g) && !apx_plan_ahead_step(ahead, plan, 1024)) {
    }
    if (apx_graph_settle(g, d)) goto out;
    for (int32_t i = 0; i < n_arena; i++) {
      int v = arena_vals[i];
      if ((plan->bufs[buf_of[v]].offset = g->vals[v].mem_offset) < 0) {
        rc = no_memory_place(d, g, v);
        goto out;
      }
    }
  }
  plan->mem.arena_bytes = g->arena_bytes;
  if (check_built(plan, g, split ? apx_plan_validate_placed : apx_plan_validate, d)) return -1;
  if (index) apx_plan_index(plan); /* (out of memory: lookups scan instead) */
  return 0;
oom:
  rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory building the plan", g->file);
out:
  model_unmap(&mf);
  return rc;
}

int apx_plan_from_graph(ApxGraph *g, const ApxOptions *o, ApxPlan *plan, ApxDiag *d) {
  return plan_from_graph(g, o, plan, 1, NULL, d);
}

int apx_emit_plan_file(ApxGraph *g, const ApxOptions *o, const char *path, ApxDiag *d) {
  ApxPlan plan;
  apx_plan_init(&plan);
  ApxStageClock clock; /* --time-passes: building the plan, then writing the file */
  apx_stage_begin(&clock, o);
  int pending = g->settle_fn != NULL;
  ApxPlanAhead ahead;
  apx_plan_ahead_init(&ahead);
  int rc = plan_from_graph(g, o, &plan, 0, &ahead, d); /* written, then freed: no lookups */
  if (!rc) apx_stage_end(&clock, "emit_plan");
  if (!rc && pending)
    apx_stage_aside(o, "memplan_pack", "emit_plan", g->background_s, g->background_cpu_s);
  apx_stage_begin(&clock, o);
  if (!rc) rc = apx_plan_write_validated_ahead(&plan, &ahead, path, d); /* validated above */
  if (!rc) apx_stage_end(&clock, "write_plan");
  apx_plan_ahead_free(&ahead);
  apx_plan_free(&plan);
  return rc;
}
