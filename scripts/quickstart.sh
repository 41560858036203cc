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
out=${TMPDIR:-/tmp}/apexc-quickstart
mkdir -p "$out"
# a failed build stops here with the build's own error (and its exit code)
echo "== bazel build //:apexc //:apexrun"
rc=0
"${BAZEL[@]}" build --noshow_progress //:apexc //:apexrun >"$out/build.log" 2>&1 || rc=$?
grep -v '^INFO: \|^Loading\|^Analyzing\|^Target \|^  bazel-bin/' "$out/build.log" >&2 || true
if [ "$rc" -ne 0 ]; then
  echo "quickstart: the build failed (exit $rc; whole log: $out/build.log)" >&2
  exit "$rc"
fi
bin=$("${BAZEL[@]}" info bazel-bin 2>/dev/null)
for b in compiler/apexc runtime/apexrun; do
  [ -x "$bin/$b" ] || { echo "quickstart: the build reported success but $bin/$b is missing" >&2; exit 1; }
done
lr=()
[ "$example" = cnn ] && lr=(--lr 0.01)
echo "== apexc examples/$example/model.onnx -O2 -o $out/$example.apx"
"$bin/compiler/apexc" "examples/$example/model.onnx" -O2 "${lr[@]}" -o "$out/$example.apx"
echo "== apexrun $out/$example.apx --data examples/$example/data --steps $steps"
"$bin/runtime/apexrun" "$out/$example.apx" --data "examples/$example/data" --steps "$steps" \
  --log "$out/$example.jsonl"
echo "== per-step log: $out/$example.jsonl"
