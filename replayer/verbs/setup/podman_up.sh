#!/usr/bin/env bash
# Start Podman's Docker-compatible API idempotently and wait until it answers:
#   podman_up.sh SOCKET
# Run by `replayer setup --engine podman` (replayer/verbs/setup/__init__.py), which checks first that it can
# (root, apt-get). Installs Debian's podman with catatonit (the containers' init) when missing. The service
# uses runc: Debian's crun refuses hosts whose cgroups are in hybrid mode. Sandboxes get no network
# (network_mode none), so no network backend is configured.
set -euo pipefail
sock=$1
log=${REPLAYER_PODMAN_LOG:-/var/log/replayer-podman.log}
answers() { podman --url "unix://$sock" version >/dev/null 2>&1; }
if command -v podman >/dev/null 2>&1 && answers; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
[ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
command -v runc >/dev/null 2>&1 || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$(dirname "$sock")"
pidfile="$sock.pid"
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  :  # started, not answering yet
else
  rm -f "$sock"
  # from /, not the launcher's private folder: that folder is removed when this script ends, and conmon
  # fails every container start from a service whose working directory is gone ("write child: broken pipe")
  cd /
  nohup podman --runtime runc system service --time=0 "unix://$sock" >"$log" 2>&1 &
  echo $! >"$pidfile"
fi
for _ in $(seq 1 120); do
  if answers; then exit 0; fi
  sleep 0.5
done
echo "podman_up: the Podman API did not answer at $sock within 60 s (see $log)" >&2
exit 1
