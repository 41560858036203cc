#!/usr/bin/env bash
# sh_test: `apexrun infer` on both input formats (issue 13): input_K.pb folders write
# output_K.pb, NAME.npy folders write NAME.npy; inputs that must be compile-time constants
# (Reshape's shape, Unsqueeze's axes) are bound from the data; one summary line on stdout;
# mixed and empty folders, unknown input names and bf16 npy outputs are one-line errors.
set -u
export PYTHONDONTWRITEBYTECODE=1
apexrun=runtime/apexrun
node=/usr/share/libonnx-testdata/data/node
tmp=${TEST_TMPDIR:-$(mktemp -d)}/infer_cli
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

# compare.py OUT_DIR TEST_DIR FORMAT: every expected output_K.pb equals what apexrun wrote
cat > "$tmp/compare.py" <<'PY'
import os, sys
import numpy as np, onnx
from onnx import numpy_helper
out, test, fmt = sys.argv[1:4]
m = onnx.load(os.path.join(test, "model.onnx"))
for k, o in enumerate(m.graph.output):
    t = onnx.TensorProto()
    t.ParseFromString(open(os.path.join(test, "test_data_set_0", f"output_{k}.pb"), "rb").read())
    want = numpy_helper.to_array(t)
    if fmt == "pb":
        g = onnx.TensorProto()
        g.ParseFromString(open(os.path.join(out, f"output_{k}.pb"), "rb").read())
        got = numpy_helper.to_array(g)
    else:
        got = np.load(os.path.join(out, o.name + ".npy"))
    assert got.shape == want.shape, (o.name, got.shape, want.shape)
    assert np.allclose(got, want, rtol=1e-3, atol=1e-7), (o.name, got, want)
print("outputs match")
PY
# pb2npy.py SRC DST MODEL: test_data_set_0's input_K.pb as NAME.npy (K-th data input's name)
cat > "$tmp/pb2npy.py" <<'PY'
import os, sys
import numpy as np, onnx
from onnx import numpy_helper
src, dst, model = sys.argv[1:4]
m = onnx.load(model)
inits = {i.name for i in m.graph.initializer}
names = [i.name for i in m.graph.input if i.name not in inits]
os.makedirs(dst, exist_ok=True)
for k, n in enumerate(names):
    t = onnx.TensorProto()
    t.ParseFromString(open(os.path.join(src, f"input_{k}.pb"), "rb").read())
    np.save(os.path.join(dst, n + ".npy"), numpy_helper.to_array(t))
PY

for t in test_reshape_extended_dims test_unsqueeze_two_axes; do
  # ONNX test data in, ONNX test data out; the static operand bound from the data
  out=$("$apexrun" infer "$node/$t/model.onnx" --input-dir "$node/$t/test_data_set_0" --output-dir "$tmp/$t.pb" -O0 --allow-old-opset 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then bad "$t pb: exit $rc: $out"; continue; fi
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && grep -q "^apexrun infer: .*: 2 inputs from .* (input_K.pb; 1 bound as compile-time constant: \(shape\|axes\)), 1 output to .* (output_K.pb), forward [0-9.]* ms$" <<< "$out" &&
    ok "$t pb summary: ${out#*: }" || bad "$t pb summary: $out"
  scripts/py "$tmp/compare.py" "$tmp/$t.pb" "$node/$t" pb >/dev/null && ok "$t pb outputs" || bad "$t pb outputs"
  # the same as NAME.npy
  scripts/py "$tmp/pb2npy.py" "$node/$t/test_data_set_0" "$tmp/$t.in" "$node/$t/model.onnx"
  out=$("$apexrun" infer "$node/$t/model.onnx" --input-dir "$tmp/$t.in" --output-dir "$tmp/$t.npy" -O0 --allow-old-opset 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then bad "$t npy: exit $rc: $out"; continue; fi
  grep -q "(NAME.npy; 1 bound as compile-time constant: .*), 1 output to .* (NAME.npy)" <<< "$out" && ok "$t npy summary" || bad "$t npy summary: $out"
  [ -z "$(ls "$tmp/$t.npy" | grep -v '\.npy$')" ] && ok "$t npy: only .npy written" || bad "$t npy: $(ls "$tmp/$t.npy")"
  scripts/py "$tmp/compare.py" "$tmp/$t.npy" "$node/$t" npy >/dev/null && ok "$t npy outputs" || bad "$t npy outputs"
done

t=test_reshape_extended_dims
expect_error() {  # expect_error NAME WANTED-TEXT ARGS...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$apexrun" infer "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && grep -qF "$want" <<< "$out"; then ok "$name: $out"
  else bad "$name: exit $rc, wanted one line with '$want': $out"; fi
}
mkdir -p "$tmp/mixed" "$tmp/empty" "$tmp/wrong"
cp "$node/$t/test_data_set_0/input_0.pb" "$tmp/mixed/" && cp "$tmp/$t.in/data.npy" "$tmp/mixed/"
expect_error "mixed folder" "holds both input_K.pb and NAME.npy files (data.npy): keep one format" \
  "$node/$t/model.onnx" --input-dir "$tmp/mixed" --output-dir "$tmp/o1" -O0
expect_error "empty folder" "empty: no input_0.pb for the model's data input 'x' (apexrun infer reads ONNX test data input_K.pb, or one NAME.npy per data input)" \
  "$node/test_relu/model.onnx" --input-dir "$tmp/empty" --output-dir "$tmp/o2" -O0
cp "$tmp/$t.in/data.npy" "$tmp/wrong/" && cp "$tmp/$t.in/shape.npy" "$tmp/wrong/shap.npy"
expect_error "unknown input name" "shap.npy: the model has no data input 'shap'" "$node/$t/model.onnx" --input-dir "$tmp/wrong" --output-dir "$tmp/o3" -O0
rm "$tmp/wrong/shap.npy"
expect_error "missing input" "must be a compile-time constant" "$node/$t/model.onnx" --input-dir "$tmp/wrong" --output-dir "$tmp/o4" -O0
# a model without data inputs runs from an empty folder
out=$("$apexrun" infer "$node/test_constant/model.onnx" --input-dir "$tmp/empty" --output-dir "$tmp/const" --allow-old-opset 2>&1) &&
  scripts/py "$tmp/compare.py" "$tmp/const" "$node/test_constant" pb >/dev/null && ok "no inputs: $out" || bad "no inputs: $out"
expect_error "missing input folder" "nowhere: no such folder (--input-dir)" "$node/$t/model.onnx" --input-dir "$tmp/nowhere" --output-dir "$tmp/o5" -O0

echo "infer cli: $fail failed"
[ "$fail" -eq 0 ]
