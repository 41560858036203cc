/* collective.h - data-parallel collectives between processes (DESIGN.md 11).
 *
 * One ApxColl per process. apx_coll_init reads the environment: launched by mpirun (the
 * OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE variables are set) it initializes MPI
 * (Debian OpenMPI, MPI_THREAD_MULTIPLE so the watchdog may abort) and takes rank and world
 * size from MPI_COMM_WORLD; otherwise it is one process (rank 0, world 1) that never
 * touches MPI. Engines: MPI over host memory for the cpu backend (collective_mpi.c); NCCL
 * bootstrapped over MPI for cuda (collective_nccl.c, linked where CUDA is).
 *
 * Reductions (APX_REDUCE_SUM / APX_REDUCE_MAX) work in place on a list of tensors, fused
 * into one call per run of tensors with the same wire type: fp16/bf16/fp32 travel as fp32
 * (fp16 and bf16 are widened, summed in fp32 and rounded to nearest even once: MPI has no
 * half type), fp64 as fp64, int32/int64/uint8/bool as themselves. With SUM every element is
 * multiplied by `pre` before the reduction and the result by `post` after (1 and 1 for a
 * plain sum). Gradient buckets (attrs.h ApxAttrAllreduce) use apx_coll_bucket_scales:
 *     pre = 1 / predivide,  post = predivide / world  (average)   or  predivide  (sum)
 * so, as in Apex's DDP (gradient_predivide_factor), the sum is taken over gradients already
 * divided by `predivide` (keeping half sums in range) and the division by the world size
 * is completed afterwards. Every rank gets the same bytes.
 *
 * Timeouts: every collective runs under a deadline (cfg.timeout_s, default 300 s). A
 * watchdog thread checks it; when a collective has not completed in time (a peer is hung:
 * stopped, deadlocked, stuck in I/O) it prints one line
 *   apexrun: rank R of K: collective 'allreduce bucket 3' did not complete within 5.0 s
 *   (waited 5.0 s): a peer rank is dead or hung; aborting the job
 * and calls MPI_Abort, which ends every rank of the job with exit code 1. A dead peer is
 * seen by mpirun itself, which ends the job ("mpirun noticed that process rank 1 ... exited
 * on signal 9"); MPI errors come back as errors (MPI_ERRORS_RETURN) naming the operation.
 *
 * Every function returns 0 or -1 with a one-line message in d (exit code 1); messages start
 * with "rank R of K: <operation>: ". Not thread-safe: one thread issues collectives. */
#ifndef APX_COLLECTIVE_H
#define APX_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/diag.h"
#include "kernels/attrs.h"
#include "kernels/tensor.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_COLL_DEFAULT_TIMEOUT_S 300.0

typedef struct ApxColl ApxColl;

typedef enum ApxCollMode {
  APX_COLL_AUTO = 0,   /* MPI when launched by mpirun, else one process */
  APX_COLL_SINGLE = 1, /* one process even under mpirun */
  APX_COLL_MPI = 2,    /* MPI always (a singleton outside mpirun) */
} ApxCollMode;

typedef struct ApxCollConfig {
  ApxCollMode mode;
  double timeout_s; /* deadline per collective; <= 0: no watchdog */
} ApxCollConfig;

void apx_coll_config_init(ApxCollConfig *cfg);

/* 1 when the environment says this process was started by mpirun (or another PMI launcher). */
int apx_coll_launched_by_mpi(void);

/* Returns 0 with *out set, or -1 (d). MPI is initialized at most once per process. */
int apx_coll_init(ApxColl **out, const ApxCollConfig *cfg, ApxDiag *d);
/* Stops the watchdog and finalizes MPI (when this layer initialized it). NULL: no-op. */
void apx_coll_finalize(ApxColl *c);
/* Ends every rank of the job at once with exit code `code` after printing msg (one line)
 * on this rank: for errors the other ranks cannot see (they would wait in the next
 * collective until the watchdog fires). One process: exit(code). */
void apx_coll_abort(ApxColl *c, int code, const char *msg);

/* Marks that every rank is ending with the same exit code, decided together from the same
 * collective result (settings that differ at start-up, a stop every rank agreed on): the
 * caller then finalizes normally on every rank, so each prints its own line and exits with
 * that code, instead of aborting the job from the first rank that returns (which would kill
 * the others before they print). NULL: no-op / 0. */
void apx_coll_mark_agreed_exit(ApxColl *c);
int apx_coll_agreed_exit(const ApxColl *c);

