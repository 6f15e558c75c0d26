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
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "$pkg==$version" 2>&1 | { grep -v "^WARNING: Location" || true; }
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
