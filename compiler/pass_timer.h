/* pass_timer.h - apexc --time-passes: the wall time, CPU time and peak memory of each
 * compile stage (load, every pass of the pipeline table, plan building and writing), one line
 * each on stderr as the stage ends, then a total:
 *
 *   time-passes  load                  0.412 s  cpu    0.398 s  peak    312.4 MiB    +298.0 MiB
 *   time-passes  memplan               0.051 s  cpu    0.050 s  peak    330.1 MiB     +17.7 MiB
 *   time-passes  total                 1.234 s  cpu    1.190 s  peak    400.1 MiB
 *
 * The CPU time (the process's, CLOCK_PROCESS_CPUTIME_ID) is the figure to compare on a loaded
 * machine, where the wall time also counts waiting for a core.
 * "peak" is the process's resident-set high-water mark during the stage (Linux VmHWM, reset
 * before each stage by writing 5 to /proc/self/clear_refs; where that is refused, the peak
 * since the process started), "+" that peak minus the resident set when the stage began:
 * the most memory the stage added. The reset is the kernel's own counter, so an outside
 * measurement of the same run (time -v, wait4) sees only the peak since the last stage
 * began: take the whole run's peak from the total line, or from a run without the flag. The total's time runs from the first stage's start to
 * the last stage's end, its peak is the largest of the stages' (and the process's, getrusage).
 *
 * Single-threaded, process-wide state (apexc compiles one model per process). Stages are
 * timed only when o->time_passes is set. */
#ifndef APX_PASS_TIMER_H
#define APX_PASS_TIMER_H

#include <stdint.h>

#include "ir/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxStageClock {
  int on;
  double t0;        /* seconds, CLOCK_MONOTONIC */
  double cpu0;      /* process CPU seconds */
  int64_t rss0;     /* resident bytes at the start */
} ApxStageClock;

/* Starts timing a stage when o->time_passes (does nothing otherwise). */
void apx_stage_begin(ApxStageClock *c, const ApxOptions *o);
/* Ends it and prints its line (nothing when the clock was not started). */
void apx_stage_end(ApxStageClock *c, const char *name);
/* A line for work that ran on a thread of its own beside the stage `beside` (when any stage
 * was timed): its own wall and CPU seconds, not added to the total (the stage's CPU time
 * already counts it). */
void apx_stage_aside(const ApxOptions *o, const char *name, const char *beside, double wall_s,
                     double cpu_s);
/* Prints the total line when any stage was timed. */
void apx_stage_total(void);

#ifdef __cplusplus
}
#endif
#endif
