/* dataset.c - the --data folder (dataset.h). */
#include "runtime/dataset.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/attrs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
#include "kernels/op.h"
#include "ir/fileio.h"

static void dims_str(const int64_t *dims, int rank, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", dims[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Integer value i of an integer/bool array, as int64 (uint64 above INT64_MAX: *big = 1). */
static int64_t int_at(const ApxNpy *a, int64_t i, int *big) {
  const uint8_t *p = a->data;
  *big = 0;
  switch (a->dtype) {
    case APX_DT_BOOL:
    case APX_DT_U8: return p[i];
    case APX_DT_I8: return ((const int8_t *)p)[i];
    case APX_DT_I16: return ((const int16_t *)p)[i];
    case APX_DT_U16: return ((const uint16_t *)p)[i];
    case APX_DT_I32: return ((const int32_t *)p)[i];
    case APX_DT_U32: return ((const uint32_t *)p)[i];
    case APX_DT_I64: return ((const int64_t *)p)[i];
    case APX_DT_U64: {
      uint64_t v = ((const uint64_t *)p)[i];
      if (v > (uint64_t)INT64_MAX) *big = 1;
      return (int64_t)v;
    }
    default: return 0;
  }
}

static int fits(int64_t v, ApxDType t) {
  switch (t) {
    case APX_DT_I8: return v >= INT8_MIN && v <= INT8_MAX;
    case APX_DT_U8: return v >= 0 && v <= UINT8_MAX;
    case APX_DT_I16: return v >= INT16_MIN && v <= INT16_MAX;
    case APX_DT_U16: return v >= 0 && v <= UINT16_MAX;
    case APX_DT_I32: return v >= INT32_MIN && v <= INT32_MAX;
    case APX_DT_U32: return v >= 0 && v <= (int64_t)UINT32_MAX;
    case APX_DT_I64: return 1;
    case APX_DT_U64: return v >= 0;
    default: return 0;
  }
}

/* Converts a in place to dtype want (float to float, integer to integer: check_header). The
 * file's elements, when they were converted, are handed to the caller in *old (to free). */
static int convert(ApxNpy *a, ApxDType want, const char *path, const char *input, void **old, ApxDiag *d) {
  *old = NULL;
  if (a->dtype == want) return 0; /* the kinds agree: check_header */
  if (!apx_dtype_is_float(a->dtype)) {
    for (int64_t i = 0; i < a->numel; i++) {
      int big;
      int64_t v = int_at(a, i, &big);
      if (big || !fits(v, want))
        return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                              "%s: element %" PRId64 " (%s%" PRId64 ") does not fit the plan input "
                              "'%s' (%s)", path, i, big ? "> " : "", big ? INT64_MAX : v, input,
                              apx_dtype_name(want));
    }
  }
  size_t bytes = (size_t)a->numel * apx_dtype_size(want);
  void *dst = malloc(bytes ? bytes : 1);
  if (!dst) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  if (apx_cpu_convert(a->data, a->dtype, dst, want, a->numel) != APX_STATUS_OK) {
    free(dst);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot convert %s to %s", path,
                          apx_dtype_name(a->dtype), apx_dtype_name(want));
  }
  *old = a->data;
  a->data = dst;
  a->dtype = want;
  a->bytes = bytes;
  return 0;
}

/* Index operands the data can feed: class labels of a loss (input 1 of SoftmaxCrossEntropyLoss,
 * NegativeLogLikelihoodLoss, FusedXentropy: [0, C) with C = dim 1 of the scores, or the
 * ignore_index) and Gather indices ([-n, n) with n = the data's size along the axis). A value
 * outside makes the kernel fail mid-training (exit code 1); found here it is bad input, named
 * by file, sample and value. The operand may reach the kernel through shape-only ops
 * (Reshape, Flatten, Squeeze, Unsqueeze) and aliases. */
