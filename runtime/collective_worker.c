/* collective_worker.c - the rank side of collective_test: run under `mpirun -np K`, each
 * scenario calls the collective layer (runtime/collective.h) with values every rank can
 * predict, checks the result exactly and prints "rank R of K: ok SCENARIO" (exit 0), or
 * "rank R of K: FAIL ..." (exit 1).
 *
 *   collective_worker SCENARIO [TIMEOUT_S]
 *     dtypes     one fused allreduce (SUM) over fp32, fp64, fp16, bf16, int32, int64 tensors
 *                in mixed order, then each dtype alone; MAX over fp32 and int64
 *     buckets    the cpu backend's slots after apx_coll_attach: allreduce_bucket with
 *                averaging, with predivide 4 and without averaging; fp16 bucket; several
 *                bucket layouts (1, 3, 7 tensors of odd sizes)
 *     bcast      broadcast from the last rank, allgather of each rank's id, barrier
 *     ibuckets   non-blocking reductions: four started at once (fp32, fp16, bf16, fp64,
 *                int32; outputs apart from and over the inputs), the inputs overwritten right
 *                after each start, polled, waited for in reverse order, checked exactly; the
 *                backend's start/test/wait slots against its blocking bucket slot and (2
 *                ranks) apx_coll_allreduce on non-integer values, bit for bit; every rank
 *                the same bytes
 *     ihang      the last rank stops itself (SIGSTOP) before a bucket: the others' wait must
 *                end the job through the watchdog after TIMEOUT_S, naming the bucket
 *     hang       the last rank stops itself (SIGSTOP) before a barrier: the others' watchdog
 *                must abort the job after TIMEOUT_S
 *     die        the last rank kills itself (SIGKILL) before a barrier: mpirun ends the job
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/half.h"
#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/backend_registry.h"

static int R, K;
static int failures;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      printf("rank %d of %d: FAIL %s:%d: ", R, K, __FILE__, __LINE__); \
      printf(__VA_ARGS__);                                \
      printf("\n");                                       \
      failures++;                                         \
    }                                                     \
  } while (0)

static ApxTensor tensor(void *data, ApxDType dt, int64_t n) {
  ApxTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  t.rank = 1;
  t.dims[0] = n;
  return t;
}

/* value of element i on rank r: small integers (exact in every float type) */
static double val(int r, int64_t i, int salt) { return (double)((r + 1) * ((i + salt) % 7) - 3); }
static double sum_val(int64_t i, int salt) {
  double s = 0;
  for (int r = 0; r < K; r++) s += val(r, i, salt);
  return s;
}

static void fill(ApxTensor *t, int salt) {
  int64_t n = t->dims[0];
  for (int64_t i = 0; i < n; i++) {
    double v = val(R, i, salt);
    switch (t->dtype) {
      case APX_DT_F32: ((float *)t->data)[i] = (float)v; break;
      case APX_DT_F64: ((double *)t->data)[i] = v; break;
      case APX_DT_F16: ((uint16_t *)t->data)[i] = apx_f32_to_f16((float)v); break;
      case APX_DT_BF16: ((uint16_t *)t->data)[i] = apx_f32_to_bf16((float)v); break;
      case APX_DT_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
      case APX_DT_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
      default: break;
    }
  }
}

static double get(const ApxTensor *t, int64_t i) {
  switch (t->dtype) {
    case APX_DT_F32: return ((const float *)t->data)[i];
    case APX_DT_F64: return ((const double *)t->data)[i];
    case APX_DT_F16: return apx_f16_to_f32(((const uint16_t *)t->data)[i]);
    case APX_DT_BF16: return apx_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case APX_DT_I32: return ((const int32_t *)t->data)[i];
    case APX_DT_I64: return (double)((const int64_t *)t->data)[i];
    default: return NAN;
  }
}

static void check_sum(const ApxTensor *t, int salt, double scale, const char *what) {
  for (int64_t i = 0; i < t->dims[0]; i++) {
    double want = sum_val(i, salt) * scale, got = get(t, i);
    if (got != want) {
      CHECK(0, "%s (%s, %lld elements): element %lld = %g, want %g", what, apx_dtype_name(t->dtype),
            (long long)t->dims[0], (long long)i, got, want);
      return;
    }
  }
}

