/* export_onnx.c - the trained model as inference ONNX (export_onnx.h).
 *
 * Works on the unpacked source model without changing it: every modified message is a
 * shallow copy (struct copied by value, then edited) and the graph's lists are new arrays,
 * so packing the copy and then freeing the unpacked original is safe. */
#include "runtime/export_onnx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"
#include "onnx.pb-c.h"
#include "ir/fileio.h"
#include "plan/model_blob.h"
#include "runtime/stop.h"

/* ---- a string set (open addressing) --------------------------------------------------- */

typedef struct NameSet {
  const char **slot;
  size_t cap, n;
} NameSet;

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static int set_init(NameSet *s, size_t expect) {
  s->cap = 64;
  while (s->cap < expect * 2 + 16) s->cap *= 2;
  s->n = 0;
  s->slot = calloc(s->cap, sizeof *s->slot);
  return s->slot ? 0 : -1;
}

static int set_has(const NameSet *s, const char *k) {
  if (!k || !*k) return 0;
  for (size_t i = fnv(k) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->slot[i]) return 0;
    if (!strcmp(s->slot[i], k)) return 1;
  }
}

static int set_add(NameSet *s, const char *k) {
  if (!k || !*k || set_has(s, k)) return 0;
  if ((s->n + 1) * 2 > s->cap) {
    NameSet t;
    t.cap = s->cap * 2;
    t.n = 0;
    t.slot = calloc(t.cap, sizeof *t.slot);
    if (!t.slot) return -1;
    for (size_t i = 0; i < s->cap; i++)
      if (s->slot[i]) set_add(&t, s->slot[i]);
    free(s->slot);
    *s = t;
  }
  size_t i = fnv(k) & (s->cap - 1);
  while (s->slot[i]) i = (i + 1) & (s->cap - 1);
  s->slot[i] = k;
  s->n++;
  return 0;
}

/* ---- helpers -------------------------------------------------------------------------- */

/* Pointers to free after packing (the shallow copies and new arrays). */
typedef struct Owned {
  void **p;
  size_t n, cap;
} Owned;

static void *own(Owned *o, void *p) {
  if (!p) return NULL;
  if (o->n == o->cap) {
    size_t nc = o->cap ? o->cap * 2 : 64;
    void **np = realloc(o->p, nc * sizeof *np);
    if (!np) {
      free(p);
      return NULL;
    }
    o->p = np;
    o->cap = nc;
  }
  o->p[o->n++] = p;
  return p;
}

static void owned_free(Owned *o) {
  for (size_t i = 0; i < o->n; i++) free(o->p[i]);
  free(o->p);
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
  return NULL;
}

static int64_t tensor_numel(const Onnx__TensorProto *t) {
  int64_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) n *= t->dims[i];
  return n;
}

/* A copy of initializer t whose data is src (n elements of dtype st) converted to t's dtype. */
static Onnx__TensorProto *with_data(const Onnx__TensorProto *t, const void *src, ApxDType st,
                                    int64_t n, Owned *o, ApxDiag *d, const char *path) {
  ApxDType tt = (ApxDType)t->data_type;
  size_t es = apx_dtype_size(tt);
  if (!apx_dtype_is_float(tt) || !apx_dtype_is_float(st) || !es) {
    apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: initializer '%s': cannot store %s values as %s", path,
                   t->name, apx_dtype_name(st), apx_dtype_name(tt));
    return NULL;
  }
  uint8_t *bytes = own(o, malloc((size_t)n * es + 1));
  Onnx__TensorProto *c = own(o, malloc(sizeof *c));
  if (!bytes || !c) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
    return NULL;
  }
  if (apx_cpu_convert(src, st, bytes, tt, n) != APX_STATUS_OK) {
    apx_diag_error(d, APX_EXIT_RUNTIME, "%s: initializer '%s': conversion failed", path, t->name);
    return NULL;
  }
  *c = *t;
  c->has_raw_data = 1;
  c->raw_data.len = (size_t)n * es;
  c->raw_data.data = bytes;
  c->n_float_data = c->n_int32_data = c->n_int64_data = c->n_double_data = c->n_uint64_data = 0;
  c->n_string_data = 0;
  c->n_external_data = 0;
  c->external_data = NULL;
  c->has_data_location = 0;
  c->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
  c->segment = NULL;
  return c;
}

/* Errors name the destination the user gave (the temporary file is an implementation detail). */
static int write_atomic(const char *path, const void *buf, size_t len, ApxDiag *d) {
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  if (apx_exists_not_regular(path)) {
    free(tmp);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a regular file (refusing to replace it)", path);
  }
  apx_stop_set_temp(tmp); /* before it exists: a second SIGINT/SIGTERM removes it (stop.h) */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int rc = 0;
  if (fd < 0) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write: %s", path, strerror(errno));
    apx_stop_set_temp(NULL);
    free(tmp);
    return rc;
  }
  if (apx_write_all(fd, buf, len))
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write: %s", path, strerror(errno));
  if (!rc && fsync(fd)) rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write: fsync: %s", path, strerror(errno));
  if (close(fd) && !rc) rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write: close: %s", path, strerror(errno));
  if (!rc && rename(tmp, path))
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot rename into place: %s", path, strerror(errno));
  if (rc) unlink(tmp);
  apx_stop_set_temp(NULL);
  free(tmp);
  return rc;
}

