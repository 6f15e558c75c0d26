"""What `codex exec resume` runs with, and what each version then inserts into the first request.

The continuation runs with the recorded turn context where the container can host it: the model, its
reasoning effort (`effort`) and the personality (written into the rebuilt config.toml) are the last recorded
`turn_context`'s. Two settings cannot be:
- the sandbox: codex's own Linux sandbox for `read-only` and `workspace-write` (bwrap from 0.1xx, Landlock
  before) needs user namespaces, which the container's seccomp profile does not grant (every command fails
  with `bwrap: No permissions to create a new namespace`, observed with 0.142.0); the container is the
  sandbox, so the CLI runs `danger-full-access`;
- the approval policy: `codex exec` always runs `never` (observed with 0.142.0 given `on-request`).

When the recorded turn context differs in either, the CLIs that write permission notices (observed: 0.101,
0.125, 0.142, 0.171; 0.58 writes none) tell the model so in a `<permissions instructions>` developer
message before the prompt. The gate accepts that notice only then, and only naming the settings that run.

The model is the boundary turn's unless the user names one (`--model`, a compare variant's `model=`): the
CLI is always launched with `-m`, and one launched with another model than the boundary turn's tells the
model so in a `<model_switch>` developer message before the prompt, holding the new model's base
instructions from the CLI's own catalog (observed: 0.118, 0.171; in every binary from 0.101 on, none in
0.58; 0.104 resending its initial context sent none). The gate accepts that message only then.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from replayer.adapters.codex import session as rollout
from replayer.floor.pins import release

RUN_SANDBOX = "danger-full-access"
RUN_APPROVAL = "never"
PERMISSIONS = "<permissions instructions>"
PERSONALITY = "<personality_spec>"
PERMISSION_NOTICES_FROM = (0, 101)
"""The oldest release seen writing permission notices (0.58.0's binary has none)."""
NOTICES_ON_CHANGE_FROM = (0, 117)
"""From this release (observed: 0.117, 0.125, 0.142, 0.171) a resume inserts a permission notice only when the
settings differ from the recorded turn context; before it (observed: 0.101, 0.104) every resume inserts the
initial context again: the notice, the recorded personality's `<personality_spec>`, the `# AGENTS.md
instructions` user message (AGENTS.md and the skills list) and an `<environment_context>`. 0.105 to 0.116 are
taken as 0.104."""
AGENTS_MD = "# AGENTS.md instructions for "
MODEL_SWITCH = (
    "<model_switch>\nThe user was previously using a different model. Please continue the conversation "
    "according to the following instructions:\n\n"
)
MODEL_SWITCH_END = "\n</model_switch>"
MODEL_SWITCH_FROM = (0, 101)
"""The oldest release seen with the model-switch message (codex-rs `ModelSwitchInstructions`; 0.58.0's binary
has none): the preamble, the new model's base instructions, the closing marker."""
PAGINATED_WIRE_FROM = (0, 171)
"""From this release (observed: 0.171; 0.142 sends the `instructions` form; 0.143 to 0.170 are not verified and
keep the form the rollout was written in) the CLI sends the base instructions as input[0], also when it
resumes a rollout of the older form (0.171.0 resuming a 0.118 rollout, observed): the continuation is checked
in the continuing version's form."""
REVOKED_AGENTS_MD = (
    "# AGENTS.md instructions\n\n<INSTRUCTIONS>\nThe previously provided AGENTS.md instructions no longer "
    "apply.\n</INSTRUCTIONS>"
)
REVOKED_PLUGINS = (
    "<plugins_instructions>\nThe previously provided plugin usage instructions no longer apply.\n"
    "</plugins_instructions>"
)
"""What a CLI of the paginated form (0.171.0 observed) tells the model on resume when the AGENTS.md or the
plugins the rollout recorded are not where it runs (the container holds the workspace given, no plugins)."""


class Insertion(BaseModel):
    """A context item a CLI version inserts on resume, recognised by its role and the start of its text."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mark: str
    why: str
    role: str | None = None
    """None: any role (the CLI has used both for the same item across versions)."""
    names: tuple[str, ...] = ()
    """Texts the item must contain (the settings that run)."""
    end: str = ""
    """The text the item must end with."""

    def matches(self, role: Any, text: str) -> bool:
        return (
            text.startswith(self.mark)
            and text.endswith(self.end)
            and (self.role is None or role == self.role)
            and all(n in text for n in self.names)
        )


CONTEXT_ITEMS = (
    Insertion(
        mark="<environment_context>",
        why="an <environment_context> item (date, cwd or environment differ from the rollout)",
    ),
    Insertion(
        mark="<skills_instructions>", why="a <skills_instructions> item (the skills or CODEX_HOME differ)"
    ),
    Insertion(mark="<tools>", why="a <tools> item (deferred tool namespaces)"),
)
"""What every version of the paginated form inserts when the environment differs from the rollout's."""


class TurnSettings(BaseModel):
    """The settings of the last recorded `turn_context` the continuation depends on."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    sandbox: str | None = None
    approval: str | None = None
    model: str | None = None
    """The model of the prefix's last turn (a session may switch between turns: a resume under another one
    inserts a `<model_switch>` message)."""
    effort: str | None = None
    personality: str | None = None
    """The Desktop app's and TUI's communication style (`friendly`, `pragmatic`, `none`; about 0.1xx on): a
    CLI resuming under another one inserts a `<personality_spec>` message (0.117.0 observed on a real
    rollout recorded `friendly`), so the continuation keeps it."""
    agents_md: bool = False
    """The prefix holds an AGENTS.md instructions message (which a later CLI may revoke on resume)."""
    plugins: bool = False
    """The prefix holds `<plugins_instructions>` (likewise)."""
    paginated: bool = False
    """The rollout is of the paginated form: a CLI of that form resuming one of the older form has no baseline
    (`world_state`) to diff its context against, and inserts it again (0.171.0 resuming 0.118, observed)."""
    collaboration: str | None = None
    """The recorded collaboration mode's developer instructions (`plan`, `default`), which such a CLI sends again."""
    rolled_back: bool = False
    """The prefix holds a rollback (`thread_rolled_back`): the CLI resuming it has lost the context baseline
    the notices are diffed against and inserts the permission notice again (0.117.0 observed, settings
    unchanged)."""


