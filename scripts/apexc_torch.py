#!/usr/bin/env python3
"""apexc_torch.py - export a PyTorch model together with its loss as a training ONNX for apexc.

Runs on the user's machine, where PyTorch is installed (apexc and apexrun never need Python).
The file it writes keeps the PyTorch model's parameters one to one:

  - its initializers are exactly the parameters of model.named_parameters() that the graph
    uses, under their PyTorch names (the tied alias a exporter may pick, e.g. lm_head.weight
    for GPT-2's tied embedding, is renamed to the name named_parameters() reports), plus the
    buffers the graph uses (BatchNorm running statistics), with the values they have when
    export() is called; every other tensor the exporter stored as an initializer becomes a
    Constant node, so nothing else can be mistaken for a weight;
  - every BatchNormalization of a module in training mode has training_mode=1 and its two
    running-statistics outputs (the dynamo exporter drops both; apexc updates the statistics
    every step, as PyTorch does);
  - metadata_props holds "apexc.trainable": a JSON array of the initializer names that are
    trained (the parameters with requires_grad=True). apexc trains exactly those and treats
    every other float initializer as a constant (docs/DESIGN.md section 2); `--frozen A,B`
    still removes names.

Graph inputs are the model's inputs, then the loss targets; graph outputs are the loss (first:
apexc's loss) then the model's other outputs (logits ...), which `apexrun --export-onnx` keeps
for inference.

    import apexc_torch
    info = apexc_torch.export(model, torch.nn.CrossEntropyLoss(), (x,), "model.onnx",
                              targets=(labels,))
    # apexc model.onnx -O2 -o model.apx ; apexrun model.apx --data DIR --steps N

    # a model that computes its own loss (Hugging Face: labels=...): loss_fn=None
    apexc_torch.export(gpt2, None, {"input_ids": ids, "attention_mask": mask, "labels": ids},
                       "gpt2.onnx")

Exporters: exporter="legacy" (torch.onnx.export(dynamo=False), the README recipe: training
mode, no constant folding, opset 17) or exporter="dynamo" (torch.onnx.export(dynamo=True) with
its ONNX optimizer OFF: the optimizer folds BatchNorm into Conv, merges identical initializers
and freezes expressions of parameters, which changes the model that trains; then the BatchNorm
fix-up above). Both write ordinary ONNX that onnxruntime also runs.

Command line (the `inspect` command needs only the onnx package):
    python3 apexc_torch.py inspect MODEL.onnx       trainable list, initializers, BatchNorm modes
    python3 apexc_torch.py export MODULE:FUNCTION -o MODEL.onnx [--exporter legacy|dynamo]
        FUNCTION() returns a dict with model, loss_fn, example_inputs and optionally targets,
        input_names, output_names (the keyword arguments of export()).
"""
import argparse
import importlib
import inspect as _inspect
import json
import os
import sys
import warnings

TRAINABLE_KEY = "apexc.trainable"
EXPORTERS = ("legacy", "dynamo")
LEGACY_OPSET = 17
_WRAPPED = "model"  # the wrapper's attribute holding the user's model (name prefix stripped)


# ---- inputs and outputs -------------------------------------------------------------------

def _as_named(values, default_names, what):
    """tensor | tuple/list | dict -> (names, tensors, is_keyword)."""
    import torch
    if values is None:
        return [], [], False
    if isinstance(values, torch.Tensor):
        values = (values,)
    if isinstance(values, dict):
        for k, v in values.items():
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"apexc_torch: {what} '{k}' is {type(v).__name__}, not a tensor")
        return list(values.keys()), list(values.values()), True
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"apexc_torch: {what} {i} is {type(v).__name__}, not a tensor")
    names = list(default_names[:len(values)])
    names += [f"{what}_{i}" for i in range(len(names), len(values))]
    return names, values, False


