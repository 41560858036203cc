// lr_schedule_test.cc - warmup + constant/cosine/linear (lr_schedule.h) at the points the
// formulas pin down exactly.
#include <gtest/gtest.h>

#include <cmath>

extern "C" {
#include "runtime/lr_schedule.h"
}

TEST(LrSchedule, ConstantWithoutWarmup) {
  ApxLrConfig c = {0.1, 0, APX_LR_CONSTANT, 100};
  for (int64_t t : {0, 1, 50, 99, 100, 1000}) EXPECT_DOUBLE_EQ(apx_lr_at(&c, t), 0.1);
}

TEST(LrSchedule, LinearWarmupReachesBaseAtTheLastWarmupStep) {
  ApxLrConfig c = {1.0, 4, APX_LR_CONSTANT, 100};
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 0), 0.25);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 1), 0.5);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 3), 1.0);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 4), 1.0);
}

TEST(LrSchedule, CosineFromBaseToZero) {
  ApxLrConfig c = {2.0, 10, APX_LR_COSINE, 110};
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 9), 2.0);      // end of warmup
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 10), 2.0);     // progress 0
  EXPECT_NEAR(apx_lr_at(&c, 60), 1.0, 1e-12);   // progress 1/2: half
  EXPECT_NEAR(apx_lr_at(&c, 35), 2.0 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_NEAR(apx_lr_at(&c, 110), 0.0, 1e-12);  // progress 1
  EXPECT_NEAR(apx_lr_at(&c, 500), 0.0, 1e-12);  // stays at 0
  double prev = 3;
  for (int64_t t = 10; t <= 110; t++) {
    double lr = apx_lr_at(&c, t);
    EXPECT_LE(lr, prev);
    prev = lr;
  }
}

TEST(LrSchedule, LinearDecay) {
  ApxLrConfig c = {1.0, 0, APX_LR_LINEAR, 8};
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 0), 1.0);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 2), 0.75);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 4), 0.5);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 8), 0.0);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 9), 0.0);
}

TEST(LrSchedule, TotalNotAfterWarmupDoesNotDivideByZero) {
  ApxLrConfig c = {1.0, 5, APX_LR_LINEAR, 5};
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 4), 1.0);
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 5), 1.0);  // progress 0 with span clamped to 1
  EXPECT_DOUBLE_EQ(apx_lr_at(&c, 6), 0.0);
  EXPECT_STREQ(apx_lr_schedule_name(APX_LR_COSINE), "cosine");
}
