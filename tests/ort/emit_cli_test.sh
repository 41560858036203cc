#!/usr/bin/env bash
# sh_test: `apexc --emit-onnx` as a user runs it (issue 13): one summary line on stderr, a
# model onnx.checker accepts with full_check (the CNN at --half=bf16: opset raised to 22 for
# its Conv and pooling), and every node's doc_string holding apexc's decision and reason
# (what Netron shows), consistent with --explain=json.
# Usage: emit_cli_test.sh APEXC
set -u
apexc="$1"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail=0
for half in fp16 bf16; do
  out="$tmp/cnn_$half.onnx"
  err=$("$apexc" examples/cnn/model.onnx -O2 --half=$half --emit-onnx "$out" --explain=json \
        --explain-out "$tmp/cnn_$half.json" -o "$tmp/cnn.apx" 2>&1 >/dev/null)
  rc=$?
  line=$(grep "^wrote $out:" <<< "$err")
  want_opset=$([ $half = bf16 ] && echo "ai.onnx opset 22 (raised from 17 for bfloat16)" || echo "ai.onnx opset 17,")
  if [ "$rc" -ne 0 ] || [ "$(grep -c "^wrote $out:" <<< "$err")" -ne 1 ] || ! grep -qF "$want_opset" <<< "$line" ||
     ! grep -qE "^wrote $out: [0-9]+ nodes \([0-9]+ Casts inserted\), [0-9]+ initializers, " <<< "$line"; then
    echo "FAIL $half: rc $rc, summary line: '${line:-none}' (want '$want_opset'); stderr: $err"; fail=$((fail + 1))
  else
    echo "ok   $half summary: $line"
  fi
  if ! scripts/py - "$out" "$tmp/cnn_$half.json" <<'PY'
import json, sys
import onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
rows = {r["name"]: r for r in json.load(open(sys.argv[2]))["nodes"]}
bad = []
for n in m.graph.node:
    doc = n.doc_string
    if not doc.startswith("apexc"):
        bad.append(f"{n.name}: no apexc doc_string")
    elif n.name in rows and rows[n.name]["section"] == "forward":
        r = rows[n.name]
        want = f"apexc: {r['decision']} ({r['reason']})"
        if not doc.startswith(want):
            bad.append(f"{n.name}: doc_string '{doc}' does not start with '{want}'")
if bad:
    sys.exit("FAIL " + "; ".join(bad[:5]))
print(f"ok   {sys.argv[1]}: onnx.checker full_check at opset {m.opset_import[0].version}; "
      f"{len(m.graph.node)} doc_strings match --explain=json")
PY
  then fail=$((fail + 1)); fi
done
# --quiet: no summary line
err=$("$apexc" examples/mlp/model.onnx -O2 --emit-onnx "$tmp/q.onnx" --quiet -o "$tmp/q.apx" 2>&1 >/dev/null)
[ -z "$err" ] && echo "ok   --quiet prints nothing" || { echo "FAIL --quiet printed: $err"; fail=$((fail + 1)); }
echo "emit cli: $fail failed"
[ "$fail" -eq 0 ]
