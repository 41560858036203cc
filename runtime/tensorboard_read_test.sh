#!/usr/bin/env bash
# sh_test: `apexrun --tensorboard DIR` read back by TensorBoard's own reader (PyPI
# tensorboard, EventAccumulator; scripts/requirements.txt): every step of a short MLP run
# at -O2 whose first steps overflow (inputs 64 times larger: skipped steps, a falling loss
# scale), the scalar tags apexrun promises, and values equal to the --log JSONL rows.
set -u
export PYTHONDONTWRITEBYTECODE=1
tmp=${TEST_TMPDIR:-$(mktemp -d)}/tb
rm -rf "$tmp" && mkdir -p "$tmp"
# examples/mlp/README.md's "loss scaling at work": inputs 64 times larger overflow at 2^16
scripts/py -c "import numpy as np; d='examples/mlp/data'; o='$tmp/big'; import os; os.makedirs(o);
np.save(o + '/x.npy', np.load(d + '/x.npy') * 64); np.save(o + '/labels.npy', np.load(d + '/labels.npy'))" || exit 1
compiler/apexc examples/mlp/model.onnx -O2 --scale-window 5 --quiet -o "$tmp/mlp.apx" || exit 1
runtime/apexrun "$tmp/mlp.apx" --data "$tmp/big" --steps 25 --no-shuffle --quiet --log "$tmp/log.jsonl" \
  --tensorboard "$tmp/tb" || exit 1
exec scripts/py - "$tmp/tb" "$tmp/log.jsonl" <<'PY'
import glob, json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
tb, log = sys.argv[1:3]
files = glob.glob(tb + "/events.out.tfevents.*")
assert len(files) == 1, files
acc = EventAccumulator(tb, size_guidance={"scalars": 0})
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
want = sorted(["loss", "loss_scale", "lr", "grad_norm", "ms_per_step", "skipped_steps"])
print("scalar tags read back by TensorBoard's EventAccumulator:", ", ".join(tags))
assert tags == want, (tags, want)
rows = [json.loads(l) for l in open(log)]
assert len(rows) == 25, len(rows)
skipped = 0
for key, tag in (("loss", "loss"), ("loss_scale", "loss_scale"), ("lr", "lr"), ("grad_norm", "grad_norm"), ("ms", "ms_per_step")):
    ev = acc.Scalars(tag)
    assert [e.step for e in ev] == [r["step"] for r in rows], (tag, [e.step for e in ev])
    for e, r in zip(ev, rows):
        v = r[key]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            assert math.isnan(e.value), (tag, e.step, e.value)
        else:
            tol = 6e-4 if key == "ms" else 1e-6 * max(1.0, abs(v))  # the log rounds ms to 0.001
            assert abs(e.value - v) <= tol, (tag, e.step, e.value, v)
for e, r in zip(acc.Scalars("skipped_steps"), rows):
    skipped += 1 if r["skipped"] else 0
    assert e.value == skipped, (e.step, e.value, skipped)
first = acc.Scalars("loss")[0]
assert skipped > 0, "the run was meant to skip steps"
print(f"{len(rows)} steps, first loss {first.value:.6f} at step {first.step}, {skipped} skipped; values match --log")
print("tensorboard read-back: ok")
PY
