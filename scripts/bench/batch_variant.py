#!/usr/bin/env python3
"""batch_variant.py - an example model with a larger batch, for benchmarks whose small
example batches would be dominated by per-kernel overhead (scripts/bench_infer.sh,
scripts/bench_train.sh).

    batch_variant.py MODEL BATCH OUT_DIR

MODEL is mlp or cnn (their graphs have no batch-sized constants; the transformer's Reshape
shapes hold the batch). Writes OUT_DIR/model.onnx (examples/MODEL/model.onnx with the batch
dimension of every graph input and output set to BATCH, intermediate shapes dropped),
OUT_DIR/test_data_set_0/input_K.pb (the first BATCH samples, ONNX test-data layout, like
tests/fixtures/ort) and OUT_DIR/data/NAME.npy (the example's data, for apexrun --data).
Needs onnx and numpy.
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def main(argv):
    if len(argv) != 4 or argv[1] not in ("mlp", "cnn"):
        sys.exit(__doc__)
    name, batch, out = argv[1], int(argv[2]), argv[3]
    ex = os.path.join(ROOT, "examples", name)
    model = onnx.load(os.path.join(ex, "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) > 0:
            dims[0].dim_value = batch
    del model.graph.value_info[:]
    onnx.checker.check_model(model, full_check=True)
    ds = os.path.join(out, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    onnx.save(model, os.path.join(out, "model.onnx"))
    k = 0
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        arr = np.load(os.path.join(ex, "data", vi.name + ".npy"))
        if arr.shape[0] < batch:
            sys.exit(f"{name}: {arr.shape[0]} samples, fewer than the batch {batch}")
        with open(os.path.join(ds, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr[:batch], vi.name).SerializeToString())
        k += 1
    shutil.copytree(os.path.join(ex, "data"), os.path.join(out, "data"), dirs_exist_ok=True)
    print(f"{name} with batch {batch}: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
