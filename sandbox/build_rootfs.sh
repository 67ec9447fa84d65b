#!/usr/bin/env bash
# Build the sandbox root filesystem offline (no container registry needed): Debian bookworm
# minbase with python3 (also as `python`), bash, coreutils and git (repository tasks) from this
# machine's configured Debian mirror, plus the pinned Python packages of grading-requirements.txt
# (pytest 8 and friends) installed from the wheel cache that scripts/setup.sh fills
# (`pip download --require-hashes`), with no network.
# Usage: build_rootfs.sh OUTDIR   (needs root and debootstrap)
set -euo pipefail
out=${1:?usage: build_rootfs.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/grading-requirements.txt"
wheels=${OPD_GYM_SANDBOX_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/opd_gym/sandbox-wheels}
pip_wheel=$(ls "$wheels"/pip-*-py3-none-any.whl 2>/dev/null | head -n 1 || true)
if [ -z "$pip_wheel" ]; then
  echo "no sandbox wheels in $wheels: run scripts/setup.sh (it downloads $requirements)" >&2
  exit 2
fi
mirror=${OPD_GYM_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # Reuse the mirror apt already uses here (deb822 .sources first, then one-line .list files).
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $0 ~ /debian/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n 1 || true)
fi
[ -n "$mirror" ] || { echo "no Debian mirror found in apt sources; set OPD_GYM_DEBIAN_MIRROR" >&2; exit 2; }
tmp="$out.partial"
rm -rf "$tmp"
debootstrap --variant=minbase --include=python3,procps,git bookworm "$tmp" "$mirror" >&2
# The image's own python3 installs the wheels (chroot), so markers and paths are the image's:
# /usr/local/lib/python3.11/dist-packages, ahead of Debian's dist-packages on sys.path.
stage="$tmp/tmp/opd-gym-wheels"
mkdir -p "$stage"
cp "$wheels"/*.whl "$requirements" "$stage/"
chroot "$tmp" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 \
  "/tmp/opd-gym-wheels/$(basename "$pip_wheel")/pip" install -q --no-index --no-compile \
  --find-links /tmp/opd-gym-wheels --require-hashes --break-system-packages \
  --root-user-action=ignore --disable-pip-version-check --no-cache-dir \
  -r /tmp/opd-gym-wheels/grading-requirements.txt >&2
rm -rf "$stage"
chroot "$tmp" /usr/bin/python3 -c 'import pytest, pytest_reportlog; assert pytest.__version__.startswith("8.")' \
  || { echo "the rootfs python3 does not import pytest 8 after the wheel install" >&2; exit 1; }
# `python` is Python 3, as in the Dockerfile's python image (Debian's python-is-python3 does
# the same): an agent that types `python` must not lose a turn to "command not found".
ln -sfn python3 "$tmp/usr/bin/python"
chroot "$tmp" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin python -c 'import sys; assert sys.version_info[0] == 3' \
  || { echo "the rootfs python is not Python 3" >&2; exit 1; }
# Bytecode for the installed packages, written now as root: sandbox uids cannot write it, so
# without it every pytest process (each grade, each agent's test run) compiles pytest anew
# (about 0.3 s of a 0.6 s start). Timestamp-checked, so a package a later setup step replaces
# is compiled from its new source, never read from a stale .pyc.
chroot "$tmp" /usr/bin/python3 -c 'import compileall, os, sys, pytest
sys.exit(not compileall.compile_dir(os.path.dirname(os.path.dirname(pytest.__file__)), quiet=1))' >&2
mkdir -p "$tmp/workspace"
chown 1000:1000 "$tmp/workspace"
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
rm -rf "$out"
mv "$tmp" "$out"
