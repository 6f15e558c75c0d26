"""`replayer view DIR`: a real replay's output directory (the `single` recording rerun on a changed
workspace, continued against the scripted upstream) as report.html, read back from headless Chromium."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.bridges.scripted import TextBlock, ToolUseBlock, Turn
from tests.conftest import replayer
from tests.support.chromium import render
from tests.support.continuing import changed_workspace, continue_run

HOSTILE = "<script>document.title='owned'</script>"
COMMAND = f'ls -la && echo "{HOSTILE}"'


@pytest.fixture(scope="module")
def replay_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """After step 1 (`cat a.txt`, whose fresh output differs), the agent lists the folder and echoes markup."""
    tmp = tmp_path_factory.mktemp("view")
    turns = [
        Turn(
            blocks=[
                TextBlock(text="Looking."),
                ToolUseBlock(id="toolu_view_1", name="Bash", input={"command": COMMAND}),
            ]
        ),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    code, _, _, err = continue_run("single", 1, tmp / "out", changed_workspace("single", tmp / "ws"), turns)
    assert code == 0, err
    return tmp / "out"


@pytest.mark.agent
def test_view_shows_prefix_reruns_side_by_side_and_continuation(replay_dir: Path, tmp_path: Path) -> None:
    proc = replayer("view", str(replay_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    page = Path(orjson.loads(proc.stdout)["report"])
    assert page == replay_dir.absolute() / "report.html"
    result = orjson.loads((replay_dir / "result.json").read_bytes())
    text = page.read_text().replace(result["request"]["continuation"]["upstream"], "")
    assert "http://" not in text and "https://" not in text and ' src="' not in text and "url(" not in text
    reruns = orjson.loads((replay_dir / "reruns.json").read_bytes())
    assert [(r["call_id"], r["historical"]) for r in reruns] == [("toolu_single_01", "hi")]
    dom, log = render(page, tmp_path)
    assert "Uncaught" not in log and dom.find("main", id="report", data_rendered="yes")
    # the prefix as a conversation, the differing tool result marked
    roles = [e[1]["data-role"] for e in dom.find("li") if e[1].get("data-role")]
    assert roles[:3] == ["user", "assistant", "tool"]
    assert [e[1]["data-call"] for e in dom.find("li", class_="differs")] == ["toolu_single_01"]
    # the rerun: historical and fresh side by side, what the fresh one adds highlighted
    box = dom.find("div", class_="rerun")
    assert len(box) == 1 and "different" in box[0][1]["class"].split()
    # where it differs, in the output's own lines (Claude Code's Bash output has no wrapper)
    differs = result["divergences"][0]
    assert (differs["line"], differs["column"]) == (1, 3)
    assert [e[2] for e in dom.find("span", class_="position")] == ["line 1, column 3"]
    historical = dom.find("div", class_="historical")[0][2]
    fresh = dom.find("div", class_="fresh")[0][2]
    assert historical == "historicalhi" and fresh == f"fresh{reruns[0]['fresh']}"
    marks = [e[2] for e in dom.find("mark", class_="difference")]
    assert "\nchanged after the recording" in marks
    # the continuation: `ls -la` keeps its lines, the echoed markup is text (no script ran, none was made)
    output = [e[2] for e in dom.find("pre", class_="tool-output") if "a.txt" in e[2] and "hello.py" in e[2]]
    assert len(output) == 1 and output[0].count("\n") >= 4 and HOSTILE in output[0]
    assert len(dom.find("script")) == 2 and dom.find("title")[0][2] == "replay: claude_code after step 1"
    assert "Finished." in dom.find("div", id="continuation")[0][2]
    versions = dom.find("p", class_="versions")[0][2]
    version, pins = result["version"], result["pins"]
    ran = f"ran {version['version']} ({version['source']}, {version['status']})"
    assert f"agent claude_code ({pins['cli_package']}) {ran}" in versions
    assert (
        f"replayer {pins['replayer']}" in versions and f"model {result['continuation']['model']}" in versions
    )
    assert "none" in dom.find("div", id="degradations")[0][2]


@pytest.mark.agent
def test_view_of_a_directory_without_reruns_json_shows_the_excerpts(replay_dir: Path, tmp_path: Path) -> None:
    """A directory written before reruns.json existed; its degradations shown as recorded."""
    from replayer.floor.results import Degradation, ReplayResult
    from replayer.verbs.report import render_view
    from replayer.verbs.view import load

    old = tmp_path / "old"
    shutil.copytree(replay_dir, old, symlinks=True)
    (old / "reruns.json").unlink()
    (old / "report.html").unlink(missing_ok=True)
    result = ReplayResult.model_validate_json((old / "result.json").read_bytes())
    degraded = Degradation(reason="Task call toolu_9 in step 2: not rerun", action="historical_kept", step=2)
    data = load(old).model_copy(update={"result": result.model_copy(update={"degradations": [degraded]})})
    assert [r.excerpts for r in data.reruns] == [True]
    page = tmp_path / "report.html"
    page.write_text(render_view(data.model_dump(mode="json")))
    dom, _ = render(page, tmp_path)
    assert "excerpts only" in dom.find("div", class_="rerun")[0][2]
    assert [e[2] for e in dom.find("li", class_="degradation")] == [f"historical_kept: {degraded.reason}"]


@pytest.mark.parametrize(
    ("result_json", "message"),
    [
        (None, "is not a directory"),
        ("", "holds no results"),
        ("{}", "is not a replay result"),
        ("[", "is not a replay result"),
    ],
)
def test_view_refuses_what_is_not_a_replay_directory(
    result_json: str | None, message: str, tmp_path: Path
) -> None:
    target = tmp_path / "missing" if result_json is None else tmp_path
    if result_json:
        (tmp_path / "result.json").write_text(result_json)
    proc = replayer("view", str(target))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("replayer: bad_input: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "report.html").exists()


@pytest.mark.agent
def test_the_page_says_when_the_answers_came_from_the_mock(replay_dir: Path, tmp_path: Path) -> None:
    """A continuation answered by `--upstream mock` (continuation.mock) is said so, beside the model it
    named; one answered by a model service is not."""
    from replayer.verbs.report import render_view
    from replayer.verbs.view import load

    data = load(replay_dir)
    cont = data.result.continuation
    assert cont is not None and not cont.mock
    mocked = data.result.model_copy(update={"continuation": cont.model_copy(update={"mock": True})})
    for name, result in (("served", data.result), ("mocked", mocked)):
        page = tmp_path / name / "report.html"
        page.parent.mkdir()
        page.write_text(render_view(data.model_copy(update={"result": result}).model_dump(mode="json")))
        dom, log = render(page, tmp_path / name)
        assert "Uncaught" not in log
        versions = dom.find("p", class_="versions")[0][2]
        said = "the answers came from the built-in mock model (--upstream mock), not from a model service"
        assert (said in versions) == (name == "mocked"), versions
        assert f"model {cont.model}" in versions
        assert bool(dom.find("p", class_="mock")) == (name == "mocked")