/* ---- export --------------------------------------------------------------------------- */

/* The plan's embedded source model, or NULL with the error in d. */
static const ApxPlanBlob *source_model(const ApxPlan *plan, ApxDiag *d) {
  const ApxPlanBlob *blob = apx_plan_find_blob(plan, APX_PLAN_BLOB_MODEL);
  if (blob && blob->data) return blob;
  apx_diag_error(d, APX_EXIT_BAD_INPUT,
                 "%s: not supported yet: --export-onnx of a plan without its source model "
                 "(compile it again with this apexc, from a readable model file)",
                 plan->path ? plan->path : "<plan>");
  return NULL;
}

int apx_export_onnx_check(const ApxPlan *plan, const char *path, ApxDiag *d) {
  if (!source_model(plan, d)) return -1;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write: %s", path, strerror(EISDIR));
  if (apx_exists_not_regular(path)) /* a device or FIFO: the rename would replace it */
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a regular file (refusing to replace it)", path);
  /* the probe is the temporary file the export itself will create (same folder, same name) */
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    free(tmp);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write: %s", path, strerror(e));
  }
  close(fd);
  unlink(tmp);
  free(tmp);
  return 0;
}

/* 1 when name is a loss of plan: its loss, or the loss input of a LossScaleSeed kernel. */
static int is_plan_loss(const ApxPlan *plan, const char *name) {
  if (!name) return 0;
  if (plan->loss >= 0 && !strcmp(plan->bufs[plan->loss].name, name)) return 1;
  for (int32_t k = 0; k < plan->n_kernels; k++) {
    const ApxPlanKernel *kn = &plan->kernels[k];
    if (kn->op == APX_OP_LossScaleSeed && kn->n_in > 0 && kn->in[0] >= 0 && kn->in[0] < plan->n_bufs &&
        !strcmp(plan->bufs[kn->in[0]].name, name))
      return 1;
  }
  return 0;
}

