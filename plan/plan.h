/* plan.h - the compiled plan: what apexc writes and apexrun executes (DESIGN.md 12).
 *
 * File layout (all integers little-endian):
 *
 *   offset 0   header, 64 bytes
 *       0  char     magic[8]        "APXPLAN\0"
 *       8  uint32   format_version  APX_PLAN_FORMAT_VERSION
 *      12  uint32   flags           0 (no flag defined yet; others are rejected)
 *      16  uint64   meta_offset     = 64
 *      24  uint64   meta_len        bytes of the protobuf message apexc.Plan (plan.proto)
 *      32  uint64   data_offset     = meta_offset + meta_len rounded up to 64
 *      40  uint64   data_len        bytes of the tensor-data section; file size is
 *                                   data_offset + data_len exactly
 *      48  uint32   checksum        CRC32C (Castagnoli) of the whole file with these 4
 *                                   bytes taken as zero
 *      52  uint8    reserved[12]    zero
 *   offset 64  metadata (protobuf, never holds tensor bytes), zero padding to 64
 *   data_offset  tensor data: each buffer's initial bytes at a 64-byte aligned offset
 *                relative to data_offset, 64-bit offsets (plans over 2 GiB work)
 *
 * Writing is atomic (temp file in the same folder, fsync, rename, fsync of the folder) and
 * streamed (plan_write.h: the metadata encoded from the arrays below as protobuf-c would pack
 * it, checksummed as it goes out); all-zero 64 KiB blocks at 64 KiB file offsets are left as
 * holes (sparse file).
 * Reading maps the file, checks magic, version, sizes and the checksum, then every
 * reference (buffer and kernel ids, data ranges, arena ranges, attribute sizes, op names,
 * the attrs ABI), then every kernel (plan_validate.h: its op's contract, its producers, the
 * aliasing its op allows) and rejects anything else with a one-line error (exit code 2).
 *
 * In memory the plan is plain arrays in plan->arena; buffer initial bytes are pointers
 * (into the mapped file after apx_plan_read, into the graph after apx_plan_from_graph).
 * A persistent buffer starts as its data, as the conversion of its init_from buffer's data
 * (format 2: half parameters from their fp32 masters), or as zeros (no data: optimizer
 * state, gradient accumulators). */
#ifndef APX_PLAN_H
#define APX_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "ir/arena.h"
#include "ir/diag.h"
#include "ir/fileio.h" /* apx_crc32c: the header checksum */
#include "kernels/buffer.h"
#include "kernels/dtype.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Format 2 (this writer): half copies of parameters are derived at load from their fp32
 * masters (ApxPlanBuffer.init_from, plan.proto Derived) and zero-initialized state carries no
 * data. Format 1 plans (every initial byte stored) still load: they are format 2 plans
 * without derived buffers. */
#define APX_PLAN_FORMAT_VERSION 2u
#define APX_PLAN_FORMAT_VERSION_MIN 1u /* the oldest format apx_plan_read accepts */
#define APX_PLAN_HEADER_BYTES 64u
#define APX_PLAN_ALIGN 64u
#define APX_PLAN_PRODUCER "apexc 0.1"

/* Buffer flags kept from the IR value (ApxValueFlags subset). */
#define APX_PLAN_BUF_FLAGS \
  (APX_VALF_GRAPH_OUTPUT | APX_VALF_LOSS | APX_VALF_FROZEN | APX_VALF_GRAD | APX_VALF_MASTER)

/* The fields of ApxPlanOptions, each with the same name in plan.proto's PlanOptions and in
 * ApxOptions (ir/options.h): the one list that the plan emission and the protobuf
 * conversions expand. TRI marks the two that are tri-states (ApxTriState) in ApxOptions;
 * the others are copied as they are. A new option goes here, in the struct and in
 * plan.proto. */
#define APX_PLAN_OPTIONS(X, TRI)                                                            \
  X(opt_level) X(half) X(cast_model_type) TRI(keep_batchnorm_fp32) TRI(master_weights)      \
  X(training) X(loss_scale_mode) X(loss_scale) X(min_loss_scale) X(max_loss_scale)          \
  X(scale_window) X(hysteresis) X(optimizer) X(lr) X(momentum) X(beta1) X(beta2) X(eps)     \
  X(weight_decay) X(nesterov) X(clip_grad_norm) X(accumulate) X(warmup_steps) X(schedule)   \
  X(total_steps) X(seed) X(bucket_mb) X(first_bucket_mb) X(allreduce_fp32)                  \
  X(grad_predivide) X(sync_bn) X(growth_factor) X(backoff_factor)

