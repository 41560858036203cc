#!/usr/bin/env python3
"""float64_check.py - a third opinion when apexc and the onnxruntime-training reference
(make_reference.py) disagree on a gradient: central finite differences of the model's loss in
float64, evaluated by onnx's own reference implementation (onnx.reference.ReferenceEvaluator,
plain numpy, no onnxruntime and no apexc code), at the initial parameters on the first batch.

    float64_check.py MODEL [--apexc DIR] [--params A,B] [--max-elems N] [--h H]

MODEL is mlp, cnn or transformer. For every trainable parameter (or --params), up to
--max-elems elements (evenly spaced; default 64, 0 = all) get d loss / d p from
(L(p + h) - L(p - h)) / 2h in float64 (h = 1e-6: truncation ~h^2, rounding ~1e-16 / h, both
below 1e-9 relative for these gradients). Printed per parameter: relative L2 error over those
elements of the onnxruntime fixture (tests/fixtures/ort_training/MODEL/grad_K.pb) and, with
--apexc DIR, of apexc's gradients dumped by reference_test (APX_REF_DUMP=DIR writes
DIR/MODEL/grad_K.pb). Needs only onnx and numpy (scripts/py: the project venv).
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def read_series(d, prefix):
    out, k = {}, 0
    while os.path.exists(os.path.join(d, f"{prefix}_{k}.pb")):
        n, a = read_tensor(os.path.join(d, f"{prefix}_{k}.pb"))
        out[n] = a
        k += 1
    return out


def float64_model(model):
    """The model with every float initializer a float64 graph input and float types double."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    params = {}
    for i in m.graph.initializer:
        a = numpy_helper.to_array(i)
        params[i.name] = a.astype(np.float64) if a.dtype == np.float32 else a
        m.graph.input.append(helper.make_tensor_value_info(
            i.name, TensorProto.DOUBLE if i.data_type == TensorProto.FLOAT else i.data_type, list(i.dims)))
    del m.graph.initializer[:]
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    del m.graph.value_info[:]
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
    return m, params


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=["mlp", "cnn", "transformer"])
    ap.add_argument("--apexc", help="folder of apexc dumps (APX_REF_DUMP of reference_test)")
    ap.add_argument("--params", help="comma-separated parameter names (default: all)")
    ap.add_argument("--max-elems", type=int, default=64)
    ap.add_argument("--h", type=float, default=1e-6)
    a = ap.parse_args()

    model = onnx.load(os.path.join(ROOT, "tests", "fixtures", "ort", a.model, "model.onnx"))
    m, params = float64_model(model)
    sess = ReferenceEvaluator(m)
    feeds, k = {}, 0
    ds = os.path.join(ROOT, "tests", "fixtures", "ort", a.model, "test_data_set_0")
    while os.path.exists(os.path.join(ds, f"input_{k}.pb")):
        n, arr = read_tensor(os.path.join(ds, f"input_{k}.pb"))
        feeds[n] = arr.astype(np.float64) if arr.dtype == np.float32 else arr
        k += 1
    loss_name = m.graph.output[0].name

    def loss(p):
        f = dict(feeds)
        f.update(p)
        return float(sess.run([loss_name], f)[0])

    ort = read_series(os.path.join(ROOT, "tests", "fixtures", "ort_training", a.model), "grad")
    apx = read_series(os.path.join(a.apexc, a.model), "grad") if a.apexc else {}
    names = a.params.split(",") if a.params else list(ort)
    print(f"{a.model}: float64 loss {loss(params):.9f} (reference evaluator); h = {a.h:g}")
    print(f"{'parameter':<20} {'elems':>6} {'|g| (f64)':>10} {'onnxruntime':>12}" + (f" {'apexc':>12}" if apx else ""))
    for name in names:
        base = params[name]
        idx = np.arange(base.size)
        if a.max_elems and base.size > a.max_elems:
            idx = np.linspace(0, base.size - 1, a.max_elems).round().astype(int)
        fd = np.empty(len(idx))
        for j, e in enumerate(idx):
            q = dict(params)
            for sgn, slot in ((1, 0), (-1, 1)):
                v = base.copy()
                v.flat[e] += sgn * a.h
                q[name] = v
                if slot == 0:
                    lp = loss(q)
                else:
                    lm = loss(q)
            fd[j] = (lp - lm) / (2 * a.h)
        den = np.linalg.norm(fd)

        def err(g):
            d = np.linalg.norm(g.astype(np.float64).ravel()[idx] - fd)
            return d / den if den > 0 else d

        line = f"{name:<20} {len(idx):>6} {den:>10.3e} {err(ort[name]):>12.2e}"
        if apx:
            line += f" {err(apx[name]):>12.2e}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
