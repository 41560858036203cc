#!/usr/bin/env python3
"""ort_check.py - 3-D windows through `apexrun infer` against onnxruntime: MaxPool with
Indices (storage_order 0 and 1, ceil mode, dilations, pads), AveragePool (count_include_pad,
ceil mode), Conv (SAME_UPPER, groups, strides) and ConvTranspose (output_shape), one ONNX
model each, written to a temporary folder. Exits 1 on a mismatch (values beyond 1e-6,
Indices not equal).

    ort_check.py APEXRUN
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

CASES = {
    "max_so0_pads": ("MaxPool", dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 0, 1, 0, 1, 1]), None),
    "max_so1_pads": ("MaxPool", dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 0, 1, 0, 1, 1],
                                     storage_order=1), None),
    "max_ceil_dil": ("MaxPool", dict(kernel_shape=[2, 2, 3], strides=[2, 2, 2], dilations=[2, 1, 1], ceil_mode=1),
                     None),
    "avg_cip": ("AveragePool", dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 1, 1, 1, 0, 1],
                                    count_include_pad=1), None),
    "avg_ceil": ("AveragePool", dict(kernel_shape=[3, 3, 2], strides=[2, 2, 2], pads=[1, 0, 0, 0, 1, 0],
                                     ceil_mode=1), None),
    "conv_same_groups": ("Conv", dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], auto_pad="SAME_UPPER", group=3),
                         (6, 1, 3, 2, 3)),
    "convT_output_shape": ("ConvTranspose", dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], output_shape=[10, 12, 7]),
                           (3, 2, 2, 3, 2)),
}


def main():
    apexrun = sys.argv[1]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    bad = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as work:
        np.save(os.path.join(work, "x.npy"), x)
        for name, (op, attrs, wshape) in CASES.items():
            inits, node_in = [], ["x"]
            if wshape:
                inits.append(onnx.numpy_helper.from_array(rng.standard_normal(wshape).astype(np.float32), "w"))
                node_in.append("w")
            pool = op == "MaxPool"
            outs = ["y", "i"] if pool else ["y"]
            ov = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
            if pool:
                ov.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
            graph = helper.make_graph([helper.make_node(op, node_in, outs, name=name, **attrs)], name,
                                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))], ov,
                                      inits)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            path = os.path.join(work, name + ".onnx")
            onnx.save(model, path)
            ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
            out = os.path.join(work, name + "_out")
            r = subprocess.run([apexrun, "infer", path, "--input-dir", work, "--output-dir", out, "-O0"],
                               capture_output=True, text=True)
            if r.returncode:
                print(f"FAIL {name}: apexrun exit {r.returncode}: {r.stderr.strip()}")
                bad += 1
                continue
            y = np.load(os.path.join(out, "y.npy"))
            ok = y.shape == ref[0].shape and np.allclose(y, ref[0], rtol=0, atol=1e-6)
            diff = np.abs(y - ref[0]).max() if y.shape == ref[0].shape else float("inf")
            line = f"{name}: Y {y.shape} max |diff| {diff:.2e}"
            if pool:
                same = np.array_equal(np.load(os.path.join(out, "i.npy")), ref[1])
                ok = ok and same
                line += f", Indices {'equal' if same else 'DIFFER'}"
            print(("ok   " if ok else "FAIL ") + line)
            bad += not ok
    print(f"{len(CASES) - bad} of {len(CASES)} match onnxruntime")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
