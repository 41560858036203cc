// reexec_test.cc - apx_cpu_reexec_tuned (cpu_kernels.h) through reexec_probe: the program
// re-executes itself once with OPENBLAS_CORETYPE when OpenBLAS fell back to a generic core,
// keeps its pid and arguments, removes its mark, and leaves a user's setting alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
}

namespace {

// Runs the probe with `env` prefixed (VAR=value ... or "") and returns its log lines.
std::vector<std::string> run_probe(const std::string &env) {
  char tmpl[] = "/tmp/apx_reexec_XXXXXX";
  int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_NUM_THREADS -u APX_NO_REEXEC "
                    "-u APX_CPU_REEXEC " + env +
                    " kernels/cpu/reexec_probe " + tmpl + " extra-arg";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(tmpl);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  unlink(tmpl);
  return lines;
}

std::string field(const std::string &line, const std::string &key) {
  size_t p = line.find(key + "=");
  if (p == std::string::npos) return "";
  p += key.size() + 1;
  return line.substr(p, line.find(' ', p) - p);
}

// The probe's first line reports the core OpenBLAS loaded with; when that was a generic
// fallback, the second start (same pid, same arguments) has the hinted core.
TEST(Reexec, OnceWithCoretypeWhenOpenBlasFellBack) {
  std::vector<std::string> l = run_probe("");
  ASSERT_GE(l.size(), 2u);
  std::string core0 = field(l[0], "core");
  EXPECT_EQ(field(l[0], "env"), "-");
  EXPECT_EQ(field(l[0], "argc"), "3");
  if (l.size() == 2) {  // no re-exec: OpenBLAS already has a fitting core (or no AVX2)
    EXPECT_EQ(l[1], "done mark=unset comm=reexec_probe");
    return;
  }
  ASSERT_EQ(l.size(), 3u) << "re-executed more than once";
  std::string want = field(l[1], "env");
  EXPECT_TRUE(want == "SkylakeX" || want == "Haswell") << l[1];
  EXPECT_NE(core0, want);
  EXPECT_EQ(field(l[1], "core"), want);                // the new image loaded the fast core
  EXPECT_EQ(field(l[1], "pid"), field(l[0], "pid"));   // same process
  EXPECT_EQ(field(l[1], "argc"), "3");                 // same arguments
  EXPECT_EQ(field(l[1], "threads"), "1");              // no idle OpenBLAS pool
  EXPECT_EQ(l[2], "done mark=unset comm=reexec_probe");  // no mark leaks; its own name
}

TEST(Reexec, UserSettingWins) {
  std::vector<std::string> l = run_probe("OPENBLAS_CORETYPE=Haswell");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(field(l[0], "env"), "Haswell");
  EXPECT_EQ(field(l[0], "core"), "Haswell");
  l = run_probe("OPENBLAS_NUM_THREADS=2");
  ASSERT_GE(l.size(), 2u);
  EXPECT_EQ(field(l[l.size() - 2], "threads"), "2");
}

TEST(Reexec, OptOutAndMarkPreventLoops) {
  std::vector<std::string> l = run_probe("APX_NO_REEXEC=1");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(field(l[0], "env"), "-");
  // a process that finds the mark is the re-executed one: it removes the mark, execs nothing
  l = run_probe("APX_CPU_REEXEC=1");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1], "done mark=unset comm=reexec_probe");
}

}  // namespace
