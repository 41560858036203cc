// policy_file_test.cc - --policy file reading: errors name the path and the OS reason, and a
// readable policy loads.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
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
    // fopen of a folder succeeds on Linux; the read fails with EISDIR
    Loaded L(dir);
    EXPECT_EQ(L.rc, -1);
    EXPECT_EQ(L.d.code, APX_EXIT_BAD_INPUT);
    EXPECT_EQ(std::string(L.d.msg), dir + ": cannot read policy: Is a directory");
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
