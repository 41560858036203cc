#!/usr/bin/env python3
"""check_models.py - the reference PyTorch models of tests/models through apexc and apexrun,
against PyTorch's own training (issue 11; fixtures written by make_models.py, which needs
torch; this check needs only apexc, apexrun, onnx, onnxruntime and numpy).

For every fixture MODEL/EXPORT/model.onnx and every level (-O0, -O1, -O2, -O2 --half=bf16):

  1. compile: apexc model.onnx LEVEL --optimizer sgd --lr LR -o plan.apx
  2. train:   apexrun plan.apx --data MODEL/data --steps 20 --no-shuffle --log log.jsonl
              (-O0 also --export-onnx)
  3. losses:  max over the 20 steps of |loss - ref| / |ref| against PyTorch's losses:
              -O0 within 1e-5 of the fp32 run (of the fp64 run where reference.json says
              o0_reference fp64), -O1/-O2/bf16 within 2e-2 of the fp32 run, or within twice
              what PyTorch's own mixed precision moves the losses from its fp32 run when
              that is more (reference.json amp_fp16 / amp_bf16: torch.autocast on the same
              steps; resnet18's fp16 autocast run is 4.4e-2 from fp32, bf16 8.0e-2, so
              2e-2 asks of apexc what PyTorch's AMP does not reach). fp16 levels use
              dynamic loss scaling from 1024 (--max-loss-scale 1024, Apex's way to set the
              dynamic scaler's start; GradScaler(init_scale=1024) in the reference): from
              the default 2^16 resnet18's first step overflows, in apexc as in PyTorch's
              GradScaler, and skips; every later step then trains another model than
              PyTorch's fp32 run at that step, so a step-by-step comparison means nothing.
              A skipped step still fails the case;
  4. -O0 only, export: the --export-onnx model in onnxruntime on MODEL/eval/ against
              PyTorch eval() of the trained model (eval_outputs.npz), relative L2 <= 1e-5
              per output;
  5. -O0 only, gradients: a second plan with lr = 1e4 trains one step and exports; the
              first-step gradient is (p0 - p1) / lr (exact to fp32 rounding of p1, ~1e-7
              relative), compared per parameter with PyTorch's float64 gradient
              (grads64.npz), relative L2 <= max(1e-5, 2x PyTorch's own fp32 error);
              BatchNorm scale and bias within 1e-5 (issue 11 item 6).

A case (MODEL/EXPORT/LEVEL) passes when every step it has passes. The table prints every
case: compiled, trained (skipped steps), max relative loss difference, the export and
gradient errors at -O0, and why it fails. For exports that do not compile it then lists
apexc's reasons (every unsupported op, with its count) and, from the ONNX graph, whether each
blocked node only computes from constants (would fold at compile time) or is on the data
path; the last table orders the blockers by how many exports each blocks.

Expectations (tests/models/expectations.tsv, `case<TAB>pass|fail<TAB>reason`): the check
fails when a case expected to pass fails, and when a case expected to fail passes (edit the
file, or rewrite it with --update, as ops land). A case whose failure reason changed is
noted, not failed.

    check_models.py --apexc BIN --apexrun BIN [--only MODEL[/EXPORT[/LEVEL]]] [--jobs N]
                    [--update] [--json OUT.json] [--keep DIR]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ort"))
import check_emitted  # noqa: E402  (onnxruntime session options, relative L2)
import junit  # noqa: E402

MODELS = ("resnet18", "mobilenet_v3_small", "vit", "gpt2", "bert", "mlp")
EXPORTS = ("readme", "helper_legacy", "helper_dynamo", "dynamo_default")
# fp16 levels: the dynamic loss scale starts at 1024 (see 3. above), not 2^16
FP16_SCALE = ["--max-loss-scale", "1024"]
LEVELS = (("O0", ["-O0"]), ("O1", ["-O1", *FP16_SCALE]), ("O2", ["-O2", *FP16_SCALE]),
          ("O2-bf16", ["-O2", "--half=bf16"]))
TOL_O0 = 1e-5
TOL_MIXED = 2e-2
AMP_FACTOR = 2  # mixed levels: within max(TOL_MIXED, AMP_FACTOR x PyTorch autocast's deviation)
TOL_EXPORT = 1e-5
TOL_GRAD = 1e-5
GRAD_LR = 1e4
EXPECT = os.path.join(HERE, "expectations.tsv")
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
               onnx.TensorProto.BFLOAT16}


def run(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def errors_of(stderr):
    """apexc/apexrun error lines (warnings and progress left out)."""
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]


def short(stderr, file=None):
    lines = errors_of(stderr)
    s = lines[0] if lines else "(no message)"
    if file and s.startswith(file + ": "):
        s = s[len(file) + 2:]
    if len(lines) > 1:
        s += f" [+{len(lines) - 1} more lines]"
    return s


def rel_l2(a, b):
    e, ok = check_emitted.rel_l2(a, b)
    return e if ok else float("inf")


# ---- one case ----------------------------------------------------------------------------

class Case:
    def __init__(self, model, export, level):
        self.model, self.export, self.level = model, export, level
        self.name = f"{model}/{export}/{level}"
        self.compiled = self.trained = False
        self.skipped = 0
        self.loss_diff = self.loss_diff5 = None
        self.tol = None  # the loss tolerance applied (mixed levels: see mixed_tolerance)
        self.export_diff = self.grad_diff = None
        self.grad_worst = ""
        self.reason = ""
        self.errors = []      # apexc's error lines when it does not compile
        self.warnings = []

    @property
    def ok(self):
        return not self.reason

    def fail(self, why):
        if not self.reason:
            self.reason = why


def load_ref(model):
    with open(os.path.join(HERE, model, "reference.json")) as f:
        return json.load(f)


def read_log(path):
    with open(path) as f:
        rows = [json.loads(ln) for ln in f if ln.strip()]
    return [r["loss"] for r in rows], sum(1 for r in rows if r.get("skipped"))


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def batchnorm_params(path):
    """Names of the BatchNormalization scale and bias inputs of the model."""
    return {i for n in onnx.load(path).graph.node if n.op_type == "BatchNormalization"
            for i in n.input[1:3] if i}


def check_export(c, exp_path, ref):
    d = os.path.join(HERE, c.model)
    per_export = os.path.join(d, c.export, "eval_outputs.npz")
    want = np.load(per_export if os.path.exists(per_export) else os.path.join(d, "eval_outputs.npz"))
    ort = check_emitted._ort()
    sess = ort.InferenceSession(exp_path, check_emitted.session_options(),
                                providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        p = os.path.join(d, "eval", i.name + ".npy")
        if not os.path.exists(p):
            c.fail(f"export: input '{i.name}' of the exported model has no eval/{i.name}.npy")
            return
        feeds[i.name] = np.load(p)
    outs = sess.run(None, feeds)
    if len(outs) != len(want.files):
        c.fail(f"export: {len(outs)} outputs, PyTorch eval() has {len(want.files)}")
        return
    c.export_diff = max(rel_l2(o, want[f"output_{i}"]) for i, o in enumerate(outs))
    if not c.export_diff <= TOL_EXPORT:
        c.fail(f"export: onnxruntime vs PyTorch eval() rel. L2 {c.export_diff:.2e} > {TOL_EXPORT:g}")


def check_grads(c, args, onnx_path, flags, ref, tmp):
    """First-step gradients from one SGD step with a huge lr: g = (p0 - p1) / lr."""
    plan = os.path.join(tmp, "grad.apx")
    rc, _, err = run([args.apexc, onnx_path, *flags, "--optimizer", "sgd", "--lr", str(GRAD_LR),
                      "-q", "-o", plan])
    if rc:
        c.fail(f"gradients: compile: {short(err, onnx_path)}")
        return
    out = os.path.join(tmp, "grad.onnx")
    rc, _, err = run([args.apexrun, plan, "--data", os.path.join(HERE, c.model, "data"),
                      "--steps", "1", "--no-shuffle", "--threads", "1", "-q",
                      "--export-onnx", out])
    if rc:
        c.fail(f"gradients: apexrun: {short(err)}")
        return
    p0, p1 = initializers(onnx_path), initializers(out)
    g64 = np.load(os.path.join(HERE, c.model, "grads64.npz"))
    g32 = np.load(os.path.join(HERE, c.model, "grads.npz"))
    prefix = ref["exports"][c.export].get("param_prefix", "")
    bn_params = batchnorm_params(onnx_path)
    worst, worst_name, worst_tol = 0.0, "", TOL_GRAD
    for name in g64.files:
        key = prefix + name
        if key not in p0 or key not in p1:
            c.fail(f"gradients: parameter '{key}' is not in the exported model")
            return
        g = (p0[key].astype(np.float64) - p1[key].astype(np.float64)) / GRAD_LR
        e = rel_l2(g, g64[name])
        # BatchNorm scale/bias: within TOL_GRAD of float64 whatever PyTorch's own fp32 error
        # (issue 11 item 6); other parameters: max(TOL_GRAD, 2x PyTorch's fp32 error). A
        # gradient that is zero in exact arithmetic (a BN bias whose shift the next
        # training-mode BN removes: float64 gives ~1e-19) has no relative error to speak of;
        # there PyTorch's own fp32 error exceeds 100%, and it is judged like the others.
        torch32 = rel_l2(g32[name], g64[name])
        tol = TOL_GRAD if key in bn_params and torch32 <= 1.0 else max(TOL_GRAD, 2 * torch32)
        if e / tol > worst / worst_tol:
            worst, worst_name, worst_tol = e, key, tol
    c.grad_diff, c.grad_worst = worst, worst_name
    if not worst <= worst_tol:
        c.fail(f"gradients: '{worst_name}' rel. L2 {worst:.2e} vs PyTorch fp64 > {worst_tol:.1e}")


def mixed_tolerance(c, ref):
    """(tolerance, explanation) of a mixed level's losses against PyTorch fp32: TOL_MIXED, or
    AMP_FACTOR x how far PyTorch's own autocast run of the same half type is from its fp32
    run (reference.json amp_fp16 / amp_bf16) when that is more."""
    half = "bf16" if "bf16" in c.level else "fp16"
    amp = ref.get("amp_" + half)
    if not amp or not AMP_FACTOR * amp["vs_fp32_max_rel"] > TOL_MIXED:
        return TOL_MIXED, ""
    return (AMP_FACTOR * amp["vs_fp32_max_rel"],
            f" ({AMP_FACTOR}x PyTorch autocast {half}'s own {amp['vs_fp32_max_rel']:.1e})")


def run_case(c, args):
    ref = load_ref(c.model)
    onnx_path = os.path.join(HERE, c.model, c.export, "model.onnx")
    flags = dict(LEVELS)[c.level]
    tmp = tempfile.mkdtemp(prefix=c.name.replace("/", "_") + "_", dir=args.tmp)
    try:
        plan = os.path.join(tmp, "plan.apx")
        rc, _, err = run([args.apexc, onnx_path, *flags, "--optimizer", "sgd", "--lr",
                          repr(ref["lr"]), "-o", plan])
        c.warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
        if rc:
            c.errors = errors_of(err)
            c.fail(f"compile: {short(err, onnx_path)}")
            return c
        c.compiled = True
        log = os.path.join(tmp, "log.jsonl")
        cmd = [args.apexrun, plan, "--data", os.path.join(HERE, c.model, "data"), "--steps",
               str(ref["steps"]), "--no-shuffle", "--threads", "1", "-q", "--log", log]
        exp = os.path.join(tmp, "exported.onnx")
        if c.level == "O0":
            cmd += ["--export-onnx", exp]
        rc, _, err = run(cmd)
        if rc:
            c.fail(f"train: {short(err)}")
            return c
        c.trained = True
        losses, c.skipped = read_log(log)
        against = ref["losses_fp64"] if c.level == "O0" and ref.get("o0_reference") == "fp64" \
            else ref["losses_fp32"]
        if len(losses) != len(against) or not all(np.isfinite(losses)):
            c.fail(f"losses: {len(losses)} steps logged, non-finite: "
                   f"{sum(1 for x in losses if not np.isfinite(x))}")
            return c
        d = [abs(a - b) / abs(b) for a, b in zip(losses, against)]
        c.loss_diff, c.loss_diff5 = max(d), max(d[:5])
        tol, why = (TOL_O0, "") if c.level == "O0" else mixed_tolerance(c, ref)
        c.tol = tol
        if not c.loss_diff <= tol:
            step = int(np.argmax(d)) + 1
            c.fail(f"losses: max rel. difference {c.loss_diff:.2e} (step {step}) > {tol:.2g}{why}"
                   + (f"; first 5 steps {c.loss_diff5:.2e}" if c.level == "O0" else "")
                   + (f"; {c.skipped} step{'s' if c.skipped > 1 else ''} skipped (loss-scale "
                      "overflow), which PyTorch's fp32 run never skips" if c.skipped else ""))
        if c.level == "O0":
            check_export(c, exp, ref)
            check_grads(c, args, onnx_path, flags, ref, tmp)
    except Exception as e:  # a broken fixture or tool: the case fails, with the reason
        c.fail(f"harness: {type(e).__name__}: {e}")
    finally:
        if args.keep:
            dst = os.path.join(args.keep, c.name.replace("/", "_"))
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(tmp, dst)
        shutil.rmtree(tmp, ignore_errors=True)
    return c


# ---- what blocks an export ---------------------------------------------------------------

UNSUPPORTED = re.compile(r"node '(.*)' \(([A-Za-z0-9_]+)\): (.*?)(?: \((?:first of )?(\d+) nodes?\))?$")
RANDOM_OPS = {"RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal",
              "Multinomial", "Bernoulli", "Dropout"}


def constant_nodes(path):
    """Names of the nodes that compute only from constants: Constant nodes, initializers that
    are not trained (apexc.trainable when present, else the non-float ones), shapes of
    tensors whose shape is static (CastLike reads only its second input's type); random ops
    never. What compile-time evaluation would fold."""
    mp = onnx.load(path)
    g = mp.graph
    listed = next((json.loads(e.value) for e in mp.metadata_props if e.key == "apexc.trainable"),
                  None)
    try:
        shapes = onnx.shape_inference.infer_shapes(mp).graph
    except Exception:
        shapes = g
    static = set()
    for vi in list(shapes.value_info) + list(shapes.input) + list(shapes.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            static.add(vi.name)
    const = set()
    for t in g.initializer:
        static.add(t.name)
        trained = t.name in listed if listed is not None else t.data_type in FLOAT_TYPES
        if not trained:
            const.add(t.name)
    names = set()
    for n in g.node:
        ins = [i for i in n.input if i]
        if n.op_type == "Constant":
            ok = True
        elif n.op_type in RANDOM_OPS:
            ok = False
        elif n.op_type in ("Shape", "Size"):
            ok = bool(ins) and (ins[0] in static or ins[0] in const)
        elif n.op_type == "CastLike":
            ok = bool(ins) and ins[0] in const
        else:
            ok = all(i in const for i in ins)
        if ok:
            const.update(o for o in n.output if o)
            names.add(n.name)
    return names, {n.name: n.op_type for n in g.node}


def blockers(c):
    """[(op or reason, count, 'fold'|'data'|'fold+data'|'-')] from apexc's error lines."""
    path = os.path.join(HERE, c.model, c.export, "model.onnx")
    out = []
    consts, ops = None, None
    for ln in c.errors:
        s = ln[len(path) + 2:] if ln.startswith(path + ": ") else ln
        m = UNSUPPORTED.match(s)
        if m and ("unknown op" in m.group(3) or "not supported yet" in m.group(3)):
            if consts is None:
                consts, ops = constant_nodes(path)
            op = m.group(2)
            nodes = [n for n, t in ops.items() if t == op]
            nf = sum(1 for n in nodes if n in consts)
            where = "fold" if nf == len(nodes) else "data" if nf == 0 else f"fold {nf}/data {len(nodes) - nf}"
            out.append((op, int(m.group(4) or 1), where))
        else:
            out.append((s, 0, "-"))
    return out


# ---- expectations ------------------------------------------------------------------------

def read_expectations(path):
    exp = {}
    if not os.path.exists(path):
        return exp
    with open(path) as f:
        for ln in f:
            if not ln.strip() or ln.startswith("#"):
                continue
            parts = ln.rstrip("\n").split("\t")
            exp[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return exp


def write_expectations(path, cases):
    with open(path, "w") as f:
        f.write("# tests/models/check_models.py expectations: case<TAB>pass|fail<TAB>reason.\n"
                "# A case expected to pass that fails, or expected to fail that passes, fails\n"
                "# the check: keep this file true as ops land (check_models.py --update).\n")
        for c in cases:
            f.write(f"{c.name}\t{'pass' if c.ok else 'fail'}\t{c.reason}\n")


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}e}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apexc", required=True)
    ap.add_argument("--apexrun", required=True)
    ap.add_argument("--only", help="MODEL, MODEL/EXPORT or MODEL/EXPORT/LEVEL")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--expect", default=EXPECT)
    ap.add_argument("--update", action="store_true", help="rewrite the expectations file")
    ap.add_argument("--json", help="write every case's figures here")
    ap.add_argument("--keep", help="keep each case's plans, logs and exports here")
    ap.add_argument("--tmp", default=os.environ.get("TEST_TMPDIR"))
    args = ap.parse_args(argv)
    for t in (args.apexc, args.apexrun):
        if not os.access(t, os.X_OK):
            ap.error(f"{t}: not an executable")

    cases = [Case(m, e, lv) for m in MODELS for e in EXPORTS for lv, _ in LEVELS]
    if args.only:
        cases = [c for c in cases if c.name == args.only or c.name.startswith(args.only + "/")]
        if not cases:
            ap.error(f"--only {args.only}: no such case")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(lambda c: run_case(c, args), cases))

    print(f"{'model':<19} {'export':<14} {'level':<8} {'compiled':<9} {'trained':<8} "
          f"{'loss diff':<9} {'(5 steps)':<9} {'loss tol':<8} {'export':<8} {'grad':<8} result")
    for c in cases:
        tr = ("yes" + (f" {c.skipped}sk" if c.skipped else "")) if c.trained else "no"
        print(f"{c.model:<19} {c.export:<14} {c.level:<8} {'yes' if c.compiled else 'no':<9} "
              f"{tr:<8} {fmt(c.loss_diff):<9} {fmt(c.loss_diff5):<9} {fmt(c.tol):<8} "
              f"{fmt(c.export_diff):<8} {fmt(c.grad_diff):<8} {'pass' if c.ok else 'FAIL: ' + c.reason}")

    # apexc's warnings at -O0 (the exporter hazards of compiler/export_hazards.h)
    warned = [c for c in cases if c.level == "O0" and c.warnings]
    if warned:
        print("\napexc warnings at -O0:")
        for c in warned:
            print(f"  {c.model}/{c.export}: {len(c.warnings)}")
            for w in c.warnings:
                w = w.replace(os.path.join(HERE, c.model, c.export, "model.onnx") + ": ", "")
                print(f"    {w[:200]}{'...' if len(w) > 200 else ''}")

    # why exports do not compile (the same at every level: shown once, from -O0's run)
    blocked = collections.OrderedDict()
    for c in cases:
        if not c.compiled and c.errors and (c.model, c.export) not in blocked:
            blocked[(c.model, c.export)] = blockers(c)
    if blocked:
        print("\nexports apexc refuses (every reason apexc gives; fold = the nodes compute only "
              "from constants, data = on the data path):")
        for (m, e), bl in blocked.items():
            print(f"  {m}/{e}:")
            for op, n, where in bl:
                print(f"    {op} x{n} ({where})" if n else f"    {op}")
        by_op = collections.defaultdict(list)
        for (m, e), bl in blocked.items():
            for op, n, where in bl:
                if n:
                    by_op[op].append((f"{m}/{e}", where))
        print("\nblocking ops, by the number of exports each blocks:")
        for op, lst in sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            wheres = sorted({w for _, w in lst})
            print(f"  {op:<16} {len(lst):>2} exports ({', '.join(wheres)}): "
                  f"{', '.join(x for x, _ in lst)}")

    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in vars(c).items()} for c in cases], f, indent=1)
    if args.update:
        if args.only:
            ap.error("--update needs the whole set (no --only)")
        write_expectations(args.expect, cases)
        print(f"\nwrote {args.expect}")

    exp = read_expectations(args.expect)
    results, bad = [], 0
    for c in cases:
        want, why = exp.get(c.name, ("pass", ""))
        got = "pass" if c.ok else "fail"
        if c.name not in exp and not args.update:
            text = f"{c.name}: not in {os.path.basename(args.expect)} (add it)"
            ok = False
        elif want == got:
            ok, text = True, ""
            if got == "fail" and why != c.reason:
                print(f"note: {c.name} fails for another reason now: {c.reason} (was: {why})")
        elif want == "pass":
            ok, text = False, f"{c.name}: expected to pass, fails: {c.reason}"
        else:
            ok, text = False, (f"{c.name}: expected to fail ({why}) but passes: update "
                               f"{os.path.basename(args.expect)}")
        if not ok:
            print("MISMATCH " + text)
            bad += 1
        results.append((c.name, ok, text))
    junit.write(None, "tests/models", results)
    n_pass = sum(1 for c in cases if c.ok)
    print(f"\n{n_pass} of {len(cases)} cases pass; {len(cases) - bad} match the expectations, "
          f"{bad} do not")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
