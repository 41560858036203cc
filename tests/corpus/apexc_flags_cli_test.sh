#!/usr/bin/env bash
# apexc end to end on the MLP example: dynamic-scaler flags with a static loss scale compile
# (exit 0) with one warning line on stderr, none with -q; an output path that cannot be
# written (missing folder, directory; a FIFO where the plan goes) exits 2 with one line,
# before compiling; --emit-onnx/--explain-out into a pipe work.
set -u
apexc="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}/flags"
mkdir -p "$dir" && cp -L "$2" "$dir/model.onnx"
model="$dir/model.onnx"
pass=0 fail=0
# check WANT_RC WANT_STDERR ARGS...: exit code and the whole of stderr
check() {
  local want_rc="$1" want_err="$2"; shift 2
  local err rc
  err=$(timeout 20 "$apexc" "$@" 2>&1 >/dev/null)  # a blocked open fails, not hangs
  rc=$?
  if [ "$rc" -ne "$want_rc" ] || [ "$err" != "$want_err" ]; then
    echo "FAIL apexc $*: exit $rc (want $want_rc), stderr '$err' (want '$want_err')"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
}
nl=$'\n'
check 0 "warning: --max-loss-scale has no effect with a static loss scale (128)${nl}wrote $dir/a.apx" \
  "$model" -O2 --loss-scale=128 --max-loss-scale 65536 -o "$dir/a.apx"
check 0 "warning: --min-loss-scale has no effect with a static loss scale (1)${nl}wrote $dir/b.apx" \
  "$model" -O0 --min-loss-scale 1 -o "$dir/b.apx"
check 0 "warning: --max-loss-scale has no effect with a static loss scale (1)${nl}wrote $dir/c.apx" \
  "$model" -O2 --half=bf16 --max-loss-scale 1024 -o "$dir/c.apx"
check 0 "" "$model" -O2 --half=bf16 --max-loss-scale 1024 -o "$dir/d.apx" -q
[ -s "$dir/d.apx" ] || { echo "FAIL: -q run wrote no plan"; fail=$((fail + 1)); }
mkdir -p "$dir/out" && mkfifo "$dir/fifo"
for flag in -o --emit-onnx --explain-out; do
  extra=()
  [ "$flag" = --explain-out ] && extra=(--explain)
  check 2 "$dir/nonexist/d/p: cannot write: No such file or directory" \
    "$model" "${extra[@]}" "$flag" "$dir/nonexist/d/p"
  check 2 "$dir/out: cannot write: Is a directory" "$model" "${extra[@]}" "$flag" "$dir/out"
done
# the plan is replaced by rename: a FIFO there is refused; --emit-onnx and --explain-out open
# the path themselves, so a pipe with a reader works
check 2 "$dir/fifo: cannot write: not a regular file (a FIFO)" "$model" -o "$dir/fifo"
for flag in --emit-onnx --explain-out; do
  extra=(-o "$dir/p.apx")
  # --explain=json: written in one open (text --explain appends its fusion and bucket
  # sections by reopening the path, which a reader that stops at the first EOF misses)
  [ "$flag" = --explain-out ] && extra+=(--explain=json)
  timeout 30 cat "$dir/fifo" > "$dir/piped" &
  reader=$!
  check 0 "" "$model" -q "${extra[@]}" "$flag" "$dir/fifo"
  wait "$reader"
  [ -s "$dir/piped" ] || { echo "FAIL: $flag into a pipe: nothing came through"; fail=$((fail + 1)); }
  [ -p "$dir/fifo" ] || { echo "FAIL: $flag replaced the FIFO"; fail=$((fail + 1)); }
done
left=$(ls -A "$dir/out")
[ -z "$left" ] || { echo "FAIL: files left in a refused directory: $left"; fail=$((fail + 1)); }
echo "apexc flags and outputs: $pass passed, $fail failed"
[ "$pass" -gt 0 ] && [ "$fail" -eq 0 ]
