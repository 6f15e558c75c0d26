"""The prefix gate for `codex exec resume`: pure, no sockets (the bridge core calls it per request).

The first Responses request must be the rebuilt prefix (its first item the base-instructions
developer message, whose id the CLI derives from the thread: any version-5 `msg_` id, as for the "aborted"
outputs it gives calls without one), then only the context items the running CLI version is known to
insert on resume (declared by the adapter, `resume.py`: when the date, cwd, CODEX_HOME, model metadata or
the recorded sandbox and approval differ; each reported), then the prompt item. The nonce item is stripped from every request;
a boundary prompt is kept.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

from replayer.adapters.codex.resume import CONTEXT_ITEMS, Insertion
from replayer.adapters.codex.session import reserialized
from replayer.bridges.core import Decision
from replayer.bridges.difference import Mismatch, first_difference, mismatch_at
from replayer.bridges.responses import Item, input_of, is_response_request, message_text

_DERIVED_ID = re.compile(r"(msg|fco|ctco)_([0-9a-f-]{36})")
"""The ids the paginated CLIs derive from the thread (a version-5 uuid): the base-instructions message's, and
the "aborted" outputs' of calls left without one. The prefix writes them as null."""


def offers_freeform_apply_patch(body: Any) -> bool:
    """Whether the request offers apply_patch as a freeform (`custom`) tool: the condition on which the
    instructions-form CLIs render shell outputs as text (codex-rs client_common.rs)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    return any(
        isinstance(t, dict) and t.get("type") == "custom" and t.get("name") == "apply_patch"
        for t in tools or []
    )


class CodexGate:
    def __init__(
        self,
        prefix: list[Item],
        prompt: str,
        *,
        keep_prompt: bool,
        instructions_form: bool = False,
        instructions: str | None = None,
        outputs_rendered: bool = True,
        insertions: tuple[Insertion, ...] = CONTEXT_ITEMS,
        model: str | None = None,
    ):
        """`instructions_form`: the CLI sends the base instructions as the body's `instructions` (equal to
        `instructions` where the rollout records them) and `prefix` holds the conversation only.
        `outputs_rendered`: whether `prefix` already holds shell outputs as such a CLI renders them while it
        offers a freeform apply_patch; when not and the request offers one, they are rendered here.
        `insertions`: the context items the running CLI version may insert before the prompt (the adapter's
        declaration, `adapters/codex/resume.py`); anything else refuses. `model`: the model the CLI was
        launched with, which the first request must ask for."""
        self.prefix = prefix
        self.insertions = insertions
        self.model = model
        self.outputs_rendered = outputs_rendered
        self.instructions_form = instructions_form
        self.instructions = instructions
        self.prompt = prompt
        self.keep_prompt = keep_prompt
        self.head: list[Item] | None = None
        """The accepted first request's input through the prompt item."""
        self.notes: list[str] = []

    def route(self, method: str, path: str, body: Any) -> Decision:
        if not is_response_request(method, path):
            return Decision(kind="side")
        items = input_of(body)
        if items is None:
            return Decision(
                kind="refuse", mismatch=Mismatch(path="input", expected="a list", actual=type(body).__name__)
            )
        if self.head is None:
            mismatch = self._check_model(body)
            mismatch = mismatch or (self._check_instructions(body) if self.instructions_form else None)
            mismatch = mismatch or self._check_first(items, body)
            if mismatch is not None:
                return Decision(kind="refuse", mismatch=mismatch)
            self.head = items
        else:
            diff = first_difference(self.head, items[: len(self.head)], "input")
            if diff is not None:
                diff.reason = "a later request no longer carries the rebuilt prefix and its prompt"
                return Decision(kind="refuse", mismatch=diff)
        return Decision(kind="main", body=None if self.keep_prompt else self._strip(body))

    def _check_model(self, body: Any) -> Mismatch | None:
        sent = body.get("model")
        if self.model is None or sent == self.model:
            return None
        found = mismatch_at("model", self.model, sent)
        found.reason = "the first request asks for another model than the CLI was launched with"
        return found

    def _check_instructions(self, body: Any) -> Mismatch | None:
        sent = body.get("instructions")
        if not isinstance(sent, str):
            return Mismatch(
                path="instructions",
                expected="the base instructions (this CLI's form)",
                actual=type(sent).__name__,
                reason="the first request does not carry the base instructions where this CLI version puts them",
            )
        if self.instructions is None:
            self.notes.append(
                "instructions: the rollout does not record them; the CLI's own were not checked"
            )
        elif sent != self.instructions:
            diff = first_difference(self.instructions, sent, "instructions")
            assert diff is not None
            diff.reason = "the base instructions differ from the rollout's"
            return diff
        self.notes.append("form: base instructions in `instructions`, outputs as the CLI renders them")
        return None

    def _check_first(self, items: list[Item], body: Any) -> Mismatch | None:
        n = len(self.prefix)
        expected = self.prefix
        if self.instructions_form and not self.outputs_rendered and offers_freeform_apply_patch(body):
            expected = reserialized(self.prefix)
            self.notes.append(
                "outputs: shell outputs rendered as text, as the CLI does while it offers a freeform apply_patch"
            )
        if not self.instructions_form:
            derived = [
                i for i, e in enumerate(expected) if isinstance(e, dict) and "id" in e and e["id"] is None
            ]
            expected = list(expected)
            for i in derived:
                sent = items[i] if i < len(items) else None
                sent_id = sent.get("id") if isinstance(sent, dict) else None
                match = _DERIVED_ID.fullmatch(sent_id) if isinstance(sent_id, str) else None
                if match is None or uuid.UUID(match.group(2)).version != 5:
                    actual = str(sent_id)
                    return Mismatch(path=f"input[{i}].id", expected="<kind>_<version-5 uuid>", actual=actual)
                expected[i] = {**expected[i], "id": sent_id}
        diff = first_difference(expected, items[:n], "input")
        if diff is not None:
            return diff
        for i, item in enumerate(items[n:-1], start=n):
            role = item.get("role") if isinstance(item, dict) else None
            whys = [
                next((i.why for i in self.insertions if i.matches(role, t)), None) for t in _part_texts(item)
            ]
            known = " and ".join(w for w in whys if w is not None) if whys and None not in whys else None
            if known is None:
                found = mismatch_at(
                    f"input[{i}]", "the prompt, or a context item the running CLI inserts", item
                )
                found.reason = "the first request carries an item the running CLI is not known to insert"
                return found
            self.notes.append(f"input[{i}]: the CLI inserted {known}")
        last = items[-1] if len(items) > n else None
        if last is None or message_text(last) != self.prompt or last.get("role") != "user":
            found = mismatch_at(
                f"input[{max(len(items) - 1, n)}]", f"the user prompt item {self.prompt!r}", last
            )
            found.reason = "the first request does not end with the resume prompt"
            return found
        return None

    def _strip(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.head is not None
        out = copy.deepcopy(body)
        del out["input"][len(self.head) - 1]
        return out


def _part_texts(item: Item) -> list[str]:
    """The texts of a message's parts, all input_text (the CLI bundles several context items in one developer
    message: 0.117.0 observed); [""] for anything else."""
    text = message_text(item)
    if text is not None:
        return [text]
    content = item.get("content") if isinstance(item, dict) and item.get("type") == "message" else None
    parts = content if isinstance(content, list) and content else [None]
    if all(
        isinstance(p, dict) and p.get("type") == "input_text" and isinstance(p.get("text"), str)
        for p in parts
    ):
        return [str(p["text"]) for p in parts]  # type: ignore[index]
    return [""]
