/* plan_write.h - the plan file writer behind apx_plan_write (plan.h): metadata encoded
 * straight from the ApxPlan arrays into the protobuf wire bytes of apexc.Plan, exactly as
 * protobuf-c packs them (fields in number order, proto3 zero values left out, repeated
 * scalars packed), and streamed with the data section through one staging buffer, the
 * CRC32C taken as the bytes go out. No message tree, no whole-metadata buffer, no second
 * copy of the tensor bytes (those of 2 MiB or more go from their memory to the file): the
 * 82 MB plan of a 100k-node chain (533k buffer records) takes 0.08-0.1 s here into a file
 * prepared by apx_plan_prepare_output (0.1-0.4 s into fresh pages), and a GPT-2 plan's
 * 650 MB of weights are copied once. */
#ifndef APX_PLAN_WRITE_H
#define APX_PLAN_WRITE_H

#include <stdint.h>

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes a validated plan to path atomically (temp file in the same folder, fsync, rename,
 * fsync of the folder). All-zero 64 KiB blocks of the file (at 64 KiB file offsets) are
 * left as holes. Returns 0 or -1 (exit code 1: I/O or memory). */
int apx_plan_write_file(const ApxPlan *p, const char *path, ApxDiag *d);

/* As apx_plan_write_file, with gate(gate_ctx) called once the temporary file is complete and
 * before it is renamed into place: nonzero (the gate has recorded the error in d) removes the
 * temporary file and returns -1, so a plan that fails a check running beside the write never
 * replaces path. The gate is not called when the write fails first. */
int apx_plan_write_file_gated(const ApxPlan *p, const char *path, int (*gate)(void *ctx, ApxDiag *d),
                              void *gate_ctx, ApxDiag *d);

/* The kernel and decision records of a plan encoded ahead of its write, in steps, while the
 * caller would otherwise wait (apexc: for the arena packing; emit_plan.c): the bytes
 * apx_plan_write_file would produce for them, which the write then puts as they are. The
 * plan's kernels and decisions must not change in between (its buffers, encoded before
 * them, may). init/free pair. */
struct ApxPlanAhead {
  uint8_t *buf;
  size_t n, cap;
  int32_t n_kernels, n_decisions; /* records encoded: kernels first, then decisions */
  int done;
};
void apx_plan_ahead_init(ApxPlanAhead *a);
void apx_plan_ahead_free(ApxPlanAhead *a);
/* Encodes up to max more records of p (a plan apx_plan_validate_unplaced accepted). Returns 1
 * when every record is encoded (or memory ran out: then none is kept and the write encodes
 * them all), else 0. */
int apx_plan_ahead_step(ApxPlanAhead *a, const ApxPlan *p, int32_t max);
/* apx_plan_write_file_gated putting the records of ahead (NULL: none) as encoded. */
int apx_plan_write_file_ahead(const ApxPlan *p, const ApxPlanAhead *ahead, const char *path,
                              int (*gate)(void *ctx, ApxDiag *d), void *gate_ctx, ApxDiag *d);

/* Prepares the file a later apx_plan_write_file*(path) writes, while the caller does
 * other work (apexc: from before loading the model until the plan is written): the
 * temporary file is created now and its first size_hint bytes filled with zeros on a thread
 * of its own, so that the plan's bytes are later copied into pages the file already has.
 * On tmpfs and into the page cache, a fresh page costs more than the copy itself (several
 * microseconds per 4 KiB on a virtual machine whose memory the host hands out lazily): an
 * 82 MB plan took 0.1-0.4 s to write, of which the copy is 0.02 s. The writer stops the
 * filling, writes over it, punches the holes it would have left, and truncates the file to
 * the plan's size. Nothing is prepared (and the writer works as before) when path exists
 * and is not a regular file or the file cannot be created; the writer then reports why.
 * One file at a time: a second call cancels the first. Until apx_plan_cancel_output,
 * SIGINT, SIGTERM and SIGHUP (where left at their default) remove the temporary file before
 * the process dies of them. */
void apx_plan_prepare_output(const char *path, uint64_t size_hint);
/* Raises the prepared file's size hint once the caller knows the plan better (apexc: at
 * the inspection point, from the graph's values); the filling goes on from where it is. A
 * smaller hint, or nothing prepared: nothing happens. */
void apx_plan_prepare_more(uint64_t size_hint);
/* Stops the filling and removes the prepared file when no write took it (the compile
 * failed); restores the signal dispositions. Safe to call when nothing is prepared. */
void apx_plan_cancel_output(void);

/* The 64-byte header (plan.h) of a file with meta_len bytes of metadata and data_len of data
 * (defined in plan.c beside the reader's decoding). */
void apx_plan_header_encode(uint8_t b[APX_PLAN_HEADER_BYTES], uint32_t version, uint64_t meta_len,
                            uint64_t data_len, uint32_t checksum);

/* CRC32C of A followed by B from crc_a = apx_crc32c(0, A), crc_b = apx_crc32c(0, B) and
 * B's length (the checksum of a file whose header is known only at the end). */
uint32_t apx_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#ifdef __cplusplus
}
#endif
#endif