def _forward_arg_names(model):
    try:
        sig = _inspect.signature(model.forward)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _flatten_outputs(out):
    """(keys, tensors) of a model output: tensor, tuple/list (nested), dict or ModelOutput."""
    import torch
    keys, tensors = [], []

    def walk(key, v):
        if v is None:
            return
        if isinstance(v, torch.Tensor):
            keys.append(key)
            tensors.append(v)
        elif isinstance(v, dict) or (hasattr(v, "keys") and hasattr(v, "__getitem__")):
            for k in v.keys():
                walk(k if key is None else f"{key}.{k}", v[k])
        elif isinstance(v, (tuple, list)):
            for i, x in enumerate(v):
                walk(f"{key or 'output'}_{i}", x)
    walk(None, out)
    return keys, tensors


def _make_wrapper(model, loss_fn, in_names, in_keyword, n_targets):
    import torch

    class WithLoss(torch.nn.Module):
        """forward(*inputs, *targets) -> (loss, *model outputs other than the loss)."""

        def __init__(self):
            super().__init__()
            setattr(self, _WRAPPED, model)

        def forward(self, *flat):
            n_in = len(flat) - n_targets
            ins, tgts = flat[:n_in], flat[n_in:]
            m = getattr(self, _WRAPPED)
            out = m(**dict(zip(in_names, ins))) if in_keyword else m(*ins)
            keys, tensors = _flatten_outputs(out)
            if loss_fn is not None:
                loss = loss_fn(out, *tgts)
                rest = tensors
            else:
                if "loss" in keys:
                    i = keys.index("loss")
                elif tensors:
                    i = 0
                else:
                    raise ValueError("apexc_torch: loss_fn is None and the model returned no tensor")
                loss = tensors[i]
                rest = tensors[:i] + tensors[i + 1:]
            if loss.dim() != 0:
                raise ValueError(f"apexc_torch: the loss has shape {list(loss.shape)}; it must be "
                                 "a scalar (reduce it, e.g. reduction='mean')")
            return (loss, *rest)

        def output_keys(self, *flat):
            n_in = len(flat) - n_targets
            ins = flat[:n_in]
            m = getattr(self, _WRAPPED)
            with torch.no_grad():
                out = m(**dict(zip(in_names, ins))) if in_keyword else m(*ins)
            keys, _ = _flatten_outputs(out)
            if loss_fn is None:
                keys = [k for k in keys if k != "loss"] if "loss" in keys else keys[1:]
            return keys

    return WithLoss()


# ---- the ONNX fix-ups ---------------------------------------------------------------------

def _rename_everywhere(graph, old, new):
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for i, x in enumerate(n.output):
            if x == old:
                n.output[i] = new
    for coll in (graph.input, graph.output, graph.value_info):
        for vi in coll:
            if vi.name == old:
                vi.name = new


def _fix_initializers(mp, model, snapshot):
    """Renames parameter/buffer initializers to their named_parameters()/named_buffers() names,
    sets their values to `snapshot` (the state when export() was called), turns every other
    initializer into a Constant node. Returns (params_in_graph, buffers_in_graph, n_moved)."""
    import onnx
    from onnx import numpy_helper
    g = mp.graph
    canon = {}   # exported name -> canonical name
    kind = {}    # canonical name -> "param" | "buffer"
    for getter, k in ((model.named_parameters, "param"), (model.named_buffers, "buffer")):
        first = {}
        for n, t in getter():
            first[id(t)] = n
            kind[n] = k
        for n, t in getter(remove_duplicate=False):
            c = first.get(id(t))
            if c is None:
                continue
            canon[f"{_WRAPPED}.{n}"] = c
            canon[n] = c
    keep, consts, seen = [], [], {}
    for t in g.initializer:
        c = canon.get(t.name)
        if c is None:
            consts.append(t)
            continue
        if c in seen:  # two aliases of one tied tensor: keep one
            _rename_everywhere(g, t.name, c)
            continue
        if t.name != c:
            _rename_everywhere(g, t.name, c)
            t.name = c
        value = snapshot[c].detach().cpu().contiguous().numpy()
        if tuple(t.dims) != value.shape:
            raise RuntimeError(f"apexc_torch: initializer '{c}' has dims {list(t.dims)}, the "
                               f"model's tensor {list(value.shape)}")
        fresh = numpy_helper.from_array(value, c)
        if fresh.data_type != t.data_type:
            raise RuntimeError(f"apexc_torch: initializer '{c}' has ONNX type {t.data_type}, "
                               f"the model's tensor {fresh.data_type}")
        seen[c] = True
        keep.append(fresh)
    constant_nodes = []
    for t in consts:
        constant_nodes.append(onnx.helper.make_node(
            "Constant", [], [t.name], name=f"{t.name}_constant", value=t))
    del g.initializer[:]
    g.initializer.extend(keep)
    # Constants first: they have no inputs, so the node order stays topological.
    nodes = constant_nodes + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    for vi in list(g.input):  # an initializer listed as a graph input (old exporters)
        if vi.name in {t.name for t in consts}:
            g.input.remove(vi)
    params = [c for c in seen if kind[c] == "param"]
    buffers = [c for c in seen if kind[c] == "buffer"]
    return params, buffers, len(consts)


