"""One way to read a file the replayer did not write (replayer/floor/foreign.py), held on the source: a raw read
(`open(`, `io.open`, `Path.read_text/read_bytes/open`, `os.open` without a write flag) anywhere else in
replayer/, adapters/, bridges/ or sandboxes/ fails this test unless its module is in ALLOWED, each with why
it reads only what the replayer itself wrote or the user's own files. No Docker."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("replayer", "adapters", "bridges", "sandboxes")
READER = "replayer/floor/foreign.py"

ALLOWED = {
    "replayer/floor/io.py": "the user's own input files by the name they gave (open_input: regular, bounded) "
    "and the sandbox workspace walked by descriptors (Workspace)",
    "replayer/floor/safecopy.py": "copies and walks a sandbox tree by descriptors, no link followed, bounded",
    "replayer/floor/settings.py": "the user's own settings files (their trust rules: floor/trust)",
    "replayer/floor/trust.py": "the user's own trust list in their config folder",
    "replayer/floor/pins.py": "the pins shipped with the package",
    "replayer/floor/verdicts.py": "the verdicts shipped with the package or in the folders the user's trusted "
    "settings name (`verify` writes them)",
    "replayer/floor/bundles.py": "bundles the replayer installed (their lock, marker and package.json)",
    "replayer/floor/bundletrust.py": "the manifest the replayer wrote for a bundle it installed",
    "replayer/verbs/compatibility.py": "the package's own docs page",
    "replayer/verbs/verify.py": "meta.json of the fixtures the replayer recorded",
    "replayer/verbs/repeat.py": "reruns.json of the repeat folders this process wrote and removes",
    "replayer/api.py": "determinism.json this process just wrote",
    "replayer/pipeline/fork.py": "the job file and the replay folder this compare wrote in its own temp "
    "folder, and the user's --patch",
    "replayer/pipeline/forkpool.py": "run.json and fork.log the fork process of this compare wrote",
    "replayer/pipeline/oracle.py": "continued/ the engine itself just wrote, and a tree walked by safecopy.walk "
    "(descriptors, no link)",
    "replayer/pipeline/continue_run.py": "the agent output the engine just copied into its own output",
    "adapters/base.py": "continuation.json the rebuild wrote; the continued session while the engine copies it",
    "adapters/tool_definitions.py": "tool definitions shipped with the package or captured by the replayer",
    "adapters/python_bundle.py": "pyvenv.cfg of a bundle the replayer installed",
    "adapters/codex/bundle.py": "the tool definitions shipped with the adapter",
    "adapters/codex/continue_launch.py": "the continued rollout the engine just copied out of the sandbox",
    "adapters/gemini_cli/__init__.py": "the continued session the engine just copied out of the sandbox "
    "(the agent-store read-back)",
    "adapters/claude_code/continue_launch.py": "the prefix file the rebuild just wrote",
    "adapters/opencode/__init__.py": "the export and rebuilt session the engine just wrote",
    "adapters/opencode/cli_box.py": "the export the rebuild wrote, given to the CLI in its sandbox",
    "adapters/opencode/home.py": "the CLI's home as safecopy copied it out of its sandbox (no link in it), "
    "and the agent home the rebuild wrote, walked by descriptors",
    "sandboxes/fake.py": "the in-process test runtime's own state folder",
    "sandboxes/leftovers.py": "/proc of processes the replayer started",
    "sandboxes/slots.py": "the slots' own lock, control FIFOs and /proc/self/mountinfo",
    "replayer/floor/dedupe.py": "two boundary files this run itself wrote, compared to share their blocks",
    "replayer/floor/output_budget.py": "the run's own total file and the earlier boundary this run committed, by descriptors",
    "sandboxes/docker.py": "the image archive the replayer downloaded and checked (provision.py)",
    "sandboxes/podman.py": "the pid file the replayer's own podman service wrote, and that process's /proc limits",
}
"""Modules that read files without the reader: what each reads, and why it is not someone else's."""

_WRITE_FLAGS = {"O_WRONLY", "O_CREAT", "O_PATH"}
_NOT_PATHS = {"tarfile", "gzip", "bz2", "lzma", "zipfile", "webbrowser", "os", "Folder"}


def raw_reads(source: str) -> list[tuple[int, str]]:
    """(line, call) of each raw file read in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        text = ast.unparse(node)[:80]
        if (
            isinstance(func, ast.Name)
            and func.id == "open"
            or isinstance(func, ast.Attribute)
            and func.attr in ("read_text", "read_bytes")
        ):
            found.append((node.lineno, text))
        elif isinstance(func, ast.Attribute) and func.attr == "open":
            base = func.value.id if isinstance(func.value, ast.Name) else None
            if base == "os":
                flags = {n.attr for a in node.args[1:2] for n in ast.walk(a) if isinstance(n, ast.Attribute)}
                if not flags & _WRITE_FLAGS:
                    found.append((node.lineno, text))
            elif base == "io" or base not in _NOT_PATHS:
                found.append((node.lineno, text))
    return found


def sources() -> dict[str, Path]:
    return {
        path.relative_to(ROOT).as_posix(): path
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "companion" not in path.relative_to(ROOT).parts  # run inside the sandbox, by the agent's Python
    }


def test_foreign_files_are_read_only_through_the_reader() -> None:
    bypasses = [
        f"{rel}:{line}: {call}"
        for rel, path in sources().items()
        if rel != READER and rel not in ALLOWED
        for line, call in raw_reads(path.read_text())
    ]
    assert not bypasses, "raw reads outside replayer/floor/foreign.py:\n" + "\n".join(bypasses)


def test_every_allowed_module_still_reads() -> None:
    """An allow-list entry whose module no longer reads is removed (the list says what reads, no more)."""
    found = sources()
    stale = [rel for rel in ALLOWED if rel not in found or not raw_reads(found[rel].read_text())]
    assert not stale, stale


def test_a_planted_bypass_is_caught() -> None:
    planted = (
        "import io, os\n"
        "from pathlib import Path\n"
        "def f(job: Path, name: str) -> bytes:\n"
        "    a = (job / name).read_bytes()\n"
        "    b = open(job / 'result.json').read()\n"
        "    c = os.open(job / name, os.O_RDONLY)\n"
        "    d = io.open(job / name, 'rb')\n"
        "    e = (job / name).open('rb')\n"
        "    f = (job / name).read_text()\n"
        "    os.open(job / 'out', os.O_WRONLY | os.O_CREAT)\n"
        "    return a\n"
    )
    assert sorted(line for line, _ in raw_reads(planted)) == [4, 5, 6, 7, 8, 9]
