"""tests/bundles_used.json, what `make test` installs ahead of the tests (tests/support/prefetch.py): versions
the installer takes, each once, none of them pinned (setup installed those before the suite started)."""

from __future__ import annotations

from replayer.floor.bundles import pinned_specs
from tests.support.prefetch import listed


def test_the_prefetched_versions_are_unpinned_releases_each_listed_once() -> None:
    specs = listed()
    assert specs, "an empty list prefetches nothing"
    assert len(set(specs)) == len(specs)
    assert not set(specs) & set(pinned_specs())
