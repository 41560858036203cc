/* progress.c - the progress line (progress.h). */
#include "runtime/progress.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void apx_progress_init(ApxProgressMeter *m, FILE *out, ApxProgressForm form, int64_t every, int64_t total,
                       int64_t first_step, double samples_per_step, double t0_ms) {
  memset(m, 0, sizeof *m);
  m->out = out;
  m->form = form;
  m->every = every > 0 ? every : 0;
  m->total = total;
  m->first_step = first_step;
  m->samples_per_step = samples_per_step;
  m->t0_ms = t0_ms;
  m->last_ms = t0_ms;
}

void apx_progress_eta(double s, char *buf, size_t cap) {
  if (!(s >= 0) || !isfinite(s)) {
    snprintf(buf, cap, "?");
    return;
  }
  long long t = (long long)(s + 0.5);
  if (t < 60) snprintf(buf, cap, "%llds", t);
  else if (t < 3600) snprintf(buf, cap, "%lldm%02llds", t / 60, t % 60);
  else snprintf(buf, cap, "%lldh%02lldm", t / 3600, t / 60 % 60);
}

int apx_progress_format(const ApxProgressValues *v, char *buf, size_t cap) {
  char rate[32], eta[32];
  if (v->samples_per_s >= 0) snprintf(rate, sizeof rate, "%.0f samples/s", v->samples_per_s);
  else snprintf(rate, sizeof rate, "? samples/s");
  apx_progress_eta(v->eta_s, eta, sizeof eta);
  return snprintf(buf, cap, "step %" PRId64 "/%" PRId64 "  loss %.6f  scale %g  lr %.4g  %s  %" PRId64
                  " skipped  ETA %s", v->step, v->total, v->loss, v->loss_scale, v->lr, rate, v->skipped, eta);
}

void apx_progress_break(ApxProgressMeter *m) {
  if (!m->pending) return;
  fputc('\n', m->out);
  fflush(m->out);
  m->pending = 0;
}

void apx_progress_step(ApxProgressMeter *m, ApxProgressValues *v, double now_ms, int force) {
  if (m->form == APX_PROGRESS_FORM_NONE) return;
  int last = v->step >= m->total;
  int due;
  if (m->form == APX_PROGRESS_FORM_TTY)
    due = force || last || now_ms - m->last_ms >= APX_PROGRESS_TTY_MS || m->printed == 0;
  else if (m->every > 0)
    due = (v->step - m->first_step) % m->every == 0 || last;
  else
    due = now_ms - m->last_ms >= APX_PROGRESS_PERIOD_S * 1e3 || (last && m->printed > 0);
  if (!due) return;
  int64_t done = v->step - m->first_step;
  double elapsed_s = (now_ms - m->t0_ms) / 1e3;
  v->samples_per_s = done > 0 && elapsed_s > 0 ? (double)done * m->samples_per_step / elapsed_s : -1;
  v->eta_s = done > 0 ? (double)(m->total - v->step) * elapsed_s / (double)done : -1;
  if (v->eta_s < 0 && done > 0) v->eta_s = 0;
  char line[256];
  int n = apx_progress_format(v, line, sizeof line);
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  if (m->form == APX_PROGRESS_FORM_TTY) {
    /* spaces over what a longer previous line left on the right */
    int pad = m->pending && m->last_len > n ? m->last_len - n : 0;
    fprintf(m->out, "\r%s%*s", line, pad, "");
    m->pending = 1;
    m->last_len = n;
  } else {
    fprintf(m->out, "%s\n", line);
  }
  fflush(m->out);
  m->last_ms = now_ms;
  m->printed++;
}
