"""Run a command holding the installer's apt lock (`replayer.installer.APT`), as `replayer setup` runs its
apt-get: `make test` installs the test tools with apt while the prefetch may be fetching a bundle's Debian
packages (`apt-get download`, and `apt-get update` when the lists are stale).

    python -m tests.support.apt_locked scripts/install_test_tools.sh
"""

from __future__ import annotations

import subprocess
import sys

from replayer import installer
from replayer.floor.bundles import cache_lock


def main(argv: list[str]) -> int:
    with cache_lock(*installer.APT):
        return subprocess.run(argv).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
