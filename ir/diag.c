/* diag.c - first-error recording (plus appended lines for multi-problem reports) and
 * warnings. */
#include "ir/diag.h"

#include <string.h>

void apx_diag_init(ApxDiag *d) { memset(d, 0, sizeof *d); }

int apx_diag_verror(ApxDiag *d, int code, const char *fmt, va_list ap) {
  if (d->code == 0) {
    d->code = code ? code : APX_EXIT_BAD_INPUT;
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    /* one line: newlines inside names would break the contract */
    for (char *p = d->msg; *p; p++)
      if (*p == '\n' || *p == '\r') *p = ' ';
  }
  return -1;
}

int apx_diag_error(ApxDiag *d, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  apx_diag_verror(d, code, fmt, ap);
  va_end(ap);
  return -1;
}

int apx_diag_error_append(ApxDiag *d, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (d->code == 0) {
    apx_diag_verror(d, code, fmt, ap);
    va_end(ap);
    return -1;
  }
  char line[sizeof d->msg];
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  for (char *p = line; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  size_t n = strlen(d->msg), k = strlen(line);
  if (n >= 4 && strcmp(d->msg + n - 4, "\n...") == 0) return -1; /* already full */
  if (n + 1 + k + 1 + 4 <= sizeof d->msg) {
    d->msg[n] = '\n';
    memcpy(d->msg + n + 1, line, k + 1);
  } else if (n + 5 <= sizeof d->msg) {
    memcpy(d->msg + n, "\n...", 5);
  }
  return -1;
}

void apx_diag_warn(ApxDiag *d, const char *fmt, ...) {
  d->n_warnings++;
  if (d->quiet) return;
  FILE *f = d->warn_stream ? d->warn_stream : stderr;
  va_list ap;
  va_start(ap, fmt);
  fputs("warning: ", f);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  va_end(ap);
}
