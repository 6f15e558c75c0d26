"""The repository keeps the design's folders (replayer/ adapters/ bridges/ sandboxes/); installed, they are
one namespace: replayer, replayer.adapters, replayer.bridges, replayer.sandboxes (docs/architecture.md)."""

from setuptools import find_packages, setup

FOLDERS = {
    "replayer": "replayer",
    "replayer.adapters": "adapters",
    "replayer.bridges": "bridges",
    "replayer.sandboxes": "sandboxes",
}
PACKAGES = [
    f"{namespace}.{sub}" if sub else namespace
    for namespace, folder in FOLDERS.items()
    for sub in ["", *find_packages(folder)]
]

setup(packages=PACKAGES, package_dir=FOLDERS)
