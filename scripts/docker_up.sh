#!/usr/bin/env bash
# The Docker engine alone: `replayer setup --no-image --no-bundles` (its script: replayer/setup/docker_up.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m replayer.cli setup --no-image --no-bundles
