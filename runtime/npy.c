/* npy.c - NumPy .npy reader and writer (npy.h). */
#include "runtime/npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/fileio.h"

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static int bad(ApxDiag *d, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(ApxDiag *d, const char *name, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a valid .npy file: %s", name, msg);
}

const char *apx_npy_descr(ApxDType t) {
  switch (t) {
    case APX_DT_BOOL: return "|b1";
    case APX_DT_I8: return "|i1";
    case APX_DT_U8: return "|u1";
    case APX_DT_I16: return "<i2";
    case APX_DT_U16: return "<u2";
    case APX_DT_I32: return "<i4";
    case APX_DT_U32: return "<u4";
    case APX_DT_I64: return "<i8";
    case APX_DT_U64: return "<u8";
    case APX_DT_F16: return "<f2";
    case APX_DT_F32: return "<f4";
    case APX_DT_F64: return "<f8";
    default: return NULL;
  }
}

/* ---- header dictionary: a tiny reader for the Python literal numpy writes ---- */

typedef struct Lex {
  const char *p, *end;
} Lex;

static void skip_ws(Lex *x) {
  while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r')) x->p++;
}

static int eat(Lex *x, char c) {
  skip_ws(x);
  if (x->p < x->end && *x->p == c) {
    x->p++;
    return 1;
  }
  return 0;
}

/* A quoted string into buf (cap bytes); 0 on success. */
static int lex_string(Lex *x, char *buf, size_t cap) {
  skip_ws(x);
  if (x->p >= x->end || (*x->p != '\'' && *x->p != '"')) return -1;
  char q = *x->p++;
  size_t n = 0;
  while (x->p < x->end && *x->p != q) {
    if (*x->p == '\\' || n + 1 >= cap) return -1;
    buf[n++] = *x->p++;
  }
  if (x->p >= x->end) return -1;
  x->p++;
  buf[n] = 0;
  return 0;
}

static int lex_word(Lex *x, const char *w) {
  skip_ws(x);
  size_t n = strlen(w);
  if ((size_t)(x->end - x->p) >= n && memcmp(x->p, w, n) == 0) {
    x->p += n;
    return 1;
  }
  return 0;
}

/* A non-negative integer (optionally with a Python 2 'L' suffix) <= 2^62. */
static int lex_dim(Lex *x, int64_t *v) {
  skip_ws(x);
  if (x->p >= x->end || *x->p < '0' || *x->p > '9') return -1;
  int64_t r = 0;
  while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
    if (r > ((int64_t)1 << 62) / 10) return -1;
    r = r * 10 + (*x->p++ - '0');
  }
  if (x->p < x->end && (*x->p == 'L' || *x->p == 'l')) x->p++;
  *v = r;
  return 0;
}

typedef struct Header {
  char descr[64];
  int fortran;
  int rank;
  int64_t dims[APX_MAX_RANK];
  int seen_descr, seen_fortran, seen_shape;
} Header;