def recorded(records: list[rollout.Record]) -> TurnSettings:
    """The last `turn_context` of the prefix (`sandbox_policy` is `{type}` from about 0.1xx, `{mode}` in 0.58),
    and which recorded instructions the prefix holds."""
    contents = [
        p.get("content") for r in records if (p := rollout.item(r)) is not None and p.get("type") == "message"
    ]
    texts = [
        str(part.get("text", ""))
        for content in contents
        if isinstance(content, list)
        for part in content
        if isinstance(part, dict)
    ]
    held = {
        "agents_md": any(t.startswith(AGENTS_MD) for t in texts),
        "plugins": any(t.startswith("<plugins_instructions>") for t in texts),
    }
    return _recorded(records).model_copy(update=held)


def paginated_wire(version: str) -> bool:
    """Whether the CLI at `version` sends the paginated form (base instructions in input[0])."""
    return release(version) >= PAGINATED_WIRE_FROM


def sends_instructions_form(native: rollout.Native, version: str) -> bool:
    """Whether the CLI at `version` sends the conversation of `native` in the instructions form: a rollout of
    that form continued by a CLI from before the paginated wire (a later one resumes it in its own form)."""
    return rollout.instructions_form(native) and not paginated_wire(version)


def _recorded(records: list[rollout.Record]) -> TurnSettings:
    head = records[0]["payload"] if records and records[0].get("type") == "session_meta" else {}
    paginated = head.get("history_mode") == "paginated"
    for record in reversed(records):
        if record.get("type") != "turn_context":
            continue
        payload = record["payload"]
        policy = payload.get("sandbox_policy")
        sandbox = (policy.get("type") or policy.get("mode")) if isinstance(policy, dict) else None
        mode = payload.get("collaboration_mode")
        settings = mode.get("settings") if isinstance(mode, dict) else None
        collaboration = settings.get("developer_instructions") if isinstance(settings, dict) else None
        return TurnSettings(
            paginated=paginated,
            collaboration=collaboration
            if isinstance(collaboration, str) and len(collaboration) <= 65536
            else None,
            sandbox=_text(sandbox),
            approval=_text(payload.get("approval_policy")),
            model=_text(payload.get("model")),
            effort=_text(payload.get("effort")),
            personality=_text(payload.get("personality")),
            rolled_back=rollout.rolled_back(records),
        )
    return TurnSettings(paginated=paginated, rolled_back=rollout.rolled_back(records))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.isprintable() and len(value) <= 64 else None


