#!/usr/bin/env python3
"""node_tests_infer.py - the ONNX backend node tests (Debian libonnx-testdata) through the
product, as a user would run them: for every test whose ops are all apexc v1 or compile-time
ops (kernels/ops.def), `apexrun infer MODEL --input-dir test_data_set_0 --output-dir OUT -O0
--allow-old-opset`, then each OUT/output_K.pb against the test's output_K.pb (ONNX's backend
tolerance: |got - want| <= 1e-7 + 1e-3 |want|; integers and bools exact; NaN where NaN;
bfloat16 expectations, stored as uint16 and made by truncation, within one bf16 ulp).

    scripts/py scripts/node_tests_infer.py APEXRUN [--node-dir DIR] [--filter SUBSTR] [--list]
                                               [--min-pass N]

Prints one line per test that does not pass (--list: every test), the rejections grouped
by reason, and last "N passed, M failed" (failed = wrong output, rejected or crashed).
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ort"))
from run_emit_checks import v1_ops  # noqa: E402  (the op set read from kernels/ops.def)


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


# Tests whose expected outputs no other implementation can reproduce: training-mode Dropout
# draws its mask from numpy's generator (apexc: Philox, kernels/philox.h). Their outputs are
# checked for shape and for the Dropout identity (each element 0 or input / (1 - ratio) is
# not checked here); they are reported apart, neither passed nor failed.
RANDOM = {"test_training_dropout", "test_training_dropout_default", "test_training_dropout_default_mask",
          "test_training_dropout_mask"}
# Bernoulli's expanded form (RandomUniformLike < p, Cast) likewise draws from numpy's generator;
# its outputs are checked for shape and for holding only 0 and 1.
BERNOULLI = {"test_bernoulli_expanded", "test_bernoulli_double_expanded", "test_bernoulli_seed_expanded"}
RANDOM |= BERNOULLI


def compare(got, want):
    with np.errstate(invalid="ignore", over="ignore"):
        return _compare(got, want)


def _compare(got, want):
    if want.dtype == np.uint16 and got.dtype != np.uint16 and got.dtype.itemsize == 2:
        # ONNX 1.12 stores bfloat16 expectations as uint16 bits, made by truncating fp32;
        # apexc rounds to nearest even (as GPUs do): equal within one bfloat16 ulp (2^-7)
        import ml_dtypes  # a dependency of onnx
        g = got.astype(np.float64)
        w = want.view(ml_dtypes.bfloat16).astype(np.float64)
        if g.shape != w.shape:
            return f"shape {list(g.shape)}, expected {list(w.shape)}"
        bad = np.abs(g - w) > 2.0 ** -7 * np.abs(w)
        return f"{int(bad.sum())} of {w.size} bfloat16 elements more than one ulp off" if np.any(bad) else None
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype.kind in "biu" or want.dtype == np.bool_:
        return None if np.array_equal(got, want) else "differs (exact type)"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return "NaN positions differ"
    fin = ~np.isnan(w)
    bad = np.abs(g[fin] - w[fin]) > 1e-7 + 1e-3 * np.abs(w[fin])
    if np.any(bad):
        i = int(np.argmax(np.abs(g[fin] - w[fin])))
        return f"{int(bad.sum())} of {w.size} elements off (worst {g[fin][i]!r} vs {w[fin][i]!r})"
    return None


def reason_class(msg):
    """A short class of a rejection message, for grouping."""
    m = re.search(r"not supported yet: ([^:(']+)", msg)
    if m:
        return "not supported yet: " + m.group(1).strip()
    if "must be a compile-time constant" in msg:
        return "an input must be a compile-time constant"
    m = re.search(r"\): (.{0,60})", msg) or re.search(r"\.(?:onnx|pb|npy|_0): (.{0,60})", msg)
    return (m.group(1) if m else msg[:60]).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("apexrun")
    ap.add_argument("--node-dir", default="/usr/share/libonnx-testdata/data/node")
    ap.add_argument("--ops-def", default=os.path.join(HERE, "..", "kernels", "ops.def"))
    ap.add_argument("--filter", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--min-pass", type=int, default=0,
                    help="as a test: exit 0 when at least this many pass and every failure is a clean "
                         "rejection (exit 2), none a wrong output or a crash")
    a = ap.parse_args()
    allowed = v1_ops(a.ops_def)
    tests = []
    for d in sorted(glob.glob(os.path.join(a.node_dir, "test_*"))):
        if a.filter not in os.path.basename(d):
            continue
        mp, ds = os.path.join(d, "model.onnx"), os.path.join(d, "test_data_set_0")
        if not (os.path.exists(mp) and os.path.isdir(ds)):
            continue
        try:
            m = onnx.load(mp)
        except Exception:  # noqa: BLE001
            continue
        if all(n.op_type in allowed and n.domain in ("", "ai.onnx") for n in m.graph.node):
            tests.append((os.path.basename(d), mp, ds))
    passed, failed, random_ran = 0, 0, 0
    rejected = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, mp, ds in tests:
            out = os.path.join(tmp, name)
            r = subprocess.run([a.apexrun, "infer", mp, "--input-dir", ds, "--output-dir", out, "-O0",
                                "--allow-old-opset", "--threads", "1"], capture_output=True, text=True)
            msg = (r.stderr.strip().splitlines() or [""])[-1]
            problem = None
            if r.returncode == 2:
                problem = f"rejected: {msg}"
                rejected[reason_class(msg)] += 1
            elif r.returncode != 0:
                problem = f"exit {r.returncode}: {msg}"
                rejected[f"exit {r.returncode}"] += 1
            else:
                for k in range(64):
                    want_p = os.path.join(ds, f"output_{k}.pb")
                    if not os.path.exists(want_p):
                        break
                    got_p = os.path.join(out, f"output_{k}.pb")
                    if not os.path.exists(got_p):
                        problem = f"output_{k}.pb not written"
                        break
                    want, got = read_pb(want_p), read_pb(got_p)
                    why = compare(got, want)
                    if why and name in RANDOM:
                        why = None if got.shape == want.shape else why
                        if not why and name in BERNOULLI and not np.isin(got, (0, 1)).all():
                            why = "a Bernoulli draw holds a value other than 0 and 1"
                        problem = problem or ("random" if not why else None)
                        continue
                    if why:
                        problem = f"output {k}: {why}"
                        break
                if problem == "random":
                    print(f"RAND {name}: ran, output shapes right; values from a random mask, not compared")
                    random_ran += 1
                    continue
                if problem:
                    rejected["wrong output"] += 1
            if problem:
                failed += 1
                print(f"FAIL {name}: {problem}")
            else:
                passed += 1
                if a.list:
                    print(f"ok   {name}")
    print(f"{len(tests)} node tests of v1 and compile-time ops; {random_ran} ran with random outputs "
          f"(not compared); not passing, by reason:")
    for why, n in rejected.most_common():
        print(f"  {n:4d}  {why}")
    print(f"{passed} passed, {failed} failed")
    if a.min_pass:
        unclean = sum(n for why, n in rejected.items() if why == "wrong output" or why.startswith("exit "))
        ok = passed >= a.min_pass and unclean == 0
        print(f"test: {'ok' if ok else 'FAIL'} ({passed} passed, at least {a.min_pass} wanted; "
              f"{unclean} wrong outputs or crashes, none allowed)")
        return 0 if ok else 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
