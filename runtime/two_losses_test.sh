#!/usr/bin/env bash
# sh_test: several losses, each with its own dynamic loss scaler (apexc --loss A,B; DESIGN.md 9,
# Apex num_losses / loss_id), on runtime/testdata/make_two_losses.py's two-head model:
#  1. --loss loss_cls,loss_reg trains the same parameters as --loss total (= their sum) when
#     nothing overflows: -O0 (static scale 1), -O1 static 128 and -O1 dynamic from 1024 (both
#     losses' scales equal the single loss's), fp32 tolerance;
#  2. a regression target 100 times larger overflows only loss_reg's half gradients at -O2: the
#     step is skipped (parameters bit-identical to the model's), only loss_reg's scale halves,
#     the message names the loss; later steps train with the two scales apart;
#  3. a run stopped at step 6 and resumed from its checkpoint (version 5: both scalers) ends
#     bit-identical to the uninterrupted run, with the same scales in every log row;
#     --export-onnx drops every trained loss from the outputs;
#  4. bad --loss lists: an unknown name, a name twice, --accumulate: one line, exit code 2.
set -u
export PYTHONDONTWRITEBYTECODE=1
tmp=${TEST_TMPDIR:-$(mktemp -d)}/two_losses
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*"; exit 1; }
apexc=compiler/apexc
apexrun=runtime/apexrun
scripts/py runtime/testdata/make_two_losses.py "$tmp/m1" 1 || fail "fixture"
scripts/py runtime/testdata/make_two_losses.py "$tmp/m100" 100 || fail "fixture"

# ---- 4. bad --loss lists -------------------------------------------------------------------
bad() { # expect exit 2, one line containing $1; the rest is the apexc command line
  local want=$1; shift
  "$apexc" "$@" -o "$tmp/bad.apx" >"$tmp/out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "apexc $*: exit $rc, expected 2: $(cat "$tmp/out")"
  [ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "apexc $*: not one line: $(cat "$tmp/out")"
  grep -qF -- "$want" "$tmp/out" || fail "apexc $*: '$(cat "$tmp/out")' lacks '$want'"
  echo "ok: apexc $*: $(cat "$tmp/out")"
}
m1=$tmp/m1/model.onnx
bad "--loss 'loss_cls,nope': no such value 'nope'" "$m1" --loss loss_cls,nope
bad "'loss_cls' is named twice" "$m1" --loss loss_cls,loss_reg,loss_cls
bad "empty name" "$m1" --loss loss_cls,
bad "not supported yet: several losses (--loss loss_cls,loss_reg) with --accumulate 2" "$m1" \
  --loss loss_cls,loss_reg --accumulate 2
bad "name several losses in one list: --loss loss_cls,loss_reg" "$m1" --loss loss_cls --loss loss_reg

# ---- 1. two scalers without overflow = the summed loss ----------------------------------------
# (-O1 at 2^16 overflows loss_reg's gradients in this model: the scales would part)
for lvl in -O0 -O1s -O1d; do
  # -O1: SGD, whose update is linear in the gradient: the two forms differ only by where the
  # half-precision gradients are rounded (summed in fp16 then unscaled, or unscaled then summed
  # in fp32); AdamW's normalized update would amplify that rounding near zero gradients
  case $lvl in
    -O0) flags=-O0 ;;
    -O1s) flags="-O1 --loss-scale 128 --optimizer sgd" ;;
    -O1d) flags="-O1 --init-scale 1024 --optimizer sgd" ;;
  esac
  "$apexc" "$m1" $flags --loss loss_cls,loss_reg --lr 0.05 --quiet -o "$tmp/two$lvl.apx" || fail "compile two $lvl"
  "$apexc" "$m1" $flags --loss total --lr 0.05 --quiet -o "$tmp/sum$lvl.apx" || fail "compile sum $lvl"
  for k in two sum; do
    "$apexrun" "$tmp/$k$lvl.apx" --data "$tmp/m1/data" --steps 20 --quiet --log "$tmp/$k$lvl.jsonl" \
      --export-onnx "$tmp/$k$lvl.onnx" || fail "train $k $lvl"
  done
