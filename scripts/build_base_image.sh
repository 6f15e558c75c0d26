#!/usr/bin/env bash
# Build the base sandbox image offline: debootstrap minbase + docker import. Reused when present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tag=$(python3 "$here/pin.py" base_image.tag)
if docker image inspect "$tag" >/dev/null 2>&1; then echo "base image $tag present"; exit 0; fi
command -v debootstrap >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null; apt-get install -y -qq debootstrap >/dev/null; }
suite=$(python3 "$here/pin.py" base_image.suite)
mirror=$(python3 "$here/pin.py" base_image.mirror)
include=$(python3 "$here/pin.py" base_image.packages | tr ' ' ',')
root=$(mktemp -d /var/tmp/replayer-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkdir -p "$root/home/replay"
tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
rm -f "$root.log"
echo "built base image $tag"
