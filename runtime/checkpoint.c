/* checkpoint.c - atomic, checksummed training checkpoints (checkpoint.h). */
#include "runtime/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/fileio.h"
#include "runtime/sampler.h"
#include "runtime/stop.h"

static const char k_magic[8] = {'A', 'P', 'X', 'C', 'K', 'P', 'T', 0};
enum {
  HEADER_BYTES = 64,
  N_STATE_FIELDS = 24,
  N_STATE_FIELDS_V5 = 24 + 1 + 6 * APX_CHECKPOINT_MORE_SCALERS,
  N_STATE_FIELDS_V3 = 19,
  N_STATE_FIELDS_V2 = 18,
  N_STATE_FIELDS_V1 = 16
};
#define HP_KNOWN_BITS 63u /* train.h APX_HP_ALL */

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int apx_checkpoint_saves(const ApxPlanBuffer *b) {
  return b->region == APX_MEM_PERSISTENT && b->alias_of < 0 && b->bytes > 0 &&
         (b->kind == APX_VAL_PARAM || b->kind == APX_VAL_STATE);
}

uint64_t apx_plan_hash(const ApxPlan *p) {
  if (!p->map || p->map_len < 64) return 0;
  const uint8_t *b = p->map;
  uint64_t meta_len = apx_le_get_u64(b + 24);
  if (meta_len > p->map_len - 64) return 0;
  uint32_t meta = apx_crc32c(0, b + 64, (size_t)meta_len);
  return (uint64_t)meta << 32 | apx_le_get_u32(b + 48);
}

/* n_fields: N_STATE_FIELDS (version 4) or N_STATE_FIELDS_V5 (the other losses' scalers). */
static void state_encode(const ApxTrainState *s, uint8_t *b, int n_fields) {
  uint64_t f[N_STATE_FIELDS_V5] = {
      (uint64_t)s->step, (uint64_t)s->batches, (uint64_t)s->epoch, (uint64_t)s->epoch_pos,
      s->sampler_seed, (uint64_t)s->order, (uint64_t)s->world, (uint64_t)s->accumulate,
      (uint64_t)s->dropout_step, s->dropout_seed, apx_f64_bits(s->scale), (uint64_t)s->scale_clean,
      (uint64_t)s->scale_hysteresis_left, (uint64_t)s->scale_overflow_run,
      (uint64_t)s->scale_overflows, (uint64_t)s->scale_below_one_warned, (uint64_t)s->lr_total,
      (uint64_t)s->lr_warmup, s->data_digest, apx_f64_bits(s->lr_base), (uint64_t)s->lr_schedule,
      apx_f64_bits(s->weight_decay), apx_f64_bits(s->max_grad_norm), s->hp_given};
  f[24] = (uint64_t)s->n_more_scalers;
  for (int i = 0; i < APX_CHECKPOINT_MORE_SCALERS && i < s->n_more_scalers; i++) {
    const ApxCkptScaler *m = &s->more[i];
    uint64_t *o = &f[25 + 6 * i];
    o[0] = apx_f64_bits(m->scale), o[1] = (uint64_t)m->clean, o[2] = (uint64_t)m->hysteresis_left;
    o[3] = (uint64_t)m->overflow_run, o[4] = (uint64_t)m->overflows, o[5] = (uint64_t)m->below_one_warned;
  }
  for (int i = 0; i < n_fields; i++) apx_le_put_u64(b + 8 * i, f[i]);
}

/* n_fields: N_STATE_FIELDS, N_STATE_FIELDS_V3 (the hyperparameters read as unknown),
 * N_STATE_FIELDS_V2 (the data digest too) or N_STATE_FIELDS_V1 (the lr fields too). */
