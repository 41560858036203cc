#!/usr/bin/env python3
"""bench_compile.py - full `apexc MODEL -O2 -o PLAN` compiles (load, every pass, the plan file
written) of generated chains and of a GPT-2-124M-shaped model, against onnxruntime building
an inference session of the same forward model (issue 12); run through
scripts/bench_compile.sh, which builds apexc.

    bench_compile.py APEXC [--runs 3] [--sizes 10000,30000,100000,300000] [--no-gpt2]
                           [--dir DIR] [--opt -O2]

Models (written once into DIR, default /dev/shm when writable, else a temporary folder):
  chain-N   tests/bench/make_big_graph.py --chain N: (N - 1) / 3 MatMul+Add+Relu blocks then
            ReduceMean, N nodes (x [8, 16]; a 16x16 weight and a bias of 16 per block)
  gpt2      tests/bench/make_gpt2.py: 12 layers, d 768, 12 heads, vocab 50257, seq 128,
            batch 4, untied lm_head (163M parameters), cross-entropy loss; its forward model
            (logits, no loss) for the peer
Per model, RUNS repetitions, each: one apexc compile (a fresh process; wall time, its CPU time
and peak RSS from wait4), then one onnxruntime InferenceSession(forward model) built in this
process (ORT_ENABLE_ALL, CPU provider; the timing covers the constructor only), interleaved so
both see the same machine load. Printed: medians over the runs, plan bytes, apexc/ort ratio
(below 1: apexc faster; apexc builds forward + backward + optimizer and writes a plan, ort
builds a forward session; "-": above --ort-max-nodes, not measured), the growth exponent b of time = a * nodes^b fitted by least squares
over the chain sizes (wall and CPU), the GPT-2 plan against its parameter payload (each
parameter once at the precision it keeps: fp32 masters), and `--time-passes` of one compile
of the 100k chain (or the largest chain run).
The plan goes to DIR too: on /dev/shm (tmpfs) the disk's write speed and apexc's fsync are not
measured (this project's shared VM writes ~190 MB/s with fsync).
"""
import argparse
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def run_apexc(apexc, model, plan, opt, extra=()):
    """(wall s, cpu s, peak RSS bytes, stderr) of one compile in a fresh process. The peak
    comes from GNU time's child (a process forked from this one inherits this one's resident
    set in its maximum, onnxruntime and all), else from wait4 (then an upper bound)."""
    if os.path.exists(plan):
        os.unlink(plan)
    cmd = [apexc, model, opt, "-q", "-o", plan, *extra]
    rss_file = plan + ".rss"
    if GNU_TIME:
        cmd = [GNU_TIME, "-f", "%M", "-o", rss_file] + cmd
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"apexc {model} failed ({p.returncode}): {err.strip()}")
    rss = ru.ru_maxrss * 1024
    if GNU_TIME:
        with open(rss_file) as f:
            rss = int(f.read().split()[-1]) * 1024
        os.unlink(rss_file)
    return wall, ru.ru_utime + ru.ru_stime, rss, err


def ort_session_s(model):
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    dt = time.perf_counter() - t0
    del sess
    return dt


def float_param_bytes(model):
    """fp32 bytes of the float initializers (the parameters: every one trains here)."""
    import onnx
    m = onnx.load(model, load_external_data=False)
    n = 0
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            k = 1
            for d in t.dims:
                k *= d
            n += 4 * k
    return n


def plan_sections(plan):
    with open(plan, "rb") as f:
        h = f.read(64)
    meta_len, data_len = struct.unpack("<Q", h[24:32])[0], struct.unpack("<Q", h[40:48])[0]
    return meta_len, data_len


