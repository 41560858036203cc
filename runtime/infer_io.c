/* infer_io.c - apexrun infer's input folder and outputs, in pb or npy (infer_io.h). */
#include "runtime/infer_io.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/onnx_load.h"
#include "ir/fileio.h"
#include "runtime/dataset.h"
#include "runtime/npy.h"

const char *apx_infer_format_name(ApxInferFormat f) { return f == APX_INFER_NPY ? "NAME.npy" : "input_K.pb"; }

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n > m && !strcmp(s + n - m, suffix);
}

/* The NAME.npy files of dir, sorted (names in the arena). */
static int list_npy(const char *dir, ApxArena *a, char ***names, int *n, ApxDiag *d) {
  DIR *dp = opendir(dir);
  if (!dp) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot open the input folder: %s", dir, strerror(errno));
  int cap = 16;
  *n = 0;
  *names = malloc(sizeof **names * (size_t)cap);
  struct dirent *e;
  while (*names && (e = readdir(dp))) {
    if (!ends_with(e->d_name, ".npy")) continue;
    if (*n == cap) {
      char **g = realloc(*names, sizeof **names * (size_t)(cap *= 2));
      if (!g) break;
      *names = g;
    }
    (*names)[(*n)++] = apx_arena_strndup(a, e->d_name, strlen(e->d_name) - 4);
  }
  closedir(dp);
  if (!*names) return apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
  qsort(*names, (size_t)*n, sizeof **names, cmp_str);
  return 0;
}

static ApxInputBinding *grow(ApxInferData *in, int cap) {
  ApxInputBinding *b = realloc(in->b, sizeof *b * (size_t)cap);
  if (b) in->b = b;
  return b;
}

int apx_infer_data_read(const char *dir, ApxInferData *in, ApxDiag *d) {
  memset(in, 0, sizeof *in);
  apx_arena_init(&in->arena);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s (--input-dir)", dir,
                          stat(dir, &st) != 0 ? "no such folder" : "not a folder");
  char **npy = NULL;
  int n_npy = 0;
  if (list_npy(dir, &in->arena, &npy, &n_npy, d)) return -1;
  char *first = apx_arena_printf(&in->arena, "%s/input_0.pb", dir);
  int have_pb = first && exists(first);
  if (have_pb && n_npy) {
    const char *example = npy[0];
    free(npy);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: holds both input_K.pb and NAME.npy files (%s.npy): keep one format", dir, example);
  }
  in->dir = dir;
  if (!have_pb && !n_npy) { /* fine for a model without data inputs (apx_infer_set_inputs) */
    free(npy);
    in->format = APX_INFER_PB;
    return 0;
  }
  int rc = 0;
  if (have_pb) {
    in->format = APX_INFER_PB;
    for (int k = 0;; k++) {
      char *path = apx_arena_printf(&in->arena, "%s/input_%d.pb", dir, k);
      if (!path) {
        rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
        break;
      }
      if (!exists(path)) break;
      if (!grow(in, k + 1)) {
        rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
        break;
      }
      ApxInputBinding *b = &in->b[k];
      memset(b, 0, sizeof *b);
      b->index = k;
      b->file = path;
      in->n = k + 1;
      if ((rc = apx_onnx_read_tensor_file(path, &in->arena, &b->t, NULL, d))) break;
    }
  } else {
    in->format = APX_INFER_NPY;
    if (!grow(in, n_npy)) rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
    for (int i = 0; rc == 0 && i < n_npy; i++) {
      ApxInputBinding *b = &in->b[i];
      memset(b, 0, sizeof *b);
      b->name = npy[i];
      b->index = -1;
      b->file = apx_arena_printf(&in->arena, "%s/%s.npy", dir, npy[i]);
      in->n = i + 1;
      ApxNpy a;
      if (!b->file) {
        rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
      } else if ((rc = apx_npy_read(b->file, &a, d)) == 0) {
        b->t.dtype = a.dtype;
        b->t.rank = a.rank;
        memcpy(b->t.dims, a.dims, sizeof b->t.dims);
        b->t.data = apx_arena_memdup(&in->arena, a.data, a.bytes ? a.bytes : 1);
        apx_npy_free(&a);
        if (!b->t.data) rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
      }
    }
  }
  free(npy);
  return rc;
}

void apx_infer_data_free(ApxInferData *in) {
  free(in->b);
  in->b = NULL;
  apx_arena_free(&in->arena);
}

static int set_one(ApxExec *ex, const ApxPlan *plan, int32_t i, const ApxInputBinding *b, ApxDiag *d) {
  /* uint16 test data of a bfloat16 input is bfloat16 bits (compiler/bind_inputs.h) */
  ApxTensor t = {b->t.data, apx_bind_data_dtype(b->t.dtype, plan->bufs[plan->inputs[i]].dtype), b->t.rank, {0}};
  memcpy(t.dims, b->t.dims, sizeof t.dims);
  ApxDiag di;
  apx_diag_init(&di);
  if (apx_exec_set_input(ex, i, &t, &di)) {
    /* name the input file rather than the plan: that is what was wrong */
    const char *what = strstr(di.msg, ": ");
    return apx_diag_error(d, di.code, "%s%s", b->file, what ? what : di.msg);
  }
  /* class labels and indices out of range are bad input (exit 2) as in training, not a
   * kernel failure (dataset.h) */
  ApxNpy view = {t.dtype, t.rank, {0}, 1, t.data, 0, 0, 0, 0};
  memcpy(view.dims, t.dims, sizeof view.dims);
  for (int k = 0; k < t.rank; k++) view.numel *= t.dims[k];
  return t.rank >= 1 ? apx_dataset_check_indices(plan, i, &view, b->file, d) : 0;
}