static int parse_header(const char *s, size_t len, const char *name, Header *h, ApxDiag *d) {
  Lex x = {s, s + len};
  memset(h, 0, sizeof *h);
  if (!eat(&x, '{')) return bad(d, name, "header does not start with '{'");
  for (;;) {
    if (eat(&x, '}')) break;
    char key[32];
    if (lex_string(&x, key, sizeof key)) return bad(d, name, "header: expected a quoted key");
    if (!eat(&x, ':')) return bad(d, name, "header: expected ':' after '%s'", key);
    if (!strcmp(key, "descr")) {
      if (h->seen_descr++) return bad(d, name, "header: 'descr' given twice");
      skip_ws(&x);
      if (x.p < x.end && *x.p == '[')
        return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                              "%s: not supported yet: structured dtype (a record array); save "
                              "one plain array per input", name);
      if (lex_string(&x, h->descr, sizeof h->descr)) return bad(d, name, "header: 'descr' is not a string");
    } else if (!strcmp(key, "fortran_order")) {
      if (h->seen_fortran++) return bad(d, name, "header: 'fortran_order' given twice");
      if (lex_word(&x, "True")) h->fortran = 1;
      else if (lex_word(&x, "False")) h->fortran = 0;
      else return bad(d, name, "header: 'fortran_order' is not True or False");
    } else if (!strcmp(key, "shape")) {
      if (h->seen_shape++) return bad(d, name, "header: 'shape' given twice");
      if (!eat(&x, '(')) return bad(d, name, "header: 'shape' is not a tuple");
      for (;;) {
        if (eat(&x, ')')) break;
        if (h->rank >= APX_MAX_RANK)
          return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet: more than %d dimensions",
                                name, APX_MAX_RANK);
        if (lex_dim(&x, &h->dims[h->rank]))
          return bad(d, name, "header: shape entry %d is not a non-negative integer", h->rank);
        h->rank++;
        if (eat(&x, ',')) continue;
        if (eat(&x, ')')) break;
        return bad(d, name, "header: expected ',' or ')' in 'shape'");
      }
    } else {
      return bad(d, name, "header: unexpected key '%s'", key);
    }
    if (eat(&x, ',')) continue;
    if (eat(&x, '}')) break;
    return bad(d, name, "header: expected ',' or '}' after '%s'", key);
  }
  skip_ws(&x);
  if (x.p != x.end) return bad(d, name, "header: text after the closing '}'");
  if (!h->seen_descr || !h->seen_fortran || !h->seen_shape)
    return bad(d, name, "header lacks '%s'",
               !h->seen_descr ? "descr" : !h->seen_fortran ? "fortran_order" : "shape");
  return 0;
}

/* descr -> dtype and byte order ('<' little, '>' big); 0 or -1. */
static int descr_dtype(const char *s, ApxDType *t, int *big) {
  size_t n = strlen(s);
  if (n < 3) return -1;
  char order = s[0], kind = s[1];
  if (order != '<' && order != '>' && order != '=' && order != '|') return -1;
  char *end;
  long size = strtol(s + 2, &end, 10);
  if (*end) return -1;
  *big = order == '>';
  switch (kind) {
    case 'b': *t = size == 1 ? APX_DT_BOOL : APX_DT_UNDEFINED; break;
    case '?': *t = size == 1 ? APX_DT_BOOL : APX_DT_UNDEFINED; break;
    case 'i':
      *t = size == 1 ? APX_DT_I8 : size == 2 ? APX_DT_I16 : size == 4 ? APX_DT_I32 : size == 8 ? APX_DT_I64 : APX_DT_UNDEFINED;
      break;
    case 'u':
      *t = size == 1 ? APX_DT_U8 : size == 2 ? APX_DT_U16 : size == 4 ? APX_DT_U32 : size == 8 ? APX_DT_U64 : APX_DT_UNDEFINED;
      break;
    case 'f': *t = size == 2 ? APX_DT_F16 : size == 4 ? APX_DT_F32 : size == 8 ? APX_DT_F64 : APX_DT_UNDEFINED; break;
    default: *t = APX_DT_UNDEFINED;
  }
  return *t == APX_DT_UNDEFINED ? -1 : 0;
}