def fit_exponent(ns, ts):
    xs, ys = [math.log(n) for n in ns], [math.log(t) for t in ts]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("apexc")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="10000,30000,100000,300000")
    ap.add_argument("--no-gpt2", action="store_true")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--ort-max-nodes", type=int, default=30000,
                    help="skip the peer above this many nodes (onnxruntime's session creation "
                         "grows faster than linearly on long chains: ~2 s at 10k nodes, ~16 s "
                         "at 30k on the shared 2-core VM)")
    ap.add_argument("--dir")
    ap.add_argument("--opt", default="-O2")
    ap.add_argument("--no-time-passes", action="store_true", help="(an apexc without the flag)")
    a = ap.parse_args()
    d = a.dir
    if not d:
        d = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        d = tempfile.mkdtemp(prefix="apexc-bench-compile-", dir=d)
    os.makedirs(d, exist_ok=True)
    py = sys.executable
    sizes = [int(s) for s in a.sizes.split(",") if s]
    cases = []  # (label, nodes, model, forward model)
    for n in sizes:
        path = os.path.join(d, f"chain{n}.onnx")
        if not os.path.exists(path):
            subprocess.run([py, os.path.join(ROOT, "tests/bench/make_big_graph.py"), path,
                            "--chain", str(n)], check=True, stdout=subprocess.DEVNULL)
        cases.append((f"chain-{n // 1000}k", n, path, path))
    if not a.no_gpt2:
        path, fwd = os.path.join(d, "gpt2.onnx"), os.path.join(d, "gpt2_forward.onnx")
        if not (os.path.exists(path) and os.path.exists(fwd)):
            subprocess.run([py, os.path.join(ROOT, "tests/bench/make_gpt2.py"), path,
                            "--forward", fwd], check=True, stdout=subprocess.DEVNULL)
        import onnx
        cases.append(("gpt2-124M", len(onnx.load(path, load_external_data=False).graph.node),
                      path, fwd))
    print(f"compile benchmark: apexc MODEL {a.opt} -q -o PLAN (load, every pass, plan written), "
          f"median of {a.runs}; files in {d}")
    print(f"{'model':<11} {'nodes':>7} {'apexc s':>8} {'cpu s':>7} {'peak MiB':>9} "
          f"{'plan MB':>9} {'ort s':>7} {'apexc/ort':>9}")
    rows = {}
    for label, n, model, fwd in cases:
        plan = os.path.join(d, os.path.basename(model)[:-5] + ".apx")
        walls, cpus, rss, orts = [], [], [], []
        for _ in range(a.runs):
            w, c, r, _ = run_apexc(a.apexc, model, plan, a.opt)
            walls.append(w), cpus.append(c), rss.append(r)
            if not a.no_ort and n <= a.ort_max_nodes:
                orts.append(ort_session_s(fwd))
        size = os.path.getsize(plan)
        rows[label] = (n, statistics.median(walls), statistics.median(cpus), max(rss), size, plan, model)
        ort_s = f"{statistics.median(orts):>7.3f}" if orts else f"{'-':>7}"
        ratio = f"{statistics.median(walls) / statistics.median(orts):>9.3f}" if orts else f"{'-':>9}"
        print(f"{label:<11} {n:>7} {statistics.median(walls):>8.3f} {statistics.median(cpus):>7.3f} "
              f"{max(rss) / 2**20:>9.1f} {size / 1e6:>9.1f} {ort_s} {ratio}", flush=True)
    chains = [(v[0], v[1], v[2]) for k, v in rows.items() if k.startswith("chain")]
    if len(chains) >= 2:
        ns = [c[0] for c in chains]
        print(f"growth exponent over chains {ns[0]}..{ns[-1]} nodes: wall {fit_exponent(ns, [c[1] for c in chains]):.3f}, "
              f"cpu {fit_exponent(ns, [c[2] for c in chains]):.3f}")
    if "gpt2-124M" in rows:
        n, w, c, r, size, plan, model = rows["gpt2-124M"]
        payload = float_param_bytes(model)
        meta, data = plan_sections(plan)
        print(f"gpt2-124M plan: {size} bytes = {size / payload:.4f} x the parameter payload "
              f"({payload} bytes, the fp32 masters); data section {data} bytes ({data - payload} "
              f"beyond the payload: the embedded model without its weights, alignment), "
              f"metadata {meta} bytes")
    show = [k for k in rows if k.startswith("chain")]
    if show and not a.no_time_passes:
        k = "chain-100k" if "chain-100k" in rows else show[-1]
        n, _, _, _, _, plan, model = rows[k]
        _, _, _, err = run_apexc(a.apexc, model, plan, a.opt, ["--time-passes"])
        print(f"--time-passes, {k}:")
        sys.stdout.write(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