int apx_dataset_check_indices(const ApxPlan *plan, int32_t i, const ApxNpy *a, const char *path,
                              ApxDiag *d) {
  if (apx_dtype_is_float(a->dtype) || a->dtype == APX_DT_BOOL || a->numel == 0) return 0;
  uint8_t *from = calloc((size_t)plan->n_bufs + 1, 1); /* 1: carries input i's values */
  if (!from) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  from[plan->inputs[i]] = 1;
  int rc = 0;
  for (int32_t k = 0; k < plan->n_kernels && !rc; k++) {
    const ApxPlanKernel *pk = &plan->kernels[k];
    for (int32_t o = 0; o < pk->n_out; o++) { /* aliases of a carrying buffer carry it too */
      int32_t b = pk->out[o];
      if (b >= 0 && plan->bufs[b].alias_of >= 0 && from[plan->bufs[b].alias_of]) from[b] = 1;
    }
    if (pk->n_in < 1 || pk->in[0] < 0) continue;
    if ((apx_op_info(pk->op)->flags & APX_OPF_SHAPEONLY) && from[pk->in[0]] && pk->n_out > 0 &&
        pk->out[0] >= 0) {
      from[pk->out[0]] = 1;
      continue;
    }
    if (pk->n_in < 2 || pk->in[1] < 0 || !from[pk->in[1]]) continue;
    const ApxPlanBuffer *data = &plan->bufs[pk->in[0]];
    int64_t lo, hi, ignore = 0;
    int has_ignore = 0;
    const char *what;
    if (pk->op == APX_OP_SoftmaxCrossEntropyLoss || pk->op == APX_OP_NegativeLogLikelihoodLoss ||
        pk->op == APX_OP_FusedXentropy) {
      if (data->rank < 2) continue;
      const ApxAttrLoss *la = pk->attrs;
      lo = 0, hi = data->dims[1];
      has_ignore = la && la->has_ignore_index;
      ignore = has_ignore ? la->ignore_index : 0;
      what = "class label";
    } else if (pk->op == APX_OP_Gather) {
      const ApxAttrAxis *ax = pk->attrs;
      int64_t axis = ax ? ax->axis : 0;
      if (axis < 0) axis += data->rank;
      if (axis < 0 || axis >= data->rank) continue;
      lo = -data->dims[axis], hi = data->dims[axis];
      what = "index";
    } else {
      continue;
    }
    int64_t per_sample = a->dims[0] > 0 ? a->numel / a->dims[0] : 1;
    for (int64_t e = 0; e < a->numel; e++) {
      int big;
      int64_t v = int_at(a, e, &big);
      if (!big && v >= lo && v < hi) continue;
      if (!big && has_ignore && v == ignore) continue;
      char elem[64] = "", ign[64] = "";
      if (per_sample > 1) snprintf(elem, sizeof elem, " (element %" PRId64 ")", e % per_sample);
      if (has_ignore) snprintf(ign, sizeof ign, " or ignore_index %" PRId64, ignore);
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: sample %" PRId64 "%s: %s %s%" PRId64 " is out of range: the plan's %s '%s' "
                          "takes [%" PRId64 ", %" PRId64 ")%s", path, e / per_sample, elem, what,
                          big ? "> " : "", big ? INT64_MAX : v, apx_op_name(pk->op), pk->node ? pk->node : "?",
                          lo, hi, ign);
      break;
    }
  }
  free(from);
  return rc;
}

/* Digest of one loaded file: CRC32C of its size, dtype and shape (low 32 bits) and of every
 * element as read (high 32 bits). */
static uint64_t file_digest(const ApxNpy *a) {
  uint8_t meta[16 + 8 * APX_MAX_RANK];
  apx_le_put_u64(meta, a->file_bytes);
  apx_le_put_u32(meta + 8, (uint32_t)a->dtype);
  apx_le_put_u32(meta + 12, (uint32_t)a->rank);
  for (int k = 0; k < a->rank; k++) apx_le_put_u64(meta + 16 + 8 * k, (uint64_t)a->dims[k]);
  uint32_t lo = apx_crc32c(0, meta, 16 + 8 * (size_t)a->rank);
  uint32_t hi = apx_crc32c(0, a->data, a->bytes);
  return (uint64_t)hi << 32 | lo;
}

/* ---- non-finite values ------------------------------------------------------------------ */

