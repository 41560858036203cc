/* fileio.h - file helpers shared by the plan file (plan.c), checkpoints (checkpoint.c) and
 * the compiler's plan emission: little-endian header fields, CRC32C, making a rename
 * durable (fsync of the folder), and the check that a destination is a regular file. */
#ifndef APX_RUNTIME_FILEIO_H
#define APX_RUNTIME_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Little-endian fields of on-disk headers, whatever the host's byte order. */
static inline void apx_le_put_u32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void apx_le_put_u64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t apx_le_get_u32(const uint8_t *b) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
  return v;
}
static inline uint64_t apx_le_get_u64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* CRC32C (Castagnoli, reflected, as iSCSI/ext4): crc = apx_crc32c(0, buf, n) for a whole
 * buffer, chain by passing the previous result. SSE4.2 instruction when available. */
uint32_t apx_crc32c(uint32_t crc, const void *buf, size_t n);

/* fsync of the folder holding `path` ("." without a slash), so that a rename into `path`
 * survives a crash. Best effort: failures are ignored. */
void apx_fsync_dir_of(const char *path);

/* 1 when `path` exists (following symlinks) and is not a regular file: a device such as
 * /dev/null, a FIFO, a socket or a folder. Writers that rename a temporary file into place
 * refuse such a destination rather than replace it. 0 when it is a regular file or absent. */
int apx_exists_not_regular(const char *path);

#ifdef __cplusplus
}
#endif
#endif
