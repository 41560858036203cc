/* pass_timer.c - apexc --time-passes (pass_timer.h). */
#include "compiler/pass_timer.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double g_first = -1.0, g_last = 0.0; /* first start, last end (seconds) */
static double g_cpu = 0.0;                   /* CPU seconds of the stages */
static int64_t g_peak = -1;               /* the largest stage peak */

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

/* VmRSS or VmHWM of this process in bytes, -1 when /proc is not there. */
static int64_t status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') {
      sscanf(line + n + 1, "%lld", &kb);
      break;
    }
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* Resets the high-water mark to the current resident set (Linux >= 4.0); 0 when done. */
static int reset_peak(void) {
  int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok ? 0 : -1;
}

/* The kernel's own peak; after reset_peak it starts over like VmHWM, so the total keeps the
 * largest stage peak as well. */
static int64_t process_peak(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return -1;
  return (int64_t)ru.ru_maxrss * 1024; /* kilobytes on Linux */
}

static double mib(int64_t b) { return b < 0 ? 0.0 : (double)b / (1024.0 * 1024.0); }

void apx_stage_begin(ApxStageClock *c, const ApxOptions *o) {
  c->on = o && o->time_passes;
  if (!c->on) return;
  reset_peak(); /* refused: VmHWM is the peak so far, still an upper bound */
  c->rss0 = status_kb("VmRSS");
  c->cpu0 = cpu_s();
  c->t0 = now_s();
  if (g_first < 0) g_first = c->t0;
}

void apx_stage_end(ApxStageClock *c, const char *name) {
  if (!c->on) return;
  double t = now_s(), cpu = cpu_s() - c->cpu0;
  g_last = t;
  g_cpu += cpu;
  int64_t peak = status_kb("VmHWM");
  if (peak < 0) peak = process_peak();
  if (peak > g_peak) g_peak = peak;
  int64_t added = peak >= 0 && c->rss0 >= 0 && peak > c->rss0 ? peak - c->rss0 : 0;
  fprintf(stderr, "time-passes  %-18s %8.3f s  cpu %8.3f s  peak %8.1f MiB  %+9.1f MiB\n", name,
          t - c->t0, cpu, mib(peak), mib(added));
  c->on = 0;
}

void apx_stage_aside(const ApxOptions *o, const char *name, const char *beside, double wall_s,
                     double cpu_s) {
  if (!o || !o->time_passes) return;
  fprintf(stderr, "time-passes  %-18s %8.3f s  cpu %8.3f s  (a thread beside %s)\n", name, wall_s,
          cpu_s, beside);
}

void apx_stage_total(void) {
  if (g_first < 0) return;
  int64_t peak = process_peak();
  if (g_peak > peak) peak = g_peak;
  fprintf(stderr, "time-passes  %-18s %8.3f s  cpu %8.3f s  peak %8.1f MiB\n", "total",
          g_last - g_first, g_cpu, mib(peak));
}