static void state_decode(const uint8_t *b, int n_fields, ApxTrainState *s) {
  uint64_t f[N_STATE_FIELDS_V5] = {0};
  f[16] = 0;                  /* lr_total: unknown */
  f[17] = (uint64_t)-1;       /* lr_warmup: unknown */
  f[18] = 0;                  /* data_digest: unknown */
  f[19] = f[21] = f[22] = apx_f64_bits(NAN); /* lr_base, weight_decay, max_grad_norm: unknown */
  f[20] = (uint64_t)-1;       /* lr_schedule: unknown */
  f[23] = 0;                  /* hp_given: none */
  for (int i = 0; i < n_fields; i++) f[i] = apx_le_get_u64(b + 8 * i);
  s->step = (int64_t)f[0];
  s->batches = (int64_t)f[1];
  s->epoch = (int64_t)f[2];
  s->epoch_pos = (int64_t)f[3];
  s->sampler_seed = f[4];
  s->order = (int64_t)f[5];
  s->world = (int64_t)f[6];
  s->accumulate = (int64_t)f[7];
  s->dropout_step = (int64_t)f[8];
  s->dropout_seed = f[9];
  s->scale = apx_bits_f64(f[10]);
  s->scale_clean = (int64_t)f[11];
  s->scale_hysteresis_left = (int64_t)f[12];
  s->scale_overflow_run = (int64_t)f[13];
  s->scale_overflows = (int64_t)f[14];
  s->scale_below_one_warned = (int64_t)f[15];
  s->lr_total = (int64_t)f[16];
  s->lr_warmup = (int64_t)f[17];
  s->data_digest = f[18];
  s->lr_base = apx_bits_f64(f[19]);
  s->lr_schedule = (int64_t)f[20];
  s->weight_decay = apx_bits_f64(f[21]);
  s->max_grad_norm = apx_bits_f64(f[22]);
  s->hp_given = f[23];
  s->n_more_scalers = (int64_t)f[24];
  for (int i = 0; i < APX_CHECKPOINT_MORE_SCALERS; i++) {
    const uint64_t *o = &f[25 + 6 * i];
    ApxCkptScaler *m = &s->more[i];
    m->scale = apx_bits_f64(o[0]), m->clean = (int64_t)o[1], m->hysteresis_left = (int64_t)o[2];
    m->overflow_run = (int64_t)o[3], m->overflows = (int64_t)o[4], m->below_one_warned = (int64_t)o[5];
  }
}

/* Version 5's other scalers: "" when valid, else what is wrong. Unused records are zero. */
static const char *more_scalers_problem(const ApxTrainState *s, char *buf, size_t cap) {
  if (s->n_more_scalers < 0 || s->n_more_scalers > APX_CHECKPOINT_MORE_SCALERS) {
    snprintf(buf, cap, "invalid training state (%" PRId64 " more loss scalers, at most %d)", s->n_more_scalers,
             APX_CHECKPOINT_MORE_SCALERS);
    return buf;
  }
  for (int i = 0; i < APX_CHECKPOINT_MORE_SCALERS; i++) {
    const ApxCkptScaler *m = &s->more[i];
    int used = i < s->n_more_scalers;
    int bad = used ? !isfinite(m->scale) || !(m->scale > 0) || m->clean < 0 || m->hysteresis_left < 0 ||
                         m->overflow_run < 0 || m->overflows < m->overflow_run ||
                         (m->below_one_warned != 0 && m->below_one_warned != 1)
                   : m->scale != 0 || m->clean || m->hysteresis_left || m->overflow_run || m->overflows ||
                         m->below_one_warned;
    if (bad) {
      snprintf(buf, cap, "invalid training state (loss scaler %d: scale %g, %" PRId64 " clean steps, hysteresis %"
               PRId64 ", overflow run %" PRId64 " of %" PRId64 ", below-one flag %" PRId64 ")%s", i + 2, m->scale,
               m->clean, m->hysteresis_left, m->overflow_run, m->overflows, m->below_one_warned,
               used ? "" : ": an unused record must be zero");
      return buf;
    }
  }
  return "";
}

