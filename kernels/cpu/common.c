/* common.c - helpers shared by the CPU kernel families: error text, thread counts, the
 * OpenBLAS environment, strided and broadcast copies. */
#include <cblas.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/cpu/cpu_internal.h"

ApxStatus apx_cpu_fail(ApxCpuCtx *ctx, ApxStatus st, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
  }
  return st;
}

int apx_cpu_threads(const ApxCpuCtx *ctx) {
  if (ctx && ctx->n_threads > 0) return ctx->n_threads;
  int n = omp_get_max_threads();
  return n > 0 ? n : 1;
}

void apx_cpu_blas_threads(int nt) {
  static int current = -1;
  int cur;
#pragma omp atomic read
  cur = current;
  if (cur == nt) return;
  openblas_set_num_threads(nt);
#pragma omp atomic write
  current = nt;
}

const char *apx_cpu_blas_coretype_hint(void) {
  if (getenv("OPENBLAS_CORETYPE")) return NULL;
  const char *core = openblas_get_corename();
  static const char *generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                  "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"};
  int slow = core == NULL;
  for (size_t i = 0; core && i < sizeof generic / sizeof *generic; i++)
    if (strcmp(core, generic[i]) == 0) slow = 1;
  if (!slow) return NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return NULL;
}

/* Marks the re-executed process (set just before the exec, removed on entry). */
#define REEXEC_MARK "APX_CPU_REEXEC"

/* 1 when /proc/self/exe is the file argv0 names (not valgrind, qemu or an explicit ld.so
 * running the program): same inode, or, for a bare name found through PATH, same base name. */
static int self_is_argv0(const char *argv0) {
  struct stat se, sa;
  if (!argv0 || !*argv0 || stat("/proc/self/exe", &se) != 0) return 0;
  if (strchr(argv0, '/'))
    return stat(argv0, &sa) == 0 && sa.st_dev == se.st_dev && sa.st_ino == se.st_ino;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *base = strrchr(buf, '/');
  return strcmp(base ? base + 1 : buf, argv0) == 0;
}

/* Variables set for the re-executed process (only those the user left unset). */
typedef struct EnvSet {
  const char *name, *value;
  int set; /* set by us (to undo if the exec fails) */
} EnvSet;

void apx_cpu_reexec_tuned(char **argv) {
  if (getenv(REEXEC_MARK)) { /* this is the re-executed process: never loop */
    unsetenv(REEXEC_MARK);
    /* exec of /proc/self/exe named the process "exe" (ps, top, perf): its own name back */
    const char *base = argv && argv[0] ? strrchr(argv[0], '/') : NULL;
    if (argv && argv[0]) prctl(PR_SET_NAME, base ? base + 1 : argv[0], 0, 0, 0);
    return;
  }
  if (getenv("APX_NO_REEXEC") || !argv) return;
  const char *core = apx_cpu_blas_coretype_hint(); /* NULL when the user set one */
  int omp = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
  if ((!core && !omp) || !self_is_argv0(argv[0])) return;
  EnvSet env[] = {
      {"OPENBLAS_CORETYPE", core, 0},
      /* the kernels run OpenBLAS single-threaded (cpu_kernels.h): no idle pool threads */
      {"OPENBLAS_NUM_THREADS", core ? "1" : NULL, 0},
      {"OMP_WAIT_POLICY", omp ? "PASSIVE" : NULL, 0},
      {REEXEC_MARK, "1", 0},
  };
  int n = (int)(sizeof env / sizeof *env), ok = 1;
  for (int i = 0; i < n && ok; i++) {
    if (!env[i].value || getenv(env[i].name)) continue;
    ok = setenv(env[i].name, env[i].value, 1) == 0;
    env[i].set = ok;
  }
  if (ok) execv("/proc/self/exe", argv);
  /* exec failed: carry on with the loaded libraries, environment as it was */
  for (int i = 0; i < n; i++)
    if (env[i].set) unsetenv(env[i].name);
}

