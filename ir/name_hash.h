/* name_hash.h - the hash of the name tables (the graph's values, ir/ir.c; a plan's buffers,
 * plan/plan.c): eight bytes a step, a multiply per word rather than per byte (generated
 * names are 30-90 bytes and a big graph has 600k of them), then a finalizer so that names
 * like w1, w2 ... that differ only in their last bytes spread over the low bits the tables
 * index with. */
#ifndef APX_NAME_HASH_H
#define APX_NAME_HASH_H

#include <stdint.h>
#include <string.h>

static inline uint32_t apx_name_hash(const char *s) {
  size_t n = strlen(s);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
  for (; n >= 8; n -= 8, s += 8) {
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  w = 0;
  memcpy(&w, s, n);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return (uint32_t)h;
}

#endif
