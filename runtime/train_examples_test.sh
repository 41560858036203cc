#!/usr/bin/env bash
# CI version of scripts/train_examples.sh: each example at O0, O1, O2 and O2+bf16 for 30
# steps; the final loss of every mixed-precision level within 2% of O0's.
set -euo pipefail
APEXC=compiler/apexc APEXRUN=runtime/apexrun exec bash scripts/train_examples.sh --steps 30 --tol 0.02 --threads 1
