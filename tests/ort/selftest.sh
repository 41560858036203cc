#!/usr/bin/env bash
# Runs tests/ort/selftest.py under Bazel (sh_test): the onnxruntime cross-check harness
# must pass correct half-precision models and fail broken ones.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec scripts/py tests/ort/selftest.py examples
