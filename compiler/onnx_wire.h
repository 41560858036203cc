/* onnx_wire.h - a ModelProto's bytes with the initializers' raw_data taken out, for the
 * loader (compiler/onnx_load.c).
 *
 * protobuf-c copies every bytes field it unpacks, and the loader copies each payload again
 * into the graph's arena: a model whose weights are many small initializers had them copied
 * twice (36 MB for a 100k-node chain). apx_onnx_strip_raw reads the wire framing of
 * ModelProto.graph (field 7) -> GraphProto.initializer (field 5) -> TensorProto.raw_data
 * (field 9), writes the model again without those raw_data fields (every other byte as it
 * was, the enclosing lengths re-encoded), and says where each initializer's payload lies in
 * the original bytes, so that the loader copies it once, from there.
 *
 * It only strips what it fully understands: any framing it cannot read (a truncated varint or
 * length, a group, a graph given twice, a raw_data that is not length-delimited) leaves the
 * model as it is (returns 0), and protobuf-c then reads the original bytes and reports what
 * is wrong exactly as before. Unpacking the stripped bytes gives the same messages as the
 * original minus raw_data; when a TensorProto repeats raw_data the last one counts, as in
 * protobuf. */
#ifndef APX_ONNX_WIRE_H
#define APX_ONNX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ApxRawSpan {
  const uint8_t *data; /* inside the original model bytes */
  size_t len;
  int present;         /* the initializer had a raw_data field */
} ApxRawSpan;

typedef struct ApxStripped {
  uint8_t *buf;     /* the model without initializer raw_data (malloc'd) */
  size_t len;
  ApxRawSpan *raw;  /* [n_raw] per initializer, in graph.initializer order */
  size_t n_raw;
} ApxStripped;

/* 1: out holds the stripped model (free with apx_onnx_stripped_free); 0: nothing to strip
 * or framing not understood (use the model as it is; out is empty); -1: out of memory. */
int apx_onnx_strip_raw(const uint8_t *model, size_t len, ApxStripped *out);
void apx_onnx_stripped_free(ApxStripped *s);

#ifdef __cplusplus
}
#endif
#endif
