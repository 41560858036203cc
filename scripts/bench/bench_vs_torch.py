#!/usr/bin/env python3
"""bench_vs_torch.py - CPU training step time of apexrun against PyTorch eager on the reference
models of tests/models (issue 12 item 5); run through scripts/bench_vs_torch.sh, which builds
apexc and apexrun and picks a Python with torch (PyTorch is needed for the peer only).

    bench_vs_torch.py BIN_DIR [--threads 1,2] [--reps K] [--steps N] [--warmup W]
                              [--models LIST] [--mkldnn on|off|both] [--proxies]

The same model, initial weights, data, batch and optimizer on both sides: each model of
tests/models (its README-recipe export, else the legacy helper's; a model no export of which
compiles is listed as skipped with apexc's reason), SGD with the fixture's lr (momentum 0,
weight decay 0), batches in file order (--no-shuffle), fp32. --proxies: for such a model,
time its dynamo_default export instead when that compiles, marked "dynamo_default*": the same
layers and shapes, but the exporter's optimizer tied equal initializers and froze scalars
into trained ones, so it trains another model after the first step (a timing proxy only;
tests/models/README.md).
  apexc    `apexc MODEL -O0 --optimizer sgd --lr LR -o PLAN`, then `apexrun PLAN --data DIR
           --steps N --no-shuffle --threads T --log F -q`; the step time is each log line's
           "ms" (apexrun's timing of the whole step: batch gather, forward, backward,
           unscale/check, optimizer); the median over steps W+1..N.
  PyTorch  the model as tests/models/make_models.py builds it (same seed, so the same weights),
           in train() mode, torch.set_num_threads(T) (and 1 inter-op thread), eager; one step =
           zero_grad + forward + loss + backward + optimizer.step(), timed with
           time.perf_counter; the median over steps W+1..N. oneDNN (mkldnn) on, PyTorch's
           default, unless --mkldnn off (the fixtures' own setting) or both (two columns).
K repetitions (a fresh process each side, interleaved: apexrun, PyTorch, apexrun, ...);
printed: the median over repetitions of each side's median, and apexrun / PyTorch (below 1:
apexrun faster), per model and thread count. The first losses of both sides are printed as a
sanity check (they are the same computation, equal to ~1e-6).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODELS_DIR = os.path.join(ROOT, "tests", "models")
MODELS = ("resnet18", "mobilenet_v3_small", "vit", "gpt2", "bert", "mlp")
EXPORTS = ("readme", "helper_legacy")


def torch_worker(model_name, threads, steps, mkldnn):
    """One PyTorch run; prints {"ms": [...], "first_loss": x} as JSON on stdout."""
    import numpy as np
    import torch
    sys.path.insert(0, MODELS_DIR)
    import make_models as mm  # noqa: E402 (needs torchvision / transformers)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.backends.mkldnn.enabled = mkldnn
    spec = mm._models()[model_name]
    with open(os.path.join(MODELS_DIR, model_name, "reference.json")) as f:
        ref = json.load(f)
    torch.manual_seed(0)
    model = spec["build"]()
    model.train()
    w = mm.ReadmeWrapper(model, spec)
    names = spec["inputs"] + spec["targets"]
    data = {n: np.load(os.path.join(MODELS_DIR, model_name, "data", n + ".npy")) for n in names}
    b = ref["batch"]
    batches = [mm._to_torch(mm._batch(data, names, k, b), torch.float32) for k in range(mm.BATCHES)]
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=ref["lr"])
    ms, first = [], None
    for k in range(steps):
        args = batches[k % mm.BATCHES]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss, _ = w(*args)
        loss.backward()
        opt.step()
        ms.append((time.perf_counter() - t0) * 1e3)
        if first is None:
            first = float(loss.item())
    print(json.dumps({"ms": ms, "first_loss": first}))


def apexrun_steps(bin_dir, plan, data, threads, steps, log):
    cmd = [os.path.join(bin_dir, "runtime", "apexrun"), plan, "--data", data, "--steps",
           str(steps), "--no-shuffle", "--threads", str(threads), "--log", log, "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    with open(log) as f:
        recs = [json.loads(ln) for ln in f if ln.strip()]
    return [r["ms"] for r in recs], recs[0]["loss"]


def torch_steps(model, threads, steps, mkldnn):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", model, str(threads),
           str(steps), "on" if mkldnn else "off"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"PyTorch worker for {model}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["ms"], out["first_loss"]


def compile_model(apexc, model, tmp, proxies):
    """(plan, export, None) for the first export that compiles, else (None, None, reason)."""
    with open(os.path.join(MODELS_DIR, model, "reference.json")) as f:
        lr = json.load(f)["lr"]
    reason = ""
    for exp in EXPORTS + (("dynamo_default",) if proxies else ()):
        onnx_path = os.path.join(MODELS_DIR, model, exp, "model.onnx")
        plan = os.path.join(tmp, f"{model}_{exp}.apx")
        r = subprocess.run([apexc, onnx_path, "-O0", "--optimizer", "sgd", "--lr", repr(lr), "-q",
                            "-o", plan], capture_output=True, text=True)
        if r.returncode == 0:
            return plan, exp + ("*" if exp not in EXPORTS else ""), None
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        reason = reason or (lines[0].replace(onnx_path + ": ", "") if lines else f"exit {r.returncode}")
    return None, None, reason


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        _, _, model, threads, steps, mk = sys.argv
        torch_worker(model, int(threads), int(steps), mk == "on")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--mkldnn", default="on", choices=("on", "off", "both"))
    ap.add_argument("--proxies", action="store_true",
                    help="time dynamo_default exports of models nothing else compiles for")
    a = ap.parse_args()
    import torch  # the peer; bench_vs_torch.sh checks it is there
    apexc = os.path.join(a.bin_dir, "compiler", "apexc")
    tmp = tempfile.mkdtemp(prefix="apexc_bench_vs_torch_")
    mk_modes = {"on": [True], "off": [False], "both": [True, False]}[a.mkldnn]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"torch {torch.__version__}; {os.cpu_count()} CPUs, load average {load:.2f}; {a.reps} "
          f"repetitions x {a.steps} steps (median of steps {a.warmup + 1}..{a.steps}), interleaved; "
          "ms per step (fp32, SGD)")
    cols = [f"torch{'' if m else '[no-dnn]'}" for m in mk_modes]
    print(f"{'model':<19} {'export':<14} {'batch':>5} {'thr':>3} {'apexrun':>9} "
          + " ".join(f"{c:>14} {'ratio':>6}" for c in cols) + "   first loss apexrun / torch")
    for model in a.models.split(","):
        plan, exp, why = compile_model(apexc, model, tmp, a.proxies)
        if not plan:
            print(f"{model:<19} skipped: apexc does not compile it yet ({why[:150]})", flush=True)
            continue
        with open(os.path.join(MODELS_DIR, model, "reference.json")) as f:
            batch = json.load(f)["batch"]
        data = os.path.join(MODELS_DIR, model, "data")
        for t in [int(x) for x in a.threads.split(",")]:
            res = {"apx": [], **{m: [] for m in mk_modes}}
            first = {}
            for _ in range(a.reps):
                ms, first["apx"] = apexrun_steps(a.bin_dir, plan, data, t, a.steps,
                                                 os.path.join(tmp, "log.jsonl"))
                res["apx"].append(statistics.median(ms[a.warmup:]))
                for m in mk_modes:
                    ms, first["torch"] = torch_steps(model, t, a.steps, m)
                    res[m].append(statistics.median(ms[a.warmup:]))
            A = statistics.median(res["apx"])
            row = " ".join(f"{statistics.median(res[m]):>14.3f} {A / statistics.median(res[m]):>6.2f}"
                           for m in mk_modes)
            print(f"{model:<19} {exp:<14} {batch:>5} {t:>3} {A:>9.3f} {row}   "
                  f"{first['apx']:.6f} / {first['torch']:.6f}", flush=True)
    if a.proxies:
        print("*: timing proxy (another export of the same layers; trains tied/frozen parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
