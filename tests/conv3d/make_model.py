#!/usr/bin/env python3
"""make_model.py - writes the 3-D window training fixture: model.onnx (forward + loss) and
data/*.npy, for conv3d_train_test.sh (a small video-like Conv3d model trains).

    x [8, 1, 6, 8, 8]
      -> Conv(1->4, 3x3x3, pads 1) -> Relu
      -> MaxPool(2x2x2, stride 2)                                [8, 4, 3, 4, 4]
      -> ConvTranspose(4->4, 2x2x2, stride 2) -> Relu            [8, 4, 6, 8, 8]
      -> AveragePool(2x2x2, stride 2)                            [8, 4, 3, 4, 4]
      -> Flatten -> Gemm(192->4) = logits                        [8, 4]
    loss = SoftmaxCrossEntropyLoss(logits, labels [8], reduction=mean)  (scalar, output 0)

Data: 256 clips of 6 frames of 8x8 noise with one bright 2x3x3 blob; the label is the
quadrant of the (depth, height) plane the blob sits in (4 classes). opset 17, ir_version 8.
Deterministic (fixed seed); only onnx and numpy are needed.
"""
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
B, D, H, W, C, N = 8, 6, 8, 8, 4, 256


def main():
    rng = np.random.default_rng(33)
    def u(shape, fan_in):
        b = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-b, b, size=shape).astype(np.float32)
    inits = [
        numpy_helper.from_array(u((4, 1, 3, 3, 3), 27), "conv.weight"),
        numpy_helper.from_array(u((4,), 27), "conv.bias"),
        numpy_helper.from_array(u((4, 4, 2, 2, 2), 32), "up.weight"),
        numpy_helper.from_array(u((4,), 32), "up.bias"),
        numpy_helper.from_array(u((C, 192), 192), "fc.weight"),
        numpy_helper.from_array(u((C,), 192), "fc.bias"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv",
                         kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        helper.make_node("ConvTranspose", ["p", "up.weight", "up.bias"], ["u"], name="up",
                         kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        helper.make_node("Relu", ["u"], ["ur"], name="relu2"),
        helper.make_node("AveragePool", ["ur"], ["a"], name="avg", kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        helper.make_node("Flatten", ["a"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], name="loss",
                         reduction="mean"),
    ]
    graph = helper.make_graph(
        nodes, "conv3d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, 1, D, H, W]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [B])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, C])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="apexc-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "model.onnx"))

    x = rng.normal(0.0, 0.3, size=(N, 1, D, H, W)).astype(np.float32)
    labels = rng.integers(0, C, size=N).astype(np.int64)
    for i in range(N):
        qd, qh = divmod(int(labels[i]), 2)
        d = qd * 3 + rng.integers(0, 2)
        h = qh * 4 + rng.integers(0, 2)
        w = rng.integers(0, W - 2)
        x[i, 0, d:d + 2, h:h + 3, w:w + 3] += 2.0
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    np.save(os.path.join(HERE, "data", "x.npy"), x)
    np.save(os.path.join(HERE, "data", "labels.npy"), labels)


if __name__ == "__main__":
    main()
