// json_test.cc - the JSON reader and writer used by --explain=json and --policy.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include "compiler/json.h"
}

namespace {

struct Arena {
  ApxArena a;
  Arena() { apx_arena_init(&a); }
  ~Arena() { apx_arena_free(&a); }
};

ApxJson *parse(Arena &ar, const std::string &s, std::string *err = nullptr) {
  char e[256];
  ApxJson *j = apx_json_parse(&ar.a, s.data(), s.size(), e, sizeof e);
  if (err) *err = e;
  return j;
}

}  // namespace

TEST(Json, ParsesEveryValueType) {
  Arena ar;
  ApxJson *j = parse(ar, R"({"a": [1, -2.5e3, true, false, null], "s": "x\"y\\n\u00e9\ud83d\ude00", "o": {}})");
  ASSERT_NE(j, nullptr);
  ASSERT_EQ(j->type, APX_JSON_OBJECT);
  const ApxJson *a = apx_json_get(j, "a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->n, 5);
  EXPECT_EQ(a->items[0].number, 1.0);
  EXPECT_EQ(a->items[1].number, -2500.0);
  EXPECT_EQ(a->items[2].type, APX_JSON_BOOL);
  EXPECT_EQ(a->items[2].boolean, 1);
  EXPECT_EQ(a->items[3].boolean, 0);
  EXPECT_EQ(a->items[4].type, APX_JSON_NULL);
  const ApxJson *s = apx_json_get(j, "s");
  EXPECT_EQ(std::string(s->str, s->len), "x\"y\\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(apx_json_get(j, "o")->type, APX_JSON_OBJECT);
  EXPECT_EQ(apx_json_get(j, "o")->n, 0);
  EXPECT_EQ(apx_json_get(j, "missing"), nullptr);
}

TEST(Json, ErrorsGiveLineAndColumn) {
  Arena ar;
  std::string err;
  EXPECT_EQ(parse(ar, "{\n  \"a\": [1, 2,]\n}", &err), nullptr);
  EXPECT_EQ(err, "line 2, column 14: unexpected character ']'");
  EXPECT_EQ(parse(ar, "{\"a\" 1}", &err), nullptr);
  EXPECT_EQ(err, "line 1, column 6: expected ':' after member name");
  EXPECT_EQ(parse(ar, "[1] x", &err), nullptr);
  EXPECT_EQ(err, "line 1, column 5: unexpected text after the JSON value");
  EXPECT_EQ(parse(ar, "\"abc", &err), nullptr);
  EXPECT_EQ(err, "line 1, column 2: unterminated string");
  EXPECT_EQ(parse(ar, "01", &err), nullptr);
  EXPECT_EQ(parse(ar, "\"\\ud800\"", &err), nullptr);
  EXPECT_EQ(parse(ar, std::string(100, '['), &err), nullptr);
  EXPECT_NE(err.find("nesting deeper than 64"), std::string::npos) << err;
  EXPECT_EQ(parse(ar, "", &err), nullptr);
}

TEST(Json, WriterOutputParsesBack) {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ApxJsonWriter w;
  apx_json_writer_init(&w, f);
  apx_json_begin_object(&w);
  apx_json_kv_string(&w, "name", "a\"b\n\x01");
  apx_json_kv_int(&w, "big", 1234567890123LL);
  apx_json_kv_number(&w, "x", 0.1);
  apx_json_kv_number(&w, "inf", 1.0 / 0.0);
  apx_json_key(&w, "rows");
  apx_json_begin_array(&w);
  for (int i = 0; i < 3; i++) {
    apx_json_begin_object_inline(&w);
    apx_json_kv_int(&w, "i", i);
    apx_json_key(&w, "l");
    apx_json_begin_array(&w);
    apx_json_int(&w, i);
    apx_json_null(&w);
    apx_json_end_array(&w);
    apx_json_end_object(&w);
  }
  apx_json_end_array(&w);
  apx_json_key(&w, "empty");
  apx_json_begin_array(&w);
  apx_json_end_array(&w);
  apx_json_end_object(&w);
  fclose(f);
  std::string text(buf, len);
  free(buf);
  // inline objects are one line each
  EXPECT_NE(text.find("\n    {\"i\": 1, \"l\": [1, null]},\n"), std::string::npos) << text;
  Arena ar;
  std::string err;
  ApxJson *j = parse(ar, text, &err);
  ASSERT_NE(j, nullptr) << err << "\n" << text;
  EXPECT_STREQ(apx_json_get(j, "name")->str, "a\"b\n\x01");
  EXPECT_EQ(apx_json_get(j, "big")->number, 1234567890123.0);
  EXPECT_EQ(apx_json_get(j, "x")->number, 0.1);
  EXPECT_EQ(apx_json_get(j, "inf")->type, APX_JSON_NULL);
  EXPECT_EQ(apx_json_get(j, "rows")->n, 3);
  EXPECT_EQ(apx_json_get(&apx_json_get(j, "rows")->items[2], "i")->number, 2.0);
  EXPECT_EQ(apx_json_get(j, "empty")->n, 0);
}
