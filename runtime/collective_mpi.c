/* collective_mpi.c - collective.h over MPI (Debian OpenMPI): host-memory allreduce,
 * broadcast, allgather and barrier, non-blocking bucket reductions (MPI_Iallreduce on a
 * per-request staging buffer, pooled), a watchdog thread that aborts the job when a
 * collective misses its deadline, the single-process fallback, and the cpu backend's
 * collective slots. */
#include "runtime/collective.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"

#define CHUNK_ELEMS (1 << 28) /* elements per MPI call (MPI counts are int) */

struct ApxColl {
  int32_t rank, world;
  int mpi;                /* MPI in use */
  int owns_mpi;           /* this layer called MPI_Init_thread */
  double timeout_s;
  void *scratch;          /* packing buffer for fused reductions */
  size_t scratch_cap;

  /* watchdog: one collective at a time is "active" with a deadline */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop, active;
  double start, deadline;
  char what[160];

  ApxCollRequest *free_reqs; /* finished requests kept with their staging buffers */
  int32_t n_pending;
  int agreed_exit;           /* apx_coll_mark_agreed_exit */
};

/* A run of tensors [a, b) with one wire type, staged at byte offset `off` of the request's
 * buffer; its MPI requests are reqs[r0 .. r0 + nreq). */
typedef struct ReqRun {
  int32_t a, b;
  int wire;
  size_t off;
  int64_t n;
  int32_t r0, nreq;
} ReqRun;

struct ApxCollRequest {
  ApxCollRequest *next;   /* free list */
  char what[96];
  ApxReduceOp op;
  double post;
  int done;
  ApxTensor *out;         /* [n] */
  int32_t n, out_cap;
  ReqRun *runs;
  int32_t n_runs, runs_cap;
  MPI_Request *reqs;
  int32_t n_reqs, reqs_cap;
  void *buf;              /* staging */
  size_t buf_cap;
};

