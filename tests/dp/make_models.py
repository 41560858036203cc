#!/usr/bin/env python3
"""Writes the data-parallel test models: the example MLP and CNN with a symbolic batch.

    scripts/py tests/dp/make_models.py        (from the repository root)

tests/dp/mlp_n.onnx and tests/dp/cnn_n.onnx are examples/mlp/model.onnx and
examples/cnn/model.onnx with the first dimension of every batch-dependent graph input and
output renamed to the symbolic dim "N" (nothing else changes: same nodes, same initializers,
so the same initial weights). apexc binds it with --dim N=B, which lets the tests compile the
same model for K ranks with batch B each and for one process with batch K*B (DESIGN.md 13:
K ranks reproduce one process with a K-times larger batch). Needs only the onnx package;
deterministic (rerunning rewrites the files byte for byte).
"""
import os

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def symbolic_batch(src, dst):
    m = onnx.load(src)
    g = m.graph
    batch = None
    for vi in list(g.input) + list(g.output):
        if vi.name in {i.name for i in g.initializer}:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == 0:
            continue  # the scalar loss
        if batch is None:
            batch = dims[0].dim_value
        assert dims[0].dim_value == batch, (vi.name, dims[0])
        dims[0].Clear()
        dims[0].dim_param = "N"
    del g.value_info[:]
    onnx.checker.check_model(m)
    onnx.save(m, dst)
    print(f"{dst}: batch {batch} -> N")


if __name__ == "__main__":
    for name in ("mlp", "cnn"):
        symbolic_batch(os.path.join(ROOT, "examples", name, "model.onnx"), os.path.join(HERE, f"{name}_n.onnx"))
