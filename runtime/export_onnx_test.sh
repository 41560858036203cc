#!/usr/bin/env bash
# `apexrun --export-onnx` of the examples checked in onnxruntime (runtime/testdata/check_export.py).
set -euo pipefail
exec scripts/py runtime/testdata/check_export.py compiler/apexc runtime/apexrun "${TEST_TMPDIR:-/tmp}/export_onnx"
