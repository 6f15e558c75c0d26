"""What an agent's package registry says of its releases: the concrete version a dist-tag (`latest`,
`next`) names today, when each release was uploaded, and so which release was current at a time. Only the
registry of the agent's own pin is asked (npm or PyPI, or the mirror the user's own settings name); what it
answers is bounded and read as data."""

from __future__ import annotations

import datetime
import json
import re
import urllib.parse
import urllib.request
from typing import Any

from replayer.floor import settings
from replayer.floor.errors import BadInput, excerpt
from replayer.floor.pins import AgentPin

RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)*([.+-]?[0-9A-Za-z][0-9A-Za-z.+-]*)?$")
"""A released version as npm (semver) and PyPI (PEP 440) spell them: digits first."""
FINAL = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,9}){0,5}$")
"""A plain release: numbers only (no pre-release, build or post-release part) in both registries' spelling."""
_TAG = re.compile(r"^[A-Za-z][0-9A-Za-z._-]*$")
_MAX_LEN = 64
_MAX_ANSWER = 64 << 20
"""The largest registry answer read (an npm package document with every release: ~1 MB for Claude Code)."""
_TIMEOUT_S = 30


NPM = "https://registry.npmjs.org"
PYPI = "https://pypi.org/simple"


def npm() -> str:
    """The npm registry the user set (`npm_registry`: their flag, variable or own settings file), else npm's."""
    return settings.load().npm_registry or NPM


def pypi() -> str:
    """The package index (its simple API) the user set (`pypi_index`), else PyPI's."""
    return settings.load().pypi_index or PYPI


class NotAVersion(BadInput):
    """`--agent-version` (flag, manifest, variant, API) holds neither a release nor a dist-tag the registry
    knows."""


def concrete(agent: str, pin: AgentPin, text: str) -> str:
    """The released version `text` names: `1.2.3` as it is, `v1.2.3` read as `1.2.3`, a dist-tag
    (`latest`) resolved by the registry to the version it names today. Anything else is refused."""
    stripped = text.strip()
    if len(stripped) <= _MAX_LEN:
        if RELEASE.match(stripped):
            return stripped
        if stripped[:1] in "vV" and RELEASE.match(stripped[1:]):
            return stripped[1:]
        if _TAG.match(stripped):
            return _tagged(agent, pin, stripped)
    raise NotAVersion(
        f"--agent-version {excerpt(text)} is not a version of {agent}: give a release (e.g. {pin.version}) "
        "or a dist-tag such as latest"
    )


def _tagged(agent: str, pin: AgentPin, tag: str) -> str:
    if pin.npm:
        tags = _get_json(f"{npm()}/-/package/{_quoted(pin.npm)}/dist-tags")
    else:
        info = (
            _get_json(f"{pypi().removesuffix('/simple')}/pypi/{_quoted(pin.package)}/json").get("info") or {}
        )
        # PyPI has one tag: its `latest` is the newest release that is not a pre-release.
        tags = {"latest": info.get("version")}
    if tags is None:
        raise NotAVersion(
            f"--agent-version {tag}: the {_registry(pin)} registry cannot be asked what {tag} names; "
            f"give a release of {agent} (e.g. {pin.version})"
        )
    version = tags.get(tag) if isinstance(tags, dict) else None
    if not isinstance(version, str) or not RELEASE.match(version) or len(version) > _MAX_LEN:
        known = ", ".join(sorted(k for k in tags if isinstance(k, str))[:8]) if isinstance(tags, dict) else ""
        raise NotAVersion(
            f"--agent-version {excerpt(tag)} is not a version of {agent} nor a dist-tag of {pin.package} "
            f"(its dist-tags: {known or 'none'}); give a release (e.g. {pin.version})"
        )
    return version


def upload_times(pin: AgentPin) -> dict[str, datetime.datetime] | None:
    """When each release of the pin's package was published (npm's `time`; PyPI's first file of the
    release), or None when the registry cannot be asked."""
    if pin.npm:
        doc = _get_json(f"{npm()}/{_quoted(pin.npm)}")
        stamps = doc.get("time") if isinstance(doc, dict) else None
        if not isinstance(stamps, dict):
            return None
        pairs = [(v, s) for v, s in stamps.items() if isinstance(s, str)]
    else:
        uploads = pypi_uploads(pin.package)
        if uploads is None:
            return None
        pairs = [(v, s[0]) for v, s in uploads.items()]
    times = {}
    for version, stamp in pairs:
        when = instant(stamp)
        if RELEASE.match(version) and when is not None:
            times[version] = when
    return times


def pypi_uploads(package: str) -> dict[str, list[str]] | None:
    """Each release's file upload times, sorted (the simple index's JSON form, PEP 691 with PEP 700's
    upload times: it answers where the older per-release JSON API is not reachable); None when the index
    cannot be asked."""
    doc = _get_json(f"{pypi()}/{_quoted(package)}/", accept="application/vnd.pypi.simple.v1+json")
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        return None
    uploads: dict[str, list[str]] = {}
    for f in files:
        if isinstance(f, dict) and isinstance(f.get("upload-time"), str):
            version = file_version(f.get("filename") or "")
            if version:
                uploads.setdefault(version, []).append(f["upload-time"])
    return {v: sorted(s) for v, s in uploads.items()}


def current_at(times: dict[str, datetime.datetime], when: datetime.datetime) -> str | None:
    """The release that was current at `when`: the highest plain release (`FINAL`, by version order, not a
    pre-release) published at or before it; None when none was yet."""
    published = [v for v, t in times.items() if FINAL.match(v) and t <= when]
    return max(published, key=lambda v: tuple(int(n) for n in v.split("."))) if published else None


def instant(stamp: str) -> datetime.datetime | None:
    """An ISO 8601 time (`Z` or an offset; none: read as UTC), or None when it is not one."""
    if len(stamp) > _MAX_LEN:
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def file_version(filename: str) -> str | None:
    """The version in a wheel's or an sdist's file name (`name-1.2.3-py3-none-any.whl`, `name-1.2.3.tar.gz`)."""
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        return parts[1] if len(parts) >= 5 else None
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            return filename[: -len(suffix)].rpartition("-")[2] or None
    return None


def _registry(pin: AgentPin) -> str:
    return "npm" if pin.npm else "PyPI"


def _quoted(package: str) -> str:
    return urllib.parse.quote(package, safe="@")


def _get_json(url: str, accept: str = "application/json") -> Any:
    """The registry's JSON answer, or None when it cannot be had (no network, an error, over the bound)."""
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:  # noqa: S310 (the registry's or the user's own)
            data = response.read(_MAX_ANSWER + 1)
    except (OSError, ValueError):
        return None
    if len(data) > _MAX_ANSWER:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None
