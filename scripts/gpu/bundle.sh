#!/usr/bin/env bash
# bundle.sh - builds the device kit on this (CPU) machine: .gpu_bundle/ holds everything
# scripts/gpu/run.sh needs on a lent GPU machine that has the NVIDIA driver, CUDA, PyTorch and
# no Bazel, build packages or package registry (docs/cuda.md "Device kit").
#
#   scripts/gpu/bundle.sh [--out DIR]      (default .gpu_bundle, git-ignored; <= 64 MiB)
#
# Binary: bin/apexkit, one multi-call executable (kit_main.cc) holding apexc, apexrun, gpu_lab
# (every kernel-lab family + the cuda backend tests), onnx_node_cuda_test and nccl_check, with
# a two-line script per tool beside it (kit_bin.sh); linked with libstdc++/libgcc and the host
# libraries (protobuf-c, OpenBLAS + gfortran, gomp, gtest) static, cudart static, the kernels
# as sm_90 SASS + compute_90 PTX only (the H200), symbols stripped (docs/cuda.md); glibc dynamic. cuBLASLt, cuDNN and NCCL are found at run time (kernels/cuda/cudalibs.h).
# OpenMPI has no static library in Debian: its shared libraries (only loaded, MPI is never
# initialized in one process) go to lib/. Data: the examples, the ONNX node tests (tar.gz), a
# GPT-2-124M-shaped model (gzip; make_gpt2.py) and a tiny one for the dry run.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu_bundle
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "bundle.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)
static=$(mktemp -d)
trap 'rm -rf "$static"' EXIT
ml=/usr/lib/x86_64-linux-gnu gl=$(dirname "$(gcc -print-libgcc-file-name)")
# libstdc++.a too: Bazel's link line names -lstdc++ itself, which -static-libstdc++ leaves shared
for a in $ml/libprotobuf-c.a $ml/libopenblas.a $ml/libgtest.a $ml/libgtest_main.a $gl/libgfortran.a \
         $gl/libquadmath.a $gl/libgomp.a $gl/libstdc++.a; do
  [ -f "$a" ] || { echo "bundle.sh: missing static library $a" >&2; exit 1; }
  ln -s "$a" "$static/"
done
# -L first: ld takes the first folder holding the library, and this one holds only archives
bazel build --define=apx_gpu_archs=sm_90 --linkopt=-L"$static" --linkopt=-static-libstdc++ \
  --linkopt=-static-libgcc --linkopt=-lgfortran --linkopt=-lquadmath //scripts/gpu:apexkit
bin=$(bazel info bazel-bin 2>/dev/null)
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
cp "$bin/scripts/gpu/apexkit" "$out/bin/"
chmod u+w "$out/bin/apexkit"
strip --strip-all "$out/bin/apexkit"
bash scripts/gpu/kit_bin.sh "$out/bin"
# shared libraries still needed (OpenMPI's chain), glibc and the driver aside
for f in "$out"/bin/apexkit; do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda)\.so' | while read -r lib; do
  cp -L "$lib" "$out/lib/"
done
cp -r examples "$out/data/examples"
find "$out/data/examples" -name '*.py' -delete
scripts/py runtime/testdata/make_dropout_model.py "$out/data/dropout" >/dev/null # run.sh's graph stage
tar -C /usr/share/libonnx-testdata/data -czf "$out/data/onnx_node.tar.gz" node
cp scripts/gpu/run.sh scripts/gpu/torch_gpt2.py "$out/"
mkdir -p "$out/data/gpt2_tiny"
scripts/py scripts/gpu/make_gpt2.py "$out/data/gpt2_tiny" --layers 2 --d 64 --heads 4 --vocab 256 --seq 32 --batch 4 \
  > "$out/data/gpt2_tiny/shape.json"
g=$(mktemp -d)
scripts/py scripts/gpu/make_gpt2.py "$g" > "$g/shape.json"
mkdir -p "$out/data/gpt2"
gzip -9 -c "$g/model.onnx" > "$out/data/gpt2/model.onnx.gz"
cp -r "$g/data" "$g/shape.json" "$out/data/gpt2/"
rm -rf "$g"
glibc=$(for f in "$out"/bin/* "$out"/lib/*; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
{
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
  echo "nvcc $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_90 compute_90, cudart static"
  echo "needs: glibc >= ${glibc#GLIBC_}, an NVIDIA driver for CUDA >= 13.0 (>= 580), libcublasLt.so.13/.12, libcudnn.so.9, libnccl.so.2"
} > "$out/MANIFEST"
bytes=$(du -sb "$out" | cut -f1) size=$(du -sb "$out" | awk '{printf "%.1f", $1 / 1048576}')
echo "bundle.sh: $out: ${size} MiB ($bytes bytes) in $(( $(date +%s) - t0 )) s"; cat "$out/MANIFEST"
[ "$bytes" -le $((64 * 1048576)) ] || { echo "bundle.sh: $out is ${size} MiB, over the 64 MiB the device tool carries" >&2; exit 1; }
