#!/usr/bin/env bash
# The engine and the base image: `replayer setup --no-bundles` (its script: replayer/setup/build_base_image.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m replayer.cli setup --no-bundles
