// fileio_test.cc - the bounded-read helper every input reader uses (fileio.h): FIFOs, devices
// (a symlink to /dev/zero), folders and sockets are refused at open without blocking or
// reading; a regular file's size is known before reading; a file that shrinks while it is
// read is an error; the whole-file reader has a limit; checked writes see /dev/full; same-file
// compares inodes of existing files and canonical paths of files that do not exist yet.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

extern "C" {
#include "ir/fileio.h"
}

namespace {

std::string Tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

void Put(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// Opens path through apx_infile_open (what "plan"); the message when it fails, "" when it opens.
std::string OpenError(const std::string &path) {
  ApxInFile f;
  ApxDiag d;
  apx_diag_init(&d);
  alarm(20);  // a reader that blocks (a FIFO) ends the test instead of hanging it
  int rc = apx_infile_open(&f, path.c_str(), "plan", &d);
  alarm(0);
  if (rc == 0) {
    apx_infile_close(&f);
    return "";
  }
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT) << d.msg;
  EXPECT_EQ(f.fd, -1);
  return d.msg;
}

}  // namespace

TEST(FileIo, RegularFileOpensWithItsSize) {
  std::string p = Tmp() + "/regular.bin";
  Put(p, "0123456789");
  ApxInFile f;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_infile_open(&f, p.c_str(), "plan", &d), 0) << d.msg;
  EXPECT_EQ(f.size, 10u);
  char buf[4] = {0};
  ASSERT_EQ(apx_infile_pread(&f, buf, 3, 4, &d), 0) << d.msg;
  EXPECT_EQ(std::string(buf, 3), "456");
  // blocking mode again (O_NONBLOCK was only for the open)
  EXPECT_EQ(fcntl(f.fd, F_GETFL) & O_NONBLOCK, 0);
  apx_infile_close(&f);
  EXPECT_EQ(f.fd, -1);
}

TEST(FileIo, NonRegularFilesAreRefusedAtOnce) {
  std::string dir = Tmp() + "/nonreg";
  mkdir(dir.c_str(), 0755);
  std::string fifo = dir + "/fifo", zero = dir + "/zero", sock = dir + "/sock";
  unlink(fifo.c_str());
  unlink(zero.c_str());
  unlink(sock.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0) << strerror(errno);
  ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0) << strerror(errno);
  EXPECT_EQ(OpenError(fifo), fifo + ": cannot read plan: not a regular file (a FIFO)");
  EXPECT_EQ(OpenError(zero), zero + ": cannot read plan: not a regular file (a character device: /dev/zero)");
  EXPECT_EQ(OpenError("/dev/zero"), "/dev/zero: cannot read plan: not a regular file (a character device)");
  EXPECT_EQ(OpenError(dir), dir + ": cannot read plan: not a regular file (a folder)");
  EXPECT_EQ(OpenError(dir + "/absent"), dir + "/absent: cannot open plan: No such file or directory");
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock.c_str());
  if (sock.size() < sizeof a.sun_path && bind(s, (sockaddr *)&a, sizeof a) == 0) {
    EXPECT_EQ(OpenError(sock), sock + ": cannot read plan: not a regular file (a socket)");
  }
  close(s);
  // an empty role: "cannot read: ..."
  ApxInFile f;
  ApxDiag d;
  apx_diag_init(&d);
  EXPECT_EQ(apx_infile_open(&f, fifo.c_str(), "", &d), -1);
  EXPECT_EQ(std::string(d.msg), fifo + ": cannot read: not a regular file (a FIFO)");
}

TEST(FileIo, FileThatShrinksWhileReadIsAnError) {
  std::string p = Tmp() + "/shrink.bin";
  Put(p, std::string(1000, 'x'));
  ApxInFile f;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_infile_open(&f, p.c_str(), "checkpoint", &d), 0) << d.msg;
  ASSERT_EQ(truncate(p.c_str(), 100), 0);
  std::string buf(1000, 0);
  EXPECT_EQ(apx_infile_pread(&f, &buf[0], 1000, 0, &d), -1);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_EQ(std::string(d.msg), p + ": checkpoint ended after 100 of 1000 bytes (the file shrank while it was read)");
  apx_infile_close(&f);
}

