#!/usr/bin/env bash
# sh_test: `apexc --explain=dot` of every example renders with Graphviz (`dot -Tsvg`, Debian
# graphviz, installed by scripts/setup.sh), and the picture holds what it promises: every
# node of the text explanation, fill colours by decision (fp16 green, fp32 orange), the
# Casts apexc inserted marked, and the reasons as tooltips.
# Usage: explain_dot_test.sh APEXC
set -u
apexc="$1"
command -v dot >/dev/null || { echo "FAIL: no 'dot' on PATH (apt-get install graphviz; scripts/setup.sh does)"; exit 1; }
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail=0 n=0
for m in mlp cnn transformer; do
  for lvl in O1 O2; do
    n=$((n + 1))
    base="$tmp/$m-$lvl"
    if ! "$apexc" "examples/$m/model.onnx" "-$lvl" --explain=dot --explain-out "$base.dot" --quiet -o "$base.apx"; then
      echo "FAIL $m -$lvl: apexc --explain=dot failed"; fail=$((fail + 1)); continue
    fi
    if ! dot -Tsvg "$base.dot" -o "$base.svg" 2> "$base.err"; then
      echo "FAIL $m -$lvl: dot -Tsvg: $(head -3 "$base.err")"; fail=$((fail + 1)); continue
    fi
    problems=""
    grep -q '<svg' "$base.svg" || problems="$problems no <svg>;"
    grep -q '#8fd694' "$base.svg" || problems="$problems no fp16-green node;"
    grep -q '#f7b267' "$base.svg" || problems="$problems no fp32-orange node;"
    grep -q 'Cast fp32&#45;&gt;fp16\|Cast fp32-&gt;fp16' "$base.svg" || problems="$problems no inserted Cast marked;"
    grep -q 'default: O2 runs float ops in fp16\|list: fp16 (allow)' "$base.svg" || problems="$problems no reason tooltip;"
    # every row of the text explanation is a node of the picture
    rows=$("$apexc" "examples/$m/model.onnx" "-$lvl" --explain=json --quiet -o "$base.apx" |
           sed -n 's/^ *{"name": "\([^"]*\)".*/\1/p')
    missing=0
    for r in $rows; do grep -qF "<title>" "$base.svg" && grep -qF ">$r" "$base.svg" || missing=$((missing + 1)); done
    [ "$missing" -eq 0 ] || problems="$problems $missing explained node(s) missing from the svg;"
    if [ -n "$problems" ]; then echo "FAIL $m -$lvl:$problems"; fail=$((fail + 1)); else
      echo "ok   $m -$lvl: $(grep -c '<g id="node' "$base.svg") svg nodes, $(echo "$rows" | wc -w) rows"; fi
  done
done
echo "explain dot: $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
