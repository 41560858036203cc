/* loss_list.c - `--loss A,B` resolved to value ids (loss_list.h). */
#include "ir/loss_list.h"

#include <stdio.h>
#include <string.h>

int apx_loss_list_resolve(const ApxGraph *g, const char *list, int *ids, int cap, char *err, size_t err_cap) {
  int n = 0;
  if (cap > APX_MAX_LOSSES) cap = APX_MAX_LOSSES;
  for (const char *s = list;;) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    char name[512];
    if (len == 0) {
      snprintf(err, err_cap, "--loss '%s': empty name in the list (give --loss A or --loss A,B)", list);
      return -1;
    }
    if (len >= sizeof name) {
      snprintf(err, err_cap, "--loss '%.60s...': a name longer than %zu bytes", list, sizeof name - 1);
      return -1;
    }
    memcpy(name, s, len);
    name[len] = 0;
    int v = apx_graph_find_value(g, name);
    if (v < 0) {
      if (!e && n == 0)
        snprintf(err, err_cap, "--loss '%s': no such value", list);
      else
        snprintf(err, err_cap, "--loss '%s': no such value '%s'", list, name);
      return -1;
    }
    for (int i = 0; i < n; i++)
      if (ids[i] == v) {
        snprintf(err, err_cap, "--loss '%s': '%s' is named twice (each loss once)", list, name);
        return -1;
      }
    if (n == cap) {
      snprintf(err, err_cap, "--loss '%s': more than %d losses", list, cap);
      return -1;
    }
    ids[n++] = v;
    if (!e) break;
    s = e + 1;
  }
  return n;
}
