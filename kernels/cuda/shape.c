/* shape.c - host-side planning only the CUDA kernels need (shape.h). */
#include "kernels/cuda/shape.h"

#include <stdio.h>
#include <string.h>

/* ---- matrix products --------------------------------------------------------------- */

/* Collapsed batch dims of input k are "all batches, contiguous" when its strides are the
 * contiguous strides of the broadcast dims. */
static int batch_contig(const ApxBcast *b, int k) { return apx_bcast_is_contig(b, k); }

static int batch_shared(const ApxBcast *b, int k) {
  for (int32_t d = 0; d < b->rank; d++)
    if (b->strides[k][d] != 0) return 0;
  return 1;
}

int64_t apx_cu_matmul_n_calls(const ApxMatMulPlan *p, int32_t *folded) {
  const ApxBcast *b = &p->bc;
  *folded = !p->reduce && !p->ta && b->numel > 1 && batch_shared(b, 1) && batch_contig(b, 0) &&
            batch_contig(b, 2) && p->M * b->numel <= 0x7fffffff;
  if (*folded || b->rank == 0) return 1;
  return b->numel / b->dims[b->rank - 1];
}

void apx_cu_matmul_call(const ApxMatMulPlan *p, int64_t c, int32_t folded, ApxCuGemmCall *out) {
  const ApxBcast *b = &p->bc;
  int64_t sA = p->M * p->K, sB = p->K * p->N, sY = p->M * p->N;
  memset(out, 0, sizeof *out);
  out->M = p->M;
  out->K = p->K;
  out->batch = 1;
  if (folded) {
    out->M = p->M * b->numel;
    return;
  }
  if (b->rank == 0) return;
  int32_t last = b->rank - 1;
  int64_t off[3] = {0, 0, 0}, i = c;
  for (int32_t d = last - 1; d >= 0; d--) {
    int64_t id = i % b->dims[d];
    i /= b->dims[d];
    for (int k = 0; k < 3; k++) off[k] += id * b->strides[k][d];
  }
  out->a_off = off[0] * sA;
  out->b_off = off[1] * sB;
  out->y_off = off[2] * sY;
  out->batch = b->dims[last];
  out->a_stride = b->strides[0][last] * sA;
  out->b_stride = b->strides[1][last] * sB;
  out->y_stride = b->strides[2][last] * sY;
}

int apx_cu_matmul_stacked(const ApxMatMulPlan *p, ApxCuGemmCall *out) {
  const ApxBcast *b = &p->bc;
  if (!p->reduce || !p->ta || p->tb || p->y_batches != 1 || !batch_contig(b, 0) ||
      !batch_contig(b, 1) || p->K * b->numel > 0x7fffffff)
    return 0;
  memset(out, 0, sizeof *out);
  out->batch = 1;
  out->M = p->M;
  out->K = p->K * b->numel;
  return 1;
}

/* ---- gathers ---------------------------------------------------------------------- */

int apx_cu_gather_shape(int64_t axis, const ApxTensor *data, const ApxTensor *idx,
                        const ApxTensor *out, int64_t *outer, int64_t *A, int64_t *inner,
                        char *err, size_t cap) {
  int axis_ok = axis >= 0 && axis < data->rank;
  if (axis_ok && idx->dtype != APX_DT_I64 && idx->dtype != APX_DT_I32) {
    if (err && cap)
      snprintf(err, cap, "not supported yet on cuda: indices of type %s",
               apx_dtype_name(idx->dtype));
    return -1;
  }
  return apx_gather_shape(axis, data, idx, out, outer, A, inner, err, cap) ? -1 : 0;
}

/* ---- multi-tensor launches ---------------------------------------------------------- */

int64_t apx_cu_mt_total_chunks(const int64_t *sizes, int32_t n, int64_t chunk) {
  int64_t t = 0;
  for (int32_t i = 0; i < n; i++) t += (sizes[i] + chunk - 1) / chunk;
  return t;
}

int64_t apx_cu_mt_plan(const int64_t *sizes, int32_t n, int64_t chunk, int32_t max_tensors,
                       int64_t max_chunks, ApxCuMtLaunch *out, int64_t cap) {
  int64_t nl = 0, g = 0; /* g: global chunk index of the next chunk to place */
  int32_t t = 0;
  int64_t done_in_t = 0; /* chunks of tensor t already placed */
  while (t < n) {
    int64_t nc_t = (sizes[t] + chunk - 1) / chunk;
    if (nc_t == done_in_t) { /* tensor finished (or empty) */
      t++;
      done_in_t = 0;
      continue;
    }
    ApxCuMtLaunch l = {t, 0, g, 0};
    while (t < n && l.count < max_tensors && l.n_chunks < max_chunks) {
      nc_t = (sizes[t] + chunk - 1) / chunk;
      int64_t take = nc_t - done_in_t;
      if (take > max_chunks - l.n_chunks) take = max_chunks - l.n_chunks;
      if (take > 0 || nc_t == 0) l.count++;
      l.n_chunks += take;
      done_in_t += take;
      g += take;
      if (done_in_t == nc_t) {
        t++;
        done_in_t = 0;
      } else {
        break; /* launch full mid-tensor */
      }
    }
    if (nl < cap) out[nl] = l;
    nl++;
  }
  return nl;
}
