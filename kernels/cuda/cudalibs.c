/* cudalibs.c - cudalibs.h: cuBLASLt, cuDNN and NCCL loaded with dlopen on first use, every
 * entry point the CUDA code calls defined here as a forwarding function (its prototype is
 * checked against the library's header), version checks, a test override per entry. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "kernels/cuda/cudalibs.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <link.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct LibInfo {
  const char *title;          /* "cuBLASLt" */
  const char *sonames[3];     /* candidates, newest first */
  const char *version_fn;
  long min_version, max_version; /* accepted [min, max] of the library's version number */
  const char *accepted;       /* the same in words */
} LibInfo;

static const LibInfo kLibs[APX_CUDALIB_COUNT] = {
    {"cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so.12", NULL}, "cublasLtGetVersion", 120000, 139999,
     "12.x or 13.x"},
    {"cuDNN", {"libcudnn.so.9", NULL, NULL}, "cudnnGetVersion", 90000, 99999, "9.x"},
    {"NCCL", {"libnccl.so.2", NULL, NULL}, "ncclGetVersion", 21200, 29999, "2.12 or newer 2.x"},
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_tried[APX_CUDALIB_COUNT];
static void *g_handle[APX_CUDALIB_COUNT];
static long g_version[APX_CUDALIB_COUNT];
static char g_path[APX_CUDALIB_COUNT][512];
static char g_err[APX_CUDALIB_COUNT][1024];

static long read_version(ApxCudaLib lib, void *h) {
  void *f = dlsym(h, kLibs[lib].version_fn);
  if (!f) return -1;
  if (lib == APX_CUDALIB_NCCL) {
    int v = 0;
    return ((ncclResult_t(*)(int *))f)(&v) == ncclSuccess ? (long)v : -1;
  }
  return (long)((size_t(*)(void))f)();
}

static void version_words(ApxCudaLib lib, long v, char *buf, size_t cap) {
  if (v < 0) {
    snprintf(buf, cap, "unknown version");
    return;
  }
  snprintf(buf, cap, "%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
  (void)lib;
}

/* dlopen of one file or soname; on success checks the version. 1: loaded, 0: not there, -1:
 * there but refused (g_err says why). */
static int try_open(ApxCudaLib lib, const char *file) {
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  long v = read_version(lib, h);
  char path[512] = "";
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) snprintf(path, sizeof path, "%s", lm->l_name);
  if (v < kLibs[lib].min_version || v > kLibs[lib].max_version) {
    char vw[64];
    version_words(lib, v, vw, sizeof vw);
    snprintf(g_err[lib], sizeof g_err[lib], "%s (%s) is %s %s, this build needs %s %s", file,
             path[0] ? path : "?", kLibs[lib].title, vw, kLibs[lib].title, kLibs[lib].accepted);
    dlclose(h);
    return -1;
  }
  g_handle[lib] = h;
  g_version[lib] = v;
  snprintf(g_path[lib], sizeof g_path[lib], "%s", path[0] ? path : file);
  return 1;
}

int apx_cudalib_load(ApxCudaLib lib) {
  if ((int)lib < 0 || lib >= APX_CUDALIB_COUNT) return -1;
  pthread_mutex_lock(&g_mu);
  if (!g_tried[lib]) {
    g_tried[lib] = 1;
    const LibInfo *L = &kLibs[lib];
    const char *dirs = getenv("APEXC_CUDA_LIBS");
    int refused = 0;
    for (int c = 0; c < 3 && L->sonames[c] && !g_handle[lib]; c++) {
      const char *so = L->sonames[c];
      char file[1024];
      for (const char *p = dirs; p && *p && !g_handle[lib];) { /* 1. $APEXC_CUDA_LIBS */
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < 900) {
          snprintf(file, sizeof file, "%.*s/%s", (int)n, p, so);
          int r = try_open(lib, file);
          refused |= r < 0;
        }
        p = e ? e + 1 : NULL;
      }
      if (!g_handle[lib]) refused |= try_open(lib, so) < 0; /* 2. the loader's search */
      if (!g_handle[lib]) {                                  /* 3. the toolkit */
        snprintf(file, sizeof file, "/usr/local/cuda/lib64/%s", so);
        refused |= try_open(lib, file) < 0;
      }
    }
    if (!g_handle[lib] && !refused) {
      char names[160] = "";
      for (int c = 0; c < 3 && L->sonames[c]; c++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", c ? ", " : "", L->sonames[c]);
      snprintf(g_err[lib], sizeof g_err[lib],
               "%s not found: none of %s in $APEXC_CUDA_LIBS (%s), the loader's path or "
               "/usr/local/cuda/lib64",
               L->title, names, dirs && *dirs ? dirs : "not set");
    }
  }
  int rc = g_handle[lib] ? 0 : -1;
  pthread_mutex_unlock(&g_mu);
  return rc;
}