/* A state no run can produce, whatever the plan: "" when none, else what is wrong. */
static const char *state_problem(const ApxTrainState *s, int version, char *buf, size_t cap) {
  const struct {
    const char *name;
    int64_t v, lo;
  } counters[] = {
      {"step", s->step, 0},
      {"batches", s->batches, 0},
      {"epoch", s->epoch, 0},
      {"position in the epoch", s->epoch_pos, 0},
      {"world size", s->world, 1},
      {"accumulation", s->accumulate, 1},
      {"Dropout counter", s->dropout_step, 0},
      {"clean-step count", s->scale_clean, 0},
      {"hysteresis counter", s->scale_hysteresis_left, 0},
      {"overflow run", s->scale_overflow_run, 0},
      {"overflow count", s->scale_overflows, 0},
      {"lr schedule length", s->lr_total, 0},
      {"lr warmup", s->lr_warmup, version == 1 ? -1 : 0},
  };
  /* a state no run can produce: refused before anything else (a NaN/inf/0 scale would make
   * every step overflow, or train with unscaled gradients) */
  if (!isfinite(s->scale) || !(s->scale > 0)) {
    snprintf(buf, cap, "invalid training state (loss scale %g, step %" PRId64
             "): the loss scale must be finite and > 0", s->scale, s->step);
    return buf;
  }
  for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
    if (counters[i].v < counters[i].lo) {
      snprintf(buf, cap, "invalid training state (%s %" PRId64 "): it must be >= %" PRId64,
               counters[i].name, counters[i].v, counters[i].lo);
      return buf;
    }
  const struct {
    const char *name;
    double v;
  } reals[] = {{"lr", s->lr_base}, {"weight decay", s->weight_decay}, {"gradient clipping norm", s->max_grad_norm}};
  if (version >= 4)
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
      if (!isfinite(reals[i].v) || reals[i].v < 0) {
        snprintf(buf, cap, "invalid training state (%s %g): it must be finite and >= 0", reals[i].name, reals[i].v);
        return buf;
      }
  if (version >= 5 && (*more_scalers_problem(s, buf, cap) || s->n_more_scalers == 0)) {
    if (s->n_more_scalers == 0) snprintf(buf, cap, "invalid training state (version 5 without more loss scalers)");
  } else if (s->order != APX_ORDER_FILE && s->order != APX_ORDER_SHUFFLE)
    snprintf(buf, cap, "invalid training state (sample order %" PRId64 ")", s->order);
  else if (version >= 4 && (s->lr_schedule < 0 || s->lr_schedule > 2))
    snprintf(buf, cap, "invalid training state (lr schedule %" PRId64 ")", s->lr_schedule);
  else if (s->hp_given & ~(uint64_t)HP_KNOWN_BITS)
    snprintf(buf, cap, "invalid training state (run-time settings mask %#" PRIx64 ")", s->hp_given);
  else if (s->scale_below_one_warned != 0 && s->scale_below_one_warned != 1)
    snprintf(buf, cap, "invalid training state (below-one flag %" PRId64 ")", s->scale_below_one_warned);
  else if (s->scale_overflow_run > s->scale_overflows)
    snprintf(buf, cap, "invalid training state (overflow run %" PRId64 " longer than the %" PRId64
             " overflows in all)", s->scale_overflow_run, s->scale_overflows);
  else if (s->batches / s->accumulate != s->step || s->batches % s->accumulate != 0 ||
           s->dropout_step != s->batches)
    snprintf(buf, cap, "invalid training state (step %" PRId64 ", %" PRId64 " batches, Dropout counter %"
             PRId64 "): with accumulation %" PRId64 " a step consumes %" PRId64 " batches", s->step,
             s->batches, s->dropout_step, s->accumulate, s->accumulate);
  else
    return "";
  return buf;
}

/* ---- write ---------------------------------------------------------------------------- */

typedef struct Writer {
  int fd;
  uint64_t pos;
  uint32_t crc;
  uint64_t kill_at; /* test hook: SIGKILL once this many bytes are written (0: off) */
  int signals_at;   /* ... or SIGINT then SIGTERM there (a user's double Ctrl-C, stop.h) */
  const char *path;
  ApxDiag *d;
} Writer;

