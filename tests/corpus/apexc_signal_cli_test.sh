#!/usr/bin/env bash
# An apexc compile stopped by SIGINT, SIGTERM or SIGHUP while it runs leaves nothing behind:
# the plan's temporary file (PLAN.tmp.PID, created before the model is loaded: plan/plan_write.h
# apx_plan_prepare_output) is removed, a plan already at the path keeps its bytes, and the
# process dies of the signal (exit status 128 + N). The model is a 30k-node chain
# (tests/bench/make_big_graph.py), long enough to compile that the signal, sent as soon as the
# temporary file appears, lands before the plan is written; a run that finished first counts
# as a failure of the test's timing and is said so. A parent that ignores the signal is left
# alone: apexc then compiles to the end (only a default disposition gets the cleanup).
set -u
export PYTHONDONTWRITEBYTECODE=1
apexc="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}/signal"
rm -rf "$dir" && mkdir -p "$dir"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
scripts/py tests/bench/make_big_graph.py "$dir/chain.onnx" --chain 30000 >/dev/null ||
  { echo "FAIL: fixture"; exit 1; }

# compile_then_signal PLAN SIG: starts apexc on the chain, sends SIG as soon as PLAN.tmp.PID
# exists; echoes the exit status (or "finished" when the plan was written before the signal)
compile_then_signal() {
  local plan=$1 sig=$2
  # (a shell without job control starts background jobs with SIGINT ignored: reset it)
  env --default-signal=INT "$apexc" "$dir/chain.onnx" -O2 -q -o "$plan" 2>"$dir/err" &
  local pid=$! i
  for ((i = 0; i < 2000; i++)); do
    [ -e "$plan.tmp.$pid" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  kill "-$sig" "$pid" 2>/dev/null
  wait "$pid"
  echo $?
}

for sig in INT TERM HUP; do
  num=$(kill -l "$sig")
  # no plan at the path before: none after, no temporary left
  rc=$(compile_then_signal "$dir/fresh_$sig.apx" "$sig")
  if [ "$rc" = 0 ]; then
    bad "SIG$sig: the compile finished before the signal (the test's timing; rerun)"
  else
    [ "$rc" -eq $((128 + num)) ] && ok || bad "SIG$sig: exit $rc, expected $((128 + num)): $(cat "$dir/err")"
    [ ! -e "$dir/fresh_$sig.apx" ] && ok || bad "SIG$sig: a plan was left at the path"
  fi
  left=$(ls "$dir" | grep -c "^fresh_$sig.apx.tmp." || true)
  [ "$left" -eq 0 ] && ok || bad "SIG$sig: temporary file left: $(ls "$dir")"

  # a plan already there keeps its bytes
  printf 'old plan bytes' >"$dir/old_$sig.apx"
  rc=$(compile_then_signal "$dir/old_$sig.apx" "$sig")
  [ "$rc" != 0 ] && ok || bad "SIG$sig: the compile over an old plan finished before the signal"
  [ "$(cat "$dir/old_$sig.apx")" = "old plan bytes" ] && ok || bad "SIG$sig: the old plan changed"
  left=$(ls "$dir" | grep -c "^old_$sig.apx.tmp." || true)
  [ "$left" -eq 0 ] && ok || bad "SIG$sig: temporary file left over the old plan: $(ls "$dir")"
done

# an ignored SIGTERM (inherited SIG_IGN) is not taken over: the compile ends and writes its plan
(trap '' TERM; rc=$(compile_then_signal "$dir/ignored.apx" TERM); echo "$rc" >"$dir/ignored_rc")
[ "$(cat "$dir/ignored_rc")" = 0 ] && ok || bad "ignored SIGTERM: exit $(cat "$dir/ignored_rc")"
[ -s "$dir/ignored.apx" ] && ok || bad "ignored SIGTERM: no plan written"
[ "$(ls "$dir" | grep -c '\.tmp\.')" -eq 0 ] && ok || bad "temporary files left: $(ls "$dir")"

echo "apexc_signal_cli_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
