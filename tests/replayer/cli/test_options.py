"""One options model (issue 33, item 4): each option is declared once (floor/options.py), the command's flags
are made from the declarations, and one merge (floor/merge.py) puts the flags over the settings layers
(environment > project file > user file > default) into the request fields they feed. Pure, no Docker."""

from __future__ import annotations

import ast
import inspect
import typing
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from replayer import api
from replayer.cli import app
from replayer.cli import options as cli_options
from replayer.floor import settings, trust
from replayer.floor.errors import BadInput, OptionsConflict, ReplayError, SettingsError
from replayer.floor.limits import SandboxLimits
from replayer.floor.merge import CONTINUATION, Merged, merge
from replayer.floor.options import OPTIONS, CompareOptions, ReplayOptions, RunOptions, declared
from replayer.floor.requests import CompareRequest, ContinueRequest, ReplayRequest
from tests.conftest import ROOT, replayer

LAYERS = ("flag", "env", "project", "user")
"""From the highest: a flag (or API argument), a REPLAYER_* variable, the project file, the user file."""


def _places(tmp_path: Path, trusted: bool = True) -> tuple[Path, Path, Path, dict[str, str]]:
    """A folder to run from under a project file, and a user file (trusting the project's folder)."""
    cwd = tmp_path / "project" / "sub"
    cwd.mkdir(parents=True)
    user = tmp_path / "config" / "replayer" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'trusted = ["{tmp_path / "project"}"]\n' if trusted else "")
    return cwd, tmp_path / "project" / "replayer.toml", user, {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def _fed(merged: Merged, feed: str) -> Any:
    """The value a request gets at `feed` from the merged options."""
    if feed.startswith(CONTINUATION):
        return getattr(merged.continuation.request(), feed.removeprefix(CONTINUATION))
    return merged.fields.get(feed, ReplayRequest.model_fields[feed].default)


@pytest.mark.parametrize("name", ["upstream", "upstream_key_env", "image"])
@pytest.mark.parametrize("top", LAYERS)
def test_the_highest_layer_that_sets_an_option_wins(tmp_path: Path, name: str, top: str) -> None:
    """Every layer from `top` down sets the option, each to its own value: `top`'s is the one fed."""
    option = OPTIONS[name]
    assert option.layers is not None and option.layers.env is not None
    cwd, project, user, env = _places(tmp_path)
    below = LAYERS[LAYERS.index(top) :]
    if "user" in below:
        user.write_text(user.read_text() + f'{name} = "user-{name}"\n')
    if "project" in below:
        project.write_text(f'{name} = "project-{name}"\n')
        trust.add(project.parent, env)  # pinned as it is now
    if "env" in below:
        env[option.layers.env] = f"env-{name}"
    given: RunOptions = {name: f"flag-{name}"} if "flag" in below else {}  # type: ignore[misc]
    merged = merge(given, settings.load(cwd, env), RunOptions)
    [feed] = option.feeds
    assert _fed(merged, feed) == f"{top}-{name}"


@pytest.mark.parametrize("name", ["upstream", "image"])
def test_an_option_no_layer_sets_is_its_default(tmp_path: Path, name: str) -> None:
    cwd, _, _, env = _places(tmp_path)
    merged = merge({}, settings.load(cwd, env), RunOptions)
    [feed] = OPTIONS[name].feeds
    assert _fed(merged, feed) == ("" if name == "upstream" else None)  # no upstream: "" in the request


def test_limits_merge_key_by_key_down_the_layers(tmp_path: Path) -> None:
    cwd, project, user, env = _places(tmp_path)
    user.write_text(user.read_text() + '[limits]\nmemory = "1g"\npids = 100\ncpus = 1.5\n')
    project.write_text("[limits]\npids = 50\nfiles = 1000\n")
    trust.add(project.parent, env)
    env["REPLAYER_LIMITS"] = "files=500,disk=2g"
    found = settings.load(cwd, env)
    assert merge({"limits": "disk=1g"}, found, RunOptions).fields["limits"] == SandboxLimits(
        memory=f"{1 << 30}b", pids=50, cpus=1.5, copy_files=500, disk_bytes=1 << 30
    )
    assert merge({}, found, RunOptions).fields["limits"].disk_bytes == 2 << 30  # the environment's
    stated = SandboxLimits(pids=7)
    assert merge({"limits": stated}, found, RunOptions).fields["limits"] == stated  # taken as it is
    with pytest.raises(BadInput, match="limits: unknown limit or bad value 'ram=1g'"):
        merge({"limits": "ram=1g"}, found, RunOptions)


def test_options_no_settings_layer_sets_come_from_the_argument_alone(tmp_path: Path) -> None:
    cwd, _, user, env = _places(tmp_path)
    user.write_text(user.read_text() + 'upstream = "https://user.example"\n')
    merged = merge(
        {"model": "m", "idle_timeout": 9, "agent_env": {"A": "1"}, "end_leftovers": True, "task": "t"},
        settings.load(cwd, env),
        RunOptions,
    )
    cont = merged.continuation.request()
    assert (cont.upstream, cont.model, cont.idle_timeout_s, cont.end_leftovers) == (
        "https://user.example",
        "m",
        9,
        True,
    )
    assert merged.fields["agent_env"] == cont.agent_env == {"A": "1"}  # the reruns' and the continuation's
    assert merged.fields["task"] == "t"
    untouched = merge({}, settings.load(cwd, env), RunOptions).continuation.request()
    assert untouched == ContinueRequest(upstream="https://user.example")


def test_a_cassette_argument_replaces_the_upstream_of_every_layer_below(tmp_path: Path) -> None:
    cwd, project, _, env = _places(tmp_path)
    project.write_text('upstream = "https://project.example"\n')
    trust.add(project.parent, env)
    env["REPLAYER_UPSTREAM"] = "https://env.example"
    cont = merge({"cassette": tmp_path / "tape"}, settings.load(cwd, env), RunOptions).continuation.request()
    assert (cont.upstream, cont.cassette) == ("", tmp_path / "tape")
    with pytest.raises(OptionsConflict, match="a cassette answers offline: give no upstream"):
        merge({"cassette": "tape", "upstream": "https://flag.example"}, settings.load(cwd, env), RunOptions)


def test_a_verb_takes_only_its_options(tmp_path: Path) -> None:
    cwd, _, user, env = _places(tmp_path)
    user.write_text(user.read_text() + 'image = "user-image"\n')
    found = settings.load(cwd, env)
    assert "image" not in merge({"force": True}, found, ReplayOptions).fields  # prepare runs no sandbox
    with pytest.raises(TypeError, match="unexpected option"):
        merge({"image": "x"}, found, ReplayOptions)  # type: ignore[typeddict-unknown-key]


@pytest.mark.parametrize(
    "name", sorted(n for n, o in OPTIONS.items() if o.layers and o.layers.untrusted == "never")
)
def test_a_folder_not_trusted_may_not_set_what_its_declaration_forbids(tmp_path: Path, name: str) -> None:
    cwd, project, _, env = _places(tmp_path, trusted=False)
    value = {
        "trusted": '["/x"]',
        "pinned": '{"/x" = "y"}',
        "engine": '"podman"',
        "npm_registry": '"https://x.example"',
        "pypi_index": '"https://x.example/simple"',
    }.get(name, '"x"')  # of its type
    project.write_text(f"{name} = {value}\n")
    with pytest.raises(SettingsError) as caught:
        settings.load(cwd, env)
    why = OPTIONS[name].layers.why  # type: ignore[union-attr]
    assert why and why in str(caught.value) and caught.value.exit_code == 13
    if name not in ("trusted", "pinned"):  # even a trusted folder may not say what is trusted
        assert str(caught.value) == (
            f"{project}: sets {name!r}, which a folder you have not trusted may not set ({why}); trust its "
            f"folder with `replayer trust {project.parent}` if it is yours, or remove the key"
        )


def test_a_folder_not_trusted_may_set_what_its_declaration_allows(tmp_path: Path) -> None:
    cwd, project, _, env = _places(tmp_path, trusted=False)
    project.write_text('workers = 1\n[limits]\nmemory = "1g"\n')
    found = settings.load(cwd, env)
    assert OPTIONS["workers"].layers.untrusted == "tighter"  # type: ignore[union-attr]
    assert OPTIONS["limits"].layers.untrusted == "tighter"  # type: ignore[union-attr]
    assert found.workers == 1 and merge({}, found, RunOptions).fields["limits"].memory == f"{1 << 30}b"


# declared once ------------------------------------------------------------------------------------------

ARGUMENTS = {"trajectory", "after_step", "out", "workspace", "variants"}
"""Request fields the verbs' own arguments set (api.run(trajectory, after_step, workspace, out), compare's)."""
ENGINE = {"mode", "budgets", "labels", "continuation", "defaults", "grace_s", "token_ledger", "batch_ledger"}
"""Request fields no option sets: the verb or the engine does."""


def _feeders(field: str) -> list[str]:
    return [name for name, o in OPTIONS.items() if field in o.feeds]


@pytest.mark.parametrize(
    ("model", "prefix"), [(ReplayRequest, ""), (CompareRequest, ""), (ContinueRequest, CONTINUATION)]
)
def test_each_request_field_is_fed_by_exactly_one_declaration(model: type, prefix: str) -> None:
    for field in model.model_fields:
        feeders = _feeders(prefix + field)
        if field in ARGUMENTS | ENGINE:
            assert feeders == [], (field, feeders)
        else:
            assert len(feeders) == 1, (model.__name__, field, feeders)


def test_each_declaration_feeds_fields_that_exist() -> None:
    top = set(ReplayRequest.model_fields) | set(CompareRequest.model_fields)
    for option in OPTIONS.values():
        for feed in option.feeds:
            field = feed.removeprefix(CONTINUATION)
            assert field in (ContinueRequest.model_fields if feed.startswith(CONTINUATION) else top), feed


def test_each_setting_is_a_declared_option_and_each_flag_is_declared_once() -> None:
    assert set(settings.Settings.model_fields) == {n for n, o in OPTIONS.items() if o.layers}
    assert set(settings._ENV.values()) == {n for n, o in OPTIONS.items() if o.layers and o.layers.env}
    flags = Counter(f for o in OPTIONS.values() for f in o.flags)
    assert [f for f, n in flags.items() if n > 1] == []


def test_the_api_takes_the_declared_options_by_their_declared_types() -> None:
    names = (api.ReplayOptions, api.RunOptions, api.CompareOptions)  # the API's names for them
    assert names == (ReplayOptions, RunOptions, CompareOptions)
    hints = typing.get_type_hints(CompareOptions)
    assert {n: o.type for n, o in declared(CompareOptions).items()} == hints
    assert set(declared(RunOptions)) < set(hints)  # compare takes the run options and its own
    for verb in (api.run, api.compare, api.compare_boundaries):
        params = inspect.signature(verb).parameters
        assert params["options"].kind is inspect.Parameter.VAR_KEYWORD
        assert not {"repeat", "workers", "check", "check_timeout", "keep_snapshot"} & set(params)


def test_compares_options_feed_the_request_and_default_to_its_defaults(tmp_path: Path) -> None:
    """What a compare option declares as its default is the request's, and a given value reaches its
    field; `workers` left unset is the setting's, else the request's default."""
    cwd, _, user, env = _places(tmp_path)
    bare = settings.load(cwd, env)
    user.write_text(user.read_text() + "workers = 4\n")
    settings.forget()  # the files read anew
    found = settings.load(cwd, env)
    own = {n: o for n, o in declared(CompareOptions).items() if n not in declared(RunOptions)}
    for option in own.values():
        if option.layers is None:  # else: the settings', then the request's default
            [feed] = option.feeds
            assert CompareRequest.model_fields[feed].default == option.default, option.name
    given: CompareOptions = {"repeat": 3, "check": "true", "check_timeout": 5.0, "keep_snapshot": True}
    fields = merge(given, bare, CompareOptions).fields_of(CompareRequest)
    assert {k: fields[k] for k in ("repeat", "check", "check_timeout_s", "keep_snapshot")} == {
        "repeat": 3,
        "check": "true",
        "check_timeout_s": 5.0,
        "keep_snapshot": True,
    }
    assert "parallel" not in fields  # no workers given nor set: CompareRequest's default
    assert merge({"workers": 5}, bare, CompareOptions).fields["parallel"] == 5
    assert merge({}, found, CompareOptions).fields["parallel"] == 4
    assert merge({"workers": 5}, found, CompareOptions).fields["parallel"] == 5


def _commands() -> dict[str, Any]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


OTHERWISE = {("run", "after_step"), ("run", "repeat"), ("batch", "workers"), ("batch", "max_tokens")}
"""Flags one command describes otherwise (run's -n takes several boundaries, its --repeat reruns the prefix;
batch's -j counts jobs)."""


@pytest.mark.parametrize("command", ["prepare", "run", "compare", "batch"])
def test_each_commands_flag_is_made_from_its_declaration(command: str) -> None:
    by_flag = {f: o for o in OPTIONS.values() for f in o.flags}
    made = 0
    for param in _commands()[command].params:
        option = by_flag.get(param.opts[0])
        if option is None or (command, option.name) in OTHERWISE:
            continue
        made += 1
        assert param.name == option.name  # `given` finds the value under the option's name
        assert (tuple(param.opts), param.help, param.metavar) == (option.flags, option.help, option.metavar)
        expected = False if option.flag_type is bool else option.default
        assert param.default == expected, param.name
    assert made >= {"prepare": 7, "run": 20, "compare": 20, "batch": 0}[command]


def test_the_flags_types_are_the_declared_ones() -> None:
    checked = set()
    for alias in vars(cli_options).values():
        if typing.get_origin(alias) is not typing.Annotated:
            continue
        tp, info = typing.get_args(alias)
        decls = tuple(d for d in (info.default, *(info.param_decls or ())) if isinstance(d, str))
        for option in [o for o in OPTIONS.values() if o.flags and decls == o.flags]:
            assert tp == (option.flag_type or option.type), option.name
            checked.add(option.name)
    assert checked == {n for n, o in OPTIONS.items() if o.flags}  # every flag has its alias


def test_given_turns_flag_values_into_the_apis() -> None:
    values = {
        "agent_env": ["A=1", "B=x=y"],
        "end_leftovers": None,
        "limits": None,
        "model": None,
        "force": False,
        "cassette": Path("tape"),
        "json": True,  # a command's own parameter: no option of the API
    }
    assert cli_options.given(values, declared(RunOptions)) == {
        "agent_env": {"A": "1", "B": "x=y"},
        "force": False,
        "cassette": Path("tape"),
    }
    assert cli_options.given({"end_leftovers": True}, declared(RunOptions)) == {"end_leftovers": True}
    assert cli_options.given({"end_leftovers": False}, declared(RunOptions)) == {"end_leftovers": False}
    with pytest.raises(typer.BadParameter, match="expected KEY=VALUE"):
        cli_options.given({"agent_env": ["novalue"]}, declared(RunOptions))


def test_no_command_declares_a_declared_flag_again() -> None:
    """Every `typer.Option(...)` of the commands that names a declared option's flag is `flag`'s own: the
    flag, its help and metavar live in floor/options.py alone."""
    declared_flags = {f for o in OPTIONS.values() for f in o.flags}
    again = []
    for path in sorted((ROOT / "replayer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("Option", "Argument")
            ):
                named = {a.value for a in node.args if isinstance(a, ast.Constant)} & declared_flags
                if named and path.name != "options.py":
                    again.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(named)}")
    assert again == []


SINGLE = ROOT / "tests" / "fixtures" / "claude_code" / "single"


@pytest.mark.parametrize(
    ("flags", "call"),
    [
        (["-n", "1", "--cassette", "tape"], {"after_step": 1, "cassette": "tape"}),
        (
            ["-n", "1", "--continue", "--cassette", "tape", "--upstream", "http://127.0.0.1:9"],
            {"after_step": 1, "continue_agent": True, "cassette": "tape", "upstream": "http://127.0.0.1:9"},
        ),
        (["-n", "1", "--continue"], {"after_step": 1, "continue_agent": True}),
        (
            ["-n", "1,2", "--continue", "--upstream", "mock", "--record-cassette", "tape"],
            {"after_step": "1,2", "continue_agent": True, "upstream": "mock", "record_cassette": "tape"},
        ),
        (["-n", "1,2", "--upstream", "mock"], {"after_step": "1,2", "upstream": "mock"}),
    ],
    ids=["cassette-alone", "cassette-and-upstream", "no-upstream", "one-tape-two-boundaries", "no-continue"],
)
def test_the_command_and_the_api_refuse_the_same_options_the_same_way(
    flags: list[str], call: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One check of the continuation and cassette options (api.check_run_options, merge): the same line,
    kind and exit code from `replayer run` and from `run` / `run_boundaries`, before anything starts."""
    env = {"REPLAYER_UPSTREAM": "", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    where = ["-w", str(SINGLE / "workspace"), "-o", str(out)]
    proc = replayer("run", str(SINGLE / "session.jsonl"), *flags, *where, env=env)
    after = call.pop("after_step")
    verb = api.run_boundaries if isinstance(after, str) else api.run
    with pytest.raises(ReplayError) as refused:
        verb(SINGLE / "session.jsonl", after, SINGLE / "workspace", out, **call)
    assert (proc.returncode, refused.value.exit_code, refused.value.kind) == (2, 2, "usage"), proc.stderr
    assert f"replayer: usage: {refused.value}" in " ".join(proc.stderr.split()), proc.stderr
    assert not out.exists()