const char *apx_cudalib_error(ApxCudaLib lib) {
  if ((int)lib < 0 || lib >= APX_CUDALIB_COUNT) return "no such library";
  return g_handle[lib] ? "" : g_tried[lib] ? g_err[lib] : "not loaded yet";
}

long apx_cudalib_version(ApxCudaLib lib) {
  return apx_cudalib_load(lib) == 0 ? g_version[lib] : 0;
}

int apx_cudalib_describe(ApxCudaLib lib, char *buf, size_t cap) {
  if (apx_cudalib_load(lib) != 0) return snprintf(buf, cap, "%s: not loaded: %s", kLibs[lib].title, g_err[lib]);
  char vw[64];
  version_words(lib, g_version[lib], vw, sizeof vw);
  return snprintf(buf, cap, "%s %s from %s", kLibs[lib].title, vw, g_path[lib]);
}

/* Resolves name in lib into *slot: 0, or -1 (library missing or the entry absent). */
static int bind_entry(ApxCudaLib lib, const char *name, void **slot) {
  if (apx_cudalib_load(lib) != 0) return -1;
  void *f = dlsym(g_handle[lib], name);
  if (!f) {
    pthread_mutex_lock(&g_mu);
    snprintf(g_err[lib], sizeof g_err[lib], "%s (%s) has no entry point %s", kLibs[lib].title, g_path[lib], name);
    pthread_mutex_unlock(&g_mu);
    return -1;
  }
  *slot = f;
  return 0;
}

/* ---- entry points: X(ret, name, params, args) ------------------------------------------- */

#define CUBLASLT_FNS(X)                                                                                     \
  X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * h), (h))                                            \
  X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h))                                             \
  X(cublasStatus_t, cublasLtMatmul,                                                                         \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t Ad, \
     const void *B, cublasLtMatrixLayout_t Bd, const void *beta, const void *C, cublasLtMatrixLayout_t Cd,   \
     void *D, cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb,            \
     cudaStream_t s),                                                                                       \
    (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsb, s))                                      \
  X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                                         \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,        \
     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int req,            \
     cublasLtMatmulHeuristicResult_t res[], int *ret),                                                      \
    (h, d, a, b, c, dd, p, req, res, ret))                                                                  \
  X(cublasStatus_t, cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * d, cublasComputeType_t ct, cudaDataType_t st), \
    (d, ct, st))                                                                                            \
  X(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))                               \
  X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                                         \
    (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n), (d, a, buf, n))  \
  X(cublasStatus_t, cublasLtMatmulDescGetAttribute,                                                         \
    (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf, size_t n, size_t *w), (d, a, buf, n, w)) \
  X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))                  \
  X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))                   \
  X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                                   \
    (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n),      \
    (p, a, buf, n))                                                                                         \
  X(cublasStatus_t, cublasLtMatmulPreferenceGetAttribute,                                                   \
    (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, void *buf, size_t n, size_t *w), \
    (p, a, buf, n, w))                                                                                      \
  X(cublasStatus_t, cublasLtMatrixLayoutCreate,                                                             \
    (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld), (l, t, rows, cols, ld)) \
  X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))                           \
  X(cublasStatus_t, cublasLtMatrixLayoutSetAttribute,                                                       \
    (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *buf, size_t n), (l, a, buf, n))

