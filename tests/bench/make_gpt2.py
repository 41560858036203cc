#!/usr/bin/env python3
"""make_gpt2.py - a GPT-2-124M-shaped decoder with a cross-entropy loss, random weights, for
the compile benchmark (scripts/bench_compile.sh; issue 12).

    make_gpt2.py OUT.onnx [--layers 12] [--d 768] [--heads 12] [--vocab 50257] [--seq 128]
                          [--batch 4] [--ctx 1024] [--tied] [--forward FWD.onnx]

Written node by node the way torch.onnx.export (opset 17) writes Hugging Face's GPT2LMHeadModel:

    tokens, labels [B, T] int64
    h = Gather(wte [V, d], tokens) + Gather(wpe [ctx, d], positions [T])
    per layer l (pre-norm):
      a = LayerNormalization(h) @ c_attn [d, 3d] + b  -> Split q, k, v
          -> Reshape [B, T, H, d/H] -> Transpose (k to [B, H, d/H, T])
      s = Softmax(MatMul(q, k^T) * 1/sqrt(d/H) + mask)   mask [T, T]: 0 on/below the
          diagonal, -1e4 above (GPT-2's causal mask)
      h = h + Reshape(Transpose(MatMul(s, v))) @ c_proj [d, d] + b
      m = Gelu(LayerNormalization(h) @ c_fc [d, 4d] + b)   (Erf form, as nn.GELU exports)
      h = h + m @ c_proj [4d, d] + b
    logits = LayerNormalization(h) @ lm_head [d, V]     (--tied: @ Transpose(wte))
    loss = SoftmaxCrossEntropyLoss(Reshape(logits, [B T, V]), Reshape(labels, [B T]))

Outputs: loss (first), logits. Defaults give GPT-2 small's 124.4M parameters plus an untied
lm_head (38.6M): 163.0M, 652 MB of fp32 initializers (the issue's figure); --tied shares wte.
Weights ~ N(0, 0.02) (LayerNorm gains 1, biases 0), fixed seed. --forward also writes the
model without the loss (logits only), for a peer that builds an inference session.
Constants are Constant nodes, so the float initializers are exactly the parameters. Needs onnx
and numpy.
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n_params = rng, [], [], 0

    def param(self, name, arr):
        arr = np.asarray(arr, np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        self.n_params += arr.size
        return name

    def normal(self, name, shape):
        return self.param(name, (self.rng.standard_normal(shape, dtype=np.float32) * 0.02))

    def const(self, name, arr):
        self.nodes.append(helper.make_node("Constant", [], [name], name=name,
                                           value=numpy_helper.from_array(np.asarray(arr), name)))
        return name

    def op(self, op_type, inputs, name, n_out=1, **attrs):
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def layer_norm(self, prefix, x, d):
        g = self.param(prefix + ".weight", np.ones(d))
        b = self.param(prefix + ".bias", np.zeros(d))
        return self.op("LayerNormalization", [x, g, b], prefix, axis=-1, epsilon=1e-5)

    def linear(self, prefix, x, fan_in, fan_out):
        w = self.normal(prefix + ".weight", (fan_in, fan_out))
        b = self.param(prefix + ".bias", np.zeros(fan_out))
        y = self.op("MatMul", [x, w], prefix + "/matmul")
        return self.op("Add", [y, b], prefix + "/add_bias")

    def gelu(self, prefix, x):
        t = self.op("Div", [x, self.const(prefix + "/sqrt2", np.array(np.sqrt(2.0), np.float32))],
                    prefix + "/div")
        e = self.op("Erf", [t], prefix + "/erf")
        a = self.op("Add", [e, self.const(prefix + "/one", np.array(1.0, np.float32))], prefix + "/add")
        m = self.op("Mul", [x, a], prefix + "/mul")
        return self.op("Mul", [m, self.const(prefix + "/half", np.array(0.5, np.float32))],
                       prefix + "/mul_half")


def build(a, with_loss):
    rng = np.random.default_rng(124)
    B, T, d, H, V = a.batch, a.seq, a.d, a.heads, a.vocab
    hd = d // H
    g = Graph(rng)
    wte = g.normal("transformer.wte.weight", (V, d))
    wpe = g.normal("transformer.wpe.weight", (a.ctx, d))
    pos = g.const("positions", np.arange(T, dtype=np.int64))
    h = g.op("Add", [g.op("Gather", [wte, "tokens"], "wte/gather", axis=0),
                     g.op("Gather", [wpe, pos], "wpe/gather", axis=0)], "embed/add")
    heads = g.const("heads_shape", np.array([B, T, H, hd], np.int64))
    model = g.const("model_shape", np.array([B, T, d], np.int64))
    split = g.const("qkv_split", np.array([d, d, d], np.int64))
    scale = g.const("attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
    mask = g.const("causal_mask", np.triu(np.full((T, T), -1e4, np.float32), k=1))
    for l in range(a.layers):
        p = f"transformer.h.{l}"
        x = g.layer_norm(p + ".ln_1", h, d)
        qkv = g.linear(p + ".attn.c_attn", x, d, 3 * d)
        q, k, v = g.op("Split", [qkv, split], p + ".attn/split", n_out=3, axis=-1)
        q = g.op("Transpose", [g.op("Reshape", [q, heads], p + ".attn/q/reshape")],
                 p + ".attn/q/transpose", perm=[0, 2, 1, 3])
        kt = g.op("Transpose", [g.op("Reshape", [k, heads], p + ".attn/k/reshape")],
                  p + ".attn/k/transpose", perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [v, heads], p + ".attn/v/reshape")],
                 p + ".attn/v/transpose", perm=[0, 2, 1, 3])
        s = g.op("Mul", [g.op("MatMul", [q, kt], p + ".attn/scores"), scale], p + ".attn/scale")
        s = g.op("Softmax", [g.op("Add", [s, mask], p + ".attn/mask")], p + ".attn/softmax", axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [s, v], p + ".attn/context")],
                 p + ".attn/context/transpose", perm=[0, 2, 1, 3])
        o = g.op("Reshape", [o, model], p + ".attn/context/reshape")
        h = g.op("Add", [h, g.linear(p + ".attn.c_proj", o, d, d)], p + "/residual_attn")
        m = g.gelu(p + ".mlp/gelu", g.linear(p + ".mlp.c_fc", g.layer_norm(p + ".ln_2", h, d), d, 4 * d))
        h = g.op("Add", [h, g.linear(p + ".mlp.c_proj", m, 4 * d, d)], p + "/residual_mlp")
    f = g.layer_norm("transformer.ln_f", h, d)
    if a.tied:
        head = g.op("Transpose", [wte], "lm_head/transpose", perm=[1, 0])
    else:
        head = g.normal("lm_head.weight", (d, V))
    logits = g.op("MatMul", [f, head], "logits")
    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT64, [B, T])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])]
    if with_loss:
        flat = g.op("Reshape", [logits, g.const("logits_shape", np.array([B * T, V], np.int64))],
                    "loss/logits_flat")
        lab = g.op("Reshape", ["labels", g.const("labels_shape", np.array([B * T], np.int64))],
                   "loss/labels_flat")
        g.op("SoftmaxCrossEntropyLoss", [flat, lab], "loss", reduction="mean")
        inputs.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [B, T]))
        outputs.insert(0, helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    graph = helper.make_graph(g.nodes, "gpt2", inputs, outputs, g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="apexc-bench", producer_version="1")
    m.ir_version = 8
    return m, g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--forward", help="also write the model without the loss here")
    a = ap.parse_args()
    m, g = build(a, True)
    onnx.save(m, a.out)
    print(f"{a.out}: {len(g.nodes)} nodes, {len(g.inits)} initializers, {g.n_params} parameters "
          f"({4 * g.n_params} bytes fp32)")
    if a.forward:
        onnx.save(build(a, False)[0], a.forward)
    return 0


if __name__ == "__main__":
    sys.exit(main())
