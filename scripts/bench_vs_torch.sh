#!/usr/bin/env bash
# CPU training step time against PyTorch eager (issue 12 item 5): apexrun -O0 on the reference
# models of tests/models against the same model in PyTorch (same weights, data, batch, SGD),
# 1 and 2 threads, interleaved repetitions, medians and apexrun/PyTorch ratios
# (scripts/bench/bench_vs_torch.py says how it measures).
# Usage: scripts/bench_vs_torch.sh [--threads 1,2] [--reps K] [--steps N] [--warmup W]
#                                  [--models LIST] [--mkldnn on|off|both] [--proxies]
# Environment: BAZEL (the bazel command; BAZEL_BUILD_FLAGS added to its build), TORCH_PYTHON:
# a python with torch, torchvision and transformers (default /work/torchenv/bin/python, the
# fixture venv of tests/models/README.md). PyTorch is needed for the peer only: without it
# the script says so and exits 0 (skipped), measuring nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${TORCH_PYTHON:-/work/torchenv/bin/python}
if ! { [ -x "$PY" ] || command -v "$PY" >/dev/null 2>&1; } ||
   ! "$PY" -c 'import torch, torchvision, transformers' >/dev/null 2>&1; then
  echo "bench_vs_torch.sh: skipped: needs a python with torch, torchvision and transformers" \
       "(TORCH_PYTHON=$PY has not; tests/models/README.md shows the venv)" >&2
  exit 0
fi
read -r -a BAZEL <<< "${BAZEL:-bazel}"
read -r -a FLAGS <<< "${BAZEL_BUILD_FLAGS:-}"
"${BAZEL[@]}" build -c opt --noshow_progress "${FLAGS[@]}" //compiler:apexc //runtime:apexrun >&2
BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
exec "$PY" scripts/bench/bench_vs_torch.py "$BIN" "$@"