#define CUDNN_FNS(X)                                                                                         \
  X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t * h), (h))                                                    \
  X(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t h), (h))                                                     \
  X(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t h, cudaStream_t s), (h, s))                                \
  X(cudnnStatus_t, cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t * d), (d))                          \
  X(cudnnStatus_t, cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t d), (d))                           \
  X(cudnnStatus_t, cudnnSetTensor4dDescriptor,                                                               \
    (cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c, int h, int w),       \
    (d, f, t, n, c, h, w))                                                                                   \
  X(cudnnStatus_t, cudnnSetTensorNdDescriptor,                                                               \
    (cudnnTensorDescriptor_t d, cudnnDataType_t t, int n, const int *dims, const int *strides),              \
    (d, t, n, dims, strides))                                                                                \
  X(cudnnStatus_t, cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t * d), (d))                          \
  X(cudnnStatus_t, cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t d), (d))                           \
  X(cudnnStatus_t, cudnnSetFilter4dDescriptor,                                                               \
    (cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k, int c, int h, int w),       \
    (d, t, f, k, c, h, w))                                                                                   \
  X(cudnnStatus_t, cudnnSetFilterNdDescriptor,                                                               \
    (cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int n, const int *dims),           \
    (d, t, f, n, dims))                                                                                      \
  X(cudnnStatus_t, cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t * d), (d))                \
  X(cudnnStatus_t, cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t d), (d))                 \
  X(cudnnStatus_t, cudnnSetConvolution2dDescriptor,                                                          \
    (cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v, int dh, int dw, cudnnConvolutionMode_t m, \
     cudnnDataType_t t),                                                                                     \
    (d, ph, pw, u, v, dh, dw, m, t))                                                                         \
  X(cudnnStatus_t, cudnnSetConvolutionNdDescriptor,                                                          \
    (cudnnConvolutionDescriptor_t d, int n, const int *pads, const int *strides, const int *dil,            \
     cudnnConvolutionMode_t m, cudnnDataType_t t),                                                           \
    (d, n, pads, strides, dil, m, t))                                                                        \
  X(cudnnStatus_t, cudnnSetConvolutionGroupCount, (cudnnConvolutionDescriptor_t d, int g), (d, g))           \
  X(cudnnStatus_t, cudnnSetConvolutionMathType, (cudnnConvolutionDescriptor_t d, cudnnMathType_t m), (d, m)) \
  X(cudnnStatus_t, cudnnGetConvolutionMathType, (cudnnConvolutionDescriptor_t d, cudnnMathType_t * m), (d, m)) \
  X(cudnnStatus_t, cudnnGetConvolutionForwardAlgorithm_v7,                                                   \
    (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,                      \
     const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, const int req, int *ret,         \
     cudnnConvolutionFwdAlgoPerf_t *perf),                                                                   \
    (h, x, w, c, y, req, ret, perf))                                                                         \
  X(cudnnStatus_t, cudnnGetConvolutionBackwardDataAlgorithm_v7,                                              \
    (cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,                     \
     const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, const int req, int *ret,        \
     cudnnConvolutionBwdDataAlgoPerf_t *perf),                                                               \
    (h, w, dy, c, dx, req, ret, perf))                                                                       \
  X(cudnnStatus_t, cudnnGetConvolutionBackwardFilterAlgorithm_v7,                                            \
    (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,                     \
     const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, const int req, int *ret,        \
     cudnnConvolutionBwdFilterAlgoPerf_t *perf),                                                             \
    (h, x, dy, c, dw, req, ret, perf))                                                                       \
  X(cudnnStatus_t, cudnnConvolutionForward,                                                                  \
    (cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,                    \
     const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t c,                  \
     cudnnConvolutionFwdAlgo_t algo, void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t yd, \
     void *y),                                                                                               \
    (h, alpha, xd, x, wd, w, c, algo, ws, wsb, beta, yd, y))                                                 \
  X(cudnnStatus_t, cudnnConvolutionBackwardData,                                                             \
    (cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd, const void *w,                    \
     const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t c,                \
     cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t wsb, const void *beta,                             \
     const cudnnTensorDescriptor_t dxd, void *dx),                                                           \
    (h, alpha, wd, w, dyd, dy, c, algo, ws, wsb, beta, dxd, dx))                                             \
  X(cudnnStatus_t, cudnnConvolutionBackwardFilter,                                                           \
    (cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,                    \
     const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t c,                \
     cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsb, const void *beta,                           \
     const cudnnFilterDescriptor_t dwd, void *dw),                                                           \
    (h, alpha, xd, x, dyd, dy, c, algo, ws, wsb, beta, dwd, dw))

