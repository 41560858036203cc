#!/usr/bin/env bash
# apexc --time-passes on the MLP example: one well-formed line per stage on stderr (load,
# every pass that ran, emit_plan, the memory packing that ran on a thread beside it, write_plan)
# in pipeline order, then a total line; values are
# not checked (they are timings), only that each is a number with its unit. Also with -q;
# nothing without the flag; a disabled pass has no line; --help documents the flag.
set -u
apexc="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}/time_passes"
mkdir -p "$dir" && cp -L "$2" "$dir/model.onnx"
model="$dir/model.onnx"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
line_re='^time-passes  [a-z_]+ +[0-9]+\.[0-9]{3} s  cpu +[0-9]+\.[0-9]{3} s  peak +[0-9]+\.[0-9] MiB( +\+[0-9]+\.[0-9] MiB)?$'
aside_re='^time-passes  memplan_pack +[0-9]+\.[0-9]{3} s  cpu +[0-9]+\.[0-9]{3} s  \(a thread beside emit_plan\)$'

err=$("$apexc" "$model" -O2 --time-passes -q -o "$dir/a.apx" 2>&1 >/dev/null)
rc=$?
[ "$rc" -eq 0 ] && ok || bad "exit $rc: $err"
[ -s "$dir/a.apx" ] && ok || bad "no plan written"
n=0
while IFS= read -r l; do
  n=$((n + 1))
  [[ "$l" =~ $line_re || "$l" =~ $aside_re ]] && ok || bad "malformed line '$l'"
done <<< "$err"
stages=$(awk '{print $2}' <<< "$err" | tr '\n' ' ')
want="load fold_constants split_sequences infer_shapes autodiff optimizer overflow_check precision cast_insert cast_cleanup inspect sync_bn master_weights fuse_xentropy fuse_softmax fuse_layernorm fuse_dense fuse_bn_relu fuse_conv fuse_casts bucketing memplan emit_plan memplan_pack write_plan total "
[ "$stages" = "$want" ] && ok || bad "stages '$stages', want '$want'"
# the stage lines carry the added memory, the total and the thread's line do not
[ "$(grep -c ' MiB  *+' <<< "$err")" -eq $((n - 2)) ] && ok || bad "'+' column on every stage line"
grep -q '^time-passes  total ' <<< "$(tail -n 1 <<< "$err")" && ok || bad "total is not the last line"

# without -q: the same lines around the usual output
err=$("$apexc" "$model" -O1 --time-passes -o "$dir/b.apx" 2>&1 >/dev/null)
[ "$(grep -c '^time-passes  ' <<< "$err")" -eq 26 ] && ok || bad "with the summary: $err"
grep -q "^wrote $dir/b.apx$" <<< "$err" && ok || bad "wrote line missing: $err"

# a disabled pass has no line; without the flag there are none
err=$("$apexc" "$model" -O2 --time-passes --disable-pass=fuse_dense -q -o "$dir/c.apx" 2>&1 >/dev/null)
grep -q '^time-passes  fuse_dense ' <<< "$err" && bad "disabled pass timed" || ok
grep -q '^time-passes  memplan ' <<< "$err" && ok || bad "memplan line missing"
err=$("$apexc" "$model" -O2 -q -o "$dir/d.apx" 2>&1 >/dev/null)
[ -z "$err" ] && ok || bad "lines without --time-passes: $err"

# an inspection run writes no plan: no emit/write lines, still a total
err=$("$apexc" "$model" -O2 --time-passes --explain --explain-out "$dir/e.txt" 2>&1 >/dev/null)
grep -q 'write_plan' <<< "$err" && bad "write_plan without a plan" || ok
grep -q '^time-passes  total ' <<< "$err" && ok || bad "no total on an inspection run: $err"

"$apexc" --help | grep -q -- '--time-passes' && ok || bad "--help does not document --time-passes"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
