// mpi_testing.h - test-only helper: runs a command under mpirun (as root in CI, with more
// ranks than cores) and returns its exit code, output and wall time.
#ifndef APX_RUNTIME_MPI_TESTING_H
#define APX_RUNTIME_MPI_TESTING_H

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace apx_testing {

struct MpiResult {
  int code = -1;       // exit status of mpirun (128 + signal when killed)
  std::string out;     // stdout and stderr together
  double seconds = 0;  // wall time
};

// Options every test launch needs: root allowed, oversubscription (4 ranks on 2 cores, and
// ranks yield the CPU while they wait), shared memory without single-copy (containers forbid
// process_vm_readv), no TCP/InfiniBand probing. Under --config=asan the ranks run without
// LeakSanitizer: Open MPI, hwloc and PMIx leak their own allocations at exit.
inline std::string MpirunPrefix(int np) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
         "ASAN_OPTIONS=detect_leaks=0 "
         "mpirun --allow-run-as-root --oversubscribe --bind-to none -x ASAN_OPTIONS "
         "--mca btl self,vader --mca btl_vader_single_copy_mechanism none "
         "--mca mpi_yield_when_idle 1 -np " +
         std::to_string(np) + " ";
}

inline MpiResult RunCommand(const std::string &cmd) {
  MpiResult r;
  auto t0 = std::chrono::steady_clock::now();
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}

inline MpiResult Mpirun(int np, const std::string &args) { return RunCommand(MpirunPrefix(np) + args); }

inline int CountOccurrences(const std::string &s, const std::string &what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) n++;
  return n;
}

}  // namespace apx_testing

#endif