static int scenario_dtypes(ApxColl *c, ApxDiag *d) {
  const ApxDType types[] = {APX_DT_F32, APX_DT_F64, APX_DT_F16, APX_DT_I32, APX_DT_BF16, APX_DT_I64, APX_DT_F32};
  const int64_t sizes[] = {5, 1000, 33, 1, 257, 8, 4096};
  enum { NT = 7 };
  ApxTensor t[NT];
  for (int k = 0; k < NT; k++) {
    t[k] = tensor(calloc((size_t)sizes[k], 8), types[k], sizes[k]);
    fill(&t[k], k);
  }
  if (apx_coll_allreduce(c, t, NT, APX_REDUCE_SUM, 1.0f, 1.0f, "allreduce mixed", d)) return -1;
  for (int k = 0; k < NT; k++) check_sum(&t[k], k, 1.0, "fused mixed-dtype sum");
  for (int k = 0; k < NT; k++) { /* each alone */
    fill(&t[k], k + 3);
    if (apx_coll_allreduce(c, &t[k], 1, APX_REDUCE_SUM, 1.0f, 1.0f, "allreduce one", d)) return -1;
    check_sum(&t[k], k + 3, 1.0, "single-tensor sum");
  }
  /* MAX: rank r contributes r at index i (and -i elsewhere) */
  float mf[16];
  int64_t mi[16];
  for (int i = 0; i < 16; i++) mf[i] = (float)((R + i) % K), mi[i] = (R * 31 + i) % K;
  ApxTensor mx[2] = {tensor(mf, APX_DT_F32, 16), tensor(mi, APX_DT_I64, 16)};
  if (apx_coll_allreduce(c, mx, 2, APX_REDUCE_MAX, 1.0f, 1.0f, "allreduce max", d)) return -1;
  for (int i = 0; i < 16; i++) {
    CHECK(mf[i] == (float)(K - 1), "max fp32 [%d] = %g", i, mf[i]);
    CHECK(mi[i] == (int64_t)(K - 1), "max int64 [%d] = %lld", i, (long long)mi[i]);
  }
  for (int k = 0; k < NT; k++) free(t[k].data);
  return 0;
}

static int scenario_buckets(ApxColl *c, ApxDiag *d) {
  ApxBackend *be = NULL;
  char err[512];
  if (apx_backend_create("cpu", NULL, &be, err, sizeof err) != APX_STATUS_OK) {
    CHECK(0, "cpu backend: %s", err);
    return -1;
  }
  if (apx_coll_attach(c, be, d)) return -1;
  CHECK(be->world == K && be->rank == R, "backend sees rank %d of %d", (int)be->rank, (int)be->world);
  CHECK(be->iface.allreduce_bucket != NULL, "no allreduce_bucket slot");
  const int layouts[3][8] = {{1, 4096}, {3, 7, 129, 1}, {7, 1, 2, 3, 5, 8, 13, 1023}};
  for (int l = 0; l < 3; l++) {
    for (int mode = 0; mode < 3; mode++) {
      /* mode 0: average; 1: predivide 4 + average; 2: predivide 4, sum */
      ApxAttrAllreduce a = {.bucket = l * 3 + mode, .fp32 = 0, .predivide = mode ? 4.0f : 1.0f,
                            .average = mode != 2};
      int n = layouts[l][0];
      ApxTensor t[8];
      for (int k = 0; k < n; k++) {
        t[k] = tensor(calloc((size_t)layouts[l][1 + k], 4), APX_DT_F32, layouts[l][1 + k]);
        fill(&t[k], k + l);
      }
      ApxStatus st = be->iface.allreduce_bucket(be, NULL, t, n, &a);
      CHECK(st == APX_STATUS_OK, "bucket %d: %s", a.bucket, be->err);
      /* values are small integers: x/4 sums exactly, the average K in {2,4} is exact */
      for (int k = 0; k < n; k++) {
        check_sum(&t[k], k + l, mode == 2 ? 1.0 : 1.0 / K, "bucket");
        free(t[k].data);
      }
    }
  }
  /* an fp16 bucket: summed in fp32, rounded once */
  uint16_t h[64];
  ApxTensor th = tensor(h, APX_DT_F16, 64);
  fill(&th, 5);
  ApxAttrAllreduce a = {.bucket = 99, .predivide = 1.0f, .average = 0};
  CHECK(be->iface.allreduce_bucket(be, NULL, &th, 1, &a) == APX_STATUS_OK, "fp16 bucket: %s", be->err);
  check_sum(&th, 5, 1.0, "fp16 bucket");
  /* the raw slots */
  double x[3] = {R, 2.0 * R, 1};
  ApxTensor tx = tensor(x, APX_DT_F64, 3);
  CHECK(be->iface.allreduce(be, NULL, &tx, 1, APX_REDUCE_SUM) == APX_STATUS_OK, "allreduce slot");
  CHECK(x[2] == K && x[0] == K * (K - 1) / 2.0, "allreduce slot result %g %g", x[0], x[2]);
  CHECK(be->iface.barrier(be) == APX_STATUS_OK, "barrier slot");
  apx_backend_free(be);
  return 0;
}

