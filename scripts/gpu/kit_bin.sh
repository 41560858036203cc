#!/usr/bin/env bash
# kit_bin.sh - writes the device kit's tool names into DIR (docs/cuda.md "Device kit"): one
# two-line script per tool that runs DIR/apexkit (the multi-call binary, //scripts/gpu:apexkit)
# with the tool's name first. Scripts, not links, so the folder survives any copy.
#
#   scripts/gpu/kit_bin.sh DIR        (DIR/apexkit must be there: a copy or a link)
set -euo pipefail
dir=${1:?usage: kit_bin.sh DIR}
[ -e "$dir/apexkit" ] || { echo "kit_bin.sh: no $dir/apexkit" >&2; exit 1; }
for tool in apexc apexrun nccl_check gpu_lab onnx_node_cuda_test; do
  printf '#!/bin/sh\nexec "$(dirname "$0")/apexkit" %s "$@"\n' "$tool" > "$dir/$tool"
  chmod +x "$dir/$tool"
done
