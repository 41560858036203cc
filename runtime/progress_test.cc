// progress_test.cc - the progress line: its fields, the ETA's units, and when each form prints
// (terminal: updated in place with "\r", padded over a longer line; otherwise plain lines
// every N steps or every APX_PROGRESS_PERIOD_S seconds, the last step too once one printed).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

extern "C" {
#include "runtime/progress.h"
}

namespace {

std::string Text(FILE *f) {
  fflush(f);
  long n = ftell(f);
  std::string s((size_t)n, '\0');
  rewind(f);
  if (n > 0 && fread(&s[0], 1, (size_t)n, f) != (size_t)n) s.clear();
  return s;
}

ApxProgressValues At(int64_t step, double loss = 0.5, double scale = 65536) {
  return ApxProgressValues{step, 100, loss, scale, 0.001, -1, 2, -1};
}

}  // namespace

TEST(Progress, LineHoldsEveryField) {
  ApxProgressValues v{120, 200, 0.4123449, 32768, 0.001, 5321.4, 2, 12.2};
  char buf[256];
  apx_progress_format(&v, buf, sizeof buf);
  EXPECT_STREQ(buf, "step 120/200  loss 0.412345  scale 32768  lr 0.001  5321 samples/s  2 skipped  ETA 12s");
  v.samples_per_s = -1;
  v.eta_s = -1;
  apx_progress_format(&v, buf, sizeof buf);
  EXPECT_NE(std::string(buf).find("? samples/s"), std::string::npos) << buf;
  EXPECT_NE(std::string(buf).find("ETA ?"), std::string::npos) << buf;
}

TEST(Progress, EtaUnits) {
  char b[32];
  apx_progress_eta(0, b, sizeof b);
  EXPECT_STREQ(b, "0s");
  apx_progress_eta(59.4, b, sizeof b);
  EXPECT_STREQ(b, "59s");
  apx_progress_eta(185, b, sizeof b);
  EXPECT_STREQ(b, "3m05s");
  apx_progress_eta(3725, b, sizeof b);
  EXPECT_STREQ(b, "1h02m");
  apx_progress_eta(-1, b, sizeof b);
  EXPECT_STREQ(b, "?");
}

TEST(Progress, TerminalFormUpdatesOneLineInPlace) {
  FILE *f = tmpfile();
  ApxProgressMeter m;
  apx_progress_init(&m, f, APX_PROGRESS_FORM_TTY, 0, 100, 0, 32, 0);
  ApxProgressValues v = At(1, 123.456789);
  apx_progress_step(&m, &v, 10, 0);  // the first step prints at once
  v = At(2);
  apx_progress_step(&m, &v, 20, 0);  // within 50 ms: not again
  v = At(3);
  apx_progress_step(&m, &v, 80, 0);  // 70 ms after the first
  apx_progress_break(&m);
  std::string s = Text(f);
  EXPECT_EQ(s.find('\n'), s.size() - 1) << s;  // one newline, at the end
  EXPECT_EQ(s.find("step 2/"), std::string::npos) << s;
  size_t second = s.find("\rstep 3/100");
  ASSERT_NE(second, std::string::npos) << s;
  // 3 steps of 32 samples in 80 ms; 97 steps left at 26.7 ms
  EXPECT_NE(s.find("1200 samples/s", second), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 3s", second), std::string::npos) << s;
  // the first line was longer (loss 123.456789): the second is padded over it
  size_t len1 = second - 1, len2 = s.size() - 1 - second - 1;
  EXPECT_EQ(len2, len1) << s;
  fclose(f);
}

TEST(Progress, PlainLinesEveryNStepsWithoutCarriageReturns) {
  FILE *f = tmpfile();
  ApxProgressMeter m;
  apx_progress_init(&m, f, APX_PROGRESS_FORM_LINES, 25, 100, 0, 8, 0);
  for (int s = 1; s <= 100; s++) {
    ApxProgressValues v = At(s);
    apx_progress_step(&m, &v, s * 1.0, s == 7);  // `force` (a skipped step) is for terminals only
  }
  std::string s = Text(f);
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(m.printed, 4);
  EXPECT_NE(s.find("step 25/100"), std::string::npos);
  EXPECT_NE(s.find("step 100/100"), std::string::npos);
  EXPECT_NE(s.find("ETA 0s"), std::string::npos) << s;
  fclose(f);
}

TEST(Progress, PlainLinesByTimeAndAShortRunPrintsNone) {
  FILE *f = tmpfile();
  ApxProgressMeter m;
  apx_progress_init(&m, f, APX_PROGRESS_FORM_LINES, 0, 100, 0, 8, 0);
  for (int s = 1; s <= 100; s++) {  // 100 ms a step: 10 s in all
    ApxProgressValues v = At(s);
    apx_progress_step(&m, &v, s * 100.0, 0);
  }
  EXPECT_EQ(m.printed, 1);  // at 10 s, which is the last step
  fclose(f);
  f = tmpfile();
  apx_progress_init(&m, f, APX_PROGRESS_FORM_LINES, 0, 100, 0, 8, 0);
  for (int s = 1; s <= 100; s++) {  // 250 ms a step: 25 s in all
    ApxProgressValues v = At(s);
    apx_progress_step(&m, &v, s * 250.0, 0);
  }
  std::string s = Text(f);
  EXPECT_EQ(m.printed, 3);  // at 10 s, 20 s, and the last step
  EXPECT_NE(s.find("step 40/100"), std::string::npos) << s;
  EXPECT_NE(s.find("step 80/100"), std::string::npos) << s;
  EXPECT_NE(s.find("step 100/100"), std::string::npos) << s;
  fclose(f);
  f = tmpfile();
  apx_progress_init(&m, f, APX_PROGRESS_FORM_LINES, 0, 10, 0, 8, 0);
  for (int s = 1; s <= 10; s++) {
    ApxProgressValues v = At(s);
    v.total = 10;
    apx_progress_step(&m, &v, s * 10.0, 0);
  }
  EXPECT_EQ(Text(f), "");  // a short run: the summary says it all
  fclose(f);
}
