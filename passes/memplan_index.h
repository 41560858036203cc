/* memplan_index.h - the memory planner's ordered structure: where a buffer fits in the arena
 * among the buffers already placed, without a scan over all of them.
 *
 * A placed buffer is a rectangle: a closed interval of schedule steps [start, end] times a
 * byte range [offset, offset + size). apx_place_index_find answers what passes/memplan.c
 * used to compute by walking every placed buffer in offset order: among the placed buffers
 * whose step interval meets [start, end], the free byte ranges ("gaps") below the highest
 * of them, and
 *   - best fit: the lowest offset of the smallest gap that holds size bytes,
 *   - first fit: the lowest gap that holds size bytes,
 *   - the top (the highest end of them, 0 when none) when no gap holds it.
 * The answer is exactly the scan's (memplan_index_test compares both on random layouts), so
 * memory plans do not change.
 *
 * How: the steps form a balanced binary tree in which each node is one step (its "center")
 * and owns the steps of its subtree; a buffer belongs to the highest node whose center lies
 * in its interval (a centered interval tree). Each node keeps
 *   - own: its buffers, which all contain the center and so never share bytes, in a treap
 *     ordered by offset with subtree aggregates (first offset, last end, byte sum, min/max
 *     start and end);
 *   - sub: the union of the byte ranges of every buffer in its subtree, as a treap of
 *     merged runs.
 * A query interval meets O(log steps) subtrees that it contains (their sub sets count
 * whole) and O(log steps) nodes that it cuts (their own buffers count when they reach into
 * the interval: a one-sided test on start or end). The gaps of the union of those sets are
 * walked from offset 0: the next offset with `size` free bytes in every set (each set jumps
 * to its own next fit, O(log n) per set through subtree gap maxima, round robin until all
 * agree), then the end of that gap (the minimum of the sets' next occupied offsets). A query
 * costs O((fitting gaps + 1) log steps log n) instead of O(buffers placed): first fit stops at
 * the first fitting gap, best fit walks every gap that fits (it stops early at an exact fit).
 * Packings with many holes larger than the buffers placed into them (greedy by breadth on
 * long training chains) make best fit walk many gaps; `work` counts them so the planner can
 * bound a placement order's cost (passes/memplan.c).
 *
 * Fast paths (the same answers, fewer treap walks; on training chains a third of the
 * buffers repeat the interval of the one before, e.g. the optimizer step's):
 *   - the same interval again: after an answer that was the top (no gap fitted `size`) and
 *     an add exactly there, a query over the same interval for at least `size` bytes meets
 *     the same gaps plus none: its answer is the new top.
 *   - per set, O(1) answers from the treap root when the cursor is above the set's last
 *     byte or the set is one gapless block.
 *   - per set, its recent answers: consecutive queries walk their sets' gaps from the same
 *     cursors (on the 100k chain 64% of the walks repeat one made since the set last
 *     changed); a small table keyed by (set, cursor, size) and checked against the set's
 *     version answers them again, `work` included, so budgets count the same.
 *
 * Not thread-safe; one index per planning run. init/free pair; clear empties it for the
 * next placement order. */
#ifndef APX_MEMPLAN_INDEX_H
#define APX_MEMPLAN_INDEX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxFit { APX_FIT_BEST, APX_FIT_FIRST } ApxFit;

typedef struct ApxPlaceOwn ApxPlaceOwn; /* treap node of one placed buffer (memplan_index.c) */
typedef struct ApxPlaceRun ApxPlaceRun; /* treap node of one merged run of a sub set */
typedef struct ApxPlaceMemo ApxPlaceMemo; /* one remembered answer of a set (memplan_index.c) */
typedef struct ApxPlaceSet {
  int32_t node;     /* step tree node */
  int8_t sub;       /* 1: the node's sub set; 0: its own buffers */
  int8_t side;      /* own buffers: 0 all count, 1 those with end >= bound, 2 start <= bound */
  int32_t bound;
} ApxPlaceSet;

typedef struct ApxPlaceIndex {
  int32_t n_steps, n_items, root; /* root: center step of the tree, -1 when no steps */
  int32_t *lo, *hi, *left, *right, *parent; /* [n_steps] subtree step range, children, parent */
  int32_t *own, *sub;                       /* [n_steps] treap roots, -1 empty */
  ApxPlaceOwn *items;                       /* [n_items] one node per buffer id */
  ApxPlaceRun *runs;                        /* run pool */
  int32_t n_runs, cap_runs, free_run;       /* free_run: free list through .l, -1 */
  ApxPlaceSet *sets;                        /* the current query's sets */
  int64_t *free_lo, *free_hi;               /* [cap_sets] per set: a range known free */
  int32_t n_sets, cap_sets;
  int32_t *stack;                           /* query / tree building work stack */
  int64_t work;                             /* gaps walked and gap steps since the last clear */
  /* the last answer when it was the top of the union (no gap fitted), for the next add */
  int32_t top_start, top_end;               /* its interval, -1: none */
  int64_t top_at, top_size;                 /* the top and the size asked */
  int8_t top_placed;                        /* 1: the add after it placed exactly there */
  int64_t fast;                             /* queries answered that way (statistics) */
  uint32_t *own_ver, *sub_ver;              /* [n_steps] bumped when that set changes */
  ApxPlaceMemo *memo;                       /* recent set answers, by (set, cursor, size) */
  int64_t memo_hits;                        /* statistics */
} ApxPlaceIndex;

/* An index for buffer ids [0, n_items) over steps [0, n_steps). Returns 0, -1 when out of
 * memory (the index is then safe to free). */
int apx_place_index_init(ApxPlaceIndex *x, int32_t n_steps, int32_t n_items);
void apx_place_index_free(ApxPlaceIndex *x);
/* Removes every placed buffer. */
void apx_place_index_clear(ApxPlaceIndex *x);
/* The offset for a buffer of size > 0 bytes live over [start, end] (see the file comment).
 * Requires 0 <= start <= end < n_steps. Returns -1 when out of memory. */
int64_t apx_place_index_find(ApxPlaceIndex *x, int32_t start, int32_t end, int64_t size, ApxFit fit);
/* Places buffer `item` (not placed yet) at [offset, offset + size), size > 0, over
 * [start, end]. It must not share bytes with a placed buffer whose interval meets its own.
 * Returns 0, -1 when out of memory. */
int apx_place_index_add(ApxPlaceIndex *x, int32_t item, int32_t start, int32_t end,
                        int64_t offset, int64_t size);

#ifdef __cplusplus
}
#endif
#endif
