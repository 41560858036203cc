#!/usr/bin/env bash
# sh_test: a small Conv3d model (3-D Conv, MaxPool, ConvTranspose, AveragePool; model.onnx
# from make_model.py) trains on the CPU at -O0, -O1 and -O2: 48 steps, the mean loss of the
# last 8 steps below half the first step's loss, no step skipped at O0.
#   conv3d_train_test.sh APEXC APEXRUN
set -euo pipefail
apexc="$1"
apexrun="$2"
here="$(dirname "$0")"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/conv3d.XXXXXX")"
trap 'rm -rf "$work"' EXIT
for level in O0 O1 O2; do
  "$apexc" "$here/model.onnx" "-$level" --lr 0.01 -q -o "$work/m.apx" > /dev/null
  "$apexrun" "$work/m.apx" --data "$here/data" --steps 48 --quiet --threads 1 --log "$work/$level.jsonl" > /dev/null
  losses="$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$level.jsonl")"
  first="$(echo "$losses" | head -1)"
  last="$(echo "$losses" | tail -8 | awk '{s += $1} END {printf "%.6f", s / NR}')"
  n="$(echo "$losses" | wc -l)"
  echo "$level: $n steps, loss $first (step 1) -> $last (mean of the last 8)"
  [ "$n" -eq 48 ] || { echo "FAIL $level: $n logged steps, expected 48"; exit 1; }
  awk -v a="$first" -v b="$last" 'BEGIN {exit !(a > 1.0 && b < a / 2)}' ||
    { echo "FAIL $level: the loss did not go down"; exit 1; }
  if [ "$level" = O0 ] && grep -q '"skipped": true' "$work/$level.jsonl"; then
    echo "FAIL O0: a step was skipped"; exit 1
  fi
done
echo "conv3d_train_test: ok"
