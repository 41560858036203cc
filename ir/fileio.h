/* fileio.h - file helpers shared by the plan file (plan.c), checkpoints (checkpoint.c), the
 * compiler's plan emission and every reader of an input file: little-endian header fields,
 * CRC32C, making a rename durable (fsync of the folder), the check that a destination is a
 * regular file, bounded reads of input files, checked writes, and "is this the same file".
 *
 * Bounded reads (every reader: plan, checkpoint, .npy, ONNX model and its external data,
 * TensorProto inputs, --policy): apx_infile_open opens without blocking and refuses anything
 * that is not a regular file once symlinks are followed (a FIFO, which would block the reader
 * forever; a device such as /dev/zero, which never ends; a folder), so the size is known
 * before a byte is read. The reader then checks its header and the size the header declares
 * against that size, and reads (apx_infile_pread) or maps exactly what the header declares.
 * Depends on nothing but libc and the diagnostics (ir/diag.h). */
#ifndef APX_RUNTIME_FILEIO_H
#define APX_RUNTIME_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "ir/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Little-endian fields of on-disk headers, whatever the host's byte order. */
static inline void apx_le_put_u32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void apx_le_put_u64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t apx_le_get_u32(const uint8_t *b) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
  return v;
}
static inline uint64_t apx_le_get_u64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}
/* A double as the u64 of its bits and back (a double field of a header or an exchange). */
static inline uint64_t apx_f64_bits(double x) {
  uint64_t u;
  __builtin_memcpy(&u, &x, 8);
  return u;
}
static inline double apx_bits_f64(uint64_t u) {
  double x;
  __builtin_memcpy(&x, &u, 8);
  return x;
}

/* CRC32C (Castagnoli, reflected, as iSCSI/ext4): crc = apx_crc32c(0, buf, n) for a whole
 * buffer, chain by passing the previous result. SSE4.2 instruction when available. */
uint32_t apx_crc32c(uint32_t crc, const void *buf, size_t n);

/* fsync of the folder holding `path` ("." without a slash), so that a rename into `path`
 * survives a crash. Best effort: failures are ignored. */
void apx_fsync_dir_of(const char *path);

/* 1 when `path` exists (following symlinks) and is not a regular file: a device such as
 * /dev/null, a FIFO, a socket or a folder. Writers that rename a temporary file into place
 * refuse such a destination rather than replace it. 0 when it is a regular file or absent. */
int apx_exists_not_regular(const char *path);

/* ---- bounded reads of input files ---------------------------------------------------- */

/* Opens path for reading (O_RDONLY | O_CLOEXEC | O_NONBLOCK | extra_flags, e.g. O_NOFOLLOW;
 * O_NONBLOCK is cleared again) and refuses what is not a regular file. Returns the fd with
 * *size set; or -1 with *why = NULL when open or fstat failed (errno set), or *why a static
 * text such as "not a regular file (a FIFO)" when the file was opened and refused. */
int apx_open_regular(const char *path, int extra_flags, uint64_t *size, const char **why);

/* An input file opened by apx_infile_open: a regular file of known size. */
typedef struct ApxInFile {
  int fd;            /* -1 once closed */
  uint64_t size;     /* bytes, at open */
  const char *path;  /* as given (not owned) */
  const char *what;  /* its role in messages: "plan", "checkpoint", ".npy file", "" */
} ApxInFile;

/* apx_open_regular with one-line errors (code 2):
 *   "<path>: cannot open <what>: No such file or directory"
 *   "<path>: cannot read <what>: not a regular file (a FIFO)"   (also: a folder, a character
 *       device, a block device, a socket; a symlink adds where it leads: "(a character device:
 *       /dev/zero)")
 * what "" gives "cannot open: ..." / "cannot read: ...". Returns 0 or -1; f->fd is -1 on failure. */
int apx_infile_open(ApxInFile *f, const char *path, const char *what, ApxDiag *d);
/* Exactly n bytes at offset off (the caller has checked off + n <= f->size). -1 with
 * "<path>: cannot read <what>: <errno>" (code 1), or "<path>: <what> ended after B of S bytes
 * (the file shrank while it was read)" (code 2) when the file ends first. */
int apx_infile_pread(const ApxInFile *f, void *buf, size_t n, uint64_t off, ApxDiag *d);
/* The whole file (a format without a size header: protobuf, JSON) when it has at most
 * max_bytes, into a malloc'ed buffer of size + 1 bytes (the extra byte 0); else
 * "<path>: <what> of S bytes, more than the M bytes <limit_why>" (code 2). */
int apx_infile_read_all(ApxInFile *f, uint64_t max_bytes, const char *limit_why, uint8_t **buf,
                        ApxDiag *d);
void apx_infile_close(ApxInFile *f);
/* open + read_all + close. *len = the file size. */
int apx_read_file_bounded(const char *path, const char *what, uint64_t max_bytes,
                          const char *limit_why, uint8_t **buf, size_t *len, ApxDiag *d);

/* ---- checked writes ------------------------------------------------------------------ */

/* Writes all n bytes (retrying short writes and EINTR). 0, or -1 with errno set (ENOSPC for
 * a write that made no progress without an error code). */
int apx_write_all(int fd, const void *buf, size_t n);

/* ---- paths --------------------------------------------------------------------------- */

/* path absolute and canonical as far as it exists: realpath of the longest existing prefix,
 * the rest appended with "." and ".." resolved lexically. malloc'ed; NULL when out of memory
 * or when not even the current folder resolves. */
char *apx_canonical_path(const char *path);
/* 1 if a and b name the same file: same device and inode when both exist, else (neither or
 * one exists) the same canonical path. A file that does not exist yet is the same as another
 * path only when their canonical paths are equal. */
int apx_same_file(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif
