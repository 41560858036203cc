#!/usr/bin/env python3
"""make_reference.py - training references for the example models made by onnxruntime-training
(issue 5): the loss, every parameter's gradient after one backward, and the parameters after
5 AdamW steps, for examples/mlp, examples/cnn (BatchNorm in training mode) and
examples/transformer, written as ONNX TensorProto files that tests/ort_training:reference_test
compares apexc against.

Needs onnxruntime-training (PyPI; 1.19.2 for cp311), which conflicts with the `onnxruntime`
package, so it lives in its own virtual environment:

    python3 -m venv /root/venv-ortt
    /root/venv-ortt/bin/pip install onnxruntime-training onnx numpy
    /root/venv-ortt/bin/python tests/ort_training/make_reference.py           # rewrite
    /root/venv-ortt/bin/python tests/ort_training/make_reference.py --check   # recompute, compare

The package's `onnxruntime.training/__init__.py` imports torch (for ORTModule helpers) although
the artifacts/api modules used here do not need it: the script registers the package folder
without running that __init__ (see _import_ort_training).

What is run, per model (data: the first batch, samples [0, B), exactly the input files of
tests/fixtures/ort/<model>/test_data_set_0/, so the batch is the one `apexrun infer` uses):
  - onnxruntime.training.artifacts.generate_artifacts on examples/<model>/model.onnx with
    requires_grad = every float initializer except BatchNormalization running statistics
    (inputs 3 and 4 of BN nodes: frozen), the loss = the model's first graph output (no loss
    block added: PassThrough), optimizer = AdamW with lr 1e-3, betas 0.9/0.999, eps 1e-8,
    weight decay 0.01 (DESIGN.md 13 defaults).
  - one training session (CPU, 1 thread, graph optimizations off): 5 times
    train_step (forward + backward) -> optimizer.step -> lazy_reset_grad on the same batch.

AdamW semantics. onnxruntime's AdamWOptimizer kernel has two modes; its artifacts helper
builds adam_mode=1 ("Huggingface AdamW": denominator sqrt(v) + eps with the bias corrections
folded into the step size lr * sqrt(1 - b2^t) / (1 - b1^t), and the weight decay
p -= lr * wd * p applied AFTER the Adam update, to the updated weights). apexc follows
torch.optim.AdamW (kernels/attrs.h OptimizerStep): p *= 1 - lr wd first, then
p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). That is onnxruntime's
adam_mode=0 ("PyTorch AdamW"), so this script builds the optimizer node with adam_mode=0
(TorchAdamW below) and, at every step, recomputes the update in float64 from onnxruntime's own
fp32 gradients and pre-step parameters with the torch formula: the largest difference must be
below 1e-3 lr (measured: about 2e-4 lr, one fp32 rounding of p). The step count t starts at 1
on the first update in both.

Model adjustments for onnxruntime-training (the math is unchanged):
  - SoftmaxCrossEntropyLoss gets its optional output 1 (log_prob): onnxruntime's gradient
    builder for it reads that output and fails without it.
  - onnxruntime runs its "pre-training" graph transformations before building the gradient
    graph. They fuse the transformer's hand-written LayerNorm into LayerNormalization, its Erf
    Gelu into BiasGelu, Transposes into FusedMatMul. For the MLP and the transformer the
    reference is built from the literal graph (transformations skipped: every op of these
    models has an onnxruntime gradient builder); the fused variant is computed too and must
    agree within 1e-5 (a cross-check of the reference itself). The CNN needs them: there is
    no gradient builder for BatchNormalization itself, only for the BatchNormInternal op
    that a pre-training transformation replaces it with.
  - generate_artifacts writes the optimizer model with the installed onnx package's IR
    version (14 with onnx 1.23), which onnxruntime 1.19 cannot load; it is set back to 8.

BatchNorm (CNN): in training mode the forward uses batch statistics, so the running mean/var
do not enter the loss or any gradient. onnxruntime's training session does not write them back
(they are frozen inputs). apexc binds BN outputs 1 and 2 back to them once per step (DESIGN.md
2), so their values after 5 steps are recorded too, computed by onnxruntime inference (CPU,
optimizations off) of the same model with the BN outputs exposed, run with the parameters
before each of the 5 updates: running = momentum * running + (1 - momentum) * batch stat.

Files written under tests/fixtures/ort_training/<model>/ (K = 0.. in initializer order of the
trainable parameters; every file is a TensorProto whose name is the parameter's name):
    loss.pb       float32 [5]: the loss of each of the 5 steps (forward before each update)
    grad_K.pb     gradient of parameter K after one backward at the initial parameters
    param_K.pb    parameter K after 5 AdamW steps
    state_K.pb    (CNN) BN running statistics after 5 steps (name = the initializer's name)
    shift_K.pb    (CNN) the part of state K that comes from a zero-gradient Conv bias feeding
                  the BN (zeros for the others): sum over steps k = 1..5 of
                  (1 - momentum) momentum^(5 - k) b_(k-1), b_(k-1) the bias before update k.
                  The batch mean includes that bias, whose AdamW trajectory is rounding noise
                  (STRUCTURAL_ZERO_GRAD), so running means are compared without it:
                  state - shift, with apexc's own bias trajectory on apexc's side.

--check recomputes everything and compares with the committed files (same names and shapes,
relative L2 error <= 1e-6, or absolute <= 1e-9 for near-zero tensors); "N passed, M failed".
"""
import argparse
import os
import sys
import tempfile
import types

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EXAMPLES = ("mlp", "cnn", "transformer")
# models whose reference uses onnxruntime's pre-training transformations (see above)
NEEDS_ORT_PRETRAINING = {"cnn"}
STEPS = 5
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.01
CHECK_TOL = 1e-6
VARIANT_TOL = 1e-5
# Parameters whose gradient is exactly zero in exact arithmetic, so that both onnxruntime and
# apexc produce fp32 rounding noise (about 1e-8 of the model's gradient norm) for them, and
# AdamW, which divides m by sqrt(v), turns that noise into +-lr steps of arbitrary sign: their
# parameters after 5 steps are not reproducible by any other implementation (nor by float64).
#   conv1.bias, conv2.bias: a per-channel constant added before BatchNormalization in training
#     mode is removed again by the batch-mean subtraction.
#   attn/k.bias: adds q . b_k to every score of a query row, and Softmax is invariant to a
#     constant shift along its axis.
# compute() asserts these gradients are below ZERO_GRAD_REL of the model's gradient norm (and
# that no other parameter is), and the variant cross-check compares them absolutely.
STRUCTURAL_ZERO_GRAD = {"cnn": ("conv1.bias", "conv2.bias"), "transformer": ("attn/k.bias",)}
ZERO_GRAD_REL = 1e-6

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def _import_ort_training():
    """onnxruntime.training's artifacts and api modules without its torch-importing __init__."""
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    pkg = os.path.join(os.path.dirname(onnxruntime.__file__), "training")
    if not os.path.isdir(pkg):
        sys.exit("make_reference.py: this onnxruntime has no training package; install "
                 "onnxruntime-training in a venv (see the file comment)")
    if "onnxruntime.training" not in sys.modules:
        mod = types.ModuleType("onnxruntime.training")
        mod.__path__ = [pkg]
        sys.modules["onnxruntime.training"] = mod
    from onnxruntime.training import artifacts, onnxblock  # noqa: F401
    from onnxruntime.training.api import CheckpointState, Module, Optimizer  # noqa: F401
    import onnxruntime.training.onnxblock._training_graph_utils as tgu
    import onnxruntime.training.onnxblock.optim.optim as optim
    return onnxruntime, types.SimpleNamespace(artifacts=artifacts, onnxblock=onnxblock, tgu=tgu,
                                              optim=optim, CheckpointState=CheckpointState,
                                              Module=Module, Optimizer=Optimizer)


def session_options(ort):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


class _Silence:
    """Redirects fd 1 and 2 (onnxruntime's C++ logging of graph transformers) to /dev/null."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc):
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)


def bn_running_stats(model):
    names = []
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            names += [x for x in n.input[3:5] if x]
    return names


def trainable_params(model):
    frozen = set(bn_running_stats(model))
    return [i.name for i in model.graph.initializer
            if i.data_type == TensorProto.FLOAT and i.name not in frozen]


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def write_tensor(path, name, arr):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(arr), name).SerializeToString())


def first_batch(name):
    """The data inputs of tests/fixtures/ort/<name>/test_data_set_0, in graph-input order."""
    ds = os.path.join(ROOT, "tests", "fixtures", "ort", name, "test_data_set_0")
    feeds, k = [], 0
    while os.path.exists(os.path.join(ds, f"input_{k}.pb")):
        feeds.append(read_tensor(os.path.join(ds, f"input_{k}.pb")))
        k += 1
    return feeds


def ort_ready_model(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "SoftmaxCrossEntropyLoss" and len(n.output) < 2:
            n.output.append(n.output[0] + "_log_prob")
    return m


def torch_adamw_block(ot):
    """AdamW onnxblock with onnxruntime's adam_mode=0 (torch.optim.AdamW semantics)."""

    class TorchAdamW(ot.optim.AdamW):
        def __init__(self):
            super().__init__(bias_correction=True, betas=(BETA1, BETA2), eps=EPS,
                             weight_decay=WEIGHT_DECAY)
            inner = self._adamw
            build_node = inner._build_optimizer_node

            def with_torch_mode(input_names, output_name, node_name, node_attributes):
                attrs = dict(node_attributes)
                attrs["adam_mode"] = 0
                return build_node(input_names, output_name, node_name, attrs)

            inner._build_optimizer_node = with_torch_mode

    return TorchAdamW()


def generate(ort, ot, model, out_dir, pretraining):
    params = trainable_params(model)
    frozen = bn_running_stats(model)
    loss_name = model.graph.output[0].name
    saved = ot.tgu.get_optimized_model
    if not pretraining:
        ot.tgu.get_optimized_model = lambda m, requires_grad, options: m
    try:
        with _Silence():
            ot.artifacts.generate_artifacts(
                ort_ready_model(model), requires_grad=params, frozen_params=frozen or None,
                loss=ot.onnxblock.blocks.PassThrough(), loss_input_names=[loss_name],
                optimizer=torch_adamw_block(ot), artifact_directory=out_dir)
    finally:
        ot.tgu.get_optimized_model = saved
    for f in ("training_model.onnx", "optimizer_model.onnx"):
        path = os.path.join(out_dir, f)
        m = onnx.load(path)
        if m.ir_version > 8:
            m.ir_version = 8
            onnx.save(m, path)
    opt = onnx.load(os.path.join(out_dir, "optimizer_model.onnx"))
    modes = [a.i for n in opt.graph.node if n.op_type == "AdamWOptimizer"
             for a in n.attribute if a.name == "adam_mode"]
    assert modes == [0], f"optimizer model: adam_mode {modes}, expected [0]"
    return params


def train(ort, ot, model, feeds, pretraining):
    """Runs 5 AdamW steps; returns (losses, grads at step 1, params before each step, final)."""
    with tempfile.TemporaryDirectory(prefix="apexc_ortt_") as tmp:
        params = generate(ort, ot, model, tmp, pretraining)
        state = ot.CheckpointState.load_checkpoint(os.path.join(tmp, "checkpoint"))
        module = ot.Module(os.path.join(tmp, "training_model.onnx"), state, device="cpu",
                           session_options=session_options(ort))
        optimizer = ot.Optimizer(os.path.join(tmp, "optimizer_model.onnx"), module)
        optimizer.set_learning_rate(LR)
        module.train()
        inputs = [a for _, a in feeds]
        assert module.input_names() == [n for n, _ in feeds], module.input_names()
        losses, grads, history = [], None, []
        m = {p: 0.0 for p in params}
        v = {p: 0.0 for p in params}
        for t in range(1, STEPS + 1):
            before = {p: state.parameters[p].data.copy() for p in params}
            history.append(before)
            loss = module(*inputs)
            losses.append(float(loss))
            g = {p: state.parameters[p].grad.copy() for p in params}
            if grads is None:
                grads = g
            optimizer.step()
            module.lazy_reset_grad()
            # torch.optim.AdamW in float64 from onnxruntime's own gradients
            worst, where = 0.0, ""
            for p in params:
                gp = g[p].astype(np.float64)
                m[p] = BETA1 * m[p] + (1 - BETA1) * gp
                v[p] = BETA2 * v[p] + (1 - BETA2) * gp * gp
                lr = float(np.float32(LR))
                want = before[p].astype(np.float64) * (1 - lr * WEIGHT_DECAY)
                want -= lr / (1 - BETA1 ** t) * m[p] / (np.sqrt(v[p]) / np.sqrt(1 - BETA2 ** t) + EPS)
                d = float(np.max(np.abs(state.parameters[p].data - want)))
                if d > worst:
                    worst, where = d, p
            if worst > 1e-3 * LR:
                raise AssertionError(f"step {t}: onnxruntime's AdamW differs from torch.optim.AdamW "
                                     f"by {worst:.3g} (= {worst / LR:.3g} lr) at {where}")
            if t == 1:
                print(f"    AdamW step 1: max |onnxruntime - float64 torch formula| = "
                      f"{worst / LR:.2g} lr ({where})")
        final = {p: state.parameters[p].data.copy() for p in params}
    return params, np.array(losses, np.float32), grads, history, final


