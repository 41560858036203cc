/* bucketing.c - gradient buckets in readiness order, one Allreduce node each (bucketing.h). */
#include "passes/bucketing.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/optimizer.h"

#define MIB (1024.0 * 1024.0)
#define DT_SLOTS 32 /* ApxDType values are ONNX DataType numbers below this */

typedef struct Member {
  int grad;      /* UnscaleCheck's input value (the local gradient) */
  int value;     /* bucket member: grad, or its fp32 cast */
  int32_t slot;  /* UnscaleCheck input slot */
  int32_t ready; /* position of the member's producer in g->order, -1 if none */
  int64_t bytes;
  int32_t bucket;
} Member;

typedef struct Bucket {
  ApxDType dtype;
  int64_t bytes;
  int32_t n, ready; /* members; position of the last member's producer */
} Bucket;

static int oom(ApxDiag *d, const ApxGraph *g) {
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory planning gradient buckets", g->file);
}

static int cmp_member(const void *a, const void *b) {
  const Member *x = a, *y = b;
  if (x->ready != y->ready) return x->ready < y->ready ? -1 : 1;
  return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static int find_unscale_check(const ApxGraph *g, int *count_allreduce) {
  int uc = -1;
  *count_allreduce = 0;
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    /* several losses (--loss A,B: one UnscaleCheck per loss, then one of their sum) are not
     * bucketed: the trainer refuses them on several ranks (runtime/train.h) */
    if (n->op == APX_OP_UnscaleCheck && uc >= 0) return -1;
    if (n->op == APX_OP_UnscaleCheck && uc < 0) uc = g->order[t];
    if (n->op == APX_OP_Allreduce && ((const ApxAttrAllreduce *)n->typed)->bucket >= 0) (*count_allreduce)++;
  }
  return uc;
}

/* Cast(g -> fp32) for --allreduce-fp32; returns the new value or -1. */
static int add_fp32_cast(ApxGraph *g, ApxDiag *d, int grad, ApxSection sec) {
  const ApxValue gv = g->vals[grad];
  const char *vn = apx_arena_printf(&g->arena, "%s/fp32", gv.name);
  const char *nn = apx_arena_printf(&g->arena, "%s/allreduce_fp32", gv.name);
  if (!vn || !nn) return oom(d, g);
  vn = apx_graph_free_name(g, vn);
  int cv = apx_graph_add_value(g, d, vn, APX_VAL_ACTIVATION, APX_DT_F32, gv.rank, gv.dims);
  if (cv < 0) return -1;
  int id = apx_graph_add_node(g, d, APX_OP_Cast, nn, 1, &grad, 1, &cv);
  if (id < 0) return -1;
  ApxNode *n = &g->nodes[id];
  n->section = sec;
  n->flags |= APX_NODEF_EAGER;
  n->compute = APX_DT_F32;
  n->reason_detail = "--allreduce-fp32: the half gradient is reduced in fp32";
  ApxAttrCast *c = n->typed;
  c->to = APX_DT_F32;
  c->saturate = 1;
  if (apx_node_infer(g, id, d)) return -1;
  g->vals[cv].flags |= APX_VALF_GRAD;
  g->vals[cv].origin = gv.origin;
  return cv;
}

/* The Allreduce node of bucket b over members ms[0..n). */
static int add_allreduce(ApxGraph *g, const ApxOptions *o, ApxDiag *d, const Bucket *b, int32_t id,
                         Member *ms, ApxSection sec, int *outs) {
  int n = b->n;
  int *in = malloc(((size_t)n + 1) * sizeof *in);
  if (!in) return oom(d, g);
  for (int j = 0; j < n; j++) {
    const ApxValue mv = g->vals[ms[j].value];
    const char *vn = apx_arena_printf(&g->arena, "%s/allreduced", mv.name);
    if (vn) vn = apx_graph_free_name(g, vn);
    int r = vn ? apx_graph_add_value(g, d, vn, APX_VAL_ACTIVATION, mv.dtype, mv.rank, mv.dims) : oom(d, g);
    if (r < 0) {
      free(in);
      return -1;
    }
    g->vals[r].flags |= APX_VALF_GRAD;
    g->vals[r].origin = mv.origin;
    in[j] = ms[j].value;
    outs[j] = r;
  }
  const char *nn = apx_arena_printf(&g->arena, "apx_allreduce/bucket%d", (int)id);
  int node = nn ? apx_graph_add_node(g, d, APX_OP_Allreduce, nn, n, in, n, outs)
                : oom(d, g);
  free(in);
  if (node < 0) return -1;
  ApxNode *nd = &g->nodes[node];
  nd->section = sec;
  nd->flags |= APX_NODEF_EAGER;
  nd->compute = b->dtype;
  nd->reason_detail = apx_arena_printf(&g->arena, "gradient bucket %d: %d tensors, %" PRId64 " bytes",
                                       (int)id, n, b->bytes);
  ApxAttrAllreduce *a = nd->typed;
  a->bucket = id;
  a->fp32 = o->allreduce_fp32 != 0;
  a->predivide = o->grad_predivide > 0 ? o->grad_predivide : 1.0f;
  a->average = 1;
  if (apx_node_infer(g, node, d)) return -1;
  return node;
}

