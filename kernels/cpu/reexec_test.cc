// reexec_test.cc - apx_cpu_reexec_tuned (cpu_kernels.h) through reexec_probe: the program
// re-executes itself once with OPENBLAS_CORETYPE (when OpenBLAS fell back to a generic core)
// and OMP_WAIT_POLICY, keeps its pid and arguments, removes its mark, and leaves the user's
// settings alone.
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
  std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_NUM_THREADS -u OMP_WAIT_POLICY "
                    "-u GOMP_SPINCOUNT -u APX_NO_REEXEC -u APX_CPU_REEXEC " + env +
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

const char kDone[] = "done mark=unset comm=reexec_probe";  // no mark leaks; its own name

}  // namespace

// Nothing set: one re-exec (same pid, same arguments) with the OpenMP wait policy and, when
// OpenBLAS loaded a generic core, the hinted core (which the new image then loads).
TEST(Reexec, OnceWithWhatTheLibrariesNeed) {
  std::vector<std::string> l = run_probe("");
  ASSERT_EQ(l.size(), 3u) << "expected exactly one re-exec";
  EXPECT_EQ(field(l[0], "env"), "-");
  EXPECT_EQ(field(l[0], "wait"), "-");
  EXPECT_EQ(field(l[1], "pid"), field(l[0], "pid"));
  EXPECT_EQ(field(l[1], "argc"), "3");
  EXPECT_EQ(field(l[1], "wait"), "PASSIVE");
  std::string core = field(l[1], "env");
  if (core != "-") {  // OpenBLAS had fallen back to a generic core
    EXPECT_TRUE(core == "SkylakeX" || core == "Haswell") << l[1];
    EXPECT_NE(field(l[0], "core"), core);
    EXPECT_EQ(field(l[1], "core"), core);
    EXPECT_EQ(field(l[1], "threads"), "1");  // no idle OpenBLAS pool
  } else {
    EXPECT_EQ(field(l[1], "threads"), "-");
  }
  EXPECT_EQ(l[2], kDone);
}

TEST(Reexec, UserSettingsWin) {
  // everything set: nothing to do
  std::vector<std::string> l = run_probe("OPENBLAS_CORETYPE=Haswell OMP_WAIT_POLICY=active");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(field(l[0], "core"), "Haswell");
  EXPECT_EQ(l[1], kDone);
  // the core set, OpenMP not: re-exec for OpenMP only, the user's core kept
  l = run_probe("OPENBLAS_CORETYPE=Haswell");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(field(l[1], "env"), "Haswell");
  EXPECT_EQ(field(l[1], "threads"), "-");
  EXPECT_EQ(field(l[1], "wait"), "PASSIVE");
  l = run_probe("OMP_WAIT_POLICY=active OPENBLAS_NUM_THREADS=2");
  ASSERT_GE(l.size(), 2u);
  EXPECT_EQ(field(l[l.size() - 2], "wait"), "active");
  EXPECT_EQ(field(l[l.size() - 2], "threads"), "2");
  l = run_probe("GOMP_SPINCOUNT=7");  // libgomp's own knob counts as a choice too
  ASSERT_GE(l.size(), 2u);
  EXPECT_EQ(field(l[l.size() - 2], "wait"), "-");
}

TEST(Reexec, OptOutAndMarkPreventLoops) {
  std::vector<std::string> l = run_probe("APX_NO_REEXEC=1");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(field(l[0], "wait"), "-");
  // a process that finds the mark is the re-executed one: it removes the mark, execs nothing
  l = run_probe("APX_CPU_REEXEC=1");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1], kDone);
}