static void byteswap(uint8_t *p, size_t n_elems, size_t size) {
  for (size_t i = 0; i < n_elems; i++, p += size)
    for (size_t a = 0, b = size - 1; a < b; a++, b--) {
      uint8_t t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* The fixed prefix: magic, version, header length. 0 with *hoff (where the dictionary starts)
 * and *hlen, or -1. len: bytes available at b (at least the first 12 of the file, or all). */
static int parse_prefix(const uint8_t *b, size_t len, const char *name, int *major, size_t *hoff,
                        size_t *hlen, ApxDiag *d) {
  if (len < 10 || memcmp(b, npy_magic, 6) != 0) return bad(d, name, "no \\x93NUMPY magic");
  *major = b[6];
  if (*major == 1) {
    *hlen = (size_t)b[8] | (size_t)b[9] << 8;
    *hoff = 10;
  } else if (*major == 2 || *major == 3) {
    if (len < 12) return bad(d, name, "truncated header");
    *hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    *hoff = 12;
  } else {
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not supported yet: .npy format version %d.%d",
                          name, *major, b[7]);
  }
  return 0;
}

/* The dictionary (hlen bytes at s) into out's dtype, shape, numel, bytes (data stays NULL);
 * *big: big-endian elements. The file's total size must be doff + bytes: checked by the
 * caller against `file_len`, before any element is read. */
static int parse_dict(const char *s, size_t hlen, const char *name, int major, size_t doff,
                      uint64_t file_len, ApxNpy *out, int *big, ApxDiag *d) {
  Header h;
  if (parse_header(s, hlen, name, &h, d)) return -1;
  ApxDType t;
  if (descr_dtype(h.descr, &t, big))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: not supported yet: numpy dtype '%s' (supported: bool, int8..int64, "
                          "uint8..uint64, float16, float32, float64)", name, h.descr);
  if (h.fortran)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: not supported yet: Fortran-ordered array (save it with "
                          "np.ascontiguousarray)", name);
  size_t es = apx_dtype_size(t);
  int64_t numel = 1;
  for (int i = 0; i < h.rank; i++) {
    if (h.dims[i] != 0 && numel > INT64_MAX / 16 / h.dims[i]) return bad(d, name, "shape too large");
    numel *= h.dims[i];
  }
  if ((uint64_t)numel > (uint64_t)SIZE_MAX / es) return bad(d, name, "shape too large");
  uint64_t want = (uint64_t)numel * es, have = file_len - doff;
  if (have < want)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: truncated: the header promises %" PRId64 " elements (%" PRIu64 " bytes), "
                          "the file holds %" PRIu64 " data bytes", name, numel, want, have);
  if (have > want)
    return bad(d, name, "%" PRIu64 " bytes after the %" PRIu64 " data bytes the header promises",
               have - want, want);
  out->dtype = t;
  out->rank = h.rank;
  memcpy(out->dims, h.dims, sizeof out->dims);
  out->numel = numel;
  out->bytes = (size_t)want;
  out->version = major;
  out->data_offset = doff;
  return 0;
}

/* Byte order and bool normalization of freshly read elements. */
static void fix_elements(ApxNpy *a, int big) {
  size_t es = apx_dtype_size(a->dtype);
  if (big && es > 1) byteswap(a->data, (size_t)a->numel, es);
  if (a->dtype == APX_DT_BOOL) /* numpy writes 0/1; normalize anything else */
    for (size_t i = 0; i < a->bytes; i++) ((uint8_t *)a->data)[i] = ((uint8_t *)a->data)[i] != 0;
}

int apx_npy_parse(const void *buf, size_t len, const char *name, ApxNpy *out, ApxDiag *d) {
  memset(out, 0, sizeof *out);
  const uint8_t *b = buf;
  int major, big;
  size_t hlen, hoff;
  if (parse_prefix(b, len, name, &major, &hoff, &hlen, d)) return -1;
  if (hlen > len - hoff) return bad(d, name, "header of %zu bytes runs past the end of the file (%zu bytes)", hlen, len);
  ApxNpy a;
  memset(&a, 0, sizeof a);
  if (parse_dict((const char *)b + hoff, hlen, name, major, hoff + hlen, len, &a, &big, d)) return -1;
  a.data = malloc(a.bytes ? a.bytes : 1);
  if (!a.data) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory (%zu bytes)", name, a.bytes);
  memcpy(a.data, b + a.data_offset, a.bytes);
  fix_elements(&a, big);
  *out = a;
  return 0;
}

