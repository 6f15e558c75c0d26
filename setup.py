"""The repository keeps the design's folders (replayer/ adapters/ bridges/ sandboxes/); installed, they are
one namespace: replayer, replayer.adapters, replayer.bridges, replayer.sandboxes (docs/architecture.md).

The wheel also carries the probe recordings `replayer verify` and the export's tool capture start from
(each adapter's `probe_recordings` under tests/fixtures: meta.json, the native session, the workspace),
under replayer/data/probes/."""

import ast
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

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
FIXTURES = Path("tests/fixtures")
PROBES = "replayer/data/probes"
"""Where the wheel keeps them (replayer.verbs.verify.FIXTURES reads them there)."""


def _probe_recordings() -> list[tuple[str, str]]:
    """(pattern, native) of every adapter's probe, read from its class attributes without importing it
    (the build has none of the dependencies)."""
    found = []
    for init in sorted(Path("adapters").glob("*/__init__.py")):
        values = {}
        for node in ast.walk(ast.parse(init.read_text())):
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            if isinstance(target, ast.Name) and target.id in ("probe_recordings", "probe_native"):
                values[target.id] = ast.literal_eval(node.value)
        if values.get("probe_native"):
            found += [(pattern, values["probe_native"]) for pattern in values.get("probe_recordings", ())]
    return found


class BuildWithProbes(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout
            return
        recordings = [(f, n) for p, n in _probe_recordings() for f in sorted(FIXTURES.glob(p))]
        if not recordings:
            raise SystemExit(f"no probe recordings under {FIXTURES}: build the wheel from a source checkout")
        for folder, native in recordings:
            into = Path(self.build_lib) / PROBES / folder.relative_to(FIXTURES)
            into.mkdir(parents=True, exist_ok=True)
            for name in ("meta.json", native, "workspace"):
                source = folder / name
                if source.is_dir():
                    shutil.copytree(source, into / name, dirs_exist_ok=True)
                elif source.is_file():
                    shutil.copy2(source, into / name)


setup(packages=PACKAGES, package_dir=FOLDERS, cmdclass={"build_py": BuildWithProbes})
