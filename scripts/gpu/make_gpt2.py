#!/usr/bin/env python3
"""make_gpt2.py - a GPT-2-shaped training graph (ONNX) and token data for the device kit's
timing stage (scripts/gpu/run.sh, stage gpt2).

    make_gpt2.py OUT_DIR [--layers 12] [--d 768] [--heads 12] [--vocab 50257] [--seq 1024]
                         [--batch 8] [--samples 16]

Writes OUT_DIR/model.onnx and OUT_DIR/data/{tokens,labels}.npy. The model is the GPT-2
architecture written the way torch.onnx.export writes it (opset 17): token + position
embeddings, per block LayerNormalization -> fused QKV MatMul -> causal attention (scores *
1/sqrt(hd) + mask, Softmax) -> projection, residual, LayerNormalization -> MLP 4d with the
Erf Gelu, residual; final LayerNormalization, the head tied to no weight (its own [d, vocab]
matrix), SoftmaxCrossEntropyLoss. Defaults: GPT-2 124M (12 layers, d 768, 12 heads, vocab
50257, context 1024) - 163M parameters with the untied head.

The weights are for timing, not learning: every initializer repeats one random block of 4096
values (scaled per tensor like GPT-2's init), so the file (about 650 MB for 124M) compresses
to a few MB (the bundle carries it gzipped). Needs onnx and numpy. Also prints the parameter
count and the FLOPs of one training step (6 N T + the attention's 12 L T^2 d per sequence,
the usual estimate) as JSON on stdout.
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--samples", type=int, default=16)
    a = ap.parse_args()
    L, D, H, V, T, B = a.layers, a.d, a.heads, a.vocab, a.seq, a.batch
    hd = D // H
    rng = np.random.default_rng(124)
    block = rng.standard_normal(4096).astype(np.float32)
    nodes, inits = [], []
    n_params = 0

    def param(name, shape, std):
        nonlocal n_params
        n = int(np.prod(shape))
        n_params += n
        v = np.resize(block, n).reshape(shape) * np.float32(std)
        inits.append(numpy_helper.from_array(v.astype(np.float32), name))
        return name

    def const(name, arr):
        nodes.append(helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.asarray(arr), name)))
        return name

    def op(t, ins, name, **kw):
        nodes.append(helper.make_node(t, ins, [name], name=name, **kw))
        return name

    def ln(prefix, x):
        g = param(prefix + ".weight", [D], 0.0)
        inits[-1] = numpy_helper.from_array(np.ones(D, np.float32), prefix + ".weight")
        b = param(prefix + ".bias", [D], 0.0)
        return op("LayerNormalization", [x, g, b], prefix, axis=-1, epsilon=1e-5)

    def dense(prefix, x, fi, fo, std=0.02):
        w = param(prefix + ".weight", [fi, fo], std)
        b = param(prefix + ".bias", [fo], 0.0)
        return op("Add", [op("MatMul", [x, w], prefix + "/matmul"), b], prefix + "/add")

    tok = param("wte", [V, D], 0.02)
    pos = param("wpe", [T, D], 0.01)
    h = op("Add", [op("Gather", [tok, "tokens"], "embed/gather", axis=0), pos], "embed/add")
    mask = const("causal_mask", np.triu(np.full((T, T), -1e4, np.float32), k=1))
    scale = const("attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
    heads = const("heads_shape", np.array([B, T, 3, H, hd], np.int64))
    model_shape = const("model_shape", np.array([B, T, D], np.int64))
    sqrt2, one, half = const("sqrt2", np.array(np.sqrt(2.0), np.float32)), const("one", np.array(1.0, np.float32)), const("half", np.array(0.5, np.float32))
    for i in range(L):
        p = f"h{i}"
        x = ln(p + ".ln_1", h)
        qkv = op("Reshape", [dense(p + ".attn.c_attn", x, D, 3 * D), heads], p + "/qkv_reshape")
        qkv = op("Transpose", [qkv], p + "/qkv_t", perm=[2, 0, 3, 1, 4])  # [3, B, H, T, hd]
        q = op("Gather", [qkv, const(p + "/i0", np.array(0, np.int64))], p + "/q", axis=0)
        k = op("Gather", [qkv, const(p + "/i1", np.array(1, np.int64))], p + "/k", axis=0)
        v = op("Gather", [qkv, const(p + "/i2", np.array(2, np.int64))], p + "/v", axis=0)
        kt = op("Transpose", [k], p + "/kt", perm=[0, 1, 3, 2])
        s = op("Add", [op("Mul", [op("MatMul", [q, kt], p + "/scores"), scale], p + "/scale"), mask], p + "/mask")
        o = op("MatMul", [op("Softmax", [s], p + "/softmax", axis=-1), v], p + "/context")
        o = op("Reshape", [op("Transpose", [o], p + "/context_t", perm=[0, 2, 1, 3]), model_shape], p + "/context_r")
        h = op("Add", [h, dense(p + ".attn.c_proj", o, D, D, 0.02 / np.sqrt(2 * L))], p + "/res1")
        m = dense(p + ".mlp.c_fc", ln(p + ".ln_2", h), D, 4 * D)
        e = op("Erf", [op("Div", [m, sqrt2], p + "/gelu_div")], p + "/gelu_erf")
        m = op("Mul", [op("Mul", [m, op("Add", [e, one], p + "/gelu_add")], p + "/gelu_mul"), half], p + "/gelu")
        h = op("Add", [h, dense(p + ".mlp.c_proj", m, 4 * D, D, 0.02 / np.sqrt(2 * L))], p + "/res2")
    f = ln("ln_f", h)
    logits = op("MatMul", [f, param("lm_head", [D, V], 0.02)], "logits")
    flat = op("Reshape", [logits, const("logits_shape", np.array([B * T, V], np.int64))], "logits_flat")
    lab = op("Reshape", ["labels", const("labels_shape", np.array([B * T], np.int64))], "labels_flat")
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [flat, lab], ["loss"], name="loss", reduction="mean"))
    g = helper.make_graph(nodes, "gpt2", [helper.make_tensor_value_info("tokens", TensorProto.INT64, [B, T]),
                                          helper.make_tensor_value_info("labels", TensorProto.INT64, [B, T])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="apexc-gpu-kit")
    model.ir_version = 8
    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    onnx.save(model, os.path.join(a.out, "model.onnx"))
    seq = rng.integers(0, V, size=(a.samples, T + 1), dtype=np.int64)
    np.save(os.path.join(a.out, "data", "tokens.npy"), seq[:, :T].copy())
    np.save(os.path.join(a.out, "data", "labels.npy"), seq[:, 1:].copy())
    flops = 6.0 * n_params * B * T + 12.0 * L * T * T * D * B
    print(json.dumps({"params": n_params, "layers": L, "d": D, "heads": H, "vocab": V, "seq": T, "batch": B,
                      "tokens_per_step": B * T, "flops_per_step": flops}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
