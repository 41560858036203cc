#!/usr/bin/env python3
"""make_big_graph.py - large ONNX training graphs for the loader benchmark
(scripts/bench_load.sh, tests/bench/bench_load.c; issue 2) and the compile benchmark
(scripts/bench_compile.sh; issue 12).

    make_big_graph.py OUT.onnx [--blocks N] [--dim D]

x [8, D] float32 through N blocks of 4 nodes each,
    h = Relu(Mul(Add(MatMul(h, W_i [D, D]), b_i [D]), s_i [D]))
every 16th block followed by a shape subgraph that apexc folds at compile time
(Shape -> Gather(0) -> Unsqueeze -> Concat with a constant -> Reshape, 5 more nodes plus
2 Constant nodes), and a mean-squared loss (Sub, Mul, ReduceMean) at the end: loss is the
first output. Default N = 23000: 92000 block nodes + 1437 shape subgraphs = 99188 nodes
plus 2874 Constant nodes, about 100k in all; with D = 16, 23000 * (256 + 16 + 16) float
initializers (26 MB of data, a 32 MB file). Initializers are raw_data, as exporters write them.
Deterministic (fixed seed). Needs onnx and numpy.

    make_big_graph.py OUT.onnx --chain NODES [--dim D]

The compile benchmark's chain (scripts/bench_compile.sh; issue 12): x [8, D] through
(NODES - 1) / 3 blocks h = Relu(Add(MatMul(h, W_i [D, D]), b_i [D])), then
loss = ReduceMean(h) (all axes): NODES nodes in all (rounded down to 3k + 1).
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_chain(out, n_nodes, D, B, rng):
    nodes, inits, h = [], [], "x"
    for i in range((n_nodes - 1) // 3):
        inits += [numpy_helper.from_array((rng.uniform(-1, 1, size=(D, D)) / np.sqrt(D)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.uniform(-0.1, 0.1, size=D).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"mm{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"relu{i}")]
        h = f"relu{i}"
    nodes.append(helper.make_node("ReduceMean", [h], ["loss"], name="loss_mean", keepdims=0))
    graph = helper.make_graph(
        nodes, "chain", inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, D])],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="apexc-bench", producer_version="1")
    model.ir_version = 8
    onnx.save(model, out)
    print(f"{out}: {len(nodes)} nodes, {len(inits)} initializers")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, default=23000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--chain", type=int, metavar="NODES", help="MatMul+Add+Relu chain of NODES nodes")
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    D, B = a.dim, 8
    if a.chain:
        return write_chain(a.out, a.chain, D, B, rng)
    nodes, inits = [], []
    h = "x"
    for i in range(a.blocks):
        w = (rng.uniform(-1, 1, size=(D, D)) / np.sqrt(D)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.uniform(-0.1, 0.1, size=D).astype(np.float32), f"b{i}"),
                  numpy_helper.from_array(rng.uniform(0.9, 1.1, size=D).astype(np.float32), f"s{i}")]
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"mm{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add{i}"),
                  helper.make_node("Mul", [f"add{i}", f"s{i}"], [f"mul{i}"], name=f"mul{i}"),
                  helper.make_node("Relu", [f"mul{i}"], [f"relu{i}"], name=f"relu{i}")]
        h = f"relu{i}"
        if i % 16 == 15:
            p = f"shp{i}"
            nodes += [
                helper.make_node("Shape", [h], [p + "_shape"], name=p + "_shape"),
                helper.make_node("Constant", [], [p + "_zero"], name=p + "_zero",
                                 value=numpy_helper.from_array(np.array(0, np.int64))),
                helper.make_node("Gather", [p + "_shape", p + "_zero"], [p + "_n"], name=p + "_gather", axis=0),
                helper.make_node("Constant", [], [p + "_axes"], name=p + "_axes",
                                 value=numpy_helper.from_array(np.array([0], np.int64))),
                helper.make_node("Unsqueeze", [p + "_n", p + "_axes"], [p + "_n1"], name=p + "_unsqueeze"),
                helper.make_node("Concat", [p + "_n1", p + "_rest"], [p + "_target"], name=p + "_concat", axis=0),
                helper.make_node("Reshape", [h, p + "_target"], [p + "_out"], name=p + "_reshape"),
            ]
            inits.append(numpy_helper.from_array(np.array([D], np.int64), p + "_rest"))
            h = p + "_out"
    nodes += [helper.make_node("Sub", [h, "target"], ["diff"], name="loss_sub"),
              helper.make_node("Mul", ["diff", "diff"], ["sq"], name="loss_sq"),
              helper.make_node("ReduceMean", ["sq"], ["loss"], name="loss_mean", keepdims=0)]
    graph = helper.make_graph(
        nodes, "big_chain",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, D]),
                helper.make_tensor_value_info("target", TensorProto.FLOAT, [B, D])],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="apexc-bench", producer_version="1")
    model.ir_version = 8
    onnx.save(model, a.out)
    n_const = sum(1 for n in nodes if n.op_type == "Constant")
    print(f"{a.out}: {len(nodes)} nodes ({len(nodes) - n_const} + {n_const} Constant), "
          f"{len(inits)} initializers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