int64_t apx_cpu_index_at(const ApxTensor *t, int64_t i) {
  switch (t->dtype) {
    case APX_DT_I64: return ((const int64_t *)t->data)[i];
    case APX_DT_I32: return ((const int32_t *)t->data)[i];
    case APX_DT_I16: return ((const int16_t *)t->data)[i];
    case APX_DT_I8: return ((const int8_t *)t->data)[i];
    case APX_DT_U8: return ((const uint8_t *)t->data)[i];
    case APX_DT_BOOL: return ((const uint8_t *)t->data)[i] != 0;
    case APX_DT_U16: return ((const uint16_t *)t->data)[i];
    case APX_DT_U32: return ((const uint32_t *)t->data)[i];
    case APX_DT_U64: return (int64_t)((const uint64_t *)t->data)[i];
    default: return 0;
  }
}

#define STRIDED_ROW(T)                                                                    \
  do {                                                                                    \
    T *d_ = (T *)dp;                                                                      \
    const T *s_ = (const T *)sp;                                                          \
    for (int64_t j = 0; j < inner; j++) d_[j * di] = s_[j * si];                          \
  } while (0)

void apx_cpu_strided_copy(void *dst, const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides, const int64_t *dims, int rank, size_t esz,
                          int nt) {
  int64_t cd[APX_MAX_RANK], ds[APX_MAX_RANK], ss[APX_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 0) return;
    if (dims[d] == 1) continue;
    if (n > 0 && ds[n - 1] == dst_strides[d] * dims[d] && ss[n - 1] == src_strides[d] * dims[d]) {
      cd[n - 1] *= dims[d];
      ds[n - 1] = dst_strides[d];
      ss[n - 1] = src_strides[d];
    } else {
      cd[n] = dims[d];
      ds[n] = dst_strides[d];
      ss[n] = src_strides[d];
      n++;
    }
  }
  if (n == 0) {
    memcpy(dst, src, esz);
    return;
  }
  int64_t inner = cd[n - 1], di = ds[n - 1], si = ss[n - 1];
  int64_t rows = apx_dims_prod(cd, 0, n - 1);
  APX_OMP_FOR(rows * inner > APX_CPU_PAR_WORK && rows > 1)
  for (int64_t r = 0; r < rows; r++) {
    int64_t doff = 0, soff = 0, q = r;
    for (int d = n - 2; d >= 0; d--) {
      int64_t id = q % cd[d];
      q /= cd[d];
      doff += id * ds[d];
      soff += id * ss[d];
    }
    char *dp = (char *)dst + doff * (int64_t)esz;
    const char *sp = (const char *)src + soff * (int64_t)esz;
    if (di == 1 && si == 1) {
      memcpy(dp, sp, (size_t)inner * esz);
      continue;
    }
    switch (esz) {
      case 1: STRIDED_ROW(uint8_t); break;
      case 2: STRIDED_ROW(uint16_t); break;
      case 4: STRIDED_ROW(uint32_t); break;
      case 8: STRIDED_ROW(uint64_t); break;
      default:
        for (int64_t j = 0; j < inner; j++)
          memcpy(dp + j * di * (int64_t)esz, sp + j * si * (int64_t)esz, esz);
    }
  }
}

int apx_cpu_broadcast_copy(const ApxTensor *src, ApxTensor *dst, int nt) {
  ApxBcast bc;
  const ApxTensor *one[1] = {src};
  if (apx_bcast_init_t(&bc, dst, one, 1, NULL) != 0) return -1;
  int64_t ds[APX_MAX_RANK];
  apx_dims_strides(bc.dims, bc.rank, ds);
  apx_cpu_strided_copy(dst->data, ds, src->data, bc.strides[0], bc.dims, bc.rank,
                       apx_dtype_size(dst->dtype), nt);
  return 0;
}