def _fix_batchnorm(mp, model):
    """training_mode=1 (+ running-statistics outputs) on the BatchNormalization nodes of BN
    modules in training mode. Returns the number of nodes changed."""
    import onnx
    import torch
    g = mp.graph
    training_stats = set()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.training:
            training_stats.add(f"{name}.running_mean" if name else "running_mean")
    used = {o for n in g.node for o in n.output} | {i.name for i in g.input} | \
           {t.name for t in g.initializer}
    fixed = 0
    for n in g.node:
        if n.op_type != "BatchNormalization" or len(n.input) < 5:
            continue
        tm = [a for a in n.attribute if a.name == "training_mode"]
        if tm and tm[0].i == 1:
            continue
        if n.input[3] not in training_stats:
            continue  # a BN module in eval mode (frozen BN): inference mode is right
        for a in tm:
            n.attribute.remove(a)
        n.attribute.append(onnx.helper.make_attribute("training_mode", 1))
        while len(n.output) < 3:
            base = f"{n.name or n.output[0]}_running_{'mean' if len(n.output) == 1 else 'var'}"
            nm, k = base, 0
            while nm in used:
                k += 1
                nm = f"{base}_{k}"
            used.add(nm)
            n.output.append(nm)
        fixed += 1
    return fixed


def _check_result(mp, params, buffers, model):
    g = mp.graph
    names = {t.name for t in g.initializer}
    allowed = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    stray = sorted(names - allowed)
    if stray:
        raise RuntimeError(f"apexc_torch: initializers that are not parameters or buffers: {stray}")
    bad = [n.name or n.op_type for n in g.node if n.op_type == "BatchNormalization" and
           n.input[3] in names and
           not any(a.name == "training_mode" and a.i == 1 for a in n.attribute) and
           _module_training(model, n.input[3])]
    if bad:
        raise RuntimeError(f"apexc_torch: BatchNormalization not in training mode: {bad}")


def _module_training(model, stat_name):
    mod_name = stat_name.rsplit(".", 1)[0] if "." in stat_name else ""
    try:
        return model.get_submodule(mod_name).training
    except AttributeError:
        return False


# ---- export -------------------------------------------------------------------------------

def _run_exporter(exporter, wrapper, flat, names, outs, opset, verbose):
    """The ModelProto torch.onnx.export writes for wrapper(*flat)."""
    import io
    import onnx
    import torch
    if exporter == "legacy":
        # PRESERVE: each module exports in its own mode (TRAINING would call train() on all)
        buf = io.BytesIO()
        torch.onnx.export(wrapper, flat, buf, dynamo=False,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                          opset_version=opset or LEGACY_OPSET, input_names=names,
                          output_names=outs, verbose=verbose)
        return onnx.load_from_string(buf.getvalue())
    kw = {"opset_version": opset} if opset else {}
    prog = torch.onnx.export(wrapper, flat, dynamo=True, optimize=False, input_names=names,
                             output_names=outs, verbose=verbose, **kw)
    return prog.model_proto