static int mpi_initialized_here = 0; /* MPI_Init_thread at most once per process */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int coll_error(const ApxColl *c, ApxDiag *d, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int coll_error(const ApxColl *c, ApxDiag *d, const char *what, const char *fmt, ...) {
  char buf[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return apx_diag_error(d, APX_EXIT_RUNTIME, "rank %d of %d: %s: %s", c ? (int)c->rank : 0,
                        c ? (int)c->world : 1, what, buf);
}

static int mpi_fail(const ApxColl *c, ApxDiag *d, const char *what, const char *call, int rc) {
  char s[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) len = 0;
  s[len] = '\0';
  return coll_error(c, d, what, "%s failed: %s", call, len ? s : "unknown MPI error");
}

void apx_coll_config_init(ApxCollConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->mode = APX_COLL_AUTO;
  cfg->timeout_s = APX_COLL_DEFAULT_TIMEOUT_S;
}

int apx_coll_launched_by_mpi(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

/* ---- watchdog ------------------------------------------------------------------------ */

static void *watchdog_main(void *arg) {
  ApxColl *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    if (!c->active) {
      pthread_cond_wait(&c->cv, &c->mu);
      continue;
    }
    double now = now_s();
    if (now < c->deadline) {
      double wake = c->deadline;
      struct timespec ts;
      ts.tv_sec = (time_t)wake;
      ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&c->cv, &c->mu, &ts);
      continue;
    }
    char msg[512];
    snprintf(msg, sizeof msg,
             "apexrun: rank %d of %d: collective '%s' did not complete within %.1f s (waited "
             "%.1f s): a peer rank is dead or hung; aborting the job\n",
             (int)c->rank, (int)c->world, c->what, c->timeout_s, now - c->start);
    pthread_mutex_unlock(&c->mu);
    ssize_t w = write(STDERR_FILENO, msg, strlen(msg));
    (void)w;
    alarm(30); /* should MPI_Abort itself hang, SIGALRM ends this process and mpirun the job */
    MPI_Abort(MPI_COMM_WORLD, APX_EXIT_RUNTIME);
    _exit(APX_EXIT_RUNTIME);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void guard_begin(ApxColl *c, const char *what) {
  if (!c->thread_started) return;
  pthread_mutex_lock(&c->mu);
  snprintf(c->what, sizeof c->what, "%s", what);
  c->start = now_s();
  c->deadline = c->start + c->timeout_s;
  c->active = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void guard_end(ApxColl *c) {
  if (!c->thread_started) return;
  pthread_mutex_lock(&c->mu);
  c->active = 0;
  pthread_mutex_unlock(&c->mu);
}

static int start_watchdog(ApxColl *c, ApxDiag *d) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
      pthread_mutex_init(&c->mu, NULL) || pthread_cond_init(&c->cv, &ca))
    return coll_error(c, d, "init", "cannot set up the collective watchdog");
  pthread_condattr_destroy(&ca);
  int rc = pthread_create(&c->thread, NULL, watchdog_main, c);
  if (rc) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    return coll_error(c, d, "init", "cannot start the collective watchdog: %s", strerror(rc));
  }
  c->thread_started = 1;
  return 0;
}

static void stop_watchdog(ApxColl *c) {
  if (!c->thread_started) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  c->thread_started = 0;
}

/* ---- lifetime ------------------------------------------------------------------------ */

int apx_coll_init(ApxColl **out, const ApxCollConfig *cfg, ApxDiag *d) {
  *out = NULL;
  ApxCollConfig dflt;
  if (!cfg) {
    apx_coll_config_init(&dflt);
    cfg = &dflt;
  }
  ApxColl *c = calloc(1, sizeof *c);
  if (!c) return apx_diag_error(d, APX_EXIT_RUNTIME, "collectives: out of memory");
  c->world = 1;
  c->timeout_s = cfg->timeout_s;
  int use_mpi = cfg->mode == APX_COLL_MPI || (cfg->mode == APX_COLL_AUTO && apx_coll_launched_by_mpi());
  if (use_mpi) {
    int inited = 0, provided = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
      if (mpi_initialized_here) {
        free(c);
        return apx_diag_error(d, APX_EXIT_RUNTIME, "collectives: MPI was finalized in this process");
      }
      rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) {
        int r = mpi_fail(c, d, "init", "MPI_Init_thread", rc);
        free(c);
        return r;
      }
      c->owns_mpi = 1;
      mpi_initialized_here = 1;
    } else {
      MPI_Query_thread(&provided);
    }
    /* the watchdog calls MPI_Abort from its own thread while the main thread waits inside
     * MPI: legal only with MPI_THREAD_MULTIPLE */
    if (provided < MPI_THREAD_MULTIPLE && c->timeout_s > 0) {
      apx_diag_warn(d, "collectives: this MPI provides thread level %d, not MPI_THREAD_MULTIPLE: "
                    "no collective timeout (a hung rank is not detected)", provided);
      c->timeout_s = 0;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int r = 0, w = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    c->rank = r;
    c->world = w;
    c->mpi = 1;
    if (c->timeout_s > 0 && start_watchdog(c, d)) {
      apx_coll_finalize(c);
      return -1;
    }
  }
  *out = c;
  return 0;
}

void apx_coll_finalize(ApxColl *c) {
  if (!c) return;
  /* a reduction still in flight (a step failed after starting it) cannot be finished or
   * cancelled: the job ends instead of hanging in MPI_Finalize */
  if (c->mpi && c->n_pending > 0)
    apx_coll_abort(c, 1, "collectives: finalize with a bucket reduction still in flight (a step "
                   "failed mid-backward); aborting the job");
  if (c->mpi && c->owns_mpi) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
      guard_begin(c, "finalize"); /* MPI_Finalize waits for every rank */
      MPI_Finalize();
      guard_end(c);
    }
  }
  stop_watchdog(c);
  free(c->scratch);
  while (c->free_reqs) {
    ApxCollRequest *r = c->free_reqs;
    c->free_reqs = r->next;
    free(r->out);
    free(r->runs);
    free(r->reqs);
    free(r->buf);
    free(r);
  }
  free(c);
}

