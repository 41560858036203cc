#!/usr/bin/env bash
# Times the precision passes (overflow_check, precision, cast_insert, cast_cleanup) on a
# generated ~100k-node graph at O1 and O2 (tests/bench/bench_precision.c). Target: < 0.5 s for
# the four passes together. Usage: scripts/bench_precision.sh [BLOCKS] [LEVEL]
# (20 nodes per block; default 5000 blocks = 100k nodes). BAZEL may name the bazel command.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build -c opt --noshow_progress //tests/bench:bench_precision >&2
"$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)/tests/bench/bench_precision" "$@"
