#!/usr/bin/env python3
"""A tiny classifier with Dropout in training mode, and random data, for runtime:train_test
(the Dropout stream must continue bit for bit across a resume).
usage: make_dropout_model.py OUT_DIR   -> OUT_DIR/model.onnx, OUT_DIR/data/{x,y}.npy"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def main():
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    rng = np.random.RandomState(0)
    inits = [nh.from_array(rng.randn(32, 16).astype(np.float32) * 0.3, "w1"),
             nh.from_array(rng.randn(4, 32).astype(np.float32) * 0.3, "w2"),
             nh.from_array(np.array(0.5, np.float32), "ratio"),
             nh.from_array(np.array(True), "mode")]
    nodes = [h.make_node("Gemm", ["x", "w1"], ["h"], transB=1, name="fc1"),
             h.make_node("Relu", ["h"], ["r"], name="relu"),
             h.make_node("Dropout", ["r", "ratio", "mode"], ["dr"], name="drop"),
             h.make_node("Gemm", ["dr", "w2"], ["logits"], transB=1, name="fc2"),
             h.make_node("SoftmaxCrossEntropyLoss", ["logits", "y"], ["loss"], name="xent")]
    g = h.make_graph(nodes, "dropout_mlp",
                     [h.make_tensor_value_info("x", T.FLOAT, [8, 16]),
                      h.make_tensor_value_info("y", T.INT64, [8])],
                     [h.make_tensor_value_info("loss", T.FLOAT, []),
                      h.make_tensor_value_info("logits", T.FLOAT, [8, 4])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, "model.onnx"))
    np.save(os.path.join(out, "data", "x.npy"), rng.randn(100, 16).astype(np.float32))
    np.save(os.path.join(out, "data", "y.npy"), rng.randint(0, 4, 100).astype(np.int64))


if __name__ == "__main__":
    main()
