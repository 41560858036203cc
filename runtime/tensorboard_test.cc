// tensorboard_test.cc - the event file apx_tb_* writes: records framed with lengths and
// masked CRC32Cs that check, a file_version event first, then Summary events with the
// scalars in order. (TensorBoard's own reader reads it in //runtime:tensorboard_read_test.)
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
#include "ir/fileio.h"
#include "runtime/tensorboard.h"
#include "runtime/tensorboard.pb-c.h"
}

namespace {

std::string tmpdir(const char *name) {
  const char *t = getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

uint32_t masked(const uint8_t *p, size_t n) {
  uint32_t c = apx_crc32c(0, p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

// The records of an events file, each checked against its CRCs.
std::vector<std::vector<uint8_t>> records(const std::string &path) {
  std::vector<std::vector<uint8_t>> out;
  FILE *f = fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (!f) return out;
  uint8_t head[12];
  while (fread(head, 1, 12, f) == 12) {
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)head[i] << (8 * i);
    EXPECT_EQ(le32(head + 8), masked(head, 8)) << "length CRC";
    std::vector<uint8_t> data(len);
    uint8_t crc[4];
    EXPECT_EQ(fread(data.data(), 1, len, f), len);
    EXPECT_EQ(fread(crc, 1, 4, f), 4u);
    EXPECT_EQ(le32(crc), masked(data.data(), len)) << "data CRC";
    out.push_back(data);
  }
  fclose(f);
  return out;
}

TEST(TensorBoard, WritesFileVersionThenScalarSummaries) {
  std::string dir = tmpdir("tb_events");
  ApxDiag d;
  apx_diag_init(&d);
  ApxTbWriter *w = nullptr;
  ASSERT_EQ(apx_tb_init(&w, dir.c_str(), &d), 0) << d.msg;
  std::string path = apx_tb_path(w);
  EXPECT_NE(path.find(dir + "/events.out.tfevents."), std::string::npos) << path;
  for (int step = 1; step <= 3; step++) {
    ApxTbScalar s[2] = {{"loss", 1.0 / step}, {"loss_scale", 65536.0}};
    ASSERT_EQ(apx_tb_write_scalars(w, step, s, 2, &d), 0) << d.msg;
  }
  ApxTbScalar nan_loss = {"loss", NAN};  // a non-finite loss is still a point
  ASSERT_EQ(apx_tb_write_scalars(w, 4, &nan_loss, 1, &d), 0) << d.msg;
  apx_tb_close(w);

  auto recs = records(path);
  ASSERT_EQ(recs.size(), 5u);
  Apexc__Tb__Event *e = apexc__tb__event__unpack(nullptr, recs[0].size(), recs[0].data());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->what_case, APEXC__TB__EVENT__WHAT_FILE_VERSION);
  EXPECT_STREQ(e->file_version, "brain.Event:2");
  EXPECT_GT(e->wall_time, 1.5e9);
  apexc__tb__event__free_unpacked(e, nullptr);
  for (int step = 1; step <= 4; step++) {
    e = apexc__tb__event__unpack(nullptr, recs[step].size(), recs[step].data());
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->step, step);
    ASSERT_EQ(e->what_case, APEXC__TB__EVENT__WHAT_SUMMARY);
    ASSERT_EQ(e->summary->n_value, step < 4 ? 2u : 1u);
    EXPECT_STREQ(e->summary->value[0]->tag, "loss");
    if (step < 4) {
      EXPECT_FLOAT_EQ(e->summary->value[0]->simple_value, 1.0f / step);
      EXPECT_STREQ(e->summary->value[1]->tag, "loss_scale");
      EXPECT_EQ(e->summary->value[1]->simple_value, 65536.0f);
    } else {
      EXPECT_TRUE(std::isnan(e->summary->value[0]->simple_value));
    }
    apexc__tb__event__free_unpacked(e, nullptr);
  }
}

TEST(TensorBoard, FrameIsLengthCrcDataCrc) {
  const uint8_t data[3] = {1, 2, 3};
  uint8_t out[19];
  apx_tb_frame(data, 3, out);
  EXPECT_EQ(out[0], 3);
  for (int i = 1; i < 8; i++) EXPECT_EQ(out[i], 0);
  EXPECT_EQ(le32(out + 8), masked(out, 8));
  EXPECT_EQ(out[12], 1);
  EXPECT_EQ(out[14], 3);
  EXPECT_EQ(le32(out + 15), masked(data, 3));
}

TEST(TensorBoard, UnwritableFolderIsABadInput) {
  std::string file = tmpdir("tb_not_a_folder");
  FILE *f = fopen(file.c_str(), "w");
  fclose(f);
  ApxDiag d;
  apx_diag_init(&d);
  ApxTbWriter *w = nullptr;
  EXPECT_EQ(apx_tb_init(&w, file.c_str(), &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(d.msg).find("not a folder (--tensorboard)"), std::string::npos) << d.msg;
  EXPECT_EQ(w, nullptr);
}

}  // namespace