done
scripts/py - "$tmp" <<'PY' || fail "equal parameters"
import json, sys
import numpy as np, onnx
from onnx import numpy_helper
tmp = sys.argv[1]
for lvl in ("-O0", "-O1s", "-O1d"):
    two = {i.name: numpy_helper.to_array(i) for i in onnx.load(f"{tmp}/two{lvl}.onnx").graph.initializer}
    one = {i.name: numpy_helper.to_array(i) for i in onnx.load(f"{tmp}/sum{lvl}.onnx").graph.initializer}
    assert sorted(two) == sorted(one), (sorted(two), sorted(one))
    # --export-onnx drops the trained losses' outputs (every one of them) and keeps the rest
    outs = [o.name for o in onnx.load(f"{tmp}/two{lvl}.onnx").graph.output]
    assert outs == ["total"], outs
    outs = [o.name for o in onnx.load(f"{tmp}/sum{lvl}.onnx").graph.output]
    assert outs == ["loss_cls", "loss_reg"], outs
    worst = 0.0
    for n in one:
        d = float(np.max(np.abs(two[n].astype(np.float64) - one[n])))
        worst = max(worst, d)
        tol = (1e-5, 1e-6) if lvl == "-O0" else (1e-4, 1e-4)  # fp32 / fp16-gradient rounding
        assert np.allclose(two[n], one[n], rtol=tol[0], atol=tol[1]), (lvl, n, d)
    rows = [json.loads(l) for l in open(f"{tmp}/two{lvl}.jsonl")]
    srows = [json.loads(l) for l in open(f"{tmp}/sum{lvl}.jsonl")]
    assert len(rows) == 20 and not any(r["skipped"] for r in rows), rows[0]
    for r, s in zip(rows, srows):
        assert set(r["loss_scales"]) == {"loss_cls", "loss_reg"}, r
        assert r["loss_scales"]["loss_cls"] == r["loss_scales"]["loss_reg"] == s["loss_scale"], (r, s)
        assert abs(r["loss"] - (r["losses"]["loss_cls"] + r["losses"]["loss_reg"])) <= 1e-6 * abs(r["loss"]), r
        assert abs(r["loss"] - s["loss"]) <= (1e-5 if lvl == "-O0" else 1e-4) * abs(s["loss"]) + 1e-6, (r, s)
    print(f"ok: {lvl}: --loss loss_cls,loss_reg and --loss total give the same parameters after 20 steps "
          f"(largest difference {worst:.3g}), scale {rows[0]['loss_scale']:g} for both losses")
PY

# ---- 2. an overflow in one loss's backward --------------------------------------------------
m100=$tmp/m100/model.onnx
"$apexc" "$m100" -O2 --loss loss_cls,loss_reg --lr 0.01 --quiet -o "$tmp/o2.apx" || fail "compile O2"
# a growth interval of 3 steps: both scales move (for the checkpoint round trip)
"$apexc" "$m100" -O2 --loss loss_cls,loss_reg --lr 0.01 --scale-window 3 --quiet -o "$tmp/o2w3.apx" || fail "compile O2 w3"
"$apexrun" "$tmp/o2.apx" --data "$tmp/m100/data" --steps 1 --no-shuffle --log "$tmp/one.jsonl" \
  --export-onnx "$tmp/one.onnx" >"$tmp/one.out" 2>&1
rc=$?
# every step of this run overflowed while the scale settles: a warning, not a failure
[ $rc -eq 0 ] || fail "one step: exit $rc: $(cat "$tmp/one.out")"
grep -qF "gradient overflow in 'reg.weight' of loss 'loss_reg' at loss scale 65536: step skipped, scale of that loss now 32768" \
  "$tmp/one.out" || grep -qF "of loss 'loss_reg' at loss scale 65536: step skipped, scale of that loss now 32768" \
  "$tmp/one.out" || fail "overflow message: $(cat "$tmp/one.out")"
