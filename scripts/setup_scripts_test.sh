#!/usr/bin/env bash
# sh_test: the README's setup path fails honestly (issue 13, item 1).
#  - quickstart.sh stops with the build's own error and exit code when the build fails, and
#    when a "successful" build left no binary (never exit 127 on a missing apexc later);
#  - scripts/py runs $APEXC_PYTHON when set, the project venv otherwise, and without either
#    stops with exit 2 and a hint (never a system python that lacks the packages);
#  - setup.sh never pip-installs outside the venv.
# Each case runs copies of the scripts in a scratch tree with a stub bazel and setup.sh.
set -u
fail=0
check() {  # check NAME CONDITION-STATUS MESSAGE
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1: $3"; fail=$((fail + 1)); fi
}
tmp=${TEST_TMPDIR:-$(mktemp -d)}/setup_scripts
rm -rf "$tmp" && mkdir -p "$tmp/tree/scripts" "$tmp/tree/examples/mlp"
cp scripts/quickstart.sh scripts/py "$tmp/tree/scripts/"
printf '#!/usr/bin/env bash\nexit 0\n' > "$tmp/tree/scripts/setup.sh"
quickstart() {  # quickstart BAZEL_STUB_BODY: runs quickstart.sh with that stub as bazel; sets out, rc
  printf '#!/usr/bin/env bash\n%s\n' "$1" > "$tmp/bazel_stub" && chmod +x "$tmp/bazel_stub"
  out=$(cd "$tmp/tree" && TMPDIR="$tmp" BAZEL="$tmp/bazel_stub" bash scripts/quickstart.sh mlp 2>&1)
  rc=$?
}

# 1. a failing build: its error is shown, its exit code returned, nothing else runs
quickstart 'echo "ERROR: /src/compiler/cli.c:12:3: error: expected ; before } token" >&2
echo "INFO: Elapsed time: 1.0s" >&2
exit 1'
check "failed build: exit code 1" $([ "$rc" -eq 1 ]; echo $?) "rc $rc: $out"
check "failed build: its error shown" $(grep -q "cli.c:12:3: error: expected ;" <<< "$out"; echo $?) "$out"
check "failed build: says the build failed" $(grep -q "quickstart: the build failed" <<< "$out"; echo $?) "$out"
check "failed build: apexc not run" $(! grep -q "== apexc" <<< "$out"; echo $?) "$out"

# 2. a build that reports success without binaries: a clear error, not rc 127
quickstart "if [ \"\$1\" = info ]; then echo $tmp/empty-bin; fi"
check "no binary: exit code 1" $([ "$rc" -eq 1 ]; echo $?) "rc $rc: $out"
check "no binary: names the missing file" $(grep -q "empty-bin/compiler/apexc is missing" <<< "$out"; echo $?) "$out"

# 3. scripts/py: APEXC_PYTHON wins; the venv next to the script otherwise; neither -> exit 2
printf '#!/bin/sh\necho "fake python $*"\n' > "$tmp/fakepy" && chmod +x "$tmp/fakepy"
out=$(APEXC_PYTHON="$tmp/fakepy" "$tmp/tree/scripts/py" -c pass 2>&1)
check "py: APEXC_PYTHON" $([ "$out" = "fake python -c pass" ]; echo $?) "$out"
out=$(env -u APEXC_PYTHON "$tmp/tree/scripts/py" -c pass 2>&1)
rc=$?
check "py: no venv -> exit 2" $([ "$rc" -eq 2 ]; echo $?) "rc $rc: $out"
check "py: no venv -> hint" $(grep -q "run: bash scripts/setup.sh" <<< "$out"; echo $?) "$out"
mkdir -p "$tmp/tree/.venv/bin" && cp "$tmp/fakepy" "$tmp/tree/.venv/bin/python"
ln -s "$tmp/tree/scripts/py" "$tmp/py_link"   # as Bazel's runfiles do: a link to the source
out=$(env -u APEXC_PYTHON "$tmp/py_link" x.py 2>&1)
check "py: venv found through a link" $([ "$out" = "fake python x.py" ]; echo $?) "$out"

# 4. setup.sh: pip only through the venv's interpreter
bad=$(grep -nw "pip" scripts/setup.sh | grep -v '^[0-9]*:#' | grep -v '"\$venv/bin/python" -m pip' || true)
check "setup.sh: pip only into the venv" $([ -z "$bad" ]; echo $?) "$bad"

echo "setup scripts: $fail failed"
[ "$fail" -eq 0 ]
