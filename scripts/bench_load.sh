#!/usr/bin/env bash
# Loader benchmark (issue 2): load + verify + fold_constants + infer_shapes of a generated
# ~100k-node model (tests/bench/make_big_graph.py, written to a temp folder), median seconds
# of RUNS fresh loads and peak RSS (tests/bench/bench_load.c). Target: under 1 s.
# Usage: scripts/bench_load.sh [RUNS] [BLOCKS]   (default 5 runs, 23000 blocks = ~100k nodes)
# Environment: BAZEL (the bazel command), PYTHON (a python with onnx and numpy; default scripts/py, the project venv).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
BLOCKS=${2:-23000}
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build -c opt --noshow_progress //tests/bench:bench_load >&2
BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${PYTHON:-scripts/py}" tests/bench/make_big_graph.py "$tmp/big.onnx" --blocks "$BLOCKS"
"$BIN/tests/bench/bench_load" "$tmp/big.onnx" "$RUNS"
