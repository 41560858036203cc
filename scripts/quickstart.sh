#!/usr/bin/env bash
# The README's first command: installs what a fresh Debian machine lacks, builds apexc and
# apexrun, compiles the bundled MLP example at -O2 (fp16 compute, fp32 master weights,
# dynamic loss scaling) and trains it on the CPU.
#   bash scripts/quickstart.sh [EXAMPLE] [STEPS]     (EXAMPLE: mlp | cnn | transformer)
set -euo pipefail
cd "$(dirname "$0")/.."
example=${1:-mlp}
steps=${2:-200}
[ -d "examples/$example" ] || { echo "quickstart: no example '$example' (mlp, cnn, transformer)" >&2; exit 2; }
bash scripts/setup.sh
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build --noshow_progress //:apexc //:apexrun 2>&1 | grep -v '^INFO\|^Loading\|^Analyzing' || true
bin=$("${BAZEL[@]}" info bazel-bin 2>/dev/null)
out=${TMPDIR:-/tmp}/apexc-quickstart
mkdir -p "$out"
lr=()
[ "$example" = cnn ] && lr=(--lr 0.01)
echo "== apexc examples/$example/model.onnx -O2 -o $out/$example.apx"
"$bin/compiler/apexc" "examples/$example/model.onnx" -O2 "${lr[@]}" -o "$out/$example.apx"
echo "== apexrun $out/$example.apx --data examples/$example/data --steps $steps"
"$bin/runtime/apexrun" "$out/$example.apx" --data "examples/$example/data" --steps "$steps" \
  --log "$out/$example.jsonl"
echo "== per-step log: $out/$example.jsonl"
