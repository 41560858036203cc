#!/usr/bin/env bash
# Training benchmark (issue 5): CPU step time of apexrun on plans compiled at -O0 and -O2
# against onnxruntime-training (train_step + optimizer step + lazy_reset_grad), AdamW, same
# threads (1 and 2), for the example models and larger-batch variants; medians and ratios
# (scripts/bench/bench_train.py says how it measures).
# Usage: scripts/bench_train.sh [--threads 1,2] [--reps K] [--steps N] [--warmup W] [--cases LIST]
# Environment: BAZEL (the bazel command); ORTT_PYTHON, a python with onnxruntime-training,
# onnx and numpy (default /root/venv-ortt/bin/python; see tests/ort_training/make_reference.py).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
PY=${ORTT_PYTHON:-/root/venv-ortt/bin/python}
[ -x "$PY" ] || { echo "bench_train.sh: no onnxruntime-training python at $PY (set ORTT_PYTHON)" >&2; exit 2; }
"${BAZEL[@]}" build -c opt --noshow_progress //compiler:apexc //runtime:apexrun >&2
BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
exec "$PY" scripts/bench/bench_train.py "$BIN" "$@"
