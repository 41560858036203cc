/* fileio.c - file helpers shared by plan and checkpoint files and every input reader
 * (fileio.h). */
#include "ir/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC32C --------------------------------------------------------------------------- */

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
  while (n--) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
#include <pthread.h>

/* The crc32 instruction has a 3-cycle latency and issues one per cycle: large buffers run as
 * three independent streams of LANE bytes each, joined as
 *   crc(c, A B C) = shift(shift(crc(c, A)) ^ crc(0, B)) ^ crc(0, C),
 * where shift(x) is the register after LANE zero bytes from x (linear in x: four table
 * lookups, the tables built once from the 32 basis registers). The register here is the raw
 * one; apx_crc32c does the inversions. */
enum { LANE = 8192 };
static uint32_t g_shift[4][256];
static pthread_once_t g_shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static void shift_init(void) {
  uint32_t basis[32];
  for (int i = 0; i < 32; i++) {
    uint64_t c = (uint64_t)1 << i;
    for (int k = 0; k < LANE / 8; k++) c = _mm_crc32_u64(c, 0);
    basis[i] = (uint32_t)c;
  }
  for (int k = 0; k < 4; k++)
    for (int b = 0; b < 256; b++) {
      uint32_t v = 0;
      for (int j = 0; j < 8; j++)
        if ((b >> j) & 1) v ^= basis[8 * k + j];
      g_shift[k][b] = v;
    }
}

static uint32_t shift_lane(uint32_t c) {
  return g_shift[0][c & 255] ^ g_shift[1][(c >> 8) & 255] ^ g_shift[2][(c >> 16) & 255] ^
         g_shift[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                             size_t n) {
  uint64_t c = crc;
  while (n && ((uintptr_t)p & 7)) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  if (n >= 3 * (size_t)LANE) pthread_once(&g_shift_once, shift_init);
  while (n >= 3 * (size_t)LANE) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < LANE; i += 8) {
      uint64_t w0, w1, w2;
      memcpy(&w0, p + i, 8);
      memcpy(&w1, p + LANE + i, 8);
      memcpy(&w2, p + 2 * LANE + i, 8);
      c = _mm_crc32_u64(c, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = shift_lane(shift_lane((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
    p += 3 * (size_t)LANE;
    n -= 3 * (size_t)LANE;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
  return (uint32_t)c;
}
#endif

uint32_t apx_crc32c(uint32_t crc, const void *buf, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc32c_hw(crc, buf, n);
#endif
  return ~crc32c_sw(crc, buf, n);
}

/* ---- durable renames ----------------------------------------------------------------- */

void apx_fsync_dir_of(const char *path) {
  char *dir = strdup(path);
  char *slash = dir ? strrchr(dir, '/') : NULL;
  const char *dn = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
  int dfd = open(dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  free(dir);
}

int apx_exists_not_regular(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}

/* ---- bounded reads of input files ---------------------------------------------------- */

static const char *kind_of(mode_t m) {
  return S_ISDIR(m) ? "not a regular file (a folder)"
         : S_ISFIFO(m) ? "not a regular file (a FIFO)"
         : S_ISCHR(m) ? "not a regular file (a character device)"
         : S_ISBLK(m) ? "not a regular file (a block device)"
         : S_ISSOCK(m) ? "not a regular file (a socket)"
                       : "not a regular file";
}

int apx_open_regular(const char *path, int extra_flags, uint64_t *size, const char **why) {
  *why = NULL;
  *size = 0;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | extra_flags);
  if (fd < 0) {
    struct stat st; /* a socket cannot be opened at all (ENXIO): say what it is */
    if (errno == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) *why = kind_of(st.st_mode);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    *why = kind_of(st.st_mode);
    errno = EINVAL;
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = (uint64_t)st.st_size;
  return fd;
}

int apx_infile_open(ApxInFile *f, const char *path, const char *what, ApxDiag *d) {
  f->fd = -1;
  f->size = 0;
  f->path = path;
  f->what = what ? what : "";
  const char *sp = *f->what ? " " : "";
  const char *why;
  int fd = apx_open_regular(path, 0, &f->size, &why);
  if (fd >= 0) {
    f->fd = fd;
    return 0;
  }
  if (!why)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot open%s%s: %s", path, sp, f->what,
                          strerror(errno));
  /* a symlink: say where it leads (a link to /dev/zero reads as a device) */
  struct stat lst;
  char target[PATH_MAX];
  size_t wl = strlen(why);
  if (wl && why[wl - 1] == ')' && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) &&
      realpath(path, target))
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot read%s%s: %.*s: %s)", path, sp, f->what,
                          (int)wl - 1, why, target);
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot read%s%s: %s", path, sp, f->what, why);
}

int apx_infile_pread(const ApxInFile *f, void *buf, size_t n, uint64_t off, ApxDiag *d) {
  const char *sp = *f->what ? " " : "";
  size_t got = 0;
  while (got < n) {
    size_t want = n - got < ((size_t)1 << 30) ? n - got : ((size_t)1 << 30);
    ssize_t r = pread(f->fd, (uint8_t *)buf + got, want, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot read%s%s: %s", f->path, sp, f->what,
                            strerror(errno));
    if (r == 0)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "%s: %s%sended after %" PRIu64 " of %" PRIu64 " bytes (the file shrank "
                            "while it was read)", f->path, f->what, sp, off + got, f->size);
    got += (size_t)r;
  }
  return 0;
}

int apx_infile_read_all(ApxInFile *f, uint64_t max_bytes, const char *limit_why, uint8_t **buf,
                        ApxDiag *d) {
  *buf = NULL;
  if (f->size > max_bytes || f->size > (uint64_t)SIZE_MAX - 1)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: %s%sof %" PRIu64 " bytes, more than the %" PRIu64
                          " bytes %s", f->path, f->what, *f->what ? " " : "", f->size, max_bytes,
                          limit_why ? limit_why : "this reader accepts");
  uint8_t *b = malloc((size_t)f->size + 1);
  if (!b)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory reading %" PRIu64 " bytes", f->path,
                          f->size);
  if (apx_infile_pread(f, b, (size_t)f->size, 0, d)) {
    free(b);
    return -1;
  }
  b[f->size] = 0;
  *buf = b;
  return 0;
}

