// scaler_test.cc - the loss-scale state machine (scaler.h), table-driven: each row is a
// configuration, a sequence of steps (o = clean, X = overflow) and the scale expected after
// each step, worked out by hand from the rules in scaler.h / DESIGN.md 9 (growth and backoff
// factors 0: the defaults 2 and 0.5, as in plans written before them).
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "runtime/scaler.h"
}

namespace {

struct Row {
  const char *name;
  ApxScalerConfig cfg;
  const char *steps;
  std::vector<double> scale_after;
  std::vector<int> events;  // optional: expected event bits per step (empty: not checked)
};

}  // namespace

TEST(Scaler, Table) {
  const ApxScalerConfig dyn = {1, 65536, 0, 16777216, 3, 1, 0, 0};
  const int S = APX_SCALER_SKIPPED, B = APX_SCALER_BACKED_OFF, G = APX_SCALER_GREW;
  std::vector<Row> rows = {
      {"clean steps grow after the window", dyn, "oooooo", {65536, 65536, 131072, 131072, 131072, 262144},
       {0, 0, G, 0, 0, G}},
      {"overflow halves and skips", dyn, "XXo", {32768, 16384, 16384}, {S | B, S | B, 0}},
      {"overflow resets the clean count", dyn, "ooXooo", {65536, 65536, 32768, 32768, 32768, 65536},
       {0, 0, S | B, 0, 0, G}},
      {"growth stops at max", {1, 4194304, 0, 16777216, 1, 1, 0, 0}, "oooo", {8388608, 16777216, 16777216, 16777216},
       {G, G, 0, 0}},
      {"backoff stops at min", {1, 8, 4, 16777216, 100, 1, 0, 0}, "XXX", {4, 4, 4}, {S | B, S, S}},
      {"hysteresis 2: the first overflow only skips", {1, 1024, 0, 16777216, 2, 2, 0, 0}, "XXXooXX",
       {1024, 512, 256, 256, 512, 512, 256}, {S, S | B, S | B, 0, G, S, S | B}},
      {"hysteresis restored only by growth", {1, 1024, 0, 16777216, 3, 2, 0, 0}, "XXoXo",
       {1024, 512, 512, 256, 256}, {}},
      {"static never changes but still skips", {0, 128, 0, 16777216, 1, 1, 0, 0}, "oXoooX", {128, 128, 128, 128, 128, 128},
       {0, S, 0, 0, 0, S}},
      {"GradScaler's growth and backoff factors", {1, 1024, 0, 16777216, 2, 1, 4, 0.25}, "ooXoo",
       {1024, 4096, 1024, 1024, 4096}, {0, G, S | B, 0, G}},
      {"below one warns once", {1, 2, 0, 16777216, 1000, 1, 0, 0}, "XXXX", {1, 0.5, 0.25, 0.125},
       {S | B, S | B | APX_SCALER_WARN_BELOW_ONE, S | B, S | B}},
  };
  for (const Row &r : rows) {
    ApxScaler s;
    apx_scaler_init(&s, &r.cfg);
    ASSERT_EQ(strlen(r.steps), r.scale_after.size()) << r.name;
    for (size_t i = 0; r.steps[i]; i++) {
      int ev = apx_scaler_update(&s, r.steps[i] == 'X');
      EXPECT_EQ(s.scale, r.scale_after[i]) << r.name << " step " << i;
      if (!r.events.empty()) {
        EXPECT_EQ(ev, r.events[i]) << r.name << " step " << i;
      }
    }
  }
}

TEST(Scaler, CollapseRunWarnsAtTheNthOverflowInARow) {
  ApxScalerConfig c = {1, 65536, 0, 16777216, 2000, 1, 0, 0};
  ApxScaler s;
  apx_scaler_init(&s, &c);
  int warned_at = -1, n_warn = 0;
  for (int i = 1; i <= 3 * APX_SCALER_COLLAPSE_RUN; i++) {
    int ev = apx_scaler_update(&s, 1);
    if (ev & APX_SCALER_WARN_RUN) {
      n_warn++;
      if (warned_at < 0) warned_at = i;
    }
  }
  EXPECT_EQ(warned_at, APX_SCALER_COLLAPSE_RUN);
  EXPECT_EQ(n_warn, 1);  // once per run of overflows
  EXPECT_EQ(s.overflow_run, 3 * APX_SCALER_COLLAPSE_RUN);
  apx_scaler_update(&s, 0);
  EXPECT_EQ(s.overflow_run, 0);
  for (int i = 1; i <= APX_SCALER_COLLAPSE_RUN; i++) {
    int ev = apx_scaler_update(&s, 1);
    EXPECT_EQ((ev & APX_SCALER_WARN_RUN) != 0, i == APX_SCALER_COLLAPSE_RUN);
  }
  EXPECT_EQ(s.n_overflows, 4 * APX_SCALER_COLLAPSE_RUN);
}

// Apex starts a dynamic scaler at min(init, max): the initial scale is clamped into
// [min, max] (and reported), so --max-loss-scale 1 starts at 1 and a floor above the start
// never makes an overflow raise the scale. A static scale is used as given.
TEST(Scaler, InitialScaleIsClampedIntoMinMax) {
  struct {
    ApxScalerConfig cfg;
    int clamped;
    double start, after_overflow;
  } cases[] = {
      {{1, 65536, 0, 1, 2000, 1, 0, 0}, 1, 1, 0.5},
      {{1, 65536, 1e6, 16777216, 2000, 1, 0, 0}, 1, 1e6, 1e6},  // floor: the overflow keeps the scale
      {{1, 65536, 2, 16777216, 2000, 1, 0, 0}, 0, 65536, 32768},
      {{0, 65536, 0, 1, 2000, 1, 0, 0}, 0, 65536, 65536},       // static: max does not apply
  };
  for (auto &c : cases) {
    ApxScaler s;
    EXPECT_EQ(apx_scaler_init(&s, &c.cfg), c.clamped) << c.cfg.init_scale << " in [" << c.cfg.min_scale << ", "
                                                      << c.cfg.max_scale << "]";
    EXPECT_EQ(s.scale, c.start);
    apx_scaler_update(&s, 1);
    EXPECT_EQ(s.scale, c.after_overflow);
    EXPECT_LE(s.scale, c.start) << "an overflow never raises the scale";
  }
}
