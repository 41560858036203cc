#!/usr/bin/env python3
"""bench_infer.py - fp32 forward (+ loss) time of `apexrun infer` against onnxruntime on CPU
for the example models (issue 3); run through scripts/bench_infer.sh, which builds apexrun.

    bench_infer.py APEXRUN [--threads 1,2] [--reps K] [--iters N] [--cases ...]

Cases: the three examples on their recorded first batch (tests/fixtures/ort/<model>), plus
larger-batch variants made by batch_variant.py (mlp batch 256, cnn batch 128), so that the
comparison is not only per-kernel overhead.

Per case and thread count, K repetitions, interleaved so both peers see the same machine load:
  apexc        `apexrun infer MODEL.onnx --input-dir D -O0 --threads T --repeat N`: the model
               compiled on the fly at O0 (fp32; fusion passes on, as the product runs), then N
               timed forward runs on the same inputs; its median per-iteration time.
  onnxruntime  InferenceSession (CPUExecutionProvider, intra_op_num_threads = T,
               inter_op_num_threads = 1, sequential), N timed session.run calls from Python
               on the same inputs after warm-up; the median per call (includes the Python
               binding's per-call overhead, a few microseconds).
               "ort" = graph optimizations off (ORT_DISABLE_ALL): onnxruntime's duplicate-
               initializer elimination breaks training-mode BatchNorm in the CNN (see
               tests/ort/record_fixtures.py), and off is what tests/ort compares against.
               "ort-opt" = ORT_ENABLE_ALL, shown for models without BatchNorm.
  apexc[CORE]  apexc again with OPENBLAS_CORETYPE=CORE (--coretype; auto: SkylakeX with
               AVX-512, Haswell with AVX2+FMA, when OPENBLAS_CORETYPE is not set already).
               Debian's OpenBLAS 0.3.21 does not know newer CPUs and falls back to its SSE3
               "Prescott" sgemm (kernels/cpu/cpu_kernels.h apx_cpu_blas_coretype_hint).
               apexrun now sets OPENBLAS_CORETYPE (and OMP_WAIT_POLICY=PASSIVE) itself and
               re-executes (docs/runtime.md "CPU environment"), so both columns should agree;
               run with APX_NO_REEXEC=1 in the environment to measure the libraries' defaults.
Printed: the median over the K repetitions of each peer's median, and apexc / ort ratios
(below 1: apexc faster). The loss apexc wrote is checked against onnxruntime's (1e-5).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import batch_variant  # noqa: E402


def read_inputs(ds):
    feeds, k = {}, 0
    while os.path.exists(os.path.join(ds, f"input_{k}.pb")):
        t = onnx.TensorProto()
        with open(os.path.join(ds, f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[t.name] = numpy_helper.to_array(t)
        k += 1
    return feeds


def ort_session(model_path, threads, optimize):
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])


def time_ort(sess, feeds, iters):
    names = [o.name for o in sess.get_outputs()]
    for _ in range(max(3, iters // 10)):
        sess.run(names, feeds)
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(names, feeds)
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def auto_coretype(arg):
    """OPENBLAS_CORETYPE for the extra apexc column, or None."""
    if arg == "none" or (arg == "auto" and os.environ.get("OPENBLAS_CORETYPE")):
        return None
    if arg != "auto":
        return arg
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split())
    except (OSError, StopIteration):
        return None
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return None


def time_apexc(apexrun, model_path, ds, threads, iters, out_dir, coretype=None):
    env = dict(os.environ)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    cmd = [apexrun, "infer", model_path, "--input-dir", ds, "--output-dir", out_dir, "-O0",
           "--threads", str(threads), "--repeat", str(iters)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    for line in r.stdout.splitlines():
        if line.startswith("apexrun infer: forward x"):
            return float(line.split("median ")[1].split(" ms")[0])
    raise RuntimeError(f"no timing line from apexrun: {r.stdout!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("apexrun")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--cases", default="mlp,cnn,transformer,mlp_b256,cnn_b128")
    ap.add_argument("--coretype", default="auto", help="auto, none or an OPENBLAS_CORETYPE name")
    a = ap.parse_args()
    core = auto_coretype(a.coretype)
    import onnxruntime

    tmp = tempfile.mkdtemp(prefix="apexc_bench_infer_")
    cases = []
    for c in a.cases.split(","):
        if "_b" in c:
            m, b = c.split("_b")
            d = os.path.join(tmp, c)
            with open(os.devnull, "w") as null:
                sys.stdout, saved = null, sys.stdout
                try:
                    batch_variant.main(["batch_variant.py", m, b, d])
                finally:
                    sys.stdout = saved
            cases.append((c, m, int(b), d))
        else:
            d = os.path.join(ROOT, "tests", "fixtures", "ort", c)
            feeds = read_inputs(os.path.join(d, "test_data_set_0"))
            cases.append((c, c, next(iter(feeds.values())).shape[0], d))

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"onnxruntime {onnxruntime.__version__}; {os.cpu_count()} CPUs, load average {load:.2f}; "
          f"{a.reps} repetitions x {a.iters} iterations; medians in ms per forward")
    cc = f"apexc[{core}]" if core else ""
    hdr = (f"{'case':<14} {'batch':>5} {'thr':>3} {'apexc':>9} {'ort':>9} {'apexc/ort':>9} "
           f"{'ort-opt':>9} {'apexc/ort-opt':>13}" + (f" {cc:>16} {'/ort':>6}" if core else ""))
    print(hdr)
    for label, m, batch, d in cases:
        model_path = os.path.join(d, "model.onnx")
        ds = os.path.join(d, "test_data_set_0")
        feeds = read_inputs(ds)
        has_bn = any(n.op_type == "BatchNormalization" for n in onnx.load(model_path).graph.node)
        for t in [int(x) for x in a.threads.split(",")]:
            s0 = ort_session(model_path, t, False)
            s1 = None if has_bn else ort_session(model_path, t, True)
            out_dir = os.path.join(tmp, f"out_{label}_{t}")
            ap_ms, o0_ms, o1_ms, ac_ms = [], [], [], []
            for _ in range(a.reps):
                ap_ms.append(time_apexc(a.apexrun, model_path, ds, t, a.iters, out_dir))
                if core:
                    ac_ms.append(time_apexc(a.apexrun, model_path, ds, t, a.iters, out_dir, core))
                o0_ms.append(time_ort(s0, feeds, a.iters))
                if s1 is not None:
                    o1_ms.append(time_ort(s1, feeds, a.iters))
            # the loss apexc wrote agrees with onnxruntime's
            ref = s0.run([s0.get_outputs()[0].name], feeds)[0]
            t0 = onnx.TensorProto()
            with open(os.path.join(out_dir, "output_0.pb"), "rb") as f:
                t0.ParseFromString(f.read())
            got = numpy_helper.to_array(t0)
            err = abs(float(got) - float(ref)) / abs(float(ref))
            if not err <= 1e-5:
                print(f"  WARNING {label}: apexc loss {float(got)} vs onnxruntime {float(ref)}")
            A, O0 = statistics.median(ap_ms), statistics.median(o0_ms)
            line = f"{label:<14} {batch:>5} {t:>3} {A:>9.4f} {O0:>9.4f} {A / O0:>9.2f}"
            if o1_ms:
                O1 = statistics.median(o1_ms)
                line += f" {O1:>9.4f} {A / O1:>13.2f}"
            else:
                line += f" {'(BN)':>9} {'-':>13}"
            if ac_ms:
                C = statistics.median(ac_ms)
                line += f" {C:>16.4f} {C / O0:>6.2f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
