// policy_file_test.cc - --policy file reading: errors name the path and the OS reason, and a
// readable policy loads.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "compiler/policy_file.h"
}

namespace {

std::string temp_dir() {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/policy_test_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return "";
  return std::string(buf.data());
}

struct Loaded {
  ApxPolicy p;
  ApxDiag d;
  int rc;
  explicit Loaded(const std::string &path) {
    apx_policy_init(&p);
    apx_diag_init(&d);
    rc = apx_policy_load_file(&p, path.c_str(), &d);
  }
  ~Loaded() { apx_policy_free(&p); }
};

}  // namespace

TEST(Policy, FileErrorsNamePathAndReason) {
  std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty());
  {
    Loaded L(dir + "/missing.json");
    EXPECT_EQ(L.rc, -1);
    EXPECT_EQ(L.d.code, APX_EXIT_BAD_INPUT);
    EXPECT_EQ(std::string(L.d.msg), dir + "/missing.json: cannot open policy: No such file or directory");
  }
  {
    // a folder, a FIFO (would block forever) and a symlink to /dev/zero (never ends) are
    // refused at open, before a byte is read (the alarm turns a hang into a failure)
    std::string fifo = dir + "/fifo.json", zero = dir + "/zero.json";
    unlink(fifo.c_str());
    unlink(zero.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0);
    const std::pair<std::string, std::string> cases[] = {
        {dir, dir + ": cannot read policy: not a regular file (a folder)"},
        {fifo, fifo + ": cannot read policy: not a regular file (a FIFO)"},
        {zero, zero + ": cannot read policy: not a regular file (a character device: /dev/zero)"},
    };
    for (const auto &c : cases) {
      alarm(20);
      Loaded L(c.first);
      alarm(0);
      EXPECT_EQ(L.rc, -1);
      EXPECT_EQ(L.d.code, APX_EXIT_BAD_INPUT);
      EXPECT_EQ(std::string(L.d.msg), c.second);
    }
  }
  {
    std::string path = dir + "/p.json";
    FILE *f = fopen(path.c_str(), "w");
    ASSERT_TRUE(f);
    fputs("{\"schema\": \"apexc-explain/1\", \"ops\": [{\"op\": \"Gelu\", \"decision\": \"fp32\"}]}", f);
    fclose(f);
    Loaded L(path);
    EXPECT_EQ(L.rc, 0) << L.d.msg;
    EXPECT_EQ(L.p.n_ops, 1);
  }
}