void apx_coll_abort(ApxColl *c, int code, const char *msg) {
  if (msg && *msg) {
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
  }
  if (c && c->mpi && c->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

void apx_coll_mark_agreed_exit(ApxColl *c) {
  if (c) c->agreed_exit = 1;
}
int apx_coll_agreed_exit(const ApxColl *c) { return c && c->agreed_exit; }

int32_t apx_coll_rank(const ApxColl *c) { return c ? c->rank : 0; }
int32_t apx_coll_world(const ApxColl *c) { return c ? c->world : 1; }
int apx_coll_uses_mpi(const ApxColl *c) { return c && c->mpi; }

void apx_coll_set_timeout(ApxColl *c, double timeout_s) {
  if (!c) return;
  if (c->thread_started) pthread_mutex_lock(&c->mu);
  c->timeout_s = timeout_s;
  if (c->thread_started) pthread_mutex_unlock(&c->mu);
}

/* ---- reductions ---------------------------------------------------------------------- */

typedef enum Wire { WIRE_NONE = 0, WIRE_F32, WIRE_F64, WIRE_I32, WIRE_I64, WIRE_U8 } Wire;

static Wire wire_of(ApxDType t) {
  switch (t) {
    case APX_DT_F16:
    case APX_DT_BF16:
    case APX_DT_F32: return WIRE_F32;
    case APX_DT_F64: return WIRE_F64;
    case APX_DT_I32: return WIRE_I32;
    case APX_DT_I64: return WIRE_I64;
    case APX_DT_U8:
    case APX_DT_BOOL: return WIRE_U8;
    default: return WIRE_NONE;
  }
}

static size_t wire_size(Wire w) {
  return w == WIRE_F64 || w == WIRE_I64 ? 8 : w == WIRE_U8 ? 1 : 4;
}

static MPI_Datatype wire_mpi(Wire w) {
  switch (w) {
    case WIRE_F32: return MPI_FLOAT;
    case WIRE_F64: return MPI_DOUBLE;
    case WIRE_I32: return MPI_INT32_T;
    case WIRE_I64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
  }
}

static void scale_wire(void *p, Wire w, int64_t n, double s) {
  if (s == 1.0) return;
  if (w == WIRE_F32) {
    float *f = p, fs = (float)s;
    for (int64_t i = 0; i < n; i++) f[i] *= fs;
  } else if (w == WIRE_F64) {
    double *f = p;
    for (int64_t i = 0; i < n; i++) f[i] *= s;
  }
}

static int reserve(ApxColl *c, size_t bytes, ApxDiag *d, const char *what) {
  if (bytes <= c->scratch_cap) return 0;
  void *p = realloc(c->scratch, bytes);
  if (!p) return coll_error(c, d, what, "out of memory for a %zu-byte buffer", bytes);
  c->scratch = p;
  c->scratch_cap = bytes;
  return 0;
}

/* MPI_Allreduce in place over n elements of wire type w, in int-sized chunks. */
static int reduce_wire(ApxColl *c, void *buf, Wire w, int64_t n, ApxReduceOp op, const char *what, ApxDiag *d) {
  MPI_Op mop = op == APX_REDUCE_MAX ? MPI_MAX : MPI_SUM;
  guard_begin(c, what);
  int rc = MPI_SUCCESS;
  for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
    int cnt = (int)(n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS);
    rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * wire_size(w), cnt, wire_mpi(w), mop,
                       MPI_COMM_WORLD);
  }
  guard_end(c);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(c, d, what, "MPI_Allreduce", rc);
}

