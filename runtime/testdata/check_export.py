#!/usr/bin/env python3
"""`apexrun --export-onnx` checked in onnxruntime (runtime:export_onnx_test).

For each example model: compile a training plan (apexc), train a few steps with
--export-onnx, then check the exported model:
  - onnx.checker accepts it; training-only parts are gone (the loss output and the inputs
    only the loss read; BatchNormalization in inference mode without running-stat outputs);
  - its initializers are the trained ones (they differ from the source model's);
  - onnxruntime runs it on the first batch of the example data, and its outputs agree with
    `apexrun infer` (apexrun's own forward, compiled at -O0) on the same model and inputs.
usage: check_export.py APEXC APEXRUN WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

CASES = [  # model, apexc flags
    ("mlp", ["-O2"]),
    ("cnn", ["-O2", "--lr", "0.01"]),
    ("transformer", ["-O2", "--half=bf16"]),
    ("cnn", ["-O0", "--lr", "0.01"]),
]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout))
    return r.stdout


def main():
    apexc, apexrun, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failures = 0
    for i, (model, flags) in enumerate(CASES):
        src = "examples/%s/model.onnx" % model
        data = "examples/%s/data" % model
        plan = os.path.join(work, "%s_%d.apx" % (model, i))
        out = os.path.join(work, "%s_%d_trained.onnx" % (model, i))
        run([apexc, src, "-q", "-o", plan] + flags)
        run([apexrun, plan, "--data", data, "--steps", "12", "--quiet", "--export-onnx", out])

        m = onnx.load(out)
        onnx.checker.check_model(m, full_check=True)
        orig = onnx.load(src)
        names = [o.name for o in m.graph.output]
        assert orig.graph.output[0].name not in names, "the loss output was dropped"
        assert names == [o.name for o in orig.graph.output[1:]], names
        assert "labels" not in [x.name for x in m.graph.input], "labels input dropped"
        for n in m.graph.node:
            if n.op_type == "BatchNormalization":
                tm = [a.i for a in n.attribute if a.name == "training_mode"]
                assert tm in ([], [0]) and len(n.output) == 1, n
        oi = {t.name: numpy_helper.to_array(t) for t in orig.graph.initializer}
        changed = 0
        for t in m.graph.initializer:
            a = numpy_helper.to_array(t)
            assert a.dtype == oi[t.name].dtype and a.shape == oi[t.name].shape, t.name
            changed += not np.array_equal(a, oi[t.name])
        assert changed >= 4, "trained initializers: %d changed" % changed

        # first batch of the data for every remaining input
        feeds = {}
        for x in m.graph.input:
            b = x.type.tensor_type.shape.dim[0].dim_value
            feeds[x.name] = np.load(os.path.join(data, x.name + ".npy"))[:b]
        sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
        tdir = os.path.join(work, "%s_%d_in" % (model, i))
        odir = os.path.join(work, "%s_%d_out" % (model, i))
        os.makedirs(tdir, exist_ok=True)
        for k, x in enumerate(m.graph.input):
            t = numpy_helper.from_array(feeds[x.name], x.name)
            with open(os.path.join(tdir, "input_%d.pb" % k), "wb") as f:
                f.write(t.SerializeToString())
        run([apexrun, "infer", out, "--input-dir", tdir, "--output-dir", odir, "-O0"])
        worst = 0.0
        for k, r in enumerate(ref):
            t = onnx.TensorProto()
            with open(os.path.join(odir, "output_%d.pb" % k), "rb") as f:
                t.ParseFromString(f.read())
            got = numpy_helper.to_array(t).astype(np.float64)
            err = float(np.max(np.abs(got - r) / (1.0 + np.abs(r))))
            worst = max(worst, err)
        ok = worst < 1e-4
        failures += not ok
        print("%-12s %-22s exported %d nodes, %d initializers (%d trained); onnxruntime vs "
              "apexrun infer: max rel err %.2e %s" % (model, " ".join(flags), len(m.graph.node),
                                                      len(m.graph.initializer), changed, worst,
                                                      "ok" if ok else "FAIL"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
