// text_test.cc - apx_text_wrap: lines within the width, breaks at spaces then commas,
// over-long words cut at the width, hanging indent.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include "ir/text.h"
}

namespace {

std::string Wrap(const char *prefix, int indent, const char *text, int width) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  apx_text_wrap(f, prefix, indent, text, width);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

TEST(TextWrap, ShortTextIsOneLine) { EXPECT_EQ(Wrap("  ", 4, "a b c", 20), "  a b c\n"); }

TEST(TextWrap, BreaksAtTheLastSpaceThatFits) {
  EXPECT_EQ(Wrap("", 2, "aaa bbb ccc ddd", 9), "aaa bbb\n  ccc ddd\n");
}

TEST(TextWrap, PrefixCountsOnTheFirstLine) {
  EXPECT_EQ(Wrap("note: ", 6, "aaa bbb ccc", 12), "note: aaa\n      bbb\n      ccc\n");
}

TEST(TextWrap, BreaksAfterACommaWhenNoSpaceFits) {
  EXPECT_EQ(Wrap("", 0, "fp16x3,fp32x21,i64", 10), "fp16x3,\nfp32x21,\ni64\n");
}

TEST(TextWrap, OverlongWordIsCutAtTheWidth) {
  EXPECT_EQ(Wrap("", 1, "x a_very_long_name y", 10), "x\n a_very_lo\n ng_name y\n");
}

TEST(TextWrap, EmptyTextWritesThePrefix) { EXPECT_EQ(Wrap("summary", 2, "", 40), "summary\n"); }

TEST(TextWrap, EveryLineFitsTheWidth) {
  std::string text;
  for (int i = 0; i < 200; i++) text += "word" + std::to_string(i) + (i % 7 ? " " : ", ");
  std::string out = Wrap("    ", 6, text.c_str(), 50);
  size_t start = 0;
  int lines = 0;
  while (start < out.size()) {
    size_t nl = out.find('\n', start);
    ASSERT_NE(nl, std::string::npos);
    EXPECT_LE(nl - start, 50u) << out.substr(start, nl - start);
    start = nl + 1;
    lines++;
  }
  EXPECT_GT(lines, 20);
}

TEST(TextWrapNext, ReportsLengthAndAdvance) {
  size_t adv = 0;
  EXPECT_EQ(apx_text_wrap_next("abc   def", 5, &adv), 3u);
  EXPECT_EQ(adv, 6u);
  EXPECT_EQ(apx_text_wrap_next("", 5, &adv), 0u);
  EXPECT_EQ(adv, 0u);
}

}  // namespace
