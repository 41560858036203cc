#!/usr/bin/env bash
# gpu_kit_dry_run_test.sh - scripts/gpu/run.sh --dry-run over a bundle made of this build's
# multi-call binary (a link into the runfiles, the tools' scripts beside it as bundle.sh
# writes them): every stage's host part must pass on a CPU machine.
set -uo pipefail
b="$TEST_TMPDIR/bundle"
mkdir -p "$b/bin" "$b/lib" "$b/data/examples" "$b/data/gpt2_tiny"
if [ ! -e scripts/gpu/apexkit ]; then echo "built without CUDA: nothing to dry-run"; echo "0 passed, 0 failed"; exit 0; fi
ln -s "$PWD/scripts/gpu/apexkit" "$b/bin/apexkit"
bash scripts/gpu/kit_bin.sh "$b/bin" || exit 1
# the multi-call binary: an unknown tool is one line and exit 2; its argv[0] selects the tool
msg=$("$b/bin/apexkit" no_such_tool 2>&1); rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$msg" | wc -l)" = 1 ] && [[ "$msg" == *"unknown tool 'no_such_tool'"* ]] ||
  { echo "apexkit no_such_tool: exit $rc, '$msg'"; exit 1; }
ln -s "$PWD/scripts/gpu/apexkit" "$TEST_TMPDIR/apexc"
"$TEST_TMPDIR/apexc" --version | grep -q '^apexc ' || { echo "apexkit named apexc did not run apexc"; exit 1; }
for m in mlp cnn transformer; do cp -r "examples/$m" "$b/data/examples/"; done
scripts/py runtime/testdata/make_dropout_model.py "$b/data/dropout" >/dev/null || exit 1
tar -C /usr/share/libonnx-testdata/data -czf "$b/data/onnx_node.tar.gz" node
cp scripts/gpu/run.sh scripts/gpu/torch_gpt2.py "$b/"
scripts/py scripts/gpu/make_gpt2.py "$b/data/gpt2_tiny" --layers 2 --d 64 --heads 4 --vocab 256 --seq 32 --batch 4 \
  > "$b/data/gpt2_tiny/shape.json" || exit 1
OUT="$TEST_TMPDIR/out" bash scripts/gpu/run.sh --dry-run --bundle "$b"
rc=$?
cat "$TEST_TMPDIR/out/summary.txt" >/dev/null
for s in libs lab node train graph gpt2 nccl; do
  grep -q "^$s  *PASS" "$TEST_TMPDIR/out/summary.txt" || { echo "stage $s did not pass:"; tail -20 "$TEST_TMPDIR/out/$s.txt"; rc=1; }
done
exit $rc
