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
from setuptools.command.sdist import sdist

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
    """(pattern, native) of every adapter class's probe, read from its class attributes without importing
    it (the build has none of the dependencies)."""
    found = []
    for module in sorted(Path("adapters").rglob("*.py")):
        for cls in ast.walk(ast.parse(module.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            values = {}
            for node in cls.body:
                target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
                if isinstance(target, ast.Name) and target.id in ("probe_recordings", "probe_native"):
                    values[target.id] = ast.literal_eval(node.value)
            if values.get("probe_native"):
                found += [(pattern, values["probe_native"]) for pattern in values.get("probe_recordings", ())]
    return found


def _probe_files() -> list[tuple[Path, Path]]:
    """(file in the checkout, its name under PROBES) of every probe recording: meta.json, the native
    session (a file or a folder), the workspace."""
    files = []
    for pattern, native in _probe_recordings():
        for folder in sorted(FIXTURES.glob(pattern)):
            for name in ("meta.json", native, "workspace"):
                source = folder / name
                found = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
                files += [(f, f.relative_to(FIXTURES)) for f in found if f.is_file()]
    return files


class BuildWithProbes(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout
            return
        files = _probe_files()
        if not files:
            raise SystemExit(f"no probe recordings under {FIXTURES}: build the wheel from a source checkout")
        for source, name in files:
            target = Path(self.build_lib) / PROBES / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


class SdistWithProbes(sdist):
    """The source distribution keeps them under tests/fixtures, so a wheel built from it has them."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, [*files, *(str(source) for source, _ in _probe_files())])


setup(
    packages=PACKAGES, package_dir=FOLDERS, cmdclass={"build_py": BuildWithProbes, "sdist": SdistWithProbes}
)
