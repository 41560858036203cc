#!/usr/bin/env bash
# Runs tests/models/check_models.py under Bazel (sh_test): the reference PyTorch models
# through apexc ($1) and apexrun ($2), results checked against tests/models/expectations.tsv.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec scripts/py tests/models/check_models.py --apexc "$1" --apexrun "$2" --jobs 2