static int w_bytes(Writer *w, const void *p, size_t n) {
  static const uint8_t zeros[64];
  const uint8_t *b = p;
  while (n) {
    size_t k = n;
    const uint8_t *src = b ? b : zeros;
    if (!b && k > sizeof zeros) k = sizeof zeros;
    if (w->kill_at && w->pos + k >= w->kill_at) {
      /* crash in the middle of the write, as a power cut or kill -9 would */
      size_t part = w->kill_at > w->pos ? (size_t)(w->kill_at - w->pos) : 0;
      if (part && write(w->fd, src, part) < 0) {
      }
      fsync(w->fd);
      if (w->signals_at) {
        w->kill_at = 0;
        raise(SIGINT);
        raise(SIGTERM); /* the second signal: stop.h exits here, removing the temporary file */
      } else {
        raise(SIGKILL);
      }
    }
    ssize_t r = write(w->fd, src, k);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return apx_diag_error(w->d, APX_EXIT_RUNTIME, "%s: checkpoint write failed: %s", w->path,
                            r < 0 ? strerror(errno) : "short write");
    w->crc = apx_crc32c(w->crc, src, (size_t)r);
    w->pos += (uint64_t)r;
    n -= (size_t)r;
    if (b) b += r;
  }
  return 0;
}

/* mkdir -p: creates dir and any missing parent (0755). 0, or -1 with errno set. */
static int mkdir_p(const char *dir) {
  struct stat st;
  if (!*dir) return errno = ENOENT, -1;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
  char *p = strdup(dir);
  if (!p) return errno = ENOMEM, -1;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/' || s[-1] == '/') continue;
    *s = 0;
    int r = mkdir(p, 0755);
    int e = errno;
    *s = '/';
    if (r && e != EEXIST) {
      free(p);
      return errno = e, -1;
    }
  }
  int r = mkdir(p, 0755), e = errno;
  free(p);
  if (r && e != EEXIST) return errno = e, -1;
  if (stat(dir, &st) != 0) return -1;
  return S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
}

static int make_dir(const char *dir, ApxDiag *d) {
  if (mkdir_p(dir) == 0) return 0;
  if (errno == ENOTDIR)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a folder (checkpoint dir)", dir);
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot create the checkpoint folder: %s", dir,
                        strerror(errno));
}

int apx_checkpoint_dir_check(const char *dir, ApxDiag *d) {
  int e = 0;
  if (mkdir_p(dir)) {
    e = errno;
  } else {
    /* the probe: a temporary file like the writer's own (created, then removed) */
    char *probe = NULL;
    if (asprintf(&probe, "%s/.ckpt-probe.tmp.%ld", dir, (long)getpid()) < 0)
      return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      e = errno;
    } else {
      close(fd);
      unlink(probe);
    }
    free(probe);
  }
  if (e) return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot write checkpoints: %s", dir, strerror(e));
  return 0;
}

/* Removes temporary files of writes that never finished (a killed run): regular files named
 * exactly as this writer names them whose PID is not a live process (ours counts as dead:
 * our current write is already renamed). Best effort; symlinks and other files are left. */
static void remove_stale_temps(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) return;
  int dfd = dirfd(dp);
  pid_t me = getpid();
  struct dirent *e;
  while ((e = readdir(dp))) {
    const char *nm = e->d_name;
    long long step;
    long pid;
    char canon[96];
    if (strncmp(nm, ".ckpt-", 6) != 0 || sscanf(nm, ".ckpt-%lld.apxckpt.tmp.%ld", &step, &pid) != 2 ||
        step < 0 || pid <= 0)
      continue;
    snprintf(canon, sizeof canon, ".ckpt-%012lld.apxckpt.tmp.%ld", step, pid);
    if (strcmp(canon, nm) != 0) continue;
    if (pid != (long)me && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) continue; /* still writing */
    struct stat sst;
    if (fstatat(dfd, nm, &sst, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sst.st_mode)) continue;
    unlinkat(dfd, nm, 0);
  }
  closedir(dp);
}

