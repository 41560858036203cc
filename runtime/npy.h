/* npy.h - NumPy .npy files: the training data format of `apexrun --data DIR` (DESIGN.md 13).
 *
 * Format (numpy.lib.format): magic "\x93NUMPY", major, minor version byte, header length
 * (v1.0: uint16; v2.0 and v3.0: uint32, little-endian), then an ASCII (v3: UTF-8) Python
 * dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2048, 64), } padded with
 * spaces and '\n', then the raw elements.
 *
 * Read: versions 1, 2, 3; descr one of b1 (bool), i1 i2 i4 i8, u1 u2 u4 u8, f2 f4 f8 with
 * byte order '<', '>', '=' or '|' (big-endian data is byte-swapped to little-endian; the
 * host is little-endian); C order only; rank <= APX_MAX_RANK; the data must be exactly
 * numel * itemsize bytes. Anything else is one clear error (exit code 2) naming the file,
 * never a crash: structured/object/string/complex dtypes, Fortran order, truncated or
 * oversized data, malformed headers, overflowing shapes.
 * Write: version 1.0 (2.0 when the header needs more than 65535 bytes), '<' order. */
#ifndef APX_NPY_H
#define APX_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ir/diag.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxNpy {
  ApxDType dtype;
  int32_t rank;
  int64_t dims[APX_MAX_RANK]; /* C order */
  int64_t numel;
  void *data;                 /* numel elements, little-endian; malloc'ed (apx_npy_free) */
  size_t bytes;
  int32_t version;            /* major version of the file: 1, 2 or 3 */
  uint64_t data_offset;       /* where the elements start in the file */
  uint64_t file_bytes;        /* the file's size (apx_npy_read, apx_npy_read_header) */
} ApxNpy;

/* Headers larger than this are refused (numpy writes a few hundred bytes). */
#define APX_NPY_MAX_HEADER (1 << 20)

/* Parses an .npy image in memory (name is used in messages). The elements are copied.
 * Returns 0, or -1 with "<name>: <what is wrong>" in d (code 2; 1 when out of memory). */
int apx_npy_parse(const void *buf, size_t len, const char *name, ApxNpy *out, ApxDiag *d);
/* Reads path (fileio.h's bounded read: a FIFO, device or folder is refused at open): the
 * header first, checked against the file size (truncated, trailing bytes), then exactly the
 * elements it declares. A missing file: "<path>: cannot open .npy file: <reason>" (2). */
int apx_npy_read(const char *path, ApxNpy *out, ApxDiag *d);
/* Only the header, checked as apx_npy_read checks it (so the file is valid as far as its size
 * goes): dtype, rank, dims, numel, bytes, version, data_offset, file_bytes; data stays NULL
 * and no element is read (a 4 GiB file costs two small reads). */
int apx_npy_read_header(const char *path, ApxNpy *out, ApxDiag *d);
void apx_npy_free(ApxNpy *a);

/* Writes t (dtype bool, integers, f16 or f32/f64; bf16 has no numpy type and is refused)
 * as an .npy file. Returns 0 or -1 (code 1 for I/O, 2 for an unwritable dtype). */
int apx_npy_write(const char *path, const ApxTensor *t, ApxDiag *d);

/* numpy's descr for t ("<f4", "|b1" ...), NULL when numpy has none (bf16, string). */
const char *apx_npy_descr(ApxDType t);

#ifdef __cplusplus
}
#endif
#endif