/* 1 when element i of data (a float dtype) is NaN or +-Inf (exponent all ones), its value in *v. */
static int elem_nonfinite(const void *data, ApxDType dt, int64_t i, double *v) {
  switch (dt) {
    case APX_DT_F16: {
      uint16_t h = ((const uint16_t *)data)[i];
      if ((h & 0x7C00u) != 0x7C00u) return 0;
      *v = apx_f16_to_f32(h);
      return 1;
    }
    case APX_DT_BF16: {
      uint16_t h = ((const uint16_t *)data)[i];
      if ((h & 0x7F80u) != 0x7F80u) return 0;
      *v = apx_bf16_to_f32(h);
      return 1;
    }
    case APX_DT_F32: {
      uint32_t u;
      memcpy(&u, (const uint8_t *)data + 4 * i, 4);
      if ((u & 0x7F800000u) != 0x7F800000u) return 0;
      float f;
      memcpy(&f, &u, 4);
      *v = f;
      return 1;
    }
    case APX_DT_F64: {
      uint64_t u;
      memcpy(&u, (const uint8_t *)data + 8 * i, 8);
      if ((u & 0x7FF0000000000000ull) != 0x7FF0000000000000ull) return 0;
      memcpy(v, &u, 8);
      return 1;
    }
    default: return 0;
  }
}

/* 1 when any of the n elements at p (a float dtype) is NaN or +-Inf: an OR of the exponent
 * test over the run, no branch per element (the per-element detail is only worked out for a
 * run that has one). */
static int any_nonfinite(const uint8_t *p, ApxDType dt, int64_t n) {
  unsigned bad = 0;
  switch (dt) {
    case APX_DT_F16:
    case APX_DT_BF16: {
      const uint16_t m = dt == APX_DT_F16 ? 0x7C00u : 0x7F80u;
      for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        bad |= (h & m) == m;
      }
      break;
    }
    case APX_DT_F32:
      for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        bad |= (u & 0x7F800000u) == 0x7F800000u;
      }
      break;
    case APX_DT_F64:
      for (int64_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, p + 8 * i, 8);
        bad |= (u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
      }
      break;
    default: break;
  }
  return bad != 0;
}

/* A finite element's value (the file's, for the warning about an overflowing conversion). */
static double elem_value(const void *data, ApxDType dt, int64_t i) {
  switch (dt) {
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)data)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)data)[i]);
    case APX_DT_F32: return ((const float *)data)[i];
    case APX_DT_F64: return ((const double *)data)[i];
    default: return 0;
  }
}

/* Input i's non-finite elements (ds->arrays[i] is in the plan input's type; file holds the
 * same elements as read, in file_dt, or is the same array when nothing was converted). */
static int scan_nonfinite(ApxDataset *ds, int32_t i, const void *file, ApxDType file_dt, ApxDiag *d) {
  const ApxNpy *a = &ds->arrays[i];
  ApxDataNonFinite *nf = &ds->nonfinite[i];
  nf->first_sample = nf->first_element = -1;
  int64_t n = a->dims[0], per = n > 0 ? a->numel / n : 0;
  size_t esz = apx_dtype_size(a->dtype);
  if (!any_nonfinite(a->data, a->dtype, a->numel)) return 0; /* clean data: one pass */
  for (int64_t s = 0; s < n; s++) {
    if (!any_nonfinite((const uint8_t *)a->data + (size_t)(s * per) * esz, a->dtype, per)) continue;
    int bad = 0, file_bad = 0;
    for (int64_t e = 0; e < per; e++) {
      double v, fv;
      if (!elem_nonfinite(a->data, a->dtype, s * per + e, &v)) continue;
      int in_file = elem_nonfinite(file, file_dt, s * per + e, &fv);
      file_bad |= in_file;
      if (!bad && nf->first_sample < 0) {
        nf->first_sample = s;
        nf->first_element = e;
        nf->first_value = v;
        nf->first_file_value = in_file ? fv : elem_value(file, file_dt, s * per + e);
      }
      bad = 1;
    }
    if (!bad) continue;
    nf->samples++;
    ds->n_nonfinite++;
    if (file_bad) continue;
    nf->conv_samples++;
    if (!nf->conv && !(nf->conv = calloc((size_t)n / 8 + 1, 1)))
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", ds->paths[i]);
    nf->conv[s / 8] |= (uint8_t)(1u << (s % 8));
  }
  return 0;
}

