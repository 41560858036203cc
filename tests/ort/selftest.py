#!/usr/bin/env python3
"""selftest.py - checks the checker: check_emitted.py must pass a correct half-precision
version of a model and fail broken ones, independently of apexc.

For each example model and each half type it builds, in Python, the graph an O3-style
emitter would write (every float initializer and Constant converted to the half type,
Casts after the float graph inputs and before the float graph outputs) and asserts that
check_emitted passes it and prints its errors; then it asserts that three kinds of broken
emission fail: a parameter with its elements reversed (a layout bug), a Cast to the
wrong type (int32), and an output that the emitted model lacks.

    selftest.py EXAMPLES_DIR   -> "N passed, M failed" on the last line, exit 0/1
                                  (and JUnit XML in $XML_OUTPUT_FILE under Bazel)
"""
import os
import sys

import ml_dtypes  # a dependency of onnx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_emitted  # noqa: E402
import junit  # noqa: E402

NP_HALF = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}


def to_half_tensor(t, half_type):
    arr = numpy_helper.to_array(t)
    if arr.dtype != np.float32:
        return t
    with np.errstate(over="ignore"):  # -1e9 masks become -inf in fp16, as a naive cast does
        h = numpy_helper.from_array(arr.astype(NP_HALF[half_type]), t.name)
    assert h.data_type == half_type, (h.data_type, half_type)
    return h


def make_half_model(model, half_type):
    """The whole forward in the half type, Casts at the float graph boundary."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = [to_half_tensor(t, half_type) for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    a.t.CopyFrom(to_half_tensor(a.t, half_type))
    rename = {}
    pre, post = [], []
    data_inputs = {vi.name for vi in check_emitted.graph_data_inputs(m)}
    for vi in g.input:
        if vi.name in data_inputs and vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            rename[vi.name] = vi.name + "_half"
            pre.append(helper.make_node("Cast", [vi.name], [rename[vi.name]], name=vi.name + "_cast", to=half_type))
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
    for vi in g.output:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = vi.name + "_half"
            for n in g.node:
                for i, y in enumerate(n.output):
                    if y == vi.name:
                        n.output[i] = inner
                for i, x in enumerate(n.input):
                    if x == vi.name:
                        n.input[i] = inner
            post.append(helper.make_node("Cast", [inner], [vi.name], name=vi.name + "_cast", to=TensorProto.FLOAT))
    nodes = pre + list(g.node) + post
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    # bfloat16 Conv and pooling exist only from opset 22 (as apexc --emit-onnx raises it)
    if half_type == TensorProto.BFLOAT16 and {n.op_type for n in g.node} & BF16_AT_22:
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = max(o.version, 22)
        m.ir_version = max(m.ir_version, 10)
    return m


BF16_AT_22 = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool"}


def scrambled(model):
    """The largest parameter with its elements in the wrong order (a layout bug)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    t = max(m.graph.initializer, key=lambda t: np.prod(t.dims) if t.data_type in NP_HALF else 0)
    arr = numpy_helper.to_array(t)
    t.CopyFrom(numpy_helper.from_array(arr.reshape(-1)[::-1].reshape(arr.shape).copy(), t.name))
    return m


def wrong_cast(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    n = next(n for n in m.graph.node if n.op_type == "Cast" and n.output[0] in {o.name for o in m.graph.output})
    n.attribute[0].i = TensorProto.INT32
    return m


def missing_output(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = m.graph.output[0]
    del m.graph.output[:]
    m.graph.output.append(keep)
    return m


def main():
    examples = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../examples")
    cases = []

    def expect(name, want_ok, result):
        ok, lines, errs = result
        good = ok == want_ok
        text = "\n".join([f"{'PASS' if good else 'FAIL'} {name}: check_emitted {'passed' if ok else 'failed'} "
                          f"(expected {'pass' if want_ok else 'fail'})"] + ["    " + x for x in lines])
        print(text)
        cases.append((name, good, text))

    for ex in ("mlp", "cnn", "transformer"):
        model = onnx.load(os.path.join(examples, ex, "model.onnx"))
        feeds = check_emitted.load_feeds(model, os.path.join(examples, ex, "data"))
        for half in ("fp16", "bf16"):
            hm = make_half_model(model, check_emitted.HALF_TYPE[half])
            expect(f"{ex} all-{half}", True, check_emitted.check(model, hm, feeds, half))
            expect(f"{ex} all-{half} with a parameter's elements reversed", False,
                   check_emitted.check(model, scrambled(hm), feeds, half))
            expect(f"{ex} all-{half} with a Cast to int32", False,
                   check_emitted.check(model, wrong_cast(hm), feeds, half))
            expect(f"{ex} all-{half} missing an output", False,
                   check_emitted.check(model, missing_output(hm), feeds, half))
    failed = sum(1 for _, ok, _ in cases if not ok)
    junit.write(None, "ort_selftest", cases)
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