/* value of element i on rank r that is not a small integer (rounding shows) */
static float noisy(int r, int64_t i, int salt) {
  uint32_t h = (uint32_t)(r * 7919 + i * 104729 + salt * 15485863) * 2654435761u;
  return ((float)(h >> 8) / (float)(1u << 24) - 0.5f) * (float)(1 + (i % 5)) * 3.1f;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* every rank holds the same hash */
static void check_same_everywhere(ApxColl *c, uint64_t h, const char *what, ApxDiag *d) {
  uint64_t all[64];
  if (K > 64 || apx_coll_allgather(c, &h, sizeof h, all, "hash agreement", d)) {
    CHECK(0, "%s: allgather: %s", what, d->msg);
    return;
  }
  for (int r = 0; r < K; r++) CHECK(all[r] == h, "%s: rank %d got other bytes than rank %d", what, r, R);
}

static int scenario_ibuckets(ApxColl *c, ApxDiag *d) {
  /* 1. four reductions in flight at once, checked exactly (small integers) */
  const ApxDType types[] = {APX_DT_F32, APX_DT_F16, APX_DT_BF16, APX_DT_F64, APX_DT_I32, APX_DT_F32};
  const int64_t sizes[] = {1000, 33, 257, 5, 17, 4099};
  enum { NT = 6, NR = 4 };
  ApxTensor in[NR][NT], out[NR][NT];
  ApxCollRequest *req[NR];
  for (int q = 0; q < NR; q++) {
    for (int k = 0; k < NT; k++) {
      in[q][k] = tensor(calloc((size_t)sizes[k], 8), types[k], sizes[k]);
      fill(&in[q][k], k + 3 * q);
      /* request 1 and 3 reduce in place, 0 and 2 into separate outputs */
      out[q][k] = q % 2 ? in[q][k] : tensor(calloc((size_t)sizes[k], 8), types[k], sizes[k]);
    }
    /* request 2 is a plain sum; the others average over the ranks after a predivide by 4 */
    float pre = q == 2 ? 1.0f : 0.25f, post = q == 2 ? 1.0f : 4.0f / (float)K;
    char what[32];
    snprintf(what, sizeof what, "ibucket %d", q);
    if (apx_coll_iallreduce(c, in[q], out[q], NT, APX_REDUCE_SUM, pre, post, what, &req[q], d)) return -1;
    if (q % 2 == 0)
      for (int k = 0; k < NT; k++) fill(&in[q][k], 99); /* staged: overwriting the inputs is fine */
    int done = 0;
    if (apx_coll_test(c, req[0], &done, d)) return -1;
  }
  CHECK(apx_coll_pending(c) == NR, "%d reductions pending, want %d", (int)apx_coll_pending(c), NR);
  for (int q = NR - 1; q >= 0; q--) {
    if (apx_coll_wait(c, req[q], d)) return -1;
    for (int k = 0; k < NT; k++) {
      /* x/4 sums exactly; the average over K in {2, 4} is exact; int32 ignores pre/post */
      double scale = q == 2 || types[k] == APX_DT_I32 ? 1.0 : 1.0 / K;
      check_sum(&out[q][k], k + 3 * q, scale, "non-blocking reduction");
    }
  }
  CHECK(apx_coll_pending(c) == 0, "%d reductions still pending", (int)apx_coll_pending(c));
  for (int q = 0; q < NR; q++)
    for (int k = 0; k < NT; k++) {
      if (out[q][k].data != in[q][k].data) free(out[q][k].data);
      free(in[q][k].data);
    }

  /* 2. the backend's slots: overlapped = blocking (= the synchronous layer with 2 ranks), bit
   * for bit, on values whose rounding shows, fp32 and fp16 buckets */
  ApxBackend *be = NULL;
  char err[512];
  if (apx_backend_create("cpu", NULL, &be, err, sizeof err) != APX_STATUS_OK) {
    CHECK(0, "cpu backend: %s", err);
    return -1;
  }
  if (apx_coll_attach(c, be, d)) return -1;
  CHECK(be->iface.allreduce_bucket_start && be->iface.request_test && be->iface.request_wait,
        "no non-blocking bucket slots");
  uint64_t h = 1469598103934665603ull;
  for (int dt = 0; dt < 2; dt++) {
    ApxDType t = dt ? APX_DT_F16 : APX_DT_F32;
    enum { NB = 3 };
    const int64_t n[NB] = {4097, 1, 300};
    ApxTensor a[NB], b[NB], o[NB], s[NB];
    for (int k = 0; k < NB; k++) {
      a[k] = tensor(calloc((size_t)n[k], 4), t, n[k]);
      b[k] = tensor(calloc((size_t)n[k], 4), t, n[k]);
      o[k] = tensor(calloc((size_t)n[k], 4), t, n[k]);
      s[k] = tensor(calloc((size_t)n[k], 4), t, n[k]);
      for (int64_t i = 0; i < n[k]; i++) {
        float v = noisy(R, i, k + 10 * dt);
        if (dt) {
          ((uint16_t *)a[k].data)[i] = ((uint16_t *)b[k].data)[i] = ((uint16_t *)s[k].data)[i] = apx_f32_to_f16(v);
        } else {
          ((float *)a[k].data)[i] = ((float *)b[k].data)[i] = ((float *)s[k].data)[i] = v;
        }
      }
    }
    ApxAttrAllreduce at = {.bucket = 7, .fp32 = 0, .predivide = 3.0f, .average = 1};
    ApxCollRequest *rq = NULL;
    CHECK(be->iface.allreduce_bucket_start(be, NULL, a, o, NB, &at, &rq) == APX_STATUS_OK, "start: %s", be->err);
    int done = 0;
    CHECK(be->iface.request_test(be, rq, &done) == APX_STATUS_OK, "test: %s", be->err);
    CHECK(be->iface.request_wait(be, NULL, rq) == APX_STATUS_OK, "wait: %s", be->err);
    CHECK(be->iface.allreduce_bucket(be, NULL, b, NB, &at) == APX_STATUS_OK, "blocking: %s", be->err);
    float pre, post;
    apx_coll_bucket_scales(&at, K, &pre, &post);
    if (K == 2 && apx_coll_allreduce(c, s, NB, APX_REDUCE_SUM, pre, post, "synchronous", d)) return -1;
    for (int k = 0; k < NB; k++) {
      size_t bytes = apx_tensor_bytes(&o[k]);
      CHECK(memcmp(o[k].data, b[k].data, bytes) == 0, "%s tensor %d: overlapped and blocking slots differ",
            apx_dtype_name(t), k);
      CHECK(K != 2 || memcmp(o[k].data, s[k].data, bytes) == 0,
            "%s tensor %d: non-blocking and MPI_Allreduce differ", apx_dtype_name(t), k);
      CHECK(memcmp(o[k].data, a[k].data, bytes) != 0 || n[k] == 1, "%s tensor %d: nothing reduced",
            apx_dtype_name(t), k);
      h = fnv(h, o[k].data, bytes);
      free(a[k].data), free(b[k].data), free(o[k].data), free(s[k].data);
    }
  }
  check_same_everywhere(c, h, "overlapped buckets", d);
  apx_backend_free(be);
  return 0;
}

/* the last rank stops before the bucket; the others start it and wait */
static int scenario_ihang(ApxColl *c, ApxDiag *d) {
  if (apx_coll_barrier(c, "barrier before the fault", d)) return -1;
  if (R == K - 1) {
    printf("rank %d of %d: raising signal %d\n", R, K, SIGSTOP);
    fflush(stdout);
    raise(SIGSTOP);
    return 0;
  }
  float x[64] = {0};
  ApxTensor t = tensor(x, APX_DT_F32, 64);
  ApxCollRequest *rq = NULL;
  if (apx_coll_iallreduce(c, &t, &t, 1, APX_REDUCE_SUM, 1.0f, 1.0f, "allreduce bucket 3", &rq, d)) return -1;
  int done = 0;
  if (apx_coll_test(c, rq, &done, d)) return -1;
  if (apx_coll_wait(c, rq, d)) return -1;
  CHECK(0, "the bucket completed although rank %d is stopped", K - 1);
  return 0;
}

static int scenario_bcast(ApxColl *c, ApxDiag *d) {
  int32_t v[100];
  for (int i = 0; i < 100; i++) v[i] = R * 1000 + i;
  ApxTensor t = tensor(v, APX_DT_I32, 100);
  if (apx_coll_broadcast(c, &t, 1, K - 1, "broadcast", d)) return -1;
  for (int i = 0; i < 100; i++) CHECK(v[i] == (K - 1) * 1000 + i, "broadcast [%d] = %d", i, v[i]);
  int64_t mine = 7 * R + 1, all[64];
  if (apx_coll_allgather(c, &mine, sizeof mine, all, "allgather", d)) return -1;
  for (int r = 0; r < K; r++) CHECK(all[r] == 7 * r + 1, "allgather [%d] = %lld", r, (long long)all[r]);
  return apx_coll_barrier(c, "barrier", d);
}

static int scenario_fault(ApxColl *c, ApxDiag *d, int sig) {
  if (apx_coll_barrier(c, "barrier before the fault", d)) return -1;
  if (R == K - 1) {
    printf("rank %d of %d: raising signal %d\n", R, K, sig);
    fflush(stdout);
    raise(sig);
    return 0; /* continued (mpirun sends SIGCONT while it ends the job): nothing to check */
  }
  if (apx_coll_barrier(c, "barrier after the fault", d)) return -1;
  CHECK(0, "the barrier completed although rank %d is gone", K - 1);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: collective_worker dtypes|buckets|bcast|ibuckets|hang|ihang|die [TIMEOUT_S]\n");
    return 2;
  }
  ApxCollConfig cfg;
  apx_coll_config_init(&cfg);
  cfg.mode = APX_COLL_MPI;
  if (argc > 2) cfg.timeout_s = atof(argv[2]);
  ApxDiag d;
  apx_diag_init(&d);
  ApxColl *c = NULL;
  if (apx_coll_init(&c, &cfg, &d)) {
    fprintf(stderr, "%s\n", d.msg);
    return 1;
  }
  R = apx_coll_rank(c);
  K = apx_coll_world(c);
  const char *s = argv[1];
  int rc = !strcmp(s, "dtypes")    ? scenario_dtypes(c, &d)
           : !strcmp(s, "buckets") ? scenario_buckets(c, &d)
           : !strcmp(s, "bcast")   ? scenario_bcast(c, &d)
           : !strcmp(s, "ibuckets") ? scenario_ibuckets(c, &d)
           : !strcmp(s, "ihang")   ? scenario_ihang(c, &d)
           : !strcmp(s, "hang")    ? scenario_fault(c, &d, SIGSTOP)
           : !strcmp(s, "die")     ? scenario_fault(c, &d, SIGKILL)
                                   : (fprintf(stderr, "unknown scenario %s\n", s), -2);
  if (rc == -1) printf("rank %d of %d: FAIL %s\n", R, K, d.msg);
  if (rc == 0 && failures == 0) printf("rank %d of %d: ok %s\n", R, K, s);
  apx_coll_finalize(c);
  return rc == 0 && failures == 0 ? 0 : 1;
}
