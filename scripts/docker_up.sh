#!/usr/bin/env bash
# Start a Docker engine idempotently (no default bridge, no iptables) and wait until it answers.
set -euo pipefail
log=${REPLAYER_DOCKERD_LOG:-/var/log/replayer-dockerd.log}
if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io >/dev/null
fi
if [ -f /var/run/docker.pid ]; then
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then rm -f /var/run/docker.pid; fi
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  rm -f /var/run/docker.sock
  nohup dockerd --bridge=none --iptables=false >"$log" 2>&1 &
fi
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then exit 0; fi
  sleep 0.5
done
echo "docker_up: the Docker engine did not answer within 60 s (see $log)" >&2
exit 1
