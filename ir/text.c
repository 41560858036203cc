/* text.c - width-bounded line breaking for the text reports (contract in text.h). */
#include "ir/text.h"

#include <string.h>

size_t apx_text_wrap_next(const char *s, int width, size_t *advance) {
  size_t n = strlen(s);
  if (width < 1) width = 1;
  if (n <= (size_t)width) {
    while (n > 0 && s[n - 1] == ' ') n--;
    *advance = strlen(s);
    return n;
  }
  size_t cut = 0;
  for (size_t i = (size_t)width; i >= 1 && !cut; i--) /* the last space that fits */
    if (s[i] == ' ') cut = i;
  for (size_t i = (size_t)width; i >= 1 && !cut; i--) /* else just after the last comma */
    if (s[i - 1] == ',') cut = i;
  if (!cut) cut = (size_t)width; /* one word longer than the line: cut at the width */
  size_t skip = cut;
  while (s[skip] == ' ') skip++;
  while (cut > 0 && s[cut - 1] == ' ') cut--;
  *advance = skip;
  return cut;
}

void apx_text_wrap(FILE *f, const char *prefix, int indent, const char *text, int width) {
  int col = (int)strlen(prefix);
  fputs(prefix, f);
  const char *s = text ? text : "";
  if (!*s) {
    fputc('\n', f);
    return;
  }
  while (*s) {
    size_t adv;
    size_t len = apx_text_wrap_next(s, width - col, &adv);
    fwrite(s, 1, len, f);
    fputc('\n', f);
    s += adv;
    if (*s) {
      fprintf(f, "%*s", indent, "");
      col = indent;
    }
  }
}