grep "overflow" "$tmp/one.out" | head -1
"$apexrun" "$tmp/o2.apx" --data "$tmp/m100/data" --steps 40 --no-shuffle --log "$tmp/o2.jsonl" --quiet || fail "O2 40 steps"
scripts/py - "$tmp" "$m100" <<'PY' || fail "overflow in one loss"
import json, sys
import numpy as np, onnx
from onnx import numpy_helper
tmp, model = sys.argv[1:3]
init = {i.name: numpy_helper.to_array(i) for i in onnx.load(model).graph.initializer}
after = {i.name: numpy_helper.to_array(i) for i in onnx.load(f"{tmp}/one.onnx").graph.initializer}
for n, v in init.items():
    assert after[n].dtype == np.float32 and np.array_equal(after[n].view(np.uint32), v.view(np.uint32)), n
r1 = json.loads(open(f"{tmp}/one.jsonl").readline())
assert r1["skipped"] and r1["loss_scales"] == {"loss_cls": 65536, "loss_reg": 65536}, r1
assert "of loss 'loss_reg'" in r1["reason"], r1
rows = [json.loads(l) for l in open(f"{tmp}/o2.jsonl")]
sc = [(r["loss_scales"]["loss_cls"], r["loss_scales"]["loss_reg"]) for r in rows]
assert sc[1] == (65536, 32768), sc[:3]  # only loss_reg backed off
# loss_cls's gradients do not overflow at 2^16: its scale stays (growth interval 2000)
assert all(a == 65536 for a, _ in sc), sc
assert min(b for _, b in sc) < 65536 / 8, sc
taken = [r for r in rows if not r["skipped"]]
assert taken and all(r["overflow_at"] is None for r in taken), rows
skipped = [r for r in rows if r["skipped"]]
assert all("of loss 'loss_reg'" in r["reason"] for r in skipped), skipped
assert rows[-1]["losses"]["loss_cls"] < rows[0]["losses"]["loss_cls"], (rows[0], rows[-1])  # it trains
print(f"ok: -O2, target x100: step 1 skipped with parameters unchanged; {len(skipped)} of 40 steps "
      f"skipped, all by loss_reg; scales (loss_cls, loss_reg) {sc[0]} -> {sc[-1]}; loss_cls "
      f"{rows[0]['losses']['loss_cls']:.3f} -> {rows[-1]['losses']['loss_cls']:.3f}")
PY

# --explain and TensorBoard show each loss's scale
"$apexc" "$m100" -O2 --loss loss_cls,loss_reg --explain -o "$tmp/ex.apx" >"$tmp/explain.txt" 2>&1 || fail "explain"
tr -s ' \n' ' ' <"$tmp/explain.txt" | grep -qF "loss scaling: dynamic, initial scale 65536, growth interval 2000 steps; one scaler per loss: loss_cls,loss_reg" \
  || fail "explain lacks the per-loss scalers: $(head -5 "$tmp/explain.txt")"
"$apexrun" "$tmp/o2.apx" --data "$tmp/m100/data" --steps 3 --no-shuffle --quiet --tensorboard "$tmp/tb" || fail "tensorboard run"
scripts/py - "$tmp/tb" <<'PY' || fail "tensorboard"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"loss/loss_cls", "loss/loss_reg", "loss_scale/loss_cls", "loss_scale/loss_reg"}
assert want <= tags, tags
assert [e.value for e in acc.Scalars("loss_scale/loss_reg")] == [65536, 32768, 16384], acc.Scalars("loss_scale/loss_reg")
assert [e.value for e in acc.Scalars("loss_scale/loss_cls")] == [65536] * 3
print("ok: --explain names the per-loss scalers; TensorBoard has", ", ".join(sorted(want)))
PY