int apx_dataset_find_nonfinite(const ApxDataset *ds, const int64_t *idx, int64_t n, ApxDataCulprit *out) {
  if (ds->n_nonfinite == 0) return 0;
  for (int32_t i = 0; i < ds->n_inputs; i++) {
    const ApxNpy *a = &ds->arrays[i];
    const ApxDataNonFinite *nf = &ds->nonfinite[i];
    if (nf->samples == 0) continue;
    int64_t per = a->numel / a->dims[0];
    size_t esz = apx_dtype_size(a->dtype);
    for (int64_t j = 0; j < n; j++) {
      int64_t s = idx[j];
      if (s < 0 || s >= a->dims[0] ||
          !any_nonfinite((const uint8_t *)a->data + (size_t)(s * per) * esz, a->dtype, per))
        continue;
      for (int64_t e = 0; e < per; e++) {
        double v;
        if (!elem_nonfinite(a->data, a->dtype, s * per + e, &v)) continue;
        out->input = i;
        out->sample = s;
        out->element = e;
        out->value = v;
        out->from_conversion = nf->conv && (nf->conv[s / 8] >> (s % 8) & 1);
        return 1;
      }
    }
  }
  return 0;
}

void apx_dataset_culprit_text(const ApxDataset *ds, const ApxDataCulprit *c, char *buf, size_t cap) {
  const char *what = isnan(c->value) ? "nan" : c->value > 0 ? "inf" : "-inf";
  if (c->from_conversion)
    snprintf(buf, cap, "%s sample %" PRId64 " element %" PRId64 " is %s as %s, the plan input's type (the "
             "file's value is beyond its range)", ds->paths[c->input], c->sample, c->element, what,
             apx_dtype_name(ds->arrays[c->input].dtype));
  else
    snprintf(buf, cap, "%s sample %" PRId64 " element %" PRId64 " is %s", ds->paths[c->input], c->sample,
             c->element, what);
}

/* The checks that need only the header (file size, dtype, shape): every file is checked this
 * way before any element of any file is read, so a mismatch costs nothing however large the
 * files. */
static int check_header(ApxDataset *ds, const ApxPlan *plan, int32_t i, const ApxNpy *a,
                        const char **first_path, ApxDiag *d) {
  const ApxPlanBuffer *b = &plan->bufs[plan->inputs[i]];
  const char *path = ds->paths[i];
  char want[128], got[128];
  int shape_ok = a->rank == b->rank;
  for (int k = 1; shape_ok && k < b->rank; k++) shape_ok = a->dims[k] == b->dims[k];
  if (!shape_ok) {
    dims_str(a->dims, a->rank, got, sizeof got);
    dims_str(b->dims, b->rank, want, sizeof want);
    char pattern[160] = "[N";
    size_t k = 2;
    for (int j = 1; j < b->rank; j++)
      k += (size_t)snprintf(pattern + k, sizeof pattern - k, ",%" PRId64, b->dims[j]);
    snprintf(pattern + k, sizeof pattern - k, "]");
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: shape %s does not match the plan input '%s' %s (expected %s: "
                          "samples along axis 0)", path, got, b->name, want, pattern);
  }
  if (a->dims[0] < 1) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: no samples (axis 0 is empty)", path);
  if (i == 0) {
    ds->n_samples = a->dims[0];
    ds->batch = b->dims[0];
    *first_path = path;
  } else {
    if (a->dims[0] != ds->n_samples)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %" PRId64 " samples, but %s has %" PRId64,
                            path, a->dims[0], *first_path, ds->n_samples);
    if (b->dims[0] != ds->batch)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "%s: the plan inputs disagree on the batch size ('%s' %" PRId64
                            ", '%s' %" PRId64 ")", plan->path ? plan->path : "<plan>", b->name,
                            b->dims[0], plan->bufs[plan->inputs[0]].name, ds->batch);
  }
  int af = apx_dtype_is_float(a->dtype), wf = apx_dtype_is_float(b->dtype);
  if (a->dtype != b->dtype && (af != wf || a->dtype == APX_DT_BOOL || b->dtype == APX_DT_BOOL))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: dtype %s, but the plan input '%s' is %s",
                          path, apx_dtype_name(a->dtype), b->name, apx_dtype_name(b->dtype));
  return 0;
}

