#!/usr/bin/env python3
"""make_two_losses.py OUT_DIR [TARGET_SCALE] - a two-head model for apexc --loss A,B.

    x [16, 8] -> Gemm(8->16) -> Relu = h
    cls: Gemm(h, 16->4) = logits; loss_cls = SoftmaxCrossEntropyLoss(logits, labels)
    reg: Gemm(h, 16->1) = pred;   loss_reg = ReduceMean((pred - t)^2)
    total = loss_cls + loss_reg

Outputs: loss_cls, loss_reg, total (a compile with --loss total is the single-loss twin of
--loss loss_cls,loss_reg). Data in OUT_DIR/data: x.npy [256, 8], labels.npy [256] int64,
t.npy [256, 1]; the regression target is multiplied by TARGET_SCALE (default 1): with 100,
loss_reg's half-precision gradients overflow at the default scale 2^16 while loss_cls's do
not (runtime/two_losses_test.sh). Deterministic (fixed seed)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
tscale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
rng = np.random.default_rng(7)
B, IN, H, C, N = 16, 8, 16, 4, 256


def lin(name, fan_in, fan_out):
    b = 1.0 / np.sqrt(fan_in)
    return [numpy_helper.from_array(rng.uniform(-b, b, (fan_out, fan_in)).astype(np.float32), name + ".weight"),
            numpy_helper.from_array(rng.uniform(-b, b, (fan_out,)).astype(np.float32), name + ".bias")]


inits = lin("body", IN, H) + lin("cls", H, C) + lin("reg", H, 1)
nodes = [
    helper.make_node("Gemm", ["x", "body.weight", "body.bias"], ["body_out"], name="body", transB=1),
    helper.make_node("Relu", ["body_out"], ["h"], name="relu"),
    helper.make_node("Gemm", ["h", "cls.weight", "cls.bias"], ["logits"], name="cls", transB=1),
    helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss_cls"], name="xent", reduction="mean"),
    helper.make_node("Gemm", ["h", "reg.weight", "reg.bias"], ["pred"], name="reg", transB=1),
    helper.make_node("Sub", ["pred", "t"], ["err"], name="err"),
    helper.make_node("Mul", ["err", "err"], ["sq"], name="sq"),
    helper.make_node("ReduceMean", ["sq"], ["loss_reg"], name="mse", keepdims=0),
    helper.make_node("Add", ["loss_cls", "loss_reg"], ["total"], name="total"),
]
graph = helper.make_graph(
    nodes, "two_losses",
    inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, IN]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, [B]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [B, 1])],
    outputs=[helper.make_tensor_value_info("loss_cls", TensorProto.FLOAT, []),
             helper.make_tensor_value_info("loss_reg", TensorProto.FLOAT, []),
             helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
    initializer=inits)
model = helper.make_model(graph, producer_name="make_two_losses", opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
os.makedirs(out + "/data", exist_ok=True)
onnx.save(model, out + "/model.onnx")
x = rng.normal(size=(N, IN)).astype(np.float32)
labels = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0).astype(np.int64)
t = (x[:, 2:3] * 0.5 + x[:, 3:4] * tscale / max(tscale, 1.0)) * tscale
np.save(out + "/data/x.npy", x)
np.save(out + "/data/labels.npy", labels)
np.save(out + "/data/t.npy", t.astype(np.float32))
