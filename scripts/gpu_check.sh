#!/usr/bin/env bash
# gpu_check.sh - everything that needs a GPU, in one bounded run (for a lent GPU machine):
# builds the tree, runs every test tagged requires-gpu (the CUDA kernel lab against the CPU
# reference at every block size, the cuda backend, the example models trained on cuda vs
# cpu, apexrun --device cuda) with the lab's benchmarks, and prints one summary:
#   - per test: PASSED / FAILED / TIMEOUT
#   - per lab case: the largest normalized error and its tolerance
#   - benchmark lines (production kernels, median of 5 x 20 launches, per block size)
# The whole run stops at --budget seconds (default 540) so it fits one device call.
#
#   scripts/gpu_check.sh [--budget SECONDS] [--no-bench] [--only PATTERN] [--jobs N]
#                        [--output-base DIR]
#
# Exit code 0 when every selected test passed on a GPU, 1 otherwise (a failure, the budget, or
# no CUDA device: the tests then skip and print why), 2 for bad usage. Run from the repository
# root.
set -uo pipefail

budget=540
bench=1
only=""
jobs=""
output_base="${APEXC_OUTPUT_BASE:-/root/.cache/bazel-gpu-check}"
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget="$2"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --only) only="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --output-base) output_base="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

start=$(date +%s)
echo "== gpu_check: $(date -u +%FT%TZ), budget ${budget}s"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "nvidia-smi not found: the GPU tests will skip"
fi
command -v bazel >/dev/null 2>&1 || { echo "gpu_check.sh: bazel not found" >&2; exit 2; }

targets=$(bazel --output_base="$output_base" query 'attr(tags, "requires-gpu", tests(//...))' 2>/dev/null)
if [ -n "$only" ]; then targets=$(echo "$targets" | grep -E -- "$only" || true); fi
if [ -z "$targets" ]; then
  echo "gpu_check.sh: no requires-gpu tests (was nvcc detected? bazel query shows none)" >&2
  exit 1
fi
echo "== tests: $(echo "$targets" | wc -l)"
echo "$targets" | sed 's/^/   /'

flags=(--test_output=errors --test_env=APEXC_LAB_BENCH="$bench" --cache_test_results=no
       --test_timeout=300,600,900,900 --keep_going)
[ -n "$jobs" ] && flags+=(--jobs="$jobs")
left=$(( budget - ($(date +%s) - start) ))
timeout --signal=INT --kill-after=20 "$left" \
  bazel --output_base="$output_base" test "${flags[@]}" $targets 2>&1 | tail -n 60
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 130 ]; then
  echo "== gpu_check: stopped at the ${budget}s budget"
fi

logs="$(bazel --output_base="$output_base" info bazel-testlogs 2>/dev/null)"
echo "== lab: largest normalized error per case (tolerance)"
find "$logs/kernels/cuda/lab" -name test.log -newermt "@$start" 2>/dev/null | sort | while read -r f; do
  grep -h '^lab ' "$f"
done
echo "== failures"
find "$logs" -name test.log -newermt "@$start" 2>/dev/null | sort | while read -r f; do
  grep -h -E '^\[  FAILED  \]|Failure$|normalized error$' "$f" | sed "s|^|$(basename "$(dirname "$f")"): |" | head -n 20
done
if [ "$bench" = 1 ]; then
  echo "== benchmarks (production kernels)"
  find "$logs" -name test.log -newermt "@$start" 2>/dev/null | sort | while read -r f; do
    grep -h '^bench ' "$f"
  done
fi
echo "== cuda vs cpu training (examples)"
f="$logs/runtime/exec_cuda_test/test.log"
[ -f "$f" ] && grep -h -E ': loss cpu ' "$f" | tail -n 50
skipped=$(find "$logs" -name test.log -newermt "@$start" 2>/dev/null -exec grep -h -c -E '^\[  SKIPPED \] .*(MatchesCpu|Gpu|Cuda|Steps|Answers)' {} + |
          awk '{s += $1} END {print s + 0}')
echo "== gpu_check: exit $rc after $(( $(date +%s) - start ))s; GPU test cases skipped: $skipped"
if grep -q -h -E 'no CUDA device|no GPU' $(find "$logs" -name test.log -newermt "@$start" 2>/dev/null) 2>/dev/null; then
  echo "== gpu_check: NO CUDA DEVICE - the GPU tests skipped; nothing was verified on a GPU"
  exit 1
fi
[ "$rc" -eq 0 ] && exit 0 || exit 1
