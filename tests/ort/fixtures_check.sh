#!/usr/bin/env bash
# The committed onnxruntime fixtures still match the examples (sh_test).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec scripts/py tests/ort/record_fixtures.py --check --examples examples --out tests/fixtures/ort
