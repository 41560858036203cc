// graph_check_test.cc - the capture-eligibility decision of apexrun --cuda-graph.
#include "runtime/graph_check.h"

#include <gtest/gtest.h>

#include <string>

namespace {

std::string Refusal(const char *device, int world, int accumulate) {
  ApxGraphUse u = {device, world, accumulate};
  char why[512] = "unchanged";
  int r = apx_graph_refusal(&u, why, sizeof why);
  if (r == 0) return why[0] ? std::string("ok but why set: ") + why : "";
  EXPECT_EQ(r, 1);
  return why;
}

TEST(GraphCheck, OneCudaProcessWithoutAccumulationIsCapturable) {
  EXPECT_EQ(Refusal("cuda", 1, 1), "");
  EXPECT_EQ(Refusal("cuda", 0, 0), "");  // defaults: one process, no accumulation
}

TEST(GraphCheck, OtherBackendsAreRefused) {
  std::string w = Refusal("cpu", 1, 1);
  EXPECT_EQ(w.rfind("not supported yet: --cuda-graph with --device cpu", 0), 0u) << w;
  EXPECT_NE(Refusal(nullptr, 1, 1).find("--device cpu"), std::string::npos);
  EXPECT_NE(Refusal("", 1, 1).find("--device cpu"), std::string::npos);
  EXPECT_NE(Refusal("rocm", 1, 1).find("--device rocm"), std::string::npos);
}

TEST(GraphCheck, DataParallelismIsRefused) {
  std::string w = Refusal("cuda", 2, 1);
  EXPECT_EQ(w.rfind("not supported yet: --cuda-graph with data parallelism (2 ranks", 0), 0u) << w;
}

TEST(GraphCheck, AccumulationIsRefused) {
  std::string w = Refusal("cuda", 1, 4);
  EXPECT_EQ(w.rfind("not supported yet: --cuda-graph with gradient accumulation (the plan accumulates 4", 0), 0u)
      << w;
}

TEST(GraphCheck, TheDeviceIsNamedFirst) {
  // a cpu run with K ranks and accumulation names the backend: the first thing to change
  EXPECT_NE(Refusal("cpu", 4, 2).find("--device cpu"), std::string::npos);
  EXPECT_NE(Refusal("cuda", 4, 2).find("data parallelism"), std::string::npos);
}

}  // namespace
