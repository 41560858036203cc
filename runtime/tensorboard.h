/* tensorboard.h - `apexrun --tensorboard DIR`: TensorBoard event files written in C, no
 * Python and no TensorFlow (DESIGN.md 13).
 *
 * DIR (created if missing) gets one file per run, events.out.tfevents.<seconds>.<host>.
 * <pid>.apexc: a sequence of records, each
 *     uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
 *     `length` bytes of an Event protobuf | uint32 masked CRC32C of those bytes
 * (masked crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8, CRC32C from ir/fileio.h), the first
 * Event holding file_version "brain.Event:2", every later one a Summary of scalar values at
 * a step (runtime/tensorboard.proto, encoded by protobuf-c). Each record is flushed, so a
 * running TensorBoard shows the curves while training runs. */
#ifndef APX_TENSORBOARD_H
#define APX_TENSORBOARD_H

#include <stdint.h>

#include "ir/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxTbWriter ApxTbWriter;

typedef struct ApxTbScalar {
  const char *tag;
  double value;
} ApxTbScalar;

/* Creates dir if needed and a new event file in it with its file_version record. Returns 0,
 * or -1 with "DIR: cannot ..." in d (exit 2: the folder cannot be made or written). */
int apx_tb_init(ApxTbWriter **w, const char *dir, ApxDiag *d);

/* One Summary event at step with the n scalars. Returns 0, or -1 with the file and the
 * reason in d (exit 1: a write failed during the run). */
int apx_tb_write_scalars(ApxTbWriter *w, int64_t step, const ApxTbScalar *s, int n, ApxDiag *d);

/* The event file's path (for messages). */
const char *apx_tb_path(const ApxTbWriter *w);

/* Closes the file and frees w (NULL is fine). */
void apx_tb_close(ApxTbWriter *w);

/* The record framing of one serialized Event (for tests): writes 12 + len + 4 bytes into out. */
void apx_tb_frame(const uint8_t *data, uint64_t len, uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