typedef struct ApxPlanOptions {
  int32_t opt_level;
  ApxDType half, cast_model_type;
  int32_t keep_batchnorm_fp32, master_weights, training;
  int32_t loss_scale_mode; /* ApxLossScaleMode */
  float loss_scale, min_loss_scale, max_loss_scale;
  int32_t scale_window, hysteresis;
  int32_t optimizer; /* ApxOptimizerKind */
  float lr, momentum, beta1, beta2, eps, weight_decay;
  int32_t nesterov;
  float clip_grad_norm;
  int32_t accumulate, warmup_steps, schedule;
  int64_t total_steps;
  uint64_t seed;
  double bucket_mb, first_bucket_mb;
  int32_t allreduce_fp32;
  float grad_predivide;
  int32_t sync_bn;
  float growth_factor, backoff_factor; /* dynamic scaler; 0 in plans written before them: 2, 0.5 */
} ApxPlanOptions;

typedef struct ApxPlanBuffer { /* fields ordered for size (144 bytes, no padding) */
  const char *name;
  ApxValueKind kind;
  uint32_t flags;          /* APX_PLAN_BUF_FLAGS */
  ApxDType dtype;
  int32_t rank;
  int64_t dims[APX_MAX_RANK];
  ApxMemRegion region;     /* ARENA or PERSISTENT */
  int32_t alias_of;        /* buffer sharing its bytes, -1 */
  int64_t offset;          /* in its region */
  int64_t bytes;           /* numel * dtype size */
  uint64_t data_offset;    /* initial bytes in the data section ... */
  uint64_t data_len;       /* ... 0: none (set by apx_plan_layout_data) */
  const void *data;        /* host pointer to the initial bytes (data_len of them), or NULL */
  int32_t origin;          /* buffer it derives from, -1 */
  int32_t init_from;       /* -1, or the buffer whose initial bytes, converted to this dtype,
                              are this one's initial bytes (made at load, see
                              apx_plan_derivable);
                              such a buffer has no data of its own (format 2) */
} ApxPlanBuffer;

typedef struct ApxPlanKernel {
  ApxOp op;
  const char *node;        /* node name */
  ApxSection section;
  ApxDType compute;
  const void *attrs;       /* apx_op_info(op)->attrs_size bytes (attrs.h struct), aligned */
  int32_t n_in, n_out;
  int32_t *in, *out;       /* buffer ids, -1 absent */
} ApxPlanKernel;

typedef struct ApxPlanDecision {
  const char *node, *op;
  ApxDType decision;
  int32_t rule_code;
  const char *rule, *detail;
  int32_t casts_added;
} ApxPlanDecision;

typedef struct ApxPlanBucket {
  int32_t id;
  ApxDType dtype;
  int32_t n_members;
  int32_t *members;        /* buffer ids */
  int64_t bytes;
  int32_t ready_at;        /* kernel index */
} ApxPlanBucket;

/* A named byte range of the data section that is not a tensor (plan.proto Blob). */
typedef struct ApxPlanBlob {
  const char *name;
  uint64_t data_offset, data_len;
  const void *data;        /* host pointer to the bytes (mapped file or caller's memory) */
} ApxPlanBlob;

/* Blob name of the source ONNX model embedded by apexc in training plans (export_onnx.h). */
#define APX_PLAN_BLOB_MODEL "model.onnx"

typedef struct ApxPlanMemory {
  int64_t arena_bytes, peak_live_bytes, no_reuse_bytes, persistent_bytes;
} ApxPlanMemory;

typedef struct ApxPlan {
  ApxArena arena;          /* every string and array below */
  uint32_t format_version, attrs_abi;
  const char *producer, *model_name;
  uint32_t model_crc32c;
  uint64_t model_bytes;
  ApxPlanOptions opts;

  ApxPlanBuffer *bufs;
  int32_t n_bufs;
  ApxPlanKernel *kernels;
  int32_t n_kernels;
  ApxPlanDecision *decisions;
  int32_t n_decisions;
  ApxPlanBucket *buckets;
  int32_t n_buckets;
  int32_t *inputs, *outputs;
  int32_t n_inputs, n_outputs;
  int32_t loss;
  ApxPlanBlob *blobs;
  int32_t n_blobs;
  ApxPlanMemory mem;
  uint64_t data_bytes;     /* size of the data section */

  /* kernels of section s are [sec_begin[s], sec_end[s]) (sections are contiguous and in
   * order forward, backward, optimizer; set by apx_plan_validate) */
  int32_t sec_begin[3], sec_end[3];

  /* lookup index (apx_plan_index; apx_plan_read and apx_plan_from_graph build it, apexc's
   * plan writing does not need it): buffer ids by name in an open-addressing table of name_cap
   * slots (id, -1 empty, and name hash) and each buffer's fp32 master, so lookups stay O(1) on
   * plans with 100k buffers. Used only while index_bufs == bufs and index_n == n_bufs;
   * otherwise the lookups scan. */
  int32_t *name_slots;
  uint32_t name_cap;
  int32_t *master_of;      /* [n_bufs] the MASTER buffer whose origin is i, -1 */
  const ApxPlanBuffer *index_bufs;
  int32_t index_n;

  const char *path;        /* file it was read from, for messages ("<plan>" otherwise) */
  void *map;               /* mapped file (apx_plan_read), else NULL */
  size_t map_len;
} ApxPlan;

