// memplan_index_test.cc - the planner's ordered structure gives exactly the answer of the
// walk over every placed buffer in offset order (the planner's former find_offset, kept
// here as the reference), on random layouts of many shapes, for best and first fit; the
// work it does is counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

extern "C" {
#include "passes/memplan_index.h"
}

namespace {

struct Placed {
  int32_t start, end;
  int64_t offset, size;
};

// The reference: every placed buffer, sorted by offset; skip those whose interval misses
// [start, end]; the gaps below the running end; smallest (best) or lowest (first) that fits.
int64_t ReferenceFind(const std::vector<Placed> &placed, int32_t start, int32_t end, int64_t size,
                      ApxFit fit) {
  std::vector<Placed> p = placed;
  std::stable_sort(p.begin(), p.end(),
                   [](const Placed &a, const Placed &b) { return a.offset < b.offset; });
  int64_t cursor = 0, best = -1, best_gap = INT64_MAX;
  for (const Placed &o : p) {
    if (o.end < start || end < o.start) continue;
    if (o.offset > cursor) {
      int64_t gap = o.offset - cursor;
      if (gap >= size && gap < best_gap) {
        best_gap = gap;
        best = cursor;
        if (fit == APX_FIT_FIRST) break;
      }
    }
    if (o.offset + o.size > cursor) cursor = o.offset + o.size;
  }
  return best >= 0 ? best : cursor;
}

// No placed buffer whose interval meets [start, end] shares a byte with [off, off + size).
bool FreeAt(const std::vector<Placed> &placed, int32_t start, int32_t end, int64_t off, int64_t size) {
  for (const Placed &o : placed)
    if (!(o.end < start || end < o.start) && off < o.offset + o.size && o.offset < off + size) return false;
  return true;
}

struct Shape {
  const char *name;
  int32_t steps, items;
  int64_t max_units;  // sizes are 1..max_units units of 64 bytes
  int32_t max_len;    // interval lengths 1..max_len steps (0: any)
};

// Places `items` random buffers through the index (each at the offset the index picks, or at
// a random free offset now and then, so layouts with many gaps arise) and checks every answer
// against the reference.
void RunShape(const Shape &s, uint32_t seed) {
  std::mt19937 rng(seed);
  ApxPlaceIndex ix;
  ASSERT_EQ(apx_place_index_init(&ix, s.steps, s.items), 0);
  std::vector<Placed> placed;
  for (int32_t i = 0; i < s.items; i++) {
    int32_t a = (int32_t)(rng() % (uint32_t)s.steps);
    int32_t len = s.max_len ? 1 + (int32_t)(rng() % (uint32_t)s.max_len) : 1 + (int32_t)(rng() % (uint32_t)s.steps);
    int32_t b = std::min(s.steps - 1, a + len - 1);
    int64_t size = 64 * (1 + (int64_t)(rng() % (uint64_t)s.max_units));
    ApxFit fit = rng() % 2 ? APX_FIT_FIRST : APX_FIT_BEST;
    int64_t got = apx_place_index_find(&ix, a, b, size, fit);
    int64_t want = ReferenceFind(placed, a, b, size, fit);
    ASSERT_EQ(got, want) << s.name << " seed " << seed << " item " << i << " [" << a << ", " << b
                         << "] size " << size << (fit == APX_FIT_FIRST ? " first" : " best");
    int64_t off = got;
    if (rng() % 8 == 0) {  // sometimes higher up (still free): leaves gaps below
      int64_t up = off + 64 * (int64_t)(rng() % 16);
      if (ReferenceFind(placed, a, b, 1, APX_FIT_FIRST) <= up) {
        if (FreeAt(placed, a, b, up, size)) off = up;  // overlaps nothing live
      }
    }
    ASSERT_EQ(apx_place_index_add(&ix, i, a, b, off, size), 0);
    placed.push_back({a, b, off, size});
  }
  // cleared: everything fits at 0 again, and a second round agrees too
  apx_place_index_clear(&ix);
  EXPECT_EQ(apx_place_index_find(&ix, 0, s.steps - 1, 64, APX_FIT_BEST), 0);
  ASSERT_EQ(apx_place_index_add(&ix, 0, 0, s.steps - 1, 0, 128), 0);
  EXPECT_EQ(apx_place_index_find(&ix, 0, 0, 64, APX_FIT_FIRST), 128);
  apx_place_index_free(&ix);
}

TEST(MemplanIndex, SameAnswersAsTheScanOnShortIntervals) {
  for (uint32_t seed = 1; seed <= 20; seed++) RunShape({"short", 200, 400, 8, 6}, seed);
}

TEST(MemplanIndex, SameAnswersAsTheScanOnLongIntervals) {
  for (uint32_t seed = 1; seed <= 20; seed++) RunShape({"long", 100, 300, 4, 0}, seed);
}

TEST(MemplanIndex, SameAnswersAsTheScanWithMixedSizes) {
  for (uint32_t seed = 1; seed <= 10; seed++) RunShape({"mixed", 500, 800, 64, 40}, seed);
}

TEST(MemplanIndex, SameAnswersAsTheScanOnFewSteps) {
  for (uint32_t seed = 1; seed <= 20; seed++) RunShape({"few steps", 3, 60, 5, 0}, seed);
  for (uint32_t seed = 1; seed <= 5; seed++) RunShape({"one step", 1, 40, 5, 0}, seed);
}

// A training-shaped layout: nested forward activations (live until their backward use),
// short gradients in between; every query answered like the scan, each asked three times.
TEST(MemplanIndex, SameAnswersAsTheScanOnANestedTrainingShape) {
  const int32_t n = 300, steps = 2 * n + 2;
  ApxPlaceIndex ix;
  ASSERT_EQ(apx_place_index_init(&ix, steps, 2 * n), 0);
  std::vector<Placed> placed;
  std::vector<Placed> order;
  for (int32_t k = 0; k < n; k++) order.push_back({k, 2 * n - k, -1, 256});
  for (int32_t k = 0; k < n; k++) order.push_back({2 * n - k, 2 * n - k + 1, -1, 64 * (1 + k % 3)});
  int32_t id = 0;
  for (const Placed &c : order) {
    for (ApxFit fit : {APX_FIT_BEST, APX_FIT_FIRST})
      ASSERT_EQ(apx_place_index_find(&ix, c.start, c.end, c.size, fit),
                ReferenceFind(placed, c.start, c.end, c.size, fit))
          << "item " << id;
    int64_t off = apx_place_index_find(&ix, c.start, c.end, c.size, APX_FIT_BEST);
    ASSERT_EQ(apx_place_index_add(&ix, id++, c.start, c.end, off, c.size), 0);
    placed.push_back({c.start, c.end, off, c.size});
  }
  // the same queries asked again between adds were answered from the sets' recent answers
  // (checked against the scan above, so a stale one would have failed)
  EXPECT_GT(ix.memo_hits, 0);
  apx_place_index_free(&ix);
}

// The repeated-interval path: after an answer that was the top and an add exactly there, the
// same interval asks again (as the optimizer step's buffers do on training chains). Random
// repeats with sizes below and above the last one, and adds elsewhere, against the scan.
TEST(MemplanIndex, SameAnswersAsTheScanOnRepeatedIntervals) {
  for (uint32_t seed = 1; seed <= 20; seed++) {
    std::mt19937 rng(seed);
    const int32_t steps = 40, items = 400;
    ApxPlaceIndex ix;
    ASSERT_EQ(apx_place_index_init(&ix, steps, items), 0);
    std::vector<Placed> placed;
    int32_t a = 0, b = 0;
    for (int32_t i = 0; i < items; i++) {
      if (i == 0 || rng() % 3 == 0) {  // a new interval now and then, else the same again
        a = (int32_t)(rng() % (uint32_t)steps);
        b = std::min(steps - 1, a + (int32_t)(rng() % 6));
      }
      int64_t size = 64 * (1 + (int64_t)(rng() % 4));
      ApxFit fit = rng() % 2 ? APX_FIT_FIRST : APX_FIT_BEST;
      int64_t got = apx_place_index_find(&ix, a, b, size, fit);
      ASSERT_EQ(got, ReferenceFind(placed, a, b, size, fit)) << "seed " << seed << " item " << i;
      int64_t off = got;
      if (rng() % 10 == 0) {  // sometimes higher up (free there): the next query must not reuse
        int64_t up = off + 64 * (1 + (int64_t)(rng() % 4));
        if (FreeAt(placed, a, b, up, size)) off = up;
      }
      ASSERT_EQ(apx_place_index_add(&ix, i, a, b, off, size), 0);
      placed.push_back({a, b, off, size});
    }
    EXPECT_GT(ix.fast, 0) << "seed " << seed;  // the path was taken
    apx_place_index_free(&ix);
  }
}

// Where the repeated-interval path applies and where it must not: a smaller size (a gap too
// small for the last one may hold it), an add elsewhere in between, an add not at the answer.
TEST(MemplanIndex, RepeatedIntervalPathOnlyAfterTheTopWasTaken) {
  ApxPlaceIndex ix;
  ASSERT_EQ(apx_place_index_init(&ix, 10, 8), 0);
  ASSERT_EQ(apx_place_index_add(&ix, 0, 0, 9, 0, 128), 0);
  ASSERT_EQ(apx_place_index_add(&ix, 1, 4, 5, 160, 64), 0);  // leaves [128, 160) over [4, 5]
  EXPECT_EQ(apx_place_index_find(&ix, 4, 5, 64, APX_FIT_BEST), 224);  // the gap is too small
  ASSERT_EQ(apx_place_index_add(&ix, 2, 4, 5, 224, 64), 0);
  int64_t fast = ix.fast;
  EXPECT_EQ(apx_place_index_find(&ix, 4, 5, 64, APX_FIT_BEST), 288);  // on top again
  EXPECT_EQ(ix.fast, fast + 1);                                       // without the walk
  ASSERT_EQ(apx_place_index_add(&ix, 3, 4, 5, 288, 64), 0);
  EXPECT_EQ(apx_place_index_find(&ix, 4, 5, 32, APX_FIT_BEST), 128);  // smaller: the gap
  EXPECT_EQ(ix.fast, fast + 1);
  EXPECT_EQ(apx_place_index_find(&ix, 4, 5, 64, APX_FIT_FIRST), 352);
  ASSERT_EQ(apx_place_index_add(&ix, 4, 0, 1, 128, 64), 0);  // another buffer in between
  EXPECT_EQ(apx_place_index_find(&ix, 4, 5, 64, APX_FIT_FIRST), 352);
  EXPECT_EQ(ix.fast, fast + 1);  // answered by the walk
  ASSERT_EQ(apx_place_index_add(&ix, 5, 4, 5, 416, 64), 0);  // not at the answer (352)
  EXPECT_EQ(apx_place_index_find(&ix, 4, 5, 64, APX_FIT_BEST), 352);  // the gap it left
  EXPECT_EQ(ix.fast, fast + 1);
  apx_place_index_free(&ix);
}

TEST(MemplanIndex, EmptyIndexPlacesAtZero) {
  ApxPlaceIndex ix;
  ASSERT_EQ(apx_place_index_init(&ix, 10, 4), 0);
  EXPECT_EQ(apx_place_index_find(&ix, 2, 5, 640, APX_FIT_BEST), 0);
  ASSERT_EQ(apx_place_index_add(&ix, 0, 2, 5, 0, 640), 0);
  EXPECT_EQ(apx_place_index_find(&ix, 6, 9, 64, APX_FIT_BEST), 0);   // no overlap in time
  EXPECT_EQ(apx_place_index_find(&ix, 5, 9, 64, APX_FIT_BEST), 640); // overlaps at step 5
  ASSERT_EQ(apx_place_index_add(&ix, 1, 0, 9, 1280, 64), 0);         // leaves [640, 1280)
  int64_t before = ix.work;
  EXPECT_EQ(apx_place_index_find(&ix, 4, 4, 640, APX_FIT_BEST), 640);
  EXPECT_EQ(apx_place_index_find(&ix, 4, 4, 704, APX_FIT_BEST), 1344);
  EXPECT_GT(ix.work, before);  // the gaps walked are counted (the planner's budget)
  apx_place_index_clear(&ix);
  EXPECT_EQ(ix.work, 0);
  apx_place_index_free(&ix);
}

}  // namespace
