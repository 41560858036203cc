#!/usr/bin/env python3
"""Generates the multi-node models of tests/onnx_node/models and their expected shapes.

Each model NAME.onnx comes with NAME.shapes: '# dim NAME=V' lines (the --dim bindings),
'# opset_min N' when it needs old opsets, then one line per value 'name dtype [d0,d1,...]'
with the dtype and shape that onnxruntime actually produces for every node output when the
model runs on random data with those bindings (every value is made a graph output of a copy
of the model for the run). model_shape_test.cc checks apexc's inference against them.
Run from the repository root: scripts/py tests/onnx_node/make_models.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
rng = np.random.default_rng(0)


def init(name, arr):
    return nh.from_array(np.asarray(arr), name)


def attention():
    """Transformer-style block as torch exports it: a symbolic batch, Reshape targets from
    Shape/Gather/Unsqueeze/Concat, Dropout with constant ratio and training_mode, LayerNorm,
    plus Range/ConstantOfShape/Equal, Slice with negative steps, Split, Expand, Where."""
    E, H = 16, 4
    nodes = [
        h.make_node("Shape", ["x"], ["sx"]),
        h.make_node("Gather", ["sx", "i0"], ["b"], axis=0),
        h.make_node("Gather", ["sx", "i1"], ["s"]),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        h.make_node("Unsqueeze", ["s", "ax0"], ["su"]),
        h.make_node("Concat", ["bu", "su", "heads", "m1"], ["shp"], axis=0),
        h.make_node("MatMul", ["x", "w"], ["q"]),
        h.make_node("Reshape", ["q", "shp"], ["q4"]),
        h.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        h.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),
        h.make_node("MatMul", ["qt", "kt"], ["att"]),
        h.make_node("Div", ["att", "scale"], ["atts"]),
        h.make_node("Softmax", ["atts"], ["p"], axis=-1),
        h.make_node("Dropout", ["p", "ratio", "train"], ["pd", "mask"], seed=1),
        h.make_node("MatMul", ["pd", "qt"], ["ctx"]),
        h.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        h.make_node("Concat", ["bu", "su", "m1"], ["shp3"], axis=0),
        h.make_node("Reshape", ["ctxt", "shp3"], ["y"]),
        h.make_node("LayerNormalization", ["y", "g", "bb"], ["yn", "mean", "istd"], axis=-1, epsilon=1e-5),
        h.make_node("ReduceMean", ["yn"], ["loss"], keepdims=0),
        h.make_node("Range", ["r0", "r1", "r2"], ["rg"]),
        h.make_node("ConstantOfShape", ["sx"], ["zeros"], value=h.make_tensor("v", T.INT64, [1], [3])),
        h.make_node("Equal", ["rg", "r1v"], ["eq"]),
        h.make_node("Slice", ["x", "st", "en", "sax", "sst"], ["xs"]),
        h.make_node("Split", ["xs", "spl"], ["xa", "xb"], axis=2),
        h.make_node("Expand", ["xa", "exs"], ["xe"]),
        h.make_node("Where", ["eq3", "xe", "xb"], ["xw"]),
        h.make_node("ReduceSum", ["xw", "ax0"], ["rsum"], keepdims=1),
        h.make_node("Flatten", ["rsum"], ["fl"], axis=2),
        h.make_node("Gemm", ["fl", "gw", "gb"], ["gm"], transB=1, alpha=0.5),
        h.make_node("Cast", ["gm"], ["gm16"], to=T.FLOAT16),
        h.make_node("Sqrt", ["gm16"], ["gs"]),
    ]
    inits = [
        init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
        init("ax0", np.array([0], np.int64)), init("heads", np.array([H], np.int64)),
        init("m1", np.array([-1], np.int64)), init("w", rng.random((E, E), np.float32)),
        init("scale", np.array(2.0, np.float32)), init("ratio", np.array(0.1, np.float32)),
        init("train", np.array(True)), init("g", np.ones(E, np.float32)), init("bb", np.zeros(E, np.float32)),
        init("r0", np.array(0, np.int64)), init("r1", np.array(7, np.int64)), init("r2", np.array(2, np.int64)),
        init("r1v", np.array([3], np.int64)),
        init("st", np.array([1, -5, -1], np.int64)), init("en", np.array([-1, 100, -100], np.int64)),
        init("sax", np.array([1, 2, 0], np.int64)), init("sst", np.array([1, 2, -2], np.int64)),
        init("spl", np.array([1, 2], np.int64)), init("exs", np.array([2, 1, 1, 1], np.int64)),
        init("eq3", np.array([[True]])),
        init("gw", rng.random((5, 8), np.float32)), init("gb", np.zeros(5, np.float32)),
    ]
    graph = h.make_graph(nodes, "attention", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 6, E])],
                         [h.make_empty_tensor_value_info(n) for n in ["loss", "zeros", "eq", "mask", "gs"]], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m, {"batch": 3}, None


def cnn():
    """Conv/BatchNorm(training)/pooling with auto_pad, ceil mode, dilations, groups, then
    GlobalAveragePool, Flatten, Gemm and SoftmaxCrossEntropyLoss."""
    nodes = [
        h.make_node("Conv", ["img", "w1", "b1"], ["c1"], auto_pad="SAME_UPPER", strides=[2, 2]),
        h.make_node("BatchNormalization", ["c1", "sc", "bi", "mu", "var"], ["bn", "rm", "rv"],
                    training_mode=1, momentum=0.9),
        h.make_node("Relu", ["bn"], ["r1"]),
        h.make_node("MaxPool", ["r1"], ["p1", "idx"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        h.make_node("Conv", ["p1", "w2"], ["c2"], group=2, pads=[1, 0, 1, 0], dilations=[2, 1]),
        h.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
        h.make_node("LeakyRelu", ["p2"], ["l2"], alpha=0.2),
        h.make_node("GlobalAveragePool", ["l2"], ["gap"]),
        h.make_node("Flatten", ["gap"], ["flat"]),
        h.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], transB=1),
        h.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss", "logp"]),
    ]
    inits = [
        init("w1", rng.random((8, 3, 3, 3), np.float32)), init("b1", np.zeros(8, np.float32)),
        init("sc", np.ones(8, np.float32)), init("bi", np.zeros(8, np.float32)),
        init("mu", np.zeros(8, np.float32)), init("var", np.ones(8, np.float32)),
        init("w2", rng.random((6, 4, 3, 3), np.float32)),
        init("fw", rng.random((10, 6), np.float32)), init("fb", np.zeros(10, np.float32)),
    ]
    graph = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("img", T.FLOAT, ["N", 3, 19, 17]),
                                        h.make_tensor_value_info("labels", T.INT64, ["N"])],
                         [h.make_empty_tensor_value_info("loss")], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 15)])
    m.ir_version = 8
    return m, {"N": 4}, None


def old_opset():
    """Opset 11 attribute forms: Squeeze/Unsqueeze/ReduceSum/ReduceMean axes and Split sizes
    as attributes, Dropout ratio attribute, Softmax with the default axis 1 on rank 2."""
    nodes = [
        h.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]),
        h.make_node("Squeeze", ["u"], ["sq"], axes=[0]),
        h.make_node("Split", ["sq"], ["a", "b"], axis=1, split=[2, 3]),
        h.make_node("ReduceSum", ["b"], ["rs"], axes=[-1], keepdims=0),
        h.make_node("ReduceMean", ["a"], ["rm"], axes=[1, 2], keepdims=1),
        h.make_node("Dropout", ["rs"], ["d"], ratio=0.3),
        h.make_node("Softmax", ["d"], ["sm"]),
        h.make_node("Slice", ["sm", "st", "en", "sax"], ["sl"]),
        h.make_node("Transpose", ["sl"], ["tr"]),
        h.make_node("Reshape", ["rm", "shp"], ["rm2"]),
        h.make_node("MatMul", ["tr", "rm2"], ["mm"]),
    ]
    inits = [init("st", np.array([1], np.int64)), init("en", np.array([-1], np.int64)),
             init("sax", np.array([1], np.int64)), init("shp", np.array([4, -1], np.int64))]
    graph = h.make_graph(nodes, "old", [h.make_tensor_value_info("x", T.FLOAT, [4, 5])],
                         [h.make_empty_tensor_value_info("mm")], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    m.ir_version = 6
    return m, {}, 7


def run_shapes(m, dims):
    """Every node output's dtype and shape as onnxruntime computes them."""
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    names = [o for n in probe.graph.node for o in n.output if o]
    del probe.graph.output[:]
    probe.graph.output.extend(h.make_empty_tensor_value_info(n) for n in names)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [dims[d] if isinstance(d, str) else d for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 5, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.random(shape, np.float32)
    outs = sess.run(names, feeds)
    return [(n, np.asarray(v)) for n, v in zip(names, outs)]


DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", np.dtype(np.int64): "int64",
          np.dtype(np.bool_): "bool", np.dtype(np.float64): "float64", np.dtype(np.int32): "int32"}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, make in [("attention", attention), ("cnn", cnn), ("old_opset", old_opset)]:
        m, dims, opset_min = make()
        onnx.save(m, os.path.join(OUT, name + ".onnx"))
        with open(os.path.join(OUT, name + ".shapes"), "w") as f:
            f.write("# generated by tests/onnx_node/make_models.py (onnxruntime %s)\n" % ort.__version__)
            for k, v in dims.items():
                f.write("# dim %s=%d\n" % (k, v))
            if opset_min:
                f.write("# opset_min %d\n" % opset_min)
            for n, v in run_shapes(m, dims):
                f.write("%s %s [%s]\n" % (n, DTYPES[v.dtype], ",".join(str(d) for d in v.shape)))


if __name__ == "__main__":
    main()
