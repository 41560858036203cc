/* json.h - a small JSON reader (into an arena-backed tree) and a streaming writer, for
 * --explain=json and --policy. RFC 8259: objects, arrays, strings with escapes (\uXXXX
 * including surrogate pairs, written back as UTF-8), numbers as double, true/false/null.
 * Nesting depth is limited to APX_JSON_MAX_DEPTH; errors give line and column. */
#ifndef APX_JSON_H
#define APX_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/arena.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_JSON_MAX_DEPTH 64

typedef enum ApxJsonType {
  APX_JSON_NULL = 0,
  APX_JSON_BOOL,
  APX_JSON_NUMBER,
  APX_JSON_STRING,
  APX_JSON_ARRAY,
  APX_JSON_OBJECT,
} ApxJsonType;

typedef struct ApxJson {
  ApxJsonType type;
  int32_t line;            /* 1-based line where the value starts */
  int32_t boolean;         /* BOOL */
  double number;           /* NUMBER */
  const char *str;         /* STRING (NUL-terminated; may hold embedded NULs, see len) */
  size_t len;              /* STRING byte length */
  int32_t n;               /* ARRAY / OBJECT element count */
  struct ApxJson *items;   /* ARRAY elements / OBJECT member values, in order */
  const char **keys;       /* OBJECT member names, in order */
} ApxJson;

/* Parses text[0..len) into a tree allocated from a. Returns the root, or NULL with
 * "line L, column C: <what>" in err. Trailing non-space text is an error. */
ApxJson *apx_json_parse(ApxArena *a, const char *text, size_t len, char *err, size_t cap);
/* Member of an object by name (first match), NULL if absent or obj is not an object. */
const ApxJson *apx_json_get(const ApxJson *obj, const char *key);
/* "null", "bool", "number", "string", "array", "object" */
const char *apx_json_type_name(ApxJsonType t);

/* Streaming writer with indentation (2 spaces); keeps commas and nesting right. */
typedef struct ApxJsonWriter {
  FILE *f;
  int depth;
  int count[APX_JSON_MAX_DEPTH]; /* elements written at each level */
  int after_key;
  int inline_depth;              /* > 0: levels from this depth on are written on one line */
} ApxJsonWriter;

void apx_json_writer_init(ApxJsonWriter *w, FILE *f);
void apx_json_begin_object(ApxJsonWriter *w);
void apx_json_end_object(ApxJsonWriter *w);
void apx_json_begin_array(ApxJsonWriter *w);
void apx_json_end_array(ApxJsonWriter *w);
/* As begin_object / begin_array, with the whole container (nested ones too) on one line. */
void apx_json_begin_object_inline(ApxJsonWriter *w);
void apx_json_begin_array_inline(ApxJsonWriter *w);
void apx_json_key(ApxJsonWriter *w, const char *key);
void apx_json_string(ApxJsonWriter *w, const char *s); /* NULL writes null */
void apx_json_number(ApxJsonWriter *w, double x);      /* non-finite writes null */
void apx_json_int(ApxJsonWriter *w, int64_t x);
void apx_json_bool(ApxJsonWriter *w, int b);
void apx_json_null(ApxJsonWriter *w);
/* Convenience: key + value. */
void apx_json_kv_string(ApxJsonWriter *w, const char *key, const char *s);
void apx_json_kv_int(ApxJsonWriter *w, const char *key, int64_t x);
void apx_json_kv_number(ApxJsonWriter *w, const char *key, double x);
/* Writes s as a JSON string literal (quotes and escapes) to f. */
void apx_json_write_escaped(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif
