"""OpenHands V1's file of the field corpus (tests/support/field.py): an earlier SDK's conversation rerun at
the oldest SDK inferred and continued through the gate, against the scripted upstream and bare `mock` (V0's
files: test_openhands_v0_field.py)."""

from __future__ import annotations

from tests.support import field

test_a_field_trajectory_runs_at_its_own_version, test_a_field_continuation_ends_when_the_bare_mock_ends_it = (
    field.own_version_tests("openhands")
)