int apx_dataset_open(ApxDataset *ds, const ApxPlan *plan, const char *dir, ApxDiag *d) {
  memset(ds, 0, sizeof *ds);
  int32_t n = plan->n_inputs;
  if (n < 1)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the plan has no data inputs to read from %s",
                          plan->path ? plan->path : "<plan>", dir);
  ds->arrays = calloc((size_t)n, sizeof *ds->arrays);
  ds->sample_bytes = calloc((size_t)n, sizeof *ds->sample_bytes);
  ds->paths = calloc((size_t)n, sizeof *ds->paths);
  ds->digests = calloc((size_t)n, sizeof *ds->digests);
  ds->nonfinite = calloc((size_t)n, sizeof *ds->nonfinite);
  if (!ds->arrays || !ds->sample_bytes || !ds->paths || !ds->digests || !ds->nonfinite)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", dir);
  ds->n_inputs = n;
  const char *first_path = NULL;
  /* 1: every header (no element read yet) */
  for (int32_t i = 0; i < n; i++) {
    const ApxPlanBuffer *b = &plan->bufs[plan->inputs[i]];
    if (asprintf(&ds->paths[i], "%s/%s.npy", dir, b->name) < 0) {
      ds->paths[i] = NULL;
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", dir);
    }
    const char *path = ds->paths[i];
    if (b->rank < 1)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "%s: not supported yet: the plan input '%s' is a scalar (no batch axis)",
                            path, b->name);
    struct stat st;
    if (stat(path, &st) != 0)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "%s: missing: --data needs one NAME.npy per plan input (%s): %s", path,
                            b->name, strerror(errno));
    if (apx_npy_read_header(path, &ds->arrays[i], d)) return -1;
    if (check_header(ds, plan, i, &ds->arrays[i], &first_path, d)) return -1;
  }
  /* 2: the elements, exactly as many as each header declares */
  for (int32_t i = 0; i < n; i++) {
    const ApxPlanBuffer *b = &plan->bufs[plan->inputs[i]];
    ApxNpy *a = &ds->arrays[i], h = *a;
    if (apx_npy_read(ds->paths[i], a, d)) return -1;
    int same = a->dtype == h.dtype && a->rank == h.rank && a->file_bytes == h.file_bytes;
    for (int k = 0; same && k < a->rank; k++) same = a->dims[k] == h.dims[k];
    if (!same)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: changed while it was being read", ds->paths[i]);
    ds->digests[i] = file_digest(a);
    ds->digest = ds->digest * 1000003u ^ ds->digests[i];
    void *old = NULL;
    ApxDType file_dtype = a->dtype;
    if (convert(a, b->dtype, ds->paths[i], b->name, &old, d)) return -1;
    ds->sample_bytes[i] = a->bytes / (size_t)a->dims[0];
    int rc = apx_dtype_is_float(a->dtype) ? scan_nonfinite(ds, i, old ? old : a->data, file_dtype, d) : 0;
    free(old);
    if (rc) return -1;
  }
  for (int32_t i = 0; i < n; i++)
    if (apx_dataset_check_indices(plan, i, &ds->arrays[i], ds->paths[i], d)) return -1;
  return 0;
}

void apx_dataset_free(ApxDataset *ds) {
  for (int32_t i = 0; i < ds->n_inputs; i++) {
    if (ds->arrays) apx_npy_free(&ds->arrays[i]);
    if (ds->paths) free(ds->paths[i]);
    if (ds->nonfinite) free(ds->nonfinite[i].conv);
  }
  free(ds->nonfinite);
  free(ds->arrays);
  free(ds->sample_bytes);
  free(ds->paths);
  free(ds->digests);
  memset(ds, 0, sizeof *ds);
}

void apx_dataset_gather(const ApxDataset *ds, int32_t i, const int64_t *idx, int64_t n, void *dst) {
  size_t sb = ds->sample_bytes[i];
  const uint8_t *src = ds->arrays[i].data;
  for (int64_t j = 0; j < n; j++) memcpy((uint8_t *)dst + (size_t)j * sb, src + (size_t)idx[j] * sb, sb);
}
