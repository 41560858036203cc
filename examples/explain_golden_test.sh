#!/usr/bin/env bash
# Golden --explain outputs (issue 4): for each example and opt level, `apexc --explain`
# must print exactly examples/<model>/explain-<level>.txt, no line wider than 120 columns.
# A difference is a change in a precision decision, its reason, a cast, or the summary:
# review it, then regenerate with
#   bash scripts/update_golden.sh
# Usage: explain_golden_test.sh APEXC   (run from the workspace root or its runfiles)
set -u
apexc="$1"
fail=0 n=0
for m in mlp cnn transformer; do
  for lvl in O1 O2; do
    golden="examples/$m/explain-$lvl.txt"
    n=$((n + 1))
    if ! out=$("$apexc" "examples/$m/model.onnx" "-$lvl" --explain --quiet 2>/dev/null); then
      echo "FAIL $golden: apexc failed"; fail=$((fail + 1)); continue
    fi
    if ! diff -u "$golden" <(printf '%s\n' "$out") > "${TEST_TMPDIR:-/tmp}/explain.diff"; then
      echo "FAIL $golden differs:"; head -40 "${TEST_TMPDIR:-/tmp}/explain.diff"; fail=$((fail + 1))
    fi
    # the text report fits 120 columns (wrapped rows, issue 13)
    wide=$(printf '%s\n' "$out" | awk 'length($0) > 120 { print NR ": " length($0) " columns" }' | head -3)
    if [ -n "$wide" ]; then
      echo "FAIL $m -$lvl --explain: lines wider than 120 columns: $wide"; fail=$((fail + 1))
    fi
  done
done
echo "golden explain: $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
