/* plan_edit.h - test and fuzz helper: a plan file's bytes decoded into its protobuf metadata
 * (plan/plan.proto) and its data section, edited as a message, and encoded back with a valid
 * header and checksum, so that only the semantic checks of the loader (plan/plan.c,
 * plan/plan_validate.c) can refuse the result. Used by the crafted-plan corpus
 * (tests/corpus/make_bad_plans.c) and the plan fuzzer's structure-aware mutator
 * (tests/fuzz/fuzz_plan.c). Independent of plan.c's reader and writer on purpose: edits reach
 * the loader even when they break what the writer would refuse. */
#ifndef APX_TESTS_PLAN_EDIT_H
#define APX_TESTS_PLAN_EDIT_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxPlanEdit {
  Apexc__Plan *meta;  /* owned (protobuf-c, malloc): edit freely, free with apx_plan_edit_free */
  uint8_t *data;      /* the data section (owned copy) */
  uint64_t data_len;
} ApxPlanEdit;

/* 0, or -1 when the bytes are not a plan by its header (magic, sizes) or the metadata does not
 * parse. The checksum is not checked: it is recomputed on encoding. */
int apx_plan_edit_decode(ApxPlanEdit *e, const uint8_t *file, size_t n);
/* The file for e: a malloc'd buffer of *n bytes (header, metadata, padding, data section,
 * checksum); NULL when out of memory. */
uint8_t *apx_plan_edit_encode(const ApxPlanEdit *e, size_t *n);
/* The file for metadata bytes meta[meta_len] (packed, or any bytes: the fuzzer mutates them)
 * and a data section, with a valid header of format version `version` and checksum. */
uint8_t *apx_plan_edit_assemble(const uint8_t *meta, size_t meta_len, const uint8_t *data,
                                uint64_t data_len, uint32_t version, size_t *n);
void apx_plan_edit_free(ApxPlanEdit *e);

/* Removes kernel k (0 <= k < n_kernels) from the plan. */
void apx_plan_edit_drop_kernel(ApxPlanEdit *e, size_t k);
/* Index of the first kernel whose op is op, -1 if none. */
int apx_plan_edit_find_kernel(const ApxPlanEdit *e, const char *op);
/* Sets buffer b's dims (and its bytes, consistently with its dtype element size es). */
void apx_plan_edit_set_dims(ApxPlanEdit *e, size_t b, const int64_t *dims, size_t rank, int64_t es);

#ifdef __cplusplus
}
#endif
#endif
