"""Continuation settings, defined once (ContinueSettings) and merged in one order: user file < project file
< environment < flag (or API argument) < compare variant; a batch manifest line is its jobs' only layer.
What the engine receives (ContinueRequest) is built from the merged settings by `request()`. Without Docker."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from replayer.floor import settings, trust
from replayer.floor.errors import BadInput, OptionsConflict
from replayer.floor.merge import merge
from replayer.floor.options import RunOptions
from replayer.floor.requests import ContinueRequest, ContinueSettings, Variant, VariantSpec
from replayer.verbs.batch_jobs import _continuation_key, expand
from replayer.verbs.batch_manifest import read_manifest
from replayer.verbs.compare import variant_continuation
from replayer.verbs.variants import parse_variant
from tests.conftest import MINI

TRAJ = MINI.fixture("toolcall") / "trajectory.traj.json"


def _continue_request(found: settings.Settings, given: RunOptions) -> ContinueRequest:
    """The continuation `run --continue` asks the engine for: the options over the settings."""
    return merge(given, found, RunOptions).continuation.request()


@pytest.fixture
def layered(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder under a project file, a user file, and an environment: each sets something the
    layers above it leave, and something a layer above it replaces."""
    cwd = tmp_path / "project" / "sub"
    cwd.mkdir(parents=True)
    user = tmp_path / "config" / "replayer" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(  # the user trusts the project's folder: its file may set the upstream
        f'trusted = ["{tmp_path / "project"}"]\nupstream = "https://user.example"\nupstream_key_env = "USER_KEY"\n'
    )
    (tmp_path / "project" / "replayer.toml").write_text('upstream = "https://project.example"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "REPLAYER_UPSTREAM_KEY_ENV": "ENV_KEY"}
    trust.add(tmp_path / "project", env)  # its content pinned
    return cwd, env


def test_flags_go_over_the_environment_over_the_project_file_over_the_user_file(
    layered: tuple[Path, dict[str, str]],
) -> None:
    found = settings.load(*layered)
    unflagged = _continue_request(found, {})
    assert (unflagged.upstream, unflagged.upstream_key_env) == ("https://project.example", "ENV_KEY")
    cwd, env = layered
    without_env = settings.load(cwd, {k: v for k, v in env.items() if not k.startswith("REPLAYER_")})
    assert _continue_request(without_env, {}).upstream_key_env == "USER_KEY"  # only the user file says
    flagged = _continue_request(
        found, {"upstream": "https://flag.example", "max_steps": 4, "idle_timeout": 9}
    )
    assert (flagged.upstream, flagged.upstream_key_env) == ("https://flag.example", "ENV_KEY")
    assert (flagged.max_steps, flagged.idle_timeout_s) == (4, 9)
    # a setting no layer sets is the engine's default
    assert (flagged.grace_s, flagged.model, flagged.cassette) == (
        ContinueRequest(upstream="").grace_s,
        None,
        None,
    )


def test_a_cassette_flag_answers_offline_whatever_upstream_the_settings_name(
    layered: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    found = settings.load(*layered)
    offline = _continue_request(found, {"cassette": tmp_path / "tape"})
    assert (offline.upstream, offline.cassette) == ("", tmp_path / "tape")
    with pytest.raises(OptionsConflict, match="a cassette answers offline: give no upstream"):
        _continue_request(found, {"cassette": tmp_path / "tape", "upstream": "https://flag.example"})


def test_a_variant_goes_over_the_shared_settings_and_adds_to_their_agent_environment(
    layered: tuple[Path, dict[str, str]],
) -> None:
    shared = _continue_request(
        settings.load(*layered), {"model": "m-shared", "max_steps": 4, "agent_env": {"A": "1", "B": "1"}}
    )
    variant = parse_variant("v=prompt=hint,key_env=V_KEY,idle_timeout=30,env.B=2,env.C=2")
    cont = variant_continuation(shared, variant)
    assert (cont.boundary_prompt, cont.upstream_key_env, cont.idle_timeout_s) == ("hint", "V_KEY", 30)
    assert (cont.model, cont.max_steps, cont.upstream) == ("m-shared", 4, "https://project.example")
    assert cont.agent_env == {"A": "1", "B": "2", "C": "2"}
    assert variant_continuation(shared, parse_variant("same=")) == shared


def test_upstream_and_cassette_are_one_choice_a_later_layer_makes_again(tmp_path: Path) -> None:
    live = ContinueSettings(upstream="https://shared.example", upstream_key_env="K")
    taped = live.merge(VariantSpec(cassette=tmp_path / "tape")).request()
    assert (taped.upstream, taped.cassette, taped.upstream_key_env) == ("", tmp_path / "tape", "K")
    back = (
        ContinueSettings(cassette=tmp_path / "tape")
        .merge(VariantSpec(upstream="https://v.example"))
        .request()
    )
    assert (back.upstream, back.cassette) == ("https://v.example", None)
    kept = live.merge(ContinueSettings(model="m")).request()
    assert (kept.upstream, kept.model) == ("https://shared.example", "m")


def test_unset_is_none_or_an_empty_upstream_and_never_replaces_a_lower_layer() -> None:
    lower = ContinueSettings(upstream="https://u.example", max_steps=3, agent_env={"A": "1"})
    assert lower.merge(ContinueSettings()) == lower
    assert lower.merge(ContinueSettings(upstream="")) == lower
    assert lower.merge(ContinueRequest(upstream="")).upstream == lower.upstream  # a request's "": none
    assert ContinueSettings().request() == ContinueRequest(upstream="")


def _manifest(tmp_path: Path, continuation: dict[str, object]) -> Path:
    line = {"trajectory": str(TRAJ), "boundaries": [1], "mode": "continue", "continuation": continuation}
    line["workspace"] = str(MINI.fixture("toolcall") / "workspace")
    path = tmp_path / "m" / "manifest.jsonl"
    path.parent.mkdir()
    path.write_bytes(orjson.dumps(line) + b"\n")
    return path


def test_a_manifest_line_is_its_jobs_continuation(tmp_path: Path) -> None:
    path = _manifest(tmp_path, {"cassette": "tapes", "idle_timeout_s": 5, "agent_env": {"A": "1"}})
    [job] = expand(read_manifest(path, trusted=True), {})
    cont = job.request(tmp_path / "out").continuation
    assert cont is not None
    assert (cont.cassette, cont.upstream, cont.idle_timeout_s) == (path.parent / "tapes", "", 5)
    assert cont.agent_env == {"A": "1"} and cont.grace_s == ContinueRequest(upstream="").grace_s


def test_a_manifest_cannot_record_cassettes(tmp_path: Path) -> None:
    path = _manifest(tmp_path, {"upstream": "https://u.example", "record_cassette": "new"})
    with pytest.raises(BadInput, match="manifest line 1: continuation.record_cassette: a batch replays"):
        read_manifest(path, trusted=True)  # the user's own: it may name an upstream


def test_job_keys_hold_the_continuation_as_before_settings_were_one_model(tmp_path: Path) -> None:
    """A batch directory resumes across versions: a line's key does not change with the model's new fields."""
    before = ("upstream", "cassette", "upstream_key_env", "boundary_prompt", "max_steps", "idle_timeout_s")
    key = _continuation_key(ContinueSettings(max_steps=20))
    assert key is not None and set(key) == {*before, "model", "agent_env"} and key["upstream"] == ""
    assert _continuation_key(ContinueSettings(grace_s=3))["grace_s"] == 3  # type: ignore[index]
    assert _continuation_key(ContinueSettings(upstream="https://a")) != _continuation_key(
        ContinueSettings(upstream="https://b")
    )


def test_variant_spec_keeps_its_compare_json_names() -> None:
    spec = parse_variant("v=boundary_prompt=hi,agent_version=2.0.1").spec
    dumped = Variant(name="v", spec=spec).model_dump(mode="json")["spec"]
    assert (dumped["prompt"], dumped["version"]) == ("hi", "2.0.1") and "boundary_prompt" not in dumped
    assert VariantSpec.model_validate(dumped) == spec


def test_frozen_models_are_frozen() -> None:
    cont = ContinueRequest(upstream="https://u.example")
    with pytest.raises(ValidationError, match="frozen"):
        cont.upstream = "https://elsewhere.example"  # type: ignore[misc]
    changed = cont.model_copy(update={"upstream": "https://elsewhere.example"})
    assert (cont.upstream, changed.upstream) == ("https://u.example", "https://elsewhere.example")
