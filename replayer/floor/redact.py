"""Secret-looking strings, redacted wherever the replayer writes something meant to leave the machine
(exported training records, cassettes)."""

from __future__ import annotations

import re
from typing import Any

SECRETS = [
    re.compile(r"\bsk-(?:ant-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{12,}"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
]
REDACTED = "[REDACTED]"


def redact_text(text: str, known: tuple[str, ...] = ()) -> tuple[str, int]:
    """`known`: secret values the caller holds (the upstream key), redacted whatever they look like."""
    count = 0
    for secret in known:
        if secret:
            count += text.count(secret)
            text = text.replace(secret, REDACTED)
    for pattern in SECRETS:
        text, n = pattern.subn(REDACTED, text)
        count += n
    return text, count


def redact(value: Any, known: tuple[str, ...] = ()) -> tuple[Any, int]:
    """Every string of a JSON value redacted (keys kept), and how many secrets were replaced."""
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, list):
        pairs = [redact(v, known) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        items = {k: redact(v, known) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, sum(n for _, n in items.values())
    return value, 0
