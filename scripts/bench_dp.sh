#!/usr/bin/env bash
# Data-parallel step time (DESIGN.md 11): `mpirun -np K apexrun` on CPU with each gradient
# bucket's allreduce overlapping the rest of backward (default) against --no-overlap (the
# same reduction waited for inside its kernel). Per case: the median step time of rank 0's
# --log after the warm-up steps, and the kernels launched per step while a bucket was in
# flight (overlap_kernels). Plans: tests/dp/{mlp,cnn}_n.onnx with the batch bound per rank.
# Usage: scripts/bench_dp.sh [--np K] [--steps N] [--warmup W] [--threads T] [--reps R]
# Environment: BAZEL (the bazel command, e.g. "bazel --output_base=..."); APX_BIN (a bazel-bin
# folder with compiler/apexc and runtime/apexrun already built: no build); MPIRUN_ARGS (extra
# mpirun options; as root this script adds --allow-run-as-root).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
NP=2 STEPS=60 WARMUP=10 THREADS=1 REPS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) echo "bench_dp.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
if [ -n "${APX_BIN:-}" ]; then
  BIN=$APX_BIN
else
  "${BAZEL[@]}" build -c opt --noshow_progress //compiler:apexc //runtime:apexrun >&2
  BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MPI=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none
     --mca mpi_yield_when_idle 1 ${MPIRUN_ARGS:-})
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  MPI+=(--allow-run-as-root)
fi

# median of the "ms" (or another) field of a log's lines after the warm-up
median() {
  sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1" | tail -n +$((WARMUP + 1)) | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

printf "%-40s %12s %14s %8s %10s\n" "case (-np $NP, --threads $THREADS)" "overlap ms" "no-overlap ms" "ratio" "overlapped"
run_case() { # name model batch data apexc-flags
  local name=$1 model=$2 batch=$3 data=$4 flags=$5
  "$BIN/compiler/apexc" "tests/dp/${model}_n.onnx" --dim "N=$batch" $flags -q -o "$TMP/$name.apx"
  local mo=() mb=() ko=""
  for r in $(seq "$REPS"); do
    for mode in ov nov; do
      local extra=""
      [ $mode = nov ] && extra=--no-overlap
      "${MPI[@]}" -np "$NP" "$BIN/runtime/apexrun" "$TMP/$name.apx" --data "$data" --steps "$STEPS" \
        --threads "$THREADS" --quiet --log "$TMP/$name.$mode.$r.jsonl" $extra > "$TMP/out" 2>&1 ||
        { cat "$TMP/out" >&2; exit 1; }
    done
    mo+=("$(median "$TMP/$name.ov.$r.jsonl" ms)")
    mb+=("$(median "$TMP/$name.nov.$r.jsonl" ms)")
    ko=$(median "$TMP/$name.ov.$r.jsonl" overlap_kernels)
  done
  # the median over the repetitions of each mode's median
  local o b
  o=$(printf "%s\n" "${mo[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}')
  b=$(printf "%s\n" "${mb[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}')
  printf "%-40s %12s %14s %8s %10s\n" "$name" "$o" "$b" "$(awk -v o="$o" -v b="$b" 'BEGIN {printf "%.3f", o / b}')" "$ko"
}

SMALL="--bucket-mb 0.01 --first-bucket-mb 0.01"
run_case "mlp b8 -O2 small buckets" mlp 8 examples/mlp/data "-O2 $SMALL"
run_case "mlp b256 -O2 small buckets" mlp 256 examples/mlp/data "-O2 $SMALL"
run_case "mlp b256 -O0 default buckets" mlp 256 examples/mlp/data "-O0"
run_case "cnn b32 -O0 small buckets" cnn 32 examples/cnn/data "-O0 --optimizer sgd $SMALL"
echo "ratio = overlap / no-overlap (below 1: overlap is faster); overlapped = median kernels per step"
echo "launched while a bucket was in flight. $(nproc) cores: $NP ranks x $THREADS threads."
