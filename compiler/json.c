/* json.c - recursive-descent JSON reader into an arena tree, and a streaming writer. */
#include "compiler/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- reader ------------------------------------------------------------------------- */

typedef struct Parser {
  ApxArena *a;
  const char *s;
  size_t len, pos;
  int line;
  size_t line_start;
  char *err;
  size_t cap;
  int failed;
} Parser;

static int fail(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Parser *p, const char *fmt, ...) {
  if (p->failed) return -1;
  p->failed = 1;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(p->err, p->cap, "line %d, column %zu: %s", p->line, p->pos - p->line_start + 1, msg);
  return -1;
}

static void skip_ws(Parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c == '\n') {
      p->line++;
      p->line_start = p->pos + 1;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      break;
    }
    p->pos++;
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(Parser *p, uint32_t *out) {
  if (p->pos + 4 > p->len) return fail(p, "truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p->s[p->pos + i]);
    if (h < 0) return fail(p, "bad hex digit in \\u escape");
    v = v * 16 + (uint32_t)h;
  }
  p->pos += 4;
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* At an opening quote: reads the string into the arena. */
static int parse_string(Parser *p, const char **out, size_t *out_len) {
  p->pos++; /* opening quote */
  size_t start = p->pos, n_raw = 0;
  /* first pass: find the end to size the buffer (escapes only shrink) */
  while (start + n_raw < p->len && p->s[start + n_raw] != '"') {
    if (p->s[start + n_raw] == '\\') n_raw++;
    n_raw++;
  }
  if (start + n_raw >= p->len) return fail(p, "unterminated string");
  char *buf = apx_arena_alloc_raw(p->a, n_raw + 1);
  if (!buf) return fail(p, "out of memory");
  size_t k = 0;
  while (p->s[p->pos] != '"') {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c < 0x20) return fail(p, "control character in string");
    if (c != '\\') {
      buf[k++] = (char)c;
      p->pos++;
      continue;
    }
    p->pos++;
    char e = p->s[p->pos++];
    switch (e) {
      case '"': buf[k++] = '"'; break;
      case '\\': buf[k++] = '\\'; break;
      case '/': buf[k++] = '/'; break;
      case 'b': buf[k++] = '\b'; break;
      case 'f': buf[k++] = '\f'; break;
      case 'n': buf[k++] = '\n'; break;
      case 'r': buf[k++] = '\r'; break;
      case 't': buf[k++] = '\t'; break;
      case 'u': {
        uint32_t cp;
        if (read_hex4(p, &cp)) return -1;
        if (cp >= 0xd800 && cp < 0xdc00) {
          uint32_t lo;
          if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail(p, "unpaired surrogate in \\u escape");
          p->pos += 2;
          if (read_hex4(p, &lo)) return -1;
          if (lo < 0xdc00 || lo >= 0xe000) return fail(p, "unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
          return fail(p, "unpaired surrogate in \\u escape");
        }
        k += put_utf8(buf + k, cp);
        break;
      }
      default: return fail(p, "bad escape '\\%c'", e);
    }
  }
  p->pos++; /* closing quote */
  buf[k] = 0;
  *out = buf;
  *out_len = k;
  return 0;
}

static int parse_number(Parser *p, double *out) {
  size_t i = p->pos;
  if (i < p->len && p->s[i] == '-') i++;
  if (i >= p->len) return fail(p, "bad number");
  if (p->s[i] == '0') {
    i++;
  } else if (p->s[i] >= '1' && p->s[i] <= '9') {
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
  } else {
    return fail(p, "bad number");
  }
  if (i < p->len && p->s[i] == '.') {
    i++;
    if (i >= p->len || p->s[i] < '0' || p->s[i] > '9') return fail(p, "bad number");
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
  }
  if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
    i++;
    if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
    if (i >= p->len || p->s[i] < '0' || p->s[i] > '9') return fail(p, "bad number");
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
  }
  char tmp[64];
  size_t n = i - p->pos;
  if (n >= sizeof tmp) {
    char *big = malloc(n + 1);
    if (!big) return fail(p, "out of memory");
    memcpy(big, p->s + p->pos, n);
    big[n] = 0;
    *out = strtod(big, NULL);
    free(big);
  } else {
    memcpy(tmp, p->s + p->pos, n);
    tmp[n] = 0;
    *out = strtod(tmp, NULL);
  }
  p->pos = i;
  return 0;
}