def running_stats(ort, model, feeds, history):
    """BN running statistics after len(history) steps, by onnxruntime inference."""
    stats = bn_running_stats(model)
    if not stats:
        return {}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    outs = []
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            for k in (1, 2):
                outs.append((n.input[2 + k], n.output[k]))
    inits = {i.name: i for i in m.graph.initializer}
    for name in list(inits):
        i = inits[name]
        m.graph.input.append(helper.make_tensor_value_info(name, i.data_type, list(i.dims)))
    del m.graph.initializer[:]
    for _, o in outs:
        m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    sess = ort.InferenceSession(m.SerializeToString(), session_options(ort),
                                providers=["CPUExecutionProvider"])
    cur = {name: numpy_helper.to_array(inits[name]) for name in stats}
    for before in history:
        feed = {n: a for n, a in feeds}
        feed.update({n: numpy_helper.to_array(i) for n, i in inits.items()})
        feed.update(before)
        feed.update(cur)
        res = sess.run([o for _, o in outs], feed)
        cur = {src: r for (src, _), r in zip(outs, res)}
    return cur


def bias_shifts(model, history, zero):
    """Running mean -> contribution of a zero-gradient Conv bias feeding its BN (see shift_K)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for n in model.graph.node:
        if n.op_type != "BatchNormalization":
            continue
        conv = producer.get(n.input[0])
        if conv is None or conv.op_type != "Conv" or len(conv.input) < 3 or conv.input[2] not in zero:
            continue
        mom = next((a.f for a in n.attribute if a.name == "momentum"), 0.9)
        bias = conv.input[2]
        shift = np.zeros(history[0][bias].shape, np.float64)
        for before in history:
            shift = mom * shift + (1 - mom) * before[bias].astype(np.float64)
        out[n.input[3]] = shift.astype(np.float32)
    return out


def rel_l2(got, ref):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    den = np.linalg.norm(ref)
    num = np.linalg.norm(got - ref)
    return num / den if den > 0 else num


def compute(ort, ot, name):
    model = onnx.load(os.path.join(ROOT, "examples", name, "model.onnx"))
    feeds = first_batch(name)
    pre = name in NEEDS_ORT_PRETRAINING
    params, losses, grads, history, final = train(ort, ot, model, feeds, pre)
    total = np.sqrt(sum(float(np.sum(grads[p].astype(np.float64) ** 2)) for p in params))
    zero = [p for p in params if np.linalg.norm(grads[p].astype(np.float64)) <= ZERO_GRAD_REL * total]
    print(f"    gradient norm {total:.4g}; gradients below {ZERO_GRAD_REL:g} of it: {zero or 'none'}")
    if zero != list(STRUCTURAL_ZERO_GRAD.get(name, ())):
        raise AssertionError(f"{name}: zero-gradient parameters {zero}, expected "
                             f"{list(STRUCTURAL_ZERO_GRAD.get(name, ()))}")
    if not pre:
        # the reference itself, cross-checked: onnxruntime with its fusions must agree
        _, l2, g2, _, f2 = train(ort, ot, model, feeds, True)
        live = [p for p in params if p not in zero]
        worst = max([rel_l2(l2, losses)] + [rel_l2(g2[p], grads[p]) for p in live]
                    + [rel_l2(f2[p], final[p]) for p in live]
                    + [np.linalg.norm(g2[p] - grads[p]) / total for p in zero])
        print(f"    onnxruntime with its pre-training fusions: max rel L2 difference {worst:.2g}")
        if worst > VARIANT_TOL:
            raise AssertionError(f"{name}: fused and literal onnxruntime references differ by {worst:.3g}")
    stats = running_stats(ort, model, feeds, history)
    shifts = bias_shifts(model, history, zero)
    files = [("loss.pb", "loss", losses)]
    files += [(f"grad_{k}.pb", p, grads[p]) for k, p in enumerate(params)]
    files += [(f"param_{k}.pb", p, final[p]) for k, p in enumerate(params)]
    files += [(f"state_{k}.pb", s, stats[s]) for k, s in enumerate(bn_running_stats(model))]
    files += [(f"shift_{k}.pb", s, shifts.get(s, np.zeros_like(stats[s])))
              for k, s in enumerate(bn_running_stats(model))]
    return files


def record(ort, ot, out):
    for name in EXAMPLES:
        print(f"{name}:")
        files = compute(ort, ot, name)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.endswith(".pb"):
                os.remove(os.path.join(d, f))
        for fname, tname, arr in files:
            write_tensor(os.path.join(d, fname), tname, arr)
        losses = files[0][2]
        print(f"    wrote {len(files)} tensors to {d}; loss {losses[0]:.6f} -> {losses[-1]:.6f} "
              f"over {STEPS} AdamW steps")
    return 0


def check(ort, ot, out):
    failed = 0
    for name in EXAMPLES:
        print(f"{name}:")
        problems = []
        files = compute(ort, ot, name)
        d = os.path.join(out, name)
        want = {f for f in os.listdir(d) if f.endswith(".pb")} if os.path.isdir(d) else set()
        for fname, tname, arr in files:
            path = os.path.join(d, fname)
            if not os.path.exists(path):
                problems.append(f"{fname} missing")
                continue
            want.discard(fname)
            rn, ra = read_tensor(path)
            err = rel_l2(arr, ra)
            absdiff = float(np.max(np.abs(np.asarray(arr, np.float64) - ra))) if ra.size else 0.0
            if rn != tname or ra.shape != np.shape(arr) or not (err <= CHECK_TOL or absdiff <= 1e-9):
                problems.append(f"{fname} ({rn}): rel L2 {err:.2e}, max abs {absdiff:.2e}")
        problems += [f"{f}: not produced any more" for f in sorted(want)]
        print(f"  {'PASS' if not problems else 'FAIL'} {name}" + "".join("\n    " + p for p in problems))
        failed += bool(problems)
    print(f"{len(EXAMPLES) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "ort_training"))
    ap.add_argument("--check", action="store_true", help="compare with the committed fixtures")
    a = ap.parse_args()
    ort, ot = _import_ort_training()
    print(f"onnxruntime-training {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}")
    return check(ort, ot, a.out) if a.check else record(ort, ot, a.out)


if __name__ == "__main__":
    sys.exit(main())
