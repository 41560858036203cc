#!/usr/bin/env python3
"""make_example.py - writes the CNN example: model.onnx (forward + loss) and data/*.npy.

A small convolutional classifier with BatchNormalization in training mode, exported the
way torch.onnx.export(..., training=TrainingMode.TRAINING) writes it (opset 17,
ir_version 8):

    x [16, 1, 16, 16]
      -> Conv(1->8, 3x3, pad 1) -> BatchNormalization(training_mode=1) -> Relu
      -> MaxPool(2x2, stride 2)                                     [16, 8, 8, 8]
      -> Conv(8->16, 3x3, pad 1) -> BatchNormalization(training_mode=1) -> Relu
      -> GlobalAveragePool -> Flatten                               [16, 16]
      -> Gemm(16->10) = logits                                      [16, 10]
    loss = SoftmaxCrossEntropyLoss(logits, labels [16], reduction=mean)  (scalar, output 0)

Outputs: loss (first graph output), logits [16, 10].
Trainable parameters: conv weights/biases, BN scale (bnK.weight) and bias (bnK.bias), the
Gemm weight [10, 16] (transB=1) and bias. BN running statistics bnK.running_mean /
bnK.running_var are float initializers too (as exporters write them); each BN node's
outputs 1 and 2 (the updated running statistics) are left dangling as exporters do, and
apexc binds them back to inputs 3 and 4 after each step (DESIGN.md 2).

Data: 1024 synthetic 16x16 images, one shape per image at a random position with random
contrast on a noisy background; the label is the shape (10 classes): horizontal bar,
vertical bar, diagonal, anti-diagonal, plus, cross, filled square, hollow square,
Gaussian blob, two parallel bars. data/x.npy [1024, 1, 16, 16] float32,
data/labels.npy [1024] int64.

Only onnx and numpy are needed to generate; onnxruntime (if installed) runs the model on
the first batch as a check and prints the loss. Deterministic: fixed seed.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 2024
BATCH, SIZE, CLASSES, SAMPLES = 16, 16, 10, 1024
CLASS_NAMES = ["hbar", "vbar", "diag", "antidiag", "plus", "cross", "square", "ring", "blob",
               "twobars"]


def conv_params(rng, name, cin, cout, k):
    bound = 1.0 / np.sqrt(cin * k * k)
    w = rng.uniform(-bound, bound, size=(cout, cin, k, k)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(cout,)).astype(np.float32)
    return [numpy_helper.from_array(w, name + ".weight"), numpy_helper.from_array(b, name + ".bias")]


def bn_params(name, c):
    return [numpy_helper.from_array(np.ones(c, np.float32), name + ".weight"),
            numpy_helper.from_array(np.zeros(c, np.float32), name + ".bias"),
            numpy_helper.from_array(np.zeros(c, np.float32), name + ".running_mean"),
            numpy_helper.from_array(np.ones(c, np.float32), name + ".running_var")]


def bn_node(name, x, y):
    # Outputs 1 and 2 (updated running mean / var) are named but not consumed, like
    # PyTorch's exporter writes them in training mode.
    return helper.make_node(
        "BatchNormalization",
        [x, name + ".weight", name + ".bias", name + ".running_mean", name + ".running_var"],
        [y, name + ".running_mean_out", name + ".running_var_out"],
        name=name, epsilon=1e-5, momentum=0.9, training_mode=1)


def build_model(rng):
    fc_bound = 1.0 / np.sqrt(16)
    inits = (conv_params(rng, "conv1", 1, 8, 3) + bn_params("bn1", 8)
             + conv_params(rng, "conv2", 8, 16, 3) + bn_params("bn2", 16)
             + [numpy_helper.from_array(
                    rng.uniform(-fc_bound, fc_bound, size=(CLASSES, 16)).astype(np.float32), "fc.weight"),
                numpy_helper.from_array(
                    rng.uniform(-fc_bound, fc_bound, size=(CLASSES,)).astype(np.float32), "fc.bias")])
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["conv1_out"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
        bn_node("bn1", "conv1_out", "bn1_out"),
        helper.make_node("Relu", ["bn1_out"], ["relu1_out"], name="relu1"),
        helper.make_node("MaxPool", ["relu1_out"], ["pool1_out"], name="pool1",
                         kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=0),
        helper.make_node("Conv", ["pool1_out", "conv2.weight", "conv2.bias"], ["conv2_out"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
        bn_node("bn2", "conv2_out", "bn2_out"),
        helper.make_node("Relu", ["bn2_out"], ["relu2_out"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["relu2_out"], ["gap_out"], name="gap"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat_out", "fc.weight", "fc.bias"], ["logits"], name="fc",
                         alpha=1.0, beta=1.0, transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], name="loss",
                         reduction="mean"),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 1, SIZE, SIZE]),
                helper.make_tensor_value_info("labels", TensorProto.INT64, [BATCH])],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                 helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, CLASSES])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="apexc-examples", producer_version="1")
    model.ir_version = 8
    return model


def draw(rng, cls):
    """One 16x16 image of class cls: the shape at a random offset, random contrast."""
    img = np.zeros((SIZE, SIZE), np.float32)
    r, c = rng.integers(4, SIZE - 4, size=2)  # centre
    half = int(rng.integers(3, 5))            # half-length of bars
    idx = np.arange(-half, half + 1)
    if cls == 0:
        img[r, c + idx] = 1
    elif cls == 1:
        img[r + idx, c] = 1
    elif cls == 2:
        img[r + idx, c + idx] = 1
    elif cls == 3:
        img[r + idx, c - idx] = 1
    elif cls == 4:
        img[r, c + idx] = 1
        img[r + idx, c] = 1
    elif cls == 5:
        img[r + idx, c + idx] = 1
        img[r + idx, c - idx] = 1
    elif cls == 6:
        img[r - 2:r + 2, c - 2:c + 2] = 1
    elif cls == 7:
        img[r - 3:r + 4, c - 3:c + 4] = 1
        img[r - 2:r + 3, c - 2:c + 3] = 0
    elif cls == 8:
        yy, xx = np.mgrid[0:SIZE, 0:SIZE]
        img = np.exp(-((yy - r) ** 2 + (xx - c) ** 2) / (2 * 1.5 ** 2)).astype(np.float32)
    else:
        img[r - 2, c + idx] = 1
        img[r + 2, c + idx] = 1
    contrast = rng.uniform(0.7, 1.3)
    return contrast * img + rng.normal(0.0, 0.2, size=(SIZE, SIZE)).astype(np.float32)


def make_data(rng):
    labels = rng.integers(0, CLASSES, size=SAMPLES).astype(np.int64)
    x = np.stack([draw(rng, int(k)) for k in labels])[:, None, :, :].astype(np.float32)
    return {"x": x, "labels": labels}


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
    print(f"cnn: onnxruntime loss on the first batch = {float(loss):.6f} "
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