def changed(settings: TurnSettings) -> list[str]:
    """What of the recorded sandbox and approval the continuation cannot keep (empty: it keeps both)."""
    out = []
    if settings.sandbox is not None and settings.sandbox != RUN_SANDBOX:
        out.append(f"sandbox {settings.sandbox} recorded, {RUN_SANDBOX} runs (the container is the sandbox)")
    if settings.approval is not None and settings.approval != RUN_APPROVAL:
        out.append(f"approval {settings.approval} recorded, {RUN_APPROVAL} runs (codex exec)")
    return out


def insertions(version: str, settings: TurnSettings, model: str | None = None) -> tuple[Insertion, ...]:
    """What the CLI at `version` may insert before the prompt when it resumes this rollout with `-m model`."""
    found = list(CONTEXT_ITEMS)
    at = release(version)
    if (
        model is not None
        and settings.model is not None
        and model != settings.model
        and at >= MODEL_SWITCH_FROM
    ):
        why = f"a <model_switch> message ({settings.model} ran the boundary turn, {model} runs)"
        found.append(Insertion(mark=MODEL_SWITCH, end=MODEL_SWITCH_END, why=why, role="developer"))
    differs = changed(settings)
    every_resume = PERMISSION_NOTICES_FROM <= at < NOTICES_ON_CHANGE_FROM
    # after a rollback (0.117.0 observed) the CLI has lost the baseline the notices are diffed against
    again = "inserted again after the rollback the rollout records" if settings.rolled_back else None
    lost = at >= PAGINATED_WIRE_FROM and not settings.paginated
    if lost:
        again = "inserted again: this version keeps no baseline for a rollout of the older form"
    if every_resume:
        again = "inserted on every resume by this version"
        found.append(Insertion(mark=AGENTS_MD, why=f"a # AGENTS.md instructions item ({again})", role="user"))
    if again is not None and at >= PERMISSION_NOTICES_FROM:
        differs = differs or [again]
        found.append(Insertion(mark=PERSONALITY, why=f"a {PERSONALITY} item ({again})", role="developer"))
    if lost and settings.collaboration:
        found.append(
            Insertion(
                mark="<collaboration_mode>",
                why=f"the recorded collaboration mode ({again})",
                role="developer",
                names=(settings.collaboration,),
            )
        )
    if lost and settings.agents_md:
        found.append(
            Insertion(
                mark=REVOKED_AGENTS_MD, why="the recorded AGENTS.md revoked (not where it runs)", role="user"
            )
        )
    if lost and settings.plugins:
        found.append(
            Insertion(
                mark=REVOKED_PLUGINS,
                why="the recorded plugins revoked (none where it runs)",
                role="developer",
            )
        )
    if differs and at >= PERMISSION_NOTICES_FROM:
        found.append(
            Insertion(
                mark=PERMISSIONS,
                why=f"a {PERMISSIONS} notice ({'; '.join(differs)})",
                role="developer",
                names=(f"`{RUN_SANDBOX}`", f"Approval policy is currently {RUN_APPROVAL}"),
            )
        )
    return tuple(found)
