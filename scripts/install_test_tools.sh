#!/usr/bin/env bash
# What the test suite needs besides the runtime: Debian's chromium renders compare's report.html headless.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
fi
