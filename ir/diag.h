/* diag.h - errors with context, not aborts (chibicc error_tok).
 *
 * The compiler returns errors up to the CLI, which prints the one recorded line, e.g.
 *   model.onnx: node 'Gemm_12' (Gemm) input 1: expected [64,128], got [65,128]
 * and exits with its code: 2 bad usage or bad input, 1 runtime failure (DESIGN.md 13).
 * Only the first error is kept (later ones are usually consequences), except in a report
 * that lists several independent problems at once (every unsupported op of a model):
 * apx_diag_error_append adds them as further lines, one problem per line. Warnings go to
 * the warning stream (stderr by default) as they happen and are counted. */
#ifndef APX_DIAG_H
#define APX_DIAG_H

#include <stdarg.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { APX_EXIT_OK = 0, APX_EXIT_RUNTIME = 1, APX_EXIT_BAD_INPUT = 2 };

typedef struct ApxDiag {
  int code;         /* 0 while no error; else APX_EXIT_* of the first error */
  char msg[4096];   /* the first error, one line, no trailing newline (several lines, '\n'
                       between them, only after apx_diag_error_append) */
  int n_warnings;
  FILE *warn_stream; /* NULL: stderr; warnings are silenced when quiet is set */
  int quiet;
} ApxDiag;

void apx_diag_init(ApxDiag *d);
/* Records the error (if none yet) and returns -1, so callers can `return apx_diag_error(..)`. */
int apx_diag_error(ApxDiag *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int apx_diag_verror(ApxDiag *d, int code, const char *fmt, va_list ap);
/* As apx_diag_error when no error is recorded; otherwise appends the message to the recorded
 * one as a further line (when it fits; else "..." once). Returns -1. */
int apx_diag_error_append(ApxDiag *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void apx_diag_warn(ApxDiag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int apx_diag_failed(const ApxDiag *d) { return d->code != 0; }

#ifdef __cplusplus
}
#endif
#endif
