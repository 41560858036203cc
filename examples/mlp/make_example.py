#!/usr/bin/env python3
"""make_example.py - writes the MLP example: model.onnx (forward + loss) and data/*.npy.

A 3-layer perceptron classifying 64-D points into 10 classes, exported the way
torch.onnx.export writes an nn.Sequential with its loss (opset 17, ir_version 8):

    x [32, 64] -> Gemm(64->128) -> Relu -> Gemm(128->128) -> Relu -> Gemm(128->10) = logits
    loss = SoftmaxCrossEntropyLoss(logits, labels [32], reduction=mean)   (scalar, output 0)

Outputs: loss (first graph output: the training loss), logits [32, 10].
Trainable parameters: the six float initializers fcK.weight [out, in] (Gemm transB=1, as
PyTorch's Linear exports) and fcK.bias [out]; PyTorch's default init
U(-1/sqrt(fan_in), 1/sqrt(fan_in)).

Data: 2048 samples from 10 Gaussian clusters in 64-D (the label is the cluster), centers
drawn once, unit-variance noise per coordinate; classes are separable but the network has
to learn the 10 centre directions, so the loss starts near log(10) = 2.30 and drops in a
few hundred steps. data/x.npy [2048, 64] float32, data/labels.npy [2048] int64.

Only onnx and numpy are needed to generate; onnxruntime (if installed) runs the model on
the first batch as a check and prints the loss. Deterministic: fixed seed, rerunning
rewrites byte-identical files.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
BATCH, IN, HIDDEN, CLASSES, SAMPLES = 32, 64, 128, 10, 2048


def linear_params(rng, name, fan_in, fan_out):
    bound = 1.0 / np.sqrt(fan_in)
    w = rng.uniform(-bound, bound, size=(fan_out, fan_in)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
    return [numpy_helper.from_array(w, name + ".weight"), numpy_helper.from_array(b, name + ".bias")]


def build_model(rng):
    inits = (linear_params(rng, "fc1", IN, HIDDEN) + linear_params(rng, "fc2", HIDDEN, HIDDEN)
             + linear_params(rng, "fc3", HIDDEN, CLASSES))
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["fc1_out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1_out"], ["relu1_out"], name="relu1"),
        helper.make_node("Gemm", ["relu1_out", "fc2.weight", "fc2.bias"], ["fc2_out"], name="fc2", transB=1),
        helper.make_node("Relu", ["fc2_out"], ["relu2_out"], name="relu2"),
        helper.make_node("Gemm", ["relu2_out", "fc3.weight", "fc3.bias"], ["logits"], name="fc3", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], name="loss",
                         reduction="mean"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN]),
                helper.make_tensor_value_info("labels", TensorProto.INT64, [BATCH])],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                 helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, CLASSES])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="apexc-examples", producer_version="1")
    model.ir_version = 8
    return model


def make_data(rng):
    centers = rng.normal(0.0, 1.0, size=(CLASSES, IN)).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=SAMPLES).astype(np.int64)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(SAMPLES, IN)).astype(np.float32)
    return {"x": x.astype(np.float32), "labels": labels}


def check_with_ort(model_path, data):
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: skipped the run check")
        return
    # Graph optimizations off: onnxruntime 1.32's duplicate-initializer elimination merges
    # the CNN's all-zero/all-one BN running statistics with the BN bias/scale and then gets
    # training-mode BatchNormalization wrong (loss 2.324142 instead of 2.324356).
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    feeds = {i.name: data[i.name][:BATCH] for i in sess.get_inputs()}
    loss, logits = sess.run(["loss", "logits"], feeds)
    assert loss.shape == () and np.isfinite(loss), loss
    print(f"mlp: onnxruntime loss on the first batch = {float(loss):.6f} "
          f"(log(10) = {np.log(10):.6f}); logits {list(logits.shape)}")


def main():
    rng = np.random.default_rng(SEED)
    model = build_model(rng)
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(HERE, "model.onnx")
    onnx.save(model, path)
    data = make_data(rng)
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    for name, arr in data.items():
        np.save(os.path.join(HERE, "data", name + ".npy"), arr)
    print(f"wrote {path} and data/{{{','.join(data)}}}.npy ({SAMPLES} samples)")
    check_with_ort(path, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
