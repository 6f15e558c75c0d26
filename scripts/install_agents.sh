#!/usr/bin/env bash
# Install every pinned agent CLI into its own versioned bundle folder (idempotent).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(python3 "$here/pin.py" bundles.root)
for agent in $(python3 - "$here/../sandboxes/images/pins.toml" <<'PY'
import sys, tomllib
print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["agents"]))
PY
); do
  pkg=$(python3 "$here/pin.py" "agents.$agent.npm")
  version=$(python3 "$here/pin.py" "agents.$agent.version")
  dir="$root/$agent-$version"
  if [ -f "$dir/.installed" ]; then continue; fi
  rm -rf "$dir.partial"; mkdir -p "$dir.partial"
  (cd "$dir.partial" && npm install --no-audit --no-fund --loglevel=error "$pkg@$version" >/dev/null)
  echo "$pkg@$version" > "$dir.partial/.installed"
  rm -rf "$dir"; mv "$dir.partial" "$dir"
  echo "installed $pkg@$version into $dir"
done
