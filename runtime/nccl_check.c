/* nccl_check.c - a smoke check of the NCCL layer (collective_nccl.h) on real GPUs, built
 * wherever CUDA is so the layer always compiles and links (it cannot run without a GPU):
 *
 *   mpirun -np K nccl_check        (one GPU per rank: device = rank % device count)
 *
 * Each rank fills fp32/fp16/bf16 device tensors with rank-dependent small integers, runs a
 * plain sum, an average (PreMulSum 1/K) and a broadcast from the last rank, waits with a
 * deadline (apx_nccl_wait) and checks every element on the host. Prints "rank R of K: ok"
 * or the first failure; exit code 0 / 1. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "runtime/collective.h"
#include "runtime/collective_nccl.h"

static int fail(const ApxDiag *d) {
  fprintf(stderr, "%s\n", d->msg);
  return 1;
}

int main(void) {
  ApxCollConfig cfg;
  apx_coll_config_init(&cfg);
  cfg.timeout_s = 120;
  ApxDiag d;
  apx_diag_init(&d);
  ApxColl *c = NULL;
  if (apx_coll_init(&c, &cfg, &d)) return fail(&d);
  int R = apx_coll_rank(c), K = apx_coll_world(c), ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "rank %d of %d: no CUDA device: nccl_check needs a GPU per rank\n", R, K);
    apx_coll_abort(c, 1, NULL);
  }
  ApxNccl *n = NULL;
  if (apx_nccl_init(&n, c, R % ndev, &d)) {
    fail(&d);
    apx_coll_abort(c, 1, NULL);
  }
  enum { N = 1000 };
  const ApxDType types[3] = {APX_DT_F32, APX_DT_F16, APX_DT_BF16};
  int bad = 0;
  for (int mode = 0; mode < 3 && !bad; mode++) { /* 0 sum, 1 average, 2 broadcast */
    ApxTensor t[3];
    float host[N];
    for (int k = 0; k < 3; k++) {
      memset(&t[k], 0, sizeof t[k]);
      t[k].dtype = types[k];
      t[k].rank = 1;
      t[k].dims[0] = N;
      size_t es = k == 0 ? 4 : 2;
      unsigned char *h = malloc(N * es);
      for (int i = 0; i < N; i++) {
        float v = (float)((R + 1) * (i % 5));
        if (k == 0) ((float *)h)[i] = v;
        else ((uint16_t *)h)[i] = k == 1 ? apx_f32_to_f16(v) : apx_f32_to_bf16(v);
      }
      if (cudaMalloc(&t[k].data, N * es) != cudaSuccess || cudaMemcpy(t[k].data, h, N * es, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "rank %d: cuda allocation failed\n", R);
        apx_coll_abort(c, 1, NULL);
      }
      free(h);
    }
    int rc = mode == 2 ? apx_nccl_broadcast(n, NULL, t, 3, K - 1, "broadcast", &d)
                       : apx_nccl_allreduce(n, NULL, t, 3, APX_REDUCE_SUM, 1.0f, mode ? 1.0f / (float)K : 1.0f,
                                            mode ? "average" : "sum", &d);
    if (rc || apx_nccl_wait(n, NULL, 60, "check", &d)) {
      fail(&d);
      apx_coll_abort(c, 1, NULL);
    }
    for (int k = 0; k < 3 && !bad; k++) {
      size_t es = k == 0 ? 4 : 2;
      unsigned char *h = malloc(N * es);
      cudaMemcpy(h, t[k].data, N * es, cudaMemcpyDeviceToHost);
      for (int i = 0; i < N; i++) {
        host[i] = k == 0 ? ((float *)h)[i] : k == 1 ? apx_f16_to_f32(((uint16_t *)h)[i]) : apx_bf16_to_f32(((uint16_t *)h)[i]);
        float sum = (float)(K * (K + 1) / 2 * (i % 5));
        float want = mode == 0 ? sum : mode == 1 ? sum / (float)K : (float)(K * (i % 5));
        if (host[i] != want && !bad) {
          printf("rank %d of %d: FAIL mode %d %s [%d] = %g, want %g\n", R, K, mode, apx_dtype_name(types[k]), i,
                 host[i], want);
          bad = 1;
        }
      }
      free(h);
      cudaFree(t[k].data);
    }
  }
  if (!bad) printf("rank %d of %d: ok\n", R, K);
  apx_nccl_free(n);
  apx_coll_finalize(c);
  return bad;
}