def export(model, loss_fn, example_inputs, path, *, targets=None, exporter="legacy",
           opset=None, input_names=None, output_names=None, check=True, verbose=False):
    """Writes `path`: a training ONNX of model + loss for apexc. Returns a dict with
    trainable (names, in initializer order), buffers, unused (parameters the graph does not
    use), constants (initializers the exporter made that became Constant nodes), bn_fixed.

    model          torch.nn.Module, exported in the modes its modules are in: call
                   model.train() first; a BatchNorm or Dropout module set to eval() stays in
                   inference mode (frozen BatchNorm). Its parameter and buffer values are left
                   unchanged (the legacy exporter's tracing forward updates BatchNorm
                   statistics; they are restored, and the file holds the values at the call).
    loss_fn        callable(output, *targets) -> scalar loss; output is what model returns.
                   None: the model computes the loss itself (output.loss, output["loss"], or
                   its first output), e.g. Hugging Face models given labels=.
    example_inputs tensor, tuple of tensors (model(*inputs)) or dict (model(**inputs)); their
                   shapes are the graph's (static shapes, as apexc wants).
    targets        tensor, tuple or dict of tensors passed to loss_fn after the output.
    exporter       "legacy" (dynamo=False, opset 17) or "dynamo" (optimizer off).
    input_names    graph input names (default: dict keys, else the names of model.forward's
                   parameters, then 'target' / 'target_K').
    output_names   graph output names (default: 'loss', then the model output keys).
    """
    import torch
    import onnx
    if exporter not in EXPORTERS:
        raise ValueError(f"apexc_torch: exporter '{exporter}' (expected one of {EXPORTERS})")
    fwd = _forward_arg_names(model)
    in_names, in_vals, in_kw = _as_named(example_inputs, fwd, "input")
    tgt_default = ["target"] if targets is not None and not isinstance(targets, (tuple, list, dict)) \
        else [f"target_{i}" for i in range(len(targets or ()))]
    if isinstance(targets, (tuple, list)) and len(targets) == 1:
        tgt_default = ["target"]
    tgt_names, tgt_vals, _ = _as_named(targets, tgt_default, "target")
    if loss_fn is None and tgt_vals:
        raise ValueError("apexc_torch: targets given but loss_fn is None (pass them in "
                         "example_inputs when the model computes the loss)")
    names = list(input_names) if input_names else in_names + tgt_names
    if len(names) != len(in_vals) + len(tgt_vals):
        raise ValueError(f"apexc_torch: {len(names)} input names for "
                         f"{len(in_vals) + len(tgt_vals)} inputs")
    if len(set(names)) != len(names):
        raise ValueError(f"apexc_torch: input names repeat: {names}")

    if not model.training:
        warnings.warn("apexc_torch: the model is in eval() mode, so BatchNorm and Dropout "
                      "export in inference mode; call model.train() to train them")
    snapshot = {k: v.detach().clone() for k, v in
                list(model.named_parameters()) + list(model.named_buffers())}
    wrapper = _make_wrapper(model, loss_fn, in_names, in_kw, len(tgt_vals))
    flat = tuple(in_vals) + tuple(tgt_vals)
    wrapper.training = model.training  # not train(): every module keeps its own mode
    try:
        keys = wrapper.output_keys(*flat)
        outs = list(output_names) if output_names else ["loss"] + [k or "output" for k in keys]
        with warnings.catch_warnings():
            # expected here: the legacy exporter's deprecation notice, and "exporting a model
            # in training mode" (that is the point)
            warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export")
            warnings.filterwarnings("ignore", message=".*Exporting a model while it is in train")
            mp = _run_exporter(exporter, wrapper, flat, names, outs, opset, verbose)
    finally:
        with torch.no_grad():  # tracing ran the model in training mode: undo its
            for k, v in list(model.named_parameters()) + list(model.named_buffers()):
                v.copy_(snapshot[k])  # BatchNorm statistics updates

    params, buffers, moved = _fix_initializers(mp, model, snapshot)
    bn_fixed = _fix_batchnorm(mp, model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad and n in params]
    unused = [n for n, _ in model.named_parameters() if n not in params]
    for old in [e for e in mp.metadata_props if e.key == TRAINABLE_KEY]:
        mp.metadata_props.remove(old)
    e = mp.metadata_props.add()
    e.key = TRAINABLE_KEY
    e.value = json.dumps(trainable)
    _check_result(mp, params, buffers, model)
    if check:
        onnx.checker.check_model(mp)
    onnx.save(mp, path)
    return {"trainable": trainable, "buffers": buffers, "unused": unused, "constants": moved,
            "bn_fixed": bn_fixed, "inputs": names, "outputs": [o.name for o in mp.graph.output]}