/* tensors [a, b) share wire type w: one fused reduction */
static int reduce_run(ApxColl *c, ApxTensor *t, int32_t a, int32_t b, Wire w, ApxReduceOp op,
                      double pre, double post, const char *what, ApxDiag *d) {
  const int fp = w == WIRE_F32 || w == WIRE_F64;
  if (!fp || op != APX_REDUCE_SUM) pre = post = 1.0;
  /* one tensor already in its wire type: reduce it where it is */
  if (b - a == 1 && wire_of(t[a].dtype) == w && t[a].dtype != APX_DT_F16 && t[a].dtype != APX_DT_BF16) {
    int64_t n = apx_tensor_numel(&t[a]);
    scale_wire(t[a].data, w, n, pre);
    if (reduce_wire(c, t[a].data, w, n, op, what, d)) return -1;
    scale_wire(t[a].data, w, n, post);
    return 0;
  }
  int64_t total = 0;
  for (int32_t i = a; i < b; i++) total += apx_tensor_numel(&t[i]);
  size_t ws = wire_size(w);
  if (reserve(c, (size_t)total * ws + 1, d, what)) return -1;
  char *buf = c->scratch;
  int64_t off = 0;
  for (int32_t i = a; i < b; i++) { /* pack (widening fp16/bf16) */
    int64_t n = apx_tensor_numel(&t[i]);
    if (t[i].dtype == APX_DT_F16 || t[i].dtype == APX_DT_BF16) {
      if (apx_cpu_convert(t[i].data, t[i].dtype, buf + (size_t)off * ws, APX_DT_F32, n) != APX_STATUS_OK)
        return coll_error(c, d, what, "cannot widen %s", apx_dtype_name(t[i].dtype));
    } else {
      memcpy(buf + (size_t)off * ws, t[i].data, (size_t)n * ws);
    }
    off += n;
  }
  scale_wire(buf, w, total, pre);
  if (reduce_wire(c, buf, w, total, op, what, d)) return -1;
  scale_wire(buf, w, total, post);
  off = 0;
  for (int32_t i = a; i < b; i++) { /* unpack (rounding to nearest even for fp16/bf16) */
    int64_t n = apx_tensor_numel(&t[i]);
    if (t[i].dtype == APX_DT_F16 || t[i].dtype == APX_DT_BF16) {
      if (apx_cpu_convert(buf + (size_t)off * ws, APX_DT_F32, t[i].data, t[i].dtype, n) != APX_STATUS_OK)
        return coll_error(c, d, what, "cannot narrow to %s", apx_dtype_name(t[i].dtype));
    } else {
      memcpy(t[i].data, buf + (size_t)off * ws, (size_t)n * ws);
    }
    off += n;
  }
  return 0;
}

int apx_coll_allreduce(ApxColl *c, ApxTensor *t, int32_t n, ApxReduceOp op, float pre, float post,
                       const char *what, ApxDiag *d) {
  if (!what) what = "allreduce";
  for (int32_t i = 0; i < n; i++)
    if (t[i].data && wire_of(t[i].dtype) == WIRE_NONE)
      return coll_error(c, d, what, "not supported yet: tensor %d of type %s", i, apx_dtype_name(t[i].dtype));
  if (!c || !c->mpi) { /* one process: only the scale factors apply */
    double s = (double)pre * (double)post;
    if (op == APX_REDUCE_SUM && fabs(s - 1.0) > 1e-7)
      for (int32_t i = 0; i < n; i++) {
        if (!t[i].data) continue;
        Wire w = wire_of(t[i].dtype);
        if (w == WIRE_F32 && t[i].dtype == APX_DT_F32) scale_wire(t[i].data, w, apx_tensor_numel(&t[i]), s);
        if (w == WIRE_F64) scale_wire(t[i].data, w, apx_tensor_numel(&t[i]), s);
      }
    return 0;
  }
  for (int32_t a = 0; a < n;) {
    if (!t[a].data || apx_tensor_numel(&t[a]) == 0) {
      a++;
      continue;
    }
    Wire w = wire_of(t[a].dtype);
    int32_t b = a + 1;
    while (b < n && t[b].data && wire_of(t[b].dtype) == w) b++;
    if (reduce_run(c, t, a, b, w, op, pre, post, what, d)) return -1;
    a = b;
  }
  return 0;
}

