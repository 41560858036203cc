// objects_test.cc - checks on the built CUDA objects that a CPU machine can make (no GPU):
//   - conv.cu's object calls cudnnConvolutionForward, BackwardData and BackwardFilter (with
//     the query's count read in the same call that set it, GCC proved the count 0 and dropped
//     all three calls);
//   - no object of the kernels or the cuda backend calls cudaMemset / cudaMemcpy: those run
//     on the legacy stream, which is not ordered with the queues' non-blocking streams;
//   - the cuda backend captures and replays CUDA Graphs (apexrun --cuda-graph):
//     cudaStreamBeginCapture, cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphLaunch, and
//     writes Dropout's device-side step through the kernels' apx_cuda_step_write (defined in
//     dropout.cu's object);
//   - every kernel's registers fit the largest block size it is launched with, that size read
//     from the launch table (launch.h), the registers from the objects themselves
//     (cuobjdump --dump-resource-usage, every architecture): registers rounded up to the
//     allocation unit (8 per thread) x threads <= 65,536; and the table and the objects name
//     the same kernels (CUB's kernels carry CUB's own launch bounds and are only counted).
// Arguments: the kernels' archive, then the cuda backend's library files.
#include <cxxabi.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"

namespace {

std::vector<std::string> g_args;

std::string Shell(const std::string &cmd, int *code) {
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  if (!p) {
    *code = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *code = pclose(p);
  return out;
}

bool Exists(const std::string &path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

// cuobjdump: $CUOBJDUMP, PATH, the toolkit, or the nvidia-cuda-cuobjdump Python package in
// the project venv (scripts/setup.sh installs it there).
std::string Cuobjdump() {
  const char *env = getenv("CUOBJDUMP");
  if (env && Exists(env)) return env;
  int code = 0;
  std::string w = Shell("command -v cuobjdump", &code);
  while (!w.empty() && (w.back() == '\n' || w.back() == ' ')) w.pop_back();
  if (code == 0 && Exists(w)) return w;
  if (Exists("/usr/local/cuda/bin/cuobjdump")) return "/usr/local/cuda/bin/cuobjdump";
  // the project venv's site-packages (scripts/py: the one Python of the tests)
  std::string site = Shell("scripts/py -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])' 2>/dev/null", &code);
  while (!site.empty() && site.back() == '\n') site.pop_back();
  for (const char *sub : {"/nvidia/cu13/bin/cuobjdump", "/nvidia/cuda_cuobjdump/bin/cuobjdump"})
    if (Exists(site + sub)) return site + sub;
  return "";
}

// member object -> undefined symbols, from `nm -A` over an archive
std::map<std::string, std::set<std::string>> Undefined(const std::string &archive) {
  int code = 0;
  std::string out = Shell("nm -A " + archive, &code);
  std::map<std::string, std::set<std::string>> u;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    // "lib.a:member.o:                 U symbol"
    size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    std::string member = line.substr(c1 + 1, c2 - c1 - 1), rest = line.substr(c2 + 1);
    std::istringstream r(rest);
    std::string a, b;
    r >> a >> b;
    if (a == "U") u[member].insert(b);
  }
  return u;
}

std::vector<std::string> Archives() {
  std::vector<std::string> v;
  for (const auto &a : g_args)
    if (a.size() > 2 && (a.substr(a.size() - 2) == ".a" || a.substr(a.size() - 3) == ".lo")) v.push_back(a);
  return v;
}

TEST(CudaObjects, ConvolutionsCallCudnn) {
  ASSERT_FALSE(g_args.empty()) << "usage: objects_test KERNELS.a [BACKEND.a ...]";
  auto u = Undefined(g_args[0]);
  ASSERT_TRUE(u.count("conv.cu.o")) << "no conv.cu.o in " << g_args[0];
  for (const char *f : {"cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter",
                        "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnSetConvolutionMathType"})
    EXPECT_TRUE(u["conv.cu.o"].count(f)) << "conv.cu.o never calls " << f;
}

TEST(CudaObjects, NothingRunsOnTheLegacyStream) {
  auto archives = Archives();
  ASSERT_GE(archives.size(), 2u) << "need the kernels' and the cuda backend's archives";
  int members = 0;
  for (const auto &ar : archives)
    for (const auto &m : Undefined(ar)) {
      members++;
      for (const char *f : {"cudaMemset", "cudaMemcpy", "cudaMemset2D", "cudaMemcpy2D"})
        EXPECT_FALSE(m.second.count(f)) << ar << ": " << m.first << " calls " << f
                                        << " (the legacy stream: use the queue's stream, then wait for it)";
    }
  EXPECT_GT(members, 10);
}

// member object -> symbols it defines (text), from `nm -A --defined-only`
std::set<std::string> Defined(const std::string &archive, const std::string &member) {
  int code = 0;
  std::string out = Shell("nm -A --defined-only " + archive, &code);
  std::set<std::string> d;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos || line.substr(c1 + 1, c2 - c1 - 1) != member) continue;
    std::istringstream r(line.substr(c2 + 1));
    std::string addr, kind, name;
    r >> addr >> kind >> name;
    if (kind == "T") d.insert(name);
  }
  return d;
}

