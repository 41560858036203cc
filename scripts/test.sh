#!/usr/bin/env bash
# The README's test command: installs what is missing (scripts/setup.sh), then runs every
# test (scripts/run_tests.sh). The last line printed is "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || { echo "setup failed" >&2; echo "0 passed, 1 failed"; exit 1; }
exec bash scripts/run_tests.sh
