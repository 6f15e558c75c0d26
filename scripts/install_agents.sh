#!/usr/bin/env bash
# Install every pinned agent into its own versioned bundle folder (idempotent):
# npm CLIs with npm, PyPI agents into a virtual environment of their own (never the replayer's).
# Arguments AGENT=VERSION install other versions of a pinned agent too (for compare variants), e.g.
#   scripts/install_agents.sh claude_code=2.1.196
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(python3 "$here/pin.py" bundles.root)

install() {
  local agent=$1 version=$2
  local dir="$root/$agent-$version"
  if [ -f "$dir/.installed" ]; then return; fi
  if npm_pkg=$(python3 "$here/pin.py" "agents.$agent.npm" 2>/dev/null); then
    rm -rf "$dir.partial"; mkdir -p "$dir.partial"
    (cd "$dir.partial" && npm install --no-audit --no-fund --loglevel=error "$npm_pkg@$version" >/dev/null)
    echo "$npm_pkg@$version" > "$dir.partial/.installed"
    rm -rf "$dir"; mv "$dir.partial" "$dir"
    echo "installed $npm_pkg@$version into $dir"
  else
    local pkg python
    pkg=$(python3 "$here/pin.py" "agents.$agent.pypi")
    python=$(python3 "$here/pin.py" "agents.$agent.python")
    # A virtual environment is not relocatable: build it in place; .installed marks it complete.
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
    local extra=() uv_version uv_dir exclude
    read -r -a extra <<< "$(python3 "$here/pin.py" "agents.$agent.with" 2>/dev/null || true)"
    if uv_version=$(python3 "$here/pin.py" "agents.$agent.uv" 2>/dev/null); then
      # uv (itself pinned, in a venv of its own) resolves large trees without pip's minutes of
      # backtracking; --exclude-newer makes today's resolution the resolution of every later run.
      uv_dir="$root/.uv-$uv_version"
      if [ ! -x "$uv_dir/bin/uv" ]; then
        rm -rf "$uv_dir"; python3 -m venv "$uv_dir"
        "$uv_dir/bin/python" -m pip install -q --disable-pip-version-check "uv==$uv_version" 2>&1 | { grep -v "^WARNING: Location" || true; }
      fi
      exclude=$(python3 "$here/pin.py" "agents.$agent.exclude_newer")
      "$uv_dir/bin/uv" venv -q --python "$python" "$dir"
      UV_CACHE_DIR="$root/.uv-cache" "$uv_dir/bin/uv" pip install -q --python "$dir/bin/python" \
        --exclude-newer "$exclude" "$pkg==$version" "${extra[@]}"
    else
      "$python" -m venv "$dir"
      "$dir/bin/python" -m pip install -q --disable-pip-version-check "$pkg==$version" "${extra[@]}" 2>&1 | { grep -v "^WARNING: Location" || true; }
    fi
    local debs=()
    read -r -a debs <<< "$(python3 "$here/pin.py" "agents.$agent.debs" 2>/dev/null || true)"
    if [ "${#debs[@]}" -gt 0 ]; then
      # Tools the agent's runtime calls that the base image lacks: unpacked, never installed on the host.
      mkdir -p "$dir/debs.download"
      # apt-get download needs the package lists: refresh them once if the pinned versions are not known.
      (cd "$dir/debs.download" && { apt-get download -q "${debs[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get download -q "${debs[@]}" 2>&1 | { grep -v "^W: Download is performed unsandboxed" || true; } >/dev/null; }; })
      for deb in "$dir"/debs.download/*.deb; do dpkg-deb -x "$deb" "$dir/debs"; done
      rm -rf "$dir/debs.download"
    fi
    echo "$pkg==$version" > "$dir/.installed"
    echo "installed $pkg==$version into $dir"
  fi
}

for agent in $(python3 - "$here/../sandboxes/images/pins.toml" <<'PY'
import sys, tomllib
print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["agents"]))
PY
); do
  install "$agent" "$(python3 "$here/pin.py" "agents.$agent.version")"
  for version in $(python3 "$here/pin.py" "agents.$agent.also" 2>/dev/null || true); do install "$agent" "$version"; done
done
for extra in "$@"; do
  agent=${extra%%=*}; version=${extra#*=}
  if [ "$agent" = "$extra" ] || [ -z "$version" ]; then echo "install_agents: expected AGENT=VERSION, got $extra" >&2; exit 2; fi
  python3 "$here/pin.py" "agents.$agent.version" >/dev/null || { echo "install_agents: no pinned agent $agent" >&2; exit 2; }
  install "$agent" "$version"
done