/* Header of an open file: prefix and dictionary read and checked against the file size; no
 * element is read. */
static int read_header(ApxInFile *f, ApxNpy *out, int *big, ApxDiag *d) {
  uint8_t pre[12] = {0};
  size_t n = f->size < sizeof pre ? (size_t)f->size : sizeof pre;
  if (apx_infile_pread(f, pre, n, 0, d)) return -1;
  int major;
  size_t hlen, hoff;
  if (parse_prefix(pre, n, f->path, &major, &hoff, &hlen, d)) return -1;
  if (hlen > f->size - hoff)
    return bad(d, f->path, "header of %zu bytes runs past the end of the file (%" PRIu64 " bytes)",
               hlen, f->size);
  if (hlen > APX_NPY_MAX_HEADER)
    return bad(d, f->path, "header of %zu bytes, more than the %d bytes this reader accepts (numpy "
               "writes a few hundred)", hlen, APX_NPY_MAX_HEADER);
  char *h = malloc(hlen + 1);
  if (!h) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", f->path);
  int rc = apx_infile_pread(f, h, hlen, hoff, d);
  if (!rc) rc = parse_dict(h, hlen, f->path, major, hoff + hlen, f->size, out, big, d);
  out->file_bytes = f->size;
  free(h);
  return rc;
}

int apx_npy_read_header(const char *path, ApxNpy *out, ApxDiag *d) {
  memset(out, 0, sizeof *out);
  ApxInFile f;
  if (apx_infile_open(&f, path, ".npy file", d)) return -1;
  int big, rc = read_header(&f, out, &big, d);
  apx_infile_close(&f);
  return rc;
}

int apx_npy_read(const char *path, ApxNpy *out, ApxDiag *d) {
  memset(out, 0, sizeof *out);
  ApxInFile f;
  if (apx_infile_open(&f, path, ".npy file", d)) return -1;
  ApxNpy a;
  memset(&a, 0, sizeof a);
  int big, rc = read_header(&f, &a, &big, d);
  if (!rc) { /* exactly the elements the header declares */
    a.data = malloc(a.bytes ? a.bytes : 1);
    if (!a.data)
      rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory (%zu bytes)", path, a.bytes);
    else
      rc = apx_infile_pread(&f, a.data, a.bytes, a.data_offset, d);
  }
  apx_infile_close(&f);
  if (rc) {
    free(a.data);
    return -1;
  }
  fix_elements(&a, big);
  *out = a;
  return 0;
}

void apx_npy_free(ApxNpy *a) {
  free(a->data);
  memset(a, 0, sizeof *a);
}

int apx_npy_write(const char *path, const ApxTensor *t, ApxDiag *d) {
  const char *descr = apx_npy_descr(t->dtype);
  if (!descr)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: numpy has no dtype for %s", path,
                          apx_dtype_name(t->dtype));
  char dict[512];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < t->rank; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%" PRId64 "%s", t->dims[i],
                  t->rank == 1 || i + 1 < t->rank ? ", " : "");
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  /* pad with spaces so magic + length + dict + '\n' is a multiple of 64 */
  size_t total = 10 + (size_t)n + 1;
  size_t padded = (total + 63) / 64 * 64;
  size_t hlen = padded - 10;
  uint8_t pre[10];
  memcpy(pre, npy_magic, 6);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = (uint8_t)(hlen & 0xff);
  pre[9] = (uint8_t)(hlen >> 8);
  FILE *f = fopen(path, "wb");
  if (!f) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
  for (size_t i = 10 + (size_t)n; ok && i < padded - 1; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  size_t bytes = apx_tensor_bytes(t);
  ok = ok && (bytes == 0 || fwrite(t->data, 1, bytes, f) == bytes);
  if (fclose(f) != 0) ok = 0;
  if (!ok) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: write failed: %s", path, strerror(errno));
  return 0;
}
