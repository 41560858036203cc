#!/usr/bin/env bash
# sh_test: 3-D MaxPool (Indices, storage_order 1), AveragePool, Conv and ConvTranspose through
# `apexrun infer` agree with onnxruntime (ort_check.py).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec scripts/py tests/conv3d/ort_check.py "$1"
