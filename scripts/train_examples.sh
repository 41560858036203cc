#!/usr/bin/env bash
# train_examples.sh - trains every example model at O0, O1, O2 (fp16) and O2 with bf16 on
# the CPU with the same data order and steps, and prints one table row per model and level:
# initial loss (step 1), final loss (mean of the last 10 steps' losses), its ratio to O0's,
# and the steps skipped by the loss scaler. Exits 1 when a ratio leaves 1 +- TOL.
#
#   scripts/train_examples.sh [--steps N] [--tol 0.02] [--models "mlp cnn transformer"]
#                             [--threads N]
#
# Results do not depend on --threads (the CPU kernels are thread-count independent); on a
# busy machine --threads 1 avoids OpenMP oversubscription and gives steadier ms/step.
#
# Binaries: $APEXC and $APEXRUN, else bazel-bin/compiler/apexc and bazel-bin/runtime/apexrun.
# Run from the repository root (reads examples/<model>/{model.onnx,data}).
set -euo pipefail

steps=200
tol=0.02
models="mlp cnn transformer"
threads=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --tol) tol="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --threads) threads=(--threads "$2"); shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "train_examples.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
apexc="${APEXC:-bazel-bin/compiler/apexc}"
apexrun="${APEXRUN:-bazel-bin/runtime/apexrun}"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/train_examples.XXXXXX")"
trap 'rm -rf "$work"' EXIT

lr_of() { # the learning rates the example READMEs use
  case "$1" in cnn) echo "--lr 0.01" ;; *) echo "" ;; esac
}

# loss values of a JSON-lines log, one per line
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }

printf "%-12s %-10s %12s %12s %10s %8s %10s\n" model level initial final "ratio/O0" skipped "ms/step"
status=0
for m in $models; do
  o0=""
  for level in O0 O1 O2 O2-bf16; do
    flags="-${level%%-*}"
    [ "$level" = O2-bf16 ] && flags="-O2 --half=bf16"
    # shellcheck disable=SC2046
    "$apexc" "examples/$m/model.onnx" $flags $(lr_of "$m") -q -o "$work/$m.apx" > /dev/null
    "$apexrun" "$work/$m.apx" --data "examples/$m/data" --steps "$steps" --quiet "${threads[@]}" \
      --log "$work/$m.$level.jsonl" > "$work/$m.$level.out"
    init="$(losses "$work/$m.$level.jsonl" | head -1)"
    final="$(losses "$work/$m.$level.jsonl" | tail -10 | awk '{s += $1} END {printf "%.6f", s / NR}')"
    skipped="$(grep -c '"skipped": true' "$work/$m.$level.jsonl" || true)"
    ms="$(sed -n 's/.*(\([0-9.]*\) ms\/step).*/\1/p' "$work/$m.$level.out")"
    [ "$level" = O0 ] && o0="$final"
    ratio="$(awk -v a="$final" -v b="$o0" 'BEGIN {printf "%.4f", a / b}')"
    ok="$(awk -v r="$ratio" -v t="$tol" 'BEGIN {print (r >= 1 - t && r <= 1 + t) ? 1 : 0}')"
    flag=""
    if [ "$ok" != 1 ]; then flag="  <- outside 1 +- $tol"; status=1; fi
    printf "%-12s %-10s %12.6f %12s %10s %8s %10s%s\n" "$m" "$level" "$init" "$final" "$ratio" \
      "$skipped" "$ms" "$flag"
  done
done
echo "($steps steps each, same shuffled data order; final = mean loss of the last 10 steps)"
exit $status