void apx_infile_close(ApxInFile *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

int apx_read_file_bounded(const char *path, const char *what, uint64_t max_bytes,
                          const char *limit_why, uint8_t **buf, size_t *len, ApxDiag *d) {
  *buf = NULL;
  *len = 0;
  ApxInFile f;
  if (apx_infile_open(&f, path, what, d)) return -1;
  int rc = apx_infile_read_all(&f, max_bytes, limit_why, buf, d);
  if (!rc) *len = (size_t)f.size;
  apx_infile_close(&f);
  return rc;
}

/* ---- checked writes ------------------------------------------------------------------ */

int apx_write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return errno = ENOSPC, -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* ---- paths --------------------------------------------------------------------------- */

/* Appends the components of rel to abs (a malloc'ed absolute path), "." dropped and ".."
 * removing the last component. Returns the new malloc'ed path (abs freed) or NULL. */
static char *append_lexically(char *abs, const char *rel) {
  size_t cap = strlen(abs) + strlen(rel) + 2;
  char *out = realloc(abs, cap);
  if (!out) {
    free(abs);
    return NULL;
  }
  size_t n = strlen(out);
  while (*rel) {
    while (*rel == '/') rel++;
    if (!*rel) break;
    size_t k = strcspn(rel, "/");
    if (k == 1 && rel[0] == '.') {
    } else if (k == 2 && rel[0] == '.' && rel[1] == '.') {
      while (n > 1 && out[n - 1] != '/') n--;
      if (n > 1) n--;
      out[n] = 0;
    } else {
      if (n > 1) out[n++] = '/';
      memcpy(out + n, rel, k);
      n += k;
      out[n] = 0;
    }
    rel += k;
  }
  return out;
}

char *apx_canonical_path(const char *path) {
  char *r = realpath(path, NULL);
  if (r) return r;
  char *buf = strdup(path);
  if (!buf) return NULL;
  /* the longest prefix ending before a '/' that resolves, then the rest lexically */
  for (size_t cut = strlen(path); cut-- > 0;) {
    if (path[cut] != '/') continue;
    buf[cut] = 0;
    char *base = realpath(cut ? buf : "/", NULL);
    if (base) {
      free(buf);
      return append_lexically(base, path + cut);
    }
  }
  free(buf);
  char *start = realpath(path[0] == '/' ? "/" : ".", NULL);
  return start ? append_lexically(start, path) : NULL;
}

int apx_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  char *ca = apx_canonical_path(a), *cb = apx_canonical_path(b);
  int same = ca && cb ? strcmp(ca, cb) == 0 : strcmp(a, b) == 0;
  free(ca);
  free(cb);
  return same;
}
