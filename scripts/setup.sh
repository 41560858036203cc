#!/usr/bin/env bash
# Installs everything apexc needs to build and test on a fresh Debian 12 machine (as root,
# or with sudo): Bazel, compilers' libraries, ONNX schema and node tests, OpenBLAS, OpenMPI,
# Graphviz (renders --explain=dot in a test), and the Python test oracles (onnx,
# onnxruntime, numpy, tensorboard: scripts/requirements.txt) in the project venv .venv/
# (git-ignored). Nothing is pip-installed into the system python (Debian 12 refuses that:
# "externally-managed-environment"); tests and scripts find the venv through scripts/py.
# APEXC_VENV=DIR puts the venv elsewhere (then export APEXC_PYTHON=DIR/bin/python).
# Idempotent; quiet unless it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="bazel-bootstrap libgtest-dev protobuf-c-compiler libprotobuf-c-dev libonnx-dev
      libonnx-testdata libopenblas-dev libopenmpi-dev openmpi-bin clang libomp-dev libclang-rt-dev graphviz
      python3 python3-venv"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

venv=${APEXC_VENV:-.venv}
req=scripts/requirements.txt
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the Python venv $venv (test oracles only)" >&2
  python3 -m venv "$venv"
fi
# installed once per requirements file: the stamp is a copy of the file it installed
if ! cmp -s "$req" "$venv/.apexc-requirements"; then
  echo "setup: installing the Python test oracles into $venv ($(grep -v '^#' "$req" | tr '\n' ' '))" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >/dev/null
  cp "$req" "$venv/.apexc-requirements"
fi
# cuobjdump (register counts of the built CUDA objects: //kernels/cuda:objects_test); the
# toolkit here comes without it
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v cuobjdump >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
   ! "$venv/bin/python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["purelib"] + "/nvidia/cu13/bin/cuobjdump"))' 2>/dev/null; then
  echo "setup: installing cuobjdump (nvidia-cuda-cuobjdump) into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump>=13.2,<14" >/dev/null
fi
