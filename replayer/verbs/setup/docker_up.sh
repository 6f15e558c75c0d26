#!/usr/bin/env bash
# Start a Docker engine idempotently (no default bridge, no iptables) and wait until it answers.
# Run by `replayer setup` (replayer/verbs/setup/__init__.py), which checks first that it can (root, apt-get).
# Its data root lives on a btrfs file system with quotas (a loop image under /var/lib/sandbox-replayer),
# where each run's state and each container's writable layer get a disk quota (sandboxes/quota.py);
# without loop devices the engine uses its default data root and runs are not disk-limited.
set -euo pipefail
log=${REPLAYER_DOCKERD_LOG:-/var/log/replayer-dockerd.log}
base=/var/lib/sandbox-replayer
fs=${REPLAYER_FS_ROOT:-$base/fs}
img=$base/fs.img
if docker info >/dev/null 2>&1; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
need=()
{ command -v dockerd && command -v docker; } >/dev/null 2>&1 || need+=(docker.io)
command -v mkfs.btrfs >/dev/null 2>&1 || need+=(btrfs-progs)
# without apt-get: docker.io is there (checked before), and without btrfs-progs runs are not disk-limited
if [ ${#need[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

mount_fs() {
  mkdir -p "$fs"
  if mountpoint -q "$fs"; then return 0; fi
  if [ ! -f "$img" ]; then
    # sparse; sized below the free space so that the host disk can never be filled through it
    free_kb=$(df -Pk "$base" | awk 'NR==2 {print $4}')
    size_kb=$(( free_kb * 8 / 10 ))
    cap_kb=$(( 200 * 1024 * 1024 ))
    [ "$size_kb" -gt "$cap_kb" ] && size_kb=$cap_kb
    truncate -s "${size_kb}K" "$img.new"
    mkfs.btrfs -q -f "$img.new" >/dev/null
    mv "$img.new" "$img"
  fi
  mount -o loop,noatime "$img" "$fs" || return 1
  btrfs quota enable "$fs"
  mkdir -p "$fs/docker" "$fs/runs"
  chmod 700 "$fs/runs"
}

mkdir -p "$base"
data_root=()
if mount_fs 2>>"$log"; then
  data_root=(--data-root "$fs/docker" --storage-driver overlay2)
else
  echo "docker_up: no btrfs file system for quotas (see $log); runs will not be disk-limited" >&2
fi
if [ -f /var/run/docker.pid ]; then
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then rm -f /var/run/docker.pid; fi
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  rm -f /var/run/docker.sock
  cd /  # the launcher's private folder is removed when this script ends; a daemon outlives it
  nohup dockerd --bridge=none --iptables=false "${data_root[@]}" >"$log" 2>&1 &
fi
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then exit 0; fi
  sleep 0.5
done
echo "docker_up: the Docker engine did not answer within 60 s (see $log)" >&2
exit 1