int pass_bucketing(ApxGraph *g, const ApxOptions *o, ApxDiag *d) {
  int n_ar = 0;
  int uc = find_unscale_check(g, &n_ar);
  if (uc < 0 || n_ar > 0) return APX_PASS_UNCHANGED;
  const int32_t n = g->nodes[uc].n_in - 1;
  if (n <= 0) return APX_PASS_UNCHANGED;
  const ApxSection sec = o->accumulate > 1 ? APX_SEC_OPTIMIZER : APX_SEC_BACKWARD;

  const int n_nodes0 = g->n_nodes; /* the nodes before this pass: the ones rewired */
  int32_t *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
  Member *ms = calloc((size_t)n + 1, sizeof *ms);
  Bucket *bs = calloc((size_t)n + 1, sizeof *bs);
  int *outs = malloc(((size_t)n + 1) * sizeof *outs);
  int *reduced = malloc(((size_t)g->n_vals + 1) * sizeof *reduced); /* grad -> reduced value */
  const int n_vals0 = g->n_vals;
  int rc = -1;
  if (!pos || !ms || !bs || !outs || !reduced) {
    rc = oom(d, g);
    goto out;
  }
  for (int i = 0; i < g->n_nodes; i++) pos[i] = -1;
  for (int32_t t = 0; t < g->n_order; t++) pos[g->order[t]] = t;
  for (int v = 0; v < n_vals0; v++) reduced[v] = -1;

  /* 1. members in readiness order (casts for --allreduce-fp32 first) */
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++) {
    int v = g->nodes[uc].in[1 + i];
    if (v < 0) continue;
    const ApxValue *val = &g->vals[v];
    if (!apx_dtype_is_float(val->dtype) || apx_value_bytes(val) < 0) {
      char shape[128];
      rc = apx_value_error(d, g, v, "gradient bucketing: gradient of %s shape %s has no known size",
                           apx_dtype_name(val->dtype), apx_value_shape_str(val, shape, sizeof shape));
      goto out;
    }
    Member *me = &ms[m++];
    me->grad = v;
    me->value = v;
    me->slot = 1 + i;
    me->ready = val->producer >= 0 ? pos[val->producer] : -1;
  }
  qsort(ms, (size_t)m, sizeof *ms, cmp_member);
  for (int32_t j = 0; j < m; j++) {
    ApxDType dt = g->vals[ms[j].grad].dtype;
    if (o->allreduce_fp32 && (dt == APX_DT_F16 || dt == APX_DT_BF16)) {
      int cv = add_fp32_cast(g, d, ms[j].grad, sec);
      if (cv < 0) goto out;
      ms[j].value = cv;
    }
    ms[j].bytes = apx_value_bytes(&g->vals[ms[j].value]);
  }

  /* 2. buckets: one open bucket per dtype, first bucket of a dtype capped at first_bucket_mb */
  int32_t nb = 0;
  int32_t open[DT_SLOTS], first_of[DT_SLOTS];
  for (int k = 0; k < DT_SLOTS; k++) open[k] = first_of[k] = -1;
  const double first_cap = (o->first_bucket_mb > 0 ? o->first_bucket_mb : 1.0) * MIB;
  const double cap = (o->bucket_mb > 0 ? o->bucket_mb : 25.0) * MIB;
  for (int32_t j = 0; j < m; j++) {
    ApxDType dt = g->vals[ms[j].value].dtype;
    int k = (int)dt;
    if (k < 0 || k >= DT_SLOTS) {
      rc = apx_value_error(d, g, ms[j].value, "gradient bucketing: unexpected dtype %d", k);
      goto out;
    }
    int32_t b = open[k];
    if (b >= 0 && (double)(bs[b].bytes + ms[j].bytes) > (b == first_of[k] ? first_cap : cap))
      b = open[k] = -1; /* full: close it */
    if (b < 0) {
      b = open[k] = nb++;
      bs[b].dtype = dt;
      if (first_of[k] < 0) first_of[k] = b;
    }
    bs[b].bytes += ms[j].bytes;
    bs[b].n++;
    bs[b].ready = ms[j].ready;
    ms[j].bucket = b;
  }

  /* 3. bucket ids in readiness order: buckets close in the order of their last member */
  int32_t *order = malloc(((size_t)nb + 1) * sizeof *order);
  if (!order) {
    rc = oom(d, g);
    goto out;
  }
  for (int32_t b = 0; b < nb; b++) order[b] = b;
  for (int32_t a = 1; a < nb; a++) { /* insertion sort by (ready, creation) */
    int32_t x = order[a], k = a;
    while (k > 0 && bs[order[k - 1]].ready > bs[x].ready) order[k] = order[k - 1], k--;
    order[k] = x;
  }

  /* 4. one Allreduce per bucket; consumers after it read the reduced values. Members grouped
   * by bucket in readiness order (a counting sort: start[b] is bucket b's first slot). */
  Member *tmp = malloc(((size_t)m + 1) * sizeof *tmp);
  int32_t *start = calloc((size_t)nb + 1, sizeof *start);
  if (!tmp || !start) {
    free(tmp);
    free(start);
    free(order);
    rc = oom(d, g);
    goto out;
  }
  for (int32_t b = 0; b < nb; b++) start[b + 1] = start[b] + bs[b].n;
  for (int32_t j = 0; j < m; j++) tmp[start[ms[j].bucket]++] = ms[j];
  for (int32_t b = 0; b < nb; b++) start[b] -= bs[b].n; /* back to each bucket's first */
  for (int32_t id = 0; id < nb; id++) {
    int32_t b = order[id], k = bs[b].n;
    if (add_allreduce(g, o, d, &bs[b], id, tmp + start[b], sec, outs) < 0) {
      free(tmp);
      free(start);
      free(order);
      goto out;
    }
    for (int32_t j = 0; j < k; j++)
      if (reduced[tmp[start[b] + j].grad] < 0) reduced[tmp[start[b] + j].grad] = outs[j];
  }
  free(tmp);
  free(start);
  free(order);
  /* rewire: the optimizer-side consumers the gradient had before this pass (UnscaleCheck;
   * not the new casts and Allreduces) read the reduced value. Backward consumers keep the
   * local value: a parameter added without broadcasting shares its gradient value with the
   * activation it is added to, and the rest of backward must see this rank's gradient
   * (reading the reduced one would also make a cycle when the Allreduce sits in backward). */
  for (int i = 0; i < n_nodes0; i++) {
    ApxNode *cn = &g->nodes[i];
    if (cn->section != APX_SEC_OPTIMIZER || (cn->flags & APX_NODEF_DEAD)) continue;
    for (int k = 0; k < cn->n_in; k++)
      if (cn->in[k] >= 0 && cn->in[k] < n_vals0 && reduced[cn->in[k]] >= 0) cn->in[k] = reduced[cn->in[k]];
  }
  /* UnscaleCheck's unscaled outputs keep their types (fp32); re-infer it over the new inputs */
  if (apx_node_infer(g, uc, d)) goto out;
  rc = APX_PASS_CHANGED;
