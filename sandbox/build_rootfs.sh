#!/usr/bin/env bash
# Build the sandbox root filesystem offline (no container registry needed): Debian bookworm
# minbase with python3, pytest, bash and coreutils, from this machine's configured Debian mirror.
# Usage: build_rootfs.sh OUTDIR   (needs root and debootstrap)
set -euo pipefail
out=${1:?usage: build_rootfs.sh OUTDIR}
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
debootstrap --variant=minbase --include=python3,python3-pytest,procps bookworm "$tmp" "$mirror" >&2
mkdir -p "$tmp/workspace"
chown 1000:1000 "$tmp/workspace"
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
rm -rf "$out"
mv "$tmp" "$out"
