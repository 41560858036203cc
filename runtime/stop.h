/* stop.h - graceful stop of a training run on SIGINT / SIGTERM (DESIGN.md 12, 13).
 *
 * apx_stop_install sets handlers for SIGINT and SIGTERM. The first signal only records its
 * number (apx_stop_requested); the training loop finishes the step in progress, writes a
 * checkpoint when --checkpoint-dir is set, says where to resume and exits with 128 + the
 * signal (130 / 143). Under mpirun every rank stops after the same step: the stop request
 * travels with the per-step found_inf reduction (dp.h), so a signal to any rank stops all.
 * A second signal ends the process at once (_exit(128 + signal)), after removing the
 * temporary file being written at that moment (apx_stop_set_temp), so no temporary file is
 * left behind either way. apx_stop_uninstall restores the previous dispositions. */
#ifndef APX_STOP_H
#define APX_STOP_H

#ifdef __cplusplus
extern "C" {
#endif

void apx_stop_install(void);
void apx_stop_uninstall(void);
/* The first SIGINT/SIGTERM since apx_stop_install (its number), or 0. */
int apx_stop_requested(void);
/* The temporary file being written now (a checkpoint, an export), removed by a second signal
 * before exiting: set it before creating the file, NULL once the write is done (renamed or
 * removed). Copied: the path may be freed afterwards. Paths longer than 4095 bytes are not
 * registered. Call from the thread that called apx_stop_install. */
void apx_stop_set_temp(const char *path);
/* "SIGINT", "SIGTERM" or "signal N" (static). */
const char *apx_stop_signal_name(int sig);

#ifdef __cplusplus
}
#endif
#endif
