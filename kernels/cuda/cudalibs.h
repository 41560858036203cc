/* cudalibs.h - cuBLASLt, cuDNN and NCCL found at run time (dlopen), not at link time.
 *
 * The CUDA code calls these libraries by their usual names (cublasLtMatmul, cudnnCreate,
 * ncclAllReduce ...); cudalibs.c defines each of those names as a small forwarding function
 * that loads the library on first use and calls the real entry. So a binary starts, and runs
 * its CPU parts, on a machine whose libraries sit elsewhere or are missing, and the first
 * call of a missing library fails with a line that names what was looked for (through the
 * library's own error-string function: cublasLtGetStatusName / cudnnGetErrorString /
 * ncclGetErrorString return the loader's reason while the library is not loaded).
 *
 * Where a library is looked for, for each soname candidate in order (newest first):
 *   1. every folder of $APEXC_CUDA_LIBS (colon-separated; scripts/gpu/run.sh sets it to the
 *      nvidia-* Python packages' lib folders, which is where PyTorch's CUDA libraries live);
 *   2. the bare soname: the dynamic loader's search ($LD_LIBRARY_PATH, the cache);
 *   3. /usr/local/cuda/lib64.
 * Soname candidates and the versions accepted (checked after loading, a mismatch is a load
 * failure naming both): cuBLASLt libcublasLt.so.13, .so.12 (major 12 or 13: the entry points
 * and enum values used here are the same); cuDNN libcudnn.so.9 (major 9); NCCL libnccl.so.2
 * (2.12 or newer: PreMulSum). The CUDA runtime itself is linked statically (cudart_static),
 * so only the driver (libcuda.so.1, loaded by cudart) must match: CUDA 13 needs a driver that
 * supports CUDA 13.0 (cudaDriverGetVersion >= 13000). */
#ifndef APX_CUDA_CUDALIBS_H
#define APX_CUDA_CUDALIBS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ApxCudaLib {
  APX_CUDALIB_CUBLASLT = 0,
  APX_CUDALIB_CUDNN = 1,
  APX_CUDALIB_NCCL = 2,
  APX_CUDALIB_COUNT = 3,
} ApxCudaLib;

/* Loads lib once (later calls return the first result): 0, or -1 with the reason in
 * apx_cudalib_error(lib). */
int apx_cudalib_load(ApxCudaLib lib);
/* "" when loaded, else why not ("libcudnn.so.9: not found (looked in ...)"). */
const char *apx_cudalib_error(ApxCudaLib lib);
/* One line: "cuDNN 9.19.0 from /path/libcudnn.so.9" or "cuDNN: not loaded: <why>". Loads lib. */
int apx_cudalib_describe(ApxCudaLib lib, char *buf, size_t cap);
/* The library's own version number (cublasLtGetVersion / cudnnGetVersion / ncclGetVersion),
 * 0 when it is not loaded. Loads lib. */
long apx_cudalib_version(ApxCudaLib lib);

/* Tests: replaces the entry point `name` (e.g. "cudnnConvolutionForward") by fn, which must
 * have its prototype; fn NULL restores the library's. Returns 0, or -1 for a name this layer
 * does not forward. An overridden entry is called without loading its library. */
int apx_cudalib_override(const char *name, void *fn);

#ifdef __cplusplus
}
#endif
#endif
