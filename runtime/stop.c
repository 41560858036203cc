/* stop.c - graceful stop on SIGINT / SIGTERM (stop.h). Only async-signal-safe calls in the
 * handler: a flag, unlink, write, _exit. */
#include "runtime/stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;  /* the first signal, 0 */
static volatile sig_atomic_t g_temp_set; /* g_temp holds a path */
static char g_temp[4096];
static struct sigaction g_old_int, g_old_term;
static int g_installed;

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
  /* the second one: now, without the temporary file of a write in progress */
  if (g_temp_set) unlink(g_temp);
  put(sig == SIGINT ? "apexrun: second SIGINT: stopping now, without finishing the step\n"
                    : "apexrun: second SIGTERM: stopping now, without finishing the step\n");
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
