#!/usr/bin/env python3
"""check_emitted.py - cross-checks an `apexc --emit-onnx` model against its fp32 original
in onnxruntime (CPU), DESIGN.md 7: the emitted mixed-precision forward graph must be valid
ONNX and compute what the original computes, within the half type's error.

    check_emitted.py MODEL.onnx EMITTED.onnx DATA --half fp16|bf16 [--bound X]

DATA is one of
  - a data folder of NAME.npy files (DESIGN.md 13 --data): the first batch is used (the
    batch size is the model input's first dimension);
  - an ONNX node-test folder (holding test_data_set_0/) or one test_data_set_N folder
    (input_K.pb files, matched to the model's non-initializer inputs in order).

Steps, each printed:
  1. onnx.checker.check_model(full_check=True) on the emitted model, then strict type and
     shape inference with data propagation: both must pass, bf16 included (apexc raises the
     opset where an op gains bfloat16, e.g. Conv, MaxPool, GlobalAveragePool at 22, or writes
     the node as fp32 compute between Casts; compiler/onnx_opset.h).
  2. The original model in fp32 -> reference outputs.
  3. The emitted model on the same inputs (fp32 data cast to the emitted input types).
     onnxruntime's CPU provider has no half-precision kernels for most ops (on x86: none
     of Gemm, MatMul, Conv, Add, ... in fp16; almost nothing in bf16). The check finds
     each op it cannot run in the half type (session errors for bf16; for fp16 the fp32
     Casts onnxruntime would insert itself, which then drop the model's own roundings)
     and runs exactly those nodes as fp32 compute with inputs widened and outputs rounded
     to the half type by explicit Cast nodes: the semantics of apexc's CPU backend
     (DESIGN.md 12: 16-bit storage, fp32 math, round-to-nearest-even on store). Nothing
     is skipped silently: the ops are named in the output.
  4. Per graph output: relative L2 error ||emitted - ref|| / ||ref|| in float64, which
     must be <= the bound. Integer/bool outputs must match exactly. Non-finite reference
     values must be matched position by position (and are excluded from the norm).

Bounds (relative L2 over a whole output):
  fp16: 1e-2. fp16 has unit roundoff u = 2^-11 = 4.9e-4, so 1e-2 is about 20 u: room for
        rounding once per op through a few dozen ops (errors add roughly like sqrt(depth)
        u for independent roundings) and for the loss of a few bits in cancellations
        (LayerNorm's x - mean, softmax), but far below what a wrong cast, a wrong dtype
        or a mis-written attribute produces (errors of order 1).
  bf16: 4e-2. bf16 keeps 8 significand bits, u = 2^-8 = 3.9e-3, 8 times fp16's, so 4e-2 is
        about 10 u. The same 20 u as fp16 (8e-2) would be too lax to see a mis-converted
        parameter in a normalized network: on the examples, all-bf16 models measure at most
        5.3e-3 (1.4 u; fp16: at most 4.0e-4, 0.8 u), so 10 u still leaves a 7x margin.

Exit status: 0 when every step passes, 1 otherwise, 2 on bad usage.
The functions are importable (run_node_tests.py batches many models in one process).
"""
import argparse
import glob
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BOUNDS = {"fp16": 1e-2, "bf16": 4e-2}
HALF_TYPE = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def _ort():
    import onnxruntime as ort  # imported late: --help works without it
    ort.set_default_logger_severity(3)
    return ort


# ---- data ---------------------------------------------------------------------------------

def graph_data_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def np_dtype(elem_type):
    return helper.tensor_dtype_to_np_dtype(elem_type)