#define NCCL_FNS(X)                                                                                          \
  X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id))                                                \
  X(ncclResult_t, ncclCommInitRank, (ncclComm_t * c, int n, ncclUniqueId id, int r), (c, n, id, r))          \
  X(ncclResult_t, ncclCommDestroy, (ncclComm_t c), (c))                                                      \
  X(ncclResult_t, ncclCommAbort, (ncclComm_t c), (c))                                                        \
  X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t c, ncclResult_t * e), (c, e))                           \
  X(ncclResult_t, ncclGroupStart, (void), ())                                                                \
  X(ncclResult_t, ncclGroupEnd, (void), ())                                                                  \
  X(ncclResult_t, ncclAllReduce,                                                                             \
    (const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),     \
    (s, r, n, t, op, c, st))                                                                                 \
  X(ncclResult_t, ncclBroadcast,                                                                             \
    (const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st),           \
    (s, r, n, t, root, c, st))                                                                               \
  X(ncclResult_t, ncclRedOpCreatePreMulSum,                                                                  \
    (ncclRedOp_t * op, void *scalar, ncclDataType_t t, ncclScalarResidence_t res, ncclComm_t c),             \
    (op, scalar, t, res, c))                                                                                 \
  X(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t c), (op, c))

/* A forwarding function: the test override, else the library's entry (bound on first call);
 * `fail` when the library or the entry is missing (its error string says why). */
#define FORWARD(lib, fail, ret, name, params, args)                              \
  static ret(*fn_##name) params;                                                 \
  static ret(*ov_##name) params;                                                 \
  ret name params {                                                              \
    if (ov_##name) return ov_##name args;                                        \
    if (!fn_##name && bind_entry((lib), #name, (void **)&fn_##name)) return (fail);    \
    return fn_##name args;                                                       \
  }
#define FWD_LT(ret, name, params, args) FORWARD(APX_CUDALIB_CUBLASLT, CUBLAS_STATUS_NOT_INITIALIZED, ret, name, params, args)
#define FWD_DNN(ret, name, params, args) FORWARD(APX_CUDALIB_CUDNN, CUDNN_STATUS_NOT_INITIALIZED, ret, name, params, args)
#define FWD_NCCL(ret, name, params, args) FORWARD(APX_CUDALIB_NCCL, ncclSystemError, ret, name, params, args)

CUBLASLT_FNS(FWD_LT)
CUDNN_FNS(FWD_DNN)
NCCL_FNS(FWD_NCCL)

/* The error-string functions: while the library is not loaded they give the loader's reason,
 * so "<call>: <string>" messages of the callers say what was missing. */
#define ERRSTR(lib, argtype, name)                                               \
  static const char *(*fn_##name)(argtype);                                      \
  static const char *(*ov_##name)(argtype);                                      \
  const char *name(argtype v) {                                                  \
    if (ov_##name) return ov_##name(v);                                          \
    if (!fn_##name && bind_entry((lib), #name, (void **)&fn_##name)) return g_err[lib]; \
    return fn_##name(v);                                                         \
  }
ERRSTR(APX_CUDALIB_CUBLASLT, cublasStatus_t, cublasLtGetStatusName)
ERRSTR(APX_CUDALIB_CUDNN, cudnnStatus_t, cudnnGetErrorString)
ERRSTR(APX_CUDALIB_NCCL, ncclResult_t, ncclGetErrorString)

/* ---- test overrides ------------------------------------------------------------------------ */

typedef struct Override {
  const char *name;
  void **slot;
} Override;

#define OV_ROW(ret, name, params, args) {#name, (void **)&ov_##name},
static const Override kOverrides[] = {
    CUBLASLT_FNS(OV_ROW) CUDNN_FNS(OV_ROW) NCCL_FNS(OV_ROW)
    {"cublasLtGetStatusName", (void **)&ov_cublasLtGetStatusName},
    {"cudnnGetErrorString", (void **)&ov_cudnnGetErrorString},
    {"ncclGetErrorString", (void **)&ov_ncclGetErrorString},
};

int apx_cudalib_override(const char *name, void *fn) {
  for (size_t i = 0; i < sizeof kOverrides / sizeof kOverrides[0]; i++)
    if (!strcmp(kOverrides[i].name, name)) {
      *kOverrides[i].slot = fn;
      return 0;
    }
  return -1;
}
