/* make_bad_plans.c - writes the crafted-plan corpus: each file a plan with a valid checksum
 * whose metadata breaks what running it needs (issue 16), made by editing a plan apexc
 * compiled from examples/mlp (-O2, training) through tests/fuzz/plan_edit.h.
 *
 *   make_bad_plans GOOD.apx OUTDIR
 *
 * writes OUTDIR/<case>.apx and OUTDIR/MANIFEST.tsv (file, expected exit code, a substring of
 * the one-line message); bad_plans_cli_test.sh runs apexrun on each. Generated at test time,
 * not checked in, so the corpus follows the plan format. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attrs.h"
#include "tests/fuzz/plan_edit.h"

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)len + 1);
  if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return b;
}

static int find_buffer(const ApxPlanEdit *e, const char *name) {
  for (size_t i = 0; i < e->meta->n_buffers; i++)
    if (strcmp(e->meta->buffers[i]->name, name) == 0) return (int)i;
  return -1;
}

static int buffer(const ApxPlanEdit *e, const char *name) {
  int b = find_buffer(e, name);
  if (b >= 0) return b;
  fprintf(stderr, "make_bad_plans: no buffer '%s' in the plan\n", name);
  exit(1);
}

static int kernel(const ApxPlanEdit *e, const char *op) {
  int k = apx_plan_edit_find_kernel(e, op);
  if (k < 0) {
    fprintf(stderr, "make_bad_plans: no %s kernel in the plan\n", op);
    exit(1);
  }
  return k;
}

static int kernel_named(const ApxPlanEdit *e, const char *node) {
  for (size_t k = 0; k < e->meta->n_kernels; k++)
    if (strcmp(e->meta->kernels[k]->node, node) == 0) return (int)k;
  fprintf(stderr, "make_bad_plans: no kernel '%s' in the plan\n", node);
  exit(1);
}

/* ---- the cases: each edits a fresh decode of the good plan ------------------------------ */

/* The single-process Allreduce copied its input's bytes into its output unchecked: an output
 * 4 bytes from the arena's end taking a 2560-byte gradient was a heap overflow. */
static void allreduce_overflow(ApxPlanEdit *e) {
  Apexc__Kernel *k = e->meta->kernels[kernel(e, "Allreduce")];
  k->outputs[0] = buffer(e, "loss");
}

/* a forward kernel dropped: the next one read bytes nobody wrote ("loss 2.30 -> 289.28") */
static void dropped_kernel(ApxPlanEdit *e) { apx_plan_edit_drop_kernel(e, (size_t)kernel_named(e, "fc2/FusedDense")); }

/* the loss kernel dropped ("loss 0.000000") */
static void dropped_loss_kernel(ApxPlanEdit *e) { apx_plan_edit_drop_kernel(e, (size_t)kernel(e, "FusedXentropy")); }

/* a bool where the kernel computes in floats: n floats read from n bytes */
static void bool_activation(ApxPlanEdit *e) {
  int b = buffer(e, "relu1_out");
  e->meta->buffers[b]->dtype = 9; /* APX_DT_BOOL */
  const int64_t dims[2] = {32, 128};
  apx_plan_edit_set_dims(e, (size_t)b, dims, 2, 1);
}

/* a weight of another shape (its data range resized with it; a half copy derived from its
 * master at load has no data range) */
static void weight_shape(ApxPlanEdit *e) {
  int b = buffer(e, "fc2.weight");
  const int64_t dims[2] = {64, 128};
  apx_plan_edit_set_dims(e, (size_t)b, dims, 2, 2);
  if (e->meta->buffers[b]->data_len) e->meta->buffers[b]->data_len = (uint64_t)e->meta->buffers[b]->bytes;
  int master = find_buffer(e, "fc2.weight_fp32_master"); /* O2: the copy is derived from it */
  if (master >= 0) {
    apx_plan_edit_set_dims(e, (size_t)master, dims, 2, 4);
    e->meta->buffers[master]->data_len = (uint64_t)e->meta->buffers[master]->bytes;
  }
}

/* an output placed over its input by a kernel that is not in place */
static void output_over_input(ApxPlanEdit *e) {
  e->meta->buffers[buffer(e, "relu2_out")]->offset = e->meta->buffers[buffer(e, "relu1_out")]->offset;
}