int apx_export_onnx(const ApxPlan *plan, ApxExec *ex, const char *path, ApxDiag *d) {
  const char *pn = plan->path ? plan->path : "<plan>";
  const ApxPlanBlob *blob = source_model(plan, d);
  if (!blob) return -1;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, (size_t)blob->data_len, blob->data);
  if (!m || !m->graph) {
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the embedded model does not parse as ONNX", pn);
  }
  const Onnx__GraphProto *g = m->graph;
  Owned o = {0};
  NameSet need = {0};
  int rc = 0;
  uint8_t *host = NULL;
  void *packed = NULL;
  Onnx__GraphProto *ng = own(&o, malloc(sizeof *ng));
  Onnx__ModelProto *nm = own(&o, malloc(sizeof *nm));
  Onnx__NodeProto **nodes = own(&o, calloc(g->n_node + 1, sizeof *nodes));
  Onnx__ValueInfoProto **outs = own(&o, calloc(g->n_output + 1, sizeof *outs));
  Onnx__ValueInfoProto **ins = own(&o, calloc(g->n_input + 1, sizeof *ins));
  Onnx__ValueInfoProto **vis = own(&o, calloc(g->n_value_info + 1, sizeof *vis));
  Onnx__TensorProto **inits = own(&o, calloc(g->n_initializer + 1, sizeof *inits));
  uint8_t *live = own(&o, calloc(g->n_node + 1, 1));
  if (!ng || !nm || !nodes || !outs || !ins || !vis || !inits || !live ||
      set_init(&need, g->n_node * 2 + g->n_initializer + g->n_input)) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
    goto done;
  }

  /* outputs: drop the losses (the plan's, and each LossScaleSeed's with several) when
   * something else remains */
  size_t n_out = 0, n_loss_out = 0;
  for (size_t i = 0; i < g->n_output; i++) n_loss_out += is_plan_loss(plan, g->output[i]->name);
  for (size_t i = 0; i < g->n_output; i++)
    if (n_loss_out == g->n_output || !is_plan_loss(plan, g->output[i]->name)) outs[n_out++] = g->output[i];
  for (size_t i = 0; i < n_out; i++)
    if (set_add(&need, outs[i]->name)) goto oom;

  /* nodes: inference forms of BatchNormalization and Dropout, then liveness backwards */
  for (size_t i = 0; i < g->n_node; i++) {
    Onnx__NodeProto *n = g->node[i];
    const char *op = n->op_type ? n->op_type : "";
    int onnx_domain = !n->domain || !*n->domain || !strcmp(n->domain, "ai.onnx");
    const Onnx__AttributeProto *tm = find_attr(n, "training_mode");
    if (onnx_domain && !strcmp(op, "BatchNormalization") && tm && tm->i != 0) {
      Onnx__NodeProto *c = own(&o, malloc(sizeof *c));
      Onnx__AttributeProto **attrs = own(&o, calloc(n->n_attribute + 1, sizeof *attrs));
      Onnx__AttributeProto *a = own(&o, malloc(sizeof *a));
      if (!c || !attrs || !a) goto oom;
      *c = *n;
      *a = *tm;
      a->i = 0;
      for (size_t k = 0; k < n->n_attribute; k++) attrs[k] = n->attribute[k] == tm ? a : n->attribute[k];
      c->attribute = attrs;
      if (c->n_output > 1) c->n_output = 1;
      n = c;
    } else if (onnx_domain && !strcmp(op, "Dropout") && n->n_input > 2) {
      Onnx__NodeProto *c = own(&o, malloc(sizeof *c));
      if (!c) goto oom;
      *c = *n;
      c->n_input = 2;
      n = c;
    }
    nodes[i] = n;
  }
  for (size_t i = g->n_node; i-- > 0;) {
    const Onnx__NodeProto *n = nodes[i];
    for (size_t k = 0; k < n->n_output && !live[i]; k++) live[i] = (uint8_t)set_has(&need, n->output[k]);
    if (!live[i]) continue;
    for (size_t k = 0; k < n->n_input; k++)
      if (set_add(&need, n->input[k])) goto oom;
  }
  size_t n_nodes = 0;
  for (size_t i = 0; i < g->n_node; i++)
    if (live[i]) nodes[n_nodes++] = nodes[i];
  NameSet produced = {0};
  if (set_init(&produced, n_nodes * 2)) goto oom;
  for (size_t i = 0; i < n_nodes; i++)
    for (size_t k = 0; k < nodes[i]->n_output; k++) set_add(&produced, nodes[i]->output[k]);

  size_t n_in = 0, n_vi = 0, n_init = 0;
  for (size_t i = 0; i < g->n_input; i++)
    if (set_has(&need, g->input[i]->name)) ins[n_in++] = g->input[i];
  for (size_t i = 0; i < g->n_value_info; i++)
    if (set_has(&need, g->value_info[i]->name) || set_has(&produced, g->value_info[i]->name))
      vis[n_vi++] = g->value_info[i];
  free(produced.slot);

  /* initializers: trained values in, the rest as they were */
  for (size_t i = 0; i < g->n_initializer && !rc; i++) {
    Onnx__TensorProto *t = g->initializer[i];
    if (!set_has(&need, t->name)) continue;
    int32_t b = apx_model_blob_source(plan, t->name);
    int external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    int has_data = (t->has_raw_data && t->raw_data.len) || t->n_float_data || t->n_int32_data ||
                   t->n_int64_data || t->n_double_data || t->n_uint64_data;
    int stripped = !external && !has_data && tensor_numel(t) > 0; /* model_blob.h */
    if (b >= 0 && plan->bufs[b].kind == APX_VAL_CONST && !external && !stripped) b = -1;
    if (b < 0) {
      if (external || stripped) {
        rc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "%s: not supported yet: initializer '%s' is %s the plan does not hold",
                            path, t->name, external ? "external data" : "data");
        break;
      }
      inits[n_init++] = t;
      continue;
    }
    const ApxPlanBuffer *pb = &plan->bufs[b];
    int64_t numel = pb->bytes / (int64_t)apx_dtype_size(pb->dtype);
    if (numel != tensor_numel(t)) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: initializer '%s' has %lld elements, the plan's "
                          "'%s' %lld", path, t->name, (long long)tensor_numel(t), pb->name, (long long)numel);
      break;
    }
    free(host);
    host = malloc((size_t)pb->bytes + 1);
    if (!host) goto oom;
    if (pb->kind == APX_VAL_CONST) memcpy(host, pb->data, (size_t)pb->bytes);
    else if (apx_exec_read(ex, b, host, (size_t)pb->bytes, d)) {
      rc = -1;
      break;
    }
    Onnx__TensorProto *c = with_data(t, host, pb->dtype, numel, &o, d, path);
    if (!c) {
      rc = -1;
      break;
    }
    inits[n_init++] = c;
  }
  if (rc) goto done;

  *ng = *g;
  ng->n_node = n_nodes;
  ng->node = nodes;
  ng->n_input = n_in;
  ng->input = ins;
  ng->n_output = n_out;
  ng->output = outs;
  ng->n_value_info = n_vi;
  ng->value_info = vis;
  ng->n_initializer = n_init;
  ng->initializer = inits;
  *nm = *m;
  nm->graph = ng;
  nm->n_training_info = 0;
  nm->training_info = NULL;
  size_t len = onnx__model_proto__get_packed_size(nm);
  packed = malloc(len ? len : 1);
  if (!packed) goto oom;
  onnx__model_proto__pack(nm, packed);
  rc = write_atomic(path, packed, len, d);
  goto done;
oom:
  rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
done:
  free(packed);
  free(host);
  free(need.slot);
  owned_free(&o);
  onnx__model_proto__free_unpacked(m, NULL);
  return rc ? -1 : 0;
}