int apx_checkpoint_write(const char *dir, const ApxTrainState *st, ApxExec *ex, char **path_out,
                         ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  if (path_out) *path_out = NULL;
  if (make_dir(dir, d)) return -1;
  char *path = NULL, *tmp = NULL;
  if (asprintf(&path, "%s/ckpt-%012" PRId64 ".apxckpt", dir, st->step) < 0) path = NULL;
  if (path && asprintf(&tmp, "%s/.ckpt-%012" PRId64 ".apxckpt.tmp.%ld", dir, st->step, (long)getpid()) < 0)
    tmp = NULL;
  if (!path || !tmp) {
    free(path);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", dir);
  }

  /* sizes first: the header carries the file size */
  uint32_t n_tensors = 0;
  const int several = st->n_more_scalers > 0; /* several losses: version 5 */
  const int n_fields = several ? N_STATE_FIELDS_V5 : N_STATE_FIELDS;
  uint64_t size = HEADER_BYTES + 8 * (uint64_t)n_fields;
  int64_t max_bytes = 0;
  for (int32_t i = 0; i < p->n_bufs; i++) {
    const ApxPlanBuffer *b = &p->bufs[i];
    if (!apx_checkpoint_saves(b)) continue;
    n_tensors++;
    size += 4 + strlen(b->name) + 4 + 4 + 8 * (uint64_t)b->rank + 8;
    size = pad_to(size, 64) + (uint64_t)b->bytes;
    size = pad_to(size, 8);
    if (b->bytes > max_bytes) max_bytes = b->bytes;
  }
  uint8_t *buf = malloc((size_t)max_bytes + 64);
  if (!buf) {
    free(path);
    free(tmp);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", dir);
  }
  Writer w = {.fd = -1, .path = tmp, .d = d};
  /* test hook (runtime/train_test): APX_TEST_CHECKPOINT_KILL_AT=STEP:BYTES kills the process
   * with SIGKILL after BYTES bytes of the checkpoint of step STEP, a crash mid-write */
  const char *kill_env = getenv("APX_TEST_CHECKPOINT_KILL_AT");
  long long kill_step = -1;
  unsigned long long kill_bytes = 0;
  if (kill_env && sscanf(kill_env, "%lld:%llu", &kill_step, &kill_bytes) == 2 && kill_step == st->step)
    w.kill_at = kill_bytes ? kill_bytes : 1;
  /* APX_TEST_CHECKPOINT_SIGNALS_AT=STEP:BYTES: SIGINT and SIGTERM to itself there instead */
  const char *sig_env = getenv("APX_TEST_CHECKPOINT_SIGNALS_AT");
  if (sig_env && sscanf(sig_env, "%lld:%llu", &kill_step, &kill_bytes) == 2 && kill_step == st->step) {
    w.kill_at = kill_bytes ? kill_bytes : 1;
    w.signals_at = 1;
  }
  int rc = 0;
  apx_stop_set_temp(tmp); /* before it exists: a second SIGINT/SIGTERM removes it (stop.h) */
  w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd < 0) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot create: %s", tmp, strerror(errno));
    goto out;
  }
  uint8_t h[HEADER_BYTES] = {0};
  memcpy(h, k_magic, 8);
  apx_le_put_u32(h + 8, several ? APX_CHECKPOINT_VERSION_LOSSES : APX_CHECKPOINT_VERSION);
  apx_le_put_u64(h + 16, apx_plan_hash(p));
  apx_le_put_u64(h + 24, size);
  apx_le_put_u32(h + 32, n_tensors);
  apx_le_put_u32(h + 40, 8 * (uint32_t)n_fields);
  if ((rc = w_bytes(&w, h, sizeof h))) goto out;
  uint8_t sb[8 * N_STATE_FIELDS_V5];
  state_encode(st, sb, n_fields);
  if ((rc = w_bytes(&w, sb, 8 * (size_t)n_fields))) goto out;
  for (int32_t i = 0; i < p->n_bufs && !rc; i++) {
    const ApxPlanBuffer *b = &p->bufs[i];
    if (!apx_checkpoint_saves(b)) continue;
    uint8_t rec[16 + 8 * APX_MAX_RANK];
    size_t nl = strlen(b->name);
    apx_le_put_u32(rec, (uint32_t)nl);
    if ((rc = w_bytes(&w, rec, 4)) || (rc = w_bytes(&w, b->name, nl))) break;
    apx_le_put_u32(rec, (uint32_t)b->dtype);
    apx_le_put_u32(rec + 4, (uint32_t)b->rank);
    for (int k = 0; k < b->rank; k++) apx_le_put_u64(rec + 8 + 8 * k, (uint64_t)b->dims[k]);
    apx_le_put_u64(rec + 8 + 8 * b->rank, (uint64_t)b->bytes);
    if ((rc = w_bytes(&w, rec, 16 + 8 * (size_t)b->rank))) break;
    if ((rc = w_bytes(&w, NULL, (size_t)(pad_to(w.pos, 64) - w.pos)))) break;
    if ((rc = apx_exec_read(ex, i, buf, (size_t)b->bytes, d))) break;
    if ((rc = w_bytes(&w, buf, (size_t)b->bytes))) break;
    rc = w_bytes(&w, NULL, (size_t)(pad_to(w.pos, 8) - w.pos));
  }
  if (rc) goto out;
  if (w.pos != size) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: internal error: wrote %" PRIu64 " bytes, planned %" PRIu64,
                        tmp, w.pos, size);
    goto out;
  }
  uint8_t cb[4];
  apx_le_put_u32(cb, w.crc);
  if (pwrite(w.fd, cb, 4, 36) != 4 || fsync(w.fd)) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: checkpoint write failed: %s", tmp, strerror(errno));
    goto out;
  }
  if (close(w.fd)) {
    w.fd = -1;
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: close failed: %s", tmp, strerror(errno));
    goto out;
  }
  w.fd = -1;
  if (rename(tmp, path)) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot rename into place: %s", path, strerror(errno));
    goto out;
  }
  apx_fsync_dir_of(path); /* dir: make the rename durable */
  remove_stale_temps(dir);