int apx_coll_broadcast(ApxColl *c, ApxTensor *t, int32_t n, int32_t root, const char *what, ApxDiag *d) {
  if (!what) what = "broadcast";
  if (!c || !c->mpi) return 0;
  if (root < 0 || root >= c->world) return coll_error(c, d, what, "no rank %d", (int)root);
  guard_begin(c, what);
  int rc = MPI_SUCCESS;
  for (int32_t i = 0; i < n && rc == MPI_SUCCESS; i++) {
    if (!t[i].data) continue;
    size_t bytes = apx_tensor_bytes(&t[i]);
    for (size_t off = 0; off < bytes && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
      int cnt = (int)(bytes - off < CHUNK_ELEMS ? bytes - off : CHUNK_ELEMS);
      rc = MPI_Bcast((char *)t[i].data + off, cnt, MPI_BYTE, root, MPI_COMM_WORLD);
    }
  }
  guard_end(c);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(c, d, what, "MPI_Bcast", rc);
}

int apx_coll_allgather(ApxColl *c, const void *send, size_t bytes, void *recv, const char *what, ApxDiag *d) {
  if (!what) what = "allgather";
  if (!c || !c->mpi) {
    memmove(recv, send, bytes);
    return 0;
  }
  if (bytes > (size_t)CHUNK_ELEMS) return coll_error(c, d, what, "%zu bytes is too much to gather", bytes);
  guard_begin(c, what);
  int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  guard_end(c);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(c, d, what, "MPI_Allgather", rc);
}

int apx_coll_barrier(ApxColl *c, const char *what, ApxDiag *d) {
  if (!what) what = "barrier";
  if (!c || !c->mpi) return 0;
  guard_begin(c, what);
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  guard_end(c);
  return rc == MPI_SUCCESS ? 0 : mpi_fail(c, d, what, "MPI_Barrier", rc);
}

/* ---- non-blocking reductions --------------------------------------------------------- */

static int grow(void **p, int32_t *cap, int32_t need, size_t elem) {
  if (need <= *cap) return 0;
  int32_t nc = *cap ? *cap : 4;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * elem);
  if (!q) return -1;
  *p = q;
  *cap = nc;
  return 0;
}

static ApxCollRequest *req_get(ApxColl *c) {
  ApxCollRequest *r = c->free_reqs;
  if (r) {
    c->free_reqs = r->next;
    return r;
  }
  return calloc(1, sizeof *r);
}

static void req_put(ApxColl *c, ApxCollRequest *r) {
  r->n = r->n_runs = r->n_reqs = 0;
  r->done = 0;
  r->next = c->free_reqs;
  c->free_reqs = r;
}

/* Stages in[a, b) (wire w) at buf + off: fp16/bf16 widened, others copied, then * pre. */
static int stage_run(ApxColl *c, const ApxTensor *in, int32_t a, int32_t b, Wire w, char *buf, double pre,
                     const char *what, ApxDiag *d) {
  size_t ws = wire_size(w);
  int64_t off = 0;
  for (int32_t i = a; i < b; i++) {
    int64_t n = apx_tensor_numel(&in[i]);
    if (in[i].dtype == APX_DT_F16 || in[i].dtype == APX_DT_BF16) {
      if (apx_cpu_convert(in[i].data, in[i].dtype, buf + (size_t)off * ws, APX_DT_F32, n) != APX_STATUS_OK)
        return coll_error(c, d, what, "cannot widen %s", apx_dtype_name(in[i].dtype));
    } else {
      memcpy(buf + (size_t)off * ws, in[i].data, (size_t)n * ws);
    }
    off += n;
  }
  scale_wire(buf, w, off, pre);
  return 0;
}

