#!/usr/bin/env python3
"""bench_train.py - CPU training step time of apexc (apexrun, plans compiled at -O0 and -O2)
against onnxruntime-training for the example models (issue 5); run through
scripts/bench_train.sh, which builds apexc and apexrun and picks the onnxruntime-training
Python (a venv: see tests/ort_training/make_reference.py).

    bench_train.py BIN_DIR [--threads 1,2] [--reps K] [--steps N] [--warmup W] [--cases ...]

One step = forward + backward + AdamW update (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight
decay 0.01) on the next batch in file order (samples [kB, (k+1)B), wrapping), every parameter
trainable except BN running statistics.
  apexc        `apexc MODEL -O0|-O2 -o PLAN` (AdamW defaults = the above), then
               `apexrun PLAN --data DIR --steps N --no-shuffle --threads T --log F --quiet`;
               the step time is the "ms" of each JSON log line (apexrun's own timing of the
               whole step: batch gather and upload, forward, backward, unscale/check,
               optimizer, loss-scale update); the median over steps W+1..N.
  onnxruntime  artifacts as make_reference.py builds them (torch AdamW, adam_mode 0), a
               training Module with intra_op_num_threads = T (inter_op 1, sequential, default
               graph optimizations); one step = module(*batch) (train_step) +
               optimizer.step() + module.lazy_reset_grad(), timed from Python with
               perf_counter around the three calls; the median over steps W+1..N.
  O0[CORE]     apexc -O0 again with OPENBLAS_CORETYPE=CORE (--coretype, as in
               bench_infer.py: Debian's OpenBLAS falls back to SSE3 kernels on newer CPUs;
               apexrun now sets it itself, so O0 and O0[CORE] should agree).
K repetitions (fresh process / fresh session each), interleaved; printed: the median over
repetitions of each median, and apexc / onnxruntime ratios (below 1: apexc faster). The
first-step losses of apexc -O0 and onnxruntime are printed side by side as a sanity check.
O2 is fp16 compute on CPU (16-bit storage, fp32 math, rounding on every store: DESIGN.md 12),
so it measures the mixed-precision machinery's overhead on CPU, not a speed-up.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ort_training"))
import batch_variant  # noqa: E402
import bench_infer  # noqa: E402
import make_reference as mr  # noqa: E402


def apexc_steps(bin_dir, plan, data, threads, steps, log, coretype=None):
    env = dict(os.environ)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    cmd = [os.path.join(bin_dir, "runtime", "apexrun"), plan, "--data", data, "--steps", str(steps),
           "--no-shuffle", "--threads", str(threads), "--log", log, "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    with open(log) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return [r["ms"] for r in recs], recs[0]["loss"]


class OrtTrainer:
    def __init__(self, ort, ot, model_path, data_dir, threads, tmp):
        model = onnx.load(model_path)
        self.dir = tempfile.mkdtemp(dir=tmp)
        mr.generate(ort, ot, model, self.dir, pretraining=True)
        self.state = ot.CheckpointState.load_checkpoint(os.path.join(self.dir, "checkpoint"))
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        self.module = ot.Module(os.path.join(self.dir, "training_model.onnx"), self.state,
                                device="cpu", session_options=so)
        self.opt = ot.Optimizer(os.path.join(self.dir, "optimizer_model.onnx"), self.module)
        self.opt.set_learning_rate(mr.LR)
        self.module.train()
        inits = {i.name for i in model.graph.initializer}
        self.inputs = [i for i in model.graph.input if i.name not in inits]
        self.batch = self.inputs[0].type.tensor_type.shape.dim[0].dim_value
        self.data = [np.load(os.path.join(data_dir, i.name + ".npy")) for i in self.inputs]

    def batch_at(self, k):
        n = self.data[0].shape[0]
        idx = (np.arange(self.batch) + k * self.batch) % n
        return [np.ascontiguousarray(d[idx]) for d in self.data]

    def run(self, steps):
        ms, first = [], None
        for k in range(steps):
            feeds = self.batch_at(k)
            t0 = time.perf_counter()
            loss = self.module(*feeds)
            self.opt.step()
            self.module.lazy_reset_grad()
            ms.append((time.perf_counter() - t0) * 1e3)
            if first is None:
                first = float(loss)
        return ms, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--cases", default="mlp,cnn,transformer,mlp_b256,cnn_b128")
    ap.add_argument("--coretype", default="auto", help="auto, none or an OPENBLAS_CORETYPE name")
    a = ap.parse_args()
    core = bench_infer.auto_coretype(a.coretype)
    ort, ot = mr._import_ort_training()
    tmp = tempfile.mkdtemp(prefix="apexc_bench_train_")
    apexc = os.path.join(a.bin_dir, "compiler", "apexc")

    cases = []
    for c in a.cases.split(","):
        if "_b" in c:
            m, b = c.split("_b")
            d = os.path.join(tmp, c)
            saved = sys.stdout
            with open(os.devnull, "w") as null:
                sys.stdout = null
                try:
                    batch_variant.main(["batch_variant.py", m, b, d])
                finally:
                    sys.stdout = saved
            cases.append((c, os.path.join(d, "model.onnx"), os.path.join(d, "data")))
        else:
            ex = os.path.join(ROOT, "examples", c)
            cases.append((c, os.path.join(ex, "model.onnx"), os.path.join(ex, "data")))

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"onnxruntime-training {ort.__version__}; {os.cpu_count()} CPUs, load average {load:.2f}; "
          f"{a.reps} repetitions x {a.steps} steps (median of steps {a.warmup + 1}..{a.steps}); ms per step")
    cc = f"O0[{core}]" if core else ""
    print(f"{'case':<12} {'batch':>5} {'thr':>3} {'apexc O0':>9} {'apexc O2':>9} {'ort':>9} "
          f"{'O0/ort':>7} {'O2/ort':>7}" + (f" {cc:>13} {'/ort':>6}" if core else "")
          + "   first loss O0 / ort")
    for label, model_path, data in cases:
        batch = onnx.load(model_path).graph.input[0].type.tensor_type.shape.dim[0].dim_value
        plans = {}
        for lvl in ("O0", "O2"):
            plans[lvl] = os.path.join(tmp, f"{label}_{lvl}.apx")
            r = subprocess.run([apexc, model_path, f"-{lvl}", "-q", "-o", plans[lvl]],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"apexc {model_path} -{lvl}: {r.stderr.strip()}")
        for t in [int(x) for x in a.threads.split(",")]:
            res = {"O0": [], "O2": [], "ort": [], "core": []}
            first = {}
            for _ in range(a.reps):
                for lvl in ("O0", "O2"):
                    ms, l0 = apexc_steps(a.bin_dir, plans[lvl], data, t, a.steps,
                                         os.path.join(tmp, "log.jsonl"))
                    res[lvl].append(statistics.median(ms[a.warmup:]))
                    first[lvl] = l0
                if core:
                    ms, _ = apexc_steps(a.bin_dir, plans["O0"], data, t, a.steps,
                                        os.path.join(tmp, "log.jsonl"), core)
                    res["core"].append(statistics.median(ms[a.warmup:]))
                with mr._Silence():
                    trainer = OrtTrainer(ort, ot, model_path, data, t, tmp)
                ms, l0 = trainer.run(a.steps)
                del trainer
                res["ort"].append(statistics.median(ms[a.warmup:]))
                first["ort"] = l0
            A0, A2, O = (statistics.median(res[k]) for k in ("O0", "O2", "ort"))
            extra = ""
            if core:
                C = statistics.median(res["core"])
                extra = f" {C:>13.3f} {C / O:>6.2f}"
            print(f"{label:<12} {batch:>5} {t:>3} {A0:>9.3f} {A2:>9.3f} {O:>9.3f} {A0 / O:>7.2f} "
                  f"{A2 / O:>7.2f}{extra}   {first['O0']:.6f} / {first['ort']:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
