/* tensorboard.c - TensorBoard event files (format in tensorboard.h). */
#include "runtime/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ir/fileio.h"
#include "runtime/tensorboard.pb-c.h"

struct ApxTbWriter {
  FILE *f;
  char *path;
};

static uint32_t masked_crc(const uint8_t *p, size_t n) {
  uint32_t c = apx_crc32c(0, p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void apx_tb_frame(const uint8_t *data, uint64_t len, uint8_t *out) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(len >> (8 * i));
  uint32_t c = masked_crc(out, 8);
  for (int i = 0; i < 4; i++) out[8 + i] = (uint8_t)(c >> (8 * i));
  if (len) memcpy(out + 12, data, (size_t)len);
  c = masked_crc(data, (size_t)len);
  for (int i = 0; i < 4; i++) out[12 + len + (uint64_t)i] = (uint8_t)(c >> (8 * i));
}

static double wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Serializes ev, frames it, appends it and flushes. */
static int write_event(ApxTbWriter *w, const Apexc__Tb__Event *ev, ApxDiag *d) {
  size_t n = apexc__tb__event__get_packed_size(ev);
  uint8_t *buf = malloc(n + 1);
  if (!buf) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", w->path);
  apexc__tb__event__pack(ev, buf);
  uint8_t *rec = malloc(n + 16);
  if (!rec) {
    free(buf);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", w->path);
  }
  apx_tb_frame(buf, n, rec);
  int ok = fwrite(rec, 1, n + 16, w->f) == n + 16 && fflush(w->f) == 0;
  free(buf);
  free(rec);
  if (!ok) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot write the TensorBoard events: %s", w->path, strerror(errno));
  return 0;
}

int apx_tb_init(ApxTbWriter **out, const char *dir, ApxDiag *d) {
  *out = NULL;
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a folder (--tensorboard)", dir);
  } else if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot create the TensorBoard folder: %s", dir, strerror(errno));
  }
  ApxTbWriter *w = calloc(1, sizeof *w);
  char host[64] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  size_t cap = strlen(dir) + sizeof host + 96;
  if (!w || !(w->path = malloc(cap))) {
    free(w);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "apexrun: out of memory");
  }
  snprintf(w->path, cap, "%s/events.out.tfevents.%lld.%s.%d.apexc", dir, (long long)time(NULL), host, (int)getpid());
  if (!(w->f = fopen(w->path, "wb"))) {
    int e = errno;
    free(w->path);
    free(w);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write the TensorBoard events: %s", dir, strerror(e));
  }
  Apexc__Tb__Event ev = APEXC__TB__EVENT__INIT;
  ev.wall_time = wall_time();
  ev.what_case = APEXC__TB__EVENT__WHAT_FILE_VERSION;
  ev.file_version = (char *)"brain.Event:2";
  if (write_event(w, &ev, d)) {
    apx_tb_close(w);
    return -1;
  }
  *out = w;
  return 0;
}

int apx_tb_write_scalars(ApxTbWriter *w, int64_t step, const ApxTbScalar *s, int n, ApxDiag *d) {
  Apexc__Tb__Summary__Value *vals = calloc((size_t)n + 1, sizeof *vals);
  Apexc__Tb__Summary__Value **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
  if (!vals || !ptrs) {
    free(vals);
    free(ptrs);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", w->path);
  }
  for (int i = 0; i < n; i++) {
    apexc__tb__summary__value__init(&vals[i]);
    vals[i].tag = (char *)s[i].tag;
    vals[i].value_case = APEXC__TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    vals[i].simple_value = (float)s[i].value;
    ptrs[i] = &vals[i];
  }
  Apexc__Tb__Summary sum = APEXC__TB__SUMMARY__INIT;
  sum.n_value = (size_t)n;
  sum.value = ptrs;
  Apexc__Tb__Event ev = APEXC__TB__EVENT__INIT;
  ev.wall_time = wall_time();
  ev.step = step;
  ev.what_case = APEXC__TB__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  int rc = write_event(w, &ev, d);
  free(vals);
  free(ptrs);
  return rc;
}

const char *apx_tb_path(const ApxTbWriter *w) { return w ? w->path : ""; }

void apx_tb_close(ApxTbWriter *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  free(w->path);
  free(w);
}