static int parse_value(Parser *p, ApxJson *out, int depth);

/* Growable temporary list of values (copied into the arena when complete). */
typedef struct List {
  ApxJson *items;
  const char **keys;
  int32_t n, cap;
} List;

static int list_push(Parser *p, List *l, int with_keys) {
  if (l->n < l->cap) return 0;
  int32_t nc = l->cap ? l->cap * 2 : 8;
  ApxJson *ni = realloc(l->items, (size_t)nc * sizeof *ni);
  if (!ni) return fail(p, "out of memory");
  l->items = ni;
  if (with_keys) {
    const char **nk = realloc(l->keys, (size_t)nc * sizeof *nk);
    if (!nk) return fail(p, "out of memory");
    l->keys = nk;
  }
  l->cap = nc;
  return 0;
}

static int list_finish(Parser *p, List *l, ApxJson *out, int with_keys) {
  out->n = l->n;
  out->items = apx_arena_memdup(p->a, l->items ? (void *)l->items : (void *)"", (size_t)l->n * sizeof(ApxJson));
  if (with_keys)
    out->keys = apx_arena_memdup(p->a, l->keys ? (void *)l->keys : (void *)"", (size_t)l->n * sizeof(char *));
  free(l->items);
  free(l->keys);
  if (!out->items || (with_keys && !out->keys)) return fail(p, "out of memory");
  return 0;
}

static int parse_container(Parser *p, ApxJson *out, int depth, int object) {
  char close = object ? '}' : ']';
  p->pos++;
  List l = {0};
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
    return list_finish(p, &l, out, object);
  }
  for (;;) {
    skip_ws(p);
    if (list_push(p, &l, object)) goto bad;
    if (object) {
      if (p->pos >= p->len || p->s[p->pos] != '"') {
        fail(p, "expected a member name in quotes");
        goto bad;
      }
      size_t kl;
      if (parse_string(p, &l.keys[l.n], &kl)) goto bad;
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') {
        fail(p, "expected ':' after member name");
        goto bad;
      }
      p->pos++;
    }
    if (parse_value(p, &l.items[l.n], depth + 1)) goto bad;
    l.n++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->len && p->s[p->pos] == close) {
      p->pos++;
      return list_finish(p, &l, out, object);
    }
    fail(p, "expected ',' or '%c'", close);
    goto bad;
  }
bad:
  free(l.items);
  free(l.keys);
  return -1;
}

static int parse_value(Parser *p, ApxJson *out, int depth) {
  memset(out, 0, sizeof *out);
  if (depth > APX_JSON_MAX_DEPTH) return fail(p, "nesting deeper than %d", APX_JSON_MAX_DEPTH);
  skip_ws(p);
  out->line = p->line;
  if (p->pos >= p->len) return fail(p, "unexpected end of input");
  char c = p->s[p->pos];
  if (c == '{') {
    out->type = APX_JSON_OBJECT;
    return parse_container(p, out, depth, 1);
  }
  if (c == '[') {
    out->type = APX_JSON_ARRAY;
    return parse_container(p, out, depth, 0);
  }
  if (c == '"') {
    out->type = APX_JSON_STRING;
    return parse_string(p, &out->str, &out->len);
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    out->type = APX_JSON_NUMBER;
    return parse_number(p, &out->number);
  }
  static const struct {
    const char *word;
    ApxJsonType t;
    int b;
  } words[] = {{"true", APX_JSON_BOOL, 1}, {"false", APX_JSON_BOOL, 0}, {"null", APX_JSON_NULL, 0}};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t wl = strlen(words[i].word);
    if (p->len - p->pos >= wl && memcmp(p->s + p->pos, words[i].word, wl) == 0) {
      out->type = words[i].t;
      out->boolean = words[i].b;
      p->pos += wl;
      return 0;
    }
  }
  return fail(p, "unexpected character '%c'", c);
}

ApxJson *apx_json_parse(ApxArena *a, const char *text, size_t len, char *err, size_t cap) {
  Parser p = {a, text, len, 0, 1, 0, err, cap, 0};
  if (cap) err[0] = 0;
  ApxJson *root = apx_arena_alloc(a, sizeof *root);
  if (!root) {
    snprintf(err, cap, "out of memory");
    return NULL;
  }
  if (parse_value(&p, root, 0)) return NULL;
  skip_ws(&p);
  if (p.pos != p.len) {
    fail(&p, "unexpected text after the JSON value");
    return NULL;
  }
  return root;
}

