#!/usr/bin/env python3
"""make_bad_corpus.py - writes the bad-input corpus for the ONNX loader into tests/corpus/bad/.

Each file is a model (or not even a model) that apexc must reject with a clean one-line error,
exit code 2, and no crash. MANIFEST.tsv lists: file, stage (load: rejected by the loader;
infer: loads, rejected by shape inference), and a substring the message must contain.
compiler/onnx_load_test.cc checks every stage=load row; the fuzzer seeds from these files.

Usage: scripts/py tests/corpus/make_bad_corpus.py   (needs the onnx PyPI package)
"""
import os
import random
import struct

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "bad")
F = TensorProto.FLOAT
rows = []


def model(nodes, inputs, outputs, inits=(), ir=8, opset=17, value_info=(), extra_opsets=()):
    g = helper.make_graph(list(nodes), "bad", list(inputs), list(outputs), list(inits),
                          value_info=list(value_info))
    ops = [helper.make_opsetid("", opset)] + list(extra_opsets)
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = ir
    return m


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def relu_model(**kw):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2, 3])],
                 [vi("y", [2, 3])], **kw)


def tensor(name, dims, t=F, raw=None, floats=None):
    tp = TensorProto()
    tp.name = name
    tp.data_type = t
    tp.dims.extend(dims)
    if raw is not None:
        tp.raw_data = raw
    if floats is not None:
        tp.float_data.extend(floats)
    return tp


def add_with_init(init, **kw):
    """y = x + w where w is the given initializer."""
    return model([helper.make_node("Add", ["x", init.name], ["y"], name="add")],
                 [vi("x", [2, 3])], [vi("y", [2, 3])], inits=[init], **kw)


def external(name, dims, location, offset=None, length=None):
    tp = tensor(name, dims)
    tp.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = tp.external_data.add()
            e.key, e.value = k, str(v)
    return tp


