/* fileio.c - file helpers shared by plan and checkpoint files (fileio.h). */
#include "ir/fileio.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC32C --------------------------------------------------------------------------- */

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
  while (n--) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                             size_t n) {
  uint64_t c = crc;
  while (n && ((uintptr_t)p & 7)) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
  return (uint32_t)c;
}
#endif

uint32_t apx_crc32c(uint32_t crc, const void *buf, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc32c_hw(crc, buf, n);
#endif
  return ~crc32c_sw(crc, buf, n);
}

/* ---- durable renames ----------------------------------------------------------------- */

void apx_fsync_dir_of(const char *path) {
  char *dir = strdup(path);
  char *slash = dir ? strrchr(dir, '/') : NULL;
  const char *dn = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
  int dfd = open(dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  free(dir);
}

int apx_exists_not_regular(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}