out:
  if (w.fd >= 0) close(w.fd);
  if (rc) unlink(tmp);
  apx_stop_set_temp(NULL);
  free(tmp);
  free(buf);
  if (!rc && path_out) *path_out = path;
  else free(path);
  return rc ? -1 : 0;
}

/* ---- read ----------------------------------------------------------------------------- */

static int corrupt(ApxDiag *d, const char *path, const char *what) {
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: corrupt checkpoint: %s", path, what);
}

/* The largest file a checkpoint of plan p can be (its own writer's layout, at any padding). */
static uint64_t max_size(const ApxPlan *p) {
  uint64_t size = HEADER_BYTES + 8 * N_STATE_FIELDS_V5;
  for (int32_t i = 0; i < p->n_bufs; i++) {
    const ApxPlanBuffer *b = &p->bufs[i];
    if (apx_checkpoint_saves(b))
      size += 4 + strlen(b->name) + 8 + 8 * (uint64_t)b->rank + 8 + 63 + (uint64_t)b->bytes + 7;
  }
  return size;
}

int apx_checkpoint_read(const char *path, ApxTrainState *st, ApxExec *ex, ApxCheckpointCheck check,
                        void *ctx, ApxDiag *d) {
  const ApxPlan *p = ex->plan;
  ApxInFile f;
  if (apx_infile_open(&f, path, "checkpoint", d)) return -1;
  uint64_t size = f.size;
  uint8_t *b = NULL;
  int rc = 0;
  int32_t *ids = NULL;
  const uint8_t **datas = NULL;
  /* the header first: what it declares is checked against the file and the plan before the
   * rest of the file is read */
  uint8_t h[HEADER_BYTES];
  if (size < HEADER_BYTES || (rc = apx_infile_pread(&f, h, HEADER_BYTES, 0, d)) || memcmp(h, k_magic, 8)) {
    if (!rc) rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not an apexrun checkpoint (bad magic)", path);
    goto out;
  }
  uint32_t version = apx_le_get_u32(h + 8);
  if (version < 1 || version > APX_CHECKPOINT_VERSION_LOSSES) {
    rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: checkpoint version %u, this apexrun reads 1 to %u", path,
                        version, APX_CHECKPOINT_VERSION_LOSSES);
    goto out;
  }
  const int n_fields = version == 1   ? N_STATE_FIELDS_V1
                       : version == 2 ? N_STATE_FIELDS_V2
                       : version == 3 ? N_STATE_FIELDS_V3
                       : version == 4 ? N_STATE_FIELDS
                                      : N_STATE_FIELDS_V5;
  uint64_t want_size = apx_le_get_u64(h + 24);
  if (want_size != size) {
    char msg[160];
    snprintf(msg, sizeof msg, "%" PRIu64 " bytes, the header says %" PRIu64 " (truncated or torn write)",
             size, want_size);
    rc = corrupt(d, path, msg);
    goto out;
  }
  uint64_t hash = apx_le_get_u64(h + 16), mine = apx_plan_hash(p);
  if (hash != mine) {
    rc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                        "%s: checkpoint of another plan (its plan hash %016" PRIx64 ", %s has %016" PRIx64
                        "); resume with the plan that wrote it",
                        path, hash, p->path ? p->path : "this plan", mine);
    goto out;
  }
  if (apx_le_get_u32(h + 12) != 0 || apx_le_get_u32(h + 40) != 8 * (uint32_t)n_fields) {
    rc = corrupt(d, path, "unknown flags or state layout");
    goto out;
  }
  for (int i = 44; i < HEADER_BYTES; i++)
    if (h[i]) {
      rc = corrupt(d, path, "nonzero reserved header bytes");
      goto out;
    }
  if (size > max_size(p)) {
    char msg[200];
    snprintf(msg, sizeof msg, "%" PRIu64 " bytes, more than a checkpoint of this plan can have (%" PRIu64 ")",
             size, max_size(p));
    rc = corrupt(d, path, msg);
    goto out;
  }
  b = malloc((size_t)size);
  if (!b) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory (%" PRIu64 " bytes)", path, size);
    goto out;
  }
  if ((rc = apx_infile_pread(&f, b, (size_t)size, 0, d))) goto out;
  if (memcmp(b, h, HEADER_BYTES)) {
    rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: changed while it was being read", path);
    goto out;
  }
  uint32_t stored = apx_le_get_u32(b + 36);
  uint8_t zero4[4] = {0};
  uint32_t crc = apx_crc32c(0, b, 36);
  crc = apx_crc32c(crc, zero4, 4);
  crc = apx_crc32c(crc, b + 40, (size_t)(size - 40));
  if (crc != stored) {
    char msg[128];
    snprintf(msg, sizeof msg, "checksum mismatch (stored %08x, computed %08x)", stored, crc);
    rc = corrupt(d, path, msg);
    goto out;
  }
  uint32_t n = apx_le_get_u32(b + 32);
  uint64_t pos = HEADER_BYTES;
  if (size - pos < 8 * (uint64_t)n_fields) {
    rc = corrupt(d, path, "no training state");
    goto out;
  }
  ApxTrainState s;
  state_decode(b + pos, n_fields, &s);
  pos += 8 * (uint64_t)n_fields;
  char why[320];
  if (*state_problem(&s, (int)version, why, sizeof why)) {
    rc = corrupt(d, path, why);
    goto out;
  }
  ids = calloc((size_t)p->n_bufs + 1, sizeof *ids);
  datas = calloc((size_t)p->n_bufs + 1, sizeof *datas);
  if (!ids || !datas) {
    rc = apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
    goto out;
  }
  for (int32_t i = 0; i < p->n_bufs; i++) ids[i] = 0; /* 1: found in the file */
  for (uint32_t t = 0; t < n; t++) {
    if (size - pos < 4) goto trunc;
    uint32_t nl = apx_le_get_u32(b + pos);
    pos += 4;
    if (nl > 4096 || size - pos < (uint64_t)nl + 8) goto trunc;
    char name[4097];
    memcpy(name, b + pos, nl);
    name[nl] = 0;
    pos += nl;
    uint32_t dt = apx_le_get_u32(b + pos), rank = apx_le_get_u32(b + pos + 4);
    pos += 8;
    if (rank > APX_MAX_RANK || size - pos < 8 * (uint64_t)rank + 8) goto trunc;
    int64_t dims[APX_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) dims[k] = (int64_t)apx_le_get_u64(b + pos + 8 * k);
    pos += 8 * rank;
    uint64_t nbytes = apx_le_get_u64(b + pos);
    pos += 8;
    pos = pad_to(pos, 64);
    if (pos > size || size - pos < nbytes) goto trunc;
    int32_t id = apx_plan_find_buffer(p, name);
    const ApxPlanBuffer *pb = id >= 0 ? &p->bufs[id] : NULL;
    if (!pb || !apx_checkpoint_saves(pb)) {
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: tensor '%s' is not a parameter or state of %s",
                          path, name, p->path ? p->path : "the plan");
      goto out;
    }
    int same = (ApxDType)dt == pb->dtype && (int32_t)rank == pb->rank && nbytes == (uint64_t)pb->bytes;
    for (uint32_t k = 0; same && k < rank; k++) same = dims[k] == pb->dims[k];
    if (!same) {
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: tensor '%s' differs from the plan's (dtype or shape)",
                          path, name);
      goto out;
    }
    if (ids[id]) {
      rc = corrupt(d, path, "a tensor appears twice");
      goto out;
    }
    ids[id] = 1;
    datas[id] = b + pos;
    pos = pad_to(pos + nbytes, 8);
  }
  if (pos != size) {
    rc = corrupt(d, path, "bytes after the last tensor");
    goto out;
  }
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (apx_checkpoint_saves(&p->bufs[i]) && !ids[i]) {
      rc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: lacks '%s', which the plan trains", path,
                          p->bufs[i].name);
      goto out;
    }
  if (check && check(ctx, &s, path, d)) {
    rc = -1;
    goto out;
  }
  /* everything checked: upload */
  for (int32_t i = 0; i < p->n_bufs && !rc; i++)
    if (ids[i]) rc = apx_exec_write(ex, i, datas[i], (size_t)p->bufs[i].bytes, d);
  if (!rc) *st = s;
  goto out;
