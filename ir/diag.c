/* diag.c - first-error recording and warnings. */
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