const ApxJson *apx_json_get(const ApxJson *obj, const char *key) {
  if (!obj || obj->type != APX_JSON_OBJECT) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}

const char *apx_json_type_name(ApxJsonType t) {
  switch (t) {
    case APX_JSON_NULL: return "null";
    case APX_JSON_BOOL: return "bool";
    case APX_JSON_NUMBER: return "number";
    case APX_JSON_STRING: return "string";
    case APX_JSON_ARRAY: return "array";
    case APX_JSON_OBJECT: return "object";
  }
  return "?";
}

/* ---- writer ------------------------------------------------------------------------- */

void apx_json_writer_init(ApxJsonWriter *w, FILE *f) {
  memset(w, 0, sizeof *w);
  w->f = f;
}

static void indent(ApxJsonWriter *w) {
  fputc('\n', w->f);
  for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
}

static int compact(const ApxJsonWriter *w) {
  return w->inline_depth > 0 && w->depth >= w->inline_depth;
}

/* Before any value: comma and indentation unless it follows a key. */
static void pre_value(ApxJsonWriter *w) {
  if (w->after_key) {
    w->after_key = 0;
    return;
  }
  if (w->depth > 0) {
    int first = w->count[w->depth - 1]++ == 0;
    if (!first) fputc(',', w->f);
    if (!compact(w)) indent(w);
    else if (!first) fputc(' ', w->f);
  }
}

static void begin(ApxJsonWriter *w, char c, int inl) {
  pre_value(w);
  fputc(c, w->f);
  if (w->depth < APX_JSON_MAX_DEPTH - 1) w->depth++;
  w->count[w->depth - 1] = 0;
  if (inl && !w->inline_depth) w->inline_depth = w->depth;
}

static void end(ApxJsonWriter *w, char c) {
  int had = w->depth > 0 && w->count[w->depth - 1];
  int was_compact = compact(w);
  if (w->depth > 0) w->depth--;
  if (w->inline_depth > w->depth) w->inline_depth = 0;
  if (had && !was_compact) indent(w);
  fputc(c, w->f);
  if (w->depth == 0) fputc('\n', w->f);
}

void apx_json_begin_object(ApxJsonWriter *w) { begin(w, '{', 0); }
void apx_json_begin_object_inline(ApxJsonWriter *w) { begin(w, '{', 1); }
void apx_json_end_object(ApxJsonWriter *w) { end(w, '}'); }
void apx_json_begin_array(ApxJsonWriter *w) { begin(w, '[', 0); }
void apx_json_begin_array_inline(ApxJsonWriter *w) { begin(w, '[', 1); }
void apx_json_end_array(ApxJsonWriter *w) { end(w, ']'); }

void apx_json_write_escaped(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      case '\b': fputs("\\b", f); break;
      case '\f': fputs("\\f", f); break;
      default:
        if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
  }
  fputc('"', f);
}

void apx_json_key(ApxJsonWriter *w, const char *key) {
  pre_value(w);
  apx_json_write_escaped(w->f, key);
  fputs(": ", w->f);
  w->after_key = 1;
}

void apx_json_string(ApxJsonWriter *w, const char *s) {
  if (!s) {
    apx_json_null(w);
    return;
  }
  pre_value(w);
  apx_json_write_escaped(w->f, s);
}

void apx_json_number(ApxJsonWriter *w, double x) {
  if (!isfinite(x)) {
    apx_json_null(w);
    return;
  }
  pre_value(w);
  fprintf(w->f, "%.17g", x);
}

void apx_json_int(ApxJsonWriter *w, int64_t x) {
  pre_value(w);
  fprintf(w->f, "%" PRId64, x);
}

void apx_json_bool(ApxJsonWriter *w, int b) {
  pre_value(w);
  fputs(b ? "true" : "false", w->f);
}

void apx_json_null(ApxJsonWriter *w) {
  pre_value(w);
  fputs("null", w->f);
}

void apx_json_kv_string(ApxJsonWriter *w, const char *key, const char *s) {
  apx_json_key(w, key);
  apx_json_string(w, s);
}

void apx_json_kv_int(ApxJsonWriter *w, const char *key, int64_t x) {
  apx_json_key(w, key);
  apx_json_int(w, x);
}

void apx_json_kv_number(ApxJsonWriter *w, const char *key, double x) {
  apx_json_key(w, key);
  apx_json_number(w, x);
}
