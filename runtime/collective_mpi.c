/* collective_mpi.c - collective.h over MPI (Debian OpenMPI): host-memory allreduce,
 * broadcast, allgather and barrier, a watchdog thread that aborts the job when a collective
 * misses its deadline, the single-process fallback, and the cpu backend's collective slots. */
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

static ApxStatus slot_allreduce_bucket(ApxBackend *be, ApxQueue *q, ApxTensor *t, int32_t n,
                                       const ApxAttrAllreduce *a) {
  ApxDiag d;
  apx_diag_init(&d);
  float pre, post;
  apx_coll_bucket_scales(a, be->world, &pre, &post);
  char what[64];
  if (a && a->bucket < 0)
    snprintf(what, sizeof what, "allreduce of BatchNorm statistics (--sync-bn)");
  else
    snprintf(what, sizeof what, "allreduce bucket %d", a ? (int)a->bucket : -1);
  return apx_coll_allreduce(be->coll_ctx, t, n, APX_REDUCE_SUM, pre, post, what, &d) ? slot_status(be, &d)
                                                                                    : APX_STATUS_OK;
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

int apx_coll_attach(ApxColl *c, ApxBackend *be, ApxDiag *d) {
  if (strcmp(be->iface.name, "cpu") != 0)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "not supported yet: data parallelism on the %s backend (the NCCL layer, "
                          "runtime/collective_nccl.c, waits for a CUDA backend)",
                          be->iface.name);
  ApxBackendI slots;
  memset(&slots, 0, sizeof slots);
  slots.allreduce = slot_allreduce;
  slots.allreduce_bucket = slot_allreduce_bucket;
  slots.broadcast = slot_broadcast;
  slots.barrier = slot_barrier;
  apx_backend_set_collectives(be, &slots, c, NULL, apx_coll_rank(c), apx_coll_world(c));
  return 0;
}