void apx_plan_init(ApxPlan *p);
void apx_plan_free(ApxPlan *p);

/* Builder helpers (emit_plan, tests): arrays allocated zeroed in p->arena; ids set to -1
 * where -1 means none. Return NULL when out of memory. */
ApxPlanBuffer *apx_plan_alloc_buffers(ApxPlan *p, int32_t n);
/* As apx_plan_alloc_buffers with the records left unset: the caller writes each one whole
 * (emit_plan: 533k records, 77 MB, on the 100k-node chain, written once instead of thrice). */
ApxPlanBuffer *apx_plan_alloc_buffers_unset(ApxPlan *p, int32_t n);
ApxPlanKernel *apx_plan_alloc_kernels(ApxPlan *p, int32_t n);
/* Sets kernel k's op, node name, in/out lists (copied) and attrs (copied; NULL = zeroed). */
int apx_plan_set_kernel(ApxPlan *p, int32_t k, ApxOp op, const char *node, ApxSection sec,
                        const void *attrs, int32_t n_in, const int32_t *in, int32_t n_out,
                        const int32_t *out);

/* Adds a blob (name and bytes copied into no storage: data must outlive the plan's write).
 * Returns 0, -1 when out of memory. Call before apx_plan_layout_data. */
int apx_plan_add_blob(ApxPlan *p, const char *name, const void *data, uint64_t len);
/* The blob called name, NULL if none. */
const ApxPlanBlob *apx_plan_find_blob(const ApxPlan *p, const char *name);

/* Assigns data_offset/data_len for every buffer with data != NULL (64-byte aligned, in
 * buffer order), then for every blob, and sets data_bytes. Call before apx_plan_write on a
 * built plan. */
void apx_plan_layout_data(ApxPlan *p);

/* Checks every reference (see file comment) and sets sec_begin/sec_end. Returns 0 or -1
 * with "<path>: <what is wrong>" in d (exit code 2). */
int apx_plan_validate(ApxPlan *p, ApxDiag *d);
/* apx_plan_validate in two parts, for a builder whose arena offsets come later (emit_plan,
 * while the packing runs): everything but the arena buffers' placement and the arena's size,
 * then, once those are set and unchanged otherwise, only them. Together they accept and
 * refuse what apx_plan_validate does (the message of a plan with several faults may differ). */
int apx_plan_validate_unplaced(ApxPlan *p, ApxDiag *d);
int apx_plan_validate_placed(ApxPlan *p, ApxDiag *d);

/* Atomic write (temp file, fsync, rename). Validates first; refuses a destination that exists
 * and is not a regular file (exit code 2). Returns 0 or -1. */
int apx_plan_write(ApxPlan *p, const char *path, ApxDiag *d);
/* apx_plan_write of a plan that apx_plan_validate has just accepted, unchanged since
 * (apx_plan_from_graph's): the kernel checks, then the file. */
int apx_plan_write_validated(ApxPlan *p, const char *path, ApxDiag *d);
/* The same with the records ahead holds encoded already (plan_write.h; NULL: none). */
typedef struct ApxPlanAhead ApxPlanAhead;
int apx_plan_write_validated_ahead(ApxPlan *p, const ApxPlanAhead *ahead, const char *path, ApxDiag *d);
/* Reads and validates; p must be freshly initialized. On error p holds nothing that needs
 * more than apx_plan_free. Returns 0 or -1 (exit code 2 for a bad file, 1 for I/O). */
int apx_plan_read(ApxPlan *p, const char *path, ApxDiag *d);

/* Derived buffers (init_from >= 0): the initial bytes are apx_cpu_convert(data of init_from,
 * its dtype -> this dtype) (kernels/cpu: round to nearest even, every NaN to one quiet
 * pattern per sign as kernels/half.h), the one conversion the compiler checks against before
 * it leaves a buffer's bytes out and the runtime applies at load (runtime/exec.c). 1 when
 * dtype `from` may be derived into dtype `to` (fp32 -> fp16, fp32 -> bf16). */
int apx_plan_derivable(ApxDType from, ApxDType to);

/* Readable dump (apexc --dump-plan). */
void apx_plan_dump(const ApxPlan *p, FILE *f);

/* Builds (or rebuilds) the lookup index of p's buffers. Returns 0, -1 when out of memory
 * (lookups then scan). */
int apx_plan_index(ApxPlan *p);
/* Buffer id by name (the first of that name), -1 if none: O(1) with the index, else a scan. */
int32_t apx_plan_find_buffer(const ApxPlan *p, const char *name);
/* The buffer flagged APX_VALF_MASTER whose origin is id (its fp32 master), -1 if none. */
int32_t apx_plan_master_of(const ApxPlan *p, int32_t id);
const char *apx_plan_region_name(ApxMemRegion r);
const char *apx_plan_kind_name(ApxValueKind k);
const char *apx_plan_section_name(ApxSection s);

#ifdef __cplusplus
}
#endif
#endif