int apx_infer_set_inputs(ApxExec *ex, const ApxPlan *plan, const ApxInferData *in, ApxDiag *d) {
  int by_name = in->format == APX_INFER_NPY || (in->n > 0 && in->b[0].name);
  if (!by_name) { /* pb files into a plan file: file K is plan input K */
    if (in->n > plan->n_inputs)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: the model has %d data input%s, this is one more",
                            in->b[plan->n_inputs].file, plan->n_inputs, plan->n_inputs == 1 ? "" : "s");
    for (int32_t i = 0; i < plan->n_inputs; i++) {
      if (i >= in->n)
        return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                              in->n ? "%s: no input_%d.pb for the model's data input '%s'"
                                    : "%s: no input_%d.pb for the model's data input '%s' (apexrun infer reads ONNX test "
                                      "data input_K.pb, or one NAME.npy per data input)",
                              in->dir, i, plan->bufs[plan->inputs[i]].name);
      if (set_one(ex, plan, i, &in->b[i], d)) return -1;
    }
    return 0;
  }
  for (int k = 0; k < in->n; k++) { /* every runtime datum must be an input of the plan */
    if (in->b[k].constant) continue;
    int found = 0;
    for (int32_t i = 0; i < plan->n_inputs && !found; i++) found = !strcmp(plan->bufs[plan->inputs[i]].name, in->b[k].name);
    if (!found)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: '%s' is not a data input of the model", in->b[k].file,
                            in->b[k].name);
  }
  for (int32_t i = 0; i < plan->n_inputs; i++) {
    const char *name = plan->bufs[plan->inputs[i]].name;
    const ApxInputBinding *b = NULL;
    for (int k = 0; k < in->n && !b; k++)
      if (!strcmp(in->b[k].name, name)) b = &in->b[k];
    if (!b)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: no %s%s for the model's data input '%s'", in->dir,
                            in->format == APX_INFER_NPY ? name : "input_K",
                            in->format == APX_INFER_NPY ? ".npy" : ".pb", name);
    if (set_one(ex, plan, i, b, d)) return -1;
  }
  return 0;
}

/* NAME with characters that do not belong in a file name replaced by '_'. */
static char *file_name(ApxArena *a, const char *name) {
  char *s = apx_arena_strdup(a, name && *name ? name : "output");
  for (char *p = s; p && *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
          *p == '-' || *p == '_'))
      *p = '_';
  if (s && s[0] == '.') s[0] = '_';
  return s;
}

int apx_infer_output_dir(const char *dir, ApxDiag *d) {
  struct stat ost;
  if (stat(dir, &ost) == 0) {
    if (!S_ISDIR(ost.st_mode)) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a folder (--output-dir)", dir);
  } else if (mkdir(dir, 0755) && errno != EEXIST) {
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot create the output folder: %s", dir, strerror(errno));
  }
  return 0;
}

/* The path output i is written to. */
static char *output_path(ApxArena *a, const ApxPlan *plan, const char *dir, ApxInferFormat f, int32_t i) {
  const ApxPlanBuffer *b = &plan->bufs[plan->outputs[i]];
  return f == APX_INFER_NPY ? apx_arena_printf(a, "%s/%s.npy", dir, file_name(a, b->name))
                            : apx_arena_printf(a, "%s/output_%d.pb", dir, i);
}

int apx_infer_check_outputs(const ApxPlan *plan, const char *dir, ApxInferFormat f, const char *model,
                            const ApxInferData *in, ApxDiag *d) {
  ApxArena a;
  apx_arena_init(&a);
  int rc = 0;
  for (int32_t o = 0; rc == 0 && o < plan->n_outputs; o++) {
    char *op = output_path(&a, plan, dir, f, o);
    if (!op) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
      break;
    }
    const char *clash = apx_same_file(op, model) ? model : NULL;
    for (int k = 0; !clash && k < in->n; k++)
      if (in->b[k].file && apx_same_file(op, in->b[k].file)) clash = in->b[k].file;
    if (clash)
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: refusing to overwrite the %s %s (--output-dir must not "
                          "hold the model or the input files under the names it writes)", op,
                          clash == model ? "model" : "input", clash);
  }
  apx_arena_free(&a);
  return rc;
}

int apx_infer_write_outputs(ApxExec *ex, const ApxPlan *plan, const char *dir, ApxInferFormat f, ApxDiag *d) {
  if (apx_infer_output_dir(dir, d)) return -1;
  ApxArena a;
  apx_arena_init(&a);
  int rc = 0;
  for (int32_t i = 0; rc == 0 && i < plan->n_outputs; i++) {
    const ApxPlanBuffer *b = &plan->bufs[plan->outputs[i]];
    void *host = apx_arena_alloc_raw(&a, (size_t)b->bytes + 1);
    char *path = output_path(&a, plan, dir, f, i);
    if (!host || !path) {
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
      break;
    }
    if ((rc = apx_exec_read(ex, plan->outputs[i], host, (size_t)b->bytes, d))) break;
    ApxTensor t = {host, b->dtype, b->rank, {0}};
    memcpy(t.dims, b->dims, sizeof t.dims);
    rc = f == APX_INFER_NPY ? apx_npy_write(path, &t, d) : apx_onnx_write_tensor_file(path, b->name, &t, d);
  }
  apx_arena_free(&a);
  return rc;
}