TEST(CudaObjects, BackendCapturesAndReplaysGraphs) {
  auto archives = Archives();
  ASSERT_GE(archives.size(), 2u) << "need the kernels' and the cuda backend's archives";
  std::set<std::string> calls;
  for (size_t i = 1; i < archives.size(); i++)
    for (const auto &m : Undefined(archives[i]))
      if (m.first.find("backend_cuda") != std::string::npos) calls.insert(m.second.begin(), m.second.end());
  ASSERT_FALSE(calls.empty()) << "no backend_cuda object in the backend's archives";
  for (const char *f : {"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate", "cudaGraphLaunch",
                        "cudaGraphExecDestroy", "apx_cuda_step_write"})
    EXPECT_TRUE(calls.count(f)) << "the cuda backend never calls " << f;
  auto k = Undefined(archives[0]);
  ASSERT_TRUE(k.count("dropout.cu.o")) << "no dropout.cu.o in " << archives[0];
  EXPECT_TRUE(Defined(archives[0], "dropout.cu.o").count("apx_cuda_step_write"))
      << "dropout.cu.o does not define apx_cuda_step_write";
}

// "void argmax_kernel<float>(float const*, int*, PoolArgs)" -> "argmax_kernel"
std::string BaseName(const std::string &mangled, bool *cub) {
  int st = 0;
  char *d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &st);
  std::string s = st == 0 && d ? d : mangled;
  free(d);
  *cub = s.find("cub::") != std::string::npos || s.find("thrust::") != std::string::npos;
  size_t paren = std::string::npos;
  int depth = 0;
  for (size_t i = 0; i < s.size(); i++) {  // the first '(' outside template brackets
    if (s[i] == '<') depth++;
    if (s[i] == '>') depth--;
    if (s[i] == '(' && depth == 0) {
      paren = i;
      break;
    }
  }
  std::string head = s.substr(0, paren);
  depth = 0;
  std::string name;
  for (size_t i = head.size(); i-- > 0;) {  // strip template arguments, return type, scope
    char ch = head[i];
    if (ch == '>') depth++;
    if (ch == '<') {
      depth--;
      continue;
    }
    if (depth > 0 || ch == '>') continue;
    if (ch == ' ' || ch == ':') break;
    name.insert(name.begin(), ch);
  }
  return name;
}

TEST(CudaObjects, RegistersFitTheLargestLaunchedBlock) {
  std::string co = Cuobjdump();
  ASSERT_FALSE(co.empty()) << "cuobjdump not found ($CUOBJDUMP, PATH, /usr/local/cuda/bin, or pip install "
                              "nvidia-cuda-cuobjdump - scripts/setup.sh installs it)";
  int code = 0;
  std::string out = Shell(co + " --dump-resource-usage " + g_args[0], &code);
  ASSERT_EQ(code, 0) << out.substr(0, 2000);
  std::map<std::string, int> table;
#define ROW(k, b) table[#k] = (b);
  APX_CU_KERNELS(ROW)
#undef ROW
  std::set<std::string> seen;
  int checked = 0, cub = 0;
  std::istringstream in(out);
  std::string line, arch, fn;
  while (std::getline(in, line)) {
    size_t k;
    if ((k = line.find("arch = ")) != std::string::npos) arch = line.substr(k + 7);
    if ((k = line.find("Function ")) != std::string::npos) {
      fn = line.substr(k + 9);
      if (!fn.empty() && fn.back() == ':') fn.pop_back();
    }
    if ((k = line.find("REG:")) == std::string::npos || fn.empty()) continue;
    int regs = atoi(line.c_str() + k + 4);
    bool is_cub = false;
    std::string base = BaseName(fn, &is_cub);
    if (is_cub) {
      cub++;
      continue;
    }
    auto it = table.find(base);
    if (it == table.end()) {
      ADD_FAILURE() << "kernel " << base << " (" << fn << ") is not in the launch table (kernels/cuda/launch.h)";
      continue;
    }
    seen.insert(base);
    int per_thread = (regs + 7) / 8 * 8;
    EXPECT_LE((long)per_thread * it->second, 65536L)
        << arch << " " << base << ": " << regs << " registers x " << it->second
        << " threads exceed the 65,536-register file: a launch at that block size fails";
    checked++;
  }
  for (const auto &t : table) EXPECT_TRUE(seen.count(t.first)) << "launch table entry " << t.first << " names no kernel";
  EXPECT_GT(checked, 100);
  printf("checked %d kernel instances against the launch table (%zu kernels); %d CUB kernels\n", checked,
         table.size(), cub);
}

}  // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; i++) g_args.push_back(argv[i]);
  return RUN_ALL_TESTS();
}
