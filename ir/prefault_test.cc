// The prefault helper: pages hinted or added to the heap become resident without a byte
// changing; without a start nothing happens.
#include "ir/prefault.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Resident pages of [p, p + bytes), at most 1024 pages; allocates nothing (the heap test moves
// the program break itself).
size_t ResidentPages(void *p, size_t bytes) {
  static unsigned char v[1024];
  size_t pages = (bytes + PageSize() - 1) / PageSize();
  if (pages > sizeof v || mincore(p, bytes, v) != 0) return 0;
  size_t n = 0;
  for (size_t i = 0; i < pages; i++) n += v[i] & 1;
  return n;
}

// Waits (at most 5 s) until pred holds.
template <class F>
bool Eventually(F pred) {
  for (int i = 0; i < 500; i++) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(Prefault, NothingWithoutAStart) {
  const size_t bytes = 64 * PageSize();
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  apx_prefault_hint(p, bytes);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ResidentPages(p, bytes), 0u);
  EXPECT_EQ(apx_prefault_stop(), 0u);
  munmap(p, bytes);
}

TEST(Prefault, HintedPagesBecomeResidentAndKeepTheirBytes) {
  const size_t pages = 256, bytes = pages * PageSize();
  char *p = static_cast<char *>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  // the first 4 pages written before the hint: their bytes must survive the populate
  for (size_t i = 0; i < 4 * PageSize(); i++) p[i] = static_cast<char>(i * 7 + 1);
  ASSERT_EQ(ResidentPages(p, bytes), 4u);
  if (apx_prefault_start() != 0) GTEST_SKIP() << "no MADV_POPULATE_WRITE here";
  apx_prefault_hint(p, bytes);
  EXPECT_TRUE(Eventually([&] { return ResidentPages(p, bytes) == pages; }));
  size_t populated = apx_prefault_stop();
  EXPECT_GE(populated, bytes - 4 * PageSize());
  for (size_t i = 0; i < 4 * PageSize(); i++) ASSERT_EQ(p[i], static_cast<char>(i * 7 + 1)) << i;
  for (size_t i = 4 * PageSize(); i < bytes; i++) ASSERT_EQ(p[i], 0) << i;
  // stopped: a new hint does nothing
  char *q = static_cast<char *>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(q, MAP_FAILED);
  apx_prefault_hint(q, bytes);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ResidentPages(q, bytes), 0u);
  munmap(p, bytes);
  munmap(q, bytes);
}

TEST(Prefault, UnmappedHintIsHarmless) {
  const size_t bytes = 16 * PageSize();
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  munmap(p, bytes);
  if (apx_prefault_start() != 0) GTEST_SKIP() << "no MADV_POPULATE_WRITE here";
  apx_prefault_hint(p, bytes);  // gone before the helper gets to it
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  apx_prefault_stop();
  SUCCEED();
}

TEST(Prefault, HeapGrowthIsPopulated) {
  if (apx_prefault_start() != 0) GTEST_SKIP() << "no MADV_POPULATE_WRITE here";
  size_t before = apx_prefault_stop();
  ASSERT_EQ(apx_prefault_start(), 0);
  // a brk move of its own (below glibc's mmap threshold would be needed for malloc to move
  // the break; sbrk moves it directly and is given back after)
  const size_t bytes = 512 * PageSize();
  char *lo = static_cast<char *>(sbrk(static_cast<intptr_t>(bytes)));
  ASSERT_NE(lo, reinterpret_cast<char *>(-1));
  EXPECT_TRUE(Eventually([&] { return ResidentPages(lo, bytes) == 512u; }));
  size_t after = apx_prefault_stop();
  EXPECT_GE(after - before, bytes);
  for (size_t i = 0; i < bytes; i += PageSize()) ASSERT_EQ(lo[i], 0);
  sbrk(-static_cast<intptr_t>(bytes));
}

}  // namespace