# ---- 3. checkpoint round trip of both scalers -------------------------------------------------
"$apexrun" "$tmp/o2w3.apx" --data "$tmp/m100/data" --steps 12 --quiet --log "$tmp/full.jsonl" \
  --export-onnx "$tmp/full.onnx" || fail "uninterrupted"
"$apexrun" "$tmp/o2w3.apx" --data "$tmp/m100/data" --steps 6 --quiet --log "$tmp/part.jsonl" \
  --checkpoint-dir "$tmp/ck" || fail "first half"
ck=$tmp/ck/ckpt-000000000006.apxckpt
[ -f "$ck" ] || fail "no checkpoint $ck"
"$apexrun" "$tmp/o2w3.apx" --data "$tmp/m100/data" --steps 12 --quiet --log "$tmp/part.jsonl" \
  --checkpoint-dir "$tmp/ck" --resume --export-onnx "$tmp/resumed.onnx" || fail "resume"
cmp "$tmp/full.onnx" "$tmp/resumed.onnx" || fail "the resumed run's parameters differ from the uninterrupted run's"
scripts/py - "$tmp" "$ck" <<'PY' || fail "checkpoint"
import json, struct, sys
tmp, ck = sys.argv[1:3]
h = open(ck, "rb").read(64)
version, state_len = struct.unpack_from("<I", h, 8)[0], struct.unpack_from("<I", h, 40)[0]
assert (version, state_len) == (5, 8 * 67), (version, state_len)
full = [json.loads(l) for l in open(f"{tmp}/full.jsonl")]
part = [json.loads(l) for l in open(f"{tmp}/part.jsonl")]
assert len(full) == len(part) == 12, (len(full), len(part))
assert len({r["loss_scales"]["loss_cls"] for r in full}) > 1 and len({r["loss_scales"]["loss_reg"] for r in full}) > 1, full
for a, b in zip(full, part):
    for k in ("step", "loss", "loss_scale", "skipped", "losses", "loss_scales", "grad_norm"):
        assert a[k] == b[k], (k, a, b)
print(f"ok: checkpoint version {version} at step 6; resumed run equals the uninterrupted one bit for bit; "
      f"scales at step 7: {full[6]['loss_scales']}")
PY
# a crafted version 5 state is refused before anything is loaded (checksum made valid again)
bad_ckpt() { # field-index value-hex message
  scripts/py - "$ck" "$tmp/bad/ckpt-000000000006.apxckpt" "$1" "$2" <<'PY' || fail "craft"
import os, struct, sys
src, dst, field, val = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4], 16)
b = bytearray(open(src, "rb").read())
struct.pack_into("<Q", b, 64 + 8 * field, val)
def crc32c(data, crc=0):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc ^= 0xFFFFFFFF
    for x in data:
        crc = table[(crc ^ x) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
b[36:40] = b"\0\0\0\0"
struct.pack_into("<I", b, 36, crc32c(bytes(b)))
os.makedirs(os.path.dirname(dst), exist_ok=True)
open(dst, "wb").write(b)
PY
  "$apexrun" "$tmp/o2w3.apx" --data "$tmp/m100/data" --steps 12 --quiet --checkpoint-dir "$tmp/bad" --resume \
    >"$tmp/out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$3" "$tmp/out" || fail "crafted checkpoint (field $1 = $2): exit $rc: $(cat "$tmp/out")"
  echo "ok: refused: $(cat "$tmp/out")"
}
bad_ckpt 25 bff0000000000000 "corrupt checkpoint: invalid training state (loss scaler 2: scale -1"
bad_ckpt 24 0 "invalid training state (version 5 without more loss scalers)"
bad_ckpt 31 3ff0000000000000 "an unused record must be zero"
bad_ckpt 25 4330000000000000 "loss scaler 2 (scale 4.5036e+15"
echo "two losses: ok"
