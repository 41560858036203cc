/* text.h - wrapping text to a width for the human-readable reports (--explain, the fusion
 * report): every line they print fits APX_TEXT_WIDTH columns, long fields continue on
 * indented lines.
 *
 * Breaks go after the last space that fits, else after the last ',' that fits, else (one
 * word longer than the line) at the width itself, so every line fits. Widths count bytes
 * (the reports are ASCII). */
#ifndef APX_TEXT_H
#define APX_TEXT_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APX_TEXT_WIDTH 120

/* The next line of s within width columns: returns its length (trailing spaces dropped)
 * and sets *advance to the bytes it consumes (the break's spaces included). Returns 0 with
 * *advance 0 at the end of s. */
size_t apx_text_wrap_next(const char *s, int width, size_t *advance);

/* Writes prefix then text, wrapped so that no line exceeds width; continuation lines start
 * with indent spaces. Each line ends with '\n'. An empty text writes the prefix alone. */
void apx_text_wrap(FILE *f, const char *prefix, int indent, const char *text, int width);

#ifdef __cplusplus
}
#endif
#endif
