#!/usr/bin/env python3
"""apexrun_node_tests.py - ONNX backend node tests (Debian libonnx-testdata) run through the
product: `apexrun infer MODEL.onnx --input-dir SET --output-dir OUT LEVEL --allow-old-opset`,
then OUT/output_K.pb compared with the reference by onnx.numpy_helper as ONNX's runner does
(floats: rtol 1e-3, atol 1e-7, NaN equal; integers and bool: exact).

ONNX 1.12's test data quirks are handled, each noted in the output: bfloat16 inputs stored as
uint16 bit patterns are rewritten as bfloat16 tensors with the same bits; the two
FLOAT_to_BFLOAT16 references truncate, so there apexc's output is checked to be the
round-to-nearest-even of the input (and the reference the truncation); with PATCH=1 a model
whose declared input shape its test data does not have (the castlike bfloat16 tests) is
rerun on a copy declaring the data's shapes.

Usage: python3 tests/onnx_node/apexrun_node_tests.py APEXRUN LEVEL REGEX [apexrun options]
  e.g. ... bazel-bin/runtime/apexrun -O0 '^test_(hardswish|softplus|clip|min_|max_|mod_)'
Test-only (needs onnx and numpy); the product never needs Python."""
import os, re, subprocess, sys, collections
import numpy as np, onnx
from onnx import numpy_helper as nh
APEXRUN = sys.argv[1]
level = sys.argv[2]
pat = re.compile(sys.argv[3])
D = os.environ.get("APX_NODE_DIR", "/usr/share/libonnx-testdata/data/node")
TMP = os.environ.get("TMPDIR", "/tmp") + "/apexrun_node_tests"
res = collections.defaultdict(lambda: [0, 0, []])
for t in sorted(os.listdir(D)):
    if not pat.search(t): continue
    m = onnx.load(os.path.join(D, t, "model.onnx"))
    op = ",".join(sorted(set(n.op_type for n in m.graph.node)))
    for ds in sorted(x for x in os.listdir(os.path.join(D, t)) if x.startswith("test_data_set")):
        out = f"{TMP}/out/{level}/{t}/{ds}"
        os.makedirs(out, exist_ok=True)
        ind = os.path.join(D, t, ds)
        # ONNX 1.12 stores bfloat16 test data as uint16 bit patterns: rewrite those inputs as
        # bfloat16 tensors with the same bits (the conformance harness reads them so too)
        bf16_in = {i for i, v in enumerate(x for x in m.graph.input if x.name not in {z.name for z in m.graph.initializer})
                   if v.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16}
        if bf16_in:
            fixed = f"{TMP}/in/{t}/{ds}"
            os.makedirs(fixed, exist_ok=True)
            for f in os.listdir(ind):
                tp = onnx.load_tensor(os.path.join(ind, f))
                k = int(re.findall(r"\d+", f)[0])
                if f.startswith("input_") and k in bf16_in and tp.data_type == onnx.TensorProto.UINT16:
                    bits = nh.to_array(tp).astype(np.uint16)
                    tp = onnx.TensorProto(); tp.CopyFrom(onnx.load_tensor(os.path.join(ind, f)))
                    tp.ClearField("int32_data"); tp.data_type = onnx.TensorProto.BFLOAT16
                    tp.raw_data = bits.tobytes()
                onnx.save_tensor(tp, os.path.join(fixed, f))
            ind = fixed
        cmd = [APEXRUN, "infer", os.path.join(D, t, "model.onnx"), "--input-dir", ind,
               "--output-dir", out, level, "--allow-old-opset"] + sys.argv[4:]
        p = subprocess.run(cmd, capture_output=True, text=True)
        r = res[t]
        if p.returncode == 2 and "PATCH" in os.environ and re.search(r"expected .* got ", p.stderr):
            # the model declares an input shape its test data does not have (ONNX 1.12's
            # castlike bfloat16 tests: 'like' declared [3,4], data [1]): rerun on a copy
            # whose declared input shapes are the data's
            m2 = onnx.ModelProto(); m2.CopyFrom(m)
            names = [x.name for x in m2.graph.input]
            for i, v in enumerate(m2.graph.input):
                tp = onnx.load_tensor(os.path.join(ind, f"input_{i}.pb"))
                v.type.tensor_type.shape.ClearField("dim")
                for dd in tp.dims: v.type.tensor_type.shape.dim.add().dim_value = dd
            pm = f"{TMP}/in/{t}/patched.onnx"
            os.makedirs(os.path.dirname(pm), exist_ok=True)
            onnx.save(m2, pm)
            cmd[2] = pm
            p = subprocess.run(cmd, capture_output=True, text=True)
            r[2].append("(declared input shapes patched to the data's)")
        if p.returncode != 0:
            r[1] += 1; r[2].append(f"{ds}: exit {p.returncode}: {p.stderr.strip()[:200]}"); continue
        ok = True
        k = 0
        while os.path.exists(os.path.join(D, t, ds, f"output_{k}.pb")):
            want = nh.to_array(onnx.load_tensor(os.path.join(D, t, ds, f"output_{k}.pb")))
            gp = os.path.join(out, f"output_{k}.pb")
            if not os.path.exists(gp): ok = False; r[2].append(f"{ds}: no output_{k}.pb"); break
            got = nh.to_array(onnx.load_tensor(gp))
            if want.shape != got.shape: ok = False; r[2].append(f"{ds}: shape {got.shape} vs {want.shape}"); break
            if want.dtype.kind == 'f':
                good = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-7, equal_nan=True)
            else:
                good = got.dtype == want.dtype and np.array_equal(got, want)
                if not good and want.dtype == np.uint16:  # bf16 as bits in ONNX 1.12
                    good = np.array_equal(got.view(np.uint16), want)
                    if not good and "FLOAT_to_BFLOAT16" in t:
                        # ONNX 1.12 truncated float32 to make these references; apexc rounds to
                        # nearest even (as the conformance test checks): check both facts
                        x = nh.to_array(onnx.load_tensor(os.path.join(ind, "input_0.pb"))).astype(np.float32)
                        b = x.view(np.uint32)
                        rne = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
                        good = np.array_equal(want, (b >> 16).astype(np.uint16)) and np.array_equal(got.view(np.uint16), rne)
                        r[2].append("(reference truncates: checked as RNE of the input)")
            if not good:
                ok = False; r[2].append(f"{ds}: output_{k} differs: got {got.ravel()[:6]} {got.dtype} want {want.ravel()[:6]} {want.dtype}")
            k += 1
        r[0 if ok else 1] += 1
tot = [0, 0]
for t, (p, f, why) in res.items():
    tot[0] += p; tot[1] += f
    if f: print("FAIL", t, why[:2])
print(f"{level}: {len(res)} tests, data sets passed {tot[0]}, failed {tot[1]}; tests all passed: {sum(1 for r in res.values() if r[1]==0)}")
