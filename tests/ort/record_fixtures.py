#!/usr/bin/env python3
"""record_fixtures.py - records onnxruntime fp32 outputs of the example models as ONNX
test-data folders, the reference for `apexrun infer` (DESIGN.md 13).

For each example (examples/<name>/model.onnx with its data/), the forward + loss on the
first batch (samples [0, B), B = the input's first dimension) is run in onnxruntime (CPU,
fp32) and written in the ONNX node-test layout:

    tests/fixtures/ort/<name>/model.onnx                    copy of examples/<name>/model.onnx
    tests/fixtures/ort/<name>/test_data_set_0/input_K.pb    model's data inputs, in order
    tests/fixtures/ort/<name>/test_data_set_0/output_K.pb   graph outputs (0: loss, 1: logits)

Each .pb is a TensorProto named after its graph input/output. BatchNormalization in the
CNN runs in training mode (batch statistics), as the model says; its running-statistics
outputs are not graph outputs and are not recorded.

    record_fixtures.py [--examples DIR] [--out DIR]   rewrite the fixtures
    record_fixtures.py --check                        recompute and compare with the
        committed fixtures (model copies identical, inputs identical, outputs within 1e-5
        relative L2, so a newer onnxruntime's last-bit differences do not fail it);
        "N passed, M failed" on the last line.
"""
import argparse
import filecmp
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_emitted  # noqa: E402
import junit  # noqa: E402

EXAMPLES = ("mlp", "cnn", "transformer")
CHECK_TOL = 1e-5


def compute(examples, name):
    path = os.path.join(examples, name, "model.onnx")
    model = onnx.load(path)
    feeds = check_emitted.load_feeds(model, os.path.join(examples, name, "data"))
    ref = check_emitted.reference_outputs(model, feeds)
    ins = [(vi.name, feeds[vi.name]) for vi in check_emitted.graph_data_inputs(model)]
    outs = [(o.name, ref[o.name]) for o in model.graph.output]
    return path, ins, outs


def write_tensor(path, name, arr):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(arr), name).SerializeToString())


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def record(examples, out):
    for name in EXAMPLES:
        model_path, ins, outs = compute(examples, name)
        d = os.path.join(out, name)
        ds = os.path.join(d, "test_data_set_0")
        if os.path.isdir(ds):
            shutil.rmtree(ds)
        os.makedirs(ds)
        shutil.copyfile(model_path, os.path.join(d, "model.onnx"))
        for k, (n, a) in enumerate(ins):
            write_tensor(os.path.join(ds, f"input_{k}.pb"), n, a)
        for k, (n, a) in enumerate(outs):
            write_tensor(os.path.join(ds, f"output_{k}.pb"), n, a)
        summary = ", ".join(f"{n} {list(np.shape(a))}" + (f" = {float(a):.6f}" if np.ndim(a) == 0 else "")
                            for n, a in outs)
        print(f"{name}: wrote {d} ({len(ins)} inputs; outputs {summary})")
    return 0


def check(examples, out):
    cases = []
    for name in EXAMPLES:
        d = os.path.join(out, name)
        ds = os.path.join(d, "test_data_set_0")
        problems = []
        try:
            model_path, ins, outs = compute(examples, name)
            if not filecmp.cmp(model_path, os.path.join(d, "model.onnx"), shallow=False):
                problems.append(f"{d}/model.onnx differs from {model_path}")
            for k, (n, a) in enumerate(ins):
                rn, ra = read_tensor(os.path.join(ds, f"input_{k}.pb"))
                if rn != n or not np.array_equal(ra, a):
                    problems.append(f"input_{k}.pb ({rn}) differs from the first batch of {n}")
            for k, (n, a) in enumerate(outs):
                rn, ra = read_tensor(os.path.join(ds, f"output_{k}.pb"))
                err, _ = check_emitted.rel_l2(a, ra)
                if rn != n or ra.shape != np.shape(a) or not err <= CHECK_TOL:
                    problems.append(f"output_{k}.pb ({rn}): recomputed rel L2 error {err:.2e} > {CHECK_TOL}")
        except Exception as e:  # noqa: BLE001 - report, do not crash
            problems.append(f"{type(e).__name__}: {e}")
        text = f"{'PASS' if not problems else 'FAIL'} fixture {name}" + "".join("\n    " + p for p in problems)
        print(text)
        cases.append((name, not problems, text))
    failed = sum(1 for _, ok, _ in cases if not ok)
    junit.write(None, "ort_fixtures", cases)
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    ap.add_argument("--examples", default=os.path.join(root, "examples"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "ort"))
    ap.add_argument("--check", action="store_true", help="compare with the committed fixtures")
    a = ap.parse_args()
    return check(a.examples, a.out) if a.check else record(a.examples, a.out)


if __name__ == "__main__":
    sys.exit(main())
