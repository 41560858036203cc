#!/usr/bin/env bash
# Regenerates the golden --explain outputs next to the examples
# (examples/<model>/explain-<level>.txt), checked by //examples:explain_golden_test.
# Review the diff (git diff examples/) before committing: every changed line is a changed
# decision, reason, cast or summary figure.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build --noshow_progress //compiler:apexc >/dev/null 2>&1
apexc="$("${BAZEL[@]}" info bazel-bin 2>/dev/null)/compiler/apexc"
for m in mlp cnn transformer; do
  for lvl in O1 O2; do
    "$apexc" "examples/$m/model.onnx" "-$lvl" --explain --quiet 2>/dev/null > "examples/$m/explain-$lvl.txt"
    echo "wrote examples/$m/explain-$lvl.txt"
  done
done
