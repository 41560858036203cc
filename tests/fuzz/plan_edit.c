/* plan_edit.c - plan files as editable protobuf messages (plan_edit.h). */
#include "tests/fuzz/plan_edit.h"

#include <stdlib.h>
#include <string.h>

#include "ir/fileio.h"

#define HEADER 64u

static const uint8_t k_magic[8] = {'A', 'P', 'X', 'P', 'L', 'A', 'N', 0};

int apx_plan_edit_decode(ApxPlanEdit *e, const uint8_t *file, size_t n) {
  memset(e, 0, sizeof *e);
  if (n < HEADER || memcmp(file, k_magic, 8) != 0) return -1;
  uint64_t meta_off = apx_le_get_u64(file + 16), meta_len = apx_le_get_u64(file + 24);
  uint64_t data_off = apx_le_get_u64(file + 32), data_len = apx_le_get_u64(file + 40);
  if (meta_off != HEADER || meta_len > n - HEADER || data_off > n || data_len > n - data_off ||
      data_off < HEADER + meta_len)
    return -1;
  e->meta = apexc__plan__unpack(NULL, (size_t)meta_len, file + HEADER);
  if (!e->meta) return -1;
  e->data = malloc((size_t)data_len + 1);
  if (!e->data) {
    apx_plan_edit_free(e);
    return -1;
  }
  memcpy(e->data, file + data_off, (size_t)data_len);
  e->data_len = data_len;
  return 0;
}

uint8_t *apx_plan_edit_assemble(const uint8_t *meta, size_t meta_len, const uint8_t *data,
                                uint64_t data_len, uint32_t version, size_t *n) {
  size_t data_off = (HEADER + meta_len + 63) / 64 * 64;
  size_t total = data_off + (size_t)data_len;
  uint8_t *f = calloc(total ? total : 1, 1);
  if (!f) return NULL;
  memcpy(f, k_magic, 8);
  apx_le_put_u32(f + 8, version);
  apx_le_put_u64(f + 16, HEADER);
  apx_le_put_u64(f + 24, meta_len);
  apx_le_put_u64(f + 32, data_off);
  apx_le_put_u64(f + 40, data_len);
  if (meta_len) memcpy(f + HEADER, meta, meta_len);
  if (data_len) memcpy(f + data_off, data, (size_t)data_len);
  apx_le_put_u32(f + 48, apx_crc32c(0, f, total)); /* taken over the file with the field 0 */
  *n = total;
  return f;
}

uint8_t *apx_plan_edit_encode(const ApxPlanEdit *e, size_t *n) {
  size_t meta_len = apexc__plan__get_packed_size(e->meta);
  uint8_t *meta = malloc(meta_len + 1);
  if (!meta) return NULL;
  apexc__plan__pack(e->meta, meta);
  uint8_t *f = apx_plan_edit_assemble(meta, meta_len, e->data, e->data_len,
                                      e->meta->format_version, n);
  free(meta);
  return f;
}

void apx_plan_edit_free(ApxPlanEdit *e) {
  if (e->meta) apexc__plan__free_unpacked(e->meta, NULL);
  free(e->data);
  memset(e, 0, sizeof *e);
}

void apx_plan_edit_drop_kernel(ApxPlanEdit *e, size_t k) {
  Apexc__Plan *m = e->meta;
  if (k >= m->n_kernels) return;
  apexc__kernel__free_unpacked(m->kernels[k], NULL);
  memmove(&m->kernels[k], &m->kernels[k + 1], (m->n_kernels - k - 1) * sizeof *m->kernels);
  m->n_kernels--;
  for (size_t i = 0; i < m->n_buckets; i++) /* keep ready_at pointing at the same kernel */
    if (m->buckets[i]->ready_at > (int32_t)k) m->buckets[i]->ready_at--;
}

int apx_plan_edit_find_kernel(const ApxPlanEdit *e, const char *op) {
  for (size_t k = 0; k < e->meta->n_kernels; k++)
    if (strcmp(e->meta->kernels[k]->op, op) == 0) return (int)k;
  return -1;
}

void apx_plan_edit_set_dims(ApxPlanEdit *e, size_t b, const int64_t *dims, size_t rank, int64_t es) {
  Apexc__Buffer *buf = e->meta->buffers[b];
  int64_t *d = realloc(buf->dims, (rank ? rank : 1) * sizeof *d);
  if (!d) return;
  uint64_t numel = 1; /* wraps for absurd dims: the loader must refuse those */
  for (size_t i = 0; i < rank; i++) d[i] = dims[i], numel *= (uint64_t)dims[i];
  buf->dims = d;
  buf->n_dims = rank;
  buf->bytes = (int64_t)(numel * (uint64_t)es);
}