def load_feeds(model, data):
    """Inputs for the model's data inputs from a NAME.npy folder or a node-test folder."""
    ins = graph_data_inputs(model)
    if os.path.isdir(os.path.join(data, "test_data_set_0")):
        data = os.path.join(data, "test_data_set_0")
    pbs = sorted(glob.glob(os.path.join(data, "input_*.pb")),
                 key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
    feeds = {}
    if pbs:
        if len(pbs) != len(ins):
            raise ValueError(f"{data}: {len(pbs)} input_K.pb files for {len(ins)} model inputs")
        for vi, p in zip(ins, pbs):
            t = TensorProto()
            with open(p, "rb") as f:
                t.ParseFromString(f.read())
            feeds[vi.name] = numpy_helper.to_array(t)
        return feeds
    for vi in ins:
        path = os.path.join(data, vi.name + ".npy")
        if not os.path.exists(path):
            raise ValueError(f"{data}: no {vi.name}.npy for model input '{vi.name}'")
        arr = np.load(path)
        dims = vi.type.tensor_type.shape.dim
        batch = dims[0].dim_value if dims and dims[0].HasField("dim_value") else arr.shape[0]
        feeds[vi.name] = arr[:batch].astype(np_dtype(vi.type.tensor_type.elem_type))
    return feeds


def session_options():
    """Graph optimizations off for every session: onnxruntime 1.32's duplicate-initializer
    elimination merges equal initializers (the CNN example's zero BN running mean with its
    zero BN bias, the ones of running var and scale) and then computes training-mode
    BatchNormalization wrongly (logits off by 2.4e-3 relative against a float64 numpy
    forward; unoptimized: 1e-7). Unoptimized sessions also keep the emitted graph as written."""
    ort = _ort()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def reference_outputs(model, feeds):
    ort = _ort()
    sess = ort.InferenceSession(model.SerializeToString(), session_options(),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


# ---- preparing the emitted model for onnxruntime -----------------------------------------

def value_types(model):
    """name -> elem_type for every tensor the model names (value_info, I/O, initializers,
    then onnx shape inference for the rest)."""
    types = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        for vi in inferred.graph.value_info:
            types[vi.name] = vi.type.tensor_type.elem_type
    except Exception:  # inference problems are reported by check_validity
        pass
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in model.graph.initializer:
        types[t.name] = t.data_type
    for n in model.graph.node:  # Cast outputs are known from the attribute
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to":
                    types[n.output[0]] = a.i
    return types


def adapt_io(model, half_type):
    """onnxruntime's Python API cannot feed or fetch bfloat16: bf16 graph inputs become fp32
    inputs followed by a Cast to bf16, bf16 outputs get a Cast to fp32 (lossless both ways
    since the fed values are pre-rounded to bf16)."""
    if half_type != TensorProto.BFLOAT16:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    pre = []
    for vi in g.input:
        if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = vi.name
            vi.name = inner + "__apx_f32_in"
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
            pre.append(helper.make_node("Cast", [vi.name], [inner], name=inner + "__apx_in_cast",
                                        to=TensorProto.BFLOAT16))
    for vi in g.output:
        if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = vi.name
            vi.name = inner + "__apx_f32_out"
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
            g.node.append(helper.make_node("Cast", [inner], [vi.name], name=inner + "__apx_out_cast",
                                           to=TensorProto.FLOAT))
    nodes = pre + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return m


def widen_nodes(model, op_types, half_type):
    """Runs every node whose op type is in op_types and that reads or writes half_type as
    fp32 compute: half inputs get a Cast to fp32, half outputs are computed in fp32 and
    rounded back by a Cast to the half type. Returns (model, names of widened nodes)."""
    types = value_types(model)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    out_nodes, widened, casted = [], [], {}
    for n in g.node:
        touches = [x for x in list(n.input) + list(n.output) if x and types.get(x) == half_type]
        if n.op_type not in op_types or n.op_type == "Cast" or not touches:
            out_nodes.append(n)
            continue
        widened.append(n.name or n.op_type)
        for i, x in enumerate(n.input):
            if x and types.get(x) == half_type:
                if x not in casted:
                    casted[x] = x + "__apx_widened"
                    out_nodes.append(helper.make_node("Cast", [x], [casted[x]], name=x + "__apx_widen",
                                                      to=TensorProto.FLOAT))
                n.input[i] = casted[x]
        for a in n.attribute:  # an output type given as an attribute (RandomUniformLike's dtype)
            if a.name == "dtype" and a.type == onnx.AttributeProto.INT and a.i == half_type:
                a.i = TensorProto.FLOAT
        post = []
        for i, y in enumerate(n.output):
            if y and types.get(y) == half_type:
                n.output[i] = y + "__apx_f32_result"
                post.append(helper.make_node("Cast", [n.output[i]], [y], name=y + "__apx_round", to=half_type))
        out_nodes.append(n)
        out_nodes.extend(post)
    del g.node[:]
    g.node.extend(out_nodes)
    return m, widened


_ERR_PATTERNS = [
    re.compile(r"implementation for (\w+)\(\d+\) node with name '([^']*)'"),
    re.compile(r"of operator \((\w+)\) in node \(([^)]*)\)"),
]


def failing_op(model, message):
    """The op type of the model that an onnxruntime session error names, or None."""
    ops = {n.op_type for n in model.graph.node}
    by_name = {n.name: n.op_type for n in model.graph.node if n.name}
    for pat in _ERR_PATTERNS:
        mt = pat.search(message)
        if not mt:
            continue
        op, name = mt.group(1), mt.group(2)
        if name in by_name:
            return by_name[name]
        if op in ops:
            return op
    for o in sorted(ops, key=len, reverse=True):  # function-expanded ops: _inlfunc_<Op>_...
        if "_inlfunc_" + o in message:
            return o
    return None


class OrtGap(RuntimeError):
    """onnxruntime has no kernel for an op at the opset the emitted model is written in, in any
    type (RandomUniformLike is implemented up to opset 21 in onnxruntime 1.32, while bfloat16
    needs 22): the model is checker-valid but this oracle cannot run it."""


class Session:
    """A session on the emitted model in which every node reading or writing the half type
    either has a half-precision kernel in onnxruntime's CPU provider or is widened by us
    (widen_nodes: fp32 compute, explicit Casts that round its outputs to the half type).

    Why not let onnxruntime handle fp16 itself: for an fp16 node without a CPU kernel it
    inserts fp32 Casts around it and then drops Cast(fp32->fp16)->Cast(fp16->fp32) pairs as
    redundant, so a value the emitted model rounds to fp16 reaches the next op unrounded
    (an O1 model's fp16 Gemm inputs were not rounded at all). Explicit Casts written in
    the model are kept, so widening ourselves gives the CPU backend's semantics (DESIGN.md
    12). For bf16 onnxruntime has almost no kernels and refuses the model instead."""

    known_unsupported = {}  # half type -> op types found unsupported (shared across models)

    def __init__(self, emitted, half):
        self.half_type = HALF_TYPE[half]
        self.notes = []
        model = adapt_io(emitted, self.half_type)
        present = {n.op_type for n in model.graph.node} - {"Cast"}
        unsupported = set(self.known_unsupported.get(self.half_type, set())) & present
        attributed = set(unsupported)
        first_error, guessed = None, False
        while True:
            err, ops = self._try(model, unsupported)
            if err is None:
                break
            first_error = first_error or err
            new = (ops & present) - unsupported
            if new:
                unsupported |= new
                attributed |= new
            elif unsupported != present:
                # the problem names no op of the model (a node inside an expanded function
                # body): widen everything, then find which ops actually needed it
                self.notes.append(f"could not attribute '{err}' to one op of the model: "
                                  f"narrowing it down by elimination")
                unsupported, guessed = set(present), True
            else:
                gap = _ERR_PATTERNS[0].search(err)
                if gap:  # every half node runs in fp32 already: the op's opset is the problem
                    raise OrtGap(f"onnxruntime implements no {gap.group(0).split()[2]} kernel (opset "
                                 f"{opset_of(model)} model), in any type: {err}")
                raise RuntimeError(f"onnxruntime cannot run the emitted model even with every "
                                   f"half node widened to fp32: {err}")
        if guessed:
            for op in sorted(unsupported - attributed):
                if self._try(model, unsupported - {op})[0] is None:
                    unsupported.discard(op)
            if self._try(model, unsupported)[0] is not None:  # pragma: no cover - defensive
                raise RuntimeError("onnxruntime: widening is not monotone for this model")
        self.widened_ops = sorted(unsupported)
        if unsupported:
            self.known_unsupported.setdefault(self.half_type, set()).update(unsupported)
        if self.widened_nodes:
            self.notes.append(f"onnxruntime (CPU) has no {half} kernel for: {', '.join(self.widened_ops)}"
                              + (f" (first problem: {first_error})" if first_error else "")
                              + f"; those {len(self.widened_nodes)} node(s) ran as fp32 compute with "
                              f"{half}-rounded outputs")

    def _try(self, model, widen):
        """Builds the session with `widen` op types widened. Returns (None, set()) when
        onnxruntime runs every half node as written, else (problem, op types it names)."""
        import tempfile
        ort = _ort()
        run_model, widened = widen_nodes(model, widen, self.half_type) if widen else (model, [])
        with tempfile.TemporaryDirectory() as tmp:
            so = session_options()
            so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
            try:
                sess = ort.InferenceSession(run_model.SerializeToString(), so,
                                            providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001 - onnxruntime raises several types
                msg = str(e).split("\n")[0]
                op = failing_op(run_model, msg)
                return msg, {op} if op else set()
            opt = onnx.load(so.optimized_model_filepath)
        # Casts onnxruntime inserted around nodes it has no half kernel for (ignoring casts
        # it inserts for other types, e.g. around int64 Equal)
        types = value_types(run_model)
        ours = {n.name for n in run_model.graph.node}
        hv = self.half_type

        def to_of(n):
            return next((a.i for a in n.attribute if a.name == "to"), None)

        ins = [n for n in opt.graph.node if n.op_type == "Cast" and n.name not in ours]
        up_out = {o for n in ins if to_of(n) != hv and types.get(n.input[0]) == hv for o in n.output}
        down_in = {n.input[0] for n in ins if to_of(n) == hv}
        upcast = {n.op_type for n in opt.graph.node if n.op_type != "Cast" and
                  (any(i in up_out for i in n.input) or any(o in down_in for o in n.output))}
        # ... and the model's own Casts to the half type that it dropped with them (their
        # rounding then never happens): their consumers are upcast too
        kept = {n.name for n in opt.graph.node}
        dropped = {o for n in run_model.graph.node
                   if n.op_type == "Cast" and n.name not in kept and to_of(n) == hv for o in n.output}
        upcast |= {n.op_type for n in run_model.graph.node if n.op_type != "Cast" and any(i in dropped for i in n.input)}
        if upcast:
            return f"onnxruntime inserted fp32 Casts around {', '.join(sorted(upcast))}", upcast
        self.sess, self.model, self.widened_nodes = sess, run_model, widened
        return None, set()

    def run(self, feeds):
        ins = {i.name: i for i in self.sess.get_inputs()}
        cast = {}
        for vi in self.model.graph.input:
            if vi.name not in ins:
                continue
            name = vi.name[:-len("__apx_f32_in")] if vi.name.endswith("__apx_f32_in") else vi.name
            arr = feeds[name]
            et = vi.type.tensor_type.elem_type
            if vi.name.endswith("__apx_f32_in"):  # bf16 input: round the data to bf16 first
                import ml_dtypes  # a dependency of onnx
                arr = arr.astype(ml_dtypes.bfloat16).astype(np.float32)
            else:
                arr = arr.astype(np_dtype(et))
            cast[vi.name] = arr
        names = [o.name for o in self.sess.get_outputs()]
        outs = self.sess.run(names, cast)
        return {n[:-len("__apx_f32_out")] if n.endswith("__apx_f32_out") else n: v
                for n, v in zip(names, outs)}


# ---- checks -------------------------------------------------------------------------------

def check_validity(emitted, half):
    """(ok, lines): onnx.checker with full_check (its strict type and shape inference: every
    node's types must be in its schema at the written opset, bfloat16 included), then strict
    inference with data propagation."""
    del half  # bf16 is held to the same standard since apexc raises the opset for it
    lines = []
    try:
        onnx.checker.check_model(emitted, full_check=True)
        lines.append(f"onnx.checker (full_check) at opset {opset_of(emitted)}: ok")
    except Exception as e:  # noqa: BLE001
        return False, [f"FAIL onnx.checker (full_check) at opset {opset_of(emitted)}: "
                       f"{' '.join(str(e).split())[:400]}"]
    try:
        onnx.shape_inference.infer_shapes(emitted, check_type=True, strict_mode=True, data_prop=True)
        lines.append("strict type/shape inference: ok")
    except Exception as e:  # noqa: BLE001
        return False, lines + [f"FAIL strict type/shape inference: {' '.join(str(e).split())[:400]}"]
    return True, lines


def opset_of(model):
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def rel_l2(got, ref):
    """(error, ok_nonfinite): relative L2 over finite reference entries."""
    got = np.asarray(got, np.float64).reshape(-1)
    ref = np.asarray(ref, np.float64).reshape(-1)
    fin = np.isfinite(ref)
    same_nonfinite = bool(np.all((np.isnan(got) == np.isnan(ref))[~fin]) and
                          np.all(got[~fin & ~np.isnan(ref)] == ref[~fin & ~np.isnan(ref)]))
    g, r = got[fin], ref[fin]
    if not np.all(np.isfinite(g)):
        return float("inf"), same_nonfinite
    den = np.linalg.norm(r)
    num = np.linalg.norm(g - r)
    return (num / den if den > 0 else num), same_nonfinite


def compare(ref, got, bound):
    ok, lines = True, []
    for name, r in ref.items():
        if name not in got:
            ok = False
            lines.append(f"FAIL output '{name}': missing from the emitted model")
            continue
        g = got[name]
        if tuple(np.shape(g)) != tuple(np.shape(r)):
            ok = False
            lines.append(f"FAIL output '{name}': shape {list(np.shape(g))}, expected {list(np.shape(r))}")
            continue
        if not np.issubdtype(np.asarray(r).dtype, np.floating):
            same = np.array_equal(np.asarray(g), np.asarray(r))
            ok &= same
            lines.append(f"{'ok  ' if same else 'FAIL'} output '{name}' ({np.asarray(r).dtype}): "
                         f"{'exact match' if same else 'differs'}")
            continue
        err, nonfinite_ok = rel_l2(g, r)
        good = err <= bound and nonfinite_ok
        ok &= good
        lines.append(f"{'ok  ' if good else 'FAIL'} output '{name}' {list(np.shape(r))} "
                     f"{np.asarray(g).dtype}: rel L2 error {err:.3e} (bound {bound:.0e})"
                     + ("" if nonfinite_ok else "; non-finite values differ"))
    return ok, lines


def round_to_half(x, half):
    """x rounded to the half type (round to nearest even) and back, for float arrays."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        return x
    if half == "fp16":
        return x.astype(np.float16).astype(x.dtype)
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    nan = np.isnan(x)
    r = u.astype(np.uint32).view(np.float32).astype(x.dtype)
    return np.where(nan, x, r)


def check(model, emitted, feeds, half, bound=None):
    """Full check of one emitted model. Returns (ok, lines, errors by output name)."""
    bound = BOUNDS[half] if bound is None else bound
    ok, lines = check_validity(emitted, half)
    if not ok:
        return False, lines, {}
    ref = reference_outputs(model, feeds)
    try:
        sess = Session(emitted, half)
    except OrtGap:
        raise
    except RuntimeError as e:
        return False, lines + [f"FAIL {e}"], {}
    lines += [f"NOTE {n}" for n in sess.notes]
    got = sess.run(feeds)
    good, cmp_lines = compare(ref, got, bound)
    if not good:
        # Inputs the half type cannot represent (e.g. softmax over values near 1e4, where fp16's
        # spacing is 8) make the fp32 model itself move by more than the bound once its inputs
        # are rounded: no half-precision graph can do better than that. Only then is the
        # emitted model judged against the fp32 model run on the same half-rounded inputs,
        # with the same bound, and the line says so.
        rounded = {k: round_to_half(v, half) for k, v in feeds.items()}
        ref_r = reference_outputs(model, rounded)
        floor_ok, _ = compare(ref, ref_r, bound)
        if not floor_ok:
            good, cmp_lines = compare(ref_r, got, bound)
            cmp_lines = [f"NOTE the fp32 model itself moves by more than {bound:.0e} when its inputs "
                         f"are rounded to {half}: judged against fp32 on {half}-rounded inputs"] + cmp_lines
            ref = ref_r
    errs = {}
    for name in ref:
        if name in got and np.issubdtype(np.asarray(ref[name]).dtype, np.floating) and \
                np.shape(got[name]) == np.shape(ref[name]):
            errs[name] = rel_l2(got[name], ref[name])[0]
    return good, lines + cmp_lines, errs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("emitted")
    ap.add_argument("data", help="NAME.npy folder, node-test folder or test_data_set_N folder")
    ap.add_argument("--half", choices=sorted(BOUNDS), required=True)
    ap.add_argument("--bound", type=float, default=None, help="override the relative L2 bound")
    a = ap.parse_args(argv)
    model = onnx.load(a.model)
    emitted = onnx.load(a.emitted)
    feeds = load_feeds(model, a.data)
    ok, lines, _ = check(model, emitted, feeds, a.half, a.bound)
    print(f"{a.emitted} vs {a.model} ({a.half}):")
    for line in lines:
        print("  " + line)
    print("  PASS" if ok else "  FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
