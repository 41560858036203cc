/* arena.c - chunked bump allocator. Large requests get a block of their own. */
#include "ir/arena.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK_BYTES (256u * 1024u)
#define ARENA_ALIGN 16u

struct ApxArenaBlock {
  ApxArenaBlock *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

void apx_arena_init(ApxArena *a) {
  a->head = NULL;
  a->bytes = 0;
}

void apx_arena_free(ApxArena *a) {
  ApxArenaBlock *b = a->head;
  while (b) {
    ApxArenaBlock *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
  a->bytes = 0;
}

/* zero: the bytes must read zero. A dedicated block is then calloc'd, which for a large block
 * takes fresh pages from the system, already zero, instead of clearing them (the plan's
 * buffer table of a 100k-node model is 80 MB). */
static void *arena_alloc(ApxArena *a, size_t n, int zero) {
  size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if (need < n) return NULL; /* overflow */
  ApxArenaBlock *b = a->head;
  if (b && b->cap - b->used >= need) {
    void *p = b->data + b->used;
    b->used += need;
    if (zero) memset(p, 0, n);
    return p;
  }
  if (need > ARENA_BLOCK_BYTES / 4) {
    /* dedicated block, linked behind the current one so the bump block stays in front */
    if (need > SIZE_MAX - sizeof(ApxArenaBlock)) return NULL;
    ApxArenaBlock *big = zero ? calloc(1, sizeof(ApxArenaBlock) + need) : malloc(sizeof(ApxArenaBlock) + need);
    if (!big) return NULL;
    big->used = big->cap = need;
    a->bytes += sizeof(ApxArenaBlock) + need;
    if (b) {
      big->next = b->next;
      b->next = big;
    } else {
      big->next = NULL;
      a->head = big;
    }
    return big->data;
  }
  ApxArenaBlock *nb = malloc(sizeof(ApxArenaBlock) + ARENA_BLOCK_BYTES);
  if (!nb) return NULL;
  nb->cap = ARENA_BLOCK_BYTES;
  nb->used = need;
  nb->next = a->head;
  a->head = nb;
  a->bytes += sizeof(ApxArenaBlock) + ARENA_BLOCK_BYTES;
  if (zero) memset(nb->data, 0, n);
  return nb->data;
}

void *apx_arena_alloc_raw(ApxArena *a, size_t n) { return arena_alloc(a, n, 0); }

void *apx_arena_alloc(ApxArena *a, size_t n) { return arena_alloc(a, n, 1); }

char *apx_arena_strndup(ApxArena *a, const char *s, size_t n) {
  char *p = apx_arena_alloc_raw(a, n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *apx_arena_strdup(ApxArena *a, const char *s) {
  return s ? apx_arena_strndup(a, s, strlen(s)) : NULL;
}

static ApxArenaBlock *block_of(void *p) {
  return (ApxArenaBlock *)(void *)((unsigned char *)p - offsetof(ApxArenaBlock, data));
}

void *apx_arena_block_alloc(size_t n) {
  if (n > SIZE_MAX - sizeof(ApxArenaBlock)) return NULL;
  ApxArenaBlock *b = malloc(sizeof(ApxArenaBlock) + n);
  if (!b) return NULL;
  b->used = b->cap = n;
  b->next = NULL;
  return b->data;
}

void apx_arena_block_free(void *p) {
  if (p) free(block_of(p));
}

void apx_arena_adopt(ApxArena *a, void *p) {
  ApxArenaBlock *big = block_of(p), *b = a->head;
  a->bytes += sizeof(ApxArenaBlock) + big->cap;
  if (b) { /* behind the current block, like a large request, so the bump block stays in front */
    big->next = b->next;
    b->next = big;
  } else {
    big->next = NULL;
    a->head = big;
  }
}

void *apx_arena_memdup(ApxArena *a, const void *src, size_t n) {
  void *p = apx_arena_alloc_raw(a, n);
  if (p && n) memcpy(p, src, n);
  return p;
}

/* Formats fmt made only of text, %s, %d and %% into buf[cap] by hand (vsnprintf was a
 * visible share of a 100k-node compile: passes name every value and node they add).
 * Returns the length, or -1 when fmt has another conversion or the text does not fit; ap
 * is consumed either way. */
static int format_simple(char *buf, size_t cap, const char *fmt, va_list ap) {
  size_t k = 0;
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') {
      if (k + 1 >= cap) return -1;
      buf[k++] = *f;
      continue;
    }
    f++;
    if (*f == 's') {
      const char *s = va_arg(ap, const char *);
      if (!s) s = "(null)"; /* as glibc prints it */
      size_t l = strlen(s);
      if (k + l >= cap) return -1;
      memcpy(buf + k, s, l);
      k += l;
    } else if (*f == 'd') {
      int v = va_arg(ap, int);
      unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
      char digits[12];
      int nd = 0;
      do {
        digits[nd++] = (char)('0' + u % 10);
        u /= 10;
      } while (u);
      if (k + (size_t)nd + 2 >= cap) return -1;
      if (v < 0) buf[k++] = '-';
      while (nd) buf[k++] = digits[--nd];
    } else if (*f == '%') {
      if (k + 1 >= cap) return -1;
      buf[k++] = '%';
    } else {
      return -1; /* flags, widths, other conversions, a trailing '%': vsnprintf */
    }
  }
  buf[k] = '\0';
  return (int)k;
}

char *apx_arena_printf(ApxArena *a, const char *fmt, ...) {
  char small[256]; /* most names fit: one formatting pass instead of measuring first */
  va_list ap;
  va_start(ap, fmt);
  int n = format_simple(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n >= 0) return apx_arena_strndup(a, small, (size_t)n);
  va_start(ap, fmt);
  n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  if ((size_t)n < sizeof small) return apx_arena_strndup(a, small, (size_t)n);
  char *p = apx_arena_alloc_raw(a, (size_t)n + 1);
  if (!p) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}
