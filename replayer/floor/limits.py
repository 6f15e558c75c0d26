"""Every limit of a run (sandbox resources, read and command budgets) as a constrained type: whatever
source gives it (a flag, a variable, a settings file, a manifest, the API), it is checked by one rule."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError

from replayer.floor.model_base import Frozen, first_error

# Every limit, wherever it comes from (a flag, a variable, a settings file, a manifest, the API), is one of
# these types: a number that is finite and at least what the engine takes (below it a limit would round to
# none, as `cpus=1e-12` became no CPU quota). docs/cli.md, "Limits".
MIN_CPUS = 0.01
"""The smallest CPU share the engines take (Docker refuses less; a nano-CPU quota of 0 is no quota)."""
MIN_MEMORY_BYTES = 6 << 20
"""The smallest memory limit the engines take (Docker's 6 MiB)."""
Count = Annotated[int, Field(ge=1)]
"""A count limit (processes, files, bytes, requests, tokens, workers): at least 1."""
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A timeout: a finite number of seconds above 0."""
GraceSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A grace period: finite, 0 for none."""
Cpus = Annotated[float, Field(ge=MIN_CPUS, allow_inf_nan=False)]


class ReadBudget(Frozen):
    """Outer safety bounds of the confined file reads; set above what the pinned CLIs do on ordinary files."""

    max_scan_bytes: Count = 16 * 1024 * 1024
    max_content_bytes: Count = 4 * 1024 * 1024
    max_lines: Count = 100_000


class Budgets(Frozen):
    read: ReadBudget = Field(default_factory=ReadBudget)
    default_command_timeout_s: Seconds = 120.0
    max_command_timeout_s: Seconds = 600.0
    max_command_output_bytes: Count = 64 * 1024 * 1024


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'512m', '8g', '1048576' -> bytes."""
    number, unit = text.strip().lower().rstrip("b"), ""
    if number and number[-1] in _SIZE_UNITS:
        number, unit = number[:-1], number[-1]
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"not a size: {text!r} (e.g. 512m, 8g)")
    return int(number) * _SIZE_UNITS[unit]


def _memory(text: str) -> str:
    if parse_size(text) < MIN_MEMORY_BYTES:
        raise ValueError(f"below the engine's minimum of {MIN_MEMORY_BYTES >> 20}m")
    return text


Memory = Annotated[str, AfterValidator(_memory)]
"""A memory size (`512m`, `4g`, `4294967296b`) of at least MIN_MEMORY_BYTES."""


OUTPUT_PER_DISK = 4
"""The default total output budget of a run, in multiples of its `disk` limit."""


class SandboxLimits(Frozen):
    """Resource limits of every container a run starts; recorded in the result."""

    memory: Memory = "4g"
    pids: Count = 1024
    cpus: Cpus = 2.0
    disk_bytes: Count = 8 << 30
    """What the sandbox may write: the container's own file system and, separately, the run's state
    (workspace and agent home) each get this quota where the engine supports it; also the most the host
    copies out of (or into) a place the container can write."""
    copy_files: Count = 200_000
    """The most files the host copies out of (or into) such a place."""
    output_bytes: int | None = None
    """The most a run writes to its outputs in all (every boundary of `run -n a,b,c`); None:
    OUTPUT_PER_DISK times `disk_bytes` (`output_total`)."""

    def output_total(self) -> int:
        return self.output_bytes if self.output_bytes is not None else OUTPUT_PER_DISK * self.disk_bytes

    @classmethod
    def parse(cls, spec: str) -> SandboxLimits:
        """`memory=4g,pids=1024,cpus=2,disk=8g,files=200000,output=32g` (any subset); a bad one raises ValueError
        with a one-line reason."""
        fields: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"expected KEY=VALUE, got {item!r}")
            if key == "memory":
                fields["memory"] = f"{parse_size(value)}b"
            elif key in ("disk", "output"):
                fields["disk_bytes" if key == "disk" else "output_bytes"] = parse_size(value)
            elif key in ("pids", "files") and value.isdigit() and int(value) > 0:
                fields["pids" if key == "pids" else "copy_files"] = int(value)
            elif key == "cpus":
                try:
                    fields["cpus"] = float(value)
                except ValueError:
                    raise ValueError(f"cpus: not a number: {value!r}") from None
            else:
                raise ValueError(
                    f"unknown limit or bad value {item!r} (memory, pids, cpus, disk, files, output)"
                )
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise ValueError(first_error(exc)) from None