# ---- inspect (onnx only) ------------------------------------------------------------------

def trainable_of(mp):
    """The apexc.trainable list of a ModelProto, or None."""
    for e in mp.metadata_props:
        if e.key == TRAINABLE_KEY:
            return json.loads(e.value)
    return None


def inspect_model(path, out=sys.stdout):
    import onnx
    mp = onnx.load(path)
    g = mp.graph
    tr = trainable_of(mp)
    floats = {1, 10, 11, 16}
    print(f"{path}: opset {[o.version for o in mp.opset_import if o.domain in ('', 'ai.onnx')]}, "
          f"{len(g.node)} nodes, {len(g.initializer)} initializers", file=out)
    print(f"inputs: {[i.name for i in g.input]}  outputs: {[o.name for o in g.output]}", file=out)
    if tr is None:
        print(f"no '{TRAINABLE_KEY}': apexc trains every float initializer not --frozen", file=out)
    else:
        print(f"{TRAINABLE_KEY}: {len(tr)} trained", file=out)
    names = {t.name for t in g.initializer}
    stats = {n.input[i] for n in g.node if n.op_type == "BatchNormalization" and
             any(a.name == "training_mode" and a.i == 1 for a in n.attribute)
             for i in (3, 4) if len(n.input) > i}
    for t in g.initializer:
        role = ("state (BatchNorm running statistics)" if t.name in stats else
                "trained" if (tr is None and t.data_type in floats) or (tr and t.name in tr)
                else "constant")
        print(f"  {t.name} {list(t.dims)} {role}", file=out)
    for n in tr or []:
        if n not in names:
            print(f"  ERROR: '{n}' is in {TRAINABLE_KEY} but is no initializer", file=out)
    for n in g.node:
        if n.op_type == "BatchNormalization":
            tm = any(a.name == "training_mode" and a.i == 1 for a in n.attribute)
            print(f"  BatchNormalization '{n.name}': {'training' if tm else 'inference'} mode",
                  file=out)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inspect", help="trainable list, initializers and BatchNorm modes")
    p.add_argument("model")
    p = sub.add_parser("export", help="export MODULE:FUNCTION's model")
    p.add_argument("spec", help="MODULE:FUNCTION returning a dict of export() arguments")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--exporter", choices=EXPORTERS, default="legacy")
    p.add_argument("--opset", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "inspect":
        return inspect_model(a.model)
    mod, _, fn = a.spec.partition(":")
    if not fn:
        ap.error("spec must be MODULE:FUNCTION")
    sys.path.insert(0, os.getcwd())
    kw = getattr(importlib.import_module(mod), fn)()
    info = export(kw.pop("model"), kw.pop("loss_fn", None), kw.pop("example_inputs"), a.output,
                  exporter=a.exporter, opset=a.opset, **kw)
    print(f"{a.output}: {len(info['trainable'])} trainable parameters, "
          f"{len(info['buffers'])} buffers, inputs {info['inputs']}, outputs {info['outputs']}"
          + (f", unused parameters {info['unused']}" if info["unused"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