int32_t apx_coll_rank(const ApxColl *c);
int32_t apx_coll_world(const ApxColl *c);
/* 1 when MPI is in use (world may still be 1 under `mpirun -np 1`). */
int apx_coll_uses_mpi(const ApxColl *c);
/* Changes the deadline of later collectives (seconds, <= 0: none). */
void apx_coll_set_timeout(ApxColl *c, double timeout_s);

/* ---- host-memory collectives (tensor data are host addresses) ------------------------ */
/* t[i] = post * reduce over ranks of (pre * t[i]) for SUM; MAX ignores pre/post. what names
 * the operation in messages and the watchdog ("allreduce bucket 3"). */
int apx_coll_allreduce(ApxColl *c, ApxTensor *t, int32_t n, ApxReduceOp op, float pre, float post,
                       const char *what, ApxDiag *d);
/* t[i] on every rank = root's t[i] (bytes). */
int apx_coll_broadcast(ApxColl *c, ApxTensor *t, int32_t n, int32_t root, const char *what, ApxDiag *d);
/* bytes at send from every rank into recv (world * bytes, rank order). */
int apx_coll_allgather(ApxColl *c, const void *send, size_t bytes, void *recv, const char *what, ApxDiag *d);
int apx_coll_barrier(ApxColl *c, const char *what, ApxDiag *d);

/* ---- non-blocking reductions (DESIGN.md 11: a bucket overlaps the rest of backward) ---- */
/* One reduction in flight: its own staging buffer (every wire type's run packed there, fp16
 * and bf16 widened to fp32), its MPI requests and the output views. */
typedef struct ApxCollRequest ApxCollRequest;

/* Starts out[i] = post * reduce over ranks of (pre * in[i]) (pre/post as apx_coll_allreduce)
 * and returns at once with *req. Every in[i] is read completely before it returns (staged,
 * `pre` applied): the caller may overwrite them right away. out[i] (same dtype and size as
 * in[i]; out[i].data == in[i].data is fine) are written by apx_coll_wait only. The sums are
 * MPI_Iallreduce over the staged fp32 / fp64 / integer runs, so a bucket's result does not
 * depend on when it is waited for. Requests complete in any order, but every rank must start
 * the same reductions in the same order. One process: the staged values, scaled, at the wait. */
int apx_coll_iallreduce(ApxColl *c, const ApxTensor *in, const ApxTensor *out, int32_t n, ApxReduceOp op,
                        float pre, float post, const char *what, ApxCollRequest **req, ApxDiag *d);
/* Lets MPI progress req (MPI_Testall, never blocks); *done = 1 once it has completed (out not
 * written yet). */
int apx_coll_test(ApxColl *c, ApxCollRequest *req, int *done, ApxDiag *d);
/* Completes req under the deadline (the watchdog aborts the job as for a blocking
 * collective, naming req's `what`), applies post, writes out[i] (fp16/bf16 rounded to
 * nearest even) and releases req (also on failure). */
int apx_coll_wait(ApxColl *c, ApxCollRequest *req, ApxDiag *d);
/* Reductions started and not yet waited for. */
int32_t apx_coll_pending(const ApxColl *c);

/* The name of a bucket's reduction in messages and the watchdog ("allreduce bucket 3"). */
void apx_coll_bucket_what(const ApxAttrAllreduce *a, char *what, size_t cap);
/* The scale factors of a gradient bucket (see the file comment). */
void apx_coll_bucket_scales(const ApxAttrAllreduce *a, int32_t world, float *pre, float *post);

/* Installs the collective slots of backend be (apx_backend_set_collectives) when there is
 * more than one rank (one process: nothing is installed, on any backend, and 0 is returned):
 * cpu gets the MPI engine over its host buffers (allreduce_bucket, and allreduce_bucket_start /
 * request_test / request_wait over apx_coll_iallreduce / test / wait); cuda gets the NCCL
 * engine (collective_nccl.h: communicator bootstrapped over MPI, buckets on the communicator's
 * own stream ordered by events) where the binary links //runtime:collective_nccl, else "not
 * supported yet" (exit code 2). The backend does not own c: finalize c after freeing the
 * backend. */
int apx_coll_attach(ApxColl *c, ApxBackend *be, ApxDiag *d);
/* The NCCL layer's attach (collective_nccl.c; a weak symbol elsewhere). */
int apx_coll_attach_nccl(ApxColl *c, ApxBackend *be, ApxDiag *d);
/* The deadline of collectives in seconds (<= 0: none). */
double apx_coll_timeout(const ApxColl *c);

#ifdef __cplusplus
}
#endif
#endif
