#!/usr/bin/env bash
# The crafted-plan corpus (make_bad_plans.c: plans with a valid checksum whose metadata breaks
# what running them needs) through the apexrun binary: each exits with the manifest's code
# (2), exactly one line on stderr, starting with the file's path and containing the expected
# substring; the unedited re-encoding trains a step (exit 0). Run under --config=asan too: a
# sanitizer report would change the exit code and add lines.
#   bad_plans_cli_test.sh APEXC APEXRUN MAKE_BAD_PLANS MODEL.onnx   (data: MODEL's folder/data)
set -u
apexc="$1" apexrun="$2" make_bad="$3" model="$4"
data="$(dirname "$model")/data"
dir="${TEST_TMPDIR:-$(mktemp -d)}/bad_plans"
mkdir -p "$dir"
if ! err=$("$apexc" "$model" -O2 -o "$dir/good.apx" 2>&1 >/dev/null); then
  echo "FAIL: apexc: $err"; exit 1
fi
"$make_bad" "$dir/good.apx" "$dir" || { echo "FAIL: make_bad_plans"; exit 1; }
pass=0 fail=0
while IFS=$'\t' read -r file want expected; do
  [ "$file" = file ] && continue
  path="$dir/$file"
  err=$(APX_NO_REEXEC=1 "$apexrun" "$path" --data "$data" --steps 1 --quiet 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $file: exit $rc (want $want): $err"; fail=$((fail + 1))
  elif [ "$want" -eq 0 ]; then
    pass=$((pass + 1))
  elif [ "$lines" -ne 1 ]; then
    echo "FAIL $file: $lines lines on stderr (want 1): $err"; fail=$((fail + 1))
  elif [[ "$err" != "$path"* ]]; then
    echo "FAIL $file: message does not start with the path: $err"; fail=$((fail + 1))
  elif [[ "$err" != *"$expected"* ]]; then
    echo "FAIL $file: message lacks '$expected': $err"; fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done < "$dir/MANIFEST.tsv"
echo "crafted plans through apexrun: $pass passed, $fail failed"
[ "$pass" -gt 0 ] && [ "$fail" -eq 0 ]
