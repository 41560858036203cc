#!/bin/bash
# ab_time_passes.sh - two apexc binaries on one model, interleaved, stage by stage: the medians
# of their `--time-passes` lines (wall and CPU seconds, peak growth) and the new/old ratios,
# measured in the same run (a shared machine's load hits both alike). Checks that both wrote
# the same plan bytes.
#
#   bash scripts/ab_time_passes.sh [--runs N] [--stages RE] MODEL OLD_APEXC NEW_APEXC [APEXC ARGS...]
#
# Defaults: 5 runs each, stages emit_plan|write_plan|total, args -O2. Plans go to a temporary
# folder ($TMPDIR, /dev/shm when it exists) that is removed at the end.
set -euo pipefail
runs=5
stages='emit_plan|write_plan|total'
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -lt 3 ]; then
  echo "usage: ab_time_passes.sh [--runs N] [--stages RE] MODEL OLD_APEXC NEW_APEXC [APEXC ARGS...]" >&2
  exit 2
fi
model=$1 old=$2 new=$3
shift 3
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-O2)
base=${TMPDIR:-/tmp}
[ -d /dev/shm ] && base=/dev/shm
work=$(mktemp -d "$base/ab_time_passes.XXXXXX")
trap 'rm -rf "$work"' EXIT
for r in $(seq "$runs"); do
  for side in old new; do
    bin=$old
    [ $side = new ] && bin=$new
    "$bin" "$model" "${args[@]}" -q -o "$work/$side.apx" --time-passes 2>"$work/err" ||
      { cat "$work/err" >&2; exit 1; }
    awk -v s=$side '$1 == "time-passes" {print s, $2, $3, $6, ($11 ~ /^\+/ ? $11 : "-")}' "$work/err" \
      >>"$work/lines"
  done
  cmp -s "$work/old.apx" "$work/new.apx" || echo "note: run $r: the two plans differ" >&2
done
sort_med() { sort -n | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
printf '%-16s %10s %10s %10s %10s %8s %8s %11s %11s\n' stage "old wall" "new wall" "old cpu" \
  "new cpu" "wall n/o" "cpu n/o" "old +peak" "new +peak"
for st in $(awk '{print $2}' "$work/lines" | awk '!seen[$0]++' | grep -E "^($stages)$"); do
  v() { awk -v s="$1" -v t="$st" -v c="$2" '$1 == s && $2 == t {print $c}' "$work/lines" | sort_med; }
  pk() { awk -v s="$1" -v t="$st" '$1 == s && $2 == t {print $5}' "$work/lines" | tail -1; }
  ow=$(v old 3) nw=$(v new 3) oc=$(v old 4) nc=$(v new 4)
  printf '%-16s %10.3f %10.3f %10.3f %10.3f %8.3f %8.3f %11s %11s\n' "$st" "$ow" "$nw" "$oc" "$nc" \
    "$(awk -v a="$nw" -v b="$ow" 'BEGIN {print (b > 0 ? a / b : 0)}')" \
    "$(awk -v a="$nc" -v b="$oc" 'BEGIN {print (b > 0 ? a / b : 0)}')" "$(pk old)" "$(pk new)"
done
echo "($runs runs each, interleaved; medians; plan bytes: $(stat -c %s "$work/old.apx") old, $(stat -c %s "$work/new.apx") new)"
