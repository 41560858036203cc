#!/usr/bin/env python3
"""make_seeds.py - writes valid seed models for the loader fuzzer into tests/fuzz/seeds/.

Each seed loads (opset_min 7, as the fuzz target sets) and reaches a part of the loader the
bad-input corpus does not: every dtype from raw_data and typed fields, Constant variants,
every attribute type, value_info and symbolic dims (N is bound by the target), and external
data in w.bin (the 64-byte file the fuzz target provides). scripts/fuzz_loader.sh copies
them into its working corpus.

Usage: scripts/py tests/fuzz/make_seeds.py   (needs the onnx and numpy PyPI packages)
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def save(name, nodes, inputs, outputs, inits=(), value_info=(), opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    vi = helper.make_tensor_value_info
    F = TensorProto.FLOAT

    # every dtype, raw_data and typed fields, each through Identity
    types = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
             TensorProto.FLOAT16: np.float16, TensorProto.INT8: np.int8,
             TensorProto.UINT8: np.uint8, TensorProto.INT16: np.int16,
             TensorProto.UINT16: np.uint16, TensorProto.INT32: np.int32,
             TensorProto.INT64: np.int64, TensorProto.UINT32: np.uint32,
             TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_}
    nodes, inits, outs = [], [], []
    for i, (t, npt) in enumerate(types.items()):
        arr = (np.arange(6).reshape(2, 3) % 2).astype(npt)
        raw = numpy_helper.from_array(arr, f"r{i}")
        typed = helper.make_tensor(f"t{i}", t, [2, 3], arr.flatten().tolist())
        inits += [raw, typed]
        for n in (f"r{i}", f"t{i}"):
            nodes.append(helper.make_node("Identity", [n], [n + "_out"]))
            outs.append(vi(n + "_out", t, [2, 3]))
    bf = helper.make_tensor("bf", TensorProto.BFLOAT16, [2], [1.0, 2.0])
    inits.append(bf)
    nodes.append(helper.make_node("Identity", ["bf"], ["bf_out"]))
    outs.append(vi("bf_out", TensorProto.BFLOAT16, [2]))
    save("dtypes", nodes, [], outs, inits)

    # Constant variants and every attribute type
    t = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "")
    nodes = [
        helper.make_node("Constant", [], ["c0"], value=t),
        helper.make_node("Constant", [], ["c1"], value_float=2.5),
        helper.make_node("Constant", [], ["c2"], value_floats=[1.0, 2.0]),
        helper.make_node("Constant", [], ["c3"], value_int=3),
        helper.make_node("Constant", [], ["c4"], value_ints=[2, 1]),
        helper.make_node("ConstantOfShape", ["c4"], ["z"], value=t),
        helper.make_node("Gemm", ["a", "b"], ["y"], alpha=0.5, transB=1, name="gemm"),
        helper.make_node("Cast", ["y"], ["yc"], to=TensorProto.FLOAT16, saturate=1),
        helper.make_node("Gelu", ["y"], ["yg"], approximate="tanh"),
    ]
    extra = helper.make_node("Relu", ["y"], ["yr"])
    extra.attribute.extend([helper.make_attribute("strs", [b"a", b"bc"]),
                            helper.make_attribute("fl", [0.5, 1.5])])
    nodes.append(extra)
    save("constants_attrs", nodes, [vi("a", F, ["N", 3]), vi("b", F, [4, 3])],
         [vi("yc", TensorProto.FLOAT16, None), vi("yg", F, None), vi("yr", F, None),
          vi("z", F, None), vi("c0", F, None), vi("c1", F, None), vi("c2", F, None),
          vi("c3", TensorProto.INT64, None)],
         value_info=[vi("y", F, ["N", 4])])

    # external data in w.bin (64 bytes): 16 floats from offset 0, and 4 from offset 48
    w = TensorProto()
    w.name, w.data_type = "w", F
    w.dims.extend([4, 4])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"),):
        e = w.external_data.add()
        e.key, e.value = k, v
    w2 = TensorProto()
    w2.name, w2.data_type = "w2", F
    w2.dims.extend([4])
    w2.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "./w.bin"), ("offset", "48"), ("length", "16")):
        e = w2.external_data.add()
        e.key, e.value = k, v
    save("external", [helper.make_node("MatMul", ["x", "w"], ["h"]),
                      helper.make_node("Add", ["h", "w2"], ["y"])],
         [vi("x", F, ["N", 4])], [vi("y", F, ["N", 4])], [w, w2])

    # an old-style model: initializers listed as inputs, opset 9, out-of-order nodes
    save("old_style", [helper.make_node("Relu", ["h"], ["y"]),
                       helper.make_node("Add", ["x", "b"], ["h"])],
         [vi("x", F, [2]), vi("b", F, [2])], [vi("y", F, [2])],
         [numpy_helper.from_array(np.zeros(2, np.float32), "b")], opset=9)
    with open(os.path.join(OUT, "w.bin"), "wb") as f:  # as the fuzz target writes it
        f.write(bytes(range(64)))
    print(f"wrote {len(os.listdir(OUT))} files to {OUT}")


if __name__ == "__main__":
    main()
