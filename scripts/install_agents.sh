#!/usr/bin/env bash
# Install every pinned agent version (and the pin file's `also` versions) into the versioned bundle
# cache, idempotently, with the replayer's own installer (replayer/bundles.py, `replayer bundles add`).
# Arguments AGENT@VERSION install other versions too, e.g. scripts/install_agents.sh claude_code@2.0.64
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
exec "${PYTHON:-.venv/bin/python}" -m replayer.cli bundles add --pinned "$@"
