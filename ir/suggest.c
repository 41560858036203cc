/* suggest.c - flag spellings and "did you mean" (suggest.h). */
#include "ir/suggest.h"

#include <string.h>
#include <strings.h>

int apx_flag_normalize(const char *arg, char *buf, size_t cap) {
  size_t n = strlen(arg);
  if (n + 1 > cap) return -1;
  memcpy(buf, arg, n + 1);
  if (strncmp(arg, "--", 2) != 0) return 0;
  int changed = 0;
  for (size_t i = 2; i < n && buf[i] != '='; i++)
    if (buf[i] == '_') buf[i] = '-', changed = 1;
  return changed;
}

enum { MAXN = 64 };

int apx_edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  if (na > MAXN) na = MAXN;
  if (nb > MAXN) nb = MAXN;
  int d[MAXN + 1][MAXN + 1];
  for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[na][nb];
}

/* The name without its leading dashes and without "=value". */
static const char *bare(const char *s, size_t *len) {
  while (*s == '-') s++;
  const char *eq = strchr(s, '=');
  *len = eq ? (size_t)(eq - s) : strlen(s);
  return s;
}

const char *apx_flag_suggest(const char *arg, const char *const *names) {
  size_t na;
  const char *a = bare(arg, &na);
  if (na == 0) return NULL;
  const char *best = NULL, *prefix_of = NULL;
  int best_d = 1 << 30, n_prefix = 0;
  for (int i = 0; names[i]; i++) {
    size_t nb;
    const char *b = bare(names[i], &nb);
    if (nb == na && !strncmp(a, b, na)) continue; /* the same name: nothing to suggest */
    if (na >= 3 && nb > na && !strncmp(a, b, na)) prefix_of = names[i], n_prefix++;
    int dist = apx_edit_distance(a, na, b, nb);
    size_t longer = na > nb ? na : nb;
    if (dist <= 1 + (int)(longer / 5) && dist < best_d) best = names[i], best_d = dist;
  }
  if (best) return best;
  return n_prefix == 1 ? prefix_of : NULL;
}

int apx_bool_parse(const char *s) {
  if (!s) return 1;
  static const char *const yes[] = {"true", "1", "on", "yes"}, *const no[] = {"false", "0", "off", "no"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, yes[i])) return 1;
    if (!strcasecmp(s, no[i])) return 0;
  }
  return -1;
}
