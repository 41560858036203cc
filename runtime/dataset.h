/* dataset.h - `apexrun --data DIR`: one NAME.npy per data input of the plan (DESIGN.md 13).
 *
 * For every plan data input (plan->inputs, the non-parameter graph inputs) DIR/NAME.npy
 * must exist, hold samples along axis 0 and match the input's trailing dimensions
 * (input [B, d1, ..] <- file [N, d1, ..]); every file has the same N. The batch size is the
 * input's first dimension B. Element types: a float file is converted to the input's float
 * type (fp64/fp32/fp16 -> fp32/fp16/bf16, round to nearest even); an integer file to the
 * input's integer type when every value fits; bool only from bool. Each problem is one line
 * naming the file (exit code 2):
 *   data/labels.npy: dtype float32, but the plan input 'labels' is int64
 *   data/x.npy: shape [2048,32] does not match the plan input 'x' [32,64] (expected [N,64])
 *   data/labels.npy: 1000 samples, but data/x.npy has 2048
 *   data/labels.npy: sample 17: class label 12 is out of range: the plan's SoftmaxCrossEntropyLoss
 *       'loss' takes [0, 10)
 * (integer inputs that reach a loss as class labels or a Gather as indices are checked
 * against the class count / indexed dimension, so a bad value is bad input, not a kernel
 * failure in the middle of training)
 * Every file's header is read and checked (shape, sample count, dtype kind) before any
 * element of any file is read, so a mismatch costs two small reads even for 4 GiB files;
 * then each file is loaded whole into memory (exactly the bytes its header declares),
 * digested and converted once.
 *
 * Non-finite floats: while a float file is converted, every element is checked (a bit test
 * per element, next to the conversion itself) for NaN and +-Inf in the plan input's type:
 * those of the file, and finite file values the conversion made infinite (1e5 in an fp16
 * input). The data is not refused (a model may mask them: IsNaN, Where); per input the
 * count and the first are kept for apexrun's warning at start, and a step whose loss or
 * gradients are not finite asks apx_dataset_find_nonfinite whether its batch held one, so
 * that the step is reported as non-finite input data (file, sample, element, value), not as
 * a gradient overflow. Clean data costs nothing per step. */
#ifndef APX_DATASET_H
#define APX_DATASET_H

#include <stdint.h>

#include "ir/diag.h"
#include "runtime/npy.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxDataset {
  int32_t n_inputs;
  ApxNpy *arrays;         /* [n_inputs], in the plan input's dtype */
  int64_t n_samples;
  int64_t batch;          /* first dimension of the plan inputs */
  size_t *sample_bytes;   /* [n_inputs] bytes of one sample */
  char **paths;           /* [n_inputs] */
  uint64_t *digests;      /* [n_inputs] per file: CRC32C of its size, dtype and shape (low 32
                             bits) and of every element as read (high 32 bits) */
  uint64_t digest;        /* all files together (0 before open): what checkpoints record and
                             data-parallel ranks compare */
  struct ApxDataNonFinite *nonfinite; /* [n_inputs] (above) */
  int64_t n_nonfinite;    /* samples holding a NaN or Inf, over all inputs: 0 for clean data */
} ApxDataset;

/* The non-finite values of one input (as the plan input's type). */
typedef struct ApxDataNonFinite {
  int64_t samples;        /* samples holding a NaN or +-Inf */
  int64_t conv_samples;   /* of those, samples whose file values are all finite: the conversion
                             to the input's type overflowed */
  int64_t first_sample, first_element; /* the first (-1: none) ... */
  double first_value;     /* ... its value in the input's type (nan, inf, -inf) ... */
  double first_file_value; /* ... and in the file (the same unless the conversion overflowed) */
  uint8_t *conv;          /* bit s: sample s holds a value the conversion made infinite;
                             NULL when none */
} ApxDataNonFinite;

/* One non-finite element of the data. */
typedef struct ApxDataCulprit {
  int32_t input;
  int64_t sample, element;
  double value;
  int32_t from_conversion; /* the file's value is finite: beyond the input type's range */
} ApxDataCulprit;

/* Returns 0 or -1 (error in d). ds is safe to free in both cases. */
int apx_dataset_open(ApxDataset *ds, const ApxPlan *plan, const char *dir, ApxDiag *d);
void apx_dataset_free(ApxDataset *ds);

/* Integer values of plan data input i (a: samples along axis 0, any integer dtype) that reach
 * a loss as class labels or a Gather as indices, checked against the class count / indexed
 * dimension: "<path>: sample 17: class label 12 is out of range: ..." (code 2). Training runs
 * it on every --data file, `apexrun infer` on every input_K.pb. 0 or -1. */
int apx_dataset_check_indices(const ApxPlan *plan, int32_t i, const ApxNpy *a, const char *path,
                              ApxDiag *d);

/* The first non-finite element of samples idx[0..n-1] (inputs in order, then samples in
 * idx order): 1 with *out, 0 when they are all finite (at once for clean data). */
int apx_dataset_find_nonfinite(const ApxDataset *ds, const int64_t *idx, int64_t n, ApxDataCulprit *out);
/* "data/x.npy sample 37 element 5 is nan", "... is inf in the plan input's float16 (the file's
 * value is beyond its range)". */
void apx_dataset_culprit_text(const ApxDataset *ds, const ApxDataCulprit *c, char *buf, size_t cap);

/* Copies samples idx[0..n-1] of input i into dst (n * sample_bytes[i] bytes). */
void apx_dataset_gather(const ApxDataset *ds, int32_t i, const int64_t *idx, int64_t n, void *dst);

#ifdef __cplusplus
}
#endif
#endif
