#!/usr/bin/env bash
# run.sh - the device kit's runner (docs/cuda.md "Device kit"): every GPU check in one
# bounded call on a lent GPU machine, from the bundle scripts/gpu/bundle.sh built (carried as
# .gpu_bundle). Needs only the NVIDIA driver and the CUDA libraries there (found at run time;
# PyTorch's nvidia-* Python packages are searched). Results are files under $OUT.
#
#   bash scripts/gpu/run.sh [--dry-run] [--bundle DIR] [--only STAGE[,STAGE]]
#
# Stages (time budget each; 540 s in all):
#   libs   60  driver, GPU, glibc, where cuBLASLt / cuDNN / NCCL are and their versions
#   lab   150  every kernel-lab family against the CPU reference in fp32, fp16, bf16 at every
#              block size, and the cuda backend's tests
#   node   85  the ONNX node tests on cuda against cpu
#   train  90  20 steps cpu vs cuda at O2 fp16, O2 bf16 and O1 (mlp, cnn, transformer): loss
#              difference per model and level
#   graph  30  20 steps on cuda with and without apexrun --cuda-graph (mlp, transformer, the
#              Dropout model; O2): the logged losses, scales and norms must match bit for bit
#   gpt2   95  a GPT-2-124M-shaped training step on cuda: ms, tokens/s, achieved TFLOP/s; the
#              same model in PyTorch (AMP) when torch imports
#   nccl   30  nccl_check: the NCCL layer on this machine's GPUs (one rank per GPU)
# --dry-run runs each stage's host part on a CPU machine (the lab's and node tests' host
# checks, cpu training and the refusal of --device cuda, --cuda-graph's refusals, the tiny
# GPT-2 on cpu): CI runs it.
# Exit 0 when every stage passed, 1 otherwise; $OUT/summary.txt has one line per stage.
set -uo pipefail
cd "$(dirname "$0")/../.." 2>/dev/null || true
dry=0 bundle=.gpu_bundle only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --bundle) bundle="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -d "$bundle/bin" ] || { echo "run.sh: no bundle at $bundle (scripts/gpu/bundle.sh builds it)" >&2; exit 2; }
B=$(cd "$bundle" && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
work=$(mktemp -d)
summary="$OUT/summary.txt"
: > "$summary"
echo "run.sh: bundle $B, results in $OUT$( [ $dry = 1 ] && echo ', dry run')" | tee -a "$summary"
[ -f "$B/MANIFEST" ] && sed 's/^/  /' "$B/MANIFEST" | tee -a "$summary"

# CUDA libraries: PyTorch's nvidia-* packages (site-packages/nvidia/*/lib), then the toolkit
libdirs=""
for py in python3 python; do
  command -v $py >/dev/null 2>&1 || continue
  site=$($py -c 'import site, sysconfig; print(" ".join(site.getsitepackages() + [sysconfig.get_paths()["purelib"]]))' 2>/dev/null)
  for s in $site; do
    for d in "$s"/nvidia/*/lib "$s"/nvidia/cu13/lib "$s"/torch/lib; do [ -d "$d" ] && libdirs="$libdirs:$d"; done
  done
  break
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && libdirs="$libdirs:$d"; done
export APEXC_CUDA_LIBS="${libdirs#:}"
# the bundle's lib/ (OpenMPI's chain, built on Debian) is for the bundle's binaries only: the
# device's own python3 (torch) runs with the library path it came with
host_ld="${LD_LIBRARY_PATH:-}"
python3() { LD_LIBRARY_PATH="$host_ld" command python3 "$@"; }
export LD_LIBRARY_PATH="$B/lib:${APEXC_CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
# stage NAME BUDGET FUNCTION: runs FUNCTION under the budget, output to $OUT/NAME.txt
stage() {
  local name=$1 budget=$2 fn=$3
  want "$name" || return 0
  local t0=$(date +%s.%N)
  ( $fn ) > "$OUT/$name.txt" 2>&1 &
  local pid=$!
  # the guard's sleep must not outlive the stage: it would hold run.sh's output open (a caller
  # reading it to the end waited out the longest budget)
  ( trap 'kill $s 2>/dev/null; exit 0' TERM; sleep "$budget" & s=$!; wait $s
    kill -TERM -- -$pid 2>/dev/null || kill -TERM $pid 2>/dev/null ) >/dev/null 2>&1 &
  local guard=$!
  wait $pid; local rc=$?
  kill $guard 2>/dev/null; wait $guard 2>/dev/null
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  local verdict=PASS
  [ $rc -eq 0 ] || verdict="FAIL (exit $rc)"
  [ $rc -eq 143 ] && verdict="TIMEOUT (${budget}s)"
  [ $rc -eq 0 ] || status=1
  printf '%-6s %-22s %6ss  %s\n' "$name" "$verdict" "$dt" "$(grep -E '^RESULT' "$OUT/$name.txt" | tail -1 | cut -c8-)" | tee -a "$summary"
}

s_libs() {
  echo "== driver and GPU"
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader; nvidia-smi | head -4 | tail -1
  else echo "nvidia-smi: not found"; fi
  echo "== glibc: $(ldd --version 2>/dev/null | head -1)"
  echo "== APEXC_CUDA_LIBS=$APEXC_CUDA_LIBS"
  local missing=0
  for so in libcublasLt.so.13 libcublasLt.so.12 libcudnn.so.9 libnccl.so.2 libcudart.so.13 libcudart.so.12; do
    local hit=""
    for d in ${APEXC_CUDA_LIBS//:/ }; do [ -e "$d/$so" ] && { hit="$d/$so"; break; }; done
    echo "$so: ${hit:-not found}"
  done
  for lib in cublasLt cudnn nccl; do
    ls ${APEXC_CUDA_LIBS//:/\/lib$lib.so* } 2>/dev/null | head -3 | sed "s/^/  /"
  done
  if python3 -c 'import torch' 2>/dev/null; then
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-", "gpus", torch.cuda.device_count())'
  else echo "torch: does not import"; fi
  echo "== the bundle's binaries load (ldd)"
  for f in "$B"/bin/*; do ldd "$f" | grep -i "not found" && missing=1; done
  [ $missing = 0 ] || { echo "RESULT shared libraries missing (above)"; return 1; }
  echo "== the kernels' own view (cudaGetDeviceCount, libraries loaded through cudalibs)"
  "$B/bin/gpu_lab" --gtest_filter='CudaBackend*:*Refus*' --gtest_brief=1 2>&1 | tail -5
  if [ $dry = 1 ]; then echo "RESULT dry run: discovery done"; return 0; fi
  command -v nvidia-smi >/dev/null 2>&1 || { echo "RESULT no NVIDIA driver"; return 1; }
  local drv; drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  if [ "${drv%%.*}" -lt 580 ] 2>/dev/null; then
    echo "RESULT driver $drv supports CUDA < 13.0: this bundle (cudart 13, static) needs driver >= 580"; return 1
  fi
  echo "RESULT driver $drv"
}

s_lab() {
  if [ $dry = 1 ]; then
    "$B/bin/gpu_lab" --gtest_filter='*HostChecksPassWithoutAGpu*' --gtest_brief=1
  else
    APEXC_LAB_BENCH=0 "$B/bin/gpu_lab" --gtest_brief=1
  fi
  local rc=$?
  echo "RESULT $(grep -c '^lab ' "$OUT/lab.txt" 2>/dev/null || true) lab lines, gtest exit $rc"
  return $rc
}

s_node() {
  mkdir -p "$work/node" && tar -C "$work/node" -xzf "$B/data/onnx_node.tar.gz"
  APX_NODE_DIR="$work/node/node" "$B/bin/onnx_node_cuda_test" --gtest_brief=1
  local rc=$?
  echo "RESULT gtest exit $rc"
  return $rc
}

losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }

s_train() {
  local bad=0 cmp=""
  for model in mlp cnn transformer; do
    for lvl in "O2" "O2 --half=bf16" "O1"; do
      local tag="$model-$(echo $lvl | tr -d ' =-')" ex="$B/data/examples/$model"
      "$B/bin/apexc" "$ex/model.onnx" -$lvl -o "$work/$tag.apx" -q || { echo "$tag: apexc failed"; bad=1; continue; }
      "$B/bin/apexrun" "$work/$tag.apx" --data "$ex/data" --steps 20 --no-shuffle --threads 4 -q --log "$work/$tag.cpu.jsonl" || bad=1
      if "$B/bin/apexrun" "$work/$tag.apx" --data "$ex/data" --steps 20 --no-shuffle -q --device cuda --log "$work/$tag.cuda.jsonl"; then
        paste <(losses "$work/$tag.cpu.jsonl") <(losses "$work/$tag.cuda.jsonl") |
          awk -v t="$tag" '{d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1 + 1e-12); if (r > m) m = r; last = $0}
                           END {printf "%-24s 20 steps: last loss cpu %s cuda %s, max relative difference %.3g\n", t, substr(last, 1, index(last, "\t") - 1), substr(last, index(last, "\t") + 1), m; exit (m > 0.05)}' || bad=1
      elif [ $dry = 1 ]; then echo "$tag: cpu $(losses "$work/$tag.cpu.jsonl" | tail -1); cuda refused as expected without a GPU"
      else bad=1; fi
    done
  done
  echo "RESULT $( [ $bad = 0 ] && echo 'every model and level within 5%' || echo 'failures above')"
  return $bad
}

# a log without its "ms" field (the only one that differs between equal runs)
no_ms() { sed 's/"ms": *[^,}]*//' "$1"; }

s_graph() {
  local bad=0
  # refusals first (exit 2, before any device starts), the same answer on every machine
  "$B/bin/apexc" "$B/data/examples/mlp/model.onnx" -O2 --accumulate 2 -o "$work/graph-acc.apx" -q || bad=1
  local m
  m=$("$B/bin/apexrun" "$work/graph-acc.apx" --data "$B/data/examples/mlp/data" --steps 2 --device cuda --cuda-graph 2>&1)
  [ $? = 2 ] && [[ "$m" == *"not supported yet: --cuda-graph with gradient accumulation"* ]] ||
    { echo "accumulation not refused: $m"; bad=1; }
  m=$("$B/bin/apexrun" "$work/graph-acc.apx" --data "$B/data/examples/mlp/data" --steps 2 --cuda-graph 2>&1)
  [ $? = 2 ] && [[ "$m" == *"not supported yet: --cuda-graph with --device cpu"* ]] ||
    { echo "cpu not refused: $m"; bad=1; }
  echo "refusals: $( [ $bad = 0 ] && echo ok || echo FAILED)"
  for model in mlp transformer dropout; do
    local ex="$B/data/examples/$model" tag="graph-$model"
    [ $model = dropout ] && ex="$B/data/dropout"
    "$B/bin/apexc" "$ex/model.onnx" -O2 -o "$work/$tag.apx" -q || { echo "$tag: apexc failed"; bad=1; continue; }
    local run=("$B/bin/apexrun" "$work/$tag.apx" --data "$ex/data" --steps 20 --no-shuffle -q --device cuda)
    if [ $dry = 1 ]; then
      m=$("${run[@]}" --cuda-graph 2>&1)
      [ $? = 1 ] && [[ "$m" == *"no CUDA device found"* ]] || { echo "$tag: expected 'no CUDA device found': $m"; bad=1; continue; }
      echo "$tag: --cuda-graph reached the backend (no GPU)"
      continue
    fi
    "${run[@]}" --log "$work/$tag.eager.jsonl" || { echo "$tag: uncaptured run failed"; bad=1; continue; }
    "${run[@]}" --cuda-graph --log "$work/$tag.graph.jsonl" || { echo "$tag: --cuda-graph run failed"; bad=1; continue; }
    if cmp -s <(no_ms "$work/$tag.eager.jsonl") <(no_ms "$work/$tag.graph.jsonl"); then
      echo "$tag: 20 steps, captured = uncaptured bit for bit (last loss $(losses "$work/$tag.graph.jsonl" | tail -1))"
    else
      echo "$tag: captured and uncaptured steps differ:"; diff <(no_ms "$work/$tag.eager.jsonl") <(no_ms "$work/$tag.graph.jsonl") | head -6
      bad=1
    fi
    # the step time after the first two (uncaptured, capture), median
    for k in eager graph; do
      printf '%s %s: median ms/step %s\n' "$tag" "$k" "$(sed -n 's/.*"ms": *\([0-9.e+-]*\).*/\1/p' "$work/$tag.$k.jsonl" | tail -n +3 | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}')"
    done
  done
  echo "RESULT $( [ $bad = 0 ] && { [ $dry = 1 ] && echo 'dry run: refusals and backend reached' || echo 'captured = uncaptured, every model'; } || echo 'failures above')"
  return $bad
}

s_gpt2() {
  local g="$work/gpt2" dev=cuda steps=6
  mkdir -p "$g"
  if [ $dry = 1 ]; then cp -r "$B/data/gpt2_tiny/." "$g/"; dev=cpu; steps=2
  else cp -r "$B/data/gpt2/." "$g/" && gunzip "$g/model.onnx.gz"; fi
  cat "$g/shape.json"
  local t0=$(date +%s.%N)
  "$B/bin/apexc" "$g/model.onnx" -O2 -o "$g/gpt2.apx" -q || { echo "RESULT apexc failed"; return 1; }
  echo "apexc: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
  "$B/bin/apexrun" "$g/gpt2.apx" --data "$g/data" --steps $steps --no-shuffle -q --device $dev --log "$g/log.jsonl" || { echo "RESULT apexrun failed"; return 1; }
  cat "$g/log.jsonl"
  python3 - "$g/shape.json" "$g/log.jsonl" "$dev" <<'PY' || awk 'END {print "RESULT (python3 missing: see the log above)"}' /dev/null
import json, sys
s = json.load(open(sys.argv[1]))
ms = sorted(json.loads(l)["ms"] for l in open(sys.argv[2]).readlines()[1:])
m = ms[len(ms) // 2]
print("RESULT apexc O2 fp16 on %s: %.2f ms/step (median of %d after the first), %.0f tokens/s, %.2f TFLOP/s (%.3g FLOP/step)"
      % (sys.argv[3], m, len(ms), s["tokens_per_step"] / (m / 1e3), s["flops_per_step"] / (m / 1e3) / 1e12, s["flops_per_step"]))
PY
  if [ $dry = 0 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    python3 "$B/torch_gpt2.py" "$g/shape.json" || echo "torch run failed"
  fi
}

s_nccl() {
  if [ $dry = 1 ]; then
    "$B/bin/nccl_check"; local rc=$?
    echo "RESULT dry run: nccl_check exit $rc (1 = no CUDA device, expected)"
    [ $rc = 1 ]; return
  fi
  "$B/bin/nccl_check"; local rc=$?
  echo "RESULT one rank: exit $rc"
  return $rc
}

stage libs 60 s_libs
stage lab 150 s_lab
stage node 85 s_node
stage train 90 s_train
stage graph 30 s_graph
stage gpt2 95 s_gpt2
stage nccl 30 s_nccl
rm -rf "$work"
echo "run.sh: exit $status" | tee -a "$summary"
exit $status
