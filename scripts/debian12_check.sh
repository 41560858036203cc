#!/usr/bin/env bash
# debian12_check.sh - the README's first command on a stock Debian 12 (bookworm) root: makes
# a clean root with debootstrap (minbase: not even python3 or a compiler), clones this
# repository into it and runs, inside a chroot, scripts/setup.sh (apt packages, the Python
# venv) and scripts/quickstart.sh, then the Bazel targets given as arguments (tests that
# run the Python oracles through scripts/py). Needs root, debootstrap and the Debian mirror.
#
#   sudo bash scripts/debian12_check.sh [--root DIR] [//bazel:target ...]
#
# The root (default /var/tmp/apexc-deb12) is kept for reruns; delete it for a clean start.
# The last line is "debian12 check: ok" or "debian12 check: FAILED (<step>)".
set -euo pipefail
cd "$(dirname "$0")/.."
root=/var/tmp/apexc-deb12
if [ "${1:-}" = --root ]; then root=$2; shift 2; fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "debian12_check.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "debian12_check.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "== debootstrap --variant=minbase bookworm $root $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"${root%/}.debootstrap.log" 2>&1 ||
    { tail -5 "${root%/}.debootstrap.log" >&2; echo "debian12 check: FAILED (debootstrap)"; exit 1; }
fi
# a stock install's sources: the release, its updates and security
cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"
# this machine's network settings, not stock Debian: a pip.conf naming a CA bundle (a proxy
# that re-signs TLS) is copied with that bundle, so pip in the root reaches PyPI as here
if [ -f /etc/pip.conf ]; then
  cp /etc/pip.conf "$root/etc/pip.conf"
  cert=$(sed -n 's/^ *cert *= *//p' /etc/pip.conf | head -1)
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    mkdir -p "$root$(dirname "$cert")" && cp "$cert" "$root$cert.host" &&
      echo "(copied this machine's /etc/pip.conf and its CA bundle $cert into the root)"
    sed -i "s#^\( *cert *= *\).*#\1$cert.host#" "$root/etc/pip.conf"
  fi
fi

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev dev/pts; do
  mkdir -p "$root/$m"
  mountpoint -q "$root/$m" || { mount --bind "/$m" "$root/$m"; mounted+=("$root/$m"); }
done

# the repository as committed (HEAD), cloned into the root
rm -rf "$root/root/apexc"
git clone -q "$PWD" "$root/root/apexc"
git -C "$root/root/apexc" log --oneline -1

step() {  # step NAME COMMAND... : runs COMMAND in the chroot, in the clone, as a login shell
  local name=$1; shift
  echo "== [chroot] $*"
  if ! chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
       /bin/bash -c 'cd /root/apexc && "$@"' bash "$@"; then
    echo "debian12 check: FAILED ($name)"
    exit 1
  fi
}
step "os" bash -c '. /etc/os-release; echo "$PRETTY_NAME"; command -v python3 || echo "no python3 yet"'
step "setup.sh" bash scripts/setup.sh
step "setup.sh again (idempotent)" bash scripts/setup.sh
# Debian's own python3-onnx may be installed (a dependency of the apt packages); onnxruntime
# and tensorboard are not Debian packages: in the system python they would mean a pip install
step "system python untouched" bash -c '! /usr/bin/python3 -c "import onnxruntime" 2>/dev/null &&
  ! /usr/bin/python3 -c "import tensorboard" 2>/dev/null &&
  .venv/bin/python -c "import onnxruntime, tensorboard, onnx; print(\"venv:\", onnx.__version__, onnxruntime.__version__)"'

step "quickstart.sh" bash scripts/quickstart.sh mlp 50
if [ $# -gt 0 ]; then
  step "bazel test" bazel test --test_output=errors "$@"
fi
step "bazel shutdown" bazel shutdown
echo "debian12 check: ok"
