/* arena.h - bump allocator for compile-time objects (QBE pools): everything allocated from
 * an arena is freed at once by apx_arena_free. Not thread-safe. */
#ifndef APX_ARENA_H
#define APX_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxArenaBlock ApxArenaBlock;

typedef struct ApxArena {
  ApxArenaBlock *head;
  size_t bytes; /* total bytes obtained from malloc */
} ApxArena;

void apx_arena_init(ApxArena *a);
void apx_arena_free(ApxArena *a);
/* Zeroed, 16-byte aligned; NULL only when malloc fails. n = 0 gives a valid pointer. */
void *apx_arena_alloc(ApxArena *a, size_t n);
/* As apx_arena_alloc without zeroing (large tensor payloads). */
void *apx_arena_alloc_raw(ApxArena *a, size_t n);
char *apx_arena_strdup(ApxArena *a, const char *s);
char *apx_arena_strndup(ApxArena *a, const char *s, size_t n);
void *apx_arena_memdup(ApxArena *a, const void *p, size_t n);
/* A block of n bytes (16-byte aligned) owned by no arena yet: freed with
 * apx_arena_block_free, or handed to an arena with apx_arena_adopt, which then frees it with
 * the rest (the ONNX loader keeps initializer bytes protobuf-c unpacked this way, uncopied). */
void *apx_arena_block_alloc(size_t n);
void apx_arena_block_free(void *p);
void apx_arena_adopt(ApxArena *a, void *p);
/* printf into the arena */
char *apx_arena_printf(ApxArena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
