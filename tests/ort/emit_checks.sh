#!/usr/bin/env bash
# sh_test: apexc --emit-onnx (via emit_onnx_tool) against onnxruntime for the examples and
# the ONNX node tests of v1 ops (Debian libonnx-testdata), O1/O2 x fp16/bf16.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
NODE_DIR=/usr/share/libonnx-testdata/data/node
if [ ! -d "$NODE_DIR" ]; then
  echo "missing $NODE_DIR (Debian package libonnx-testdata)" >&2
  exit 1
fi
exec scripts/py tests/ort/run_emit_checks.py tests/ort/emit_onnx_tool examples "$NODE_DIR" \
  --ops-def kernels/ops.def