int apx_coll_iallreduce(ApxColl *c, const ApxTensor *in, const ApxTensor *out, int32_t n, ApxReduceOp op,
                        float pre, float post, const char *what, ApxCollRequest **req, ApxDiag *d) {
  *req = NULL;
  if (!what) what = "allreduce";
  for (int32_t i = 0; i < n; i++) {
    if (in[i].data && wire_of(in[i].dtype) == WIRE_NONE)
      return coll_error(c, d, what, "not supported yet: tensor %d of type %s", i, apx_dtype_name(in[i].dtype));
    if (in[i].data && (!out[i].data || out[i].dtype != in[i].dtype ||
                       apx_tensor_numel(&out[i]) != apx_tensor_numel(&in[i])))
      return coll_error(c, d, what, "output %d does not match input %d", i, i);
  }
  if (!c) return coll_error(c, d, what, "no collective layer");
  ApxCollRequest *r = req_get(c);
  if (!r) return coll_error(c, d, what, "out of memory");
  snprintf(r->what, sizeof r->what, "%s", what);
  r->op = op;
  r->post = post;
  if (grow((void **)&r->out, &r->out_cap, n + 1, sizeof *r->out)) goto oom;
  if (n) memcpy(r->out, out, (size_t)n * sizeof *out);
  r->n = n;
  /* runs of one wire type, each at an 8-byte aligned offset of one staging buffer */
  size_t total = 0;
  for (int32_t a = 0; a < n;) {
    if (!in[a].data || apx_tensor_numel(&in[a]) == 0) {
      a++;
      continue;
    }
    Wire w = wire_of(in[a].dtype);
    int32_t b = a + 1;
    while (b < n && in[b].data && wire_of(in[b].dtype) == w) b++;
    if (grow((void **)&r->runs, &r->runs_cap, r->n_runs + 1, sizeof *r->runs)) goto oom;
    ReqRun *run = &r->runs[r->n_runs++];
    run->a = a, run->b = b, run->wire = (int)w, run->off = total, run->n = 0;
    for (int32_t i = a; i < b; i++) run->n += apx_tensor_numel(&in[i]);
    total += ((size_t)run->n * wire_size(w) + 7) / 8 * 8;
    a = b;
  }
  if (total + 8 > r->buf_cap) {
    void *nb = realloc(r->buf, total + 8);
    if (!nb) goto oom;
    r->buf = nb;
    r->buf_cap = total + 8;
  }
  for (int32_t k = 0; k < r->n_runs; k++) {
    ReqRun *run = &r->runs[k];
    Wire w = (Wire)run->wire;
    const int fp = w == WIRE_F32 || w == WIRE_F64;
    double rpre = fp && op == APX_REDUCE_SUM ? pre : 1.0;
    if (stage_run(c, in, run->a, run->b, w, (char *)r->buf + run->off, rpre, what, d)) {
      req_put(c, r);
      return -1;
    }
  }
  /* start: one MPI_Iallreduce per int-sized chunk of each run */
  MPI_Op mop = op == APX_REDUCE_MAX ? MPI_MAX : MPI_SUM;
  for (int32_t k = 0; k < r->n_runs; k++) {
    ReqRun *run = &r->runs[k];
    Wire w = (Wire)run->wire;
    run->r0 = r->n_reqs;
    run->nreq = 0;
    if (!c->mpi) continue;
    for (int64_t off = 0; off < run->n; off += CHUNK_ELEMS) {
      int cnt = (int)(run->n - off < CHUNK_ELEMS ? run->n - off : CHUNK_ELEMS);
      if (grow((void **)&r->reqs, &r->reqs_cap, r->n_reqs + 1, sizeof *r->reqs)) goto oom_started;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)r->buf + run->off + (size_t)off * wire_size(w), cnt,
                              wire_mpi(w), mop, MPI_COMM_WORLD, &r->reqs[r->n_reqs]);
      if (rc != MPI_SUCCESS) {
        /* the reductions already started cannot be cancelled (MPI forbids it for nonblocking
         * collectives): the request stays pending and the job ends on this error */
        c->n_pending++;
        return mpi_fail(c, d, what, "MPI_Iallreduce", rc);
      }
      r->n_reqs++;
      run->nreq++;
    }
  }
  c->n_pending++;
  *req = r;
  return 0;
