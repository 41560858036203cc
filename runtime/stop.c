/* stop.c - graceful stop on SIGINT / SIGTERM (stop.h). Only async-signal-safe calls in the
 * handler: a flag, tgkill, unlink, write, _exit.
 *
 * A signal to the process may be handled on any thread (OpenMP workers, MPI's, the
 * collective watchdog). The exit path must run on the thread that writes the temporary
 * files, while that thread is stopped in the handler: otherwise it could create a file after
 * the handler looked (and leave it behind). So a second signal that lands on another thread
 * is sent on to the thread that installed the handlers (tgkill) and handled there; and the
 * writers register their temporary file before creating it (apx_stop_set_temp). */
#include "runtime/stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;  /* the first signal, 0 */
static volatile sig_atomic_t g_temp_set; /* g_temp holds a path */
static char g_temp[4096];
static struct sigaction g_old_int, g_old_term;
static int g_installed;
static pid_t g_main_tid; /* the thread that installed the handlers (and writes the files) */

const char *apx_stop_signal_name(int sig) {
  static char buf[32];
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

static void put(const char *s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

static void on_signal(int sig) {
  if (!g_signal) {
    g_signal = sig;
    return;
  }
  if ((pid_t)syscall(SYS_gettid) != g_main_tid) { /* handled where the files are written */
    syscall(SYS_tgkill, getpid(), g_main_tid, sig);
    return;
  }
  /* the second one: now, without the temporary file of a write in progress */
  put(sig == SIGINT ? "apexrun: second SIGINT: stopping now, without finishing the step"
                    : "apexrun: second SIGTERM: stopping now, without finishing the step");
  if (g_temp_set && unlink(g_temp) == 0) {
    put(" (removed the unfinished ");
    put(g_temp);
    put(")");
  }
  put("\n");
  _exit(128 + sig);
}

void apx_stop_install(void) {
  if (g_installed) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART;
  g_signal = 0;
  g_main_tid = (pid_t)syscall(SYS_gettid);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  g_installed = 1;
}

void apx_stop_uninstall(void) {
  if (!g_installed) return;
  sigaction(SIGINT, &g_old_int, NULL);
  sigaction(SIGTERM, &g_old_term, NULL);
  g_installed = 0;
}

int apx_stop_requested(void) { return (int)g_signal; }

void apx_stop_set_temp(const char *path) {
  g_temp_set = 0; /* the handler never sees a half-copied path */
  if (!path || strlen(path) >= sizeof g_temp) return;
  memcpy(g_temp, path, strlen(path) + 1);
  g_temp_set = 1;
}
