#!/usr/bin/env bash
# Every file of the bad-input corpus, through the apexc binary (all stages: load and
# inference): exit code 2, exactly one line on stderr, starting with the file's path and
# containing the manifest's expected substring. Run under --config=asan too: a sanitizer
# report would change the exit code and add lines.
set -u
apexc="$1"
# Runfiles are symlinks into the source tree, which external-data checks (rightly) treat as
# escaping the model's folder: work on a real copy.
dir="${TEST_TMPDIR:-$(mktemp -d)}/bad"
mkdir -p "$dir" && cp -L "$(dirname "$2")"/* "$dir"/
pass=0 fail=0
while IFS=$'\t' read -r file stage expected; do
  [ "$file" = file ] && continue
  path="$dir/$file"
  err=$("$apexc" "$path" -O2 -o "$dir/../bad.apx" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne 2 ]; then
    echo "FAIL $file: exit $rc (want 2): $err"; fail=$((fail + 1))
  elif [ "$lines" -ne 1 ]; then
    echo "FAIL $file: $lines lines on stderr (want 1): $err"; fail=$((fail + 1))
  elif [[ "$err" != "$path"* ]]; then
    echo "FAIL $file: message does not start with the path: $err"; fail=$((fail + 1))
  elif [[ "$err" != *"$expected"* ]]; then
    echo "FAIL $file: message lacks '$expected': $err"; fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done < "$2"
echo "bad-input corpus through apexc: $pass passed, $fail failed"
[ "$pass" -gt 0 ] && [ "$fail" -eq 0 ]
