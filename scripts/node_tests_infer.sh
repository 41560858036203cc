#!/usr/bin/env bash
# The ONNX node tests of apexc's v1 ops through `apexrun infer` (scripts/node_tests_infer.py
# has the rule); builds apexrun first. Last line "N passed, M failed".
#   bash scripts/node_tests_infer.sh [--filter SUBSTR] [--list]
# Environment: BAZEL (the bazel command), APEXRUN (a binary to use instead of building).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
if [ -z "${APEXRUN:-}" ]; then
  "${BAZEL[@]}" build --noshow_progress //runtime:apexrun >/dev/null 2>&1 ||
    { echo "node_tests_infer.sh: bazel build //runtime:apexrun failed" >&2; exit 1; }
  APEXRUN="$("${BAZEL[@]}" info bazel-bin 2>/dev/null)/runtime/apexrun"
fi
exec scripts/py scripts/node_tests_infer.py "$APEXRUN" "$@"