/* a data input the plan does not list: nothing ever sets its bytes */
static void unlisted_input(ApxPlanEdit *e) {
  Apexc__Plan *m = e->meta;
  int labels = buffer(e, "labels");
  size_t w = 0;
  for (size_t i = 0; i < m->n_inputs; i++)
    if (m->inputs[i] != labels) m->inputs[w++] = m->inputs[i];
  m->n_inputs = w;
}

/* OptimizerStep's attributes name more parameters than it has inputs for */
static void optimizer_count(ApxPlanEdit *e) {
  Apexc__Kernel *k = e->meta->kernels[kernel(e, "OptimizerStep")];
  ApxAttrOptimizer a;
  memcpy(&a, k->attrs.data, sizeof a);
  a.n_params = 7;
  memcpy(k->attrs.data, &a, sizeof a);
}

/* UnscaleCheck writes one element of found_inf: a buffer without one */
static void unscale_scalar(ApxPlanEdit *e) {
  const int64_t dims[1] = {0};
  apx_plan_edit_set_dims(e, (size_t)buffer(e, "apx_found_inf"), dims, 1, 4);
}

/* Allreduce pairs of different dtypes (same bytes) */
static void allreduce_dtype(ApxPlanEdit *e) {
  Apexc__Kernel *k = e->meta->kernels[kernel(e, "Allreduce")];
  int b = k->outputs[0];
  e->meta->buffers[b]->dtype = 5; /* APX_DT_I16: an fp16 gradient's bytes read as integers */
}

static void unchanged(ApxPlanEdit *e) { (void)e; }

typedef struct Case {
  const char *name;
  void (*edit)(ApxPlanEdit *e);
  int exit_code;
  const char *expected;
} Case;

static const Case k_cases[] = {
    {"allreduce_overflow", allreduce_overflow, 2, "Allreduce): output 0 does not mirror input 0"},
    {"allreduce_dtype", allreduce_dtype, 2, "Allreduce): output 0 does not mirror input 0"},
    {"dropped_kernel", dropped_kernel, 2, "input 0 reads 'relu2_out', which no earlier kernel writes"},
    {"dropped_loss_kernel", dropped_loss_kernel, 2, "reads 'loss', which no earlier kernel writes"},
    {"bool_activation", bool_activation, 2, "output 0 has type bool, expected a float type"},
    {"weight_shape", weight_shape, 2, "shapes do not match: X [32,128], W [64,128], Y [32,128]"},
    {"output_over_input", output_over_input, 2,
     "output 0 ('relu2_out') shares bytes with input 0 ('relu1_out')"},
    {"unlisted_input", unlisted_input, 2, "reads 'labels', a data input the plan does not list"},
    {"optimizer_count", optimizer_count, 2, "7 parameters need 39 inputs, got 34"},
    {"unscale_scalar", unscale_scalar, 2, "found_inf, first_bad and norm_sq must have an element each"},
    {"reencoded", unchanged, 0, "trained steps"},
};

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: make_bad_plans GOOD.apx OUTDIR\n");
    return 2;
  }
  size_t n = 0;
  uint8_t *good = slurp(argv[1], &n);
  if (!good) {
    fprintf(stderr, "make_bad_plans: cannot read %s\n", argv[1]);
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/MANIFEST.tsv", argv[2]);
  FILE *man = fopen(path, "w");
  if (!man) return 1;
  fprintf(man, "file\texit\texpected\n");
  for (size_t c = 0; c < sizeof k_cases / sizeof *k_cases; c++) {
    ApxPlanEdit e;
    if (apx_plan_edit_decode(&e, good, n)) {
      fprintf(stderr, "make_bad_plans: %s is not a plan\n", argv[1]);
      return 1;
    }
    k_cases[c].edit(&e);
    size_t len = 0;
    uint8_t *f = apx_plan_edit_encode(&e, &len);
    snprintf(path, sizeof path, "%s/%s.apx", argv[2], k_cases[c].name);
    FILE *out = fopen(path, "wb");
    if (!f || !out || fwrite(f, 1, len, out) != len || fclose(out)) return 1;
    free(f);
    apx_plan_edit_free(&e);
    fprintf(man, "%s.apx\t%d\t%s\n", k_cases[c].name, k_cases[c].exit_code, k_cases[c].expected);
  }
  free(good);
  return fclose(man) ? 1 : 0;
}
