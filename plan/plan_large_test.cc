// plan_large_test.cc - a plan whose data section is over 4 GiB round-trips: 64-bit offsets
// in the header, the metadata and the reader. Source tensors are untouched anonymous
// mappings (zero pages, no RAM) with marker bytes; the writer turns zero blocks into holes,
// so the file is sparse on disk.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
#include "plan/plan.h"
}

namespace {

const int64_t kBig = (int64_t)9 << 28;  // 2.25 GiB each

uint8_t marker(int buf, int64_t pos) { return (uint8_t)(17 + 31 * buf + (pos >> 20)); }

const int64_t kMarks[] = {0, 4095, 4096, 65535, 65536, ((int64_t)1 << 31) - 1, (int64_t)1 << 31,
                          ((int64_t)1 << 31) + 12345, kBig - 1};

}  // namespace

TEST(PlanLarge, DataSectionOver4GiBRoundTrips) {
  const char *td = getenv("TEST_TMPDIR");
  std::string path = std::string(td ? td : "/tmp") + "/large.apx";
  uint8_t *src[2];
  for (int i = 0; i < 2; i++) {
    src[i] = (uint8_t *)mmap(nullptr, (size_t)kBig, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(src[i], MAP_FAILED);
    for (int64_t m : kMarks) src[i][m] = marker(i, m);
  }
  float tail[5] = {1.5f, -2.25f, 3e38f, 0.f, 7.f};

  ApxPlan p;
  apx_plan_init(&p);
  ApxPlanBuffer *b = apx_plan_alloc_buffers(&p, 3);
  const char *names[3] = {"big0", "big1", "tail"};
  for (int i = 0; i < 3; i++) {
    b[i].name = names[i];
    b[i].kind = APX_VAL_CONST;
    b[i].dtype = i < 2 ? APX_DT_U8 : APX_DT_F32;
    b[i].rank = 1;
    b[i].dims[0] = i < 2 ? kBig : 5;
    b[i].bytes = i < 2 ? kBig : 20;
    b[i].region = APX_MEM_PERSISTENT;
    b[i].offset = i * kBig;
    b[i].data = i < 2 ? (const void *)src[i] : (const void *)tail;
  }
  p.mem.persistent_bytes = 2 * kBig + 64;
  apx_plan_layout_data(&p);
  ASSERT_GT(b[2].data_offset, (uint64_t)1 << 32);

  ApxDiag d;
  apx_diag_init(&d);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(apx_plan_write(&p, path.c_str(), &d), 0) << d.msg;
  auto t1 = std::chrono::steady_clock::now();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_GT((uint64_t)st.st_size, (uint64_t)2 * kBig);
  printf("plan file %lld bytes, %lld bytes on disk, written in %.1f s\n", (long long)st.st_size,
         (long long)st.st_blocks * 512,
         std::chrono::duration<double>(t1 - t0).count());

  ApxPlan r;
  apx_plan_init(&r);
  ASSERT_EQ(apx_plan_read(&r, path.c_str(), &d), 0) << d.msg;
  auto t2 = std::chrono::steady_clock::now();
  printf("read and verified in %.1f s\n", std::chrono::duration<double>(t2 - t1).count());
  ASSERT_EQ(r.n_bufs, 3);
  for (int i = 0; i < 2; i++) {
    const uint8_t *got = (const uint8_t *)r.bufs[i].data;
    EXPECT_EQ(r.bufs[i].data_offset, b[i].data_offset);
    EXPECT_EQ(r.bufs[i].data_len, (uint64_t)kBig);
    for (int64_t m : kMarks) EXPECT_EQ(got[m], marker(i, m)) << "buffer " << i << " at " << m;
    for (int64_t m : {(int64_t)1, (int64_t)1 << 30, kBig - 2}) EXPECT_EQ(got[m], 0);
  }
  EXPECT_EQ(r.bufs[2].data_offset, b[2].data_offset);
  EXPECT_EQ(0, memcmp(r.bufs[2].data, tail, sizeof tail));

  // a single flipped byte past 4 GiB is caught by the checksum
  apx_plan_free(&r);
  FILE *f = fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  uint64_t at = 0;
  {
    // data section starts at the header's data_offset
    uint8_t hdr[64];
    ASSERT_EQ(fread(hdr, 1, 64, f), 64u);
    uint64_t data_off;
    memcpy(&data_off, hdr + 32, 8);
    at = data_off + b[2].data_offset + 4;
  }
  ASSERT_EQ(fseeko(f, (off_t)at, SEEK_SET), 0);
  int c = fgetc(f);
  ASSERT_EQ(fseeko(f, (off_t)at, SEEK_SET), 0);
  fputc(c ^ 0x10, f);
  fclose(f);
  apx_plan_init(&r);
  EXPECT_EQ(apx_plan_read(&r, path.c_str(), &d), -1);
  EXPECT_NE(std::string(d.msg).find("checksum"), std::string::npos) << d.msg;
  apx_plan_free(&r);

  unlink(path.c_str());
  apx_plan_free(&p);
  for (int i = 0; i < 2; i++) munmap(src[i], (size_t)kBig);
}
