#!/usr/bin/env bash
# sh_test: compiler/onnx_opset.c's schema facts agree with onnx.defs (opset_table_check.py).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec scripts/py tests/ort/opset_table_check.py tests/ort/opset_table_tool
