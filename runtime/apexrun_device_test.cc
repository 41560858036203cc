// apexrun_device_test.cc - `apexrun --device cuda` in each kind of build:
//   built without CUDA (--config=nocuda, or no nvcc):  exit 2, "this apexrun was built without CUDA"
//   built with CUDA, no GPU (CI):                       exit 1, "no CUDA device found (cudaGetDeviceCount: ...)"
//   built with CUDA on a GPU:                           exit 0; the MLP example trained 3 steps at
//                                                       O2 on cuda logs the cpu run's losses
//                                                       (within fp16 rounding drift)
// The build kind comes from `apexrun --help` ("this build: cpu" or "cpu,cuda").
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int code;
  std::string out;
};

Result Shell(const std::string &cmd) {
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  Result r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return r;
}

std::string Tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// "loss" values of a JSON-lines log.
std::vector<double> Losses(const std::string &path) {
  std::ifstream f(path);
  std::vector<double> v;
  std::string line;
  while (std::getline(f, line)) {
    size_t k = line.find("\"loss\":");
    if (k != std::string::npos) v.push_back(std::stod(line.substr(k + 7)));
  }
  return v;
}

TEST(ApexrunDevice, CudaDeviceAnswersForThisBuild) {
  Result h = Shell("./runtime/apexrun --help");
  ASSERT_EQ(h.code, 0) << h.out;
  bool built = h.out.find("this build: cpu,cuda") != std::string::npos;
  std::string plan = Tmp() + "/mlp.apx";
  Result c = Shell("./compiler/apexc examples/mlp/model.onnx -O2 -o " + plan);
  ASSERT_EQ(c.code, 0) << c.out;
  std::string common = plan + " --data examples/mlp/data --steps 3 --no-shuffle --log ";
  Result r = Shell("./runtime/apexrun " + common + Tmp() + "/cuda.jsonl --device cuda");
  if (!built) {
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("this apexrun was built without CUDA"), std::string::npos) << r.out;
    return;
  }
  if (r.out.find("no CUDA device found") != std::string::npos) {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("no CUDA device found (cudaGetDeviceCount: "), std::string::npos) << r.out;
    printf("no GPU: the refusal was checked: %s", r.out.c_str());
    return;
  }
  ASSERT_EQ(r.code, 0) << r.out;
  Result rc = Shell("./runtime/apexrun " + common + Tmp() + "/cpu.jsonl --device cpu --threads 1");
  ASSERT_EQ(rc.code, 0) << rc.out;
  std::vector<double> lg = Losses(Tmp() + "/cuda.jsonl"), lc = Losses(Tmp() + "/cpu.jsonl");
  ASSERT_EQ(lg.size(), 3u);
  ASSERT_EQ(lc.size(), 3u);
  for (size_t i = 0; i < lc.size(); i++)
    EXPECT_NEAR(lg[i], lc[i], 2e-2 * std::fabs(lc[i]) + 1e-4) << "step " << i;
}

}  // namespace
