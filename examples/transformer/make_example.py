#!/usr/bin/env python3
"""make_example.py - writes the tiny transformer LM example: model.onnx (forward + loss)
and data/*.npy.

A one-block GPT-style language model (vocab 64, sequence 16, d_model 32, 2 heads of 16,
MLP 32->128->32), written node by node the way torch.onnx.export (opset 17,
do_constant_folding=False) writes such a model, including the patterns apexc's precision
analysis must notice (DESIGN.md 8): a hand-written LayerNorm with Pow(x, 2) -> ReduceMean
and eps = 1e-12, and a causal mask holding -1e9. Constants are Constant nodes (not
initializers), so the float initializers are exactly the trainable parameters.

    tokens [8, 16] int64
    h0 = Gather(tok_emb [64, 32], tokens) + pos_emb [16, 32]                  [8, 16, 32]
    a  = LN1(h0)       LN(x) = (x - mean) / Sqrt(ReduceMean(Pow(x - mean, 2)) + 1e-12)
                               * gamma + beta    (mean over the last axis, keepdims)
    q, k, v = a @ Wq + bq, a @ Wk + bk, a @ Wv + bv                          [8, 16, 32]
      -> Reshape [8, 16, 2, 16] -> Transpose: q, v [8, 2, 16, 16], k^T [8, 2, 16, 16]
    p  = Softmax(MatMul(q, k^T) * 0.25 + mask)   mask [16, 16]: 0 on/below the diagonal,
                                                 -1e9 above (causal)         [8, 2, 16, 16]
    o  = Transpose(MatMul(p, v)) -> Reshape [8, 16, 32]; h1 = h0 + o @ Wo + bo
    m  = LN2(h1) @ W1 + b1 -> Gelu (Erf form: x * 0.5 * (1 + Erf(x / sqrt 2)))
    h2 = h1 + m @ W2 + b2
    logits = LNf(h2) @ Wout                                                  [8, 16, 64]
    loss = SoftmaxCrossEntropyLoss(Reshape(logits, [128, 64]), Reshape(labels, [128]))

Outputs: loss (first graph output: scalar, mean), logits [8, 16, 64].
Inputs: tokens int64 [8, 16], labels int64 [8, 16] (labels[t] = the token after
tokens[t]).

Data: 1024 sequences of 17 tokens from a noisy deterministic process: a fixed random
permutation P of the vocabulary; each next token is P[previous] with probability 0.9,
else uniform. tokens = seq[:, :16], labels = seq[:, 1:]. The best achievable mean loss
is the entropy of the next-token distribution, about 0.73 nats, far below
log(64) = 4.16, where an untrained model starts. data/tokens.npy and data/labels.npy
[1024, 16] int64.

Only onnx and numpy are needed to generate; onnxruntime (if installed) runs the model on
the first batch as a check and prints the loss. Deterministic: fixed seed.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 77
BATCH, SEQ, VOCAB, D, HEADS, FF, SAMPLES = 8, 16, 64, 32, 2, 128, 1024
HEAD_DIM = D // HEADS
P_FOLLOW = 0.9


class Builder:
    """Collects nodes, Constant nodes and initializers with readable names."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits = [], []

    def param(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def linear(self, name, fan_in, fan_out, bias=True):
        bound = 1.0 / np.sqrt(fan_in)
        w = self.param(name + ".weight", self.rng.uniform(-bound, bound, size=(fan_in, fan_out)))
        b = self.param(name + ".bias", self.rng.uniform(-bound, bound, size=(fan_out,))) if bias else None
        return w, b

    def const(self, name, arr):
        arr = np.asarray(arr)
        self.nodes.append(helper.make_node("Constant", [], [name], name=name,
                                           value=numpy_helper.from_array(arr, name)))
        return name

    def op(self, op_type, inputs, name, n_out=1, **attrs):
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def layer_norm(self, prefix, x):
        gamma = self.param(prefix + ".weight", np.ones(D))
        beta = self.param(prefix + ".bias", np.zeros(D))
        mean = self.op("ReduceMean", [x], prefix + "/mean", axes=[-1], keepdims=1)
        d = self.op("Sub", [x, mean], prefix + "/sub")
        two = self.const(prefix + "/two", np.array(2.0, np.float32))
        sq = self.op("Pow", [d, two], prefix + "/pow")
        var = self.op("ReduceMean", [sq], prefix + "/var", axes=[-1], keepdims=1)
        eps = self.const(prefix + "/eps", np.array(1e-12, np.float32))
        ve = self.op("Add", [var, eps], prefix + "/add_eps")
        std = self.op("Sqrt", [ve], prefix + "/sqrt")
        n = self.op("Div", [d, std], prefix + "/div")
        g = self.op("Mul", [n, gamma], prefix + "/mul_gamma")
        return self.op("Add", [g, beta], prefix + "/add_beta")

    def dense(self, prefix, x, fan_in, fan_out, bias=True):
        w, b = self.linear(prefix, fan_in, fan_out, bias)
        y = self.op("MatMul", [x, w], prefix + "/matmul")
        return self.op("Add", [y, b], prefix + "/add_bias") if bias else y

    def gelu(self, prefix, x):
        sqrt2 = self.const(prefix + "/sqrt2", np.array(np.sqrt(2.0), np.float32))
        one = self.const(prefix + "/one", np.array(1.0, np.float32))
        half = self.const(prefix + "/half", np.array(0.5, np.float32))
        t = self.op("Div", [x, sqrt2], prefix + "/div")
        e = self.op("Erf", [t], prefix + "/erf")
        a = self.op("Add", [e, one], prefix + "/add")
        m = self.op("Mul", [x, a], prefix + "/mul")
        return self.op("Mul", [m, half], prefix + "/mul_half")


def build_model(rng):
    b = Builder(rng)
    tok_emb = b.param("tok_emb.weight", rng.normal(0.0, 1.0, size=(VOCAB, D)))
    pos_emb = b.param("pos_emb.weight", rng.normal(0.0, 0.02, size=(SEQ, D)))
    emb = b.op("Gather", [tok_emb, "tokens"], "embed/gather", axis=0)
    h0 = b.op("Add", [emb, pos_emb], "embed/add_pos")

    # attention
    a = b.layer_norm("ln1", h0)
    heads_shape = b.const("attn/heads_shape", np.array([BATCH, SEQ, HEADS, HEAD_DIM], np.int64))
    q = b.op("Reshape", [b.dense("attn/q", a, D, D), heads_shape], "attn/q/reshape")
    k = b.op("Reshape", [b.dense("attn/k", a, D, D), heads_shape], "attn/k/reshape")
    v = b.op("Reshape", [b.dense("attn/v", a, D, D), heads_shape], "attn/v/reshape")
    q = b.op("Transpose", [q], "attn/q/transpose", perm=[0, 2, 1, 3])   # [B, H, T, hd]
    kt = b.op("Transpose", [k], "attn/k/transpose", perm=[0, 2, 3, 1])  # [B, H, hd, T]
    v = b.op("Transpose", [v], "attn/v/transpose", perm=[0, 2, 1, 3])   # [B, H, T, hd]
    s = b.op("MatMul", [q, kt], "attn/scores")                           # [B, H, T, T]
    scale = b.const("attn/scale", np.array(1.0 / np.sqrt(HEAD_DIM), np.float32))
    s = b.op("Mul", [s, scale], "attn/scale_mul")
    mask = np.triu(np.full((SEQ, SEQ), -1e9, np.float32), k=1)
    s = b.op("Add", [s, b.const("attn/causal_mask", mask)], "attn/mask_add")
    p = b.op("Softmax", [s], "attn/softmax", axis=-1)
    o = b.op("MatMul", [p, v], "attn/context")                           # [B, H, T, hd]
    o = b.op("Transpose", [o], "attn/context/transpose", perm=[0, 2, 1, 3])
    model_shape = b.const("attn/model_shape", np.array([BATCH, SEQ, D], np.int64))
    o = b.op("Reshape", [o, model_shape], "attn/context/reshape")
    h1 = b.op("Add", [h0, b.dense("attn/proj", o, D, D)], "attn/residual")

    # MLP
    m = b.layer_norm("ln2", h1)
    m = b.gelu("mlp/gelu", b.dense("mlp/fc1", m, D, FF))
    h2 = b.op("Add", [h1, b.dense("mlp/fc2", m, FF, D)], "mlp/residual")

    # head and loss
    f = b.layer_norm("ln_f", h2)
    logits = b.op("MatMul", [f, b.linear("head", D, VOCAB, bias=False)[0]], "logits")
    flat_shape = b.const("loss/logits_shape", np.array([BATCH * SEQ, VOCAB], np.int64))
    label_shape = b.const("loss/labels_shape", np.array([BATCH * SEQ], np.int64))
    flat = b.op("Reshape", [logits, flat_shape], "loss/logits_flat")
    lab = b.op("Reshape", ["labels", label_shape], "loss/labels_flat")
    b.nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [flat, lab], ["loss"], name="loss",
                                    reduction="mean"))

    graph = helper.make_graph(
        b.nodes, "tiny_transformer",
        inputs=[helper.make_tensor_value_info("tokens", TensorProto.INT64, [BATCH, SEQ]),
                helper.make_tensor_value_info("labels", TensorProto.INT64, [BATCH, SEQ])],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                 helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, SEQ, VOCAB])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="apexc-examples", producer_version="1")
    model.ir_version = 8
    return model


def make_data(rng):
    perm = rng.permutation(VOCAB)
    seq = np.empty((SAMPLES, SEQ + 1), np.int64)
    seq[:, 0] = rng.integers(0, VOCAB, size=SAMPLES)
    for t in range(1, SEQ + 1):
        follow = rng.random(SAMPLES) < P_FOLLOW
        seq[:, t] = np.where(follow, perm[seq[:, t - 1]], rng.integers(0, VOCAB, size=SAMPLES))
    return {"tokens": seq[:, :SEQ].copy(), "labels": seq[:, 1:].copy()}


def entropy_floor():
    """Mean next-token entropy (nats) of the process: the loss a perfect model reaches."""
    p_hit = P_FOLLOW + (1 - P_FOLLOW) / VOCAB
    p_miss = (1 - P_FOLLOW) / VOCAB
    return -(p_hit * np.log(p_hit) + (VOCAB - 1) * p_miss * np.log(p_miss))


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
    print(f"transformer: onnxruntime loss on the first batch = {float(loss):.6f} "
          f"(log(64) = {np.log(VOCAB):.6f}, entropy floor = {entropy_floor():.3f}); "
          f"logits {list(logits.shape)}")


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