oom_started:
  c->n_pending++;
  return coll_error(c, d, what, "out of memory");
oom:
  req_put(c, r);
  return coll_error(c, d, what, "out of memory");
}

int apx_coll_test(ApxColl *c, ApxCollRequest *r, int *done, ApxDiag *d) {
  *done = 1;
  if (!r) return 0;
  if (!r->done && r->n_reqs > 0) {
    int flag = 0;
    int rc = MPI_Testall(r->n_reqs, r->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(c, d, r->what, "MPI_Testall", rc);
    r->done = flag != 0;
  } else {
    r->done = 1;
  }
  *done = r->done;
  return 0;
}

int apx_coll_wait(ApxColl *c, ApxCollRequest *r, ApxDiag *d) {
  if (!r) return 0;
  int rc = MPI_SUCCESS;
  if (!r->done && r->n_reqs > 0) {
    guard_begin(c, r->what);
    rc = MPI_Waitall(r->n_reqs, r->reqs, MPI_STATUSES_IGNORE);
    guard_end(c);
  }
  if (rc != MPI_SUCCESS) {
    /* some chunks may still be active (MPI_ERR_PENDING) and MPI may yet write into r->buf:
     * the request stays pending and off the free list (never reused or freed); the job ends
     * on this error, as after a failed MPI_Iallreduce */
    return mpi_fail(c, d, r->what, "MPI_Waitall", rc);
  }
  c->n_pending--;
  int err = 0;
  for (int32_t k = 0; k < r->n_runs && !err; k++) {
    ReqRun *run = &r->runs[k];
    Wire w = (Wire)run->wire;
    const int fp = w == WIRE_F32 || w == WIRE_F64;
    char *buf = (char *)r->buf + run->off;
    if (fp && r->op == APX_REDUCE_SUM) scale_wire(buf, w, run->n, r->post);
    size_t ws = wire_size(w);
    int64_t off = 0;
    for (int32_t i = run->a; i < run->b; i++) { /* unpack (rounding to nearest even for fp16/bf16) */
      ApxTensor *t = &r->out[i];
      int64_t n = apx_tensor_numel(t);
      if (t->dtype == APX_DT_F16 || t->dtype == APX_DT_BF16) {
        if (apx_cpu_convert(buf + (size_t)off * ws, APX_DT_F32, t->data, t->dtype, n) != APX_STATUS_OK) {
          err = coll_error(c, d, r->what, "cannot narrow to %s", apx_dtype_name(t->dtype));
          break;
        }
      } else {
        memcpy(t->data, buf + (size_t)off * ws, (size_t)n * ws);
      }
      off += n;
    }
  }
  req_put(c, r);
  return err;
}

int32_t apx_coll_pending(const ApxColl *c) { return c ? c->n_pending : 0; }

void apx_coll_bucket_scales(const ApxAttrAllreduce *a, int32_t world, float *pre, float *post) {
  float f = a && a->predivide > 0 ? a->predivide : 1.0f;
  int avg = a ? a->average != 0 : 1;
  *pre = 1.0f / f;
  *post = avg ? f / (float)(world > 0 ? world : 1) : f;
}

/* ---- backend slots (cpu: device memory is host memory) -------------------------------- */

static ApxStatus slot_status(ApxBackend *be, const ApxDiag *d) {
  return apx_backend_fail(be, APX_STATUS_RUNTIME, "%s", d->msg);
}

static ApxStatus slot_allreduce(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, ApxReduceOp op) {
  ApxDiag d;
  apx_diag_init(&d);
  return apx_coll_allreduce(be->coll_ctx, t, n, op, 1.0f, 1.0f, "allreduce", &d) ? slot_status(be, &d)
                                                                                 : APX_STATUS_OK;
}

void apx_coll_bucket_what(const ApxAttrAllreduce *a, char *what, size_t cap) {
  if (a && a->bucket < 0)
    snprintf(what, cap, "allreduce of BatchNorm statistics (--sync-bn)");
  else
    snprintf(what, cap, "allreduce bucket %d", a ? (int)a->bucket : -1);
}

static ApxStatus slot_bucket_start(ApxBackend *be, ApxQueue *q, const ApxTensor *ins, const ApxTensor *outs,
                                   int32_t n, const ApxAttrAllreduce *a, ApxCollRequest **req) {
  ApxDiag d;
  apx_diag_init(&d);
  float pre, post;
  apx_coll_bucket_scales(a, be->world, &pre, &post);
  char what[64];
  apx_coll_bucket_what(a, what, sizeof what);
  return apx_coll_iallreduce(be->coll_ctx, ins, outs, n, APX_REDUCE_SUM, pre, post, what, req, &d)
             ? slot_status(be, &d)
             : APX_STATUS_OK;
}

static ApxStatus slot_request_test(ApxBackend *be, ApxCollRequest *req, int *done) {
  ApxDiag d;
  apx_diag_init(&d);
  return apx_coll_test(be->coll_ctx, req, done, &d) ? slot_status(be, &d) : APX_STATUS_OK;
}

static ApxStatus slot_request_wait(ApxBackend *be, ApxQueue *q, ApxCollRequest *req) {
  ApxDiag d;
  apx_diag_init(&d);
  return apx_coll_wait(be->coll_ctx, req, &d) ? slot_status(be, &d) : APX_STATUS_OK;
}

/* The blocking bucket: the same MPI_Iallreduce, waited for at once, so a bucket's bytes are
 * the same whether or not the executor overlaps it (apexrun --no-overlap). */
static ApxStatus slot_allreduce_bucket(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n,
                                       const ApxAttrAllreduce *a) {
  ApxCollRequest *req = NULL;
  ApxStatus st = slot_bucket_start(be, q, t, t, n, a, &req);
  return st == APX_STATUS_OK ? slot_request_wait(be, q, req) : st;
}

static ApxStatus slot_broadcast(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n, int32_t root) {
  ApxDiag d;
  apx_diag_init(&d);
  return apx_coll_broadcast(be->coll_ctx, t, n, root, "broadcast", &d) ? slot_status(be, &d) : APX_STATUS_OK;
}

static ApxStatus slot_barrier(ApxBackend *be) {
  ApxDiag d;
  apx_diag_init(&d);
  return apx_coll_barrier(be->coll_ctx, "barrier", &d) ? slot_status(be, &d) : APX_STATUS_OK;
}

/* The cuda backend's slots come from the NCCL layer (runtime/collective_nccl.c), linked only
 * where CUDA is; a weak reference keeps every other binary linkable. */
int apx_coll_attach_nccl(ApxColl *c, ApxBackend *be, ApxDiag *d) __attribute__((weak));

double apx_coll_timeout(const ApxColl *c) { return c ? c->timeout_s : 0; }

int apx_coll_attach(ApxColl *c, ApxBackend *be, ApxDiag *d) {
  if (apx_coll_world(c) <= 1) return 0; /* one process: nothing to reduce, on any backend */
  if (!strcmp(be->iface.name, "cuda")) {
    if (!apx_coll_attach_nccl)
      return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                            "not supported yet: data parallelism on the cuda backend in a binary "
                            "built without the NCCL layer (//runtime:collective_nccl)");
    return apx_coll_attach_nccl(c, be, d);
  }
  if (strcmp(be->iface.name, "cpu") != 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "not supported yet: data parallelism on the %s backend",
                          be->iface.name);
  ApxBackendI slots;
  memset(&slots, 0, sizeof slots);
  slots.allreduce = slot_allreduce;
  slots.allreduce_bucket = slot_allreduce_bucket;
  slots.allreduce_bucket_start = slot_bucket_start;
  slots.request_test = slot_request_test;
  slots.request_wait = slot_request_wait;
  slots.broadcast = slot_broadcast;
  slots.barrier = slot_barrier;
  apx_backend_set_collectives(be, &slots, c, NULL, apx_coll_rank(c), apx_coll_world(c));
  return 0;
}
