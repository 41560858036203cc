// suggest_test.cc - flag spellings: underscores normalized in the name only, Python's booleans,
// and "did you mean" by edit distance (typos found, unrelated names not suggested).
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "ir/suggest.h"
}

TEST(Suggest, UnderscoresBecomeDashesInTheNameOnly) {
  char buf[64];
  EXPECT_EQ(apx_flag_normalize("--loss_scale=dyn_amic", buf, sizeof buf), 1);
  EXPECT_STREQ(buf, "--loss-scale=dyn_amic");
  EXPECT_EQ(apx_flag_normalize("--keep_batchnorm_fp32", buf, sizeof buf), 1);
  EXPECT_STREQ(buf, "--keep-batchnorm-fp32");
  EXPECT_EQ(apx_flag_normalize("--lr", buf, sizeof buf), 0);
  EXPECT_STREQ(buf, "--lr");
  EXPECT_EQ(apx_flag_normalize("my_model.onnx", buf, sizeof buf), 0);  // not a flag
  EXPECT_STREQ(buf, "my_model.onnx");
  EXPECT_EQ(apx_flag_normalize("-q_x", buf, sizeof buf), 0);  // single dash: left alone
  EXPECT_EQ(apx_flag_normalize("--a_very_long_flag_name", buf, 8), -1);
}

TEST(Suggest, PythonBooleans) {
  EXPECT_EQ(apx_bool_parse("True"), 1);
  EXPECT_EQ(apx_bool_parse("False"), 0);
  EXPECT_EQ(apx_bool_parse("YES"), 1);
  EXPECT_EQ(apx_bool_parse("off"), 0);
  EXPECT_EQ(apx_bool_parse(nullptr), 1);
  EXPECT_EQ(apx_bool_parse("maybe"), -1);
  EXPECT_EQ(apx_bool_parse(""), -1);
}

TEST(Suggest, EditDistanceCountsSwapsAsOneEdit) {
  EXPECT_EQ(apx_edit_distance("abc", 3, "abc", 3), 0);
  EXPECT_EQ(apx_edit_distance("abc", 3, "acb", 3), 1);
  EXPECT_EQ(apx_edit_distance("kitten", 6, "sitting", 7), 3);
  EXPECT_EQ(apx_edit_distance("", 0, "abc", 3), 3);
}

TEST(Suggest, NearestKnownFlagOrNone) {
  const char *const names[] = {"--lr", "--log", "--steps", "--weight-decay", "--scale-window",
                               "--checkpoint-dir", "--checkpoint-every", "--seed", nullptr};
  auto s = [&](const char *a) {
    const char *r = apx_flag_suggest(a, names);
    return std::string(r ? r : "(none)");
  };
  EXPECT_EQ(s("--weight-decy"), "--weight-decay");
  EXPECT_EQ(s("--weightdecay"), "--weight-decay");
  EXPECT_EQ(s("--stpes=10"), "--steps");  // the value is not part of the name
  EXPECT_EQ(s("--scale-windwo"), "--scale-window");
  EXPECT_EQ(s("--lt"), "--lr");
  EXPECT_EQ(s("--checkpoint-d"), "--checkpoint-dir");  // a unique prefix
  EXPECT_EQ(s("--checkpoint"), "(none)");               // a prefix of two
  EXPECT_EQ(s("--banana"), "(none)");
  EXPECT_EQ(s("--lr"), "(none)");  // known: nothing to suggest
  EXPECT_EQ(s("--"), "(none)");
}
