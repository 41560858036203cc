// kit_main.cc - the device kit's multi-call binary (docs/cuda.md "Device kit"): apexc,
// apexrun, nccl_check, the kernel lab with the cuda backend's tests (gpu_lab) and the ONNX
// node tests on cuda (onnx_node_cuda_test) in one executable, so the bundle holds one copy of
// static OpenBLAS and of the kernels' fatbin (five binaries of ~37 MB each did not fit 64 MiB).
//
//   apexkit TOOL [ARGS...]        or, named TOOL (a link or a copy): TOOL [ARGS...]
//
// The two gtest tools share one test list: gpu_lab runs every test except the node tests
// (its --gtest_filter, if any, is narrowed the same way); onnx_node_cuda_test runs only the
// node tests unless given a --gtest_filter of its own.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

extern "C" int apx_kit_apexc_main(int argc, char **argv);
extern "C" int apx_kit_apexrun_main(int argc, char **argv);
extern "C" int apx_kit_nccl_check_main(void);

namespace {

const char kNodeTests[] = "Onnx/NodeCuda.*";

int run_tests(int argc, char **argv, bool node) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string f = GTEST_FLAG_GET(filter);
  if (node) {
    if (f == "*") f = kNodeTests;
  } else {
    f += (f.find('-') == std::string::npos ? "-" : ":");
    f += kNodeTests;
  }
  GTEST_FLAG_SET(filter, f);
  return RUN_ALL_TESTS();
}

// Runs TOOL and stores its exit code in *rc; false when TOOL is not one of the kit's.
bool dispatch(const char *tool, int argc, char **argv, int *rc) {
  if (!strcmp(tool, "apexc")) *rc = apx_kit_apexc_main(argc, argv);
  else if (!strcmp(tool, "apexrun")) *rc = apx_kit_apexrun_main(argc, argv);
  else if (!strcmp(tool, "nccl_check")) *rc = apx_kit_nccl_check_main();
  else if (!strcmp(tool, "gpu_lab")) *rc = run_tests(argc, argv, false);
  else if (!strcmp(tool, "onnx_node_cuda_test")) *rc = run_tests(argc, argv, true);
  else return false;
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  const char *self = strrchr(argv[0], '/');
  self = self ? self + 1 : argv[0];
  int rc = 0;
  if (dispatch(self, argc, argv, &rc)) return rc;
  if (argc >= 2) {
    if (dispatch(argv[1], argc - 1, argv + 1, &rc)) return rc;
    fprintf(stderr, "apexkit: unknown tool '%s'; ", argv[1]);
  } else {
    fprintf(stderr, "apexkit: no tool given; ");
  }
  fprintf(stderr, "usage: apexkit {apexc|apexrun|nccl_check|gpu_lab|onnx_node_cuda_test} [ARGS...]\n");
  return 2;
}
