#!/usr/bin/env bash
# Inference benchmark (issue 3): fp32 forward + loss of `apexrun infer` (-O0, --repeat) against
# onnxruntime on CPU for the example models and larger-batch variants, 1 and 2 threads;
# medians and apexc/onnxruntime ratios (scripts/bench/bench_infer.py says how it measures).
# Usage: scripts/bench_infer.sh [--threads 1,2] [--reps K] [--iters N] [--cases LIST]
# Environment: BAZEL (the bazel command), PYTHON (a python with onnx, numpy, onnxruntime; default scripts/py, the project venv).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build -c opt --noshow_progress //runtime:apexrun >&2
BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
exec "${PYTHON:-scripts/py}" scripts/bench/bench_infer.py "$BIN/runtime/apexrun" "$@"
