#!/usr/bin/env bash
# Installs everything apexc needs to build and test on a fresh Debian 12 machine (as root,
# or with sudo): Bazel, compilers' libraries, ONNX schema and node tests, OpenBLAS, OpenMPI,
# and the Python test oracles (onnx, onnxruntime, numpy). Idempotent; quiet unless it fails.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="bazel-bootstrap libgtest-dev protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      libonnx-testdata libopenblas-dev libopenmpi-dev openmpi-bin clang libomp-dev
      libclang-rt-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if ! python3 -c 'import onnx, onnxruntime, numpy' >/dev/null 2>&1; then
  echo "setup: installing Python test oracles (onnx, onnxruntime, numpy)" >&2
  python3 -m pip install -q --disable-pip-version-check onnx onnxruntime numpy >/dev/null
fi
