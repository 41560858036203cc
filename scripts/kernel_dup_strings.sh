#!/usr/bin/env bash
# kernel_dup_strings.sh - string literals written in both kernels/cpu and kernels/cuda
# production sources (comments, #include lines and extern "C" stripped; tests and test helpers
# left out). Argument checks belong in kernels/validate.c, once for every backend (issue 10):
# prints each duplicated literal and the count; exits 1 when there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
lits() {
  perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$@" | grep -v '^\s*#\s*include' |
    grep -v 'extern "C"' | grep -oE '"([^"\\]|\\.)+"' | sort -u
}
dups=$(comm -12 <(lits $(ls kernels/cpu/*.c kernels/cpu/*.h kernels/cpu/*.inc | grep -v test_util)) \
                <(lits kernels/cuda/*.cu kernels/cuda/*.cuh kernels/cuda/*.c kernels/cuda/*.h))
[ -n "$dups" ] && printf '%s\n' "$dups"
n=$(printf '%s' "$dups" | grep -c . || true)
echo "kernel_dup_strings: $n string literals in both kernels/cpu and kernels/cuda"
[ "$n" -eq 0 ]
