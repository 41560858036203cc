#!/usr/bin/env bash
# Fusion benchmark (DESIGN.md 10): for the three example models at O0 and O2, the kernels
# and bytes read + written per training step before and after fusion (apexc
# --fusion-report, estimates from ir/cost.h) and the CPU step time of apexrun with and
# without --no-fuse (median of REPEAT interleaved runs of STEPS steps, ms/step as apexrun reports it).
# Usage: scripts/bench_fusion.sh [STEPS]   (default 100)
# Environment: THREADS (apexrun --threads, default 1: the step times of a shared machine are
# steadier single-threaded), REPEAT (default 5), BAZEL (the bazel command).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-100}
THREADS=${THREADS:-1}
REPEAT=${REPEAT:-5}
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build -c opt --noshow_progress //compiler:apexc //runtime:apexrun >&2
BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# one run's ms/step as apexrun reports it ("n/a" when it fails)
one_ms() {
  local ms
  ms=$("$BIN/runtime/apexrun" "$1" --data "$2" --steps "$STEPS" --threads "$THREADS" 2>&1 |
       sed -n 's/.*(\([0-9.]*\) ms\/step).*/\1/p' | tail -1)
  echo "${ms:-n/a}"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0 || v[1] == "n/a") print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-12s %-3s %18s %24s %14s %14s %8s\n' model opt "kernels/step" "bytes/step" \
  "ms (fused)" "ms (--no-fuse)" speedup
for m in mlp cnn transformer; do
  for lvl in O0 O2; do
    report=$("$BIN/compiler/apexc" "examples/$m/model.onnx" "-$lvl" -q --fusion-report -o "$tmp/f.apx" 2>/dev/null)
    "$BIN/compiler/apexc" "examples/$m/model.onnx" "-$lvl" -q --no-fuse -o "$tmp/n.apx" 2>/dev/null >/dev/null
    read -r k0 k1 b0 b1 < <(sed -n 's/^  summary: kernels \([0-9]*\) -> \([0-9]*\), bytes \([0-9]*\) -> \([0-9]*\).*/\1 \2 \3 \4/p' <<< "$report")
    fs="" ns=""
    for _ in $(seq "$REPEAT"); do  # interleaved, so drift on a shared machine hits both alike
      fs+=" $(one_ms "$tmp/f.apx" "examples/$m/data")"
      ns+=" $(one_ms "$tmp/n.apx" "examples/$m/data")"
    done
    tf=$(median <<< "$fs")
    tn=$(median <<< "$ns")
    sp=$(awk -v a="$tf" -v b="$tn" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", b / a; else print "n/a" }')
    printf '%-12s %-3s %18s %24s %14s %14s %8s\n' "$m" "$lvl" "$k0 -> $k1" "$b0 -> $b1" "$tf" "$tn" "$sp"
  done
done
echo "(kernels: live nodes launching a kernel, SHAPEONLY views excluded; bytes: estimated" \
     "reads + writes per step; ms/step: apexrun --threads $THREADS, median of $REPEAT interleaved runs of $STEPS steps)"