def write(name, data, stage, expect):
    if not isinstance(data, (bytes, bytearray)):
        data = data.SerializeToString()
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    rows.append((name, stage, expect))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    good = relu_model().SerializeToString()

    # -- not a model at all
    write("empty.onnx", b"", "load", "not a valid ONNX model (protobuf parse failed, 0 bytes)")
    rng = random.Random(20240601)
    write("random_bytes.onnx", bytes(rng.randrange(256) for _ in range(512)), "load",
          "not a valid ONNX model")
    write("truncated.onnx", good[: len(good) * 2 // 3], "load",
          "not a valid ONNX model (protobuf parse failed")
    # TypeProto.sequence_type nested 200 deep: protobuf-c unpacks recursively
    tp = helper.make_tensor_type_proto(F, [1])
    for _ in range(200):
        tp = helper.make_sequence_type_proto(tp)
    deep = relu_model()
    deep.graph.input[0].type.CopyFrom(tp)
    write("deep_nesting.onnx", deep, "load", "nested deeper than 100")

    # -- versions and domains
    write("ir_version_too_old.onnx", relu_model(ir=6), "load", "ir_version 6 is too old")
    write("opset_too_old.onnx", relu_model(opset=11), "load",
          "unsupported opset 11 (apexc accepts 13..21; --allow-old-opset accepts 1..12)")
    write("opset_too_new.onnx", relu_model(opset=22), "load", "unsupported opset 22")
    write("foreign_domain.onnx",
          model([helper.make_node("FusedGemm", ["x", "x"], ["y"], name="fg", domain="com.microsoft")],
                [vi("x", [2, 2])], [vi("y", [2, 2])],
                extra_opsets=[helper.make_opsetid("com.microsoft", 1)]),
          "load", "node 'fg' (FusedGemm): domain 'com.microsoft' is not supported")

    # -- graph structure
    write("cycle.onnx",
          model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                 helper.make_node("Relu", ["a"], ["b"], name="n2")],
                [vi("x", [2])], [vi("b", [2])]),
          "load", "is part of a cycle")
    write("undefined_input.onnx",
          model([helper.make_node("Add", ["x", "nope"], ["y"], name="add")],
                [vi("x", [2])], [vi("y", [2])]),
          "load", "node 'add' (Add) input 1: undefined value 'nope'")
    write("duplicate_value.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="r1"),
                 helper.make_node("Neg", ["x"], ["y"], name="r2")],
                [vi("x", [2])], [vi("y", [2])]),
          "load", "node 'r2' (Neg): output 'y' is already produced by node 'r1' (Relu)")
    write("input_shadows_output.onnx",
          model([helper.make_node("Relu", ["x"], ["x"], name="r")], [vi("x", [2])], [vi("x", [2])]),
          "load", "node 'r' (Relu): output 'x' is already a graph input")
    # a compiled plan (plan/plan.h magic) given where the model goes
    write("plan_given.onnx", b"APXPLAN\0" + bytes(56), "load",
          "this is an apexc plan, not an ONNX model (run it with apexrun)")
    write("no_outputs.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], []),
          "load", "graph has no outputs")
    write("no_nodes.onnx", model([], [vi("x", [2])], [vi("x", [2])]), "load", "graph has no nodes")
    write("undefined_output.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("z", [2])]),
          "load", "graph output 'z': undefined value")

    # -- ops
    write("unknown_op.onnx",
          model([helper.make_node("FooBar", ["x"], ["y"], name="foo")], [vi("x", [2])], [vi("y", [2])]),
          "load", "node 'foo' (FooBar): unknown op 'FooBar'")
    write("tier2_op.onnx",
          model([helper.make_node("Upsample", ["x", "s"], ["y"], name="up")],
                [vi("x", [1, 1, 2, 2]), vi("s", [4])], [vi("y", [1, 1, 4, 4])]),
          "load", "node 'up' (Upsample): not supported yet: Upsample is a tier-2 op")
    write("listed_op.onnx",
          model([helper.make_node("Reciprocal", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])]),
          "load", "node 'Reciprocal_0' (Reciprocal): not supported yet: Reciprocal")
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t", [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", [2])])
    write("control_flow_if.onnx",
          model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", [2])]),
          "load", "node 'if' (If): control flow is not supported in v1")
    write("constant_string.onnx",
          model([helper.make_node("Constant", [], ["c"], name="k", value_string="hi"),
                 helper.make_node("Identity", ["c"], ["y"])], [], [vi("y", [], TensorProto.STRING)]),
          "load", "node 'k' (Constant): not supported yet: Constant with attribute 'value_string'")
    # Resize and Einsum: the forms not supported yet, each refused with its own line
    scales = helper.make_tensor("scales", F, [4], [1, 1, 2, 2])

    def resize(name, opset=17, inputs=("x", "", "scales"), **attrs):
        return model([helper.make_node("Resize", list(inputs), ["y"], name=name, **attrs)],
                     [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])], inits=[scales], opset=opset)

    write("resize_cubic.onnx", resize("up", mode="cubic"), "infer",
          "node 'up' (Resize): not supported yet: Resize mode=cubic")
    write("resize_tf_crop_and_resize.onnx",
          resize("crop", mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), "infer",
          "node 'crop' (Resize): not supported yet: Resize coordinate_transformation_mode=tf_crop_and_resize")
    write("resize_antialias.onnx", resize("aa", opset=18, mode="linear", antialias=1), "infer",
          "node 'aa' (Resize): not supported yet: Resize antialias=1")
    write("resize_keep_aspect_ratio.onnx",
          model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="ka",
                                  keep_aspect_ratio_policy="not_larger")],
                [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])],
                inits=[helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 1, 4, 4])], opset=18),
          "infer", "node 'ka' (Resize): not supported yet: Resize keep_aspect_ratio_policy=not_larger")
    write("resize_runtime_scales.onnx",
          model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs")],
                [vi("x", [1, 1, 2, 2]), vi("s", [4])], [vi("y", [1, 1, 4, 4])]),
          "infer", "node 'rs' (Resize) input 2 'scales' must be a compile-time constant")
    write("einsum_ellipsis.onnx",
          model([helper.make_node("Einsum", ["a", "b"], ["y"], name="es", equation="...ij,...jk->...ik")],
                [vi("a", [2, 3, 4]), vi("b", [2, 4, 5])], [vi("y", [2, 3, 5])]),
          "infer", "node 'es' (Einsum): not supported yet: Einsum with ellipsis")
    write("einsum_three_operands.onnx",
          model([helper.make_node("Einsum", ["a", "b", "c"], ["y"], name="e3", equation="ij,jk,kl->il")],
                [vi("a", [2, 3]), vi("b", [3, 4]), vi("c", [4, 5])], [vi("y", [2, 5])]),
          "infer", "node 'e3' (Einsum): not supported yet: Einsum with 3 operands")
    write("einsum_label_sizes.onnx",
          model([helper.make_node("Einsum", ["a", "b"], ["y"], name="em", equation="ij,jk->ik")],
                [vi("a", [2, 3]), vi("b", [4, 5])], [vi("y", [2, 5])]),
          "infer", "node 'em' (Einsum) input 1: label 'j' has size 4, input 0 has 3")
    write("shape_mismatch_matmul.onnx",
          model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                [vi("a", [2, 3]), vi("b", [4, 5])], [vi("y", [2, 5])]),
          "infer", "node 'mm' (MatMul)")

    # -- tensors
    write("raw_data_short.onnx", add_with_init(tensor("w", [2, 3], raw=b"\0" * 20)), "load",
          "initializer 'w': raw_data has 20 bytes, dims [2,3] (float32) need 24 bytes")
    write("raw_data_long.onnx", add_with_init(tensor("w", [2, 3], raw=b"\0" * 28)), "load",
          "initializer 'w': raw_data has 28 bytes, dims [2,3] (float32) need 24 bytes")
    write("float_data_count.onnx", add_with_init(tensor("w", [2, 3], floats=[1, 2, 3, 4, 5])),
          "load", "initializer 'w': float_data has 5 elements, dims [2,3] (float32) need 6")
    write("negative_dim.onnx", add_with_init(tensor("w", [-1, 3], raw=b"")), "load",
          "initializer 'w': negative dim -1 at axis 0")
    write("absurd_dims.onnx", add_with_init(tensor("w", [1 << 30, 1 << 30, 4], raw=b"")), "load",
          "initializer 'w': absurd dims [1073741824,1073741824,4]")
    write("absurd_dims_overflow.onnx",
          add_with_init(tensor("w", [1 << 62, 1 << 62, 0], raw=b"")), "load", "absurd dims")
    s = TensorProto()
    s.name, s.data_type = "s", TensorProto.STRING
    s.dims.append(1)
    s.string_data.append(b"hello")
    write("string_tensor.onnx",
          model([helper.make_node("Identity", ["s"], ["y"], name="id")], [],
                [vi("y", [1], TensorProto.STRING)], inits=[s]),
          "load", "initializer 's': string tensors are not supported")
    write("string_input.onnx",
          model([helper.make_node("Identity", ["s"], ["y"], name="id")],
                [vi("s", [1], TensorProto.STRING)], [vi("y", [1], TensorProto.STRING)]),
          "load", "graph input 's': string tensors are not supported")
    write("complex_tensor.onnx", add_with_init(tensor("w", [1], t=TensorProto.COMPLEX64, raw=b"\0" * 8)),
          "load", "initializer 'w': tensor data type 14 is not supported")
    write("rank9_input.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1] * 9)], [vi("y", None)]),
          "load", "graph input 'x': rank 9 is more than 8")
    write("rank9_initializer.onnx", add_with_init(tensor("w", [1] * 9, raw=b"\0" * 4)), "load",
          "initializer 'w': rank 9 is more than 8")
    write("negative_input_dim.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2, -3])], [vi("y", None)]),
          "load", "graph input 'x': negative dim -3 at axis 1")
    seq = helper.make_tensor_sequence_value_info("x", F, [2])
    write("sequence_input.onnx",
          model([helper.make_node("Identity", ["x"], ["y"], name="id")], [seq], [vi("y", None)]),
          "load", "graph input 'x': sequence types are not supported")

    # -- external data (paths relative to this folder)
    with open(os.path.join(OUT, "ext_short.bin"), "wb") as f:
        f.write(struct.pack("<2f", 1.0, 2.0))  # 8 bytes; [2,3] float needs 24
    write("ext_missing.onnx", add_with_init(external("w", [2, 3], "missing.bin")), "load",
          "initializer 'w': cannot open external data file 'missing.bin'")
    write("ext_escape.onnx", add_with_init(external("w", [2, 3], "../corpus_outside.bin")), "load",
          "initializer 'w': external data location '../corpus_outside.bin' escapes the model's folder")
    write("ext_escape_nested.onnx", add_with_init(external("w", [2, 3], "sub/../../x.bin")), "load",
          "escapes the model's folder")
    write("ext_absolute.onnx", add_with_init(external("w", [2, 3], "/etc/passwd")), "load",
          "initializer 'w': external data location '/etc/passwd' is an absolute path")
    write("ext_short.onnx", add_with_init(external("w", [2, 3], "ext_short.bin")), "load",
          "initializer 'w': external data 'ext_short.bin' holds 8 bytes, dims [2,3] (float32) need 24 bytes")
    write("ext_beyond_end.onnx", add_with_init(external("w", [2, 3], "ext_short.bin", 0, 24)), "load",
          "initializer 'w': external data file 'ext_short.bin' has 8 bytes, offset 0 + length 24 is beyond its end")
    write("ext_offset_beyond.onnx", add_with_init(external("w", [2, 3], "ext_short.bin", 100)), "load",
          "offset 100 is beyond its end")

    with open(os.path.join(OUT, "MANIFEST.tsv"), "w") as f:
        f.write("file\tstage\texpected\n")
        for r in rows:
            f.write("\t".join(r) + "\n")
    print(f"wrote {len(rows)} corpus files to {OUT}")


if __name__ == "__main__":
    main()
