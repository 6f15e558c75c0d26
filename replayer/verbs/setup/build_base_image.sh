#!/usr/bin/env bash
# Build the base sandbox image offline: debootstrap minbase + docker (or podman) import.
# Run by `replayer setup` (replayer/verbs/setup/__init__.py), which reads the pins and reuses an image present:
#   build_base_image.sh TAG SUITE MIRROR PACKAGE,PACKAGE,... [docker|podman]
set -euo pipefail
tag=$1 suite=$2 mirror=$3 include=$4 importer=${5:-docker}
command -v debootstrap >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null; apt-get install -y -qq debootstrap >/dev/null; }
root=$(mktemp -d /var/tmp/replayer-rootfs.XXXXXX)
trap 'rm -rf "$root" "$root.log"' EXIT
debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkdir -p "$root/home/replay"
quiet=(); [ "$importer" = podman ] && quiet=(--quiet)  # its progress on stderr would read as warnings
tar -C "$root" -c . | "$importer" import "${quiet[@]}" --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
