#!/usr/bin/env bash
# Compile benchmark (issue 12): full `apexc MODEL -O2 -o PLAN` compiles of generated
# MatMul+Add+Relu chains (10k, 30k, 100k, 300k nodes) and of a GPT-2-124M-shaped model, with
# onnxruntime building an inference session of the same forward model in the same run:
# median seconds (wall and CPU), peak RSS, plan bytes, apexc/ort ratios, the growth exponent
# over the chain sizes, the GPT-2 plan against its parameter payload, and --time-passes of the
# 100k chain (scripts/bench/bench_compile.py says how it measures).
# Usage: scripts/bench_compile.sh [--runs 3] [--sizes 10000,30000,100000,300000] [--no-gpt2]
#                                 [--no-ort] [--dir DIR] [--opt -O2]
# Environment: BAZEL (the bazel command), PYTHON (a python with onnx, numpy, onnxruntime;
# default scripts/py, the project venv).
# Models and plans go to DIR (default: a new folder in /dev/shm, ~3 GB with GPT-2).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BAZEL <<< "${BAZEL:-bazel}"
"${BAZEL[@]}" build -c opt --noshow_progress //compiler:apexc >&2
BIN=$("${BAZEL[@]}" info -c opt bazel-bin 2>/dev/null)
exec "${PYTHON:-scripts/py}" scripts/bench/bench_compile.py "$BIN/compiler/apexc" "$@"