TEST(FileIo, WholeFileReadsHaveALimit) {
  std::string p = Tmp() + "/whole.json";
  Put(p, "{\"a\": 1}");
  uint8_t *buf = nullptr;
  size_t len = 0;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_read_file_bounded(p.c_str(), "policy", 100, nullptr, &buf, &len, &d), 0) << d.msg;
  EXPECT_EQ(len, 8u);
  EXPECT_EQ(buf[8], 0);  // terminated
  EXPECT_EQ(std::string((char *)buf, len), "{\"a\": 1}");
  free(buf);
  EXPECT_EQ(apx_read_file_bounded(p.c_str(), "policy", 4, "a policy may have", &buf, &len, &d), -1);
  EXPECT_EQ(buf, nullptr);
  EXPECT_EQ(std::string(d.msg), p + ": policy of 8 bytes, more than the 4 bytes a policy may have");
}

TEST(FileIo, WritesToAFullDeviceFail) {
  int fd = open("/dev/full", O_WRONLY);
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  char buf[100] = {0};
  errno = 0;
  EXPECT_EQ(apx_write_all(fd, buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENOSPC);
  close(fd);
}

TEST(FileIo, SameFileByInodeOrCanonicalPath) {
  std::string dir = Tmp() + "/same";
  mkdir(dir.c_str(), 0755);
  mkdir((dir + "/sub").c_str(), 0755);
  std::string a = dir + "/a", link = dir + "/link", hard = dir + "/hard";
  Put(a, "x");
  unlink(link.c_str());
  unlink(hard.c_str());
  ASSERT_EQ(symlink("a", link.c_str()), 0);
  ASSERT_EQ(::link(a.c_str(), hard.c_str()), 0);
  EXPECT_TRUE(apx_same_file(a.c_str(), link.c_str()));
  EXPECT_TRUE(apx_same_file(a.c_str(), hard.c_str()));
  EXPECT_TRUE(apx_same_file(a.c_str(), (dir + "/sub/../a").c_str()));
  EXPECT_FALSE(apx_same_file(a.c_str(), (dir + "/sub").c_str()));
  // files that do not exist yet: the same canonical path, however spelled
  EXPECT_TRUE(apx_same_file((dir + "/new.log").c_str(), (dir + "/./sub/../new.log").c_str()));
  EXPECT_TRUE(apx_same_file((dir + "/no/such/x").c_str(), (dir + "/no//such/./x").c_str()));
  EXPECT_TRUE(apx_same_file((dir + "/no/such/../x").c_str(), (dir + "/no/x").c_str()));
  EXPECT_FALSE(apx_same_file((dir + "/new.log").c_str(), (dir + "/new.jsonl").c_str()));
  EXPECT_FALSE(apx_same_file(a.c_str(), (dir + "/new.log").c_str()));
  char *c = apx_canonical_path((dir + "/sub/../none/./f").c_str());
  char *real = realpath(dir.c_str(), nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(std::string(c), std::string(real) + "/none/f");
  free(c);
  free(real);
}

// CRC32C against a bit-at-a-time reference: the check value, every short length and
// alignment, and lengths around the three-stream blocks (3 x 8192 bytes), whole and in pieces.
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
  crc = ~crc;
  while (n--) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(FileIo, Crc32cMatchesTheBitwiseDefinition) {
  EXPECT_EQ(apx_crc32c(0, "123456789", 9), 0xE3069283u);
  std::string buf(3 * 3 * 8192 + 200, '\0');
  uint32_t x = 12345;
  for (auto &ch : buf) {
    x = x * 1103515245u + 12345u;
    ch = (char)(x >> 24);
  }
  const uint8_t *b = reinterpret_cast<const uint8_t *>(buf.data());
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n < 80; n++) ASSERT_EQ(apx_crc32c(7, b + off, n), crc32c_bitwise(7, b + off, n));
  const size_t block = 3 * 8192;
  for (size_t n : {block - 1, block, block + 1, 2 * block + 13, 3 * block + 99}) {
    for (size_t off = 0; off < 3; off++)
      ASSERT_EQ(apx_crc32c(0, b + off, n), crc32c_bitwise(0, b + off, n)) << n << " " << off;
    uint32_t piecewise = apx_crc32c(apx_crc32c(0, b, n / 3), b + n / 3, n - n / 3);
    ASSERT_EQ(piecewise, crc32c_bitwise(0, b, n)) << n;
  }
}