out:
  free(reduced);
  free(pos);
  free(ms);
  free(bs);
  free(outs);
  return rc;
}

/* ---- report ------------------------------------------------------------------------- */

int apx_buckets_collect(const ApxGraph *g, ApxBucketInfo *out, int cap) {
  int32_t *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
  if (!pos) return 0;
  for (int i = 0; i < g->n_nodes; i++) pos[i] = -1;
  for (int32_t t = 0; t < g->n_order; t++) pos[g->order[t]] = t;
  int count = 0;
  for (int32_t t = 0; t < g->n_order; t++) {
    const ApxNode *n = &g->nodes[g->order[t]];
    if (n->op != APX_OP_Allreduce || (n->typed && ((const ApxAttrAllreduce *)n->typed)->bucket < 0)) continue;
    if (count < cap) {
      ApxBucketInfo *b = &out[count];
      memset(b, 0, sizeof *b);
      b->node = g->order[t];
      b->id = n->typed ? ((const ApxAttrAllreduce *)n->typed)->bucket : count;
      b->dtype = n->n_in > 0 && n->in[0] >= 0 ? g->vals[n->in[0]].dtype : APX_DT_UNDEFINED;
      b->ready_at = -1;
      b->launch_at = t;
      for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0) continue;
        b->n_members++;
        int64_t by = apx_value_bytes(&g->vals[v]);
        if (by > 0) b->bytes += by;
        int p = g->vals[v].producer;
        if (p >= 0 && pos[p] > b->ready_at) b->ready_at = pos[p];
      }
      for (int32_t u = t + 1; u < g->n_order && g->nodes[g->order[u]].section == n->section; u++)
        b->overlap++;
    }
    count++;
  }
  free(pos);
  return count;
}