trunc:
  rc = corrupt(d, path, "a tensor record runs past the end");
out:
  apx_infile_close(&f);
  free(ids);
  free(datas);
  free(b);
  return rc ? -1 : 0;
}

int apx_checkpoint_latest(const char *dir, char **path, int64_t *step, ApxDiag *d) {
  *path = NULL;
  *step = -1;
  DIR *dp = opendir(dir);
  if (!dp) {
    if (errno == ENOENT) return 0;
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: cannot open the checkpoint folder: %s", dir,
                          strerror(errno));
  }
  struct dirent *e;
  int64_t best = -1;
  while ((e = readdir(dp))) {
    const char *nm = e->d_name;
    if (strncmp(nm, "ckpt-", 5) != 0) continue;
    char *end;
    errno = 0;
    long long s = strtoll(nm + 5, &end, 10);
    if (errno || end == nm + 5 || strcmp(end, ".apxckpt") != 0 || s < 0) continue;
    char canon[64];
    snprintf(canon, sizeof canon, "ckpt-%012lld.apxckpt", s);
    if (strcmp(canon, nm) != 0) continue; /* only names this writer produces */
    if (s > best) best = s;
  }
  closedir(dp);
  if (best < 0) return 0;
  if (asprintf(path, "%s/ckpt-%012" PRId64 ".apxckpt", dir, best) < 0) {
    *path = NULL;
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", dir);
  }
  *step = best;
  return 1;
}

int apx_checkpoint_path(const char *dir, int64_t step, char **path) {
  if (asprintf(path, "%s/ckpt-%012" PRId64 ".apxckpt", dir, step) < 0) {
    *path = NULL;
    return -1;
  }
  return 0;
}

int apx_checkpoint_owns_name(const char *dir, const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t n = strlen(base);
  int named = (n > 13 && strncmp(base, "ckpt-", 5) == 0 && strcmp(base + n - 8, ".apxckpt") == 0) ||
              strncmp(base, ".ckpt-", 6) == 0;
  if (!named) return 0;
  char *folder = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  int same = folder && apx_same_file(folder, dir);
  free(folder);
  return same;
}
