// mpi_testing.h - test-only helper: runs a command under mpirun (as root in CI, with more
// ranks than cores) and returns its exit code, output and wall time.
#ifndef APX_RUNTIME_MPI_TESTING_H
#define APX_RUNTIME_MPI_TESTING_H

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// Starts `mpirun -np np ARGS` in the background (its own process group), stdout and stderr
// into out_file; args may be MPMD ("A : -np 1 B").
inline pid_t Launch(int np, const std::string &args, const std::string &out_file) {
  std::string cmd = MpirunPrefix(np) + args + " > " + out_file + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec env " + cmd).c_str(), (char *)nullptr);
    _exit(127);
  }
  return pid;
}

// The apexrun processes of a job: children of mpirun named apexrun (from /proc), by pid.
inline std::vector<pid_t> Ranks(pid_t mpirun) {
  std::vector<pid_t> r;
  DIR *dir = opendir("/proc");
  if (!dir) return r;
  while (struct dirent *e = readdir(dir)) {
    char *end;
    long p = strtol(e->d_name, &end, 10);
    if (*end || p <= 0) continue;
    std::ifstream f("/proc/" + std::string(e->d_name) + "/stat");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string stat = ss.str();
    size_t rp = stat.rfind(')');
    if (rp == std::string::npos || stat.find("(apexrun)") == std::string::npos) continue;
    std::istringstream fs(stat.substr(rp + 2));
    char state;
    long ppid = 0;
    fs >> state >> ppid;
    if (ppid == mpirun) r.push_back((pid_t)p);
  }
  closedir(dir);
  std::sort(r.begin(), r.end());
  return r;
}

inline int CountOccurrences(const std::string &s, const std::string &what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) n++;
  return n;
}

}  // namespace apx_testing

#endif
