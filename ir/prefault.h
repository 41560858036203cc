/* prefault.h - taking the compile's page faults on a helper thread.
 *
 * A 100k-node training compile touches ~466 MiB of new memory; the first touch of each page
 * is a fault (the kernel zeroes and charges it), ~15% of the compile on the main thread. The
 * helper maps those pages in ahead of use with madvise(MADV_POPULATE_WRITE), which never
 * changes a byte, on the core the compile leaves idle: the heap as the program break moves
 * (the driver makes it move in large steps, M_TOP_PAD) and the ranges callers hint (the
 * graph's value and node arrays as they double). Only apexc starts it; without a start every
 * call here does nothing, and so does it on a system without MADV_POPULATE_WRITE. */
#ifndef APX_IR_PREFAULT_H
#define APX_IR_PREFAULT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the helper thread; -1 when it cannot (unsupported system, no thread). */
int apx_prefault_start(void);
/* Asks the helper to map in [addr, addr + bytes): memory about to be written. */
void apx_prefault_hint(void *addr, size_t bytes);
/* Stops and joins the helper; returns the bytes it populated. */
size_t apx_prefault_stop(void);

#ifdef __cplusplus
}
#endif

#endif
