#!/usr/bin/env bash
# Installs everything apexc needs to build and test on a fresh Debian 12 machine (as root,
# or with sudo): Bazel, compilers' libraries, ONNX schema and node tests, OpenBLAS, OpenMPI,
# and the Python test oracles (onnx, onnxruntime, numpy). Idempotent; quiet unless it fails.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="bazel-bootstrap libgtest-dev protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      libonnx-testdata libopenblas-dev libopenmpi-dev openmpi-bin clang"
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
# cuobjdump (register counts of the built CUDA objects: //kernels/cuda:objects_test); the
# toolkit here comes without it
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v cuobjdump >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
   ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["purelib"] + "/nvidia/cu13/bin/cuobjdump"))' 2>/dev/null; then
  echo "setup: installing cuobjdump (nvidia-cuda-cuobjdump)" >&2
  python3 -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump>=13.2,<14" >/dev/null
fi
